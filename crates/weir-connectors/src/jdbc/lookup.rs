//! A PostgreSQL table read by key for a lookup join (`JOIN t FOR SYSTEM_TIME AS OF
//! s.proc_time ON s.k = t.k`, Flink's JDBC lookup source): each chunk's distinct keys not in
//! the cache are looked up in one query, `… JOIN unnest($1::int8[], …) WITH ORDINALITY`, and
//! each key's rows (none is an answer too) cached up to `'lookup.cache.max-rows'` keys for
//! `'lookup.cache.ttl'`. Without those options nothing is cached, as in Flink.
//!
//! The operator that asks is synchronous; the connection lives on a thread of its own with
//! a one-thread runtime, and the operator waits for each answer.

use std::collections::HashMap;
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{
    Array, ArrayRef, BinaryArray, Int32Array, Int64Array, RecordBatch, StringArray, UInt32Array,
};
use datafusion::arrow::compute::{cast, concat_batches, take_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::row::{RowConverter, SortField};
use tokio::sync::mpsc;
use tokio_postgres::types::ToSql;
use weir_core::{table::parse_duration, Lookup, Result, TableDef, WeirError};

use super::check::quote;
use super::types::{param, Param, PgType};
use super::xa::backoff;
use super::Endpoint;

/// Options of a `jdbc` table read by a lookup join.
pub const LOOKUP_OPTIONS: &[&str] = &["lookup.cache.max-rows", "lookup.cache.ttl", "lookup.max-retries"];

/// How a column comes back: as text parsed by Arrow, or in a form Arrow takes directly.
#[derive(Debug, Clone, Copy)]
enum Read {
    Text,
    Bytes,
    /// Microseconds since 1970 (`timestamp`, `timestamptz`).
    Micros,
    /// Days since 1970.
    Days,
}

struct Query {
    sql: String,
    schema: SchemaRef,
    reads: Vec<Read>,
    key_types: Vec<PgType>,
    endpoint: Endpoint,
    retries: u32,
    table: String,
}

type Reply = Result<(RecordBatch, Vec<u32>)>;

pub struct JdbcLookup {
    requests: mpsc::UnboundedSender<(RecordBatch, std_mpsc::Sender<Reply>)>,
    schema: SchemaRef,
    keys: RowConverter,
    cache: Cache,
}

/// Each key's rows, by the key's row bytes, with when they were fetched and last used.
struct Cache {
    max: usize,
    ttl: Option<Duration>,
    entries: HashMap<Vec<u8>, (Instant, u64, RecordBatch)>,
    clock: u64,
}

impl Cache {
    fn get(&mut self, key: &[u8]) -> Option<RecordBatch> {
        self.clock += 1;
        let (at, used, rows) = self.entries.get_mut(key)?;
        if self.ttl.is_some_and(|ttl| at.elapsed() > ttl) {
            return None;
        }
        *used = self.clock;
        Some(rows.clone())
    }

    fn put(&mut self, key: Vec<u8>, rows: RecordBatch) {
        if self.max == 0 {
            return;
        }
        self.clock += 1;
        self.entries.insert(key, (Instant::now(), self.clock, rows));
        if self.entries.len() > self.max {
            // The least recently used tenth goes, so that eviction is not paid per key.
            let mut used: Vec<u64> = self.entries.values().map(|(_, u, _)| *u).collect();
            used.sort_unstable();
            let remove = (self.entries.len() - self.max).max(self.max / 10).clamp(1, used.len());
            let cut = used[remove - 1];
            self.entries.retain(|_, (_, u, _)| *u > cut);
        }
    }
}

impl JdbcLookup {
    /// Check the options and types of a lookup, at planning.
    pub fn check(table: &TableDef, projection: Option<&[usize]>, keys: &[usize]) -> Result<()> {
        Self::plan(table, projection, keys).map(|_| ())
    }

    /// Looks up rows of `table` (its `projection` columns) by the `keys` columns (indices into
    /// the projected columns); connects on the first lookup.
    pub fn new(table: &TableDef, projection: Option<&[usize]>, keys: &[usize]) -> Result<Self> {
        let (query, schema, fields, cache) = Self::plan(table, projection, keys)?;
        let (tx, rx) = mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name(format!("lookup-{}", table.name))
            .spawn(move || serve(query, rx))
            .map_err(|e| WeirError::external(format!("cannot start the lookup thread: {e}")))?;
        Ok(Self { requests: tx, schema, keys: RowConverter::new(fields)?, cache })
    }

    fn plan(
        table: &TableDef,
        projection: Option<&[usize]>,
        keys: &[usize],
    ) -> Result<(Query, SchemaRef, Vec<SortField>, Cache)> {
        let settings = super::Settings::from_table(table)?;
        let all: Vec<usize> = (0..table.schema.fields().len()).collect();
        let columns = projection.unwrap_or(&all);
        // Nullable: a LEFT join pads, and PostgreSQL's columns may hold NULLs.
        let projected = table.schema.project(columns)?;
        let schema: SchemaRef = std::sync::Arc::new(Schema::new(
            projected.fields().iter().map(|f| Field::new(f.name(), f.data_type().clone(), true)).collect::<Vec<_>>(),
        ));
        let mut select = Vec::new();
        let mut reads = Vec::new();
        for f in schema.fields() {
            let t = PgType::of(f.data_type())
                .ok_or_else(|| WeirError::internal(format!("column '{}' has no PostgreSQL type", f.name())))?;
            // Names as Flink's dialect writes them: unquoted.
            let c = format!("t.{}", quote(&f.name().to_lowercase()));
            let (expr, read) = match t {
                PgType::Bytea => (c, Read::Bytes),
                PgType::Timestamp => (format!("(extract(epoch FROM {c}) * 1000000)::int8"), Read::Micros),
                PgType::Timestamptz => (format!("(extract(epoch FROM {c}) * 1000000)::int8"), Read::Micros),
                PgType::Date => (format!("({c} - DATE '1970-01-01')::int4"), Read::Days),
                _ => (format!("{c}::text"), Read::Text),
            };
            select.push(expr);
            reads.push(read);
        }
        let key_types: Vec<PgType> = keys
            .iter()
            .map(|k| PgType::of(schema.field(*k).data_type()).ok_or_else(|| WeirError::internal("key type")))
            .collect::<Result<_>>()?;
        let arrays: Vec<String> =
            key_types.iter().enumerate().map(|(i, t)| format!("${}::{}[]", i + 1, t.param_name())).collect();
        let aliases: Vec<String> = (0..keys.len()).map(|i| format!("p{i}")).collect();
        let on: Vec<String> = keys
            .iter()
            .zip(&key_types)
            .enumerate()
            .map(|(i, (k, t))| {
                let cast = if *t == PgType::Numeric { "::numeric" } else { "" };
                format!("t.{} = k.p{i}{cast}", quote(&schema.field(*k).name().to_lowercase()))
            })
            .collect();
        let sql = format!(
            "SELECT {}, k.ord::int4 FROM {} AS t JOIN unnest({}) WITH ORDINALITY AS k({}, ord) ON {}",
            select.join(", "),
            settings.target,
            arrays.join(", "),
            aliases.join(", "),
            on.join(" AND ")
        );
        let number = |key: &str| -> Result<Option<u64>> {
            table
                .options
                .get(key)
                .map(|v| {
                    v.trim().parse::<u64>().map_err(|_| {
                        WeirError::user(format!("table '{}': '{key}' must be a whole number, not '{v}'", table.name))
                            .at(table.options.location(key))
                    })
                })
                .transpose()
        };
        let ttl = table
            .options
            .get("lookup.cache.ttl")
            .map(|v| parse_duration(v).map_err(|e| e.context(format!("table '{}': 'lookup.cache.ttl'", table.name))))
            .transpose()?;
        let query = Query {
            sql,
            schema: schema.clone(),
            reads,
            key_types,
            endpoint: settings.endpoint.clone(),
            retries: number("lookup.max-retries")?.unwrap_or(3).min(100) as u32,
            table: table.name.clone(),
        };
        let fields: Vec<SortField> =
            keys.iter().map(|k| SortField::new(schema.field(*k).data_type().clone())).collect();
        let cache = Cache {
            max: number("lookup.cache.max-rows")?.unwrap_or(0) as usize,
            ttl,
            entries: HashMap::new(),
            clock: 0,
        };
        Ok((query, schema, fields, cache))
    }

    fn ask(&self, keys: RecordBatch) -> Reply {
        let (tx, rx) = std_mpsc::channel();
        self.requests.send((keys, tx)).map_err(|_| WeirError::internal("the lookup thread has stopped"))?;
        crate::kafka::blocking(|| rx.recv()).map_err(|_| WeirError::internal("the lookup thread has stopped"))?
    }
}

impl Lookup for JdbcLookup {
    fn lookup(&mut self, keys: &RecordBatch) -> Result<(RecordBatch, Vec<u32>)> {
        if self.cache.max == 0 {
            // No cache: the answer as it comes, without splitting it by key.
            return self.ask(keys.clone());
        }
        let rows = self.keys.convert_columns(keys.columns())?;
        let mut found: Vec<Option<RecordBatch>> =
            (0..keys.num_rows()).map(|i| self.cache.get(rows.row(i).data())).collect();
        let missing: Vec<u32> = (0..keys.num_rows() as u32).filter(|i| found[*i as usize].is_none()).collect();
        if !missing.is_empty() {
            let asked = take_record_batch(keys, &UInt32Array::from(missing.clone()))?;
            let (batch, owners) = self.ask(asked)?;
            let mut of: Vec<Vec<u32>> = vec![Vec::new(); missing.len()];
            for (row, owner) in owners.iter().enumerate() {
                if let Some(o) = of.get_mut(*owner as usize) {
                    o.push(row as u32);
                }
            }
            for (m, rows_of) in missing.iter().zip(of) {
                let part = take_record_batch(&batch, &UInt32Array::from(rows_of))?;
                self.cache.put(rows.row(*m as usize).data().to_vec(), part.clone());
                found[*m as usize] = Some(part);
            }
        }
        let mut owners = Vec::new();
        let mut parts = Vec::new();
        for (i, f) in found.into_iter().enumerate() {
            let Some(part) = f else { continue };
            owners.extend(std::iter::repeat_n(i as u32, part.num_rows()));
            parts.push(part);
        }
        Ok((concat_batches(&self.schema, &parts)?, owners))
    }
}

/// The lookup thread: one connection, opened again after a failure up to the retries.
fn serve(query: Query, mut rx: mpsc::UnboundedReceiver<(RecordBatch, std_mpsc::Sender<Reply>)>) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            if let Some((_, reply)) = rx.blocking_recv() {
                let _ = reply.send(Err(WeirError::external(format!("cannot start the lookup runtime: {e}"))));
            }
            return;
        }
    };
    runtime.block_on(async move {
        let mut client: Option<tokio_postgres::Client> = None;
        while let Some((keys, reply)) = rx.recv().await {
            let mut attempt = 0;
            let answer = loop {
                if client.is_none() {
                    match query.endpoint.connect(&format!("weir-lookup-{}", query.table)).await {
                        Ok(c) => client = Some(c),
                        Err(e) if attempt < query.retries => {
                            attempt += 1;
                            log::warn!("lookup in '{}': {e}; retry {attempt}", query.table);
                            tokio::time::sleep(backoff(attempt)).await;
                            continue;
                        }
                        Err(e) => break Err(e),
                    }
                }
                let Some(c) = client.as_ref() else { continue };
                match run(c, &query, &keys).await {
                    Ok(v) => break Ok(v),
                    Err(Failure::Pg(e)) if super::write::is_connection_error(&e) && attempt < query.retries => {
                        attempt += 1;
                        client = None;
                        log::warn!("lookup in '{}': {e}; retry {attempt}", query.table);
                        tokio::time::sleep(backoff(attempt)).await;
                    }
                    Err(Failure::Pg(e)) => {
                        break Err(WeirError::external(format!(
                            "PostgreSQL: looking up rows of table '{}': {}",
                            query.table,
                            e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_string())
                        )))
                    }
                    Err(Failure::Weir(e)) => break Err(e),
                }
            };
            let _ = reply.send(answer);
        }
    });
}

