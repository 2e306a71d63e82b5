//! Flink's string functions that DataFusion lacks or spells otherwise, with Flink's
//! semantics:
//!
//! - `BIN(n)`: the integer in binary, negative numbers as 64-bit two's complement (Java's
//!   `Long.toBinaryString`).
//! - `SHA1(s)`: the SHA-1 digest as lower-case hexadecimal text.
//! - `ENCODE(s, charset)` and `DECODE(bytes, charset)` with Java's charset names (`UTF-8`,
//!   `US-ASCII`, `ISO-8859-1`, `UTF-16BE`, `UTF-16LE`, `UTF-16`); DataFusion's own `encode` and
//!   `decode` (`'base64'`, `'hex'`) keep those names.
//! - `PARSE_URL(url, part [, key])`: a part of a URL as Java's `java.net.URL` gives it (`HOST`,
//!   `PATH`, `QUERY`, `REF`, `PROTOCOL`, `FILE`, `AUTHORITY`, `USERINFO`); with `QUERY` and a
//!   key, that parameter's value. A text that is not a URL is NULL.
//! - `STR_TO_MAP(s [, pairs, kv])`: text split into a `MAP<STRING, STRING>` by two regular
//!   expressions (`,` and `=` by default); a repeated key takes its last value.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BinaryBuilder, MapBuilder, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{exec_err, plan_err, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility};

use crate::udf::udf;

pub const ENCODE: &str = "__weir_encode";
pub const DECODE: &str = "__weir_decode";

#[derive(Clone, Copy, PartialEq)]
enum Charset {
    Utf8,
    Ascii,
    Latin1,
    Utf16Be,
    Utf16Le,
    /// Java's `UTF-16`: big-endian with a byte-order mark when encoding; the mark read when decoding.
    Utf16,
}

fn charset(name: &str) -> Option<Charset> {
    Some(match name.to_ascii_uppercase().replace('_', "-").as_str() {
        "UTF-8" | "UTF8" => Charset::Utf8,
        "US-ASCII" | "ASCII" => Charset::Ascii,
        "ISO-8859-1" | "LATIN1" => Charset::Latin1,
        "UTF-16BE" => Charset::Utf16Be,
        "UTF-16LE" => Charset::Utf16Le,
        "UTF-16" => Charset::Utf16,
        _ => return None,
    })
}

fn encode(text: &str, cs: Charset) -> Vec<u8> {
    match cs {
        Charset::Utf8 => text.as_bytes().to_vec(),
        // Java replaces what the charset cannot hold by '?'.
        Charset::Ascii => text.chars().map(|c| if c.is_ascii() { c as u8 } else { b'?' }).collect(),
        Charset::Latin1 => text.chars().map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?')).collect(),
        Charset::Utf16Be => text.encode_utf16().flat_map(u16::to_be_bytes).collect(),
        Charset::Utf16Le => text.encode_utf16().flat_map(u16::to_le_bytes).collect(),
        Charset::Utf16 => [0xFE, 0xFF].into_iter().chain(text.encode_utf16().flat_map(u16::to_be_bytes)).collect(),
    }
}

fn decode(bytes: &[u8], cs: Charset) -> String {
    let units = |bytes: &[u8], be: bool| -> Vec<u16> {
        bytes
            .chunks(2)
            .map(|p| match (p, be) {
                ([a, b], true) => u16::from_be_bytes([*a, *b]),
                ([a, b], false) => u16::from_le_bytes([*a, *b]),
                _ => 0xFFFD,
            })
            .collect()
    };
    match cs {
        Charset::Utf8 => String::from_utf8_lossy(bytes).into_owned(),
        Charset::Ascii => bytes.iter().map(|&b| if b.is_ascii() { b as char } else { '\u{FFFD}' }).collect(),
        Charset::Latin1 => bytes.iter().map(|&b| char::from(b)).collect(),
        Charset::Utf16Be => String::from_utf16_lossy(&units(bytes, true)),
        Charset::Utf16Le => String::from_utf16_lossy(&units(bytes, false)),
        Charset::Utf16 => match bytes {
            [0xFF, 0xFE, rest @ ..] => String::from_utf16_lossy(&units(rest, false)),
            [0xFE, 0xFF, rest @ ..] => String::from_utf16_lossy(&units(rest, true)),
            _ => String::from_utf16_lossy(&units(bytes, true)),
        },
    }
}

/// A constant charset argument, checked at planning.
fn charset_arg(args: &ScalarFunctionArgs, what: &str) -> Result<Charset> {
    match &args.args[1] {
        ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))) => match charset(name) {
            Some(cs) => Ok(cs),
            None => plan_err!(
                "{what}: unknown charset '{name}' (UTF-8, US-ASCII, ISO-8859-1, UTF-16BE, UTF-16LE or UTF-16)"
            ),
        },
        _ => plan_err!("{what}: the charset must be a constant like 'UTF-8'"),
    }
}

