//! A Kafka record's metadata as columns (`… METADATA FROM 'key'`), with Flink's keys and types:
//! `topic`, `partition`, `offset`, `timestamp`, `timestamp-type`, `leader-epoch` and
//! `headers`. A sink writes `timestamp` and `headers`; the others are the broker's to give.
//!
//! Headers are read through librdkafka's C API, not rdkafka's `Headers` trait: the trait
//! panics on a header name that is not UTF-8, and a name is whatever a producer sent. Here a
//! bad name is read lossily, as Java's Kafka client decodes it. Kafka allows a name twice;
//! Flink's map keeps the last value, and so does Weir's (at the place of the first).

use std::ffi::CStr;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, Int32Array, Int64Array, MapArray, StringArray, StructArray,
    TimestampMillisecondArray,
};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::{DataType, Field};
use rdkafka::message::{BorrowedMessage, Header, OwnedHeaders, Timestamp};
use weir_core::{Result, TableDef, WeirError};

use super::codec::RecordAt;

/// The record metadata a column can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetadataKey {
    Timestamp,
    TimestampType,
    Partition,
    Offset,
    Topic,
    LeaderEpoch,
    Headers,
}

const KEYS: &str = "topic, partition, headers, leader-epoch, offset, timestamp, timestamp-type";

pub(crate) fn metadata_key(table: &TableDef, key: &str) -> Result<MetadataKey> {
    Ok(match key {
        "timestamp" => MetadataKey::Timestamp,
        "timestamp-type" => MetadataKey::TimestampType,
        "partition" => MetadataKey::Partition,
        "offset" => MetadataKey::Offset,
        "topic" => MetadataKey::Topic,
        "leader-epoch" => MetadataKey::LeaderEpoch,
        "headers" => MetadataKey::Headers,
        other => {
            return Err(WeirError::user(format!(
                "table '{}': Kafka has no metadata '{other}'; metadata keys are: {KEYS}",
                table.name
            )))
        }
    })
}

/// Refuse a `headers` column that is not a map of strings to bytes (the other keys' values
/// are cast to the column's type, as Flink's are).
pub(crate) fn check_column(table: &TableDef, column: &str, key: MetadataKey) -> Result<()> {
    let Ok(field) = table.schema.field_with_name(column) else { return Ok(()) };
    let is_map = match field.data_type() {
        DataType::Map(entries, _) => matches!(entries.data_type(), DataType::Struct(kv)
            if kv.len() == 2 && kv[0].data_type() == &DataType::Utf8 && kv[1].data_type() == &DataType::Binary),
        _ => false,
    };
    if key == MetadataKey::Headers && !is_map {
        return Err(WeirError::user(format!(
            "table '{}': metadata column '{column}' ('headers') is {}, not MAP<STRING, BYTES>",
            table.name,
            weir_core::sql_type_name(field.data_type())
        )));
    }
    Ok(())
}

/// A record's headers, in order: names read lossily, a value `None` for a null one.
pub(crate) type Headers = Vec<(String, Option<Vec<u8>>)>;

/// The headers of a message read from a consumer.
pub(crate) fn headers_of(message: &BorrowedMessage<'_>) -> Headers {
    use rdkafka::bindings as rd;
    let mut headers: Headers = Vec::new();
    let mut native: *mut rd::rd_kafka_headers_t = std::ptr::null_mut();
    // SAFETY: `message.ptr()` is the live message this borrow holds; librdkafka sets `native`
    // to the message's own header list (or an error and no list), which lives as long as it.
    let err = unsafe { rd::rd_kafka_message_headers(message.ptr(), &mut native) };
    if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || native.is_null() {
        return headers;
    }
    for idx in 0.. {
        let (mut name, mut value, mut size) = (std::ptr::null(), std::ptr::null(), 0usize);
        // SAFETY: `native` is the message's header list; out of range is an error, not a read.
        let err = unsafe { rd::rd_kafka_header_get_all(native, idx, &mut name, &mut value, &mut size) };
        if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            break;
        }
        // SAFETY: librdkafka gives a NUL-terminated name and `size` bytes at `value` (or a null
        // pointer for a null value), both owned by the header list.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
        let value =
            (!value.is_null()).then(|| unsafe { std::slice::from_raw_parts(value as *const u8, size) }.to_vec());
        match headers.iter_mut().find(|(n, _)| *n == name) {
            Some(kept) => kept.1 = value,
            None => headers.push((name, value)),
        }
    }
    headers
}

