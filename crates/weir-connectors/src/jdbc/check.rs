//! The PostgreSQL table a sink writes, checked against the sink's declaration before any row
//! is written: it exists, has every declared column with a type that holds its values, has a
//! unique index on the primary key (an upsert's `ON CONFLICT` needs one), and, for an
//! exactly-once sink, the server can prepare transactions.

use weir_core::{Result, TableDef, WeirError};

use super::types::{sql_name, PgType};
use super::{Delivery, Settings};

/// The checked table, as statements name it.
#[derive(Debug, Clone)]
pub struct Target {
    /// The table as PostgreSQL prints it (`regclass`), quoted where needed.
    pub table: String,
    /// Its schema, quoted (the exactly-once sink keeps its bookkeeping table there).
    pub schema: String,
    /// The PostgreSQL column of each of the sink's columns, quoted, in the sink's order.
    pub columns: Vec<String>,
    /// Each sink column's type.
    pub types: Vec<PgType>,
    /// The sink's primary key columns (indices into its columns).
    pub key: Vec<usize>,
}

pub fn quote(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}

fn pg_error(settings: &Settings, table: &TableDef, e: tokio_postgres::Error) -> WeirError {
    WeirError::external(format!(
        "PostgreSQL ({}), checking the table of '{}': {}",
        settings.endpoint.describe(),
        table.name,
        e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_string())
    ))
}

/// Connect and check the table of `table` (a `jdbc` sink). Errors name the sink table, the
/// PostgreSQL table and, for a column, both types.
pub async fn check_table(table: &TableDef) -> Result<Target> {
    let settings = Settings::from_table(table)?;
    let client =
        settings.endpoint.connect("weir-check").await.map_err(|e| e.context(format!("table '{}'", table.name)))?;
    check_with(&client, table, &settings).await
}

