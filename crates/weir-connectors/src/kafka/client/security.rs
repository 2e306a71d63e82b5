//! A table's Kafka security settings, read from the same librdkafka properties that
//! librdkafka gets (`properties.security.protocol`, `properties.sasl.*`, `properties.ssl.*`),
//! so that Weir's own connections ([`super::Connection`]) authenticate exactly as the
//! table's consumers and producers do.
//!
//! TLS is rustls with ring (the versions object_store's HTTP client already brings in);
//! certificates and keys are PEM, as librdkafka reads them.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The `username` and `password` of a Java client's `sasl.jaas.config`
/// (`org.apache.kafka.common.security.plain.PlainLoginModule required username="u"
/// password="p";`), quoted with `"` or `'`.
pub fn jaas_credentials(jaas: &str) -> Option<(String, String)> {
    let value = |name: &str| -> Option<String> {
        let mut rest = jaas;
        loop {
            let at = rest.find(name)?;
            let before = rest[..at].chars().last();
            rest = &rest[at + name.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let after = rest.trim_start().strip_prefix('=')?.trim_start();
            let quote = after.chars().next().filter(|c| *c == '"' || *c == '\'')?;
            let body = &after[1..];
            return body.find(quote).map(|end| body[..end].to_string());
        }
    };
    Some((value("username")?, value("password")?))
}

/// `security.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

/// `sasl.mechanism`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// SASL credentials. `Debug` leaves the password out: errors and logs never show it.
#[derive(Clone)]
pub struct Sasl {
    pub mechanism: Mechanism,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Sasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SASL {} as '{}'", self.mechanism.name(), self.username)
    }
}

/// How to connect: TLS (its client configuration) and SASL, each if the protocol asks.
#[derive(Clone, Debug)]
pub struct Security {
    pub protocol: Protocol,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub sasl: Option<Sasl>,
}

impl Security {
    pub fn plaintext() -> Self {
        Self { protocol: Protocol::Plaintext, tls: None, sasl: None }
    }
}

/// A setting that cannot be used: the property (librdkafka's name) and why.
#[derive(Debug)]
pub struct Invalid {
    pub property: &'static str,
    pub message: String,
}

fn invalid(property: &'static str, message: impl Into<String>) -> Invalid {
    Invalid { property, message: message.into() }
}

