//! A restarting exactly-once task ends every transaction that earlier attempts of it may have
//! left open, whatever the moment they died, before it writes anything: an open transaction
//! holds back the last stable offset of each partition it wrote to, and with it everything a
//! `read_committed` reader could see there after it, until the broker's
//! `transaction.timeout.ms` aborts it (a test broker may never do so).
//!
//! A task's transactional ids are `<base>-<s>`, `s` = 1, 2, …; each carries one transaction,
//! ever: a task opens `s` only after every id below it that it initialized, and an attempt
//! starts past every id its restore initialized. Checkpoint `n` records `next(n)`, the first
//! id whose transaction is not in it. So, at any moment, an id that may hold an open
//! transaction is one of
//! - the pre-committed transactions checkpoint `n` lists, which the restore commits first, or
//! - an id at or after `next(n)` in the unbroken run of initialized ids that starts there
//!   (attempts since `n` initialized ids only in increasing order, each without a gap after
//!   the run its restore probed),
//!
//! and the restore reaches all of them by probing upward from `next(n)` with
//! `InitProducerId` until [`FRESH_IDS_TO_STOP`] ids in a row were never initialized.
//! Initializing aborts what an id holds open and fences its producer; the probed ids are
//! then initialized too, so a later restore walks past them.
//!
//! Where the cluster can list transactions (`ListTransactions`, Kafka 3.0 and later: every
//! broker is asked, as each coordinates a share of the ids), the restore also lists the open
//! ones under `<base>-` and ends those the probe did not reach, so that the guarantee does not
//! rest on the argument above alone. A broker without it, or a principal without `Describe`
//! on the ids (the broker then leaves them out), gets the probe only.

use std::time::{Duration, Instant};

use kafka_protocol::messages::{ListTransactionsRequest, ListTransactionsResponse, MetadataRequest};
use weir_core::{ErrorKind, Result, WeirError};

use super::client::{error_name, Cluster, Connection};
use super::txn::init_producer_id;

/// Probing stops after this many never-used ids in a row. One would do while restores only
/// move forward; the rest cover a restore from an older checkpoint (the newest was damaged).
pub const FRESH_IDS_TO_STOP: u32 = 3;

/// A probe that finds this many used ids in a row is not walking one job's ids.
const MAX_PROBED: u64 = 1 << 20;

/// Metadata from v1 (an empty topic list means none; v0 read it as all) to v12 (v13 adds an
/// error code this reads no differently); ListTransactions v0 and v1 (v1 adds a duration
/// filter, v2 a pattern: neither is used).
const METADATA: std::ops::RangeInclusive<i16> = 1..=12;
const LIST_TRANSACTIONS: std::ops::RangeInclusive<i16> = 0..=1;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;

/// A transaction the cluster reports open (`Ongoing`, or between its end's two phases).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenTransaction {
    pub transactional_id: String,
    pub producer_id: i64,
    pub state: String,
}

/// End what earlier attempts of the task with ids `<base>-<s>` left open from `from` on (the
/// `next` of the checkpoint restored; 1 without one). Returns the first `s` the task may use:
/// past every id initialized here. `txn_timeout` is the task's `transaction.timeout.ms`.
pub fn end_earlier_attempts(
    cluster: &Cluster,
    base: &str,
    from: u64,
    txn_timeout: Duration,
    timeout: Duration,
) -> Result<u64> {
    let init = |s: u64| -> Result<i16> {
        let id = format!("{base}-{s}");
        let began = Instant::now();
        let (_, epoch) = init_producer_id(cluster, &id, txn_timeout, timeout)?;
        if began.elapsed() > Duration::from_secs(1) {
            log::warn!("Kafka: initializing '{id}' took {:?} (its transaction was still ending)", began.elapsed());
        }
        Ok(epoch)
    };
    let mut next = from;
    let mut fresh_in_a_row = 0;
    while fresh_in_a_row < FRESH_IDS_TO_STOP {
        if next - from > MAX_PROBED {
            return Err(WeirError::external(format!(
                "Kafka: more than {MAX_PROBED} transactional ids from '{base}-{from}' on were used before: is \
                 'sink.transactional-id-prefix' shared with another job?"
            )));
        }
        fresh_in_a_row = if init(next)? == 0 { fresh_in_a_row + 1 } else { 0 };
        weir_core::fault::pause("kafka_probe");
        next += 1;
    }
    log::debug!("Kafka: ids '{base}-{from}' to '{base}-{}' initialized by the probe", next - 1);
    let Some(open) = open_transactions(cluster, timeout)? else {
        log::debug!("Kafka: the cluster cannot list transactions; the probe alone ended those of '{base}-*'");
        return Ok(next);
    };
    let mut beyond = Vec::new();
    for t in open {
        let Some(s) = t.transactional_id.strip_prefix(base).and_then(|r| r.strip_prefix('-')) else { continue };
        let Ok(s) = s.parse::<u64>() else { continue };
        if s < from {
            // Not one of the checkpoint's transactions (the restore committed those, and a
            // commit leaves no transaction open): a zombie's, opened under an id that a
            // successor had already probed past, and left open when it died.
            log::warn!(
                "Kafka: transaction '{}' (producer id {}) is {} under an id before the checkpoint's next one ('{base}-{from}'); \
                 aborting it",
                t.transactional_id,
                t.producer_id,
                t.state
            );
            init(s)?;
        } else if s >= next {
            beyond.push(s);
        }
        // Ids the probe reached and still listed: their end's markers are being written.
    }
    beyond.sort_unstable();
    for s in beyond {
        if s < next {
            continue;
        }
        log::warn!(
            "Kafka: transaction '{base}-{s}' was open past the ids the probe reached ('{base}-{}'); aborting it",
            next - 1
        );
        // The ids between are initialized too: the run from `from` stays unbroken, so that a
        // later restore's probe reaches the ids this attempt will use.
        while next <= s {
            init(next)?;
            next += 1;
        }
    }
    Ok(next)
}

