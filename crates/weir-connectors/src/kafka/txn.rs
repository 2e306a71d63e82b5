//! Finishing another producer's transaction: the commit-phase recovery of the exactly-once
//! sink; and initializing a transactional id, with which [`super::recovery`] ends what
//! earlier attempts left open.
//!
//! A sink task pre-commits transaction `n` (flushes it) and records its transactional id,
//! producer id and producer epoch in checkpoint `n`. If the process dies after checkpoint `n`
//! completed but before the commit, the restarted job must commit that transaction, not
//! abort it. librdkafka cannot resume a transaction it did not start, so this speaks the two
//! requests needed directly: `FindCoordinator` (which broker coordinates the transactional
//! id) and `EndTxn` (commit, as that producer id and epoch). Both are tiny, fixed-layout
//! requests of the Kafka protocol (non-flexible versions: FindCoordinator v1, EndTxn v1),
//! encoded here by hand rather than through a protocol crate.
//!
//! `InitProducerId` (v0) is the third: initializing a transactional id aborts whatever
//! transaction it has open and fences its producer, and the epoch it returns tells whether
//! the id had been used before (epoch 0: never). A restart probes its ids upward with it, as
//! Flink's Kafka sink does.

use std::time::{Duration, Instant};

use weir_core::{Result, WeirError};

use super::wire::{call, put_string, Reader};

const FIND_COORDINATOR: i16 = 10;
const END_TXN: i16 = 26;
const INIT_PRODUCER_ID: i16 = 22;

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

/// A pre-committed transaction, as recorded in a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreCommitted {
    #[serde(rename = "id")]
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// One request to the coordinator of `transactional_id`, retried while the coordinator moves
/// or is busy; `decide` reads the response: `Ok(Some(_))` is the answer, `Ok(None)` retries.
fn with_coordinator<T>(
    bootstrap: &[String],
    transactional_id: &str,
    timeout: Duration,
    what: &str,
    mut request: impl FnMut(&str, Duration) -> Result<Vec<u8>>,
    mut decide: impl FnMut(&mut Reader<'_>) -> Result<std::result::Result<T, i16>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    let mut last_error = String::from("no broker answered");
    while Instant::now() < deadline {
        for broker in bootstrap {
            let step = Duration::from_secs(5).min(deadline.saturating_duration_since(Instant::now()));
            let coordinator = match find_coordinator(broker, transactional_id, step) {
                Ok(Ok(c)) => c,
                Ok(Err(code)) => {
                    last_error = format!("FindCoordinator error {code}");
                    continue;
                }
                Err(e) => {
                    last_error = e.message;
                    continue;
                }
            };
            let response = match request(&coordinator, step) {
                Ok(r) => r,
                Err(e) => {
                    last_error = e.message;
                    continue;
                }
            };
            match decide(&mut Reader::new(&response))? {
                Ok(answer) => return Ok(answer),
                Err(code) => last_error = format!("error code {code} (retried)"),
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
    bootstrap: &[String],
    transactional_id: &str,
    txn_timeout: Duration,
    timeout: Duration,
) -> Result<(i64, i16)> {
    let mut body = Vec::new();
    put_string(&mut body, transactional_id);
    body.extend_from_slice(&(txn_timeout.as_millis().min(i32::MAX as u128) as i32).to_be_bytes());
    with_coordinator(
        bootstrap,
        transactional_id,
        timeout,
        "initialize",
        |coordinator, step| call(coordinator, INIT_PRODUCER_ID, 0, false, &body, step),
        |r| {
            let _throttle = r.i32()?;
            match r.i16()? {
                NONE => {
                    let producer_id = r.i64()?;
                    let epoch = r.i16()?;
                    log::debug!(
                        "Kafka: initialized transactional id '{transactional_id}': producer id {producer_id}, epoch {epoch}"
                    );
                    Ok(Ok((producer_id, epoch)))
                }
                code if retriable(code) => Ok(Err(code)),
                code => Err(WeirError::external(format!(
                    "Kafka: initializing transactional id '{transactional_id}' failed with error code {code}"
                ))),
            }
        },
    )
}

/// The broker coordinating `transactional_id`, as `host:port`.
fn find_coordinator(
    bootstrap: &str,
    transactional_id: &str,
    timeout: Duration,
) -> Result<std::result::Result<String, i16>> {
    let mut body = Vec::new();
    put_string(&mut body, transactional_id);
    body.push(1); // key type: transaction
    let response = call(bootstrap, FIND_COORDINATOR, 1, false, &body, timeout)?;
    let mut r = Reader::new(&response);
    let _throttle = r.i32()?;
    let error = r.i16()?;
    let _message = r.string()?;
    let _node = r.i32()?;
    let host = r.string()?.unwrap_or_default();
    let port = r.i32()?;
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
pub fn commit(bootstrap: &[String], txn: &PreCommitted, timeout: Duration) -> Result<Outcome> {
    let mut body = Vec::new();
    put_string(&mut body, &txn.transactional_id);
    body.extend_from_slice(&txn.producer_id.to_be_bytes());
    body.extend_from_slice(&txn.producer_epoch.to_be_bytes());
    body.push(1); // committed
    with_coordinator(
        bootstrap,
        &txn.transactional_id,
        timeout,
        "commit",
        |coordinator, step| call(coordinator, END_TXN, 1, false, &body, step),
        |r| {
            let _throttle = r.i32()?;
            match r.i16()? {
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
                    "Kafka: committing transaction '{}' failed with error code {code}",
                    txn.transactional_id
                ))),
            }
        },
    )
}
