//! The shell, driven through a pseudo-terminal as a person would use it.

use std::process::Command;

use crate::{repo, weir_bin};

#[test]
fn repl_runs_a_multi_line_query_and_reports_an_error() {
    let dir = crate::slt::tempdir();
    let mut command = Command::new(weir_bin());
    command.arg("--history").arg(dir.join("history")).current_dir(repo());
    let mut p = rexpect::session::spawn_command(command, Some(30_000)).expect("spawn weir");
    p.exp_string("weir> ").expect("first prompt");

    p.send_line("CREATE TABLE people (id INT, name STRING, age INT, joined TIMESTAMP(3), active BOOLEAN)")
        .expect("send");
    p.exp_string("   -> ").expect("continuation prompt");
    p.send_line("WITH ('connector' = 'filesystem', 'path' = 'sql-tests/data/people.csv', 'format' = 'csv');")
        .expect("send");
    p.exp_string("Table 'people' created.").expect("created");

    p.exp_string("weir> ").expect("prompt");
    p.send_line("SELECT id, upper(name) AS name").expect("send");
    p.exp_string("   -> ").expect("continuation prompt");
    p.send_line("FROM people").expect("send");
    p.exp_string("   -> ").expect("continuation prompt");
    p.send_line("WHERE age > 30;").expect("send");
    p.exp_string("| id | name  |").expect("header");
    p.exp_string("| 1  | ALICE |").expect("row 1");
    p.exp_string("| 3  | CAROL |").expect("row 2");
    p.exp_regex(r"2 rows in \d+\.\d{3}s").expect("row count");

    p.exp_string("weir> ").expect("prompt");
    p.send_line("SELECT nosuch FROM people;").expect("send");
    p.exp_string("ERROR: Schema error: No field named nosuch.").expect("error");
    p.exp_string("(at line 1, column 8)").expect("error position");

    p.exp_string("weir> ").expect("prompt");
    p.send_line("quit").expect("send");
    p.exp_eof().expect("exit");

    let history = std::fs::read_to_string(dir.join("history")).expect("history file");
    assert!(history.contains("SELECT nosuch FROM people;"), "{history}");
}

#[test]
fn every_command_has_help() {
    for args in [vec!["--help"], vec!["run", "--help"], vec!["test", "--help"]] {
        let out = Command::new(weir_bin()).args(&args).output().expect("run weir");
        assert!(out.status.success(), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: weir"), "{args:?}");
    }
}

/// An updating query in the shell: the table it leaves, kept up to date in place on a
/// terminal; in changelog mode every change with its op first.
#[test]
fn repl_shows_an_updating_query_as_a_table_and_as_a_changelog() {
    let dir = crate::slt::tempdir();
    let mut command = Command::new(weir_bin());
    command.arg("--history").arg(dir.join("history")).current_dir(repo());
    let mut p = rexpect::session::spawn_command(command, Some(30_000)).expect("spawn weir");
    p.exp_string("weir> ").expect("first prompt");
    p.send_line(
        "CREATE TABLE people (id INT, name STRING, age INT, joined TIMESTAMP(3), active BOOLEAN) \
         WITH ('connector' = 'filesystem', 'path' = 'sql-tests/data/people.csv', 'format' = 'csv');",
    )
    .expect("send");
    p.exp_string("Table 'people' created.").expect("created");
    p.exp_string("weir> ").expect("prompt");
    p.send_line("SELECT count(*) AS n, max(age) AS oldest FROM people;").expect("send");
    p.exp_string("| n | oldest |").expect("header");
    p.exp_string("| 5 | 41     |").expect("the final row");
    p.exp_regex(r"1 row in \d+\.\d{3}s \(\d+ change\(s\) applied\)").expect("row count");
    p.exp_string("weir> ").expect("prompt");
    p.send_line("SET 'sql-client.execution.result-mode' = 'changelog';").expect("send");
    p.exp_string("weir> ").expect("prompt");
    p.send_line("SELECT active, count(*) AS n FROM people WHERE active GROUP BY active;").expect("send");
    p.exp_string("| op | active | n |").expect("changelog header");
    p.exp_string("| +I | true   |").expect("an insert");
    p.exp_regex(r"1 row in \d+\.\d{3}s \(1 change\(s\) applied\)").expect("change count");
    p.exp_string("weir> ").expect("prompt");
    p.send_line("quit").expect("send");
    p.exp_eof().expect("exit");
}
