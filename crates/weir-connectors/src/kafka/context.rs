//! librdkafka's client callbacks for Weir's Kafka consumers. librdkafka retries every failed
//! connection, including those no retry can fix (credentials the broker refuses, a
//! certificate that does not verify), and the operation waiting on it ends in a bare
//! "broker transport failure" when its timeout expires. The callbacks keep such a refusal, so
//! that the wait stops at once and the error says what happened; librdkafka's own lines about
//! it go to the debug log, as the error reports it once.

use std::sync::{Arc, Mutex};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;

#[derive(Clone, Default)]
pub struct Watched(Arc<Mutex<Option<String>>>);

impl Watched {
    /// The refusal librdkafka reported, if any: what to tell the user.
    pub fn refusal(&self) -> Option<String> {
        self.0.lock().ok().and_then(|r| r.clone())
    }

    fn refused(&self, why: &str) {
        if let Ok(mut refusal) = self.0.lock() {
            refusal.get_or_insert_with(|| why.to_string());
        }
    }
}

/// An error that retrying does not fix.
fn is_refusal(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed | RDKafkaErrorCode::SSL)
    )
}

/// librdkafka's log lines about the same refusals.
fn about_a_refusal(line: &str) -> bool {
    ["SASL authentication error", "SSL handshake failed", "certificate verify failed"].iter().any(|s| line.contains(s))
}

impl ClientContext for Watched {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, line: &str) {
        match level {
            _ if about_a_refusal(line) => {
                log::debug!(target: "librdkafka", "librdkafka: {fac} {line}");
                // Its error event can come late (or once for many failed connections): the
                // log line is enough. Without librdkafka's thread prefix.
                let why = line.strip_prefix("[thrd:").and_then(|l| l.split_once("]: ")).map_or(line, |(_, rest)| rest);
                self.refused(why);
            }
            RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error => {
                log::error!(target: "librdkafka", "librdkafka: {fac} {line}")
            }
            RDKafkaLogLevel::Warning => log::warn!(target: "librdkafka", "librdkafka: {fac} {line}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                log::info!(target: "librdkafka", "librdkafka: {fac} {line}")
            }
            RDKafkaLogLevel::Debug => log::debug!(target: "librdkafka", "librdkafka: {fac} {line}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // librdkafka reports a certificate that does not verify as a transport failure: its
        // reason says what it was.
        if is_refusal(&error) || about_a_refusal(reason) {
            log::debug!("librdkafka: {error}: {reason}");
            self.refused(reason);
        } else if self.refusal().is_none() {
            // "All brokers down" after a refusal is its consequence: not said twice.
            log::error!("librdkafka: {error}: {reason}");
        }
    }
}

impl ConsumerContext for Watched {}
