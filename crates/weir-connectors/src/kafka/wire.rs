//! The few Kafka requests Weir speaks itself ([`super::txn`]), framed by hand: a request is
//! a size, a header and a body; a response a size, the correlation id and a body. Versions
//! are chosen fixed and small; "flexible" versions (KIP-482) add tagged fields to headers
//! and bodies and encode strings and arrays with unsigned varint lengths ("compact").
//!
//! Every read is bounds-checked: a short or malformed response is an error, never a panic.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use weir_core::{Result, WeirError};

const CLIENT_ID: &str = "weir-txn-recovery";
/// Larger responses are refused: the ones read here are small (a listing of transactions is
/// the largest, about 40 bytes per transactional id).
const MAX_RESPONSE: i32 = 64 << 20;

pub(super) fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as i16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

pub(super) fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A response body, read front to back.
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let b = self
            .bytes
            .get(self.at..self.at.saturating_add(n))
            .ok_or_else(|| WeirError::external("Kafka: a response is shorter than its layout"))?;
        self.at += n;
        Ok(b)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        self.take(N)?.try_into().map_err(|_| WeirError::internal("fixed-size read"))
    }

    pub(super) fn i16(&mut self) -> Result<i16> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    pub(super) fn i32(&mut self) -> Result<i32> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    pub(super) fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    pub(super) fn string(&mut self) -> Result<Option<String>> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        Ok(Some(String::from_utf8_lossy(self.take(len as usize)?).into_owned()))
    }

    pub(super) fn uvarint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let [b] = self.array::<1>()?;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(WeirError::external("Kafka: a response has a malformed varint"))
    }

    /// A compact array's length (`None`: null).
    pub(super) fn compact_len(&mut self) -> Result<Option<usize>> {
        Ok(match self.uvarint()? {
            0 => None,
            n => Some(usize::try_from(n - 1).map_err(|_| WeirError::external("Kafka: a huge array length"))?),
        })
    }

    pub(super) fn compact_string(&mut self) -> Result<Option<String>> {
        match self.compact_len()? {
            None => Ok(None),
            Some(len) => Ok(Some(String::from_utf8_lossy(self.take(len)?).into_owned())),
        }
    }

    /// Tagged fields: none is read here, so all are skipped.
    pub(super) fn skip_tags(&mut self) -> Result<()> {
        for _ in 0..self.uvarint()? {
            let _tag = self.uvarint()?;
            let size =
                usize::try_from(self.uvarint()?).map_err(|_| WeirError::external("Kafka: a huge tagged field"))?;
            self.take(size)?;
        }
        Ok(())
    }
}

/// One request, one response (its body, after the correlation id and, for a flexible
/// version, the header's tagged fields).
pub(super) fn call(
    broker: &str,
    api_key: i16,
    api_version: i16,
    flexible: bool,
    body: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>> {
    let external = |e: std::io::Error| WeirError::external(format!("Kafka broker {broker}: {e}"));
    let addr = std::net::ToSocketAddrs::to_socket_addrs(broker)
        .map_err(external)?
        .next()
        .ok_or_else(|| WeirError::external(format!("Kafka broker {broker}: no address")))?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(external)?;
    stream.set_read_timeout(Some(timeout)).map_err(external)?;
    stream.set_write_timeout(Some(timeout)).map_err(external)?;
    let correlation_id: i32 = 1;
    let mut request = Vec::with_capacity(64 + body.len());
    request.extend_from_slice(&api_key.to_be_bytes());
    request.extend_from_slice(&api_version.to_be_bytes());
    request.extend_from_slice(&correlation_id.to_be_bytes());
    put_string(&mut request, CLIENT_ID);
    if flexible {
        request.push(0); // no tagged fields
    }
    request.extend_from_slice(body);
    let mut framed = (request.len() as i32).to_be_bytes().to_vec();
    framed.extend_from_slice(&request);
    stream.write_all(&framed).map_err(external)?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).map_err(external)?;
    let size = i32::from_be_bytes(size);
    if !(4..=MAX_RESPONSE).contains(&size) {
        return Err(WeirError::external(format!("Kafka broker {broker}: response of {size} bytes")));
    }
    let mut response = vec![0u8; size as usize];
    stream.read_exact(&mut response).map_err(external)?;
    let mut r = Reader::new(&response);
    if r.i32()? != correlation_id {
        return Err(WeirError::external(format!("Kafka broker {broker}: response to another request")));
    }
    if flexible {
        r.skip_tags()?;
    }
    let at = r.at;
    Ok(response.split_off(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_bad_input_is_an_error() {
        for v in [0u64, 1, 127, 128, 300, 16_383, 16_384, u32::MAX as u64, u64::MAX] {
            let mut out = Vec::new();
            put_uvarint(&mut out, v);
            assert_eq!(Reader::new(&out).uvarint().expect("varint"), v);
        }
        assert!(Reader::new(&[0x80]).uvarint().is_err(), "a varint cut short");
        assert!(Reader::new(&[0xff; 11]).uvarint().is_err(), "a varint longer than 64 bits");
    }

    #[test]
    fn compact_fields_and_tagged_fields_are_read() {
        // A compact string "ab", a null compact string, two tagged fields (sizes 1 and 2),
        // then an i16.
        let bytes = [3, b'a', b'b', 0, 2, 0, 1, 9, 5, 2, 7, 7, 0, 42];
        let mut r = Reader::new(&bytes);
        assert_eq!(r.compact_string().expect("string").as_deref(), Some("ab"));
        assert_eq!(r.compact_string().expect("null"), None);
        r.skip_tags().expect("tags");
        assert_eq!(r.i16().expect("i16"), 42);
        assert!(r.i16().is_err(), "reading past the end");
        // A compact string longer than what is left.
        assert!(Reader::new(&[10, b'x']).compact_string().is_err());
    }
}
