use weir_core::{Chunk, Message, Operator, Result};

/// `LIMIT fetch OFFSET skip`. Once `fetch` rows have passed it is done, and the runtime ends
/// the stream, which stops the sources even when they are unbounded.
pub struct Limit {
    skip: usize,
    remaining: Option<usize>,
}

impl Limit {
    pub fn new(skip: usize, fetch: Option<usize>) -> Self {
        Self { skip, remaining: fetch }
    }
}

impl Operator for Limit {
    fn name(&self) -> String {
        "Limit".into()
    }

    fn process_chunk(&mut self, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        let rows = chunk.num_rows();
        let skip = self.skip.min(rows);
        self.skip -= skip;
        let mut len = rows - skip;
        if let Some(remaining) = &mut self.remaining {
            len = len.min(*remaining);
            *remaining -= len;
        }
        if len > 0 {
            out.push(Message::Chunk(if len == rows { chunk } else { chunk.slice(skip, len) }));
        }
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.remaining == Some(0)
    }
}
