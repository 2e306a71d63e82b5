//! Finishing another producer's transaction: the commit-phase recovery of the exactly-once
//! sink; and initializing a transactional id, with which [`super::recovery`] ends what
//! earlier attempts left open.
//!
//! A sink task pre-commits transaction `n` (flushes it) and records its transactional id,
//! producer id and producer epoch in checkpoint `n`. If the process dies after checkpoint `n`
//! completed but before the commit, the restarted job must commit that transaction, not
//! abort it. librdkafka cannot resume a transaction it did not start, so this makes the two
//! requests needed itself ([`super::client`]): `FindCoordinator` (which broker coordinates
//! the transactional id) and `EndTxn` (commit, as that producer id and epoch).
//!
//! `InitProducerId` is the third: initializing a transactional id aborts whatever
//! transaction it has open and fences its producer, and the epoch it returns tells whether
//! the id had been used before (epoch 0: never). A restart probes its ids upward with it, as
//! Flink's Kafka sink does.

use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    EndTxnRequest, FindCoordinatorRequest, InitProducerIdRequest, ProducerId, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use weir_core::{ErrorKind, Result, WeirError};

use super::client::{error_name, Cluster, Connection};

/// Kafka error codes this module tells apart.
const NONE: i16 = 0;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const CONCURRENT_TRANSACTIONS: i16 = 51;
const PRODUCER_FENCED: i16 = 90;

/// The versions of each request this module fills in and reads (the newest at the time of
/// writing; each request takes the highest both sides speak). FindCoordinator v0 cannot ask
/// for a transaction's coordinator; from v4 it asks for a batch of keys. EndTxn v5 belongs
/// to KIP-890's second transaction protocol, which librdkafka's transactions do not use.
const FIND_COORDINATOR: std::ops::RangeInclusive<i16> = 1..=6;
const INIT_PRODUCER_ID: std::ops::RangeInclusive<i16> = 0..=5;
const END_TXN: std::ops::RangeInclusive<i16> = 0..=4;

/// A pre-committed transaction, as recorded in a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreCommitted {
    #[serde(rename = "id")]
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// One request to the coordinator of `transactional_id`, retried while the coordinator moves
/// or is busy or a broker cannot be reached; `request` sends it and reads the response:
/// `Ok(Ok(_))` is the answer, `Ok(Err(code))` retries. Errors the settings cause (TLS,
/// credentials) are not retried.
fn with_coordinator<T>(
    cluster: &Cluster,
    transactional_id: &str,
    timeout: Duration,
    what: &str,
    mut request: impl FnMut(&mut Connection) -> Result<std::result::Result<T, i16>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    let mut last_error = String::from("no broker answered");
    while Instant::now() < deadline {
        for broker in cluster.bootstrap() {
            let step = Duration::from_secs(5).min(deadline.saturating_duration_since(Instant::now()));
            let attempt = cluster.connect(broker, step).and_then(|mut bootstrap| {
                match find_coordinator(&mut bootstrap, transactional_id)? {
                    Err(code) => Ok(Err(code)),
                    Ok(coordinator) if coordinator == bootstrap.broker() => request(&mut bootstrap),
                    Ok(coordinator) => request(&mut cluster.connect(&coordinator, step)?),
                }
            });
            match attempt {
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(code)) => last_error = format!("{} (retried)", error_name(code)),
                Err(e) if e.kind == ErrorKind::User => return Err(e),
                Err(e) => last_error = e.message,
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(WeirError::external(format!(
        "Kafka: could not {what} transaction '{transactional_id}' within {timeout:?}: {last_error}"
    )))
}

/// Errors that go away when asked again: the coordinator moves, loads, or is still ending a
/// transaction.
fn retriable(code: i16) -> bool {
    matches!(code, COORDINATOR_LOAD_IN_PROGRESS | COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR | CONCURRENT_TRANSACTIONS)
}

/// Initialize `transactional_id` as a new producer would: its open transaction, if any, is
/// aborted and its producer fenced. Returns the producer id and the new producer epoch
/// (epoch 0: the id had never been used).
pub fn init_producer_id(
    cluster: &Cluster,
    transactional_id: &str,
    txn_timeout: Duration,
    timeout: Duration,
) -> Result<(i64, i16)> {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_string(transactional_id.to_string()))))
        .with_transaction_timeout_ms(txn_timeout.as_millis().min(i32::MAX as u128) as i32);
    with_coordinator(cluster, transactional_id, timeout, "initialize", |coordinator| {
        let version = coordinator.version::<InitProducerIdRequest>(INIT_PRODUCER_ID)?;
        let response = coordinator.call(&request, version)?;
        match response.error_code {
            NONE => {
                let (producer_id, epoch) = (response.producer_id.0, response.producer_epoch);
                log::debug!(
                    "Kafka: initialized transactional id '{transactional_id}': producer id {producer_id}, epoch {epoch}"
                );
                Ok(Ok((producer_id, epoch)))
            }
            code if retriable(code) => Ok(Err(code)),
            code => Err(WeirError::external(format!(
                "Kafka: initializing transactional id '{transactional_id}' failed: {}",
                error_name(code)
            ))),
        }
    })
}

