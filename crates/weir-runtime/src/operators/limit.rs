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

    fn snapshot(&mut self) -> Result<Option<weir_core::OperatorSnapshot>> {
        let mut bytes = (self.skip as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(&self.remaining.map_or(u64::MAX, |r| r as u64).to_le_bytes());
        Ok(Some(weir_core::OperatorSnapshot::bytes(bytes)))
    }

    fn restore(&mut self, states: &[&[u8]]) -> Result<()> {
        let state = weir_core::single_state(states, "a LIMIT")?;
        let damaged = || weir_core::WeirError::internal("limit state in a checkpoint is damaged");
        let skip: [u8; 8] = state.get(..8).and_then(|b| b.try_into().ok()).ok_or_else(damaged)?;
        let remaining: [u8; 8] = state.get(8..16).and_then(|b| b.try_into().ok()).ok_or_else(damaged)?;
        self.skip = u64::from_le_bytes(skip) as usize;
        self.remaining = match u64::from_le_bytes(remaining) {
            u64::MAX => None,
            r => Some(r as usize),
        };
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.remaining == Some(0)
    }
}
