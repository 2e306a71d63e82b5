//! A TLS and SASL front for the test broker, which has neither (no Kafka broker that has them
//! can be installed here): a stand-in for a secured cluster's listener. Clients connect to it
//! with TLS (a test CA's certificate for `localhost`, optionally demanding a client
//! certificate) and authenticate with SASL PLAIN or SCRAM-SHA-256/512, as a Kafka broker's
//! `SASL_SSL` listener asks; it answers `SaslHandshake` and `SaslAuthenticate` itself,
//! refuses anything else before authentication (closing the connection, as a broker does),
//! and forwards every later request to the broker unchanged. Responses that name brokers
//! (Metadata, FindCoordinator) are rewritten to name the front, and ApiVersions to list the
//! SASL requests.
//!
//! It runs on its own thread and runtime, so that a test blocked on a child process cannot stall it.
//! Certificates are made by the `openssl` command (Debian's package, from scripts/setup.sh).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, FindCoordinatorResponse, MetadataResponse, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use ring::{digest, hmac, pbkdf2};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// What the front demands.
#[derive(Clone)]
pub struct Demands {
    pub tls: bool,
    /// A client certificate signed by the test CA.
    pub client_certificate: bool,
    /// SASL mechanisms offered (none: no SASL).
    pub mechanisms: Vec<&'static str>,
    /// Users and their passwords.
    pub users: Vec<(&'static str, &'static str)>,
    /// Versions the front says the broker speaks, in place of the broker's own (an older
    /// broker's, say): API, lowest, highest.
    pub versions: Vec<(ApiKey, i16, i16)>,
}

pub struct Front {
    /// `localhost:PORT`: the name the broker certificate is for.
    pub bootstrap: String,
    pub port: u16,
    /// The test CA (`ca.pem`) and a client certificate and key it signed (`client.pem`,
    /// `client.key`).
    pub certs: PathBuf,
    /// Dropped with the front: its thread and connections end.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Front {
    pub fn start(upstream: &str, dir: &Path, demands: Demands) -> Front {
        let certs = dir.join("certs");
        make_certificates(&certs);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the front");
        listener.set_nonblocking(true).expect("non-blocking");
        let port = listener.local_addr().expect("addr").port();
        let acceptor = demands.tls.then(|| tokio_rustls::TlsAcceptor::from(Arc::new(server_tls(&certs, &demands))));
        let shared = Arc::new(Shared { upstream: upstream.to_string(), port, demands });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("the front's runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let accepting = async {
                    loop {
                        let Ok((tcp, _)) = listener.accept().await else { continue };
                        // Frames go out as they are written (no Nagle delay on small ones).
                        let _ = tcp.set_nodelay(true);
                        let (acceptor, shared) = (acceptor.clone(), shared.clone());
                        tokio::spawn(async move {
                            // A client that fails the handshake or authentication is dropped.
                            match acceptor {
                                Some(acceptor) => {
                                    if let Ok(tls) = acceptor.accept(tcp).await {
                                        let _ = serve(tls, &shared).await;
                                    }
                                }
                                None => {
                                    let _ = serve(tcp, &shared).await;
                                }
                            }
                        });
                    }
                };
                tokio::select! {
                    _ = accepting => {}
                    _ = stopped => {}
                }
            });
        });
        Front { bootstrap: format!("localhost:{port}"), port, certs, _stop: stop }
    }

    /// The `properties.*` table options that reach the front as `user`.
    pub fn properties(&self, mechanism: &str, user: &str, password: &str) -> String {
        format!(
            "'properties.bootstrap.servers' = '{}', 'properties.security.protocol' = 'SASL_SSL', \
             'properties.sasl.mechanism' = '{mechanism}', 'properties.sasl.username' = '{user}', \
             'properties.sasl.password' = '{password}', 'properties.ssl.ca.location' = '{}'",
            self.bootstrap,
            self.certs.join("ca.pem").display()
        )
    }
}

struct Shared {
    upstream: String,
    port: u16,
    demands: Demands,
}

