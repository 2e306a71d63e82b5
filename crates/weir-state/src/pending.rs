//! Writes held in memory until the store needs them (a checkpoint, a scan, or a full
//! buffer), and kept after that as a cache of what the store holds.
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
//! Why the written entries stay (clean) after a drain: with checkpoints every 100 ms, an
//! updating aggregate reads nearly every key it writes again in the next interval, and a
//! buffer emptied at each checkpoint sent each of those first reads to RocksDB (a MultiGet
//! through the memtable and SST files: most of what a short interval cost such a query on
//! top of a long one). A clean entry answers the read; only the entries written since the
//! last drain (dirty) go to the store at the next one. The clean entries have their own
//! memory budget, apart from the writes' ([`CLEAN_LIMIT_BYTES`]): the cache must never force
//! a drain. A buffer over that budget at a drain forgets its clean entries.
//!
//! Nothing here is durable, and need not be: the local store is scratch, and a checkpoint
//! writes the buffer to the store before it snapshots it. The owner must forget the clean
//! entries ([`Pending::clear`]) whenever the store changes other than by a drain (a range
//! delete), or they would answer with what the store no longer holds.

use std::sync::atomic::{AtomicUsize, Ordering};

use std::hash::BuildHasher;

use hashbrown::HashTable;

/// A buffer with this many bytes of writes since its last drain goes to the store, whatever
/// comes next: memory stays bounded between checkpoints (or without them).
const LIMIT_BYTES: usize = 32 << 20;

/// What all buffers of the process may hold together in writes (as much as the memtables:
/// many operator tasks in one process must not each hold [`LIMIT_BYTES`]). The buffer whose
/// write crosses it goes to its store.
const PROCESS_BYTES: usize = 128 << 20;

/// The most one buffer keeps after a drain, as a cache.
const CLEAN_LIMIT_BYTES: usize = 32 << 20;

/// The most all buffers of the process keep after their drains.
const CLEAN_PROCESS_BYTES: usize = 128 << 20;

/// Bytes of writes held by every buffer of the process.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Bytes kept as caches by every buffer of the process.
static CLEAN: AtomicUsize = AtomicUsize::new(0);

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
    /// Written since the last drain: the store does not have it yet.
    dirty: bool,
}

/// Puts and deletes by stored key, the last write of each key. Keys and values are appended
/// to one arena, and the table holds where they are: a write is a copy into the arena, not
/// two allocations (for a query writing mostly new keys, q18's, malloc and free of those had
/// been a tenth of its CPU). A value rewritten no longer than before is overwritten in place;
/// a longer one is appended, and the old bytes stay dead until a drain compacts the arena.
/// Hashed with a per-process random seed (keys are user data), and iterated only after
/// sorting.
#[derive(Default)]
pub(crate) struct Pending {
    arena: Vec<u8>,
    slots: HashTable<Slot>,
    hasher: foldhash::fast::RandomState,
    /// The arena's length after the last drain: the bytes counted in [`CLEAN`]; what lies
    /// past it is counted in [`HELD`].
    clean_bytes: usize,
    /// Slots written since the last drain.
    dirty: usize,
}

impl Pending {
    fn find(&self, hash: u64, key: &[u8]) -> Option<&Slot> {
        self.slots.find(hash, |s| s.hash == hash && &self.arena[s.key..s.key + s.key_len] == key)
    }