/// Every transaction the cluster reports open, from every broker; `None` if a broker cannot
/// list transactions.
pub fn open_transactions(cluster: &Cluster, timeout: Duration) -> Result<Option<Vec<OpenTransaction>>> {
    let brokers = brokers(cluster, timeout)?;
    let mut open = Vec::new();
    for broker in &brokers {
        let mut connection = cluster.connect(broker, timeout)?;
        if !connection.supports::<ListTransactionsRequest>() {
            return Ok(None);
        }
        open.extend(list_transactions(&mut connection, timeout)?);
    }
    Ok(Some(open))
}

/// The cluster's brokers, as `host:port`, from the first bootstrap server that answers.
fn brokers(cluster: &Cluster, timeout: Duration) -> Result<Vec<String>> {
    let mut last_error = String::from("no bootstrap server");
    for server in cluster.bootstrap() {
        let answer = cluster.connect(server, timeout).and_then(|mut c| {
            let version = c.version::<MetadataRequest>(METADATA)?;
            c.call(&MetadataRequest::default().with_topics(Some(Vec::new())), version)
        });
        let response = match answer {
            Ok(r) => r,
            Err(e) if e.kind == ErrorKind::User => return Err(e),
            Err(e) => {
                last_error = e.message;
                continue;
            }
        };
        let brokers: Vec<String> = response.brokers.iter().map(|b| format!("{}:{}", b.host.as_str(), b.port)).collect();
        if !brokers.is_empty() {
            return Ok(brokers);
        }
        last_error = format!("{server} named no brokers");
    }
    Err(WeirError::external(format!("Kafka: cannot read the cluster's brokers: {last_error}")))
}

/// The open transactions a broker coordinates (no state filter: the states are filtered
/// here, whatever names a broker version adds for a transaction that has ended).
fn list_transactions(connection: &mut Connection, timeout: Duration) -> Result<Vec<OpenTransaction>> {
    let version = connection.version::<ListTransactionsRequest>(LIST_TRANSACTIONS)?;
    let deadline = Instant::now() + timeout;
    loop {
        let response = connection.call(&ListTransactionsRequest::default(), version)?;
        match open_in(response) {
            Ok(open) => return Ok(open),
            Err(COORDINATOR_LOAD_IN_PROGRESS) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(code) => {
                return Err(WeirError::external(format!(
                    "Kafka: broker {} cannot list transactions: {}",
                    connection.broker(),
                    error_name(code)
                )))
            }
        }
    }
}

/// The open transactions of a ListTransactions response, or its error code.
fn open_in(response: ListTransactionsResponse) -> std::result::Result<Vec<OpenTransaction>, i16> {
    if response.error_code != 0 {
        return Err(response.error_code);
    }
    Ok(response
        .transaction_states
        .into_iter()
        .filter(|t| !matches!(t.transaction_state.as_str(), "Empty" | "CompleteCommit" | "CompleteAbort" | "Dead"))
        .map(|t| OpenTransaction {
            transactional_id: t.transactional_id.0.to_string(),
            producer_id: t.producer_id.0,
            state: t.transaction_state.to_string(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::protocol::Decodable;

    /// A ListTransactions v0 response as a broker sends it (after the header): throttle 0,
    /// no error, one unknown state filter ("Bogus"), three transactions, no tagged fields.
    const LISTING_V0: &[u8] = &[
        0, 0, 0, 0, 0, 0, 2, 6, b'B', b'o', b'g', b'u', b's', 4, //
        6, b'a', b'-', b'0', b'-', b'1', 0, 0, 0, 0, 0, 0, 0, 7, 8, b'O', b'n', b'g', b'o', b'i', b'n', b'g',
        0, //
        6, b'a', b'-', b'0', b'-', b'2', 0, 0, 0, 0, 0, 0, 0, 8, 15, b'C', b'o', b'm', b'p', b'l', b'e', b't', b'e',
        b'C', b'o', b'm', b'm', b'i', b't', 0, //
        6, b'a', b'-', b'0', b'-', b'3', 0, 0, 0, 0, 0, 0, 0, 9, 13, b'P', b'r', b'e', b'p', b'a', b'r', b'e', b'A',
        b'b', b'o', b'r', b't', 0, //
        0,
    ];

    #[test]
    fn a_listing_keeps_the_open_transactions_only() {
        let response = ListTransactionsResponse::decode(&mut Bytes::from_static(LISTING_V0), 0).expect("decoded");
        let open = open_in(response).expect("no error");
        let ids: Vec<(&str, i64)> = open.iter().map(|t| (t.transactional_id.as_str(), t.producer_id)).collect();
        assert_eq!(ids, [("a-0-1", 7), ("a-0-3", 9)]);
        // An error code is returned as such; a response cut short does not decode.
        let mut loading = LISTING_V0.to_vec();
        loading[5] = 14;
        let response = ListTransactionsResponse::decode(&mut Bytes::from(loading), 0).expect("decoded");
        assert_eq!(open_in(response).map(|_| ()), Err(14));
        assert!(ListTransactionsResponse::decode(&mut Bytes::from_static(&LISTING_V0[..40]), 0).is_err());
    }
}
