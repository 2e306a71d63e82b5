//! Where an Iceberg table's current metadata file is recorded, and the compare-and-swap that
//! commits its next version:
//! - `hadoop`: `<warehouse>/<database>/<table>/metadata/v<N>.metadata.json`, the next version
//!   created only if absent (a hard link, which fails if the name exists), then
//!   `version-hint.text`;
//! - `sql`: the `iceberg_tables` table of pyiceberg's `SqlCatalog` and Iceberg's
//!   `JdbcCatalog`, in PostgreSQL (or in a SQLite file, [`super::sqlite`]), updated only where
//!   it still names the previous file.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde_json::Value as Json;
use weir_core::{Result, TableDef, WeirError};

use super::metadata::uuid;

/// The table's metadata as last committed: the file's location and its contents.
pub struct Loaded {
    pub location: String,
    pub metadata: Json,
}

#[async_trait]
pub trait Catalog: Send + Sync {
    /// "the hadoop catalog at '/w' (table db.t)", for errors.
    fn describe(&self) -> String;

    /// Where a new table's files go.
    fn default_location(&self) -> String;

    async fn load(&self) -> Result<Option<Loaded>>;

    /// Make `metadata` the table's current metadata if `previous` still is (`None`: the
    /// table does not exist yet). `Ok(None)`: someone else committed first.
    async fn commit(&self, previous: Option<&str>, metadata: &Json) -> Result<Option<String>>;
}

fn io(what: &str, path: &Path, e: std::io::Error) -> WeirError {
    WeirError::external(format!("Iceberg: cannot {what} '{}': {e}", path.display()))
}

/// A location Weir can write: a local path (`/w/...` or `file:/w/...`).
pub fn local_path(location: &str) -> Result<PathBuf> {
    let path = location.strip_prefix("file://").or_else(|| location.strip_prefix("file:")).unwrap_or(location);
    if path.starts_with('/') {
        Ok(PathBuf::from(path))
    } else {
        Err(WeirError::not_supported(format!(
            "Iceberg location '{location}': Weir's Iceberg sink writes to local paths only (object stores are not built)"
        )))
    }
}

pub fn read_json(path: &Path) -> Result<Json> {
    let bytes = std::fs::read(path).map_err(|e| io("read", path, e))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| WeirError::external(format!("Iceberg metadata '{}' is not valid JSON: {e}", path.display())))
}

/// Write `bytes` to `path` only if it does not exist: through a temporary file, synced, then
/// hard-linked to its name. `false`: the name was taken.
pub fn create_new(path: &Path, bytes: &[u8]) -> Result<bool> {
    let dir = path.parent().ok_or_else(|| WeirError::internal("a metadata path without a directory"))?;
    std::fs::create_dir_all(dir).map_err(|e| io("create", dir, e))?;
    let tmp = dir.join(format!(".tmp-{}", uuid()));
    write_synced(&tmp, bytes)?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            sync_dir(dir);
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io("create", path, e)),
    }
}

pub fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path).map_err(|e| io("create", path, e))?;
    f.write_all(bytes).and_then(|()| f.sync_all()).map_err(|e| io("write", path, e))
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

pub struct HadoopCatalog {
    dir: PathBuf,
    ident: String,
}

impl HadoopCatalog {
    pub fn new(warehouse: &str, database: &str, table: &str) -> Result<Self> {
        Ok(Self { dir: local_path(warehouse)?.join(database).join(table), ident: format!("{database}.{table}") })
    }

    fn version_file(&self, n: u64) -> PathBuf {
        self.dir.join("metadata").join(format!("v{n}.metadata.json"))
    }

    /// The highest version: from the hint, then any later file (a commit that stopped
    /// before updating the hint).
    fn current_version(&self) -> Result<Option<u64>> {
        let hint = self.dir.join("metadata").join("version-hint.text");
        let mut n = match std::fs::read_to_string(&hint) {
            Ok(text) => text.trim().parse::<u64>().ok(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io("read", &hint, e)),
        };
        if n.is_none() {
            // No hint: the highest v<N>.metadata.json, if any.
            n = match std::fs::read_dir(self.dir.join("metadata")) {
                Ok(entries) => entries
                    .filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let name = e.file_name().to_string_lossy().to_string();
                        name.strip_prefix('v')?.strip_suffix(".metadata.json")?.parse::<u64>().ok()
                    })
                    .max(),
                Err(_) => None,
            };
        }
        let Some(mut n) = n else { return Ok(None) };
        while self.version_file(n + 1).exists() {
            n += 1;
        }
        Ok(Some(n))
    }
}