    /// The key's last write, or what the store holds for it as of the last drain:
    /// `Some(None)` if it was a delete, `None` if it has none here.
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
        match found {
            Some(slot) => {
                if !slot.dirty {
                    slot.dirty = true;
                    self.dirty += 1;
                }
                match value {
                    None => slot.value_len = DELETED,
                    Some(v) if slot.value_len != DELETED && v.len() <= slot.value_len => {
                        arena[slot.value..slot.value + v.len()].copy_from_slice(v);
                        slot.value_len = v.len();
                    }
                    Some(v) => {
                        slot.value = arena.len();
                        slot.value_len = v.len();
                        arena.extend_from_slice(v);
                    }
                }
            }
            None => {
                let at = arena.len();
                arena.extend_from_slice(key);
                arena.extend_from_slice(value.unwrap_or_default());
                let slot = Slot {
                    hash,
                    key: at,
                    key_len: key.len(),
                    value: at + key.len(),
                    value_len: value.map_or(DELETED, <[u8]>::len),
                    dirty: true,
                };
                self.slots.insert_unique(hash, slot, |s| s.hash);
                self.dirty += 1;
            }
        }
        publish(&HELD, before, self.arena.len());
    }

    /// Whether anything was written since the last drain.
    pub(crate) fn has_writes(&self) -> bool {
        self.dirty > 0
    }

    fn written_bytes(&self) -> usize {
        self.arena.len() - self.clean_bytes
    }

    pub(crate) fn is_full(&self) -> bool {
        let bytes = self.written_bytes();
        bytes >= LIMIT_BYTES || (bytes > 0 && HELD.load(Ordering::Relaxed) >= PROCESS_BYTES)
    }

    /// The writes since the last drain, in key order, borrowed: [`Self::drained`] once they
    /// are in the store.
    pub(crate) fn sorted(&self) -> Vec<(&[u8], Option<&[u8]>)> {
        /// A write with its key's head (see below).
        type Headed<'a> = (u128, &'a [u8], Option<&'a [u8]>);
        // Sorted by each key's first 16 bytes as a number first: most comparisons end there,
        // without a call to memcmp (which sorting q16's keys had spent 6% of its CPU in).
        // Padding a short key with zeros keeps the order: zero is the smallest byte, and
        // keys whose heads are equal are compared whole.
        let mut writes: Vec<Headed<'_>> = Vec::with_capacity(self.dirty);
        writes.extend(self.slots.iter().filter(|s| s.dirty).map(|s| {
            let key = &self.arena[s.key..s.key + s.key_len];
            (head(key), key, self.value_of(s))
        }));
        writes.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        writes.into_iter().map(|(_, k, v)| (k, v)).collect()
    }

    /// The writes are in the store: keep them as clean entries, or forget everything if the
    /// cache would be over its budget. An arena mostly dead (values rewritten longer) is
    /// compacted first.
    pub(crate) fn drained(&mut self) {
        publish(&HELD, self.arena.len(), self.clean_bytes);
        let mut live = 0;
        for slot in self.slots.iter_mut() {
            slot.dirty = false;
            live += slot.key_len + if slot.value_len == DELETED { 0 } else { slot.value_len };
        }
        self.dirty = 0;
        let others = CLEAN.load(Ordering::Relaxed).saturating_sub(self.clean_bytes);
        if live > CLEAN_LIMIT_BYTES || others + live > CLEAN_PROCESS_BYTES {
            publish(&CLEAN, self.clean_bytes, 0);
            self.forget();
            return;
        }
        if self.arena.len() > 2 * live {
            self.compact(live);
        }
        publish(&CLEAN, self.clean_bytes, self.arena.len());
        self.clean_bytes = self.arena.len();
    }

    /// Copy the live keys and values to a new arena of `live` bytes.
    fn compact(&mut self, live: usize) {
        let mut arena = Vec::with_capacity(live);
        for slot in self.slots.iter_mut() {
            let at = arena.len();
            arena.extend_from_slice(&self.arena[slot.key..slot.key + slot.key_len]);
            if slot.value_len != DELETED {
                arena.extend_from_slice(&self.arena[slot.value..slot.value + slot.value_len]);
            }
            slot.key = at;
            slot.value = at + slot.key_len;
        }
        self.arena = arena;
    }

    /// Forget everything, written or clean. What the arena held is kept allocated for the
    /// next interval, which writes about as much; a buffer that held less than half of what
    /// it has allocated gives the rest back (a burst must not keep its memory in every store).
    pub(crate) fn clear(&mut self) {
        publish(&HELD, self.arena.len(), self.clean_bytes);
        publish(&CLEAN, self.clean_bytes, 0);
        self.forget();
    }

    /// [`Self::clear`], with the process-wide counts already told.
    fn forget(&mut self) {
        let (bytes, entries) = (self.arena.len(), self.slots.len());
        self.clean_bytes = 0;
        self.dirty = 0;
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

/// Tell a process-wide count that a buffer's share went from `before` bytes to `after`.
fn publish(count: &AtomicUsize, before: usize, after: usize) {
    if after >= before {
        count.fetch_add(after - before, Ordering::Relaxed);
    } else {
        count.fetch_sub(before - after, Ordering::Relaxed);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        publish(&HELD, self.arena.len(), self.clean_bytes);
        publish(&CLEAN, self.clean_bytes, 0);
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
        assert!(!p.has_writes());
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
        assert!(!p.has_writes());
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

    /// After a drain the entries stay, clean: they answer lookups, only later writes come out
    /// at the next drain, and a clear forgets them.
    #[test]
    fn drained_entries_stay_clean_and_only_later_writes_drain_again() {
        let mut p = Pending::default();
        p.put(b"a", Some(b"1"));
        p.put(b"b", None);
        assert_eq!(p.sorted().len(), 2);
        p.drained();
        assert!(!p.has_writes());
        assert!(p.sorted().is_empty());
        assert!(!p.is_full());
        assert_eq!(p.get(b"a"), Some(Some(&b"1"[..])));
        assert_eq!(p.get(b"b"), Some(None));
        p.put(b"a", Some(b"2"));
        p.put(b"c", Some(b"3"));
        assert_eq!(p.sorted(), vec![(&b"a"[..], Some(&b"2"[..])), (&b"c"[..], Some(&b"3"[..]))]);
        p.drained();
        assert!(p.sorted().is_empty());
        assert_eq!(p.get(b"a"), Some(Some(&b"2"[..])));
        p.clear();
        assert_eq!(p.get(b"a"), None);
        assert_eq!(p.get(b"c"), None);
    }

    /// A drain compacts an arena mostly dead (values rewritten longer), keeping every value.
    #[test]
    fn a_drain_compacts_an_arena_of_dead_values() {
        let mut p = Pending::default();
        for v in [&b"1234"[..], b"12345", b"123456", b"1234567"] {
            p.put(b"k", Some(v));
        }
        p.put(b"gone", None);
        assert_eq!(p.arena.len(), 1 + 4 + 5 + 6 + 7 + 4);
        p.drained();
        assert_eq!(p.arena.len(), 1 + 7 + 4);
        assert_eq!(p.get(b"k"), Some(Some(&b"1234567"[..])));
        assert_eq!(p.get(b"gone"), Some(None));
    }

    /// A buffer whose entries are more than its cache may keep forgets them at the drain.
    #[test]
    fn a_drain_over_the_cache_budget_forgets_the_entries() {
        let mut p = Pending::default();
        p.put(b"big", Some(&vec![1u8; CLEAN_LIMIT_BYTES]));
        p.drained();
        assert_eq!(p.get(b"big"), None);
        assert_eq!(p.arena.len(), 0);
    }
}
