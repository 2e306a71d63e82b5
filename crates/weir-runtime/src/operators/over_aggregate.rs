//! OVER aggregates in event time, as Flink's `RowTime…PrecedingFunction`s: `agg(x) OVER
//! (PARTITION BY k ORDER BY rowtime ROWS|RANGE BETWEEN … PRECEDING AND CURRENT ROW)`.
//!
//! Each row waits in a timed state table under `time | partition key | arrival` until the
//! watermark passes its time; then the partition's rows go through the frame in time order
//! ([`super::over_frame`]) and each row is emitted once with its values: the output only
//! appends. The partition's state (the tail of rows its frame and `LAG` still need, an
//! unbounded frame's accumulators, the last time it processed) is one value per partition
//! key, read and written once per partition per firing.
//!
//! Late rows are Flink's: with an unbounded frame, a row at or behind the watermark when it
//! comes; with a bounded one, a row at or before the last time its partition processed (a row
//! behind the watermark but after that still goes out, at the next watermark). Late rows
//! are dropped and counted.

use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use weir_core::{Chunk, Message, Result, Watermark, WeirError};
use weir_state::tables::Change;
use weir_state::{StateTables, Table, TableDecl, TableKind};

use super::aggregates::{self, Acc, AggregateDef, GroupState, Num, Prepared, Values};
use super::keyed::KeyedLogic;
use super::over_frame::{self, Function, Kind, Outputs, Pos, Preceding, Seen, Val};
use super::state::{from_ordered, interner, ordered, rows_batch, Progress, StateContext};
use super::window::millis;

const TABLES: [TableDecl; 2] =
    [TableDecl { name: "waiting", kind: TableKind::Timed }, TableDecl { name: "partitions", kind: TableKind::Value }];

/// One function of an OVER window.
#[derive(Debug, Clone)]
pub enum OverFunction {
    /// `COUNT`, `SUM`, `AVG`, `MIN`, `MAX`, `FIRST_VALUE`, `LAST_VALUE` over the frame.
    Aggregate(AggregateDef),
    /// `LAG(arg, offset, default)`: the value `offset` rows back in the partition.
    Lag { arg: usize, arg_type: DataType, offset: usize, default: ScalarValue, output: DataType },
}

#[derive(Debug, Clone)]
pub struct OverSpec {
    pub partition: Vec<usize>,
    /// The time column the window is ordered by.
    pub time: usize,
    /// Whether that is processing time (a `PROCTIME()` column): each chunk goes through the
    /// frame as it comes, in arrival order, as Flink's `ProcTime…` functions; no row waits
    /// and none is late. Otherwise event time.
    pub proctime: bool,
    pub preceding: Preceding,
    /// `RANGE`: rows of one time are peers; `ROWS`: each row on its own, in arrival order.
    pub range: bool,
    pub functions: Vec<OverFunction>,
    pub input_schema: SchemaRef,
    /// The input's columns, then one per function.
    pub schema: SchemaRef,
}

impl OverSpec {
    fn output_type(f: &OverFunction) -> &DataType {
        match f {
            OverFunction::Aggregate(a) => &a.output,
            OverFunction::Lag { output, .. } => output,
        }
    }
}

/// What the operator keeps beside its tables: the watermark it last fired at, and the
/// earliest time written since (rows behind the watermark that are not late).
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct OverOwn {
    fired: i64,
    low: i64,
}

impl Default for OverOwn {
    fn default() -> Self {
        Self { fired: i64::MIN, low: i64::MAX }
    }
}

pub struct OverAggregate {
    spec: OverSpec,
    keys: Option<RowConverter>,
    rows: RowConverter,
    /// The distinct argument columns, each with a converter of its own (values are compared
    /// and kept in Arrow's row format).
    args: Vec<usize>,
    arg_rows: Vec<RowConverter>,
    functions: Vec<Function>,
    /// COUNT, SUM and AVG: how they accumulate and give results.
    prepared: Vec<Option<Prepared>>,
    /// `LAG`'s default, in its argument's row format (`None`: NULL).
    defaults: Vec<Option<Vec<u8>>>,
    tables: StateTables,
    waiting: Table,
    partitions: Table,
    progress: Progress,
    own: OverOwn,
}

