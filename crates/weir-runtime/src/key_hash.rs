//! The hash that puts a key in its key group: Weir's own, fixed and documented, because key
//! groups are persisted. They are in every state key and every checkpoint, and workers on
//! different hosts route rows by them. A hash that changed with a library version, a CPU or an
//! OS would silently split a key between tasks. DataFusion's `create_hashes` (ahash) makes no
//! such promise, so it is not used here.
//!
//! **`weir-xxh64-v1`**: each row's hash starts at 0 and takes each key column in order:
//! `h = XXH64(seed = h, bytes)`. The bytes of a value are a tag (0 for NULL, 1 otherwise) and
//! then its canonical encoding:
//! - integers of every width, dates, times, timestamps and durations: the value as an i64,
//!   little-endian (so INT 5 and BIGINT 5 are one key);
//! - floats as the f64 bits, little-endian, with -0.0 as 0.0 and every NaN as one NaN;
//! - decimals: the i128 unscaled value, little-endian, then the scale;
//! - booleans: one byte; strings and binaries: their bytes;
//! - dictionaries by their values; nested types by their text (`[1, 2]`, `{a: 1}`).
//!
//! A change to any of this is a new version, named in every plan's checkpoint fingerprint: a
//! checkpoint taken under another version is refused, never restored with keys in the wrong
//! groups. `hash_stability` pins the groups of known keys.

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Date64Type, Decimal128Type, DurationMicrosecondType, DurationMillisecondType,
    DurationNanosecondType, DurationSecondType, Float16Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    Int8Type, Time32MillisecondType, Time32SecondType, Time64MicrosecondType, Time64NanosecondType, TimeUnit,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
};
use twox_hash::XxHash64;
use weir_core::Result;

/// The algorithm's name and version, as checkpoints record it.
pub const KEY_HASH: &str = "weir-xxh64-v1";

const NULL: [u8; 1] = [0];

/// Each row's hash of the key `columns` (none: every row hashes to 0).
pub fn hash_rows(columns: &[ArrayRef], rows: usize) -> Result<Vec<u64>> {
    let mut hashes = vec![0u64; rows];
    for column in columns {
        hash_column(column, &mut hashes)?;
    }
    Ok(hashes)
}

