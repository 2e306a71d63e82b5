//! `'connector' = 'iceberg'`: a sink into an Iceberg table (format version 2), with Flink's
//! option names where Flink has them. See `docs/sql.md` for the options and
//! [`sink`] for how a checkpoint becomes one snapshot.

pub(crate) mod avro;
mod catalog;
#[cfg(test)]
mod contract_tests;
mod manifest;
mod metadata;
mod rest;
mod schema;
mod sink;
mod sqlite;
mod transform;
mod upsert;

use parquet::basic::{Compression, ZstdLevel};
use weir_core::{Result, TableDef, WeirError};

pub use sink::IcebergSink;

const KEYS: &[&str] = &[
    "connector",
    "catalog-type",
    "catalog-impl",
    "catalog-name",
    "catalog-database",
    "catalog-table",
    "warehouse",
    "uri",
    "jdbc.user",
    "jdbc.password",
    "token",
    "credential",
    "oauth2-server-uri",
    "scope",
    "write.format.default",
    "write.target-file-size-bytes",
    "write.parquet.compression-codec",
    "format-version",
    "upsert-enabled",
    "equality-field-columns",
    "partition-by",
];

/// Iceberg's default target size of a data file (512 MiB).
const DEFAULT_TARGET_FILE_SIZE: u64 = 512 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CatalogType {
    Hadoop,
    Sql,
    Rest,
}

/// A table's Iceberg options, checked.
#[derive(Debug, Clone)]
pub struct Options {
    catalog_type: CatalogType,
    catalog_name: String,
    database: String,
    table: String,
    warehouse: String,
    /// The `sql` catalog's SQLite file, when its `uri` is SQLite's.
    sqlite: Option<std::path::PathBuf>,
    target_file_size: u64,
    compression: Compression,
    partition_by: Option<String>,
    /// `'upsert-enabled'`: the key's columns (`'equality-field-columns'`, or the PRIMARY KEY).
    upsert: Option<Vec<String>>,
    /// Written into a new table's properties.
    properties: Vec<(String, String)>,
}

