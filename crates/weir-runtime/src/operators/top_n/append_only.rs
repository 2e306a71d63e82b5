//! `ROW_NUMBER()` over an append-only input: Flink's append-only Top-N, its deduplication
//! (a Top-1), Nexmark's q18 and q19. A row pushed past `hi` never ranks again, so a partition
//! keeps only its first `hi` rows, all in one value (`tops`), and a rank is a row's position.
//!
//! Why a path of its own: the general path copies each partition's stored rows into owned
//! lists, twice, to pair old and new ranks for any rank kind and for retractions. Here the
//! stored rows stay borrowed from the values read, a chunk's rows from its Arrow rows, and
//! the sort keys of rows that enter go into one buffer: a chunk allocates per chunk, not per
//! row. State, arrival numbers and changes are the general path's (each row takes an arrival
//! number; per partition one `-U`/`+U` pair per rank whose row changed, then `+I` for ranks
//! newly filled).

use std::ops::Range;

use datafusion::arrow::row::Rows;
use weir_core::{Chunk, Message, Op, Result};
use weir_state::tables::Change;

use super::{next_item, push_item, RankKind, TopN};

/// Where a kept row's sort key is: in the partition's stored value, or in the chunk's buffer
/// of new keys.
enum SortKey<'s> {
    Stored(&'s [u8]),
    New(Range<usize>),
}

impl SortKey<'_> {
    fn bytes<'k>(&'k self, new_keys: &'k [u8]) -> &'k [u8] {
        match self {
            SortKey::Stored(k) => k,
            SortKey::New(r) => &new_keys[r.clone()],
        }
    }
}

impl TopN {
    pub(super) fn keeps_top_rows_only(&self) -> bool {
        self.spec.kind == RankKind::RowNumber && !self.spec.retracting_input
    }

    /// A chunk of [`Self::keeps_top_rows_only`]: each partition's stored rows (one multi-get
    /// for the chunk) and the chunk's rows that rank within `hi`, merged by sort key.
    pub(super) fn keep_top(
        &mut self,
        chunk: &Chunk,
        rows: &Rows,
        order_keys: &Rows,
        partitions: &[(u16, &[u8], Vec<usize>)],
        out: &mut Vec<Message>,
    ) -> Result<()> {
        let hi = usize::try_from(self.spec.hi).unwrap_or(usize::MAX);
        let ranks = self.spec.lo..=self.spec.hi;
        let keys: Vec<(u16, &[u8])> = partitions.iter().map(|(g, k, _)| (*g, *k)).collect();
        let stored = self.tables.get_many(self.tops, &keys)?;
        let ops = chunk.ops();
        // The sort keys of rows that entered, and the values of partitions that changed.
        let (mut new_keys, mut values) = (Vec::new(), Vec::new());
        let mut written: Vec<(u16, &[u8], Range<usize>)> = Vec::new();
        let mut changes: Vec<(&[u8], u64, Op)> = Vec::new();
        let mut before: Vec<(&[u8], &[u8])> = Vec::new();
        let mut current: Vec<(SortKey<'_>, &[u8])> = Vec::new();
        for ((group, key, members), stored) in partitions.iter().zip(&stored) {
            before.clear();
            if let Some(mut bytes) = stored.as_deref() {
                while !bytes.is_empty() {
                    let k = next_item(&mut bytes)?;
                    before.push((k, next_item(&mut bytes)?));
                }
            }
            current.clear();
            current.extend(before.iter().map(|(k, row)| (SortKey::Stored(k), *row)));
            for &i in members {
                if ops[i].sign() <= 0 {
                    // A retraction in an append-only input: of a row that has left, or was
                    // never there.
                    self.unmatched += 1;
                    continue;
                }
                let start = new_keys.len();
                new_keys.extend_from_slice(order_keys.row(i).data());
                new_keys.extend_from_slice(&self.next_seq().to_be_bytes());
                let candidate = &new_keys[start..];
                let at = current.partition_point(|(k, _)| k.bytes(&new_keys) <= candidate);
                if at >= hi {
                    new_keys.truncate(start);
                    continue;
                }
                current.insert(at, (SortKey::New(start..new_keys.len()), rows.row(i).data()));
                current.truncate(hi);
            }
            if !current.iter().any(|(k, _)| matches!(k, SortKey::New(_))) {
                continue;
            }
            for (at, (k, row)) in current.iter().enumerate() {
                let rank = at as u64 + 1;
                let old = before.get(at);
                if !ranks.contains(&rank) || old.is_some_and(|(old_key, _)| *old_key == k.bytes(&new_keys)) {
                    continue;
                }
                match old {
                    Some((_, old_row)) => {
                        changes.push((old_row, rank, Op::UpdateBefore));
                        changes.push((row, rank, Op::UpdateAfter));
                    }
                    None => changes.push((row, rank, Op::Insert)),
                }
            }
            let start = values.len();
            for (k, row) in &current {
                push_item(&mut values, k.bytes(&new_keys));
                push_item(&mut values, row);
            }
            written.push((*group, *key, start..values.len()));
        }
        let top_changes: Vec<Change<'_>> =
            written.iter().map(|(g, k, value)| (*g, *k, Some(&values[value.clone()]))).collect();
        self.tables.write(self.tops, &top_changes)?;
        let stamped: Vec<(u16, &[u8])> = written.iter().map(|(g, k, _)| (*g, *k)).collect();
        self.stamp(&stamped)?;
        self.emit(&changes, out)
    }
}