udf!(Bin, "bin", Signature::exact(vec![DataType::Int64], Volatility::Immutable), DataType::Utf8);
udf!(Sha1, "sha1", Signature::exact(vec![DataType::Utf8], Volatility::Immutable), DataType::Utf8);
udf!(Encode, ENCODE, Signature::exact(vec![DataType::Utf8; 2], Volatility::Immutable), DataType::Binary);
udf!(Decode, DECODE, Signature::exact(vec![DataType::Binary, DataType::Utf8], Volatility::Immutable), DataType::Utf8);
udf!(
    ParseUrl,
    "parse_url",
    Signature::one_of(
        vec![
            datafusion::logical_expr::TypeSignature::Exact(vec![DataType::Utf8; 2]),
            datafusion::logical_expr::TypeSignature::Exact(vec![DataType::Utf8; 3]),
        ],
        Volatility::Immutable
    ),
    DataType::Utf8
);
udf!(
    StrToMap,
    "str_to_map",
    Signature::one_of(
        vec![
            datafusion::logical_expr::TypeSignature::Exact(vec![DataType::Utf8]),
            datafusion::logical_expr::TypeSignature::Exact(vec![DataType::Utf8; 3]),
        ],
        Volatility::Immutable
    ),
    string_map_type()
);

fn string_map_type() -> DataType {
    let entries =
        Fields::from(vec![Field::new("keys", DataType::Utf8, false), Field::new("values", DataType::Utf8, true)]);
    DataType::Map(Arc::new(Field::new("entries", DataType::Struct(entries), false)), false)
}

impl Bin {
    fn run(args: &ScalarFunctionArgs, rows: usize) -> Result<ArrayRef> {
        let n = args.args[0].to_array(rows)?;
        let n = n.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        let mut out = StringBuilder::with_capacity(rows, rows * 8);
        for v in n.iter() {
            out.append_option(v.map(|v| format!("{:b}", v as u64)));
        }
        Ok(Arc::new(out.finish()))
    }
}

impl Sha1 {
    fn run(args: &ScalarFunctionArgs, rows: usize) -> Result<ArrayRef> {
        use sha1::Digest;
        let s = args.args[0].to_array(rows)?;
        let mut out = StringBuilder::with_capacity(rows, rows * 40);
        for v in s.as_string::<i32>().iter() {
            out.append_option(
                v.map(|v| sha1::Sha1::digest(v.as_bytes()).iter().map(|b| format!("{b:02x}")).collect::<String>()),
            );
        }
        Ok(Arc::new(out.finish()))
    }
}

impl Encode {
    fn run(args: &ScalarFunctionArgs, rows: usize) -> Result<ArrayRef> {
        let cs = charset_arg(args, "ENCODE")?;
        let s = args.args[0].to_array(rows)?;
        let mut out = BinaryBuilder::with_capacity(rows, rows * 8);
        for v in s.as_string::<i32>().iter() {
            out.append_option(v.map(|v| encode(v, cs)));
        }
        Ok(Arc::new(out.finish()))
    }
}

impl Decode {
    fn run(args: &ScalarFunctionArgs, rows: usize) -> Result<ArrayRef> {
        let cs = charset_arg(args, "DECODE")?;
        let b = args.args[0].to_array(rows)?;
        let mut out = StringBuilder::with_capacity(rows, rows * 8);
        for v in b.as_binary::<i32>().iter() {
            out.append_option(v.map(|v| decode(v, cs)));
        }
        Ok(Arc::new(out.finish()))
    }
}

/// A URL's parts as `java.net.URL` splits it: `protocol://[userinfo@]host[:port]path[?query][#ref]`.
struct Url<'a> {
    protocol: &'a str,
    authority: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    reference: Option<&'a str>,
}

fn split_url(text: &str) -> Option<Url<'_>> {
    let (protocol, rest) = text.split_once(':')?;
    let valid = protocol.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && protocol.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !valid || !matches!(protocol.to_ascii_lowercase().as_str(), "http" | "https" | "ftp" | "file" | "jar") {
        // Java's URL knows only its handlers' protocols; anything else is a MalformedURLException.
        return None;
    }
    let (rest, reference) = match rest.split_once('#') {
        Some((r, f)) => (r, Some(f)),
        None => (rest, None),
    };
    let (authority, rest) = match rest.strip_prefix("//") {
        Some(r) => {
            let end = r.find(['/', '?']).unwrap_or(r.len());
            (&r[..end], &r[end..])
        }
        None => ("", rest),
    };
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    Some(Url { protocol, authority, path, query, reference })
}

