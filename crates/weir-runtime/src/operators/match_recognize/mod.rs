//! `MATCH_RECOGNIZE` in event time, as Flink's `CepOperator` runs it: each row waits in a
//! timed table under `time | partition key | arrival` until the watermark passes it; then
//! each partition's due rows go through the pattern ([`nfa`]) in time order, and each match
//! found is one output row (`ONE ROW PER MATCH`): the partition columns, then the measures.
//! The output only appends.
//!
//! A partition's matching state (its partial and finished matches and the rows they hold,
//! each once) is one value per partition key, read and written once per partition per
//! firing ([`encode`]). With `WITHIN`, a third table files each partition under the time
//! its oldest partial match expires, so that a partition without new rows still drops it
//! and emits what it held back, as Flink's timer does.
//!
//! Late rows are Flink's: a row at or behind the watermark when it comes is dropped and
//! counted. Ordered by processing time, rows go through the pattern as they come, in arrival
//! order, and none is late.

mod encode;
pub mod expr;
pub mod nfa;

use std::rc::Rc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use weir_core::{Chunk, Message, Result, Watermark, WeirError};
use weir_state::tables::Change;
use weir_state::{StateTables, Table, TableDecl, TableKind};

use self::expr::{MatchExpr, Scope};
use self::nfa::{Event, Machine, Node, Pattern};
use super::keyed::KeyedLogic;
use super::state::{from_ordered, interner, ordered, Progress, StateContext};
use super::window::millis;

const TABLES: [TableDecl; 3] = [
    TableDecl { name: "waiting", kind: TableKind::Timed },
    TableDecl { name: "partitions", kind: TableKind::Value },
    TableDecl { name: "expiring", kind: TableKind::Timed },
];

#[derive(Debug, Clone)]
pub struct MatchSpec {
    pub partition: Vec<usize>,
    /// The time column rows are ordered by.
    pub time: usize,
    /// Whether that is processing time (a `PROCTIME()` column): rows go through the pattern
    /// as they come, in arrival order, as Flink's processing-time CEP; none waits or is late,
    /// and `WITHIN` expires by the processing-time watermark.
    pub proctime: bool,
    /// The input columns the expressions read, kept with each row: a
    /// [`expr::MatchExpr::Column`]'s `slot` indexes this. The partition columns are among them.
    pub columns: Vec<usize>,
    pub pattern: Pattern,
    pub measures: Vec<MatchExpr>,
    pub input_schema: SchemaRef,
    /// The partition columns, then one per measure.
    pub schema: SchemaRef,
}

pub struct MatchRecognize {
    spec: MatchSpec,
    keys: Option<RowConverter>,
    /// The kept columns in row format.
    rows: RowConverter,
    /// Slot of each partition column.
    partition_slots: Vec<usize>,
    tables: StateTables,
    waiting: Table,
    partitions: Table,
    expiring: Table,
    progress: Progress,
}

impl MatchRecognize {
    pub fn new(spec: MatchSpec, state: &StateContext) -> Result<Self> {
        let field = |c: usize| SortField::new(spec.input_schema.field(c).data_type().clone());
        let keys = match spec.partition.is_empty() {
            true => None,
            false => Some(RowConverter::new(spec.partition.iter().map(|c| field(*c)).collect())?),
        };
        let rows = RowConverter::new(spec.columns.iter().map(|c| field(*c)).collect())?;
        let partition_slots = spec
            .partition
            .iter()
            .map(|p| spec.columns.iter().position(|c| c == p))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| WeirError::internal("MATCH_RECOGNIZE: a partition column is not kept"))?;
        let tables = state.open(&TABLES)?;
        Ok(Self {
            keys,
            rows,
            partition_slots,
            waiting: tables.table("waiting")?,
            partitions: tables.table("partitions")?,
            expiring: tables.table("expiring")?,
            tables,
            spec,
            progress: Progress::default(),
        })
    }

    /// Rows in the kept columns' row format, as expression values.
    fn values(&self, rows: &[&[u8]]) -> Result<Vec<Vec<ScalarValue>>> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let parser = self.rows.parser();
        let columns = self.rows.convert_rows(rows.iter().map(|r| parser.parse(r)))?;
        (0..rows.len())
            .map(|i| {
                columns
                    .iter()
                    .map(|c| Ok(expr::normalise(ScalarValue::try_from_array(c, i)?)))
                    .collect::<Result<Vec<_>>>()
            })
            .collect()
    }
}