/// The security settings among `get`'s librdkafka properties.
pub fn parse(get: &dyn Fn(&str) -> Option<String>) -> Result<Security, Invalid> {
    let protocol = match get("security.protocol").map(|p| p.to_ascii_uppercase()).as_deref() {
        None | Some("PLAINTEXT") => Protocol::Plaintext,
        Some("SSL") => Protocol::Ssl,
        Some("SASL_PLAINTEXT") => Protocol::SaslPlaintext,
        Some("SASL_SSL") => Protocol::SaslSsl,
        Some(other) => {
            return Err(invalid(
                "security.protocol",
                format!("'{other}' is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
            ))
        }
    };
    let sasl = match protocol {
        Protocol::SaslPlaintext | Protocol::SaslSsl => Some(sasl(get)?),
        _ => None,
    };
    let tls = match protocol {
        Protocol::Ssl | Protocol::SaslSsl => Some(Arc::new(tls(get)?)),
        _ => None,
    };
    Ok(Security { protocol, tls, sasl })
}

fn sasl(get: &dyn Fn(&str) -> Option<String>) -> Result<Sasl, Invalid> {
    let (property, mechanism) = match (get("sasl.mechanism"), get("sasl.mechanisms")) {
        (Some(m), _) => ("sasl.mechanism", m),
        (None, Some(m)) => ("sasl.mechanisms", m),
        // librdkafka's default.
        (None, None) => ("sasl.mechanism", "GSSAPI".to_string()),
    };
    let mechanism = match mechanism.to_ascii_uppercase().as_str() {
        "PLAIN" => Mechanism::Plain,
        "SCRAM-SHA-256" => Mechanism::ScramSha256,
        "SCRAM-SHA-512" => Mechanism::ScramSha512,
        other => {
            return Err(invalid(
                property,
                format!("'{other}' is not supported; the mechanisms are PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512"),
            ))
        }
    };
    let username =
        get("sasl.username").ok_or_else(|| invalid("sasl.username", format!("SASL {} needs it", mechanism.name())))?;
    let password =
        get("sasl.password").ok_or_else(|| invalid("sasl.password", format!("SASL {} needs it", mechanism.name())))?;
    Ok(Sasl { mechanism, username, password })
}

fn tls(get: &dyn Fn(&str) -> Option<String>) -> Result<rustls::ClientConfig, Invalid> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("security.protocol", e.to_string()))?;
    let roots = roots(get)?;
    let check_chain =
        !matches!(get("enable.ssl.certificate.verification").map(|v| v.to_ascii_lowercase()).as_deref(), Some("false"));
    let check_name = match get("ssl.endpoint.identification.algorithm").map(|v| v.to_ascii_lowercase()).as_deref() {
        None | Some("https") => true,
        Some("none") => false,
        Some(other) => {
            return Err(invalid("ssl.endpoint.identification.algorithm", format!("'{other}' is not 'https' or 'none'")))
        }
    };
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| invalid("ssl.ca.location", format!("no usable CA certificate: {e}")))?;
    let builder =
        builder.dangerous().with_custom_certificate_verifier(Arc::new(Verifier { webpki, check_chain, check_name }));
    let certs = match (get("ssl.certificate.location"), get("ssl.certificate.pem")) {
        (Some(path), _) => Some(
            CertificateDer::pem_file_iter(&path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| invalid("ssl.certificate.location", format!("cannot read '{path}': {e}")))?,
        ),
        (None, Some(pem)) => Some(
            CertificateDer::pem_slice_iter(pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid("ssl.certificate.pem", e.to_string()))?,
        ),
        (None, None) => None,
    };
    let key =
        match (get("ssl.key.location"), get("ssl.key.pem")) {
            (Some(path), _) => Some(PrivateKeyDer::from_pem_file(&path).map_err(|e| {
                invalid("ssl.key.location", format!("cannot read an unencrypted key from '{path}': {e}"))
            })?),
            (None, Some(pem)) => Some(
                PrivateKeyDer::from_pem_slice(pem.as_bytes())
                    .map_err(|e| invalid("ssl.key.pem", format!("not an unencrypted PEM key: {e}")))?,
            ),
            (None, None) => None,
        };
    if get("ssl.key.password").is_some() {
        // rustls reads unencrypted keys only; librdkafka would decrypt, so the job would run
        // until its first recovery, then fail: refused before it starts.
        return Err(invalid("ssl.key.password", "encrypted client keys are not supported; give an unencrypted key"));
    }
    match (certs, key) {
        (Some(certs), Some(key)) => builder
            .with_client_auth_cert(certs, key)
            .map_err(|e| invalid("ssl.key.location", format!("the key does not fit the certificate: {e}"))),
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some(_), None) => Err(invalid("ssl.key.location", "a client certificate needs its key")),
        (None, Some(_)) => Err(invalid("ssl.certificate.location", "a client key needs its certificate")),
    }
}

/// `ssl.ca.location` (a PEM file) or `ssl.ca.pem`; without either, the system's store.
fn roots(get: &dyn Fn(&str) -> Option<String>) -> Result<RootCertStore, Invalid> {
    let mut roots = RootCertStore::empty();
    // The property the certificates came from, for the error if none can be used.
    let (property, certs): (&'static str, Vec<CertificateDer<'static>>) =
        match (get("ssl.ca.location"), get("ssl.ca.pem")) {
            (Some(path), _) => (
                "ssl.ca.location",
                CertificateDer::pem_file_iter(&path)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| invalid("ssl.ca.location", format!("cannot read '{path}': {e}")))?,
            ),
            (None, Some(pem)) => (
                "ssl.ca.pem",
                CertificateDer::pem_slice_iter(pem.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| invalid("ssl.ca.pem", e.to_string()))?,
            ),
            (None, None) => ("ssl.ca.location", rustls_native_certs::load_native_certs().certs),
        };
    let (_, ignored) = roots.add_parsable_certificates(certs);
    if roots.is_empty() {
        return Err(invalid(property, format!("no CA certificate could be read ({ignored} unparsable)")));
    }
    Ok(roots)
}

