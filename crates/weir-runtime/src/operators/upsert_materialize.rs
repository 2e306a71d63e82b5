//! A retracting changelog made fit for a sink written by another key than the query's own
//! (Flink's `SinkUpsertMaterializer`): per sink key, the rows that currently hold it, in
//! arrival order, with the last one the key's value. An insert appends a row and makes it the
//! value; a retraction removes the latest equal row, and when that row was the value the one
//! before it becomes the value again (or the key is deleted when none is left). What leaves is
//! a retracting changelog with at most one row per sink key: `+I` for a new key, a `-U`/`+U`
//! pair when its value changes, `-D` when it goes. Per chunk, each key's state is read once
//! and written once.

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use weir_core::{Chunk, Message, Op, Result, WeirError};
use weir_state::tables::Change;
use weir_state::{StateTables, Table, TableDecl, TableKind};

use super::keyed::KeyedLogic;
use super::state::{interner, rows_batch, Progress, StateContext};

const TABLES: [TableDecl; 1] = [TableDecl { name: "rows", kind: TableKind::Value }];

#[derive(Debug, Clone)]
pub struct MaterializeSpec {
    /// The sink's key columns (what the exchange before hashed).
    pub key: Vec<usize>,
    pub schema: SchemaRef,
}

pub struct UpsertMaterialize {
    spec: MaterializeSpec,
    tables: StateTables,
    /// The watermark (nothing here waits for it).
    progress: Progress,
    rows_table: Table,
    keys: RowConverter,
    rows: RowConverter,
}

/// A key's rows: each as its length (4 bytes, little-endian) and its bytes.
fn encode(rows: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rows.iter().map(|r| r.len() + 4).sum());
    for r in rows {
        out.extend_from_slice(&(r.len() as u32).to_le_bytes());
        out.extend_from_slice(r);
    }
    out
}

fn decode(mut bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
    let damaged = || WeirError::internal("upsert materializer state is damaged");
    let mut rows = Vec::new();
    while !bytes.is_empty() {
        let len = bytes.get(..4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes).ok_or_else(damaged)? as usize;
        rows.push(bytes.get(4..4 + len).ok_or_else(damaged)?.to_vec());
        bytes = &bytes[4 + len..];
    }
    Ok(rows)
}

impl UpsertMaterialize {
    pub fn new(spec: MaterializeSpec, state: &StateContext) -> Result<Self> {
        let field = |i: &usize| SortField::new(spec.schema.field(*i).data_type().clone());
        let keys = RowConverter::new(spec.key.iter().map(field).collect())?;
        let rows =
            RowConverter::new(spec.schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect())?;
        let tables = state.open(&TABLES)?;
        Ok(Self { rows_table: tables.table("rows")?, tables, keys, rows, spec, progress: Progress::default() })
    }
}

impl KeyedLogic for UpsertMaterialize {
    type Own = ();

    fn name(&self) -> String {
        "UpsertMaterialize".into()
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
        let mut index = interner::<&[u8], usize>();
        let mut distinct: Vec<(u16, &[u8])> = Vec::new();
        let mut of_row = Vec::with_capacity(n);
        for i in 0..n {
            let key = keys.row(i).data();
            of_row.push(*index.entry(key).or_insert_with(|| {
                distinct.push((groups[i], key));
                distinct.len() - 1
            }));
        }
        let mut lists: Vec<Vec<Vec<u8>>> = self
            .tables
            .get_many(self.rows_table, &distinct)?
            .into_iter()
            .map(|s| s.map_or(Ok(Vec::new()), |s| decode(&s)))
            .collect::<Result<_>>()?;
        // Each key's value before the chunk; what changed is emitted once per key, at its end.
        let before: Vec<Option<Vec<u8>>> = lists.iter().map(|l| l.last().cloned()).collect();
        let mut touched = vec![false; distinct.len()];
        for (i, k) in of_row.iter().copied().enumerate() {
            let row = rows.row(i).data();
            let list = &mut lists[k];
            match chunk.op(i) {
                Op::Insert | Op::UpdateAfter => list.push(row.to_vec()),
                // A retraction of a row the key does not hold (its state expired) changes nothing.
                Op::UpdateBefore | Op::Delete => {
                    if let Some(at) = list.iter().rposition(|r| r.as_slice() == row) {
                        list.remove(at);
                    }
                }
            }
            touched[k] = true;
        }
        let mut emitted: Vec<Vec<u8>> = Vec::new();
        let mut ops = Vec::new();
        let mut writes: Vec<(u16, &[u8], Option<Vec<u8>>)> = Vec::new();
        for (k, (group, key)) in distinct.iter().enumerate().filter(|(k, _)| touched[*k]) {
            match (&before[k], lists[k].last()) {
                (None, Some(new)) => {
                    emitted.push(new.clone());
                    ops.push(Op::Insert);
                }
                (Some(old), Some(new)) if old != new => {
                    emitted.extend([old.clone(), new.clone()]);
                    ops.extend([Op::UpdateBefore, Op::UpdateAfter]);
                }
                (Some(old), None) => {
                    emitted.push(old.clone());
                    ops.push(Op::Delete);
                }
                _ => {}
            }
            writes.push((*group, *key, (!lists[k].is_empty()).then(|| encode(&lists[k]))));
        }
        let changes: Vec<Change<'_>> = writes.iter().map(|(g, k, v)| (*g, *k, v.as_deref())).collect();
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
