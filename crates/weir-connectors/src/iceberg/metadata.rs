//! Iceberg table metadata (format version 2) as JSON: a new table's, and a table's next
//! version with one more snapshot. Fields written by other engines are kept as they are.

use serde_json::{json, Map, Value as Json};
use weir_core::{Result, WeirError};

use super::schema::TableSchema;
use super::transform::PartitionSpec;

/// Snapshot summary keys recording which of a job's checkpoints a snapshot committed (the
/// same as Flink's `flink.job-id` and `flink.max-committed-checkpoint-id`).
pub const JOB_ID: &str = "weir.job-id";
pub const MAX_COMMITTED: &str = "weir.max-committed-checkpoint-id";

pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// 16 random bytes (from the system), for ids and Avro sync markers.
pub fn random16() -> [u8; 16] {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 16];
    // The system's generator does not fail on Linux; a zeroed value would still be usable.
    let _ = ring::rand::SystemRandom::new().fill(&mut b);
    b
}

pub fn uuid() -> String {
    let mut b = random16();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// A new snapshot id: positive, random (as Iceberg's writers choose them).
pub fn snapshot_id() -> i64 {
    let b = random16();
    i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) & i64::MAX
}

pub fn create(location: &str, schema: &TableSchema, spec: &PartitionSpec, properties: &[(String, String)]) -> Json {
    let props: Map<String, Json> = properties.iter().map(|(k, v)| (k.clone(), Json::String(v.clone()))).collect();
    json!({
        "format-version": 2,
        "table-uuid": uuid(),
        "location": location,
        "last-sequence-number": 0,
        "last-updated-ms": now_ms(),
        "last-column-id": schema.last_column_id(),
        "current-schema-id": schema.schema_id,
        "schemas": [schema.to_json()],
        "default-spec-id": spec.spec_id,
        "partition-specs": [spec.to_json()],
        "last-partition-id": spec.last_partition_id(),
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": props,
        "refs": {},
        "snapshots": [],
        "snapshot-log": [],
        "metadata-log": [],
    })
}

pub fn location(meta: &Json) -> Option<&str> {
    meta.get("location").and_then(Json::as_str)
}

pub fn current_snapshot(meta: &Json) -> Option<&Json> {
    let id = meta.get("current-snapshot-id").and_then(Json::as_i64).filter(|id| *id >= 0)?;
    snapshots(meta).find(|s| s.get("snapshot-id").and_then(Json::as_i64) == Some(id))
}

pub fn snapshots(meta: &Json) -> impl Iterator<Item = &Json> {
    meta.get("snapshots").and_then(Json::as_array).into_iter().flatten()
}

/// The highest checkpoint of job `job` that a snapshot of the table records.
pub fn max_committed(meta: &Json, job: &str) -> Option<u64> {
    snapshots(meta)
        .filter_map(|s| s.get("summary"))
        .filter(|s| s.get(JOB_ID).and_then(Json::as_str) == Some(job))
        .filter_map(|s| s.get(MAX_COMMITTED).and_then(Json::as_str)?.parse::<u64>().ok())
        .max()
}

/// What one commit adds, for its snapshot's summary.
pub struct Added {
    pub data_files: i64,
    pub records: i64,
    pub bytes: i64,
    pub delete_files: i64,
    pub equality_deletes: i64,
    pub partitions: usize,
}

/// `meta` with the snapshot `id` (manifest list `manifest_list`, sequence number one more
/// than the table's last) made current on `main`; `previous` is the metadata file it
/// replaces.
pub fn with_snapshot(
    meta: &Json,
    previous: Option<&str>,
    id: i64,
    manifest_list: &str,
    added: &Added,
    extra_summary: &[(&str, String)],
) -> Result<Json> {
    let mut meta = meta.clone();
    let obj = meta.as_object_mut().ok_or_else(|| WeirError::external("Iceberg table metadata is not an object"))?;
    let sequence = obj.get("last-sequence-number").and_then(Json::as_i64).unwrap_or(0) + 1;
    let parent = obj.get("current-snapshot-id").and_then(Json::as_i64).filter(|p| *p >= 0);
    let previous_summary = parent
        .and_then(|p| {
            obj.get("snapshots")?.as_array()?.iter().find(|s| s.get("snapshot-id").and_then(Json::as_i64) == Some(p))
        })
        .and_then(|s| s.get("summary"))
        .cloned()
        .unwrap_or(Json::Null);
    let total = |key: &str, add: i64| {
        let before = previous_summary.get(key).and_then(Json::as_str).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        (before + add).to_string()
    };
    let now = now_ms();
    let mut summary = Map::new();
    let operation = if added.delete_files > 0 { "overwrite" } else { "append" };
    summary.insert("operation".into(), operation.into());
    let mut put = |k: &str, v: String| {
        summary.insert(k.to_string(), Json::String(v));
    };
    if added.data_files > 0 {
        put("added-data-files", added.data_files.to_string());
        put("added-records", added.records.to_string());
        put("added-files-size", added.bytes.to_string());
    }
    if added.delete_files > 0 {
        put("added-delete-files", added.delete_files.to_string());
        put("added-equality-delete-files", added.delete_files.to_string());
        put("added-equality-deletes", added.equality_deletes.to_string());
    }
    put("changed-partition-count", added.partitions.to_string());
    put("total-records", total("total-records", added.records));
    put("total-files-size", total("total-files-size", added.bytes));
    put("total-data-files", total("total-data-files", added.data_files));
    put("total-delete-files", total("total-delete-files", added.delete_files));
    put("total-position-deletes", total("total-position-deletes", 0));
    put("total-equality-deletes", total("total-equality-deletes", added.equality_deletes));
    for (k, v) in extra_summary {
        put(k, v.clone());
    }
    let mut snapshot = json!({
        "snapshot-id": id,
        "sequence-number": sequence,
        "timestamp-ms": now,
        "manifest-list": manifest_list,
        "summary": summary,
        "schema-id": obj.get("current-schema-id").cloned().unwrap_or(json!(0)),
    });
    if let Some(p) = parent {
        snapshot["parent-snapshot-id"] = json!(p);
    }
    push(obj, "snapshots", snapshot);
    push(obj, "snapshot-log", json!({"timestamp-ms": now, "snapshot-id": id}));
    if let Some(previous) = previous {
        let last_updated = obj.get("last-updated-ms").cloned().unwrap_or(json!(now));
        push(obj, "metadata-log", json!({"timestamp-ms": last_updated, "metadata-file": previous}));
    }
    obj.insert("current-snapshot-id".into(), json!(id));
    obj.insert("last-sequence-number".into(), json!(sequence));
    obj.insert("last-updated-ms".into(), json!(now));
    let refs = obj.entry("refs").or_insert_with(|| json!({}));
    if let Some(refs) = refs.as_object_mut() {
        refs.insert("main".into(), json!({"snapshot-id": id, "type": "branch"}));
    }
    Ok(meta)
}

pub fn sequence_number(meta: &Json) -> i64 {
    meta.get("last-sequence-number").and_then(Json::as_i64).unwrap_or(0)
}

fn push(obj: &mut Map<String, Json>, key: &str, value: Json) {
    match obj.get_mut(key).and_then(Json::as_array_mut) {
        Some(a) => a.push(value),
        None => {
            obj.insert(key.to_string(), Json::Array(vec![value]));
        }
    }
}
