//! `'connector' = 'print'`: one line per row in Flink's format, `+I[1, abc]`, optionally
//! prefixed by `'print-identifier'` and written to standard error with `'standard-error'`.

use std::io::Write;

use async_trait::async_trait;
use datafusion::arrow::util::display::ArrayFormatter;
use weir_core::{Chunk, Result, Sink, TableDef, WeirError};

pub struct PrintSink {
    prefix: String,
    stderr: bool,
}

impl PrintSink {
    pub fn new(table: &TableDef) -> Result<Self> {
        let prefix = match table.options.get("print-identifier") {
            Some(id) => format!("{id}> "),
            None => String::new(),
        };
        Ok(Self { prefix, stderr: table.options.bool(&table.name, "standard-error", false)? })
    }
}

/// Lines `+I[v1, v2, …]` for every row of `chunk`, nulls shown as `NULL`.
pub fn format_rows(chunk: &Chunk, prefix: &str) -> Result<String> {
    let options = weir_core::display_options();
    let formatters = chunk
        .batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let mut text = String::new();
    for row in 0..chunk.num_rows() {
        text.push_str(prefix);
        text.push_str(chunk.op(row).short());
        text.push('[');
        for (i, f) in formatters.iter().enumerate() {
            if i > 0 {
                text.push_str(", ");
            }
            text.push_str(&f.value(row).to_string());
        }
        text.push_str("]\n");
    }
    Ok(text)
}

#[async_trait]
impl Sink for PrintSink {
    async fn write_chunk(&mut self, chunk: Chunk) -> Result<()> {
        let text = format_rows(&chunk, &self.prefix)?;
        let written = if self.stderr {
            std::io::stderr().lock().write_all(text.as_bytes())
        } else {
            std::io::stdout().lock().write_all(text.as_bytes())
        };
        written.map_err(|e| WeirError::external(format!("print sink: {e}")))
    }

    async fn finish(&mut self) -> Result<()> {
        let _ = std::io::stdout().flush();
        Ok(())
    }
}