pub(super) async fn check_with(
    client: &tokio_postgres::Client,
    table: &TableDef,
    settings: &Settings,
) -> Result<Target> {
    let err = |e| pg_error(settings, table, e);
    let found = client
        .query_opt(
            "SELECT c.oid::regclass::text, n.nspname::text, c.oid FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.oid = to_regclass($1) AND c.relkind IN ('r', 'p')",
            &[&settings.target],
        )
        .await
        .map_err(err)?;
    let Some(found) = found else {
        return Err(WeirError::user(format!(
            "table '{}': PostgreSQL ({}) has no table '{}'; create it first, for instance:\n  {}",
            table.name,
            settings.endpoint.describe(),
            settings.target,
            suggested_ddl(table, &settings.target)
        )));
    };
    let (name, schema, oid): (String, String, u32) =
        (found.try_get(0).map_err(err)?, found.try_get(1).map_err(err)?, found.try_get(2).map_err(err)?);
    let rows = client
        .query(
            "SELECT a.attname::text, t.typname::text, format_type(a.atttypid, a.atttypmod), \
                    a.attnotnull AND NOT a.atthasdef AND a.attidentity = '' AND a.attgenerated = '' \
             FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
             WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            &[&oid],
        )
        .await
        .map_err(err)?;
    let pg: Vec<(String, String, String, bool)> = rows
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
        .collect::<Result<_, tokio_postgres::Error>>()
        .map_err(err)?;
    let mut columns = Vec::new();
    let mut types = Vec::new();
    let mut used = vec![false; pg.len()];
    for field in table.schema.fields() {
        let t = PgType::of(field.data_type())
            .ok_or_else(|| WeirError::internal(format!("column '{}' has no PostgreSQL type", field.name())))?;
        // Flink's dialect writes names unquoted, which PostgreSQL folds to lower case.
        let at = pg
            .iter()
            .position(|c| c.0 == *field.name())
            .or_else(|| pg.iter().position(|c| c.0 == field.name().to_lowercase()))
            .ok_or_else(|| {
                WeirError::user(format!(
                    "table '{}': column '{}' is not a column of the PostgreSQL table {name} (its columns: {})",
                    table.name,
                    field.name(),
                    pg.iter().map(|c| c.0.as_str()).collect::<Vec<_>>().join(", ")
                ))
            })?;
        let (pg_name, typname, pretty, _) = &pg[at];
        if !t.matches(typname) {
            return Err(WeirError::user(format!(
                "table '{}': column '{}' is {} in the sink's declaration but {pretty} in the PostgreSQL table \
                 {name}: declare it as the PostgreSQL column's type, or change the column to {}",
                table.name,
                field.name(),
                sql_name(field.data_type()),
                t.ddl()
            )));
        }
        used[at] = true;
        columns.push(quote(pg_name));
        types.push(t);
    }
    if let Some((c, _, pretty, _)) = pg.iter().zip(&used).find(|(c, u)| !**u && c.3).map(|(c, _)| c) {
        return Err(WeirError::user(format!(
            "table '{}': the PostgreSQL table {name} has the column {c} ({pretty} NOT NULL, without a default), \
             which the sink does not declare: every row written would be refused",
            table.name
        )));
    }
    let key: Vec<usize> = table
        .primary_key
        .iter()
        .map(|k| table.schema.index_of(k).map_err(|_| WeirError::internal(format!("primary key column '{k}'"))))
        .collect::<Result<_>>()?;
    if !key.is_empty() {
        let unique = client
            .query(
                "SELECT array(SELECT a.attname::text FROM unnest(i.indkey) k \
                   JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k) \
                 FROM pg_index i WHERE i.indrelid = $1 AND i.indisunique AND i.indpred IS NULL \
                   AND i.indexprs IS NULL",
                &[&oid],
            )
            .await
            .map_err(err)?;
        let mut want: Vec<String> = key.iter().map(|k| columns[*k].clone()).collect();
        want.sort();
        let mut has = false;
        for r in &unique {
            let mut cols: Vec<String> = r.try_get::<_, Vec<String>>(0).map_err(err)?.iter().map(|c| quote(c)).collect();
            cols.sort();
            has |= cols == want;
        }
        if !has {
            return Err(WeirError::user(format!(
                "table '{}': its PRIMARY KEY ({}) is not a primary key or unique index of the PostgreSQL table \
                 {name}, which an upsert (INSERT … ON CONFLICT) needs: ALTER TABLE {name} ADD PRIMARY KEY ({})",
                table.name,
                table.primary_key.join(", "),
                want.join(", ")
            )));
        }
    }
    if settings.delivery == Delivery::ExactlyOnce {
        let max: String = client
            .query_one("SELECT current_setting('max_prepared_transactions')", &[])
            .await
            .map_err(err)?
            .try_get(0)
            .map_err(err)?;
        if max.trim() == "0" {
            return Err(WeirError::user(format!(
                "table '{}': 'sink.delivery-guarantee' = 'exactly-once' prepares a transaction per sink task and \
                 checkpoint, but the PostgreSQL server ({}) has max_prepared_transactions = 0. Set \
                 max_prepared_transactions in postgresql.conf (at least twice the sink's parallelism, for every \
                 exactly-once job writing there) and restart the server; or write with 'sink.delivery-guarantee' = \
                 'at-least-once', which is exactly-once in effect when the table has a PRIMARY KEY (a replay \
                 rewrites the same values)",
                table.name,
                settings.endpoint.describe()
            )));
        }
    }
    Ok(Target { table: name, schema: quote(&schema), columns, types, key })
}

/// A `CREATE TABLE` for PostgreSQL matching the sink's declaration.
fn suggested_ddl(table: &TableDef, target: &str) -> String {
    let mut columns: Vec<String> = table
        .schema
        .fields()
        .iter()
        .map(|f| {
            let t = PgType::of(f.data_type()).map_or("text", PgType::ddl);
            let not_null = if f.is_nullable() && !table.primary_key.contains(f.name()) { "" } else { " NOT NULL" };
            format!("{} {t}{not_null}", f.name())
        })
        .collect();
    if !table.primary_key.is_empty() {
        columns.push(format!("PRIMARY KEY ({})", table.primary_key.join(", ")));
    }
    format!("CREATE TABLE {target} ({});", columns.join(", "))
}
