//! Scratch copies of a `jdbc` table, for `weir verify`: the same table (columns, defaults,
//! constraints, indexes) in a schema of the run's own, read back and dropped afterwards.

use weir_core::{Result, TableDef, WeirError};

use super::Settings;

fn failed(what: &str, e: tokio_postgres::Error) -> WeirError {
    WeirError::external(format!(
        "PostgreSQL: {what}: {}",
        e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_string())
    ))
}

/// The unqualified part of a `table-name` (`schema.table` or `table`, quoted or not).
fn unqualified(target: &str) -> &str {
    target.rsplit('.').next().unwrap_or(target)
}

/// Create `schema` and in it a copy of the table's own PostgreSQL table, empty.
pub async fn copy_table(table: &TableDef, schema: &str) -> Result<()> {
    let settings = Settings::from_table(table)?;
    let client = settings.endpoint.connect("weir-verify").await?;
    let copy = format!("{schema}.{}", unqualified(&settings.target));
    client
        .batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}; CREATE TABLE {copy} (LIKE {} INCLUDING ALL)",
            settings.target
        ))
        .await
        .map_err(|e| failed(&format!("cannot copy table '{}' into schema '{schema}'", settings.target), e))
}

/// Every row of the table (a scratch copy), each column as PostgreSQL's text (`NULL` for
/// null), but those named in `skipped`.
pub async fn read_rows(table: &TableDef, skipped: &[String]) -> Result<Vec<Vec<String>>> {
    let settings = Settings::from_table(table)?;
    let client = settings.endpoint.connect("weir-verify").await?;
    let columns: Vec<String> = table
        .schema
        .fields()
        .iter()
        .filter(|f| !skipped.contains(f.name()))
        .map(|f| format!("\"{}\"::text", f.name().replace('"', "\"\"")))
        .collect();
    if columns.is_empty() {
        return Err(WeirError::user(format!("table '{}': no column left to compare", table.name)));
    }
    let rows = client
        .query(&format!("SELECT {} FROM {}", columns.join(", "), settings.target), &[])
        .await
        .map_err(|e| failed(&format!("cannot read table '{}'", settings.target), e))?;
    rows.iter()
        .map(|row| {
            (0..columns.len())
                .map(|i| {
                    row.try_get::<_, Option<String>>(i)
                        .map(|v| v.unwrap_or_else(|| "NULL".to_string()))
                        .map_err(|e| failed("cannot read a value", e))
                })
                .collect()
        })
        .collect()
}

/// Drop `schema` and everything in it, after rolling back the transactions the runs left
/// prepared under `prefix` (a run that failed): they hold locks the drop would wait for.
pub async fn drop_schema(table: &TableDef, schema: &str, prefix: &str) -> Result<()> {
    let settings = Settings::from_table(table)?;
    let client = settings.endpoint.connect("weir-verify").await?;
    let pending = client
        .query(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND starts_with(gid, $1)",
            &[&prefix],
        )
        .await
        .map_err(|e| failed("cannot list prepared transactions", e))?;
    for row in pending {
        let gid: String = row.try_get(0).map_err(|e| failed("cannot read a transaction name", e))?;
        client
            .batch_execute(&format!("ROLLBACK PREPARED '{}'", gid.replace('\'', "''")))
            .await
            .map_err(|e| failed(&format!("cannot roll back '{gid}'"), e))?;
    }
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .map_err(|e| failed(&format!("cannot drop schema '{schema}'"), e))
}
