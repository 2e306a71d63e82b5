//! The client side of SASL PLAIN (RFC 4616) and SCRAM (RFC 5802, 7677), as Kafka carries
//! them in `SaslAuthenticate` requests (KIP-152). The cryptography is ring's (PBKDF2, HMAC,
//! SHA-2); what is written here is the message format.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};

use super::security::{Mechanism, Sasl};

/// SCRAM iteration counts outside this range are refused (Kafka's minimum is 4096): a
/// broker cannot make the client spin for minutes.
const ITERATIONS: std::ops::RangeInclusive<u32> = 4096..=1_000_000;

/// One SASL exchange: the messages to send, each given the broker's previous answer.
pub enum Exchange {
    Plain { sent: bool },
    Scram(Box<Scram>),
}

impl Exchange {
    pub fn new(sasl: &Sasl) -> Result<Self, String> {
        Ok(match sasl.mechanism {
            Mechanism::Plain => Exchange::Plain { sent: false },
            Mechanism::ScramSha256 | Mechanism::ScramSha512 => {
                let mut nonce = [0u8; 24];
                ring::rand::SystemRandom::new().fill(&mut nonce).map_err(|_| "no random nonce".to_string())?;
                Exchange::Scram(Box::new(Scram::new(sasl.mechanism, &BASE64.encode(nonce))))
            }
        })
    }

    /// The next message to send, given the broker's last one (empty before the first); `None`
    /// once the exchange is complete and the broker proved it knows the password.
    pub fn step(&mut self, sasl: &Sasl, received: &[u8]) -> Result<Option<Vec<u8>>, String> {
        match self {
            Exchange::Plain { sent: true } => Ok(None),
            Exchange::Plain { sent } => {
                *sent = true;
                Ok(Some(format!("\0{}\0{}", sasl.username, sasl.password).into_bytes()))
            }
            Exchange::Scram(scram) => scram.step(sasl, received),
        }
    }
}

enum ScramState {
    First,
    Final { client_first_bare: String },
    Verify { server_signature: Vec<u8> },
    Done,
}

pub struct Scram {
    mechanism: Mechanism,
    nonce: String,
    state: ScramState,
}

impl Scram {
    pub fn new(mechanism: Mechanism, nonce: &str) -> Self {
        Self { mechanism, nonce: nonce.to_string(), state: ScramState::First }
    }

    fn algorithms(&self) -> (pbkdf2::Algorithm, hmac::Algorithm, &'static digest::Algorithm) {
        match self.mechanism {
            Mechanism::ScramSha512 => (pbkdf2::PBKDF2_HMAC_SHA512, hmac::HMAC_SHA512, &digest::SHA512),
            _ => (pbkdf2::PBKDF2_HMAC_SHA256, hmac::HMAC_SHA256, &digest::SHA256),
        }
    }

    pub fn step(&mut self, sasl: &Sasl, received: &[u8]) -> Result<Option<Vec<u8>>, String> {
        match std::mem::replace(&mut self.state, ScramState::Done) {
            ScramState::First => {
                let bare = format!("n={},r={}", escape(&sasl.username), self.nonce);
                let message = format!("n,,{bare}").into_bytes();
                self.state = ScramState::Final { client_first_bare: bare };
                Ok(Some(message))
            }
            ScramState::Final { client_first_bare } => {
                let server_first =
                    std::str::from_utf8(received).map_err(|_| "the server's first message is not UTF-8")?;
                let nonce = attribute(server_first, 'r')?;
                if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
                    return Err("the server's nonce does not extend the client's".into());
                }
                let salt = BASE64.decode(attribute(server_first, 's')?).map_err(|_| "the salt is not base64")?;
                let iterations: u32 =
                    attribute(server_first, 'i')?.parse().map_err(|_| "the iteration count is not a number")?;
                if !ITERATIONS.contains(&iterations) {
                    return Err(format!("iteration count {iterations} is outside {ITERATIONS:?}"));
                }
                let (pbkdf2_algorithm, hmac_algorithm, digest_algorithm) = self.algorithms();
                let mut salted = vec![0u8; digest_algorithm.output_len()];
                let rounds = std::num::NonZeroU32::new(iterations).ok_or("zero iterations")?;
                pbkdf2::derive(pbkdf2_algorithm, rounds, &salt, sasl.password.as_bytes(), &mut salted);
                let salted = hmac::Key::new(hmac_algorithm, &salted);
                let client_key = hmac::sign(&salted, b"Client Key");
                let stored_key = digest::digest(digest_algorithm, client_key.as_ref());
                let without_proof = format!("c=biws,r={nonce}");
                let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
                let signature =
                    hmac::sign(&hmac::Key::new(hmac_algorithm, stored_key.as_ref()), auth_message.as_bytes());
                let proof: Vec<u8> = client_key.as_ref().iter().zip(signature.as_ref()).map(|(a, b)| a ^ b).collect();
                let server_key = hmac::sign(&salted, b"Server Key");
                let server_signature =
                    hmac::sign(&hmac::Key::new(hmac_algorithm, server_key.as_ref()), auth_message.as_bytes());
                self.state = ScramState::Verify { server_signature: server_signature.as_ref().to_vec() };
                Ok(Some(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes()))
            }
            ScramState::Verify { server_signature } => {
                let server_final =
                    std::str::from_utf8(received).map_err(|_| "the server's final message is not UTF-8")?;
                if let Ok(error) = attribute(server_final, 'e') {
                    return Err(format!("the server refused: {error}"));
                }
                let verifier =
                    BASE64.decode(attribute(server_final, 'v')?).map_err(|_| "the verifier is not base64")?;
                if verifier != server_signature {
                    return Err("the server's signature is wrong: it does not know the password".into());
                }
                Ok(None)
            }
            ScramState::Done => Ok(None),
        }
    }
}

