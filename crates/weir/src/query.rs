use std::pin::Pin;
use std::task::{Context, Poll};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use weir_core::{Chunk, Result, Sink, WeirError};
use weir_runtime::JobHandle;

/// The rows of a bare `SELECT`, as they come. Dropping it cancels the query's job.
pub struct QueryStream {
    schema: SchemaRef,
    rx: mpsc::Receiver<Result<RecordBatch>>,
    job: JobHandle,
}

impl QueryStream {
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    pub fn job(&self) -> &JobHandle {
        &self.job
    }

    /// All batches until the query ends (only for bounded inputs).
    pub async fn collect(mut self) -> Result<Vec<RecordBatch>> {
        let mut batches = Vec::new();
        while let Some(batch) = self.next().await {
            batches.push(batch?);
        }
        Ok(batches)
    }
}

impl Stream for QueryStream {
    type Item = Result<RecordBatch>;

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
    tx: mpsc::Sender<Result<RecordBatch>>,
}

pub(crate) fn caller_channel() -> (CallerSink, mpsc::Sender<Result<RecordBatch>>, mpsc::Receiver<Result<RecordBatch>>) {
    let (tx, rx) = mpsc::channel(weir_runtime::CHANNEL_CAPACITY);
    (CallerSink { tx: tx.clone() }, tx, rx)
}

impl QueryStream {
    /// The stream of `job`; the job's error, if it fails, is the stream's last item.
    pub(crate) fn new(
        schema: SchemaRef,
        tx: mpsc::Sender<Result<RecordBatch>>,
        rx: mpsc::Receiver<Result<RecordBatch>>,
        job: JobHandle,
    ) -> Self {
        let watched = job.clone();
        tokio::spawn(async move {
            if let Err(e) = watched.wait().await {
                let _ = tx.send(Err(e)).await;
            }
        });
        Self { schema, rx, job }
    }
}

#[async_trait]
impl Sink for CallerSink {
    async fn write_chunk(&mut self, chunk: Chunk) -> Result<()> {
        if !chunk.is_append_only() {
            return Err(WeirError::not_supported("returning updates to the caller yet"));
        }
        self.tx.send(Ok(chunk.batch)).await.map_err(|_| WeirError::user("the query's results are no longer being read"))
    }

    async fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}