impl OverAggregate {
    pub fn new(spec: OverSpec, state: &StateContext) -> Result<Self> {
        let field = |c: usize| SortField::new(spec.input_schema.field(c).data_type().clone());
        let keys = match spec.partition.is_empty() {
            true => None,
            false => Some(RowConverter::new(spec.partition.iter().map(|c| field(*c)).collect())?),
        };
        let rows = RowConverter::new((0..spec.input_schema.fields().len()).map(field).collect())?;
        let mut args: Vec<usize> = Vec::new();
        let mut slot_of = |c: usize| {
            args.iter().position(|a| *a == c).unwrap_or_else(|| {
                args.push(c);
                args.len() - 1
            })
        };
        let (mut functions, mut prepared, mut defaults) = (Vec::new(), Vec::new(), Vec::new());
        for f in &spec.functions {
            match f {
                OverFunction::Aggregate(def) => {
                    let kind = Kind::of(def.kind, def.distinct)?;
                    functions.push(Function { kind, slot: def.arg.map(&mut slot_of) });
                    let counted = matches!(kind, Kind::Counted | Kind::Distinct);
                    prepared.push(counted.then(|| Prepared::new(def.clone())).transpose()?);
                    defaults.push(None);
                }
                OverFunction::Lag { arg, arg_type, offset, default, .. } => {
                    functions.push(Function { kind: Kind::Lag(*offset), slot: Some(slot_of(*arg)) });
                    prepared.push(None);
                    let converter = RowConverter::new(vec![SortField::new(arg_type.clone())])?;
                    let default = default.cast_to(arg_type)?.to_array_of_size(1)?;
                    defaults.push(
                        (!default.is_null(0))
                            .then(|| -> Result<Vec<u8>> {
                                Ok(converter.convert_columns(&[default])?.row(0).data().to_vec())
                            })
                            .transpose()?,
                    );
                }
            }
        }
        let arg_rows = args.iter().map(|c| RowConverter::new(vec![field(*c)])).collect::<Result<Vec<_>, _>>()?;
        let tables = state.open(&TABLES)?;
        Ok(Self {
            keys,
            rows,
            args,
            arg_rows,
            functions,
            prepared,
            defaults,
            waiting: tables.table("waiting")?,
            partitions: tables.table("partitions")?,
            tables,
            spec,
            progress: Progress::default(),
            own: OverOwn::default(),
        })
    }

    fn bounded(&self) -> bool {
        self.spec.preceding != Preceding::Unbounded
    }

    /// The accumulators a partition starts with: an unbounded frame's, or placeholders.
    fn empty_accs(&self) -> Vec<Acc> {
        self.functions
            .iter()
            .zip(&self.prepared)
            .map(|(f, p)| match (f.kind, p) {
                (Kind::Counted, Some(p)) => p.empty(),
                (Kind::Min | Kind::Max | Kind::First | Kind::Last, _) if !self.bounded() => Acc::Extreme(None),
                _ => Acc::Count(0),
            })
            .collect()
    }

    /// Each row's partition key bytes and key group.
    fn partition_keys(&self, batch: &datafusion::arrow::array::RecordBatch) -> Result<(Vec<Vec<u8>>, Vec<u16>)> {
        let columns: Vec<ArrayRef> = self.spec.partition.iter().map(|c| batch.column(*c).clone()).collect();
        let n = batch.num_rows();
        let groups = crate::exchange::key_groups_of_columns(&columns, n, self.tables.key_groups())?;
        let keys = match &self.keys {
            Some(k) => {
                let rows = k.convert_columns(&columns)?;
                (0..n).map(|i| rows.row(i).data().to_vec()).collect()
            }
            None => vec![Vec::new(); n],
        };
        Ok((keys, groups))
    }
}

/// A partition's stored state: the last time it processed, its kept rows (time and each
/// argument's value, `None` for NULL), and an unbounded frame's accumulators and
/// `COUNT(DISTINCT …)` values (one set per function, empty for the others).
struct Partition {
    last: i64,
    kept: Vec<(i64, Vec<Option<Vec<u8>>>)>,
    seen: Vec<Seen>,
    accs: Vec<Acc>,
}

