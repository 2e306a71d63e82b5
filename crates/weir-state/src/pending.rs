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

use std::sync::atomic::{AtomicUsize, Ordering};

use std::hash::BuildHasher;

use hashbrown::HashTable;

/// A buffer past this many bytes of keys and values goes to the store, whatever comes next:
/// memory stays bounded between checkpoints (or without them).
const LIMIT_BYTES: usize = 32 << 20;

/// What all buffers of the process may hold together (as much as the memtables: many
/// operator tasks in one process must not each hold [`LIMIT_BYTES`]). The buffer whose write
/// crosses it goes to its store.
const PROCESS_BYTES: usize = 128 << 20;

/// Bytes held by every buffer of the process.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// A value's length that marks a delete.
const DELETED: usize = usize::MAX;

/// Where a key's last write is in the arena.
#[derive(Clone, Copy)]
struct Slot {
    hash: u64,
    key: usize,
    key_len: usize,
    value: usize,
    /// [`DELETED`] for a delete.
    value_len: usize,
}

/// Puts and deletes by stored key, the last write of each key. Keys and values are appended
/// to one arena, and the table holds where they are: a write is a copy into the arena, not
/// two allocations (for a query writing mostly new keys, q18's, malloc and free of those had
/// been a tenth of its CPU). A value rewritten no longer than before is overwritten in place;
/// a longer one is appended, and the old bytes stay dead until the drain. Hashed with a
/// per-process random seed (keys are user data), and iterated only after sorting.
#[derive(Default)]
pub(crate) struct Pending {
    arena: Vec<u8>,
    slots: HashTable<Slot>,
    hasher: foldhash::fast::RandomState,
}

impl Pending {
    fn find(&self, hash: u64, key: &[u8]) -> Option<&Slot> {
        self.slots.find(hash, |s| s.hash == hash && &self.arena[s.key..s.key + s.key_len] == key)
    }

    /// The key's last write: `Some(None)` if it was a delete, `None` if it has none here.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        let slot = self.find(self.hasher.hash_one(key), key)?;
        Some(self.value_of(slot))
    }

    fn value_of(&self, slot: &Slot) -> Option<&[u8]> {
        (slot.value_len != DELETED).then(|| &self.arena[slot.value..slot.value + slot.value_len])
    }

    pub(crate) fn put(&mut self, key: &[u8], value: Option<&[u8]>) {
        let before = self.arena.len();
        let hash = self.hasher.hash_one(key);
        let arena = &mut self.arena;
        let found = self.slots.find_mut(hash, |s| s.hash == hash && &arena[s.key..s.key + s.key_len] == key);
        match (found, value) {
            (Some(slot), None) => slot.value_len = DELETED,
            (Some(slot), Some(v)) if slot.value_len != DELETED && v.len() <= slot.value_len => {
                arena[slot.value..slot.value + v.len()].copy_from_slice(v);
                slot.value_len = v.len();
            }
            (Some(slot), Some(v)) => {
                slot.value = arena.len();
                slot.value_len = v.len();
                arena.extend_from_slice(v);
            }
            (None, value) => {
                let at = arena.len();
                arena.extend_from_slice(key);
                arena.extend_from_slice(value.unwrap_or_default());
                let slot = Slot {
                    hash,
                    key: at,
                    key_len: key.len(),
                    value: at + key.len(),
                    value_len: value.map_or(DELETED, <[u8]>::len),
                };
                self.slots.insert_unique(hash, slot, |s| s.hash);
            }
        }
        publish(before, self.arena.len());
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub(crate) fn is_full(&self) -> bool {
        let bytes = self.arena.len();
        bytes >= LIMIT_BYTES || (bytes > 0 && HELD.load(Ordering::Relaxed) >= PROCESS_BYTES)
    }

    /// Every write, in key order, borrowed: [`Self::clear`] once they are in the store.
    pub(crate) fn sorted(&self) -> Vec<(&[u8], Option<&[u8]>)> {
        /// A write with its key's head (see below).
        type Headed<'a> = (u128, &'a [u8], Option<&'a [u8]>);
        // Sorted by each key's first 16 bytes as a number first: most comparisons end there,
        // without a call to memcmp (which sorting q16's keys had spent 6% of its CPU in).
        // Padding a short key with zeros keeps the order: zero is the smallest byte, and
        // keys whose heads are equal are compared whole.
        let mut writes: Vec<Headed<'_>> = self
            .slots
            .iter()
            .map(|s| {
                let key = &self.arena[s.key..s.key + s.key_len];
                (head(key), key, self.value_of(s))
            })
            .collect();
        writes.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        writes.into_iter().map(|(_, k, v)| (k, v)).collect()
    }

    /// Empty the buffer. What it held is kept allocated for the next interval, which writes
    /// about as much; a buffer that held less than half of what it has allocated gives the
    /// rest back (a burst must not keep its memory in every store).
    pub(crate) fn clear(&mut self) {
        let (bytes, entries) = (self.arena.len(), self.slots.len());
        publish(bytes, 0);
        self.arena.clear();
        self.slots.clear();
        if self.arena.capacity() > 2 * bytes {
            self.arena.shrink_to(bytes);
        }
        if self.slots.capacity() > 2 * entries {
            self.slots.shrink_to(entries, |s| s.hash);
        }
    }
}

