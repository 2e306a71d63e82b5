//! The SQL catalog in a SQLite file: the same `iceberg_tables` as on PostgreSQL
//! ([`super::catalog::SqlCatalog`]), which pyiceberg's `SqlCatalog` reads from
//! `sqlite:///path`. SQLite's calls block: they run off the async threads.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value as Json;
use weir_core::{Result, WeirError};

use super::catalog::{local_path, read_json, write_next_metadata, Catalog, Loaded, SQL_CATALOG_TABLES};

pub struct SqliteCatalog {
    file: PathBuf,
    warehouse: PathBuf,
    catalog: String,
    namespace: String,
    table: String,
}

/// The database file of `uri`: `jdbc:sqlite:/path` (Iceberg's JdbcCatalog) or
/// `sqlite:///path` (pyiceberg's); `None` if it is not SQLite's.
pub fn sqlite_file(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("jdbc:").unwrap_or(uri).strip_prefix("sqlite:")?;
    let path = rest.strip_prefix("//").unwrap_or(rest);
    Some(PathBuf::from(path))
}

impl SqliteCatalog {
    pub fn new(file: PathBuf, warehouse: &str, catalog: &str, namespace: &str, table: &str) -> Result<Self> {
        if !file.is_absolute() {
            return Err(WeirError::user(format!(
                "the sql catalog's SQLite file '{}' must be an absolute path",
                file.display()
            )));
        }
        Ok(Self {
            file,
            warehouse: local_path(warehouse)?,
            catalog: catalog.to_string(),
            namespace: namespace.to_string(),
            table: table.to_string(),
        })
    }

    fn error(&self, what: &str, e: impl std::fmt::Display) -> WeirError {
        WeirError::external(format!("Iceberg: {} failed to {what}: {e}", self.describe()))
    }

    /// `f` on a connection to the catalog's file (its tables made if missing), off the
    /// async threads.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection, &str, &str, &str) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        let (file, c, n, t) = (self.file.clone(), self.catalog.clone(), self.namespace.clone(), self.table.clone());
        let describe = self.describe();
        tokio::task::spawn_blocking(move || {
            let conn = open(&file).map_err(|e| {
                WeirError::external(format!("Iceberg: {describe}: the SQLite file cannot be opened: {e}"))
            })?;
            f(&conn, &c, &n, &t).map_err(|e| WeirError::external(format!("Iceberg: {describe}: {e}")))
        })
        .await
        .map_err(|e| self.error("run", e))?
    }
}

fn open(file: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(file)?;
    // Writers of other processes hold the file's lock for a moment: wait for it.
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.execute_batch(SQL_CATALOG_TABLES)?;
    Ok(conn)
}

#[async_trait]
impl Catalog for SqliteCatalog {
    fn describe(&self) -> String {
        format!(
            "the sql catalog '{}' (SQLite '{}'), table {}.{}",
            self.catalog,
            self.file.display(),
            self.namespace,
            self.table
        )
    }

    fn default_location(&self) -> String {
        self.warehouse.join(format!("{}.db", self.namespace)).join(&self.table).display().to_string()
    }

    async fn load(&self) -> Result<Option<Loaded>> {
        let location = self
            .with(|conn, c, n, t| {
                conn.query_row(
                    "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ?1 AND table_namespace = ?2 \
                     AND table_name = ?3",
                    params![c, n, t],
                    |r| r.get::<_, Option<String>>(0),
                )
                .optional()
            })
            .await?
            .flatten();
        let Some(location) = location else { return Ok(None) };
        let metadata = read_json(&local_path(&location)?)?;
        Ok(Some(Loaded { location, metadata }))
    }

    async fn commit(&self, previous: Option<&str>, metadata: &Json) -> Result<Option<String>> {
        let Some(path) = write_next_metadata(previous, metadata)? else { return Ok(None) };
        let new = path.display().to_string();
        let previous = previous.map(str::to_string);
        let location = new.clone();
        let changed = self
            .with(move |conn, c, n, t| match &previous {
                Some(previous) => conn.execute(
                    "UPDATE iceberg_tables SET metadata_location = ?4, previous_metadata_location = ?5 \
                     WHERE catalog_name = ?1 AND table_namespace = ?2 AND table_name = ?3 AND metadata_location = ?5",
                    params![c, n, t, location, previous],
                ),
                None => {
                    conn.execute(
                        "INSERT OR IGNORE INTO iceberg_namespace_properties VALUES (?1, ?2, 'exists', 'true')",
                        params![c, n],
                    )?;
                    conn.execute(
                        "INSERT OR IGNORE INTO iceberg_tables (catalog_name, table_namespace, table_name, \
                         metadata_location, previous_metadata_location, iceberg_type) \
                         VALUES (?1, ?2, ?3, ?4, NULL, 'TABLE')",
                        params![c, n, t, location],
                    )
                }
            })
            .await?;
        if changed == 1 {
            Ok(Some(new))
        } else {
            let _ = std::fs::remove_file(&path);
            Ok(None)
        }
    }
}
