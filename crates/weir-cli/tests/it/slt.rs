//! The sql-tests suites, through the same runner as `weir test`.

use crate::repo;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_tests_pass() {
    let scratch = tempdir();
    let pg = crate::postgres::Postgres::for_sql_tests(&scratch);
    // Read by sql-tests/jdbc.slt; no other test of this process reads it.
    std::env::set_var("WEIR_TEST_POSTGRES_PORT", pg.port.to_string());
    let dir = repo().join("sql-tests");
    let mut passed = 0;
    let mut failed = Vec::new();
    let mut errors = 0;
    for file in weir_cli::slt::slt_files(&dir).expect("list sql-tests") {
        let summary = weir_cli::slt::run_file(&file).await.expect("run slt file");
        passed += summary.passed;
        if summary.failed > 0 {
            failed.push(format!("{}: {} failed", file.display(), summary.failed));
        }
        let text = std::fs::read_to_string(&file).expect("read slt file");
        errors += text.lines().filter(|l| l.starts_with("statement error")).count();
    }
    assert!(failed.is_empty(), "failing records:\n{}", failed.join("\n"));
    assert!(passed >= 40, "only {passed} records ran");
    assert!(errors * 5 >= passed, "{errors} error cases of {passed} records: fewer than a fifth");
}

#[test]
fn weir_test_command_runs_the_suites() {
    let scratch = tempdir();
    let pg = crate::postgres::Postgres::for_sql_tests(&scratch);
    let out = std::process::Command::new(crate::weir_bin())
        .args(["test", "sql-tests"])
        .env("WEIR_TEST_POSTGRES_PORT", pg.port.to_string())
        .current_dir(repo())
        .output()
        .expect("run weir test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "weir test failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.ends_with(" passed, 0 failed"), "unexpected summary: {last}");
}

#[test]
fn weir_test_fails_on_a_wrong_expectation() {
    let dir = tempdir();
    let file = dir.join("wrong.slt");
    std::fs::write(&file, "query I\nSELECT 1 + 1\n----\n3\n").expect("write slt");
    let out = std::process::Command::new(crate::weir_bin()).arg("test").arg(&file).output().expect("run weir test");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 passed, 1 failed"));
}

/// A scratch directory under the system's temp directory, removed when the test that made it
/// passes and kept (for a look) when it fails: a suite leaves gigabytes of state, files and
/// logs, which over many runs on one machine fill its disk. Bind it to a name: a temporary
/// (`tempdir().join(…)`) is removed at the end of its statement.
pub struct Scratch(std::path::PathBuf);

impl std::ops::Deref for Scratch {
    type Target = std::path::PathBuf;

    fn deref(&self) -> &std::path::PathBuf {
        &self.0
    }
}

impl AsRef<std::path::Path> for Scratch {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub fn tempdir() -> Scratch {
    let dir = std::env::temp_dir().join(format!(
        "weir-test-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    Scratch(dir)
}