/// Fold one column into the rows' hashes.
fn hash_column(column: &ArrayRef, hashes: &mut [u64]) -> Result<()> {
    // A value's bytes after its tag, hashed with the row's hash so far as the seed.
    fn fold(hashes: &mut [u64], column: &dyn Array, bytes: impl Fn(usize, &mut Vec<u8>)) {
        let mut buffer = Vec::with_capacity(32);
        for (i, h) in hashes.iter_mut().enumerate() {
            if column.is_null(i) {
                *h = XxHash64::oneshot(*h, &NULL);
                continue;
            }
            buffer.clear();
            buffer.push(1);
            bytes(i, &mut buffer);
            *h = XxHash64::oneshot(*h, &buffer);
        }
    }
    // The same bytes as `fold` would hash (tag, then the i64), from a fixed array: integers
    // are most keys, and the buffer's bookkeeping cost as much as the hash.
    fn fold_integers(hashes: &mut [u64], column: &dyn Array, value: impl Fn(usize) -> i64) {
        let mut bytes = [1u8; 9];
        for (i, h) in hashes.iter_mut().enumerate() {
            if column.is_null(i) {
                *h = XxHash64::oneshot(*h, &NULL);
                continue;
            }
            bytes[1..].copy_from_slice(&value(i).to_le_bytes());
            *h = XxHash64::oneshot(*h, &bytes);
        }
    }
    macro_rules! integers {
        ($t:ty) => {{
            let a = column.as_primitive::<$t>();
            fold_integers(hashes, a, |i| a.value(i) as i64)
        }};
    }
    macro_rules! floats {
        ($t:ty) => {{
            let a = column.as_primitive::<$t>();
            fold(hashes, a, |i, b| b.extend_from_slice(&canonical_float(f64::from(a.value(i))).to_le_bytes()))
        }};
    }
    match column.data_type() {
        DataType::Boolean => {
            let a = column.as_boolean();
            fold(hashes, a, |i, b| b.push(u8::from(a.value(i))));
        }
        DataType::Int8 => integers!(Int8Type),
        DataType::Int16 => integers!(Int16Type),
        DataType::Int32 => integers!(Int32Type),
        DataType::Int64 => integers!(Int64Type),
        DataType::UInt8 => integers!(UInt8Type),
        DataType::UInt16 => integers!(UInt16Type),
        DataType::UInt32 => integers!(UInt32Type),
        DataType::UInt64 => integers!(UInt64Type),
        DataType::Date32 => integers!(Date32Type),
        DataType::Date64 => integers!(Date64Type),
        DataType::Time32(TimeUnit::Second) => integers!(Time32SecondType),
        DataType::Time32(_) => integers!(Time32MillisecondType),
        DataType::Time64(TimeUnit::Microsecond) => integers!(Time64MicrosecondType),
        DataType::Time64(_) => integers!(Time64NanosecondType),
        DataType::Timestamp(TimeUnit::Second, _) => integers!(TimestampSecondType),
        DataType::Timestamp(TimeUnit::Millisecond, _) => integers!(TimestampMillisecondType),
        DataType::Timestamp(TimeUnit::Microsecond, _) => integers!(TimestampMicrosecondType),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => integers!(TimestampNanosecondType),
        DataType::Duration(TimeUnit::Second) => integers!(DurationSecondType),
        DataType::Duration(TimeUnit::Millisecond) => integers!(DurationMillisecondType),
        DataType::Duration(TimeUnit::Microsecond) => integers!(DurationMicrosecondType),
        DataType::Duration(TimeUnit::Nanosecond) => integers!(DurationNanosecondType),
        DataType::Float16 => {
            let a = column.as_primitive::<Float16Type>();
            fold(hashes, a, |i, b| b.extend_from_slice(&canonical_float(a.value(i).to_f64()).to_le_bytes()))
        }
        DataType::Float32 => floats!(Float32Type),
        DataType::Float64 => floats!(Float64Type),
        DataType::Decimal128(_, scale) => {
            let a = column.as_primitive::<Decimal128Type>();
            let scale = *scale as u8;
            fold(hashes, a, |i, b| {
                b.extend_from_slice(&a.value(i).to_le_bytes());
                b.push(scale);
            })
        }
        DataType::Utf8 => {
            let a = column.as_string::<i32>();
            fold(hashes, a, |i, b| b.extend_from_slice(a.value(i).as_bytes()))
        }
        DataType::LargeUtf8 => {
            let a = column.as_string::<i64>();
            fold(hashes, a, |i, b| b.extend_from_slice(a.value(i).as_bytes()))
        }
        DataType::Utf8View => {
            let a = column.as_string_view();
            fold(hashes, a, |i, b| b.extend_from_slice(a.value(i).as_bytes()))
        }
        DataType::Binary => {
            let a = column.as_binary::<i32>();
            fold(hashes, a, |i, b| b.extend_from_slice(a.value(i)))
        }
        DataType::LargeBinary => {
            let a = column.as_binary::<i64>();
            fold(hashes, a, |i, b| b.extend_from_slice(a.value(i)))
        }
        DataType::BinaryView => {
            let a = column.as_binary_view();
            fold(hashes, a, |i, b| b.extend_from_slice(a.value(i)))
        }
        DataType::FixedSizeBinary(_) => {
            let a = column.as_fixed_size_binary();
            fold(hashes, a, |i, b| b.extend_from_slice(a.value(i)))
        }
        DataType::Dictionary(_, values) => hash_column(&cast(column, values)?, hashes)?,
        _ => {
            let options = datafusion::arrow::util::display::FormatOptions::default().with_null("");
            let text = datafusion::arrow::util::display::ArrayFormatter::try_new(column.as_ref(), &options)?;
            fold(hashes, column.as_ref(), |i, b| b.extend_from_slice(text.value(i).to_string().as_bytes()))
        }
    }
    Ok(())
}

