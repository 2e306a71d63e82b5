//! The statements a flush runs, and the rows it writes: with a key, each key's last change
//! only (one upsert statement for the new values, one delete for the keys gone); without one,
//! the changes in order (inserts together, each retraction deleting one equal row).
//!
//! Every statement takes whole columns as array parameters and `unnest`s them: one round trip
//! and one binary value per column for thousands of rows.

use datafusion::arrow::array::{RecordBatch, UInt32Array};
use datafusion::arrow::compute::{concat_batches, take_record_batch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use std::collections::HashSet;
use tokio_postgres::types::ToSql;
use tokio_postgres::GenericClient;
use weir_core::{Chunk, Op, Result, WeirError};

use super::check::Target;
use super::types::{param, Param};

/// Rows per statement: bounds one statement's parameters, not the flush.
const ROWS_PER_STATEMENT: usize = 20_000;

/// The statements of one target table, built once.
#[derive(Debug, Clone)]
pub struct Statements {
    insert: String,
    upsert: String,
    delete_keys: String,
    delete_one: String,
    key: Vec<usize>,
}

impl Statements {
    pub fn new(target: &Target) -> Self {
        let n = target.columns.len();
        let arrays = |cols: &[usize]| -> String {
            cols.iter()
                .enumerate()
                .map(|(i, c)| format!("${}::{}[]", i + 1, target.types[*c].param_name()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let aliases =
            |cols: &[usize]| -> String { cols.iter().map(|c| format!("p{c}")).collect::<Vec<_>>().join(", ") };
        // Numerics travel as text: cast back where they are used.
        let value = |c: usize, from: &str| -> String {
            match target.types[c] {
                super::types::PgType::Numeric => format!("{from}.p{c}::numeric"),
                _ => format!("{from}.p{c}"),
            }
        };
        let all: Vec<usize> = (0..n).collect();
        let insert = format!(
            "INSERT INTO {} ({}) SELECT {} FROM unnest({}) AS u({})",
            target.table,
            target.columns.join(", "),
            all.iter().map(|c| value(*c, "u")).collect::<Vec<_>>().join(", "),
            arrays(&all),
            aliases(&all)
        );
        let keys: Vec<String> = target.key.iter().map(|k| target.columns[*k].clone()).collect();
        let rest: Vec<String> = (0..n)
            .filter(|c| !target.key.contains(c))
            .map(|c| format!("{0} = EXCLUDED.{0}", target.columns[c]))
            .collect();
        let upsert = match rest.is_empty() {
            true => format!("{insert} ON CONFLICT ({}) DO NOTHING", keys.join(", ")),
            false => format!("{insert} ON CONFLICT ({}) DO UPDATE SET {}", keys.join(", "), rest.join(", ")),
        };
        let delete_keys = format!(
            "DELETE FROM {} AS w USING unnest({}) AS d({}) WHERE {}",
            target.table,
            arrays(&target.key),
            aliases(&target.key),
            target
                .key
                .iter()
                .map(|k| format!("w.{} = {}", target.columns[*k], value(*k, "d")))
                .collect::<Vec<_>>()
                .join(" AND ")
        );
        let delete_one = format!(
            "DELETE FROM {0} AS w WHERE w.ctid = (SELECT v.ctid FROM {0} AS v, unnest({1}) AS d({2}) WHERE {3} LIMIT 1)",
            target.table,
            arrays(&all),
            aliases(&all),
            all.iter()
                .map(|c| format!("v.{} IS NOT DISTINCT FROM {}", target.columns[*c], value(*c, "d")))
                .collect::<Vec<_>>()
                .join(" AND ")
        );
        Self { insert, upsert, delete_keys, delete_one, key: target.key.clone() }
    }
}

/// Changes buffered for one flush.
#[derive(Debug, Default, Clone)]
pub struct Buffer {
    chunks: Vec<Chunk>,
    rows: usize,
}

impl Buffer {
    pub fn push(&mut self, chunk: Chunk) {
        self.rows += chunk.num_rows();
        self.chunks.push(chunk);
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The chunks after the first `from`.
    pub fn since(&self, from: usize) -> Buffer {
        let chunks: Vec<Chunk> = self.chunks.iter().skip(from).cloned().collect();
        Buffer { rows: chunks.iter().map(Chunk::num_rows).sum(), chunks }
    }

    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Another buffer's changes after these.
    pub fn append(&mut self, other: Buffer) {
        self.rows += other.rows;
        self.chunks.extend(other.chunks);
    }
}

/// Rows written by a flush: upserted or inserted, and deleted.
#[derive(Debug, Default, Clone, Copy)]
pub struct Written {
    pub upserted: u64,
    pub deleted: u64,
}

/// Write `buffer` through `client` (a connection, or a transaction).
pub async fn flush<C: GenericClient>(
    client: &C,
    statements: &Statements,
    target: &Target,
    schema: &SchemaRef,
    buffer: &Buffer,
) -> Result<Written, Failure> {
    if buffer.is_empty() {
        return Ok(Written::default());
    }
    let batch = concat_batches(schema, buffer.chunks.iter().map(|c| &c.batch))?;
    let ops: Vec<Op> = buffer.chunks.iter().flat_map(Chunk::ops).collect();
    if statements.key.is_empty() {
        return flush_in_order(client, statements, target, &batch, &ops).await;
    }
    let (upserts, deletes) = last_per_key(&batch, &ops, &statements.key)?;
    let mut written = Written::default();
    if !upserts.is_empty() {
        let rows = take_record_batch(&batch, &UInt32Array::from(upserts))?;
        written.upserted += run(client, &statements.upsert, target, &rows, None).await?;
    }
    if !deletes.is_empty() {
        let rows = take_record_batch(&batch, &UInt32Array::from(deletes))?;
        written.deleted += run(client, &statements.delete_keys, target, &rows, Some(&statements.key)).await?;
    }
    Ok(written)
}

/// The rows that hold each key's last change: those to upsert (`+I`, `+U`) and those to
/// delete (`-D`). A `-U` is passed over: the `+U` after it writes the key.
fn last_per_key(batch: &RecordBatch, ops: &[Op], key: &[usize]) -> Result<(Vec<u32>, Vec<u32>)> {
    let fields: Vec<SortField> =
        key.iter().map(|k| SortField::new(batch.schema().field(*k).data_type().clone())).collect();
    let converter = RowConverter::new(fields)?;
    let columns: Vec<_> = key.iter().map(|k| batch.column(*k).clone()).collect();
    let rows = converter.convert_columns(&columns)?;
    let mut seen = HashSet::with_capacity(rows.num_rows());
    let (mut upserts, mut deletes) = (Vec::new(), Vec::new());
    for i in (0..rows.num_rows()).rev() {
        let op = ops.get(i).copied().unwrap_or(Op::Insert);
        if op == Op::UpdateBefore || !seen.insert(rows.row(i)) {
            continue;
        }
        match op {
            Op::Delete => deletes.push(i as u32),
            _ => upserts.push(i as u32),
        }
    }
    upserts.reverse();
    deletes.reverse();
    Ok((upserts, deletes))
}

/// Without a key: inserts together, in order with the retractions between them.
async fn flush_in_order<C: GenericClient>(
    client: &C,
    statements: &Statements,
    target: &Target,
    batch: &RecordBatch,
    ops: &[Op],
) -> Result<Written, Failure> {
    let mut written = Written::default();
    let mut start = 0;
    while start < ops.len() {
        let adds = ops[start].sign() > 0;
        let end = ops[start..].iter().position(|o| (o.sign() > 0) != adds).map_or(ops.len(), |p| start + p);
        if adds {
            written.upserted += run(client, &statements.insert, target, &batch.slice(start, end - start), None).await?;
        } else {
            for i in start..end {
                written.deleted += run(client, &statements.delete_one, target, &batch.slice(i, 1), None).await?;
            }
        }
        start = end;
    }
    Ok(written)
}

/// One statement over `rows` (the columns in `only`, or all), cut into statements of at
/// most [`ROWS_PER_STATEMENT`] rows.
async fn run<C: GenericClient>(
    client: &C,
    sql: &str,
    target: &Target,
    rows: &RecordBatch,
    only: Option<&[usize]>,
) -> Result<u64, Failure> {
    let all: Vec<usize> = (0..rows.num_columns()).collect();
    let columns = only.unwrap_or(&all);
    let mut affected = 0;
    let mut offset = 0;
    while offset < rows.num_rows() {
        let part = rows.slice(offset, ROWS_PER_STATEMENT.min(rows.num_rows() - offset));
        let arrays: Vec<_> = columns.iter().map(|c| part.column(*c).clone()).collect();
        let params: Vec<Param<'_>> =
            columns.iter().zip(&arrays).map(|(c, a)| param(a, target.types[*c])).collect::<Result<_>>()?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref() as &(dyn ToSql + Sync)).collect();
        affected += client.execute(sql, &refs).await?;
        offset += part.num_rows();
    }
    Ok(affected)
}

/// A failed statement: the server's message (with its detail), or the connection's.
pub fn statement_error(target: &Target, e: tokio_postgres::Error) -> WeirError {
    match e.as_db_error() {
        Some(db) => WeirError::external(format!(
            "PostgreSQL refused a write to {}: {}{} (SQLSTATE {})",
            target.table,
            db.message(),
            db.detail().map(|d| format!("; {d}")).unwrap_or_default(),
            db.code().code()
        )),
        None => WeirError::external(format!("PostgreSQL: writing {} failed: {e}", target.table)),
    }
}

/// Whether an error is the connection's (worth a retry on a new one), not the statement's.
pub fn is_connection_error(e: &tokio_postgres::Error) -> bool {
    e.is_closed()
        || e.as_db_error().is_none()
        || e.code().is_some_and(|c| {
            let code = c.code();
            code.starts_with("08") || code == "57P01" || code == "57P02" || code == "57P03"
        })
}

/// Why a flush failed: PostgreSQL's error (the connection's may be retried), or Weir's.
#[derive(Debug)]
pub enum Failure {
    Pg(tokio_postgres::Error),
    /// A lost connection, told with the statement that met it.
    Lost(WeirError),
    Weir(WeirError),
}

impl Failure {
    pub fn retryable(&self) -> bool {
        matches!(self, Failure::Pg(e) if is_connection_error(e)) || matches!(self, Failure::Lost(_))
    }

    pub fn into_error(self, target: &Target) -> WeirError {
        match self {
            Failure::Pg(e) => statement_error(target, e),
            Failure::Lost(e) | Failure::Weir(e) => e,
        }
    }
}

impl From<WeirError> for Failure {
    fn from(e: WeirError) -> Self {
        Failure::Weir(e)
    }
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        Failure::Pg(e)
    }
}

impl From<datafusion::arrow::error::ArrowError> for Failure {
    fn from(e: datafusion::arrow::error::ArrowError) -> Self {
        Failure::Weir(e.into())
    }
}
