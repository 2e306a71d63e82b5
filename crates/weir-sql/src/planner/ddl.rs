//! DDL: `CREATE TABLE` (computed and metadata columns, the watermark), `ALTER TABLE` and
//! `DROP`, and `SHOW CREATE TABLE`'s text.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{DFSchema, TableReference};
use datafusion::sql::sqlparser::ast::Ident;
use weir_core::{Options, Result, TableDef, WatermarkDef, WeirError, LATE_DATA_TABLE};

use super::{ident_location, legacy_option, Planner, StreamTable};
use crate::catalog::normalize;
use crate::parser::{AlterTable, CreateTable, ObjectKind};
use crate::types::arrow_type;

impl Planner {
    /// `CREATE TABLE`. Returns false if it existed and `IF NOT EXISTS` was given.
    pub fn create_table(&mut self, ct: &CreateTable, text: &str) -> Result<bool> {
        if let Some(like) = &ct.like {
            let name = normalize(&ct.name);
            if self.catalog.exists(&name) {
                return if ct.if_not_exists { Ok(false) } else { Err(self.already_exists(&name, &ct.name)) };
            }
            let merged = self.merge_like(ct, like)?;
            self.create_table(&merged, "")?;
            // Its definition is the merged table's, as Flink shows it.
            self.show_as_created(&name);
            return Ok(true);
        }
        let name = normalize(&ct.name);
        if self.catalog.exists(&name) {
            return if ct.if_not_exists { Ok(false) } else { Err(self.already_exists(&name, &ct.name)) };
        }
        for (i, column) in ct.columns.iter().enumerate() {
            if ct.columns[..i].iter().any(|c| c.name.value == column.name.value) {
                return Err(WeirError::user(format!(
                    "table '{name}': column '{}' is declared twice",
                    column.name.value
                ))
                .at(Some(column.location)));
            }
        }
        let mut fields: Vec<Field> = Vec::with_capacity(ct.columns.len());
        for column in ct.columns.iter().filter(|c| c.computed.is_none()) {
            let column_name = normalize(&column.name);
            let data_type = arrow_type(&column.data_type)
                .map_err(|e| e.context(format!("table '{name}', column '{column_name}'")).at(Some(column.location)))?;
            fields.push(Field::new(column_name, data_type, !column.not_null));
        }
        // Computed columns are typed by their expressions over the stored columns, and take
        // their declared places among them.
        let stored = DFSchema::try_from(Schema::new(fields.clone()))?;
        let mut computed = Vec::new();
        for (index, column) in ct.columns.iter().enumerate() {
            let Some(expr) = &column.computed else { continue };
            let column_name = normalize(&column.name);
            let mut expr = expr.clone();
            crate::flink_functions::rewrite(&mut expr)?;
            let sql = expr.to_string();
            let typed = self
                .ctx
                .state()
                .create_logical_expr(&sql, &stored)
                .map_err(WeirError::from)
                .and_then(|e| Ok(datafusion::logical_expr::ExprSchemable::get_type(&e, &stored)?))
                .map_err(|e| {
                    // Positions inside the expression's own text mean nothing in the statement.
                    let mut e = e.context(format!("table '{name}', computed column '{column_name}' AS {sql}"));
                    e.location = Some(column.location);
                    e
                })?;
            fields.insert(index, Field::new(column_name, typed, true));
            computed.push(weir_core::ComputedColumn { index, sql });
        }
        if fields.is_empty() {
            return Err(WeirError::user(format!("table '{name}' has no columns")).at(ident_location(&ct.name)));
        }
        let schema = Arc::new(Schema::new(fields));
        let column_of = |ident: &Ident, role: &str| -> Result<String> {
            let column = normalize(ident);
            if schema.field_with_name(&column).is_err() {
                return Err(WeirError::user(format!("table '{name}' has no column '{column}' ({role})"))
                    .at(ident_location(ident)));
            }
            Ok(column)
        };
        let watermark = match &ct.watermark {
            None => None,
            Some((ident, expr)) => {
                let column = column_of(ident, "named in WATERMARK FOR")?;
                if !matches!(schema.field_with_name(&column).map(|f| f.data_type()), Ok(DataType::Timestamp(..))) {
                    return Err(WeirError::user(format!(
                        "table '{name}': the WATERMARK column '{column}' must be a TIMESTAMP or TIMESTAMP_LTZ"
                    ))
                    .at(ident_location(ident)));
                }
                let mut expr = expr.clone();
                crate::flink_functions::rewrite(&mut expr)?;
                Some(WatermarkDef { column, sql: expr.to_string() })
            }
        };
        if ct.options.iter().any(|(k, _, _)| k == LATE_DATA_TABLE) && watermark.is_none() {
            return Err(WeirError::user(format!(
                "table '{name}': '{LATE_DATA_TABLE}' needs event time: declare WATERMARK FOR a column"
            ))
            .at(ct.options.iter().find(|(k, _, _)| k == LATE_DATA_TABLE).map(|(_, _, at)| *at)));
        }
        let primary_key = ct.primary_key.iter().map(|i| column_of(i, "in PRIMARY KEY")).collect::<Result<Vec<_>>>()?;
        let partition_keys =
            ct.partitioned_by.iter().map(|i| column_of(i, "in PARTITIONED BY")).collect::<Result<Vec<_>>>()?;
        let mut options = Options::default();
        for (key, value, at) in &ct.options {
            let (key, value) = legacy_option(key, value);
            if options.insert(key.clone(), value, Some(*at)).is_some() {
                return Err(WeirError::user(format!("table '{name}': option '{key}' is given twice")).at(Some(*at)));
            }
        }
        let table = TableDef {
            name: name.clone(),
            schema,
            watermark,
            partition_keys,
            primary_key,
            options,
            definition: text.to_string(),
            metadata: ct
                .columns
                .iter()
                .filter_map(|c| c.metadata.as_ref().map(|key| (normalize(&c.name), key.clone())))
                .collect(),
            virtual_metadata: ct.columns.iter().filter(|c| c.virtual_metadata).map(|c| normalize(&c.name)).collect(),
            computed,
        };
        let table = Arc::new(table);
        self.connectors.validate(&table.stored())?;
        if let Some(wm) = &table.watermark {
            let (expr, _) = self.watermark_expr(&table, &table.schema).map_err(|e| {
                e.context(format!("table '{name}': WATERMARK expression '{}'", wm.sql))
                    .at(ct.watermark.as_ref().and_then(|(i, _)| ident_location(i)))
            })?;
            let df_schema = DFSchema::try_from(table.schema.as_ref().clone())?;
            let data_type = expr.data_type(df_schema.as_arrow())?;
            if !matches!(data_type, DataType::Timestamp(..)) {
                return Err(WeirError::user(format!(
                    "table '{name}': the WATERMARK expression '{}' must be a timestamp, not {data_type}",
                    wm.sql
                ))
                .at(ct.watermark.as_ref().and_then(|(i, _)| ident_location(i))));
            }
        }
        self.ctx.register_table(
            TableReference::bare(name.as_str()),
            Arc::new(StreamTable { schema: table.schema.clone() }),
        )?;
        if let Ok(mut schemas) = self.schemas.write() {
            schemas.insert(name.clone(), table.schema.clone());
        }
        self.catalog.tables.insert(name, table);
        Ok(true)
    }