/// One partition's work in a firing: its stored machine, its due rows.
struct Work<'a> {
    group: u16,
    key: &'a [u8],
    due: Vec<usize>,
}

impl KeyedLogic for MatchRecognize {
    type Own = ();

    fn name(&self) -> String {
        "MatchRecognize".into()
    }

    /// File each row that is not late under `time | partition key | arrival` (in processing
    /// time: match the rows now).
    fn process(&mut self, _input: usize, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        if !chunk.is_append_only() {
            return Err(WeirError::not_supported("MATCH_RECOGNIZE over an updating input"));
        }
        let batch = &chunk.batch;
        let n = batch.num_rows();
        let times = millis(batch.column(self.spec.time))?;
        let columns: Vec<ArrayRef> = self.spec.partition.iter().map(|c| batch.column(*c).clone()).collect();
        let groups = crate::exchange::key_groups_of_columns(&columns, n, self.tables.key_groups())?;
        let keys = match &self.keys {
            Some(k) => Some(k.convert_columns(&columns)?),
            None => None,
        };
        let kept: Vec<ArrayRef> = self.spec.columns.iter().map(|c| batch.column(*c).clone()).collect();
        let rows = self.rows.convert_columns(&kept)?;
        let watermark = if self.spec.proctime { i64::MIN } else { self.progress.watermark.0 };
        let mut entries = Vec::with_capacity(n);
        for i in 0..n {
            // A row without a time has no place in time order: late, as Flink drops it.
            if !times.is_valid(i) || times.value(i) <= watermark {
                self.progress.late += 1;
                continue;
            }
            let seq = self.progress.next_seq;
            self.progress.next_seq += 1;
            let key = keys.as_ref().map_or(&[][..], |k| k.row(i).data());
            entries.push(([&ordered(times.value(i))[..], key, &seq.to_be_bytes()].concat(), i));
        }
        if self.spec.proctime {
            let due: Vec<(u16, Vec<u8>, Vec<u8>)> =
                entries.into_iter().map(|(k, i)| (groups[i], k, rows.row(i).data().to_vec())).collect();
            return self.run(due, Vec::new(), None, out);
        }
        let changes: Vec<Change<'_>> =
            entries.iter().map(|(k, i)| (groups[*i], k.as_slice(), Some(rows.row(*i).data()))).collect();
        self.tables.write(self.waiting, &changes)
    }

    /// Every partition's rows up to `watermark` through the pattern, in time order; then the
    /// time advanced for every partition that has rows or an expiry due.
    fn fire(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        let (from, to) = (ordered(i64::MIN), ordered(watermark.0.saturating_add(1)));
        let due = self.tables.scan_times(self.waiting, &from, &to)?;
        let expiring = match self.spec.pattern.within {
            Some(_) => self.tables.scan_times(self.expiring, &from, &to)?,
            None => Vec::new(),
        };
        if due.is_empty() && expiring.is_empty() {
            return Ok(());
        }
        self.tables.delete_times(self.waiting, &from, &to)?;
        self.run(due, expiring, Some(watermark.0), out)
    }

    fn state(&mut self) -> (&mut StateTables, &mut Progress) {
        (&mut self.tables, &mut self.progress)
    }

    fn progress(&self) -> &Progress {
        &self.progress
    }
}