/// A key's first 16 bytes, zero-padded, as a big-endian number.
fn head(key: &[u8]) -> u128 {
    let mut bytes = [0u8; 16];
    let n = key.len().min(16);
    bytes[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(bytes)
}

/// Tell the process-wide count that a buffer went from `before` bytes to `after`.
fn publish(before: usize, after: usize) {
    if after >= before {
        HELD.fetch_add(after - before, Ordering::Relaxed);
    } else {
        HELD.fetch_sub(before - after, Ordering::Relaxed);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        publish(self.arena.len(), 0);
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
        p.put(b"small", Some(b"v"));
        assert!(!p.is_full() || HELD.load(Ordering::Relaxed) >= PROCESS_BYTES);
        let big = vec![7u8; LIMIT_BYTES];
        p.put(b"big", Some(&big));
        assert!(p.is_full());
        let held = HELD.load(Ordering::Relaxed);
        assert!(held >= LIMIT_BYTES, "the process count holds this buffer: {held}");
        assert_eq!(p.sorted().len(), 2);
        p.clear();
        assert!(!p.is_full());
        assert!(p.is_empty());
        // Replacing the big value with a small one writes it in place: the buffer does not grow.
        p.put(b"big", Some(&big));
        p.put(b"big", Some(b"x"));
        assert_eq!(p.arena.len(), 3 + LIMIT_BYTES);
        assert_eq!(p.get(b"big"), Some(Some(&b"x"[..])));
        // A buffer cleared after holding little gives back what a burst had allocated.
        p.clear();
        p.put(b"k", Some(b"v"));
        p.clear();
        assert!(p.arena.capacity() < LIMIT_BYTES, "capacity kept: {}", p.arena.capacity());
        drop(p);
    }

    #[test]
    fn the_last_write_of_a_key_wins_and_comes_out_in_key_order() {
        let mut p = Pending::default();
        p.put(b"b", Some(b"1"));
        p.put(b"a", Some(b"2"));
        p.put(b"b", None);
        p.put(b"c", Some(b"3"));
        p.put(b"c", Some(b"33"));
        p.put(b"d", None);
        p.put(b"d", Some(b"4"));
        p.put(b"e", Some(b"555"));
        p.put(b"e", Some(b"5"));
        assert_eq!(p.get(b"b"), Some(None));
        assert_eq!(p.get(b"c"), Some(Some(&b"33"[..])));
        assert_eq!(p.get(b"d"), Some(Some(&b"4"[..])));
        assert_eq!(p.get(b"e"), Some(Some(&b"5"[..])));
        assert_eq!(p.get(b"f"), None);
        // Bytes: each key once; a longer value appended (c, and d after its delete), a
        // shorter one in place (e).
        assert_eq!(p.arena.len(), 2 + 2 + 2 + 2 + 1 + 1 + 4);
        let all: Vec<(&[u8], Option<&[u8]>)> = p.sorted();
        assert_eq!(
            all,
            vec![
                (&b"a"[..], Some(&b"2"[..])),
                (&b"b"[..], None),
                (&b"c"[..], Some(&b"33"[..])),
                (&b"d"[..], Some(&b"4"[..])),
                (&b"e"[..], Some(&b"5"[..])),
            ]
        );
        p.clear();
        assert!(p.is_empty());
        assert_eq!(p.get(b"a"), None);
        // Key order, not the order of the first 16 bytes alone: a short key and the same
        // bytes followed by zeros, and keys equal in their first 16 bytes.
        let keys: [&[u8]; 6] =
            [b"x\0\0", b"x", b"x\0", b"0123456789abcdefZ", b"0123456789abcdefA", b"0123456789abcdef"];
        for k in keys {
            p.put(k, Some(b"v"));
        }
        let mut expected = keys.to_vec();
        expected.sort();
        assert_eq!(p.sorted().into_iter().map(|(k, _)| k).collect::<Vec<_>>(), expected);
        p.clear();
        assert_eq!(p.arena.len(), 0);
    }
}