    /// `DROP TABLE` / `DROP VIEW`. Returns false if it did not exist and `IF EXISTS` was given.
    pub fn drop(&mut self, kind: ObjectKind, ident: &Ident, if_exists: bool) -> Result<bool> {
        let name = normalize(ident);
        let removed = match kind {
            ObjectKind::Table => self.catalog.tables.remove(&name).is_some(),
            ObjectKind::View => self.catalog.views.remove(&name).is_some(),
        };
        if !removed {
            if if_exists {
                return Ok(false);
            }
            let what = if kind == ObjectKind::Table { "table" } else { "view" };
            let hint = match kind {
                ObjectKind::Table if self.catalog.views.contains_key(&name) => " (it is a view: DROP VIEW)",
                ObjectKind::View if self.catalog.tables.contains_key(&name) => " (it is a table: DROP TABLE)",
                _ => "",
            };
            return Err(WeirError::user(format!("{what} '{name}' does not exist{hint}")).at(ident_location(ident)));
        }
        self.ctx.deregister_table(TableReference::bare(name.as_str()))?;
        if let Ok(mut schemas) = self.schemas.write() {
            schemas.remove(&name);
        }
        if let Ok(mut views) = self.view_schemas.write() {
            views.remove(&name);
        }
        self.view_plans.remove(&name);
        Ok(true)
    }