impl Options {
    pub fn parse(def: &TableDef) -> Result<Self> {
        let o = &def.options;
        let name = &def.name;
        o.check_known(name, KEYS)?;
        let bad =
            |key: &str, why: String| WeirError::user(format!("table '{name}': '{key}' {why}")).at(o.location(key));
        let catalog_type = match (o.get("catalog-type").map(str::to_ascii_lowercase).as_deref(), o.get("catalog-impl"))
        {
            (Some("hadoop"), _) => CatalogType::Hadoop,
            (Some("sql" | "jdbc"), _) | (None, Some("org.apache.iceberg.jdbc.JdbcCatalog")) => CatalogType::Sql,
            (Some("rest"), _) | (None, Some("org.apache.iceberg.rest.RESTCatalog")) => CatalogType::Rest,
            (Some(other), _) => {
                return Err(bad(
                    "catalog-type",
                    format!("= '{other}' is not a catalog type Weir has (hadoop, sql, rest)"),
                ))
            }
            (None, Some(other)) => {
                return Err(bad(
                    "catalog-impl",
                    format!(
                        "= '{other}' is not a catalog Weir has (org.apache.iceberg.jdbc.JdbcCatalog, \
                         org.apache.iceberg.rest.RESTCatalog)"
                    ),
                ))
            }
            (None, None) => {
                return Err(WeirError::user(format!(
                    "table '{name}' needs the option 'catalog-type' ('hadoop', 'sql' or 'rest')"
                )))
            }
        };
        // A REST catalog chooses where tables go (its warehouse is a name it is given).
        let warehouse = match catalog_type {
            CatalogType::Rest => o.get("warehouse").unwrap_or_default().to_string(),
            _ => o.required(name, "warehouse")?.to_string(),
        };
        if catalog_type != CatalogType::Rest {
            catalog::local_path(&warehouse).map_err(|e| e.at(o.location("warehouse")))?;
        }
        for key in ["token", "credential", "oauth2-server-uri", "scope"] {
            if catalog_type != CatalogType::Rest && o.get(key).is_some() {
                return Err(bad(key, "applies to 'catalog-type' = 'rest' only".into()));
            }
        }
        let sqlite = match catalog_type {
            CatalogType::Sql => sqlite::sqlite_file(o.required(name, "uri")?),
            CatalogType::Hadoop | CatalogType::Rest => None,
        };
        if let Some(file) = sqlite.as_ref().filter(|f| !f.is_absolute()) {
            return Err(bad(
                "uri",
                format!("names the SQLite file '{}', which must be an absolute path", file.display()),
            ));
        }
        match o.get("write.format.default").map(str::to_ascii_lowercase).as_deref() {
            None | Some("parquet") => {}
            Some(other) => {
                return Err(bad(
                    "write.format.default",
                    format!("= '{other}': Weir writes Iceberg data as parquet only"),
                ))
            }
        }
        match o.get("format-version") {
            None | Some("2") => {}
            Some(v) => {
                return Err(bad(
                    "format-version",
                    format!("= '{v}': Weir writes Iceberg format version 2 (which equality deletes need)"),
                ))
            }
        }
        let upsert = match (o.bool(name, "upsert-enabled", false)?, o.get("equality-field-columns")) {
            (false, None) => None,
            (false, Some(_)) => {
                return Err(bad("equality-field-columns", "applies with 'upsert-enabled' = 'true' only".into()))
            }
            (true, Some(columns)) => Some(columns.split(',').map(|c| c.trim().to_string()).collect::<Vec<_>>()),
            (true, None) if !def.primary_key.is_empty() => Some(def.primary_key.clone()),
            (true, None) => {
                return Err(bad(
                    "upsert-enabled",
                    "needs the key rows are upserted by: declare PRIMARY KEY (…) NOT ENFORCED or \
                     'equality-field-columns'"
                        .into(),
                ))
            }
        };
        if let Some(key) = &upsert {
            if let Some(c) = key.iter().find(|c| def.schema.index_of(c).is_err()) {
                return Err(bad("equality-field-columns", format!("names '{c}', which is not a column")));
            }
            if !def.primary_key.is_empty() && def.primary_key != *key {
                return Err(bad(
                    "equality-field-columns",
                    format!("differs from the PRIMARY KEY ({})", def.primary_key.join(", ")),
                ));
            }
        }
        let target_file_size = match o.get("write.target-file-size-bytes") {
            None => DEFAULT_TARGET_FILE_SIZE,
            Some(v) => v.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                bad("write.target-file-size-bytes", format!("must be a positive number of bytes, not '{v}'"))
            })?,
        };
        let compression = match o.get("write.parquet.compression-codec").map(str::to_ascii_lowercase).as_deref() {
            None | Some("zstd") => Compression::ZSTD(ZstdLevel::default()),
            Some("snappy") => Compression::SNAPPY,
            Some("uncompressed" | "none") => Compression::UNCOMPRESSED,
            Some(other) => {
                return Err(bad(
                    "write.parquet.compression-codec",
                    format!("= '{other}' is not one Weir writes (zstd, snappy, uncompressed)"),
                ))
            }
        };
        let partition_by = match (o.get("partition-by"), def.partition_keys.is_empty()) {
            (Some(_), false) => {
                return Err(bad("partition-by", "and PARTITIONED BY both partition the table: give one".into()))
            }
            (Some(p), true) => Some(p.to_string()),
            (None, false) => Some(def.partition_keys.join(", ")),
            (None, true) => None,
        };
        if upsert.is_some() && partition_by.is_some() {
            return Err(WeirError::not_supported(format!(
                "table '{name}': an upsert Iceberg table that is also partitioned is not built yet (its equality \
                 deletes would have to be partitioned alike)"
            ))
            .at(o.location("upsert-enabled")));
        }
        let mut properties = vec![("write.format.default".to_string(), "parquet".to_string())];
        for key in ["write.target-file-size-bytes", "write.parquet.compression-codec"] {
            if let Some(v) = o.get(key) {
                properties.push((key.to_string(), v.to_string()));
            }
        }
        if compression == Compression::ZSTD(ZstdLevel::default()) && o.get("write.parquet.compression-codec").is_none()
        {
            properties.push(("write.parquet.compression-codec".into(), "zstd".into()));
        }
        Ok(Options {
            catalog_type,
            catalog_name: o.get("catalog-name").unwrap_or("default").to_string(),
            database: o.get("catalog-database").unwrap_or("default").to_string(),
            table: o.get("catalog-table").unwrap_or(name).to_string(),
            warehouse,
            sqlite,
            target_file_size,
            compression,
            partition_by,
            upsert,
            properties,
        })
    }

    fn catalog(&self, def: &TableDef) -> Result<Box<dyn catalog::Catalog>> {
        Ok(match self.catalog_type {
            CatalogType::Hadoop => Box::new(catalog::HadoopCatalog::new(&self.warehouse, &self.database, &self.table)?),
            CatalogType::Sql if self.sqlite.is_some() => Box::new(sqlite::SqliteCatalog::new(
                self.sqlite.clone().unwrap_or_default(),
                &self.warehouse,
                &self.catalog_name,
                &self.database,
                &self.table,
            )?),
            CatalogType::Rest => Box::new(rest::RestCatalog::new(
                def,
                Some(self.warehouse.as_str()).filter(|w| !w.is_empty()),
                &self.database,
                &self.table,
            )?),
            CatalogType::Sql => Box::new(catalog::SqlCatalog::new(
                def,
                &self.warehouse,
                &self.catalog_name,
                &self.database,
                &self.table,
            )?),
        })
    }
}

/// The table's options and columns, checked when it is declared; the partition spec is
/// checked against its columns here too (an existing table's, when the job starts).
pub fn validate(def: &TableDef) -> Result<()> {
    let options = Options::parse(def)?;
    let key = options.upsert.clone().unwrap_or_default();
    let schema = schema::TableSchema::create(&def.name, &def.schema, &key)?;
    if let Some(p) = &options.partition_by {
        transform::PartitionSpec::parse(&def.name, p, def.options.location("partition-by"), &schema)?;
    }
    Ok(())
}

/// The key an upsert Iceberg table is written by, as a table whose PRIMARY KEY it is (for
/// the planner's check that the query's result is keyed alike); `None` if it appends.
pub fn upsert_key_table(def: &TableDef) -> Result<Option<TableDef>> {
    let options = Options::parse(def)?;
    Ok(options.upsert.map(|key| {
        let mut keyed = def.clone();
        keyed.primary_key = key;
        keyed
    }))
}
