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
    /// Encoded row → where it is shown, how many times it is there, and its copy in `kept`.
    rows: HashMap<Vec<u8>, Present>,
    /// The applied chunks' batches that rows are copied from.
    kept: Vec<RecordBatch>,
    next: u64,
    /// Retractions of rows that were not there (a changelog that does not start empty).
    pub unmatched: u64,
}

struct Present {
    place: u64,
    count: u64,
    /// (batch in `kept`, row).
    copy: (usize, u32),
}

impl Materialized {
    pub fn new(schema: SchemaRef) -> Result<Self> {
        let converter =
            RowConverter::new(schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect())?;
        Ok(Self { schema, converter, rows: HashMap::new(), kept: Vec::new(), next: 0, unmatched: 0 })
    }

    pub fn apply(&mut self, chunk: &Chunk) -> Result<()> {
        let rows = self.converter.convert_columns(chunk.batch.columns())?;
        let batch = self.kept.len();
        let mut taken_place: Option<u64> = None;
        for i in 0..chunk.num_rows() {
            let row = rows.row(i);
            let key = row.as_ref();
            match chunk.op(i) {
                op @ (Op::Insert | Op::UpdateAfter) => {
                    let place = match (op, taken_place.take()) {
                        (Op::UpdateAfter, Some(p)) => p,
                        _ => {
                            self.next += 1;
                            self.next
                        }
                    };
                    let present =
                        self.rows.entry(key.to_vec()).or_insert(Present { place, count: 0, copy: (batch, i as u32) });
                    present.count += 1;
                }
                op @ (Op::UpdateBefore | Op::Delete) => match self.rows.get_mut(key) {
                    Some(present) => {
                        present.count -= 1;
                        if op == Op::UpdateBefore {
                            taken_place = Some(present.place);
                        }
                        if present.count == 0 {
                            self.rows.remove(key);
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

    /// Keep only the rows' copies, in one batch.
    fn compact(&mut self) -> Result<()> {
        let indices = self.offsets();
        let mut present: Vec<&mut Present> = self.rows.values_mut().collect();
        present.sort_unstable_by_key(|p| p.copy);
        let take: Vec<u32> = present.iter().map(|p| (indices[p.copy.0] + p.copy.1 as usize) as u32).collect();
        let all = datafusion::arrow::compute::concat_batches(&self.schema, &self.kept)?;
        let batch = take_record_batch(&all, &UInt32Array::from(take))?;
        for (i, p) in present.into_iter().enumerate() {
            p.copy = (0, i as u32);
        }
        self.kept = vec![batch];
        Ok(())
    }

    /// Where each kept batch starts in their concatenation.
    fn offsets(&self) -> Vec<usize> {
        self.kept
            .iter()
            .scan(0usize, |acc, b| {
                let start = *acc;
                *acc += b.num_rows();
                Some(start)
            })
            .collect()
    }

    /// Rows now in the table, counting repeats.
    pub fn len(&self) -> usize {
        self.rows.values().map(|p| p.count as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table now: each row as many times as it is there, in place order.
    pub fn table(&self) -> Result<RecordBatch> {
        let mut present: Vec<&Present> = self.rows.values().collect();
        present.sort_unstable_by_key(|p| p.place);
        let offsets = self.offsets();
        let take: Vec<u32> = present
            .iter()
            .flat_map(|p| std::iter::repeat_n((offsets[p.copy.0] + p.copy.1 as usize) as u32, p.count as usize))
            .collect();
        // Rows in place order come from any of the kept batches: one take over them all.
        let all = datafusion::arrow::compute::concat_batches(&self.schema, &self.kept)?;
        Ok(take_record_batch(&all, &UInt32Array::from(take))?)
    }
}
