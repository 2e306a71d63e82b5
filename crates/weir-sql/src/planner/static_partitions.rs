//! `INSERT INTO t PARTITION (k = 'v', …) SELECT …`: Flink's static partitions. The query gives
//! the table's other columns, in order (or those the INSERT names); each static partition
//! column takes its constant. Rewritten before planning into the plain INSERT
//! `INSERT INTO t (others…, k) SELECT *, 'v' FROM (SELECT …)`, so that the sink, its checks
//! and its partitioning are the ones every INSERT has.

use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr as SqlExpr, Insert, ObjectName, TableObject};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::*;

impl Planner {
    pub(super) fn static_partitions(&self, insert: &mut Insert) -> Result<()> {
        let Some(partitioned) = insert.partitioned.take() else { return Ok(()) };
        let TableObject::TableName(name) = &insert.table else { return Ok(()) };
        let Some(table) = name.0.last().and_then(|p| p.as_ident()).and_then(|i| self.catalog.tables.get(&normalize(i)))
        else {
            return Ok(());
        };
        let mut fixed: Vec<(String, SqlExpr)> = Vec::new();
        for e in &partitioned {
            let SqlExpr::BinaryOp { left, op: BinaryOperator::Eq, right } = e else {
                return Err(WeirError::not_supported(format!(
                    "INSERT INTO {}: PARTITION ({e}): a partition is given as column = constant",
                    table.name
                )));
            };
            let SqlExpr::Identifier(column) = left.as_ref() else {
                return Err(WeirError::user(format!("INSERT INTO {}: PARTITION ({e}): name a column", table.name)));
            };
            let column_name = normalize(column);
            if !table.partition_keys.contains(&column_name) {
                return Err(WeirError::user(format!(
                    "INSERT INTO {}: '{column_name}' is not a partition column of the table (PARTITIONED BY ({}))",
                    table.name,
                    table.partition_keys.join(", ")
                ))
                .at(ident_location(column)));
            }
            if !matches!(right.as_ref(), SqlExpr::Value(_)) {
                return Err(WeirError::user(format!(
                    "INSERT INTO {}: PARTITION ({e}): a static partition's value is a constant",
                    table.name
                ))
                .at(ident_location(column)));
            }
            fixed.push((column_name, right.as_ref().clone()));
        }
        let is_fixed = |c: &str| fixed.iter().any(|(f, _)| f == c);
        let mut columns: Vec<ObjectName> = if insert.columns.is_empty() {
            (0..table.schema.fields().len())
                .filter(|i| table.persisted_at(*i))
                .map(|i| table.schema.field(i).name())
                .filter(|n| !is_fixed(n))
                .map(|n| ObjectName::from(vec![Ident::with_quote('"', n)]))
                .collect()
        } else {
            insert.columns.clone()
        };
        if let Some(both) =
            columns.iter().find(|c| c.0.last().and_then(|p| p.as_ident()).is_some_and(|i| is_fixed(&normalize(i))))
        {
            return Err(WeirError::user(format!(
                "INSERT INTO {}: column {both} is both in the column list and a static PARTITION",
                table.name
            )));
        }
        columns.extend(fixed.iter().map(|(n, _)| ObjectName::from(vec![Ident::with_quote('"', n)])));
        let Some(source) = insert.source.take() else { return Ok(()) };
        let values: Vec<String> = fixed.iter().map(|(n, v)| format!("{v} AS \"{n}\"")).collect();
        let text = format!("SELECT *, {} FROM ({source}) AS __weir_static_partition", values.join(", "));
        let query = Parser::new(&GenericDialect {})
            .try_with_sql(&text)
            .and_then(|mut p| p.parse_query())
            .map_err(|e| WeirError::internal(format!("rewriting a static PARTITION: {e}")))?;
        insert.source = Some(query);
        insert.columns = columns;
        Ok(())
    }
}
