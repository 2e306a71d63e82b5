//! Writes held in memory until the store needs them: a checkpoint, a scan, or a full buffer.
//!
//! Why: an operator writes a key per distinct group or value of every chunk. Put straight
//! into RocksDB, each write is a skip-list insert into the memtable, at a random place, and
//! that search was the largest single cost of a state-heavy query (a fifth to a third of q16's
//! CPU, with the memtable lookups of the reads after it). Held here, a write is a hash insert,
//! a key written again before the next checkpoint replaces its value in place, and a read of
//! a key written since finds it without RocksDB. At a checkpoint the buffer goes to RocksDB in
//! key order, into the memtable the previous checkpoint flushed: each insert lands right after
//! the previous one, which the memtable's insert hints make cheap (`insert_hints` in the
//! store's options).
//!
//! Nothing here is durable, and need not be: the local store is scratch, and a checkpoint
//! writes the buffer to the store before it snapshots it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A buffer past this many bytes of keys and values goes to the store, whatever comes next:
/// memory stays bounded between checkpoints (or without them).
const LIMIT_BYTES: usize = 32 << 20;

/// What all buffers of the process may hold together (as much as the memtables: many
/// operator tasks in one process must not each hold [`LIMIT_BYTES`]). The buffer whose write
/// crosses it goes to its store.
const PROCESS_BYTES: usize = 128 << 20;

/// Bytes held by every buffer of the process.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Puts (`Some`) and deletes (`None`) by stored key, the last write of each key. Hashed
/// with a per-process random seed (keys are user data), and iterated only after sorting.
#[derive(Default)]
pub(crate) struct Pending {
    writes: HashMap<Vec<u8>, Option<Vec<u8>>, foldhash::fast::RandomState>,
    bytes: usize,
}

impl Pending {
    /// The key's last write: `Some(None)` if it was a delete, `None` if it has none here.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.writes.get(key).map(|v| v.as_deref())
    }

    pub(crate) fn put(&mut self, key: Vec<u8>, value: Option<&[u8]>) {
        let added = value.map_or(0, |v| v.len());
        let key_len = key.len();
        let before = self.bytes;
        match self.writes.insert(key, value.map(|v| v.to_vec())) {
            Some(old) => self.bytes = (self.bytes + added).saturating_sub(old.map_or(0, |v| v.len())),
            None => self.bytes += key_len + added,
        }
        self.publish(before);
    }

    /// Tell the process-wide count how this buffer changed from `before` bytes.
    fn publish(&self, before: usize) {
        if self.bytes >= before {
            HELD.fetch_add(self.bytes - before, Ordering::Relaxed);
        } else {
            HELD.fetch_sub(before - self.bytes, Ordering::Relaxed);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    pub(crate) fn is_full(&self) -> bool {
        self.bytes >= LIMIT_BYTES || (self.bytes > 0 && HELD.load(Ordering::Relaxed) >= PROCESS_BYTES)
    }

    /// Every write, in key order, leaving the buffer empty (its capacity kept: the next
    /// interval writes about as many keys).
    pub(crate) fn take_sorted(&mut self) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let before = self.bytes;
        self.bytes = 0;
        self.publish(before);
        let mut writes: Vec<(Vec<u8>, Option<Vec<u8>>)> = self.writes.drain().collect();
        writes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        writes
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let before = self.bytes;
        self.bytes = 0;
        self.publish(before);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer past its own limit asks to be drained, and draining gives its bytes back to
    /// the process-wide count (other tests' buffers may hold some at the same time).
    #[test]
    fn a_full_buffer_asks_to_be_drained_and_gives_its_bytes_back() {
        let mut p = Pending::default();
        p.put(b"small".to_vec(), Some(b"v"));
        assert!(!p.is_full() || HELD.load(Ordering::Relaxed) >= PROCESS_BYTES);
        let big = vec![7u8; LIMIT_BYTES];
        p.put(b"big".to_vec(), Some(&big));
        assert!(p.is_full());
        let held = HELD.load(Ordering::Relaxed);
        assert!(held >= LIMIT_BYTES, "the process count holds this buffer: {held}");
        assert_eq!(p.take_sorted().len(), 2);
        assert!(!p.is_full());
        // Replacing the big value with a small one shrinks the buffer, not grows it.
        p.put(b"big".to_vec(), Some(&big));
        p.put(b"big".to_vec(), Some(b"x"));
        assert_eq!(p.bytes, 3 + 1);
        drop(p);
    }

    #[test]
    fn the_last_write_of_a_key_wins_and_comes_out_in_key_order() {
        let mut p = Pending::default();
        p.put(b"b".to_vec(), Some(b"1"));
        p.put(b"a".to_vec(), Some(b"2"));
        p.put(b"b".to_vec(), None);
        p.put(b"c".to_vec(), Some(b"3"));
        p.put(b"c".to_vec(), Some(b"33"));
        assert_eq!(p.get(b"b"), Some(None));
        assert_eq!(p.get(b"c"), Some(Some(&b"33"[..])));
        assert_eq!(p.get(b"d"), None);
        // Bytes: keys once each, values as they are now.
        assert_eq!(p.bytes, 3 + 1 + 2);
        let all = p.take_sorted();
        assert_eq!(
            all,
            vec![(b"a".to_vec(), Some(b"2".to_vec())), (b"b".to_vec(), None), (b"c".to_vec(), Some(b"33".to_vec()))]
        );
        assert!(p.is_empty());
        assert_eq!(p.bytes, 0);
    }
}
