//! `'upsert-enabled' = 'true'`: an updating result kept as an Iceberg table by its key. Each
//! checkpoint's changes are folded to the last value of each key; at the pre-commit they
//! become one equality-delete file (every key changed) and data files (the keys' new rows),
//! committed in one snapshot. The deletes' sequence number is the snapshot's, so they remove
//! the keys' rows of earlier snapshots and never the rows committed beside them.

use std::collections::HashMap;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::compute::interleave_record_batch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{OwnedRow, RowConverter, SortField};
use weir_core::{Chunk, Op, Result};

pub struct Upsert {
    /// The key's columns among the table's.
    pub key_columns: Vec<usize>,
    /// The delete files' schema: the key columns with their field ids.
    pub key_schema: SchemaRef,
    converter: RowConverter,
    batches: Vec<RecordBatch>,
    /// Each key changed since the last pre-commit: its last row (batch, row), or `None` if
    /// its last change deleted it.
    latest: HashMap<OwnedRow, Option<(usize, usize)>>,
}

impl Upsert {
    pub fn new(file_schema: &Schema, key_columns: Vec<usize>) -> Result<Self> {
        let key_schema = std::sync::Arc::new(file_schema.project(&key_columns)?);
        let converter =
            RowConverter::new(key_schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect())?;
        Ok(Self { key_columns, key_schema, converter, batches: Vec::new(), latest: HashMap::new() })
    }

    /// A chunk's changes, its rows already in the files' types (`batch`).
    pub fn push(&mut self, chunk: &Chunk, batch: RecordBatch) -> Result<()> {
        let keys: Vec<ArrayRef> = self.key_columns.iter().map(|i| batch.column(*i).clone()).collect();
        let rows = self.converter.convert_columns(&keys)?;
        let b = self.batches.len();
        for i in 0..batch.num_rows() {
            let value = match chunk.op(i) {
                Op::Insert | Op::UpdateAfter => Some((b, i)),
                Op::Delete => None,
                // The key's next row (or its delete) follows: nothing to do for the old value.
                Op::UpdateBefore => continue,
            };
            self.latest.insert(rows.row(i).owned(), value);
        }
        self.batches.push(batch);
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }

    /// The keys to delete (every key changed) and the rows to write (the keys' new values),
    /// in key order; the buffer is emptied.
    pub fn drain(&mut self) -> Result<(Option<RecordBatch>, Option<RecordBatch>)> {
        if self.latest.is_empty() {
            self.batches.clear();
            return Ok((None, None));
        }
        let mut latest: Vec<(OwnedRow, Option<(usize, usize)>)> = self.latest.drain().collect();
        latest.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let keys = self.converter.convert_rows(latest.iter().map(|(k, _)| k.row()))?;
        let deletes = RecordBatch::try_new(self.key_schema.clone(), keys)?;
        let indices: Vec<(usize, usize)> = latest.iter().filter_map(|(_, v)| *v).collect();
        let rows = match indices.is_empty() {
            true => None,
            false => {
                let refs: Vec<&RecordBatch> = self.batches.iter().collect();
                Some(interleave_record_batch(&refs, &indices)?)
            }
        };
        self.batches.clear();
        Ok((Some(deletes), rows))
    }
}
