//! Tables defined from others.
//!
//! `CREATE TABLE t WITH (…) AS SELECT …`: the table's columns are the query's (names, types,
//! `NOT NULL`), its options those given.
//!
//! `CREATE TABLE t (…) WITH (…) LIKE source (…)`: the new table's definition merged with the
//! source table's, by Flink's rules (its `MergeTableLikeUtil`):
//!
//! - the source's physical columns always come first; the new table's columns follow, and a
//!   physical column may not repeat one of the source's;
//! - GENERATED (computed columns), METADATA, WATERMARKS, CONSTRAINTS (the primary key),
//!   PARTITIONS and OPTIONS of the source are each included, excluded or overwritten by the
//!   new table's; the defaults are `INCLUDING ALL OVERWRITING OPTIONS`, `ALL` sets every
//!   feature, and the options after it set one;
//! - INCLUDING fails where both tables have the same thing (an option key, a computed column's
//!   name, a watermark), OVERWRITING keeps the new table's.
//!
//! The source's definition is read back from its `SHOW CREATE TABLE` text (its options as
//! they are now, paths resolved), so that both are merged as statements.

use std::collections::BTreeMap;

use datafusion::arrow::datatypes::Schema;
use weir_core::{Location, Result, WeirError};

use super::Planner;
use crate::catalog::normalize;
use crate::parser::{CreateTable, LikeClause, LikeFeature, LikeStrategy, Statement};

impl Planner {
    /// The table of `CREATE TABLE … AS SELECT`, with the columns of the query's `schema`.
    pub fn create_table_as(&mut self, ct: &CreateTable, schema: &Schema, at: Location) -> Result<()> {
        let quote = |name: &str| format!("`{}`", name.replace('`', "``"));
        let columns: Vec<String> = schema
            .fields()
            .iter()
            .map(|f| {
                let null = if f.is_nullable() { "" } else { " NOT NULL" };
                format!("{} {}{null}", quote(f.name()), weir_core::sql_type_name(f.data_type()))
            })
            .collect();
        let text =
            format!("CREATE TABLE {} ({}) WITH ('connector' = 'blackhole')", quote(&ct.name.value), columns.join(", "));
        let parsed = crate::parser::parse_script(&text)?;
        let Some(Statement::CreateTable(mut table)) = parsed.into_iter().next().map(|p| p.statement) else {
            return Err(WeirError::internal("the columns of CREATE TABLE … AS SELECT do not parse back"));
        };
        for column in &mut table.columns {
            column.location = at;
        }
        table.options = ct.options.clone();
        table.partitioned_by = ct.partitioned_by.clone();
        table.name = ct.name.clone();
        self.create_table(&table, "")?;
        self.show_as_created(&normalize(&ct.name));
        Ok(())
    }

    /// A table's definition as `SHOW CREATE TABLE` writes it (for a table whose statement is
    /// not its definition: `LIKE`, `AS SELECT`).
    pub(super) fn show_as_created(&mut self, name: &str) {
        if let Some(table) = self.catalog.tables.get_mut(name) {
            let mut shown = (**table).clone();
            shown.definition = super::ddl::show_create_table(&shown);
            *table = std::sync::Arc::new(shown);
        }
    }

