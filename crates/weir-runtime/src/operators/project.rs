use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::physical_expr::PhysicalExpr;
use weir_core::{Chunk, Message, Operator, Result};

/// Evaluates one expression per output column.
pub struct Project {
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
}

impl Project {
    pub fn new(exprs: Vec<Arc<dyn PhysicalExpr>>, schema: SchemaRef) -> Self {
        Self { exprs, schema }
    }
}

impl Operator for Project {
    fn name(&self) -> String {
        "Project".into()
    }

    fn process_chunk(&mut self, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        let rows = chunk.num_rows();
        let columns = self
            .exprs
            .iter()
            .map(|e| e.evaluate(&chunk.batch).and_then(|v| v.into_array(rows)))
            .collect::<datafusion::error::Result<Vec<ArrayRef>>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        let batch = RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)?;
        out.push(Message::Chunk(chunk.with_batch(batch)));
        Ok(())
    }
}

/// Keeps columns by index (no expression evaluation).
pub struct Select {
    indices: Vec<usize>,
    schema: SchemaRef,
}

impl Select {
    pub fn new(indices: Vec<usize>, schema: SchemaRef) -> Self {
        Self { indices, schema }
    }
}

impl Operator for Select {
    fn name(&self) -> String {
        "Select".into()
    }

    fn process_chunk(&mut self, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        let columns = self.indices.iter().map(|&i| chunk.batch.column(i).clone()).collect();
        let options = RecordBatchOptions::new().with_row_count(Some(chunk.num_rows()));
        let batch = RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)?;
        out.push(Message::Chunk(chunk.with_batch(batch)));
        Ok(())
    }
}
