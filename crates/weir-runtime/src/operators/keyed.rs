//! The operator the runtime drives for a keyed operator whose rows wait for the watermark
//! (the window and session operators; next, OVER aggregates and MATCH_RECOGNIZE). The
//! operator says what it does with a chunk and with a watermark that rose
//! ([`KeyedLogic`]); [`Keyed`] does the rest, once for all of them: the watermark kept and
//! fired once per rise, the end of the input, the late rows, snapshot and restore (through
//! [`super::state`], so that damaged state is the same error everywhere).

use datafusion::arrow::record_batch::RecordBatch;
use weir_core::{Chunk, Message, Operator, OperatorSnapshot, Result, Watermark};
use weir_state::StateTables;

use super::state::Progress;

/// What a keyed operator does itself; [`Keyed`] makes it an [`Operator`].
pub(crate) trait KeyedLogic: Send {
    /// One line for `EXPLAIN`, metrics and errors.
    fn name(&self) -> String;

    /// A chunk from input `input` (0 for a single-input operator).
    fn process(&mut self, input: usize, chunk: Chunk, out: &mut Vec<Message>) -> Result<()>;

    /// Emit what `watermark` completes: every window (or session) that ends at or before
    /// it + 1 ms, rows due, expiry. Called once each time the watermark rises, and at the end
    /// of the input with [`Watermark::END_OF_TIME`]. By default nothing waits for it.
    fn fire(&mut self, _watermark: Watermark, _out: &mut Vec<Message>) -> Result<()> {
        Ok(())
    }

    /// Every task of input `input` ended while the other goes on (a lookup join's table is
    /// loaded).
    fn input_ended(&mut self, _input: usize, _out: &mut Vec<Message>) -> Result<()> {
        Ok(())
    }

    /// Its tables and progress: what a checkpoint keeps of it.
    fn state(&mut self) -> (&mut StateTables, &mut Progress);

    fn progress(&self) -> &Progress;

    /// Rows found late since the last call, for the source table's late-data table.
    fn take_late_rows(&mut self) -> Vec<RecordBatch> {
        Vec::new()
    }

    /// The operator's own fields in a snapshot, beside its tables and progress (`()` for
    /// most): typed, so that the runtime decodes them and a damaged snapshot is the same error
    /// for every operator.
    type Own: serde::Serialize + serde::de::DeserializeOwned + Default;

    fn own(&self) -> Self::Own {
        Self::Own::default()
    }

    /// Take back what [`KeyedLogic::own`] gave: one value per restored snapshot (several at
    /// another parallelism).
    fn restore_own(&mut self, _own: Vec<Self::Own>) -> Result<()> {
        Ok(())
    }
}

/// A [`KeyedLogic`] as the runtime's operator.
pub(crate) struct Keyed<L>(pub L);

impl<L: KeyedLogic> Operator for Keyed<L> {
    fn name(&self) -> String {
        self.0.name()
    }

    fn process_chunk(&mut self, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        self.0.process(0, chunk, out)
    }

    fn process_input(&mut self, input: usize, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        self.0.process(input, chunk, out)
    }

    /// Fire what the watermark passed, once, when it rises; then forward it.
    fn process_watermark(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        let (_, progress) = self.0.state();
        if watermark > progress.watermark {
            progress.watermark = watermark;
            self.0.fire(watermark, out)?;
        }
        out.push(Message::Watermark(watermark));
        Ok(())
    }

    fn input_ended(&mut self, input: usize, out: &mut Vec<Message>) -> Result<()> {
        self.0.input_ended(input, out)
    }

    fn finish(&mut self, out: &mut Vec<Message>) -> Result<()> {
        self.0.fire(Watermark::END_OF_TIME, out)
    }

    fn late_rows(&self) -> u64 {
        self.0.progress().late
    }

    fn drain_late_rows(&mut self) -> Vec<RecordBatch> {
        self.0.take_late_rows()
    }

    /// The tables, with the progress: watermark, late count, open windows, arrival numbers.
    fn snapshot(&mut self) -> Result<Option<OperatorSnapshot>> {
        let own = self.0.own();
        let (tables, progress) = self.0.state();
        Ok(Some(super::state::snapshot(tables, progress, own)?))
    }

    /// From one snapshot or, at another parallelism, several ([`super::state::restore`]).
    fn restore(&mut self, states: &[&[u8]]) -> Result<()> {
        let name = self.0.name();
        let (tables, progress) = self.0.state();
        let (restored, own) = super::state::restore::<L::Own>(tables, states, &name)?;
        *progress = restored;
        self.0.restore_own(own)
    }
}