fn make_certificates(dir: &Path) {
    std::fs::create_dir_all(dir).expect("certs dir");
    let run = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output().expect("run openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    run(&[
        &["req", "-x509"][..],
        &ec,
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=weir-test-ca",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    ]
    .concat());
    for (name, usage) in [("broker", "serverAuth"), ("client", "clientAuth")] {
        run(&[
            &["req"][..],
            &ec,
            &["-keyout", &format!("{name}.key"), "-out", &format!("{name}.csr"), "-subj", &format!("/CN={name}")],
        ]
        .concat());
        std::fs::write(
            dir.join(format!("{name}.ext")),
            format!("subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage={usage}\n"),
        )
        .expect("extensions");
        run(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
        ]);
    }
}

fn server_tls(certs: &Path, demands: &Demands) -> rustls::ServerConfig {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(certs.join("broker.pem"))
        .expect("broker.pem")
        .collect::<Result<_, _>>()
        .expect("broker certificate");
    let key = PrivateKeyDer::from_pem_file(certs.join("broker.key")).expect("broker key");
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("protocol versions");
    let builder = if demands.client_certificate {
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_file_iter(certs.join("ca.pem")).expect("ca.pem") {
            roots.add(ca.expect("CA certificate")).expect("add CA");
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .expect("verifier");
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    builder.with_single_cert(chain, key).expect("server certificate")
}

async fn read_frame(s: &mut (impl AsyncRead + Unpin)) -> std::io::Result<Bytes> {
    let size = s.read_i32().await?;
    let mut frame = vec![0u8; usize::try_from(size).map_err(|_| std::io::ErrorKind::InvalidData)?];
    s.read_exact(&mut frame).await?;
    Ok(Bytes::from(frame))
}

/// A frame in one write: size and body in one TLS record and one segment.
async fn write_frame(s: &mut (impl AsyncWrite + Unpin), frame: &[u8]) -> std::io::Result<()> {
    let mut framed = Vec::with_capacity(4 + frame.len());
    framed.extend_from_slice(&(frame.len() as i32).to_be_bytes());
    framed.extend_from_slice(frame);
    s.write_all(&framed).await?;
    s.flush().await
}

/// A response frame: the header for `key` at `version`, then `body`.
fn response<T: Encodable>(key: ApiKey, version: i16, correlation_id: i32, body: &T) -> Bytes {
    let mut out = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut out, key.response_header_version(version))
        .expect("header");
    body.encode(&mut out, version).expect("body");
    out.freeze()
}

/// One client connection, served in order, as a broker serves one request at a time.
async fn serve(mut client: impl AsyncRead + AsyncWrite + Unpin, shared: &Shared) -> std::io::Result<()> {
    let mut broker = tokio::net::TcpStream::connect(&shared.upstream).await?;
    broker.set_nodelay(true)?;
    let mut authenticated = shared.demands.mechanisms.is_empty();
    let mut mechanism: Option<&'static str> = None;
    let mut scram: Option<ScramServer> = None;
    loop {
        let frame = read_frame(&mut client).await?;
        let mut body = frame.clone();
        let header = kafka_protocol::protocol::decode_request_header_from_buffer(&mut body)
            .map_err(|_| std::io::ErrorKind::InvalidData)?;
        let (version, id) = (header.request_api_version, header.correlation_id);
        let key = ApiKey::try_from(header.request_api_key).map_err(|_| std::io::ErrorKind::InvalidData)?;
        match key {
            ApiKey::SaslHandshake => {
                let request =
                    SaslHandshakeRequest::decode(&mut body, version).map_err(|_| std::io::ErrorKind::InvalidData)?;
                let offered = shared.demands.mechanisms.iter().find(|m| **m == request.mechanism.as_str()).copied();
                mechanism = offered;
                let answer = SaslHandshakeResponse::default()
                    .with_error_code(if offered.is_some() { 0 } else { 33 })
                    .with_mechanisms(shared.demands.mechanisms.iter().map(|m| StrBytes::from_static_str(m)).collect());
                write_frame(&mut client, &response(key, version, id, &answer)).await?;
            }
            ApiKey::SaslAuthenticate => {
                let request =
                    SaslAuthenticateRequest::decode(&mut body, version).map_err(|_| std::io::ErrorKind::InvalidData)?;
                let step = match mechanism {
                    Some("PLAIN") => plain(&request.auth_bytes, &shared.demands.users).map(|()| None),
                    Some(m) => match scram.take() {
                        None => ScramServer::first(m, &request.auth_bytes, &shared.demands.users).map(|(s, reply)| {
                            scram = Some(s);
                            Some(reply)
                        }),
                        Some(s) => s.last(&request.auth_bytes).map(Some),
                    },
                    None => Err(()),
                };
                let answer = match &step {
                    Ok(reply) => {
                        authenticated = scram.is_none();
                        SaslAuthenticateResponse::default()
                            .with_auth_bytes(reply.clone().map(Bytes::from).unwrap_or_default())
                    }
                    Err(()) => SaslAuthenticateResponse::default().with_error_code(58).with_error_message(Some(
                        StrBytes::from_string(format!(
                        "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
                        mechanism.unwrap_or("?")
                    )),
                    )),
                };
                write_frame(&mut client, &response(key, version, id, &answer)).await?;
                if step.is_err() {
                    return Ok(());
                }
            }
            // A request above the versions the front says the broker speaks: an older
            // broker answers ApiVersions in v0 with UNSUPPORTED_VERSION and its versions
            // (KIP-511), and closes the connection on anything else.
            _ if above(&shared.demands.versions, key, version) => {
                if key != ApiKey::ApiVersions {
                    return Ok(());
                }
                let mut ask = BytesMut::new();
                RequestHeader::default()
                    .with_request_api_key(key as i16)
                    .with_correlation_id(id)
                    .encode(&mut ask, 1)
                    .map_err(|_| std::io::ErrorKind::InvalidData)?;
                write_frame(&mut broker, &ask).await?;
                let answer = read_frame(&mut broker).await?;
                let mut listed =
                    with_versions(answer, 0, &shared.demands.versions).ok_or(std::io::ErrorKind::InvalidData)?;
                let header = ResponseHeader::decode(&mut listed, 0).map_err(|_| std::io::ErrorKind::InvalidData)?;
                let body = ApiVersionsResponse::decode(&mut listed, 0).map_err(|_| std::io::ErrorKind::InvalidData)?;
                let refusal = response(key, 0, header.correlation_id, &body.with_error_code(35));
                write_frame(&mut client, &refusal).await?;
            }
            ApiKey::ApiVersions => {
                write_frame(&mut broker, &frame).await?;
                let answer = read_frame(&mut broker).await?;
                let rewritten = with_versions(answer.clone(), version, &shared.demands.versions);
                write_frame(&mut client, &rewritten.unwrap_or(answer)).await?;
            }
            // A broker closes a connection that sends anything else before authenticating.
            _ if !authenticated => return Ok(()),
            _ => {
                write_frame(&mut broker, &frame).await?;
                let answer = read_frame(&mut broker).await?;
                let rewritten = match key {
                    ApiKey::Metadata => naming_the_front(answer.clone(), key, version, shared.port),
                    ApiKey::FindCoordinator => naming_the_front(answer.clone(), key, version, shared.port),
                    _ => None,
                };
                write_frame(&mut client, &rewritten.unwrap_or(answer)).await?;
            }
        }
    }
}

/// An ApiVersions response that also lists SaslHandshake v0–1 and SaslAuthenticate v0–2, and
/// `versions` in place of the broker's.
fn with_versions(mut frame: Bytes, version: i16, versions: &[(ApiKey, i16, i16)]) -> Option<Bytes> {
    let header = ResponseHeader::decode(&mut frame, ApiKey::ApiVersions.response_header_version(version)).ok()?;
    let mut body = ApiVersionsResponse::decode(&mut frame, version).ok()?;
    if body.error_code != 0 {
        return None;
    }
    let sasl = [(ApiKey::SaslHandshake, 0, 1), (ApiKey::SaslAuthenticate, 0, 2)];
    for (key, min, max) in sasl.iter().chain(versions) {
        body.api_keys.retain(|k| k.api_key != *key as i16);
        body.api_keys
            .push(ApiVersion::default().with_api_key(*key as i16).with_min_version(*min).with_max_version(*max));
    }
    Some(response(ApiKey::ApiVersions, version, header.correlation_id, &body))
}

fn above(versions: &[(ApiKey, i16, i16)], key: ApiKey, version: i16) -> bool {
    versions.iter().any(|(k, _, max)| *k == key && version > *max)
}

/// A Metadata or FindCoordinator response with every broker address replaced by the front's.
fn naming_the_front(mut frame: Bytes, key: ApiKey, version: i16, port: u16) -> Option<Bytes> {
    let header = ResponseHeader::decode(&mut frame, key.response_header_version(version)).ok()?;
    let host = StrBytes::from_static_str("localhost");
    let port = i32::from(port);
    if key == ApiKey::Metadata {
        let mut body = MetadataResponse::decode(&mut frame, version).ok()?;
        for b in &mut body.brokers {
            b.host = host.clone();
            b.port = port;
        }
        Some(response(key, version, header.correlation_id, &body))
    } else {
        let mut body = FindCoordinatorResponse::decode(&mut frame, version).ok()?;
        if body.error_code == 0 && version < 4 {
            body.host = host.clone();
            body.port = port;
        }
        for c in &mut body.coordinators {
            if c.error_code == 0 {
                c.host = host.clone();
                c.port = port;
            }
        }
        Some(response(key, version, header.correlation_id, &body))
    }
}

fn plain(message: &[u8], users: &[(&str, &str)]) -> Result<(), ()> {
    let parts: Vec<&[u8]> = message.split(|b| *b == 0).collect();
    match parts.as_slice() {
        [_, user, password] if users.iter().any(|(u, p)| u.as_bytes() == *user && p.as_bytes() == *password) => Ok(()),
        _ => Err(()),
    }
}

/// The server side of SCRAM (RFC 5802), with a fixed salt and 4096 iterations.
struct ScramServer {
    sha512: bool,
    password: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

const SALT: &[u8] = b"weir-test-salt";

impl ScramServer {
    fn first(mechanism: &str, message: &[u8], users: &[(&str, &str)]) -> Result<(Self, Vec<u8>), ()> {
        let text = std::str::from_utf8(message).map_err(|_| ())?;
        let bare = text.strip_prefix("n,,").ok_or(())?;
        let user = attr(bare, 'n')?.replace("=2C", ",").replace("=3D", "=");
        let client_nonce = attr(bare, 'r')?;
        let password = users.iter().find(|(u, _)| *u == user).map(|(_, p)| p.to_string()).ok_or(())?;
        let nonce = format!("{client_nonce}front{}", std::process::id());
        let server_first = format!("r={nonce},s={},i=4096", BASE64.encode(SALT));
        let reply = server_first.clone().into_bytes();
        Ok((
            Self {
                sha512: mechanism == "SCRAM-SHA-512",
                password,
                client_first_bare: bare.to_string(),
                server_first,
                nonce,
            },
            reply,
        ))
    }

    fn last(self, message: &[u8]) -> Result<Vec<u8>, ()> {
        let text = std::str::from_utf8(message).map_err(|_| ())?;
        let (without_proof, proof) = text.rsplit_once(",p=").ok_or(())?;
        if attr(without_proof, 'r')? != self.nonce {
            return Err(());
        }
        let (p, h, d) = if self.sha512 {
            (pbkdf2::PBKDF2_HMAC_SHA512, hmac::HMAC_SHA512, &digest::SHA512)
        } else {
            (pbkdf2::PBKDF2_HMAC_SHA256, hmac::HMAC_SHA256, &digest::SHA256)
        };
        let mut salted = vec![0u8; d.output_len()];
        pbkdf2::derive(p, std::num::NonZeroU32::new(4096).ok_or(())?, SALT, self.password.as_bytes(), &mut salted);
        let salted = hmac::Key::new(h, &salted);
        let auth_message = format!("{},{},{without_proof}", self.client_first_bare, self.server_first);
        let client_key = hmac::sign(&salted, b"Client Key");
        let stored_key = digest::digest(d, client_key.as_ref());
        let signature = hmac::sign(&hmac::Key::new(h, stored_key.as_ref()), auth_message.as_bytes());
        let proof = BASE64.decode(proof).map_err(|_| ())?;
        let recovered: Vec<u8> = proof.iter().zip(signature.as_ref()).map(|(a, b)| a ^ b).collect();
        if digest::digest(d, &recovered).as_ref() != stored_key.as_ref() {
            return Err(());
        }
        let server_key = hmac::sign(&salted, b"Server Key");
        let server_signature = hmac::sign(&hmac::Key::new(h, server_key.as_ref()), auth_message.as_bytes());
        Ok(format!("v={}", BASE64.encode(server_signature.as_ref())).into_bytes())
    }
}

fn attr(message: &str, name: char) -> Result<&str, ()> {
    message.split(',').find_map(|p| p.strip_prefix(name).and_then(|r| r.strip_prefix('='))).ok_or(())
}
