//! The Iceberg committer runs the two-phase-commit contract, over a hadoop-catalog table in a
//! temporary directory. What is visible is what a reader of the table's current snapshot
//! reads: its manifest list, its manifests' data files, their rows.

use std::io::Cursor;
use std::path::PathBuf;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::{Int32Type, Int64Type};
use weir_core::{Options, Split, TableDef};

use super::manifest::read_manifest_list;
use super::IcebergSink;
use crate::committer_contract::{run, schema, Harness};

struct Table {
    warehouse: PathBuf,
}

impl Table {
    fn current_metadata(&self) -> Option<serde_json::Value> {
        let dir = self.warehouse.join("db").join("t").join("metadata");
        let n = std::fs::read_dir(&dir)
            .ok()?
            .filter_map(|e| {
                let name = e.ok()?.file_name().to_string_lossy().to_string();
                name.strip_prefix('v')?.strip_suffix(".metadata.json")?.parse::<u64>().ok()
            })
            .max()?;
        let text = std::fs::read(dir.join(format!("v{n}.metadata.json"))).expect("metadata");
        Some(serde_json::from_slice(&text).expect("metadata JSON"))
    }
}

impl Harness for Table {
    type C = IcebergSink;

    fn make(&self, task: usize, count: usize) -> IcebergSink {
        let mut options = Options::default();
        let warehouse = self.warehouse.display().to_string();
        for (k, v) in [
            ("connector", "iceberg"),
            ("catalog-type", "hadoop"),
            ("warehouse", &warehouse),
            ("catalog-database", "db"),
        ] {
            options.insert(k.into(), v.into(), None);
        }
        let table = TableDef::new("t", schema(), options);
        IcebergSink::new(&table, schema(), Split { index: task, count }).expect("an Iceberg sink")
    }

    fn published(&self) -> Vec<i64> {
        let Some(meta) = self.current_metadata() else { return Vec::new() };
        let Some(list) = super::metadata::current_snapshot(&meta).and_then(|s| s["manifest-list"].as_str()) else {
            return Vec::new();
        };
        let bytes = std::fs::read(list).expect("manifest list");
        let mut values = Vec::new();
        for m in read_manifest_list(&bytes, list).expect("a manifest list") {
            let bytes = std::fs::read(&m.path).expect("manifest");
            // Only the fields read here (arrow-avro builds no array of an unpartitioned
            // table's empty partition record).
            let entry = r#"{"type":"record","name":"manifest_entry","fields":[{"name":"status","type":"int"},{"name":"data_file","type":{"type":"record","name":"r2","fields":[{"name":"content","type":"int"},{"name":"file_path","type":"string"}]}}]}"#;
            let reader = arrow_avro::reader::ReaderBuilder::new()
                .with_reader_schema(arrow_avro::schema::AvroSchema::new(entry.to_string()))
                .build(Cursor::new(bytes))
                .expect("a manifest");
            for batch in reader {
                let batch = batch.expect("manifest entries");
                let status = batch.column_by_name("status").expect("status");
                let file = batch.column_by_name("data_file").expect("data_file");
                let file = file.as_struct();
                let path = file.column_by_name("file_path").expect("file_path");
                let content = file.column_by_name("content").expect("content");
                for i in 0..batch.num_rows() {
                    let deleted = status.as_primitive::<Int32Type>().value(i) == 2;
                    if deleted || content.as_primitive::<Int32Type>().value(i) != 0 {
                        continue;
                    }
                    let path = match path.as_string_opt::<i32>() {
                        Some(p) => p.value(i).to_string(),
                        None => path.as_string_view().value(i).to_string(),
                    };
                    let file = std::fs::File::open(&path).expect("a data file");
                    let rows =
                        parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(file, 1024).expect("Parquet");
                    for rows in rows {
                        let rows = rows.expect("rows");
                        let v = rows.column(0).as_primitive::<Int64Type>();
                        values.extend((0..v.len()).map(|j| v.value(j)));
                    }
                }
            }
        }
        values.sort();
        values
    }
}

#[tokio::test]
async fn the_iceberg_committer_keeps_the_contract() {
    let root = std::env::temp_dir().join(format!("weir-iceberg-committer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    run(|case| Table { warehouse: root.join(case) }).await;
    let _ = std::fs::remove_dir_all(&root);
}