#[async_trait]
impl Catalog for HadoopCatalog {
    fn describe(&self) -> String {
        format!("the hadoop catalog's table {} at '{}'", self.ident, self.dir.display())
    }

    fn default_location(&self) -> String {
        self.dir.display().to_string()
    }

    async fn load(&self) -> Result<Option<Loaded>> {
        let Some(n) = self.current_version()? else { return Ok(None) };
        let path = self.version_file(n);
        Ok(Some(Loaded { location: path.display().to_string(), metadata: read_json(&path)? }))
    }

    async fn commit(&self, previous: Option<&str>, metadata: &Json) -> Result<Option<String>> {
        let current = self.current_version()?;
        let expected = previous.map(|p| {
            Path::new(p)
                .file_name()
                .and_then(|n| n.to_str()?.strip_prefix('v')?.strip_suffix(".metadata.json")?.parse::<u64>().ok())
        });
        if expected.flatten() != current {
            return Ok(None);
        }
        let next = current.map_or(1, |n| n + 1);
        let path = self.version_file(next);
        let bytes = serde_json::to_vec_pretty(metadata).map_err(|e| WeirError::internal(e.to_string()))?;
        if !create_new(&path, &bytes)? {
            return Ok(None);
        }
        // The hint is a shortcut for readers; a stale one is corrected by probing upward.
        let hint = self.dir.join("metadata").join("version-hint.text");
        let tmp = self.dir.join("metadata").join(format!(".hint-{}", uuid()));
        write_synced(&tmp, next.to_string().as_bytes())?;
        std::fs::rename(&tmp, &hint).map_err(|e| io("replace", &hint, e))?;
        Ok(Some(path.display().to_string()))
    }
}

/// The tables of pyiceberg's `SqlCatalog` and Iceberg's `JdbcCatalog` (schema V1), made by
/// whichever writer comes first.
pub const SQL_CATALOG_TABLES: &str = "CREATE TABLE IF NOT EXISTS iceberg_tables (catalog_name VARCHAR(255) NOT NULL, \
     table_namespace VARCHAR(255) NOT NULL, table_name VARCHAR(255) NOT NULL, \
     metadata_location VARCHAR(1000), previous_metadata_location VARCHAR(1000), \
     iceberg_type VARCHAR(5), PRIMARY KEY (catalog_name, table_namespace, table_name)); \
     CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (catalog_name VARCHAR(255) NOT NULL, \
     namespace VARCHAR(255) NOT NULL, property_key VARCHAR(255) NOT NULL, \
     property_value VARCHAR(1000), PRIMARY KEY (catalog_name, namespace, property_key));";

/// A SQL catalog's next metadata file, `<location>/metadata/<NNNNN>-<uuid>.metadata.json`
/// (the number one more than `previous`'s), written; `None` if the name was taken.
pub fn write_next_metadata(previous: Option<&str>, metadata: &Json) -> Result<Option<PathBuf>> {
    let table_location = super::metadata::location(metadata).unwrap_or_default().to_string();
    let next = previous
        .and_then(|p| Path::new(p).file_name()?.to_str()?.split('-').next()?.parse::<u64>().ok())
        .map_or(0, |n| n + 1);
    let path = local_path(&table_location)?.join("metadata").join(format!("{next:05}-{}.metadata.json", uuid()));
    let bytes = serde_json::to_vec_pretty(metadata).map_err(|e| WeirError::internal(e.to_string()))?;
    Ok(create_new(&path, &bytes)?.then_some(path))
}

/// The SQL catalog on PostgreSQL.
pub struct SqlCatalog {
    endpoint: crate::jdbc::Endpoint,
    warehouse: PathBuf,
    catalog: String,
    namespace: String,
    table: String,
}