    /// `ALTER TABLE`: options set or reset (checked by the connector as `CREATE TABLE`'s), or
    /// the table renamed. Jobs already running keep the table as they started with it, as in
    /// Flink. Returns false if it did not exist and `IF EXISTS` was given.
    pub fn alter_table(&mut self, ident: &Ident, if_exists: bool, action: &AlterTable) -> Result<bool> {
        let name = normalize(ident);
        let Some(table) = self.catalog.tables.get(&name).cloned() else {
            if if_exists {
                return Ok(false);
            }
            let hint = if self.catalog.views.contains_key(&name) { " (it is a view)" } else { "" };
            return Err(WeirError::user(format!("table '{name}' does not exist{hint}")).at(ident_location(ident)));
        };
        let mut altered = table.as_ref().clone();
        match action {
            AlterTable::Set(options) => {
                for (key, value, at) in options {
                    let (key, value) = legacy_option(key, value);
                    altered.options.insert(key, value, Some(*at));
                }
            }
            AlterTable::Reset(keys) => {
                let mut options = Options::default();
                for (key, value) in table.options.iter() {
                    if !keys.iter().any(|(k, _)| k == key) {
                        options.insert(key.to_string(), value.to_string(), table.options.location(key));
                    }
                }
                if let Some((key, at)) = keys.iter().find(|(k, _)| k == "connector") {
                    return Err(
                        WeirError::user(format!("table '{name}': option '{key}' cannot be reset")).at(Some(*at))
                    );
                }
                altered.options = options;
            }
            AlterTable::Rename(new) => {
                let new_name = normalize(new);
                if self.catalog.exists(&new_name) {
                    return Err(self.already_exists(&new_name, new));
                }
                if let Some(view) = self.views_reading(&name).into_iter().next() {
                    return Err(WeirError::user(format!(
                        "table '{name}' cannot be renamed: view '{view}' reads it (drop the view first)"
                    ))
                    .at(ident_location(ident)));
                }
                altered.name = new_name;
            }
        }
        altered.definition = show_create_table(&altered);
        let altered = Arc::new(altered);
        self.connectors.validate(&altered.stored())?;
        self.ctx.deregister_table(TableReference::bare(name.as_str()))?;
        if let Ok(mut schemas) = self.schemas.write() {
            schemas.remove(&name);
            schemas.insert(altered.name.clone(), altered.schema.clone());
        }
        self.catalog.tables.remove(&name);
        self.ctx.register_table(
            TableReference::bare(altered.name.as_str()),
            Arc::new(StreamTable { schema: altered.schema.clone() }),
        )?;
        self.catalog.tables.insert(altered.name.clone(), altered);
        Ok(true)
    }

    /// The views whose plans scan table `name`.
    fn views_reading(&self, name: &str) -> Vec<String> {
        use datafusion::common::tree_node::TreeNodeRecursion;
        let mut found = Vec::new();
        for (view, plan) in &self.view_plans {
            let mut reads = false;
            let _ = plan.apply_with_subqueries(|p| {
                if let datafusion::logical_expr::LogicalPlan::TableScan(scan) = p {
                    reads |= scan.table_name.table() == name;
                }
                Ok(if reads { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
            });
            if reads {
                found.push(view.clone());
            }
        }
        found
    }
}

/// A table's `CREATE TABLE` statement, written from its definition (after an `ALTER TABLE`,
/// the text it was created with is no longer true).
pub(super) fn show_create_table(table: &TableDef) -> String {
    let quote = |name: &str| format!("`{}`", name.replace('`', "``"));
    let mut lines: Vec<String> = Vec::new();
    for (i, field) in table.schema.fields().iter().enumerate() {
        let name = quote(field.name());
        lines.push(match (table.computed_at(i), table.metadata.get(field.name())) {
            (Some(c), _) => format!("  {name} AS {}", c.sql),
            (None, Some(key)) => {
                let virtual_ = if table.virtual_metadata.contains(field.name()) { " VIRTUAL" } else { "" };
                format!("  {name} {} METADATA FROM '{key}'{virtual_}", weir_core::sql_type_name(field.data_type()))
            }
            (None, None) => {
                let null = if field.is_nullable() { "" } else { " NOT NULL" };
                format!("  {name} {}{null}", weir_core::sql_type_name(field.data_type()))
            }
        });
    }
    if let Some(wm) = &table.watermark {
        lines.push(format!("  WATERMARK FOR {} AS {}", quote(&wm.column), wm.sql));
    }
    if !table.primary_key.is_empty() {
        let keys: Vec<_> = table.primary_key.iter().map(|k| quote(k)).collect();
        lines.push(format!("  PRIMARY KEY ({}) NOT ENFORCED", keys.join(", ")));
    }
    let mut text = format!("CREATE TABLE {} (\n{}\n)", quote(&table.name), lines.join(",\n"));
    if !table.partition_keys.is_empty() {
        let keys: Vec<_> = table.partition_keys.iter().map(|k| quote(k)).collect();
        text.push_str(&format!(" PARTITIONED BY ({})", keys.join(", ")));
    }
    let options: Vec<_> = table
        .options
        .iter()
        .map(|(k, v)| format!("  '{}' = '{}'", k.replace('\'', "''"), v.replace('\'', "''")))
        .collect();
    text.push_str(&format!(" WITH (\n{}\n)", options.join(",\n")));
    text
}
