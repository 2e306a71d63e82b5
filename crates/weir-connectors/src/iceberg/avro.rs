//! The Avro files of Iceberg's metadata (manifests and manifest lists), written as Avro object
//! container files. Iceberg requires keys in the file's metadata beside the schema (`schema`,
//! `partition-spec`, `format-version`, `content`, `snapshot-id`…), which arrow-avro's
//! container writer does not take (it writes `avro.schema` and `avro.codec` only); the records
//! are a few per file, so they are encoded here from [`Value`]s, and arrow-avro reads them
//! back ([`super::manifest::read_manifest_list`]). Replaceable by the `iceberg` crate once a
//! release of it builds on the arrow version the rest of Weir uses.

/// An Avro datum, as the writer schema lays it out.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Boolean(bool),
    Int(i32),
    Long(i64),
    Bytes(Vec<u8>),
    String(String),
    /// A union's branch: its index in the union and its value.
    Union(u32, Box<Value>),
    Array(Vec<Value>),
    /// A record's fields in schema order.
    Record(Vec<Value>),
}

impl Value {
    /// `["null", T]` with a value: branch 1.
    pub fn some(v: Value) -> Value {
        Value::Union(1, Box::new(v))
    }

    /// `["null", T]` without one: branch 0.
    pub fn none() -> Value {
        Value::Union(0, Box::new(Value::Null))
    }

    pub fn optional(v: Option<Value>) -> Value {
        v.map_or_else(Value::none, Value::some)
    }
}

/// Avro's `long`: zig-zag, then a base-128 varint.
pub fn long(out: &mut Vec<u8>, v: i64) {
    let mut n = ((v << 1) ^ (v >> 63)) as u64;
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    long(out, b.len() as i64);
    out.extend_from_slice(b);
}

pub fn encode(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => {}
        Value::Boolean(b) => out.push(u8::from(*b)),
        Value::Int(i) => long(out, i64::from(*i)),
        Value::Long(l) => long(out, *l),
        Value::Bytes(b) => bytes(out, b),
        Value::String(s) => bytes(out, s.as_bytes()),
        Value::Union(branch, v) => {
            long(out, i64::from(*branch));
            encode(out, v);
        }
        Value::Array(items) => {
            if !items.is_empty() {
                long(out, items.len() as i64);
                for item in items {
                    encode(out, item);
                }
            }
            long(out, 0);
        }
        Value::Record(fields) => {
            for f in fields {
                encode(out, f);
            }
        }
    }
}

/// An object container file: `schema` (JSON) and `metadata` in its header, `records` in one
/// uncompressed block. `sync` tells blocks apart; any 16 bytes do.
pub fn container(schema: &str, metadata: &[(&str, String)], records: &[Value], sync: [u8; 16]) -> Vec<u8> {
    let mut out = b"Obj\x01".to_vec();
    long(&mut out, metadata.len() as i64 + 2);
    bytes(&mut out, b"avro.schema");
    bytes(&mut out, schema.as_bytes());
    bytes(&mut out, b"avro.codec");
    bytes(&mut out, b"null");
    for (k, v) in metadata {
        bytes(&mut out, k.as_bytes());
        bytes(&mut out, v.as_bytes());
    }
    long(&mut out, 0);
    out.extend_from_slice(&sync);
    if !records.is_empty() {
        let mut block = Vec::new();
        for r in records {
            encode(&mut block, r);
        }
        long(&mut out, records.len() as i64);
        bytes(&mut out, &block);
        out.extend_from_slice(&sync);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_varints() {
        let enc = |v: i64| {
            let mut o = Vec::new();
            long(&mut o, v);
            o
        };
        assert_eq!(enc(0), [0]);
        assert_eq!(enc(-1), [1]);
        assert_eq!(enc(1), [2]);
        assert_eq!(enc(-64), [0x7f]);
        assert_eq!(enc(64), [0x80, 0x01]);
        assert_eq!(enc(i64::MIN), [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
    }
}