impl SqlCatalog {
    pub fn new(def: &TableDef, warehouse: &str, catalog: &str, namespace: &str, table: &str) -> Result<Self> {
        // The endpoint parser reads the jdbc connector's option names.
        let mut options = weir_core::Options::default();
        let uri = def.options.required(&def.name, "uri")?;
        options.insert("url".into(), uri.to_string(), def.options.location("uri"));
        for (from, to) in [("jdbc.user", "username"), ("jdbc.password", "password")] {
            if let Some(v) = def.options.get(from) {
                options.insert(to.into(), v.to_string(), def.options.location(from));
            }
        }
        let mut shadow = def.clone();
        shadow.options = options;
        Ok(Self {
            endpoint: crate::jdbc::Endpoint::parse(&shadow)?,
            warehouse: local_path(warehouse)?,
            catalog: catalog.to_string(),
            namespace: namespace.to_string(),
            table: table.to_string(),
        })
    }

    async fn client(&self) -> Result<tokio_postgres::Client> {
        let client = self.endpoint.connect("weir-iceberg").await.map_err(|e| {
            WeirError::external(format!("Iceberg: the sql catalog '{}' cannot be reached: {e}", self.catalog))
        })?;
        // The tables pyiceberg's SqlCatalog and Iceberg's JdbcCatalog (schema V1) create.
        client.batch_execute(SQL_CATALOG_TABLES).await.map_err(|e| self.error("prepare", e))?;
        Ok(client)
    }

    fn error(&self, what: &str, e: tokio_postgres::Error) -> WeirError {
        WeirError::external(format!("Iceberg: {} failed to {what}: {e}", self.describe()))
    }
}

#[async_trait]
impl Catalog for SqlCatalog {
    fn describe(&self) -> String {
        format!(
            "the sql catalog '{}' ({}), table {}.{}",
            self.catalog,
            self.endpoint.describe(),
            self.namespace,
            self.table
        )
    }

    fn default_location(&self) -> String {
        // pyiceberg's layout: <warehouse>/<namespace>.db/<table>.
        self.warehouse.join(format!("{}.db", self.namespace)).join(&self.table).display().to_string()
    }

    async fn load(&self) -> Result<Option<Loaded>> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = $1 AND table_namespace = $2 \
                 AND table_name = $3",
                &[&self.catalog, &self.namespace, &self.table],
            )
            .await
            .map_err(|e| self.error("read the table", e))?;
        let Some(location) = row.and_then(|r| r.get::<_, Option<String>>(0)) else { return Ok(None) };
        let metadata = read_json(&local_path(&location)?)?;
        Ok(Some(Loaded { location, metadata }))
    }

    async fn commit(&self, previous: Option<&str>, metadata: &Json) -> Result<Option<String>> {
        let Some(path) = write_next_metadata(previous, metadata)? else { return Ok(None) };
        let new = path.display().to_string();
        let client = self.client().await?;
        let (c, n, t) = (&self.catalog, &self.namespace, &self.table);
        let changed = match previous {
            Some(previous) => client
                .execute(
                    "UPDATE iceberg_tables SET metadata_location = $4, previous_metadata_location = $5 \
                     WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3 AND metadata_location = $5",
                    &[c, n, t, &new, &previous],
                )
                .await
                .map_err(|e| self.error("commit", e))?,
            None => {
                client
                    .execute(
                        "INSERT INTO iceberg_namespace_properties VALUES ($1, $2, 'exists', 'true') \
                         ON CONFLICT DO NOTHING",
                        &[c, n],
                    )
                    .await
                    .map_err(|e| self.error("create the namespace", e))?;
                client
                    .execute(
                        "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location, \
                         previous_metadata_location, iceberg_type) VALUES ($1, $2, $3, $4, NULL, 'TABLE') \
                         ON CONFLICT DO NOTHING",
                        &[c, n, t, &new],
                    )
                    .await
                    .map_err(|e| self.error("create the table", e))?
            }
        };
        if changed == 1 {
            Ok(Some(new))
        } else {
            // Not ours: the file no catalog entry names is removed.
            let _ = std::fs::remove_file(&path);
            Ok(None)
        }
    }
}
