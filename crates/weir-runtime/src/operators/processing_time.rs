//! Watermarks of processing time, for windows over a `PROCTIME()` column (Nexmark q12).

use datafusion::arrow::compute::max;
use weir_core::{Barrier, Chunk, Message, Operator, Result, Watermark};

use super::window::millis;

/// Stamps the stream with the wall clock: after each chunk, at each barrier or watermark from
/// upstream (which it replaces: event time means nothing to these windows), and every
/// [`TICK`] of a quiet input (a timer), a watermark just below the latest `PROCTIME()` seen or
/// the clock now. Rows that come later
/// are stamped later, so no window fires before its last row. The end of a bounded input
/// (`END_OF_TIME`) passes as it is.
///
/// Not deterministic, by design: which window a row falls in depends on when it is
/// processed, so a replay after a failure can group rows otherwise (`EXPLAIN INSERT` and
/// `weir verify` say so).
pub struct ProcessingTimeWatermark {
    time_column: usize,
    current: Watermark,
    /// When the watermark last moved: a quiet input moves it again after [`TICK`].
    moved: std::time::Instant,
}

/// How often the watermark of a quiet input follows the clock: how late, at most, a window
/// closes after its end when no row comes (or on a task that has none).
const TICK: std::time::Duration = std::time::Duration::from_millis(200);

impl ProcessingTimeWatermark {
    pub fn new(time_column: usize) -> Self {
        Self { time_column, current: Watermark::MIN, moved: std::time::Instant::now() }
    }

    fn now() -> i64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
    }

    /// Emit `at - 1` if it is above the watermark already emitted (the clock may step back).
    fn advance(&mut self, at: i64, out: &mut Vec<Message>) {
        let next = Watermark(at.saturating_sub(1));
        self.moved = std::time::Instant::now();
        if next > self.current {
            self.current = next;
            out.push(Message::Watermark(next));
        }
    }
}

impl Operator for ProcessingTimeWatermark {
    fn name(&self) -> String {
        "ProcessingTimeWatermark".into()
    }

    fn process_chunk(&mut self, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        let latest = max(&millis(chunk.batch.column(self.time_column))?);
        out.push(Message::Chunk(chunk));
        if let Some(latest) = latest {
            self.advance(latest.max(Self::now()), out);
        }
        Ok(())
    }

    fn process_watermark(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        if watermark == Watermark::END_OF_TIME {
            self.current = watermark;
            out.push(Message::Watermark(watermark));
        } else {
            self.advance(Self::now(), out);
        }
        Ok(())
    }

    fn next_timer(&self) -> Option<std::time::Instant> {
        (self.current != Watermark::END_OF_TIME).then_some(self.moved + TICK)
    }

    fn on_timer(&mut self, out: &mut Vec<Message>) -> Result<()> {
        self.advance(Self::now(), out);
        Ok(())
    }

    fn process_barrier(&mut self, barrier: Barrier, out: &mut Vec<Message>) -> Result<()> {
        self.advance(Self::now(), out);
        out.push(Message::Barrier(barrier));
        Ok(())
    }
}
