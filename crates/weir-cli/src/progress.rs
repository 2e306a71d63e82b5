//! `weir run`'s progress line: on a terminal only, redrawn on stderr twice a second while the
//! jobs run. Piped or redirected, stderr has what it always had.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir::JobHandle;

/// Rows read and written, rows read per second, the share read of sources that know their
/// size (files), and the time so far. Lines said through it go above the progress line.
pub struct Progress {
    drawing: Option<tokio::task::JoinHandle<()>>,
    /// Held while writing to stderr, so that a line said never lands inside the progress line.
    stderr: Arc<Mutex<()>>,
}

/// Erase the current line of the terminal.
const CLEAR: &str = "\r\x1b[2K";

impl Progress {
    pub fn start(jobs: &[JobHandle]) -> Self {
        let stderr = Arc::new(Mutex::new(()));
        if jobs.is_empty() || !std::io::stderr().is_terminal() {
            return Self { drawing: None, stderr };
        }
        let (jobs, lock) = (jobs.to_vec(), stderr.clone());
        let drawing = tokio::spawn(async move {
            let began = Instant::now();
            let mut last = (began, 0u64);
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tick.tick().await;
                let line = line(&jobs, began, &mut last);
                if let Ok(_held) = lock.lock() {
                    eprint!("{CLEAR}{line}");
                }
            }
        });
        Self { drawing: Some(drawing), stderr }
    }

    /// Write `text` as a line of its own on stderr; the progress line is drawn again after it.
    pub fn say(&self, text: &str) {
        let _held = self.stderr.lock();
        match self.drawing {
            Some(_) => eprintln!("{CLEAR}{text}"),
            None => eprintln!("{text}"),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(drawing) = self.drawing.take() {
            drawing.abort();
            let _held = self.stderr.lock();
            eprint!("{CLEAR}");
        }
    }
}

fn line(jobs: &[JobHandle], began: Instant, last: &mut (Instant, u64)) -> String {
    let statuses: Vec<_> = jobs.iter().map(|j| j.status()).collect();
    let read: u64 = statuses.iter().map(|s| s.rows_read()).sum();
    let written: u64 = statuses.iter().map(|s| s.rows_written()).sum();
    let now = Instant::now();
    let secs = now.duration_since(last.0).as_secs_f64();
    let rate = if secs > 0.0 { read.saturating_sub(last.1) as f64 / secs } else { 0.0 };
    *last = (now, read);
    let (done, total) =
        statuses.iter().filter_map(|s| s.input_progress()).fold((0, 0), |(d, t), (pd, pt)| (d + pd, t + pt));
    let share = match total {
        0 => String::new(),
        t => format!(", {:.0}%", done as f64 * 100.0 / t as f64),
    };
    format!(
        "{} rows read, {} written, {}/s{share}, {:.0}s",
        thousands(read),
        thousands(written),
        thousands(rate as u64),
        began.elapsed().as_secs_f64()
    )
}

/// 1234567 → `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
