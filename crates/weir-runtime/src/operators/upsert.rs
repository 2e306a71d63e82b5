//! Upserts made a retracting changelog (Flink's ChangelogNormalize): an upsert source (an
//! `upsert-kafka` table) says only each key's new row, or that the key is gone. This keeps
//! each key's current row in a state table and emits what changed: `+I` for a new key, a
//! `-U`/`+U` pair when its row changes, `-D` with the old row when it is deleted, nothing when
//! an upsert repeats the row or deletes a key that is not there. One change per key per chunk
//! (its last upsert wins), and one state access per distinct key.

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use weir_core::{Chunk, Message, Op, Result};
use weir_state::tables::Change;
use weir_state::{StateTables, Table, TableDecl, TableKind};

use super::keyed::KeyedLogic;
use super::state::{interner, rows_batch, Interner, Progress, StateContext};

const TABLES: [TableDecl; 1] = [TableDecl { name: "rows", kind: TableKind::Value }];

#[derive(Debug, Clone)]
pub struct UpsertSpec {
    /// The key columns (what the exchange before hashed).
    pub key: Vec<usize>,
    pub schema: SchemaRef,
}

pub struct UpsertNormalize {
    spec: UpsertSpec,
    tables: StateTables,
    /// The watermark (nothing here waits for it).
    progress: Progress,
    rows_table: Table,
    keys: RowConverter,
    rows: RowConverter,
}

impl UpsertNormalize {
    pub fn new(spec: UpsertSpec, state: &StateContext) -> Result<Self> {
        let field = |i: &usize| SortField::new(spec.schema.field(*i).data_type().clone());
        let keys = RowConverter::new(spec.key.iter().map(field).collect())?;
        let rows =
            RowConverter::new(spec.schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect())?;
        let tables = state.open(&TABLES)?;
        Ok(Self { rows_table: tables.table("rows")?, tables, keys, rows, spec, progress: Progress::default() })
    }
}

impl KeyedLogic for UpsertNormalize {
    type Own = ();

    fn name(&self) -> String {
        "UpsertNormalize".into()
    }

    fn process(&mut self, _input: usize, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        let n = chunk.num_rows();
        if n == 0 {
            return Ok(());
        }
        let key_columns: Vec<ArrayRef> = self.spec.key.iter().map(|i| chunk.batch.column(*i).clone()).collect();
        let keys = self.keys.convert_columns(&key_columns)?;
        let rows = self.rows.convert_columns(chunk.batch.columns())?;
        let groups = crate::exchange::key_groups_of_columns(&key_columns, n, self.tables.key_groups())?;
        // The last upsert of each key, keys in order of first appearance.
        let mut last: Interner<&[u8], usize> = interner();
        let mut order: Vec<&[u8]> = Vec::new();
        for i in 0..n {
            let key = keys.row(i).data();
            if last.insert(key, i).is_none() {
                order.push(key);
            }
        }
        let lookups: Vec<(u16, &[u8])> = order.iter().map(|k| (groups[last[k]], *k)).collect();
        let stored = self.tables.get_many(self.rows_table, &lookups)?;
        let mut emitted: Vec<Vec<u8>> = Vec::new();
        let mut ops = Vec::new();
        let mut changes: Vec<Change<'_>> = Vec::new();
        for ((group, key), old) in lookups.iter().zip(&stored) {
            let i = last[key];
            let new = (chunk.op(i) != Op::Delete).then(|| rows.row(i).data());
            match (old, new) {
                (None, Some(new)) => {
                    emitted.push(new.to_vec());
                    ops.push(Op::Insert);
                }
                (Some(old), Some(new)) if old.as_slice() != new => {
                    emitted.extend([old.clone(), new.to_vec()]);
                    ops.extend([Op::UpdateBefore, Op::UpdateAfter]);
                }
                (Some(old), None) => {
                    emitted.push(old.clone());
                    ops.push(Op::Delete);
                }
                _ => continue,
            }
            changes.push((*group, *key, new));
        }
        self.tables.write(self.rows_table, &changes)?;
        if !ops.is_empty() {
            let batch = rows_batch(&self.rows, emitted.iter().map(Vec::as_slice), Vec::new(), &self.spec.schema)?;
            out.push(Message::Chunk(Chunk::changes(batch, &ops).from_partition(chunk.origin)));
        }
        Ok(())
    }

    fn state(&mut self) -> (&mut StateTables, &mut Progress) {
        (&mut self.tables, &mut self.progress)
    }

    fn progress(&self) -> &Progress {
        &self.progress
    }
}