impl Partition {
    fn encode(&self, out: &mut Vec<u8>) {
        let mut accs = Vec::new();
        aggregates::encode(&GroupState { rows: 0, updated: 0, accs: self.accs.clone() }, &mut accs);
        out.clear();
        out.extend_from_slice(&self.last.to_le_bytes());
        out.extend_from_slice(&(self.kept.len() as u32).to_le_bytes());
        for (t, values) in &self.kept {
            out.extend_from_slice(&t.to_le_bytes());
            for v in values {
                match v {
                    None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
                    Some(v) => {
                        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
                        out.extend_from_slice(v);
                    }
                }
            }
        }
        for seen in &self.seen {
            out.extend_from_slice(&(seen.len() as u32).to_le_bytes());
            for (v, n) in seen {
                out.extend_from_slice(&(v.len() as u32).to_le_bytes());
                out.extend_from_slice(v);
                out.extend_from_slice(&n.to_le_bytes());
            }
        }
        out.extend_from_slice(&accs);
    }

    fn decode(bytes: &[u8], slots: usize, empty: &[Acc]) -> Result<Partition> {
        let damaged = || WeirError::internal("OVER aggregate state in a checkpoint is damaged");
        let mut at = 0usize;
        let mut take = |n: usize| -> Result<&[u8]> {
            let piece = bytes.get(at..at + n).ok_or_else(damaged)?;
            at += n;
            Ok(piece)
        };
        let last = i64::from_le_bytes(take(8)?.try_into().map_err(|_| damaged())?);
        let count = u32::from_le_bytes(take(4)?.try_into().map_err(|_| damaged())?);
        let mut kept = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let t = i64::from_le_bytes(take(8)?.try_into().map_err(|_| damaged())?);
            let mut values = Vec::with_capacity(slots);
            for _ in 0..slots {
                let len = u32::from_le_bytes(take(4)?.try_into().map_err(|_| damaged())?);
                values.push(if len == u32::MAX { None } else { Some(take(len as usize)?.to_vec()) });
            }
            kept.push((t, values));
        }
        let mut seen = Vec::with_capacity(empty.len());
        for _ in 0..empty.len() {
            let count = u32::from_le_bytes(take(4)?.try_into().map_err(|_| damaged())?);
            let mut set = Seen::new();
            for _ in 0..count {
                let len = u32::from_le_bytes(take(4)?.try_into().map_err(|_| damaged())?);
                let v = take(len as usize)?.to_vec();
                set.insert(v, u64::from_le_bytes(take(8)?.try_into().map_err(|_| damaged())?));
            }
            seen.push(set);
        }
        let rest = bytes.get(at..).ok_or_else(damaged)?;
        Ok(Partition { last, kept, seen, accs: aggregates::decode(rest, empty)?.accs })
    }
}

/// The firing's rows as the frame reads them: the kept rows of every partition (flat), then
/// the due rows.
struct FiringRows<'a> {
    kept: Vec<&'a [Option<Vec<u8>>]>,
    /// Per argument slot, the due rows' values in row format.
    due: Vec<datafusion::arrow::row::Rows>,
    due_nulls: Vec<Option<datafusion::arrow::buffer::NullBuffer>>,
    /// Per function, its argument as numbers: of the kept rows, and of the due rows.
    numbers: Vec<Option<(Values, Values)>>,
}

impl over_frame::Rows for FiringRows<'_> {
    fn bytes(&self, slot: usize, pos: Pos) -> Option<&[u8]> {
        match pos {
            Pos::Kept(i) => self.kept[i][slot].as_deref(),
            Pos::Due(i) => {
                let null = self.due_nulls[slot].as_ref().is_some_and(|n| n.is_null(i));
                (!null).then(|| self.due[slot].row(i).data())
            }
        }
    }

    fn number(&self, function: usize, pos: Pos) -> Option<Num> {
        let (kept, due) = self.numbers[function].as_ref()?;
        match pos {
            Pos::Kept(i) => kept.valid(i).then(|| kept.get(i)),
            Pos::Due(i) => due.valid(i).then(|| due.get(i)),
        }
    }
}

impl KeyedLogic for OverAggregate {
    type Own = OverOwn;

    fn name(&self) -> String {
        "OverAggregate".into()
    }

