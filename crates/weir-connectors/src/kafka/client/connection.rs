//! One connection to one broker: TCP, then TLS and SASL as the table's settings ask, then
//! `ApiVersions`, so that every request goes at the highest version both sides speak
//! (Kafka 4 removed many old versions: KIP-896). Requests and responses are encoded by the
//! `kafka-protocol` crate.
//!
//! Blocking I/O with timeouts: these requests run on recovery, in `spawn_blocking`.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::ops::RangeInclusive;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use weir_core::{Result, WeirError};

use super::sasl::Exchange;
use super::security::{Sasl, Security};

const CLIENT_ID: &str = "weir";
/// Larger responses are refused: the ones read here are small (a listing of transactions is
/// the largest, about 40 bytes per transactional id).
const MAX_RESPONSE: usize = 64 << 20;
/// ApiVersions v3 is the newest this client knows (KIP-511: a broker that does not know it
/// answers with v0 and its own range).
const API_VERSIONS: RangeInclusive<i16> = 0..=3;
const UNSUPPORTED_VERSION: i16 = 35;

enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    fn io(&mut self) -> &mut dyn ReadWrite {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.as_mut(),
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

pub struct Connection {
    broker: String,
    stream: Stream,
    /// API key → the versions the broker speaks.
    versions: HashMap<i16, (i16, i16)>,
    correlation_id: i32,
}

impl Connection {
    /// Connect, negotiate versions and authenticate. Errors the user must fix (a certificate
    /// that does not verify, credentials the broker refuses) are of kind `User` and are not
    /// worth retrying; the rest are `External`.
    pub fn open(broker: &str, security: &Security, timeout: Duration) -> Result<Self> {
        let external = |e: std::io::Error| WeirError::external(format!("Kafka broker {broker}: {e}"));
        // Every address of the name in turn (`localhost` may be ::1 first, a broker on 127.0.0.1).
        let mut last = None;
        let mut connected = None;
        for addr in std::net::ToSocketAddrs::to_socket_addrs(broker).map_err(external)? {
            match TcpStream::connect_timeout(&addr, timeout) {
                Ok(tcp) => {
                    connected = Some(tcp);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let tcp = match (connected, last) {
            (Some(tcp), _) => tcp,
            (None, Some(e)) => return Err(external(e)),
            (None, None) => return Err(WeirError::external(format!("Kafka broker {broker}: no address"))),
        };
        tcp.set_read_timeout(Some(timeout)).map_err(external)?;
        tcp.set_write_timeout(Some(timeout)).map_err(external)?;
        tcp.set_nodelay(true).map_err(external)?;
        let stream = match &security.tls {
            None => Stream::Plain(tcp),
            Some(config) => Stream::Tls(Box::new(handshake(broker, config, tcp)?)),
        };
        let mut connection =
            Connection { broker: broker.to_string(), stream, versions: HashMap::new(), correlation_id: 0 };
        connection.negotiate()?;
        if let Some(sasl) = &security.sasl {
            connection.authenticate(sasl)?;
        }
        Ok(connection)
    }

    pub fn broker(&self) -> &str {
        &self.broker
    }

    /// The highest version of `R` both this client (`ours`) and the broker speak.
    pub fn version<R: Request>(&self, ours: RangeInclusive<i16>) -> Result<i16> {
        let name = api_name(R::KEY);
        let (min, max) = self
            .versions
            .get(&R::KEY)
            .copied()
            .ok_or_else(|| WeirError::external(format!("Kafka broker {}: does not support {name}", self.broker)))?;
        let version = max.min(*ours.end());
        if version < min.max(*ours.start()) {
            return Err(WeirError::external(format!(
                "Kafka broker {}: speaks {name} versions {min} to {max}, Weir {} to {}",
                self.broker,
                ours.start(),
                ours.end()
            )));
        }
        Ok(version)
    }

    /// Whether the broker speaks `R` at all.
    pub fn supports<R: Request>(&self) -> bool {
        self.versions.contains_key(&R::KEY)
    }

    /// Send `request` at `version` and read its response.
    pub fn call<R: Request>(&mut self, request: &R, version: i16) -> Result<R::Response> {
        let name = api_name(R::KEY);
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, R::header_version(version))
            .map_err(|e| WeirError::internal(format!("Kafka {name} v{version}: {e}")))?;
        request.encode(&mut body, version).map_err(|e| WeirError::internal(format!("Kafka {name} v{version}: {e}")))?;
        let mut response = self.exchange(&body)?;
        let malformed = |broker: &str, e: &dyn std::fmt::Display| {
            WeirError::external(format!("Kafka broker {broker}: a malformed {name} v{version} response: {e}"))
        };
        let header = ResponseHeader::decode(&mut response, R::Response::header_version(version))
            .map_err(|e| malformed(&self.broker, &e))?;
        if header.correlation_id != self.correlation_id {
            return Err(WeirError::external(format!("Kafka broker {}: response to another request", self.broker)));
        }
        R::Response::decode(&mut response, version).map_err(|e| malformed(&self.broker, &e))
    }

    /// One framed request out, one framed response back.
    fn exchange(&mut self, body: &[u8]) -> Result<Bytes> {
        let broker = &self.broker;
        let external = |e: std::io::Error| WeirError::external(format!("Kafka broker {broker}: {e}"));
        let io = self.stream.io();
        let size = i32::try_from(body.len()).map_err(|_| WeirError::internal("a request over 2 GiB"))?;
        // One write: over TLS, one record.
        let mut framed = Vec::with_capacity(4 + body.len());
        framed.extend_from_slice(&size.to_be_bytes());
        framed.extend_from_slice(body);
        io.write_all(&framed).map_err(external)?;
        io.flush().map_err(external)?;
        let mut size = [0u8; 4];
        io.read_exact(&mut size).map_err(external)?;
        let size = i32::from_be_bytes(size);
        let size = usize::try_from(size)
            .ok()
            .filter(|s| (4..=MAX_RESPONSE).contains(s))
            .ok_or_else(|| WeirError::external(format!("Kafka broker {broker}: a response of {size} bytes")))?;
        let mut response = vec![0u8; size];
        io.read_exact(&mut response).map_err(external)?;
        Ok(Bytes::from(response))
    }

    /// ApiVersions at the newest version; a broker that does not know it answers in v0 with
    /// its range, and is asked again in that.
    fn negotiate(&mut self) -> Result<()> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("weir"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let mut version = *API_VERSIONS.end();
        for _ in 0..2 {
            let response = match self.call(&request, version) {
                Ok(r) => r,
                // A v0 answer to a newer request does not decode as the newer version: ask
                // again in v0, which every broker speaks.
                Err(_) if version > 0 => {
                    version = 0;
                    continue;
                }
                Err(e) => return Err(e),
            };
            match response.error_code {
                0 => {
                    self.versions =
                        response.api_keys.iter().map(|k| (k.api_key, (k.min_version, k.max_version))).collect();
                    return Ok(());
                }
                UNSUPPORTED_VERSION => {
                    let theirs = response.api_keys.iter().find(|k| k.api_key == ApiKey::ApiVersions as i16);
                    version = theirs.map_or(0, |k| k.max_version.min(*API_VERSIONS.end()));
                }
                code => {
                    return Err(WeirError::external(format!(
                        "Kafka broker {}: ApiVersions failed: {}",
                        self.broker,
                        error_name(code)
                    )))
                }
            }
        }
        Err(WeirError::external(format!("Kafka broker {}: could not agree on an ApiVersions version", self.broker)))
    }

    /// SASL (KIP-152: `SaslHandshake` v1, then the mechanism's messages in `SaslAuthenticate`).
    fn authenticate(&mut self, sasl: &Sasl) -> Result<()> {
        let refused = |broker: &str, why: String| {
            WeirError::user(format!(
                "Kafka broker {broker}: SASL {} authentication as '{}' failed: {why}",
                sasl.mechanism.name(),
                sasl.username
            ))
        };
        let version = self.version::<SaslHandshakeRequest>(1..=1)?;
        let handshake = self.call(
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(sasl.mechanism.name())),
            version,
        )?;
        if handshake.error_code != 0 {
            let offered: Vec<&str> = handshake.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(refused(
                &self.broker,
                format!("{} (the broker offers {})", error_name(handshake.error_code), offered.join(", ")),
            ));
        }
        let version = self.version::<SaslAuthenticateRequest>(0..=2)?;
        let mut exchange = Exchange::new(sasl).map_err(|e| refused(&self.broker, e))?;
        let mut received = Bytes::new();
        while let Some(message) = exchange.step(sasl, &received).map_err(|e| refused(&self.broker, e))? {
            let response =
                self.call(&SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(message)), version)?;
            if response.error_code != 0 {
                let detail = response.error_message.as_ref().map(|m| format!(": {}", m.as_str())).unwrap_or_default();
                return Err(refused(&self.broker, format!("{}{detail}", error_name(response.error_code))));
            }
            received = response.auth_bytes;
        }
        log::debug!(
            "Kafka broker {}: authenticated with SASL {} as '{}'",
            self.broker,
            sasl.mechanism.name(),
            sasl.username
        );
        Ok(())
    }
}

/// The TLS handshake, completed here so that a certificate problem is reported as one.
fn handshake(
    broker: &str,
    config: &std::sync::Arc<rustls::ClientConfig>,
    mut tcp: TcpStream,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    let host = broker.rsplit_once(':').map_or(broker, |(host, _)| host).trim_start_matches('[').trim_end_matches(']');
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| WeirError::user(format!("Kafka broker {broker}: '{host}' is not a TLS server name: {e}")))?;
    let mut tls = rustls::ClientConnection::new(config.clone(), name)
        .map_err(|e| WeirError::internal(format!("Kafka broker {broker}: TLS: {e}")))?;
    while tls.is_handshaking() {
        if let Err(e) = tls.complete_io(&mut tcp) {
            let tls_error = e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>());
            return Err(match tls_error {
                // The certificate or the protocol: only the settings can fix it.
                Some(error) => WeirError::user(format!("Kafka broker {broker}: TLS handshake failed: {error}")),
                None => WeirError::external(format!("Kafka broker {broker}: TLS handshake failed: {e}")),
            });
        }
    }
    Ok(rustls::StreamOwned::new(tls, tcp))
}

fn api_name(key: i16) -> String {
    ApiKey::try_from(key).map_or_else(|_| format!("API {key}"), |k| format!("{k:?}"))
}

/// A Kafka error code with its name (`58 (SaslAuthenticationFailed)`).
pub fn error_name(code: i16) -> String {
    match kafka_protocol::ResponseError::try_from_code(code) {
        Some(e) => format!("error {code} ({e:?})"),
        None => format!("error {code}"),
    }
}
