use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use weir_core::{Result, Source};

/// Literal rows as a bounded source.
pub struct ValuesSource {
    schema: SchemaRef,
    batches: std::vec::IntoIter<RecordBatch>,
}

impl ValuesSource {
    pub fn new(schema: SchemaRef, batches: Vec<RecordBatch>) -> Self {
        Self { schema, batches: batches.into_iter() }
    }
}

#[async_trait]
impl Source for ValuesSource {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        Ok(self.batches.next())
    }
}