/// -0.0 as 0.0, and every NaN as one NaN: values SQL calls equal hash equal.
fn canonical_float(v: f64) -> u64 {
    if v.is_nan() {
        f64::NAN.to_bits()
    } else if v == 0.0 {
        0
    } else {
        v.to_bits()
    }
}

#[cfg(test)]
mod hash_stability {
    use std::sync::Arc;

    use datafusion::arrow::array::*;
    use weir_state::KeyGroups;

    use super::*;

    fn groups_of(column: ArrayRef) -> Vec<u16> {
        let groups = KeyGroups::default();
        hash_rows(&[column.clone()], column.len()).unwrap().into_iter().map(|h| groups.of_hash(h)).collect()
    }

    /// The groups of known keys of every supported type, out of 128. If this test fails the
    /// hash changed: every checkpoint taken before is unreadable unless the change is a new
    /// `KEY_HASH` version (and these numbers are updated with it).
    #[test]
    fn known_keys_keep_their_groups() {
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![Some(0), Some(1), Some(-1), Some(1_000_000_007), None]));
        let narrow: ArrayRef = Arc::new(Int32Array::from(vec![Some(0), Some(1), Some(-1), Some(1_000_000_007), None]));
        assert_eq!(groups_of(ints.clone()), groups_of(narrow), "INT and BIGINT keys of one value share a group");
        let texts: ArrayRef = Arc::new(StringArray::from(vec![Some(""), Some("a"), Some("weir"), None]));
        let views: ArrayRef = Arc::new(StringViewArray::from(vec![Some(""), Some("a"), Some("weir"), None]));
        assert_eq!(groups_of(texts.clone()), groups_of(views));
        let floats: ArrayRef = Arc::new(Float64Array::from(vec![0.0, -0.0, f64::NAN, -f64::NAN, 1.5]));
        let f = groups_of(floats);
        assert_eq!(f[0], f[1], "-0.0 and 0.0 are one key");
        assert_eq!(f[2], f[3], "every NaN is one key");
        let pinned = [
            groups_of(ints),
            groups_of(texts),
            f,
            groups_of(Arc::new(BooleanArray::from(vec![Some(true), Some(false), None]))),
            groups_of(Arc::new(
                Decimal128Array::from(vec![Some(12345), None]).with_precision_and_scale(10, 2).unwrap(),
            )),
            groups_of(Arc::new(TimestampMillisecondArray::from(vec![Some(1_700_000_000_000), None]))),
            groups_of(Arc::new(Date32Array::from(vec![Some(19_000)]))),
            groups_of(Arc::new(BinaryArray::from(vec![Some(&b"\x00\xff"[..])]))),
        ];
        assert_eq!(format!("{pinned:?}"), PINNED);
    }

    /// Two columns: the second is folded into the first's hash, so (a, b) and (b, a) differ.
    #[test]
    fn columns_fold_in_order() {
        let a: ArrayRef = Arc::new(StringArray::from(vec!["x", "y"]));
        let b: ArrayRef = Arc::new(StringArray::from(vec!["y", "x"]));
        let ab = hash_rows(&[a.clone(), b.clone()], 2).unwrap();
        let ba = hash_rows(&[b, a], 2).unwrap();
        assert_eq!(ab[0], ba[1]);
        assert_ne!(ab[0], ab[1]);
        assert_eq!(hash_rows(&[], 3).unwrap(), vec![0, 0, 0]);
    }

    const PINNED: &str =
        "[[118, 3, 54, 69, 104], [48, 96, 86, 104], [118, 118, 70, 70, 112], [122, 113, 104], [66, 104], [25, 104], [64], [101]]";

    /// One raw hash, so that the groups above are not the only witness.
    #[test]
    fn the_hash_of_bigint_one_is_fixed() {
        let one: ArrayRef = Arc::new(Int64Array::from(vec![1]));
        assert_eq!(hash_rows(&[one], 1).unwrap(), vec![RAW_ONE]);
    }

    const RAW_ONE: u64 = 8_872_220_978_401_710_467;
}