impl MatchRecognize {
    /// The `due` rows `(group, time | key | arrival, row)` through their partitions' patterns
    /// in that order, the partitions of `expiring` visited too; then, given a watermark, the
    /// time advanced for each. Emits the matches found.
    fn run(
        &mut self,
        due: Vec<(u16, Vec<u8>, Vec<u8>)>,
        expiring: Vec<(u16, Vec<u8>, Vec<u8>)>,
        watermark: Option<i64>,
        out: &mut Vec<Message>,
    ) -> Result<()> {
        let damaged = || WeirError::internal("MATCH_RECOGNIZE state is damaged");
        // Partitions in order of their first due row (then those only expiring).
        let mut index = interner::<&[u8], usize>();
        let mut work: Vec<Work<'_>> = Vec::new();
        let mut due_events = Vec::with_capacity(due.len());
        for (i, (group, key, _)) in due.iter().enumerate() {
            let (time, rest) = key.split_at_checked(8).ok_or_else(damaged)?;
            let partition = rest.get(..rest.len().saturating_sub(8)).ok_or_else(damaged)?;
            let seq = rest.get(rest.len().saturating_sub(8)..).and_then(|b| b.try_into().ok()).ok_or_else(damaged)?;
            due_events.push((from_ordered(time.try_into().map_err(|_| damaged())?), u64::from_be_bytes(seq)));
            let at = *index.entry(partition).or_insert_with(|| {
                work.push(Work { group: *group, key: partition, due: Vec::new() });
                work.len() - 1
            });
            work[at].due.push(i);
        }
        for (group, key, _) in &expiring {
            let partition = key.get(8..).ok_or_else(damaged)?;
            index.entry(partition).or_insert_with(|| {
                work.push(Work { group: *group, key: partition, due: Vec::new() });
                work.len() - 1
            });
        }
        let asked: Vec<(u16, &[u8])> = work.iter().map(|w| (w.group, w.key)).collect();
        let stored = self.tables.get_many(self.partitions, &asked)?;
        let due_values = self.values(&due.iter().map(|(_, _, v)| v.as_slice()).collect::<Vec<_>>())?;
        let mut due_values = due_values.into_iter().map(Some).collect::<Vec<_>>();

        let pattern = &self.spec.pattern;
        let mut found: Vec<Rc<Node>> = Vec::new();
        let mut writes: Vec<(u16, Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        let mut values: Vec<(u16, &[u8], Option<Vec<u8>>)> = Vec::with_capacity(work.len());
        for (w, bytes) in work.iter().zip(stored) {
            let mut machine = match &bytes {
                Some(b) => encode::decode(b, |rows| self.values(rows))?,
                None => Machine::default(),
            };
            let before = pattern.expiry(&machine);
            for i in &w.due {
                let (time, seq) = due_events[*i];
                let values = due_values[*i].take().ok_or_else(damaged)?;
                let row = due[*i].2.clone().into_boxed_slice();
                pattern.process(&mut machine, Rc::new(Event { time, seq, values, row }), &mut found)?;
            }
            if let Some(w) = watermark {
                pattern.advance_time(&mut machine, w, &mut found)?;
            }
            let after = pattern.expiry(&machine);
            if before != after {
                if let Some(t) = before {
                    writes.push((w.group, [&ordered(t)[..], w.key].concat(), None));
                }
                if let Some(t) = after {
                    writes.push((w.group, [&ordered(t)[..], w.key].concat(), Some(Vec::new())));
                }
            }
            let live = !machine.partials.is_empty() || !machine.finished.is_empty();
            // A partition with nothing alive is deleted, and one never stored is not written.
            if live || bytes.is_some() {
                values.push((w.group, w.key, live.then(|| encode::encode(&machine))));
            }
        }
        let changes: Vec<Change<'_>> = values.iter().map(|(g, k, v)| (*g, *k, v.as_deref())).collect();
        self.tables.write(self.partitions, &changes)?;
        if !writes.is_empty() {
            let changes: Vec<Change<'_>> = writes.iter().map(|(g, k, v)| (*g, k.as_slice(), v.as_deref())).collect();
            self.tables.write(self.expiring, &changes)?;
        }
        if !found.is_empty() {
            out.push(Message::Chunk(Chunk::inserts(self.output(&found)?)));
        }
        Ok(())
    }

    /// One row per match: its partition's columns, then each measure over its rows.
    fn output(&self, found: &[Rc<Node>]) -> Result<RecordBatch> {
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.spec.schema.fields().len());
        for (j, slot) in self.partition_slots.iter().enumerate() {
            let values = found.iter().map(|m| m.event.values[*slot].clone());
            columns.push(self.column(values, j)?);
        }
        let width = self.partition_slots.len();
        for (j, measure) in self.spec.measures.iter().enumerate() {
            let values = found
                .iter()
                .map(|m| measure.eval(&Scope { path: Some(m), current: None }))
                .collect::<Result<Vec<_>>>()?;
            columns.push(self.column(values.into_iter(), width + j)?);
        }
        let options = datafusion::arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(found.len()));
        Ok(RecordBatch::try_new_with_options(self.spec.schema.clone(), columns, &options)?)
    }

    /// Values as output column `j`, of its declared type.
    fn column(&self, values: impl Iterator<Item = ScalarValue>, j: usize) -> Result<ArrayRef> {
        let wanted = self.spec.schema.field(j).data_type();
        let typed = values.map(|v| if v.is_null() { ScalarValue::try_from(wanted) } else { v.cast_to(wanted) });
        let typed = typed.collect::<Result<Vec<_>, _>>()?;
        let array = ScalarValue::iter_to_array(typed)?;
        Ok(if array.data_type() == wanted { array } else { cast(&array, wanted)? })
    }
}
