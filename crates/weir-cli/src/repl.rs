//! The interactive shell: multi-line statements ending with `;`, history, tables, Ctrl-C.

use std::path::PathBuf;
use std::process::ExitCode;

use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;
use weir::Engine;

use crate::outcome::{execute, Shown};

const HELP: &str = "\
Statements end with ';' and may span lines. Ctrl-C cancels a running query or clears the input;
Ctrl-D or 'quit' leaves.

  CREATE TABLE t (col TYPE, …, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
      WITH ('connector' = 'filesystem', 'path' = '…', 'format' = 'csv');
  CREATE VIEW v AS SELECT …;       DROP TABLE t;   DROP VIEW v;
  SHOW TABLES;  SHOW VIEWS;  SHOW JOBS;  DESCRIBE t;  SHOW CREATE TABLE t;
  SET;  SET 'key' = 'value';  RESET;
  SELECT …;                        rows print as they arrive
  INSERT INTO sink SELECT …;       starts a job in the background
  EXPLAIN SELECT …;                the operator graph

See docs/sql.md for the full reference.";

fn history_path(given: Option<PathBuf>) -> Option<PathBuf> {
    given.or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".weir_history")))
}

pub async fn run(history: Option<PathBuf>) -> ExitCode {
    let mut editor = match DefaultEditor::new() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: cannot start the shell: {e}");
            return ExitCode::FAILURE;
        }
    };
    let history = history_path(history);
    if let Some(h) = &history {
        let _ = editor.load_history(h);
    }
    println!("Weir {} — type 'help' for help, 'quit' to leave.", env!("CARGO_PKG_VERSION"));
    let engine = Engine::new();
    let mut buffer = String::new();
    loop {
        let prompt = if buffer.is_empty() { "weir> " } else { "   -> " };
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                buffer.clear();
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("error: {e}");
                break;
            }
        };
        if buffer.is_empty() {
            match line.trim().trim_end_matches(';').trim().to_ascii_lowercase().as_str() {
                "" => continue,
                "quit" | "exit" => break,
                "help" => {
                    println!("{HELP}");
                    continue;
                }
                _ => {}
            }
        }
        if !buffer.is_empty() {
            buffer.push('\n');
        }
        buffer.push_str(&line);
        if !weir::ends_statement(&buffer) {
            continue;
        }
        let _ = editor.add_history_entry(buffer.as_str());
        if let Some(h) = &history {
            let _ = editor.save_history(h);
        }
        let text = std::mem::take(&mut buffer);
        run_text(&engine, &text).await;
    }
    // Jobs started here stop with the shell.
    for job in engine.jobs().await {
        job.cancel();
    }
    ExitCode::SUCCESS
}

async fn run_text(engine: &Engine, text: &str) {
    let statements = match engine.parse(text) {
        Ok(s) => s,
        Err(e) => {
            println!("ERROR: {e}");
            return;
        }
    };
    for statement in &statements {
        match execute(engine, statement).await {
            Ok(Shown::Done) | Ok(Shown::Job(_)) => {}
            Ok(Shown::Interrupted) => return,
            Err(e) => {
                println!("ERROR: {e}");
                return;
            }
        }
    }
}
