use std::sync::Arc;

use datafusion::arrow::array::{Array, BooleanArray};
use datafusion::physical_expr::PhysicalExpr;
use weir_core::{Chunk, Message, Operator, Result, WeirError};

/// Keeps the rows whose predicate is true (NULL counts as false, as in SQL).
pub struct Filter {
    predicate: Arc<dyn PhysicalExpr>,
}

impl Filter {
    pub fn new(predicate: Arc<dyn PhysicalExpr>) -> Self {
        Self { predicate }
    }
}

impl Operator for Filter {
    fn name(&self) -> String {
        "Filter".into()
    }

    fn process_chunk(&mut self, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        let mask = self.predicate.evaluate(&chunk.batch)?.into_array(chunk.num_rows())?;
        let mask = mask
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| WeirError::internal("filter predicate is not boolean"))?;
        let kept = match mask.true_count() {
            0 => return Ok(()),
            n if n == chunk.num_rows() => chunk,
            _ => chunk.filter(mask)?,
        };
        out.push(Message::Chunk(kept));
        Ok(())
    }
}
