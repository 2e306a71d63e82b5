//! Results as aligned text tables, printed as rows arrive.

use std::io::Write;

use weir::arrow::datatypes::SchemaRef;
use weir::arrow::record_batch::RecordBatch;
use weir::arrow::util::display::ArrayFormatter;
use weir::Result;

/// Widest cell shown, in characters: a longer value is cut with an ellipsis, as psql's
/// wrapped and DuckDB's boxes do, so that one wide value cannot push every row off the screen
/// (the print connector keeps whole values).
pub const MAX_CELL_CHARS: usize = 80;

/// A value as one table cell: control characters (a newline would break the row) escaped,
/// and cut at [`MAX_CELL_CHARS`].
pub fn cell_text(value: &str) -> String {
    let mut out = String::new();
    let mut chars = 0;
    for ch in value.chars() {
        let piece: std::borrow::Cow<'_, str> = match ch {
            '\n' => "\\n".into(),
            '\r' => "\\r".into(),
            '\t' => "\\t".into(),
            c if c.is_control() => c.escape_unicode().to_string().into(),
            c => c.to_string().into(),
        };
        let n = piece.chars().count();
        if chars + n > MAX_CELL_CHARS - 1 {
            out.push('…');
            return out;
        }
        out.push_str(&piece);
        chars += n;
    }
    out
}

/// Prints a table whose rows come in batches: the column widths are fixed by the header and
/// the first batch (later, wider values widen their row only), so rows print as they come.
pub struct TablePrinter {
    names: Vec<String>,
    widths: Option<Vec<usize>>,
    pub rows: usize,
}

impl TablePrinter {
    pub fn new(schema: &SchemaRef) -> Self {
        Self { names: schema.fields().iter().map(|f| cell_text(f.name())).collect(), widths: None, rows: 0 }
    }

    fn cells(batch: &RecordBatch) -> Result<Vec<Vec<String>>> {
        let options = weir::display_options();
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok((0..batch.num_rows())
            .map(|r| formatters.iter().map(|f| cell_text(&f.value(r).to_string())).collect())
            .collect())
    }

    fn line(&self, widths: &[usize]) -> String {
        let mut s = String::from("+");
        for w in widths {
            s.push_str(&"-".repeat(w + 2));
            s.push('+');
        }
        s
    }

    fn row(cells: &[String], widths: &[usize]) -> String {
        let mut s = String::from("|");
        // Padded by hand: a format width has a limit, and must not be where a value panics.
        for (c, w) in cells.iter().zip(widths) {
            s.push(' ');
            s.push_str(c);
            s.extend(std::iter::repeat_n(' ', w.saturating_sub(c.chars().count())));
            s.push_str(" |");
        }
        s
    }

    pub fn batch(&mut self, batch: &RecordBatch, out: &mut impl Write) -> Result<()> {
        let cells = Self::cells(batch)?;
        if self.widths.is_none() {
            let mut widths: Vec<usize> = self.names.iter().map(|n| n.chars().count()).collect();
            for row in &cells {
                for (w, c) in widths.iter_mut().zip(row) {
                    *w = (*w).max(c.chars().count());
                }
            }
            let _ = writeln!(out, "{}", self.line(&widths));
            let _ = writeln!(out, "{}", Self::row(&self.names, &widths));
            let _ = writeln!(out, "{}", self.line(&widths));
            self.widths = Some(widths);
        }
        let widths = self.widths.clone().unwrap_or_default();
        for row in &cells {
            let _ = writeln!(out, "{}", Self::row(row, &widths));
        }
        self.rows += cells.len();
        let _ = out.flush();
        Ok(())
    }

    /// The closing line, or the header alone for an empty result.
    pub fn finish(&mut self, out: &mut impl Write) {
        let widths = match &self.widths {
            Some(w) => w.clone(),
            None => {
                let w: Vec<usize> = self.names.iter().map(|n| n.chars().count()).collect();
                let _ = writeln!(out, "{}", self.line(&w));
                let _ = writeln!(out, "{}", Self::row(&self.names, &w));
                w
            }
        };
        let _ = writeln!(out, "{}", self.line(&widths));
        let _ = out.flush();
    }
}

pub fn rows_text(rows: usize) -> String {
    if rows == 1 {
        "1 row".to_string()
    } else {
        format!("{rows} rows")
    }
}
