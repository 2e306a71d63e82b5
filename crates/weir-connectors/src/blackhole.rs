use async_trait::async_trait;
use weir_core::{Chunk, Result, Sink};

/// Discards every row: for benchmarks and for jobs run for their side effects.
pub struct BlackholeSink;

#[async_trait]
impl Sink for BlackholeSink {
    async fn write_chunk(&mut self, _chunk: Chunk) -> Result<()> {
        Ok(())
    }

    async fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}
