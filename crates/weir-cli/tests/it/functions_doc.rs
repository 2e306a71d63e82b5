//! `docs/functions.md` is true to the engine: each function it says runs ("Flink's rows" or
//! "yes") runs its probe, the first `…` of the third column, as `SELECT probe FROM people` (its
//! time attribute is `joined`);
//! each it says does not run and gives a probe for is refused.

/// (function, says it runs, probe) of each row of the document's tables.
fn entries(doc: &str) -> Vec<(String, bool, Option<String>)> {
    let mut out = Vec::new();
    for line in doc.lines().filter(|l| l.starts_with("| `")) {
        // A `\|` inside a cell is a literal bar, not a column break.
        let cells: Vec<String> =
            line.replace("\\|", "\u{1}").split('|').map(|c| c.trim().replace('\u{1}', "|")).collect();
        let [_, name, status, note, ..] = cells.as_slice() else { continue };
        let runs = match status.as_str() {
            "Flink's rows" | "yes" => true,
            "no" => false,
            _ => continue,
        };
        let probe = note.strip_prefix('`').and_then(|n| n.split('`').next()).map(str::to_string);
        out.push((name.clone(), runs, probe));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_function_the_document_says_runs_runs_its_probe() {
    let doc = std::fs::read_to_string(crate::repo().join("docs/functions.md")).expect("docs/functions.md");
    let entries = entries(&doc);
    assert!(entries.len() > 200, "only {} entries read", entries.len());
    let engine = weir::Engine::new();
    let people = crate::repo().join("sql-tests/data/people.csv");
    crate::run(
        &engine,
        &format!(
            "CREATE TABLE people (id INT, name STRING, age INT, joined TIMESTAMP(3), active BOOLEAN,
                                  WATERMARK FOR joined AS joined)
             WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            people.display()
        ),
    )
    .await;
    let mut wrong = Vec::new();
    for (name, runs, probe) in &entries {
        let Some(probe) = probe else {
            assert!(!runs, "{name}: the document says it runs but gives no probe");
            continue;
        };
        let sql = format!("SELECT {probe} FROM people");
        let result = match engine.query(&sql).await {
            Ok(stream) => stream.collect().await.map(|_| ()),
            Err(e) => Err(e),
        };
        match (runs, result) {
            (true, Err(e)) => wrong.push(format!("{name}: said to run, but {sql}: {e}")),
            (false, Ok(())) => wrong.push(format!("{name}: said not to run, but {sql} runs")),
            _ => {}
        }
    }
    assert!(wrong.is_empty(), "docs/functions.md is wrong about:\n{}", wrong.join("\n"));
}