    /// File each row that is not late under `time | partition key | arrival`.
    fn process(&mut self, _input: usize, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        if !chunk.is_append_only() {
            return Err(WeirError::not_supported("an OVER aggregate over an updating input"));
        }
        if self.spec.proctime {
            return self.on_arrival(chunk, out);
        }
        let batch = &chunk.batch;
        let n = batch.num_rows();
        let times = millis(batch.column(self.spec.time))?;
        let (keys, groups) = self.partition_keys(batch)?;
        let watermark = self.progress.watermark.0;
        // A bounded frame's row behind the watermark is late only at or before its
        // partition's last processed time: read once per such partition.
        let mut last = interner::<&[u8], i64>();
        if self.bounded() {
            let mut seen = interner::<&[u8], ()>();
            let behind: Vec<(u16, &[u8])> = (0..n)
                .filter(|i| times.is_valid(*i) && times.value(*i) <= watermark)
                .filter(|i| seen.insert(keys[*i].as_slice(), ()).is_none())
                .map(|i| (groups[i], keys[i].as_slice()))
                .collect();
            if !behind.is_empty() {
                for ((_, k), v) in behind.iter().zip(self.tables.get_many(self.partitions, &behind)?) {
                    let t = v.and_then(|v| v.get(..8).and_then(|b| b.try_into().ok()).map(i64::from_le_bytes));
                    last.insert(k, t.unwrap_or(i64::MIN));
                }
            }
        }
        let rows = self.rows.convert_columns(batch.columns())?;
        let mut entries = Vec::with_capacity(n);
        for i in 0..n {
            // A row without a time has no place in time order: late, as Flink drops it.
            let late = !times.is_valid(i)
                || match self.bounded() {
                    false => times.value(i) <= watermark,
                    true => times.value(i) <= last.get(keys[i].as_slice()).copied().unwrap_or(i64::MIN),
                };
            if late {
                self.progress.late += 1;
                continue;
            }
            let seq = self.progress.next_seq;
            self.progress.next_seq += 1;
            self.own.low = self.own.low.min(times.value(i));
            entries.push(([&ordered(times.value(i))[..], &keys[i], &seq.to_be_bytes()].concat(), i));
        }
        let changes: Vec<Change<'_>> =
            entries.iter().map(|(k, i)| (groups[*i], k.as_slice(), Some(rows.row(*i).data()))).collect();
        self.tables.write(self.waiting, &changes)
    }

    /// Every partition's rows up to `watermark` through the frame, emitted in time order.
    fn fire(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        let from = self.own.low.min(self.own.fired.saturating_add(1));
        let (from, to) = (ordered(from), ordered(watermark.0.saturating_add(1)));
        self.own = OverOwn { fired: watermark.0, low: i64::MAX };
        let due = self.tables.scan_times(self.waiting, &from, &to)?;
        if due.is_empty() {
            return Ok(());
        }
        self.tables.delete_times(self.waiting, &from, &to)?;
        self.fire_rows(due, out)
    }

    fn state(&mut self) -> (&mut StateTables, &mut Progress) {
        (&mut self.tables, &mut self.progress)
    }

    fn progress(&self) -> &Progress {
        &self.progress
    }

    fn own(&self) -> OverOwn {
        self.own
    }

    /// At another parallelism, the earliest of every task's: nothing waiting is stepped over.
    fn restore_own(&mut self, own: Vec<OverOwn>) -> Result<()> {
        for o in own {
            self.own.fired = if self.own.fired == i64::MIN { o.fired } else { self.own.fired.min(o.fired) };
            self.own.low = self.own.low.min(o.low);
        }
        Ok(())
    }
}

impl OverAggregate {
    /// Processing time: the chunk's rows through the frame now, in arrival order (a row's
    /// time is its `PROCTIME()` value, which a `RANGE` frame measures).
    fn on_arrival(&mut self, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        let batch = &chunk.batch;
        let times = millis(batch.column(self.spec.time))?;
        let (keys, groups) = self.partition_keys(batch)?;
        let rows = self.rows.convert_columns(batch.columns())?;
        let mut due = Vec::with_capacity(batch.num_rows());
        for i in 0..batch.num_rows() {
            let seq = self.progress.next_seq;
            self.progress.next_seq += 1;
            let time = if times.is_valid(i) { times.value(i) } else { i64::MIN };
            due.push((
                groups[i],
                [&ordered(time)[..], &keys[i], &seq.to_be_bytes()].concat(),
                rows.row(i).data().to_vec(),
            ));
        }
        if due.is_empty() {
            return Ok(());
        }
        self.fire_rows(due, out)
    }