/// WebPKI verification, with librdkafka's two switches: the host name
/// (`ssl.endpoint.identification.algorithm`) and the whole check
/// (`enable.ssl.certificate.verification`).
#[derive(Debug)]
struct Verifier {
    webpki: Arc<WebPkiServerVerifier>,
    check_chain: bool,
    check_name: bool,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if !self.check_chain {
            return Ok(ServerCertVerified::assertion());
        }
        match self.webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parsed(props: &[(&str, &str)]) -> Result<Security, Invalid> {
        let map: HashMap<String, String> = props.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        parse(&|k| map.get(k).cloned())
    }

    #[test]
    fn settings_are_read_as_librdkafka_reads_them() {
        let s = parsed(&[]).expect("plaintext");
        assert_eq!(s.protocol, Protocol::Plaintext);
        let s = parsed(&[
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanisms", "scram-sha-512"),
            ("sasl.username", "u"),
            ("sasl.password", "hunter2"),
        ])
        .expect("SASL");
        assert_eq!(s.protocol, Protocol::SaslPlaintext);
        let sasl = s.sasl.expect("credentials");
        assert_eq!(sasl.mechanism, Mechanism::ScramSha512);
        assert!(!format!("{sasl:?}").contains("hunter2"), "the password is never shown");
    }

    #[test]
    fn jaas_credentials_are_read_in_either_quotes() {
        let plain =
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="s3cr=t;";"#;
        assert_eq!(jaas_credentials(plain), Some(("alice".into(), "s3cr=t;".into())));
        let scram = "org.apache.kafka.common.security.scram.ScramLoginModule required password='p' username = 'u';";
        assert_eq!(jaas_credentials(scram), Some(("u".into(), "p".into())));
        assert_eq!(jaas_credentials("Module required tokenusername=\"x\";"), None);
        assert_eq!(jaas_credentials("Module required username=\"x\";"), None, "no password");
    }

    #[test]
    fn unusable_settings_name_their_property() {
        let e = parsed(&[("security.protocol", "SASL_SSL"), ("sasl.mechanism", "GSSAPI")]).unwrap_err();
        assert_eq!(e.property, "sasl.mechanism");
        let e = parsed(&[("security.protocol", "SASL_PLAINTEXT"), ("sasl.mechanism", "PLAIN"), ("sasl.username", "u")])
            .unwrap_err();
        assert_eq!(e.property, "sasl.password");
        let e = parsed(&[("security.protocol", "TLS")]).unwrap_err();
        assert_eq!(e.property, "security.protocol");
        let e = parsed(&[("security.protocol", "SSL"), ("ssl.ca.location", "/nonexistent/ca.pem")]).unwrap_err();
        assert_eq!(e.property, "ssl.ca.location");
        assert!(e.message.contains("/nonexistent/ca.pem"), "{}", e.message);
        // A CA given inline, so that what follows does not depend on the system's store.
        let ca = "-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIUQ8H1n3bN0m2v3GgWbV7Q3yZQnq0wCgYIKoZIzj0EAwIw\n-----END CERTIFICATE-----\n";
        let e = parsed(&[("security.protocol", "SSL"), ("ssl.ca.pem", ca)]).unwrap_err();
        assert_eq!(e.property, "ssl.ca.pem", "{}", e.message);
        let e = parsed(&[("security.protocol", "SSL"), ("ssl.key.password", "k3y")]).unwrap_err();
        assert_eq!(e.property, "ssl.key.password", "an encrypted key is refused: {}", e.message);
        assert!(!e.message.contains("k3y"));
        let e = parsed(&[("security.protocol", "SSL"), ("ssl.key.pem", "not a key")]).unwrap_err();
        assert_eq!(e.property, "ssl.key.pem");
    }
}
