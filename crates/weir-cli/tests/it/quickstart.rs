//! `weir run examples/quickstart.sql` prints the right rows, and the embedded API gives the
//! same rows for the same query.

use std::process::Command;

use futures::StreamExt;

use crate::{repo, weir_bin};

/// Rows as the print sink shows them: `+I[v1, v2, …]`, by the print connector's own formatting.
fn print_lines(batches: &[weir::arrow::record_batch::RecordBatch]) -> Vec<String> {
    batches
        .iter()
        .flat_map(|b| {
            weir_connectors::format_rows(&weir::Chunk::inserts(b.clone()), "")
                .expect("format rows")
                .lines()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn cli_rows() -> Vec<String> {
    let out = Command::new(weir_bin())
        .args(["run", "examples/quickstart.sql"])
        .current_dir(repo())
        .output()
        .expect("run weir");
    assert!(out.status.success(), "weir run failed: {}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Job 'insert-into-console' finished: 16 rows written"), "{stderr}");
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with("+I[")).map(String::from).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickstart_cli_and_embedded_api_agree() {
    let cli = cli_rows();
    // The expected answer, worked out from examples/data/bids.csv: bids of at least 10000.
    assert_eq!(cli.len(), 16);
    assert_eq!(cli[0], "+I[1002, 2002, 17700.55, google, 2023-01-01 00:00:00]");
    assert_eq!(cli[1], "+I[1001, 2008, 75758.07, facebook, 2023-01-01 00:00:01.500]");
    assert_eq!(cli[15], "+I[1001, 2008, 44556.47, other, 2023-01-01 00:00:09.750]");

    // The same statements through the embedded API, with the SELECT streamed back.
    let sql = std::fs::read_to_string(repo().join("examples/quickstart.sql")).expect("read quickstart");
    let engine = weir::Engine::new().with_base_dir(repo().join("examples"));
    let statements = engine.parse(&sql).expect("parse quickstart");
    let (insert, ddl) = statements.split_last().expect("statements");
    for statement in ddl {
        engine.execute(statement).await.expect("ddl");
    }
    let select = insert.text.split_once("SELECT").map(|(_, rest)| format!("SELECT{rest}")).expect("INSERT … SELECT");
    let mut stream = engine.query(&select).await.expect("query");
    let mut batches = Vec::new();
    while let Some(batch) = stream.next().await {
        batches.push(batch.expect("batch").batch);
    }
    assert_eq!(print_lines(&batches), cli);
}

#[test]
fn run_reports_errors_with_file_line_and_column() {
    let dir = crate::slt::tempdir();
    let file = dir.join("bad.sql");
    std::fs::write(
        &file,
        "CREATE TABLE t (a INT) WITH ('connector' = 'blackhole');\n\nSELECT a,\n       nosuch\nFROM t;\n",
    )
    .expect("write sql");
    let out = Command::new(weir_bin()).arg("run").arg(&file).output().expect("run weir");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.sql:4:8: error: Schema error: No field named nosuch."), "{stderr}");
}

#[test]
fn run_fails_on_malformed_input_naming_file_and_line() {
    let dir = crate::slt::tempdir();
    std::fs::write(dir.join("in.csv"), "1,a\n2,b\nthree,c\n4,d\n").expect("write csv");
    let sql = "CREATE TABLE src (n INT, s STRING) WITH ('connector' = 'filesystem', 'path' = 'in.csv', 'format' = 'csv');\n\
               CREATE TABLE out (n INT, s STRING) WITH ('connector' = 'filesystem', 'path' = 'out', 'format' = 'csv');\n\
               INSERT INTO out SELECT * FROM src;\n";
    std::fs::write(dir.join("job.sql"), sql).expect("write sql");
    let out = Command::new(weir_bin()).arg("run").arg(dir.join("job.sql")).output().expect("run weir");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("job 'insert-into-out' failed: malformed CSV record in")
            && stderr.contains("in.csv' at line 3: cannot parse 'three' as Int32 for column 'n'"),
        "{stderr}"
    );
    // A failed job publishes nothing and leaves no in-progress file.
    let left: Vec<_> = std::fs::read_dir(dir.join("out"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "files left after failure: {left:?}");

    // Skipping instead: the good rows are written and the skip is reported.
    let lenient = sql.replace(
        "'format' = 'csv');\nCREATE TABLE out",
        "'format' = 'csv', 'format.ignore-parse-errors' = 'true');\nCREATE TABLE out",
    );
    std::fs::write(dir.join("job.sql"), lenient).expect("write sql");
    let out = Command::new(weir_bin()).arg("run").arg(dir.join("job.sql")).output().expect("run weir");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("3 rows written") && stderr.contains("1 malformed record(s) skipped"), "{stderr}");
    let files: Vec<_> = std::fs::read_dir(dir.join("out")).expect("out dir").filter_map(|e| e.ok()).collect();
    assert_eq!(files.len(), 1);
    let written = std::fs::read_to_string(files[0].path()).expect("read output");
    assert_eq!(written, "1,a\n2,b\n4,d\n");
}

/// A 5 MB value (and a newline inside a value) in a bare `SELECT`: the table shows the cell
/// cut with an ellipsis and the row on one line; nothing panics.
#[test]
fn run_prints_a_wide_value_cut_in_its_cell() {
    let dir = crate::slt::tempdir();
    let wide = "x".repeat(5 << 20);
    let text = format!("{{\"n\": 1, \"s\": \"{wide}\"}}\n{{\"n\": 2, \"s\": \"two\\nlines\"}}\n");
    std::fs::write(dir.join("in.json"), text).expect("write json");
    let sql = "CREATE TABLE src (n INT, s STRING) WITH ('connector' = 'filesystem', 'path' = 'in.json', 'format' = 'json');\n\
               SELECT * FROM src;\n";
    std::fs::write(dir.join("job.sql"), sql).expect("write sql");
    let out = Command::new(weir_bin()).arg("run").arg(dir.join("job.sql")).output().expect("run weir");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let cut = format!("| 1 | {}… |", "x".repeat(79));
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.contains(&cut.as_str()), "{}", &stdout[..stdout.len().min(2000)]);
    // Rows may come in either order (two tasks); a later batch's narrower cell is padded
    // to the first batch's width.
    let two = lines.iter().find(|l| l.starts_with("| 2 | ")).expect("row 2");
    assert_eq!(two.trim_end_matches('|').trim_end(), "| 2 | two\\nlines", "{stdout}");
    assert!(stdout.len() < 4000, "the wide value was printed whole ({} bytes)", stdout.len());
}
