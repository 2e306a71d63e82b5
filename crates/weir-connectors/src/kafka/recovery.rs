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

use weir_core::{Result, WeirError};

use super::txn::init_producer_id;
use super::wire::{call, put_uvarint, Reader};

/// Probing stops after this many never-used ids in a row. One would do while restores only
/// move forward; the rest cover a restore from an older checkpoint (the newest was damaged).
pub const FRESH_IDS_TO_STOP: u32 = 3;

/// A probe that finds this many used ids in a row is not walking one job's ids.
const MAX_PROBED: u64 = 1 << 20;

const METADATA: i16 = 3;
const API_VERSIONS: i16 = 18;
const LIST_TRANSACTIONS: i16 = 66;
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
    bootstrap: &[String],
    base: &str,
    from: u64,
    txn_timeout: Duration,
    timeout: Duration,
) -> Result<u64> {
    let init = |s: u64| -> Result<i16> {
        let id = format!("{base}-{s}");
        let began = Instant::now();
        let (_, epoch) = init_producer_id(bootstrap, &id, txn_timeout, timeout)?;
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
    let Some(open) = open_transactions(bootstrap, timeout)? else {
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
pub fn open_transactions(bootstrap: &[String], timeout: Duration) -> Result<Option<Vec<OpenTransaction>>> {
    let brokers = brokers(bootstrap, timeout)?;
    let mut open = Vec::new();
    for broker in &brokers {
        if !supports(broker, LIST_TRANSACTIONS, timeout)? {
            return Ok(None);
        }
        open.extend(list_transactions(broker, timeout)?);
    }
    Ok(Some(open))
}

/// The cluster's brokers, as `host:port` (Metadata v1 for no topic), from the first bootstrap
/// server that answers.
fn brokers(bootstrap: &[String], timeout: Duration) -> Result<Vec<String>> {
    let mut last_error = String::from("no bootstrap server");
    for server in bootstrap {
        let response = match call(server, METADATA, 1, false, &0i32.to_be_bytes(), timeout) {
            Ok(r) => r,
            Err(e) => {
                last_error = e.message;
                continue;
            }
        };
        let mut r = Reader::new(&response);
        let count = r.i32()?;
        let mut brokers = Vec::new();
        for _ in 0..count.max(0) {
            let _node = r.i32()?;
            let host = r.string()?.unwrap_or_default();
            let port = r.i32()?;
            let _rack = r.string()?;
            brokers.push(format!("{host}:{port}"));
        }
        if !brokers.is_empty() {
            return Ok(brokers);
        }
        last_error = format!("{server} named no brokers");
    }
    Err(WeirError::external(format!("Kafka: cannot read the cluster's brokers: {last_error}")))
}

/// Whether `broker` answers `api_key` at version 0 (ApiVersions v0).
fn supports(broker: &str, api_key: i16, timeout: Duration) -> Result<bool> {
    supported_in(&call(broker, API_VERSIONS, 0, false, &[], timeout)?, api_key)
}

/// Whether an ApiVersions v0 response lists `api_key` from version 0.
fn supported_in(response: &[u8], api_key: i16) -> Result<bool> {
    let mut r = Reader::new(response);
    if r.i16()? != 0 {
        return Ok(false);
    }
    for _ in 0..r.i32()?.max(0) {
        let (key, min, _max) = (r.i16()?, r.i16()?, r.i16()?);
        if key == api_key {
            return Ok(min == 0);
        }
    }
    Ok(false)
}

/// The open transactions `broker` coordinates (ListTransactions v0, no filter: the states are
/// filtered here, whatever names a broker version adds for a transaction that has ended).
fn list_transactions(broker: &str, timeout: Duration) -> Result<Vec<OpenTransaction>> {
    let mut body = Vec::new();
    put_uvarint(&mut body, 1); // states filter: empty
    put_uvarint(&mut body, 1); // producer id filter: empty
    body.push(0); // no tagged fields
    let deadline = Instant::now() + timeout;
    loop {
        let response = call(broker, LIST_TRANSACTIONS, 0, true, &body, timeout)?;
        match open_in(&response)? {
            Ok(open) => return Ok(open),
            Err(COORDINATOR_LOAD_IN_PROGRESS) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(code) => {
                return Err(WeirError::external(format!(
                    "Kafka: broker {broker} cannot list transactions (error code {code})"
                )))
            }
        }
    }
}

/// The open transactions of a ListTransactions v0 response, or its error code.
fn open_in(response: &[u8]) -> Result<std::result::Result<Vec<OpenTransaction>, i16>> {
    let mut r = Reader::new(response);
    let _throttle = r.i32()?;
    let code = r.i16()?;
    if code != 0 {
        return Ok(Err(code));
    }
    for _ in 0..r.compact_len()?.unwrap_or(0) {
        r.compact_string()?;
    }
    let mut open = Vec::new();
    for _ in 0..r.compact_len()?.unwrap_or(0) {
        let transactional_id = r.compact_string()?.unwrap_or_default();
        let producer_id = r.i64()?;
        let state = r.compact_string()?.unwrap_or_default();
        r.skip_tags()?;
        if !matches!(state.as_str(), "Empty" | "CompleteCommit" | "CompleteAbort" | "Dead") {
            open.push(OpenTransaction { transactional_id, producer_id, state });
        }
    }
    Ok(Ok(open))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compact(out: &mut Vec<u8>, s: &str) {
        put_uvarint(out, s.len() as u64 + 1);
        out.extend_from_slice(s.as_bytes());
    }

    #[test]
    fn a_listing_keeps_the_open_transactions_only() {
        let mut b = 0i32.to_be_bytes().to_vec(); // throttle
        b.extend_from_slice(&0i16.to_be_bytes());
        put_uvarint(&mut b, 2); // one unknown state filter
        compact(&mut b, "Bogus");
        put_uvarint(&mut b, 4); // three transactions
        for (id, pid, state) in
            [("a-0-1", 7i64, "Ongoing"), ("a-0-2", 8, "CompleteCommit"), ("a-0-3", 9, "PrepareAbort")]
        {
            compact(&mut b, id);
            b.extend_from_slice(&pid.to_be_bytes());
            compact(&mut b, state);
            b.push(0);
        }
        b.push(0);
        let open = open_in(&b).expect("parsed").expect("no error");
        let ids: Vec<(&str, i64)> = open.iter().map(|t| (t.transactional_id.as_str(), t.producer_id)).collect();
        assert_eq!(ids, [("a-0-1", 7), ("a-0-3", 9)]);
        // An error code is returned as such; a response cut short is an error.
        let mut e = 0i32.to_be_bytes().to_vec();
        e.extend_from_slice(&14i16.to_be_bytes());
        assert_eq!(open_in(&e).expect("parsed"), Err(14));
        assert!(open_in(&b[..b.len() - 5]).is_err());
    }

    #[test]
    fn a_broker_without_list_transactions_gets_the_probe_alone() {
        let versions = |keys: &[(i16, i16)]| {
            let mut b = 0i16.to_be_bytes().to_vec();
            b.extend_from_slice(&(keys.len() as i32).to_be_bytes());
            for (key, min) in keys {
                b.extend_from_slice(&key.to_be_bytes());
                b.extend_from_slice(&min.to_be_bytes());
                b.extend_from_slice(&3i16.to_be_bytes());
            }
            b
        };
        assert!(supported_in(&versions(&[(22, 0), (66, 0)]), LIST_TRANSACTIONS).expect("parsed"));
        assert!(!supported_in(&versions(&[(22, 0), (26, 0)]), LIST_TRANSACTIONS).expect("parsed"));
        assert!(!supported_in(&versions(&[(66, 1)]), LIST_TRANSACTIONS).expect("parsed"));
        assert!(!supported_in(&35i16.to_be_bytes(), LIST_TRANSACTIONS).expect("an error code"));
    }
}
