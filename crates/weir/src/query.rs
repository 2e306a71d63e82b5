use std::pin::Pin;
use std::task::{Context, Poll};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use weir_core::{Changelog, Chunk, Materialized, Result, Sink, WeirError};
use weir_runtime::JobHandle;

/// The results of a bare `SELECT`, as they come: changelog chunks, each row with its op
/// (all `+I` for an append-only query). Dropping it cancels the query's job.
pub struct QueryStream {
    schema: SchemaRef,
    changelog: Changelog,
    rx: mpsc::Receiver<Result<Chunk>>,
    job: JobHandle,
}

impl QueryStream {
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// What the chunks carry: only inserts, or updates and deletes too.
    pub fn changelog(&self) -> &Changelog {
        &self.changelog
    }

    pub fn job(&self) -> &JobHandle {
        &self.job
    }

    /// The result once the query ends (only for bounded inputs): every row of an
    /// append-only query in arrival order, or the rows an updating query's changelog leaves.
    pub async fn collect(mut self) -> Result<Vec<RecordBatch>> {
        let mut table =
            (!self.changelog.is_append_only()).then(|| Materialized::new(self.schema.clone())).transpose()?;
        let mut batches = Vec::new();
        while let Some(chunk) = self.next().await {
            let chunk = chunk?;
            match &mut table {
                Some(t) => t.apply(&chunk)?,
                None => batches.push(chunk.batch),
            }
        }
        match table {
            Some(t) => Ok(vec![t.table()?]),
            None => Ok(batches),
        }
    }

    /// Every chunk until the query ends (only for bounded inputs), ops included.
    pub async fn collect_changes(mut self) -> Result<Vec<Chunk>> {
        let mut chunks = Vec::new();
        while let Some(chunk) = self.next().await {
            chunks.push(chunk?);
        }
        Ok(chunks)
    }
}

impl Stream for QueryStream {
    type Item = Result<Chunk>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for QueryStream {
    fn drop(&mut self) {
        self.job.cancel();
    }
}

/// The sink of a bare `SELECT`: batches go to the [`QueryStream`].
pub(crate) struct CallerSink {
    tx: mpsc::Sender<Result<Chunk>>,
}

pub(crate) fn caller_channel() -> (CallerSink, mpsc::Sender<Result<Chunk>>, mpsc::Receiver<Result<Chunk>>) {
    let (tx, rx) = mpsc::channel(weir_runtime::CHANNEL_CAPACITY);
    (CallerSink { tx: tx.clone() }, tx, rx)
}

impl QueryStream {
    /// The stream of `job`; the job's error, if it fails, is the stream's last item.
    pub(crate) fn new(
        schema: SchemaRef,
        changelog: Changelog,
        tx: mpsc::Sender<Result<Chunk>>,
        rx: mpsc::Receiver<Result<Chunk>>,
        job: JobHandle,
    ) -> Self {
        let watched = job.clone();
        tokio::spawn(async move {
            if let Err(e) = watched.wait().await {
                let _ = tx.send(Err(e)).await;
            }
        });
        Self { schema, changelog, rx, job }
    }
}

#[async_trait]
impl Sink for CallerSink {
    async fn write_chunk(&mut self, chunk: Chunk) -> Result<()> {
        self.tx.send(Ok(chunk)).await.map_err(|_| WeirError::user("the query's results are no longer being read"))
    }

    async fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}