enum Failure {
    Pg(tokio_postgres::Error),
    Weir(WeirError),
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        Failure::Pg(e)
    }
}

impl From<WeirError> for Failure {
    fn from(e: WeirError) -> Self {
        Failure::Weir(e)
    }
}

impl From<datafusion::arrow::error::ArrowError> for Failure {
    fn from(e: datafusion::arrow::error::ArrowError) -> Self {
        Failure::Weir(e.into())
    }
}

/// One query for `keys`: the rows found, and the key (row of `keys`) of each.
async fn run(
    client: &tokio_postgres::Client,
    query: &Query,
    keys: &RecordBatch,
) -> Result<(RecordBatch, Vec<u32>), Failure> {
    let params: Vec<Param<'_>> =
        keys.columns().iter().zip(&query.key_types).map(|(a, t)| param(a, *t)).collect::<Result<_>>()?;
    let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref() as &(dyn ToSql + Sync)).collect();
    let rows = client.query(&query.sql, &refs).await?;
    let n = query.reads.len();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(n);
    for (c, (read, field)) in query.reads.iter().zip(query.schema.fields()).enumerate() {
        let raw: ArrayRef = match read {
            Read::Text => std::sync::Arc::new(StringArray::from(
                rows.iter().map(|r| r.try_get::<_, Option<String>>(c)).collect::<Result<Vec<_>, _>>()?,
            )),
            Read::Bytes => std::sync::Arc::new(BinaryArray::from(
                rows.iter()
                    .map(|r| r.try_get::<_, Option<Vec<u8>>>(c))
                    .collect::<Result<Vec<_>, _>>()?
                    .iter()
                    .map(|v| v.as_deref())
                    .collect::<Vec<_>>(),
            )),
            Read::Micros => {
                let v = Int64Array::from(
                    rows.iter().map(|r| r.try_get::<_, Option<i64>>(c)).collect::<Result<Vec<_>, _>>()?,
                );
                let tz = match field.data_type() {
                    DataType::Timestamp(_, tz) => tz.clone(),
                    _ => None,
                };
                cast(&v, &DataType::Timestamp(TimeUnit::Microsecond, tz))?
            }
            Read::Days => std::sync::Arc::new(Int32Array::from(
                rows.iter().map(|r| r.try_get::<_, Option<i32>>(c)).collect::<Result<Vec<_>, _>>()?,
            )),
        };
        let nulls = raw.null_count();
        let column = if raw.data_type() == field.data_type() { raw } else { cast(&raw, field.data_type())? };
        if column.null_count() > nulls {
            return Err(Failure::Weir(WeirError::user(format!(
                "table '{}': a value of column '{}' in PostgreSQL is not a {}",
                query.table,
                field.name(),
                field.data_type()
            ))));
        }
        columns.push(column);
    }
    let owners: Vec<u32> =
        rows.iter().map(|r| r.try_get::<_, i32>(n).map(|o| (o - 1).max(0) as u32)).collect::<Result<_, _>>()?;
    let batch = RecordBatch::try_new_with_options(
        query.schema.clone(),
        columns,
        &datafusion::arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(rows.len())),
    )?;
    Ok((batch, owners))
}