/// `saslname` (RFC 5802 §5.1): `=` and `,` escaped.
fn escape(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// The value of attribute `name` in a SCRAM message (`a=value,b=value…`).
fn attribute(message: &str, name: char) -> Result<&str, String> {
    message
        .split(',')
        .find_map(|part| part.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
        .ok_or_else(|| format!("the server's message has no '{name}' attribute"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> Sasl {
        Sasl { mechanism: Mechanism::ScramSha256, username: "user".into(), password: "pencil".into() }
    }

    /// RFC 7677 §3's example exchange, byte for byte.
    #[test]
    fn scram_sha_256_follows_the_rfc_example() {
        let sasl = user();
        let mut scram = Scram::new(Mechanism::ScramSha256, "rOprNGfwEbeRWgbNEkqO");
        let first = scram.step(&sasl, b"").expect("first").expect("a message");
        assert_eq!(first, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let last = scram.step(&sasl, server_first).expect("final").expect("a message");
        assert_eq!(
            String::from_utf8(last).expect("utf8"),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert_eq!(scram.step(&sasl, b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=").expect("verified"), None);
    }

    #[test]
    fn a_server_that_does_not_know_the_password_or_misbehaves_is_refused() {
        let sasl = user();
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let mut scram = Scram::new(Mechanism::ScramSha256, "rOprNGfwEbeRWgbNEkqO");
        scram.step(&sasl, b"").expect("first");
        scram.step(&sasl, server_first).expect("final");
        assert!(scram.step(&sasl, b"v=AAAA").is_err(), "a wrong server signature");

        let mut scram = Scram::new(Mechanism::ScramSha256, "rOprNGfwEbeRWgbNEkqO");
        scram.step(&sasl, b"").expect("first");
        assert!(scram.step(&sasl, b"r=other,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096").is_err(), "a foreign nonce");
        let mut scram = Scram::new(Mechanism::ScramSha256, "abc");
        scram.step(&sasl, b"").expect("first");
        assert!(scram.step(&sasl, b"r=abcd,s=AAAA,i=999999999").is_err(), "too many iterations");
        let mut scram = Scram::new(Mechanism::ScramSha256, "abc");
        scram.step(&sasl, b"").expect("first");
        assert!(scram.step(&sasl, b"r=abcd,s=AAAA").is_err(), "no iteration count");
    }

    #[test]
    fn plain_sends_one_message_and_names_are_escaped() {
        let sasl = Sasl { mechanism: Mechanism::Plain, username: "u".into(), password: "p".into() };
        let mut plain = Exchange::new(&sasl).expect("plain");
        assert_eq!(plain.step(&sasl, b"").expect("one").expect("a message"), b"\0u\0p");
        assert_eq!(plain.step(&sasl, b"").expect("done"), None);
        assert_eq!(escape("a=b,c"), "a=3Db=2Cc");
    }
}