/// Kafka's names of its timestamp types, as Flink gives them.
pub(crate) fn timestamp_type(t: &Timestamp) -> &'static str {
    match t {
        Timestamp::NotAvailable => "NoTimestampType",
        Timestamp::CreateTime(_) => "CreateTime",
        Timestamp::LogAppendTime(_) => "LogAppendTime",
    }
}

/// The leader epoch a message was read at, if the broker gave one.
pub(crate) fn leader_epoch(message: &BorrowedMessage<'_>) -> Option<i32> {
    // SAFETY: `message.ptr()` is the live message this borrow holds.
    let epoch = unsafe { rdkafka::bindings::rd_kafka_message_leader_epoch(message.ptr()) };
    (epoch >= 0).then_some(epoch)
}

/// One metadata column of the records, of the column's declared type.
pub(crate) fn column(
    key: MetadataKey,
    records: &[RecordAt],
    topic_of: impl Fn(u32) -> String,
    field: &Field,
) -> Result<ArrayRef> {
    let array: ArrayRef = match key {
        MetadataKey::Timestamp => Arc::new(records.iter().map(|r| r.timestamp).collect::<TimestampMillisecondArray>()),
        MetadataKey::TimestampType => Arc::new(records.iter().map(|r| Some(r.timestamp_type)).collect::<StringArray>()),
        MetadataKey::Partition => Arc::new(records.iter().map(|r| Some(r.partition)).collect::<Int32Array>()),
        MetadataKey::Offset => Arc::new(records.iter().map(|r| Some(r.offset)).collect::<Int64Array>()),
        MetadataKey::LeaderEpoch => Arc::new(records.iter().map(|r| r.leader_epoch).collect::<Int32Array>()),
        MetadataKey::Topic => Arc::new(records.iter().map(|r| Some(topic_of(r.part))).collect::<StringArray>()),
        MetadataKey::Headers => return headers_column(records, field),
    };
    Ok(datafusion::arrow::compute::cast(&array, field.data_type())?)
}

/// `MAP<STRING, BYTES>` of each record's headers, in the column's own map type.
fn headers_column(records: &[RecordAt], field: &Field) -> Result<ArrayRef> {
    let DataType::Map(entries, sorted) = field.data_type() else {
        return Err(headers_type(field));
    };
    let DataType::Struct(kv) = entries.data_type() else { return Err(headers_type(field)) };
    let none: Headers = Vec::new();
    let all = || records.iter().flat_map(|r| r.headers.as_ref().unwrap_or(&none).iter());
    let names: ArrayRef = Arc::new(all().map(|(n, _)| Some(n.as_str())).collect::<StringArray>());
    let values: ArrayRef = Arc::new(all().map(|(_, v)| v.as_deref()).collect::<BinaryArray>());
    let (Some(k), Some(v)) = (kv.first(), kv.get(1)) else { return Err(headers_type(field)) };
    let names = datafusion::arrow::compute::cast(&names, k.data_type())?;
    let values = datafusion::arrow::compute::cast(&values, v.data_type())?;
    let offsets = OffsetBuffer::from_lengths(records.iter().map(|r| r.headers.as_ref().map_or(0, |h| h.len())));
    let entries_array = StructArray::try_new(kv.clone(), vec![names, values], None)?;
    Ok(Arc::new(MapArray::try_new(entries.clone(), offsets, entries_array, None, *sorted)?))
}

fn headers_type(field: &Field) -> WeirError {
    WeirError::user(format!(
        "metadata column '{}' ('headers') is {}, not MAP<STRING, BYTES>",
        field.name(),
        field.data_type()
    ))
}

/// Each row's headers to write, from a `headers` column (`MAP<STRING, BYTES>`); a NULL map,
/// or a NULL value in it, writes none or a null value.
pub(crate) fn headers_to_write(column: &ArrayRef) -> Result<Vec<Option<OwnedHeaders>>> {
    let map = column.as_map_opt().ok_or_else(|| {
        WeirError::user(format!("a 'headers' metadata column is {}, not MAP<STRING, BYTES>", column.data_type()))
    })?;
    let names = datafusion::arrow::compute::cast(map.keys(), &DataType::Utf8)?;
    let values = datafusion::arrow::compute::cast(map.values(), &DataType::Binary)?;
    let (names, values) = (names.as_string::<i32>(), values.as_binary::<i32>());
    let offsets = map.value_offsets();
    Ok((0..map.len())
        .map(|row| {
            map.is_valid(row).then(|| {
                (offsets[row] as usize..offsets[row + 1] as usize).fold(OwnedHeaders::new(), |h, i| {
                    h.insert(Header { key: names.value(i), value: values.is_valid(i).then(|| values.value(i)) })
                })
            })
        })
        .collect())
}
