//! What kind of changes a stream carries, and a changelog applied to a table.

use std::collections::HashMap;

use datafusion::arrow::array::UInt32Array;
use datafusion::arrow::compute::take_record_batch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};

use crate::{Chunk, Op, Result};

/// The changes a plan node's output carries (a plan property, like DataFusion's emission
/// type): what an operator or sink reading it must be able to take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Changelog {
    /// Only `+I`: rows are never taken back.
    AppendOnly,
    /// `+I`, `-U`/`+U` pairs and `-D`, each retraction carrying the whole old row.
    Retract,
    /// By key (the columns): `+I`/`+U` carry a key's new row, `-D` deletes the key; no `-U`.
    Upsert(Vec<usize>),
}

impl Changelog {
    pub fn is_append_only(&self) -> bool {
        matches!(self, Changelog::AppendOnly)
    }

    /// Both inputs of a union: updating if either is.
    pub fn union(&self, other: &Changelog) -> Changelog {
        match (self, other) {
            (Changelog::AppendOnly, Changelog::AppendOnly) => Changelog::AppendOnly,
            _ => Changelog::Retract,
        }
    }

    pub fn describe(&self) -> &'static str {
        match self {
            Changelog::AppendOnly => "append-only",
            Changelog::Retract => "retract",
            Changelog::Upsert(_) => "upsert",
        }
    }
}

/// A changelog applied: the rows it leaves (a multiset), each where it was first inserted; an
/// update pair's new row takes its old row's place, so a table kept up to date on a screen
/// changes in place.
pub struct Materialized {
    schema: SchemaRef,
    converter: RowConverter,
    /// Encoded row → (place, count).
    rows: HashMap<Vec<u8>, (u64, u64)>,
    /// The rows, one copy of each distinct one, in one batch per applied chunk.
    kept: Vec<RecordBatch>,
    /// Encoded row → (batch, row) of its copy in `kept`.
    copies: HashMap<Vec<u8>, (usize, u32)>,
    next: u64,
    /// Retractions of rows that were not there (a changelog that does not start empty).
    pub unmatched: u64,
}

impl Materialized {
    pub fn new(schema: SchemaRef) -> Result<Self> {
        let converter =
            RowConverter::new(schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect())?;
        Ok(Self {
            schema,
            converter,
            rows: HashMap::new(),
            kept: Vec::new(),
            copies: HashMap::new(),
            next: 0,
            unmatched: 0,
        })
    }

    pub fn apply(&mut self, chunk: &Chunk) -> Result<()> {
        let rows = self.converter.convert_columns(chunk.batch.columns())?;
        let batch = self.kept.len();
        let mut taken_place: Option<u64> = None;
        for i in 0..chunk.num_rows() {
            let key = rows.row(i).as_ref().to_vec();
            match chunk.op(i) {
                Op::Insert | Op::UpdateAfter => {
                    let place = match (chunk.op(i), taken_place.take()) {
                        (Op::UpdateAfter, Some(p)) => p,
                        _ => {
                            self.next += 1;
                            self.next
                        }
                    };
                    let entry = self.rows.entry(key.clone()).or_insert((place, 0));
                    entry.1 += 1;
                    self.copies.entry(key).or_insert((batch, i as u32));
                }
                Op::UpdateBefore | Op::Delete => match self.rows.get_mut(&key) {
                    Some(entry) => {
                        entry.1 -= 1;
                        if chunk.op(i) == Op::UpdateBefore {
                            taken_place = Some(entry.0);
                        }
                        if entry.1 == 0 {
                            self.rows.remove(&key);
                            self.copies.remove(&key);
                        }
                    }
                    None => self.unmatched += 1,
                },
            }
        }
        self.kept.push(chunk.batch.clone());
        if self.kept.len() > 64 && self.kept.len() > 4 * self.rows.len().max(1) {
            self.compact()?;
        }
        Ok(())
    }

    /// Keep only the batches rows still point into.
    fn compact(&mut self) -> Result<()> {
        let table = self.table()?;
        let rows = self.converter.convert_columns(table.columns())?;
        self.copies = (0..table.num_rows()).map(|i| (rows.row(i).as_ref().to_vec(), (0, i as u32))).collect();
        self.kept = vec![table];
        Ok(())
    }

    /// Rows now in the table, counting repeats.
    pub fn len(&self) -> usize {
        self.rows.values().map(|(_, n)| *n as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table now: each row as many times as it is there, in place order.
    pub fn table(&self) -> Result<RecordBatch> {
        let mut order: Vec<(u64, u64, (usize, u32))> = self
            .rows
            .iter()
            .filter_map(|(k, (place, n))| self.copies.get(k).map(|c| (*place, *n, *c)))
            .collect();
        order.sort_unstable_by_key(|(place, _, _)| *place);
        let mut parts = Vec::new();
        // Rows in place order come from any of the kept batches: one take over them all.
        let all = datafusion::arrow::compute::concat_batches(&self.schema, &self.kept)?;
        let offsets: Vec<usize> = self
            .kept
            .iter()
            .scan(0usize, |acc, b| {
                let start = *acc;
                *acc += b.num_rows();
                Some(start)
            })
            .collect();
        for (_, n, (b, r)) in &order {
            for _ in 0..*n {
                parts.push((offsets[*b] + *r as usize) as u32);
            }
        }
        Ok(take_record_batch(&all, &UInt32Array::from(parts))?)
    }
}