    /// The due rows `(group, time | key | arrival, row)`, in time order (processing time: in
    /// arrival order).
    fn fire_rows(&mut self, due: Vec<(u16, Vec<u8>, Vec<u8>)>, out: &mut Vec<Message>) -> Result<()> {
        let damaged = || WeirError::internal("OVER aggregate state is damaged");
        // Partitions in order of their first due row; each one's rows in time and arrival order.
        let mut index = interner::<&[u8], usize>();
        let mut partitions: Vec<(u16, &[u8], Vec<usize>)> = Vec::new();
        let mut times = Vec::with_capacity(due.len());
        for (i, (group, key, _)) in due.iter().enumerate() {
            let (time, rest) = key.split_at_checked(8).ok_or_else(damaged)?;
            let partition = rest.get(..rest.len().saturating_sub(8)).ok_or_else(damaged)?;
            times.push(from_ordered(time.try_into().map_err(|_| damaged())?));
            let at = *index.entry(partition).or_insert_with(|| {
                partitions.push((*group, partition, Vec::new()));
                partitions.len() - 1
            });
            partitions[at].2.push(i);
        }
        let asked: Vec<(u16, &[u8])> = partitions.iter().map(|(g, k, _)| (*g, *k)).collect();
        let empty = self.empty_accs();
        let stored: Vec<Partition> = self
            .tables
            .get_many(self.partitions, &asked)?
            .into_iter()
            .map(|v| match v {
                Some(v) => Partition::decode(&v, self.args.len(), &empty),
                None => Ok(Partition {
                    last: i64::MIN,
                    kept: Vec::new(),
                    seen: vec![Seen::new(); empty.len()],
                    accs: empty.clone(),
                }),
            })
            .collect::<Result<_>>()?;
        let batch =
            rows_batch(&self.rows, due.iter().map(|(_, _, v)| v.as_slice()), Vec::new(), &self.spec.input_schema)?;

        // What the frame reads: every partition's kept rows, flat, and the due rows.
        let kept: Vec<&[Option<Vec<u8>>]> =
            stored.iter().flat_map(|p| p.kept.iter().map(|(_, v)| v.as_slice())).collect();
        let mut due_rows = Vec::with_capacity(self.args.len());
        let mut due_nulls = Vec::with_capacity(self.args.len());
        for (slot, c) in self.args.iter().enumerate() {
            due_rows.push(self.arg_rows[slot].convert_columns(&[batch.column(*c).clone()])?);
            due_nulls.push(batch.column(*c).logical_nulls());
        }
        let mut numbers = Vec::with_capacity(self.functions.len());
        for (f, function) in self.functions.iter().enumerate() {
            let (Some(p), Some(slot), Kind::Counted) = (&self.prepared[f], function.slot, function.kind) else {
                numbers.push(None);
                continue;
            };
            let Some(lane) = p.lane else {
                numbers.push(None);
                continue;
            };
            let converter = &self.arg_rows[slot];
            let parser = converter.parser();
            let null = converter.convert_columns(&[datafusion::arrow::array::new_null_array(
                self.spec.input_schema.field(self.args[slot]).data_type(),
                1,
            )])?;
            let null = null.row(0);
            let column = converter
                .convert_rows(kept.iter().map(|k| k[slot].as_deref().map_or(null, |b| parser.parse(b))))?
                .remove(0);
            numbers.push(Some((Values::read(&column, lane)?, Values::read(batch.column(self.args[slot]), lane)?)));
        }
        let rows = FiringRows { kept, due: due_rows, due_nulls, numbers };

        let mut outputs =
            Outputs { accs: vec![Vec::new(); self.functions.len()], values: vec![Vec::new(); self.functions.len()] };
        let mut writes: Vec<(u16, &[u8], Vec<u8>)> = Vec::with_capacity(partitions.len());
        let mut flat = 0usize;
        for ((group, key, members), part) in partitions.iter().zip(&stored) {
            // The kept rows stay borrowed by `rows`: the accumulators are copied out.
            let (mut accs, mut seen) = (part.accs.clone(), part.seen.clone());
            let mut seq: Vec<(i64, Pos)> = Vec::with_capacity(part.kept.len() + members.len());
            seq.extend(part.kept.iter().enumerate().map(|(j, (t, _))| (*t, Pos::Kept(flat + j))));
            seq.extend(members.iter().map(|i| (times[*i], Pos::Due(*i))));
            let kept_count = part.kept.len();
            flat += kept_count;
            let keep = over_frame::run(
                &self.functions,
                self.spec.preceding,
                self.spec.range,
                &seq,
                kept_count,
                &rows,
                &mut accs,
                &mut seen,
                &mut outputs,
            )?;
            let next = Partition {
                last: seq.last().map_or(part.last, |(t, _)| *t),
                kept: seq[keep..]
                    .iter()
                    .map(|(t, pos)| {
                        (
                            *t,
                            (0..self.args.len())
                                .map(|s| over_frame::Rows::bytes(&rows, s, *pos).map(<[u8]>::to_vec))
                                .collect(),
                        )
                    })
                    .collect(),
                seen: if self.bounded() { vec![Seen::new(); empty.len()] } else { seen },
                accs: if self.bounded() { empty.clone() } else { accs },
            };
            let mut bytes = Vec::new();
            next.encode(&mut bytes);
            writes.push((*group, key, bytes));
        }
        let changes: Vec<Change<'_>> = writes.iter().map(|(g, k, v)| (*g, *k, Some(v.as_slice()))).collect();
        self.tables.write(self.partitions, &changes)?;

        // The due rows, in time order, with their values.
        let n = batch.num_rows();
        let mut columns = batch.columns().to_vec();
        for (f, function) in self.functions.iter().enumerate() {
            let column = match &self.prepared[f] {
                Some(p) => {
                    let mut accs: Vec<Option<Acc>> = vec![None; n];
                    for (row, acc) in outputs.accs[f].drain(..) {
                        accs[row] = Some(acc);
                    }
                    let empty = p.empty();
                    p.results(&accs.iter().map(|a| a.as_ref().unwrap_or(&empty)).collect::<Vec<_>>())?
                }
                None => {
                    let slot = function.slot.ok_or_else(|| WeirError::internal("an OVER value without argument"))?;
                    self.values(f, slot, &rows, &mut outputs.values[f], n)?
                }
            };
            let wanted = OverSpec::output_type(&self.spec.functions[f]);
            columns.push(if column.data_type() == wanted { column } else { cast(&column, wanted)? });
        }
        let options = datafusion::arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(n));
        let out_batch =
            datafusion::arrow::array::RecordBatch::try_new_with_options(self.spec.schema.clone(), columns, &options)?;
        out.push(Message::Chunk(Chunk::inserts(out_batch)));
        Ok(())
    }

    /// A value function's column: each due row's value in its argument's row format, decoded.
    fn values(
        &self,
        f: usize,
        slot: usize,
        rows: &FiringRows<'_>,
        values: &mut Vec<(usize, Val)>,
        n: usize,
    ) -> Result<ArrayRef> {
        let converter = &self.arg_rows[slot];
        let null = converter.convert_columns(&[datafusion::arrow::array::new_null_array(
            self.spec.input_schema.field(self.args[slot]).data_type(),
            1,
        )])?;
        let mut by_row: Vec<Option<Val>> = vec![None; n];
        for (row, v) in values.drain(..) {
            by_row[row] = Some(v);
        }
        let parser = converter.parser();
        let bytes = by_row.iter().map(|v| match v {
            // LAG gives its default for a NULL it reads back, as Flink's does.
            Some(Val::At(pos)) => match over_frame::Rows::bytes(rows, slot, *pos) {
                Some(b) => parser.parse(b),
                None => self.defaults[f].as_deref().map_or(null.row(0), |b| parser.parse(b)),
            },
            Some(Val::Bytes(b)) => parser.parse(b),
            Some(Val::Default) => self.defaults[f].as_deref().map_or(null.row(0), |b| parser.parse(b)),
            Some(Val::Null) | None => null.row(0),
        });
        Ok(converter.convert_rows(bytes)?.remove(0))
    }
}