/// The broker coordinating `transactional_id`, as `host:port`, or the error code.
fn find_coordinator(bootstrap: &mut Connection, transactional_id: &str) -> Result<std::result::Result<String, i16>> {
    let version = bootstrap.version::<FindCoordinatorRequest>(FIND_COORDINATOR)?;
    let id = StrBytes::from_string(transactional_id.to_string());
    let request = FindCoordinatorRequest::default().with_key_type(1); // a transaction's
    let request = if version >= 4 { request.with_coordinator_keys(vec![id]) } else { request.with_key(id) };
    let response = bootstrap.call(&request, version)?;
    let (error, host, port) = if version >= 4 {
        let c = response.coordinators.first().ok_or_else(|| {
            WeirError::external(format!("Kafka broker {}: FindCoordinator named no coordinator", bootstrap.broker()))
        })?;
        (c.error_code, c.host.to_string(), c.port)
    } else {
        (response.error_code, response.host.to_string(), response.port)
    };
    Ok(if error == NONE { Ok(format!("{host}:{port}")) } else { Err(error) })
}

/// What became of a pre-committed transaction asked to commit.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Committed now, or had been committed before (the request is idempotent).
    Committed,
    /// The producer id moved on: a newer epoch exists, so the transaction was already ended
    /// (committed by the task before it died, or aborted by a timeout). Not knowable here
    /// which: the caller decides how loud to be.
    Superseded(i16),
}

/// Commit `txn` as its producer would have. Retries while the coordinator moves or is busy.
pub fn commit(cluster: &Cluster, txn: &PreCommitted, timeout: Duration) -> Result<Outcome> {
    let request = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(txn.transactional_id.clone())))
        .with_producer_id(ProducerId(txn.producer_id))
        .with_producer_epoch(txn.producer_epoch)
        .with_committed(true);
    with_coordinator(cluster, &txn.transactional_id, timeout, "commit", |coordinator| {
        let version = coordinator.version::<EndTxnRequest>(END_TXN)?;
        match coordinator.call(&request, version)?.error_code {
            NONE => {
                log::debug!(
                    "Kafka: committed transaction '{}' (producer id {}, epoch {}) on recovery",
                    txn.transactional_id,
                    txn.producer_id,
                    txn.producer_epoch
                );
                Ok(Ok(Outcome::Committed))
            }
            code @ (INVALID_PRODUCER_EPOCH | PRODUCER_FENCED | INVALID_PRODUCER_ID_MAPPING | INVALID_TXN_STATE) => {
                Ok(Ok(Outcome::Superseded(code)))
            }
            code if retriable(code) => Ok(Err(code)),
            code => Err(WeirError::external(format!(
                "Kafka: committing transaction '{}' failed: {}",
                txn.transactional_id,
                error_name(code)
            ))),
        }
    })
}