fn url_part(url: &Url<'_>, part: &str) -> Option<String> {
    let host = || {
        let hostport = url.authority.rsplit_once('@').map_or(url.authority, |(_, h)| h);
        if hostport.starts_with('[') {
            return hostport.split_inclusive(']').next().unwrap_or(hostport).to_string();
        }
        hostport.split(':').next().unwrap_or("").to_string()
    };
    match part {
        "HOST" => Some(host()),
        "PATH" => Some(url.path.to_string()),
        "QUERY" => url.query.map(str::to_string),
        "REF" => url.reference.map(str::to_string),
        "PROTOCOL" => Some(url.protocol.to_string()),
        "FILE" => Some(match url.query {
            Some(q) => format!("{}?{q}", url.path),
            None => url.path.to_string(),
        }),
        "AUTHORITY" => Some(url.authority.to_string()),
        "USERINFO" => url.authority.rsplit_once('@').map(|(u, _)| u.to_string()),
        _ => None,
    }
}

impl ParseUrl {
    fn run(args: &ScalarFunctionArgs, rows: usize) -> Result<ArrayRef> {
        let arrays = args.args.iter().map(|a| a.to_array(rows)).collect::<Result<Vec<_>>>()?;
        let url = arrays[0].as_string::<i32>();
        let part = arrays[1].as_string::<i32>();
        let key = arrays.get(2).map(|k| k.as_string::<i32>());
        let mut out = StringBuilder::with_capacity(rows, rows * 8);
        for i in 0..rows {
            if url.is_null(i) || part.is_null(i) || key.is_some_and(|k| k.is_null(i)) {
                out.append_null();
                continue;
            }
            let Some(parsed) = split_url(url.value(i)) else {
                out.append_null();
                continue;
            };
            let part = part.value(i);
            let value = match key {
                // As Flink: the first `key=value` of the query, by `(&|^)key=([^&]*)`.
                Some(k) if part == "QUERY" => parsed.query.and_then(|q| {
                    let k = k.value(i);
                    q.split('&')
                        .find_map(|pair| pair.strip_prefix(k).and_then(|r| r.strip_prefix('=')))
                        .map(str::to_string)
                }),
                Some(_) => None,
                None => url_part(&parsed, part),
            };
            out.append_option(value);
        }
        Ok(Arc::new(out.finish()))
    }
}

impl StrToMap {
    fn run(args: &ScalarFunctionArgs, rows: usize) -> Result<ArrayRef> {
        let arrays = args.args.iter().map(|a| a.to_array(rows)).collect::<Result<Vec<_>>>()?;
        let text = arrays[0].as_string::<i32>();
        // Delimiters are almost always constants: each distinct one compiled once.
        let mut compiled: std::collections::HashMap<String, regex::Regex> = std::collections::HashMap::new();
        let mut regex_of = |pattern: &str| -> Result<regex::Regex> {
            if let Some(r) = compiled.get(pattern) {
                return Ok(r.clone());
            }
            match regex::Regex::new(pattern) {
                Ok(r) => {
                    compiled.insert(pattern.to_string(), r.clone());
                    Ok(r)
                }
                Err(_) => exec_err!("STR_TO_MAP: '{pattern}' is not a regular expression"),
            }
        };
        let mut out = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
        for i in 0..rows {
            let delimiters = match arrays.get(1..3) {
                Some([a, b]) => {
                    let (a, b) = (a.as_string::<i32>(), b.as_string::<i32>());
                    if a.is_null(i) || b.is_null(i) {
                        None
                    } else {
                        Some((a.value(i).to_string(), b.value(i).to_string()))
                    }
                }
                _ => Some((",".to_string(), "=".to_string())),
            };
            let (Some((pairs, kv)), false) = (delimiters, text.is_null(i)) else {
                out.append(false)?;
                continue;
            };
            let (pairs, kv) = (regex_of(&pairs)?, regex_of(&kv)?);
            let mut entries: Vec<(String, Option<String>)> = Vec::new();
            for pair in pairs.split(text.value(i)) {
                let mut parts = kv.splitn(pair, 2);
                let key = parts.next().unwrap_or("").to_string();
                let value = parts.next().map(str::to_string);
                match entries.iter_mut().find(|(k, _)| *k == key) {
                    Some(entry) => entry.1 = value,
                    None => entries.push((key, value)),
                }
            }
            for (k, v) in entries {
                out.keys().append_value(k);
                out.values().append_option(v);
            }
            out.append(true)?;
        }
        // The builder's field names and nullability are those of `string_map_type`.
        Ok(Arc::new(out.finish()))
    }
}