    /// The statement `ct` (which has a `LIKE`) stands for, merged with its source table.
    pub(super) fn merge_like(&self, ct: &CreateTable, like: &LikeClause) -> Result<CreateTable> {
        let at = Some(like.location);
        let source_name = normalize(&like.source);
        let Some(source) = self.catalog.tables.get(&source_name) else {
            let what = match self.catalog.views.contains_key(&source_name) {
                true => format!("'{source_name}' is a view: CREATE TABLE … LIKE takes a table"),
                false => format!("table '{source_name}' not found (in LIKE)"),
            };
            return Err(WeirError::user(what).at(at));
        };
        let text = super::ddl::show_create_table(source);
        let parsed = crate::parser::parse_script(&text)?;
        let Some(Statement::CreateTable(base)) = parsed.into_iter().next().map(|p| p.statement) else {
            return Err(WeirError::internal(format!("the definition of '{source_name}' does not parse back")));
        };
        let mut base = *base;
        // Errors about what came from the source are placed at `LIKE`.
        for column in &mut base.columns {
            column.location = like.location;
        }
        for (_, _, location) in &mut base.options {
            *location = like.location;
        }
        let strategy = strategies(like);
        let name = normalize(&ct.name);
        let fail = |text: String| Err(WeirError::user(format!("table '{name}': {text}")).at(at));

        // Columns: the source's physical ones, its computed and metadata ones unless excluded.
        let mut columns: Vec<_> = base
            .columns
            .into_iter()
            .filter(|c| match (&c.computed, &c.metadata) {
                (Some(_), _) => strategy[&LikeFeature::Generated] != LikeStrategy::Excluding,
                (None, Some(_)) => strategy[&LikeFeature::Metadata] != LikeStrategy::Excluding,
                (None, None) => true,
            })
            .collect();
        for column in &ct.columns {
            let column_name = normalize(&column.name);
            let existing = columns.iter().position(|c| normalize(&c.name) == column_name);
            let (kind, feature) = match (&column.computed, &column.metadata) {
                (Some(_), _) => ("computed", LikeFeature::Generated),
                (None, Some(_)) => ("metadata", LikeFeature::Metadata),
                (None, None) => ("physical", LikeFeature::All),
            };
            let Some(i) = existing else {
                columns.push(column.clone());
                continue;
            };
            let same_kind = match feature {
                LikeFeature::Generated => columns[i].computed.is_some(),
                LikeFeature::Metadata => columns[i].computed.is_none() && columns[i].metadata.is_some(),
                _ => false,
            };
            if !same_kind {
                let only = match feature {
                    LikeFeature::All => String::new(),
                    _ => format!(" ({kind} columns can only overwrite other {kind} columns)"),
                };
                return Err(WeirError::user(format!(
                    "table '{name}': a column named '{column_name}' already exists in the LIKE table '{source_name}'{only}"
                ))
                .at(Some(column.location)));
            }
            if strategy[&feature] != LikeStrategy::Overwriting {
                return Err(WeirError::user(format!(
                    "table '{name}': a {kind} column named '{column_name}' already exists in the LIKE table \
                     '{source_name}' (specify EXCLUDING {f} or OVERWRITING {f})",
                    f = feature.name()
                ))
                .at(Some(column.location)));
            }
            columns[i] = column.clone();
        }

        // The watermark: one per table.
        let mut watermark = base.watermark.filter(|_| strategy[&LikeFeature::Watermarks] != LikeStrategy::Excluding);
        if let Some((column, expr)) = &ct.watermark {
            match &watermark {
                Some((old, _)) if normalize(old) != normalize(column) => {
                    return fail(format!(
                        "the LIKE table '{source_name}' has a watermark on '{}' and a table has only one (specify \
                         EXCLUDING WATERMARKS)",
                        normalize(old)
                    ))
                }
                Some(_) if strategy[&LikeFeature::Watermarks] != LikeStrategy::Overwriting => {
                    return fail(format!(
                        "the LIKE table '{source_name}' already has a watermark on '{}' (specify EXCLUDING WATERMARKS \
                         or OVERWRITING WATERMARKS)",
                        normalize(column)
                    ))
                }
                _ => watermark = Some((column.clone(), expr.clone())),
            }
        }

        // The primary key.
        let mut primary_key = match strategy[&LikeFeature::Constraints] {
            LikeStrategy::Including => base.primary_key,
            _ => Vec::new(),
        };
        if !ct.primary_key.is_empty() {
            if !primary_key.is_empty() {
                return fail(format!(
                    "the LIKE table '{source_name}' already has a primary key (specify EXCLUDING CONSTRAINTS)"
                ));
            }
            primary_key = ct.primary_key.clone();
        }

        // Partitions: one partitioning per table.
        let partitions = strategy[&LikeFeature::Partitions];
        let partitioned_by = match (base.partitioned_by.is_empty(), ct.partitioned_by.is_empty()) {
            (false, false) if partitions != LikeStrategy::Excluding => {
                return fail(format!(
                    "the LIKE table '{source_name}' is already partitioned (specify EXCLUDING PARTITIONS)"
                ))
            }
            (_, false) => ct.partitioned_by.clone(),
            _ if partitions == LikeStrategy::Excluding => Vec::new(),
            _ => base.partitioned_by,
        };

        // Options: the source's unless excluded; the new table's over them when overwriting.
        let options_strategy = strategy[&LikeFeature::Options];
        let mut options = match options_strategy {
            LikeStrategy::Excluding => Vec::new(),
            _ => base.options,
        };
        for (key, value, location) in &ct.options {
            match options.iter().position(|(k, _, _)| k == key) {
                Some(i) if options_strategy == LikeStrategy::Overwriting => {
                    options[i] = (key.clone(), value.clone(), *location)
                }
                Some(i) => {
                    return Err(WeirError::user(format!(
                        "table '{name}': the LIKE table '{source_name}' already has option '{key}' = '{}' (specify \
                         EXCLUDING OPTIONS or OVERWRITING OPTIONS)",
                        options[i].1
                    ))
                    .at(Some(*location)))
                }
                None => options.push((key.clone(), value.clone(), *location)),
            }
        }
        Ok(CreateTable {
            name: ct.name.clone(),
            if_not_exists: ct.if_not_exists,
            columns,
            watermark,
            primary_key,
            partitioned_by,
            options,
            like: None,
        })
    }
}

/// Each feature's strategy: Flink's defaults, then `ALL`, then each option in turn.
fn strategies(like: &LikeClause) -> BTreeMap<LikeFeature, LikeStrategy> {
    let mut strategy: BTreeMap<LikeFeature, LikeStrategy> =
        LikeFeature::EACH.iter().map(|f| (*f, LikeStrategy::Including)).collect();
    strategy.insert(LikeFeature::Options, LikeStrategy::Overwriting);
    if let Some((all, _, _)) = like.options.iter().find(|(_, f, _)| *f == LikeFeature::All) {
        for f in LikeFeature::EACH {
            strategy.insert(f, *all);
        }
    }
    for (s, f, _) in &like.options {
        if *f != LikeFeature::All {
            strategy.insert(*f, *s);
        }
    }
    strategy
}
