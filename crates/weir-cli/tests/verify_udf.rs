//! `weir_verify` from an embedding program, with the program's own functions: a run of
//! verify's is this program again (`verify::child` first in `main`), so the functions are
//! there. A function declared deterministic whose results differ between runs is named as the
//! likely cause; a deterministic one passes. Its own binary: the program is the test.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{ArrayRef, BooleanArray, Int64Array};
use datafusion::arrow::datatypes::DataType;
use datafusion::logical_expr::{create_udf, ColumnarValue, ScalarUDF, Volatility};

/// `name(x)`, declared deterministic (`Immutable`): x is even, or, for `jitter`, a coin
/// tossed anew in each process (what the declaration hides).
fn udf(name: &'static str) -> ScalarUDF {
    let seed = (std::process::id() as i64).wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as i64);
    create_udf(
        name,
        vec![DataType::Int64],
        DataType::Boolean,
        Volatility::Immutable,
        Arc::new(move |args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let empty = Int64Array::from(Vec::<i64>::new());
            let xs = arrays[0].as_any().downcast_ref::<Int64Array>().unwrap_or(&empty);
            let keep = |x: i64| match name {
                "jitter" => ((x ^ seed).wrapping_mul(6364136223846793005) >> 33) & 1 == 0,
                _ => x % 2 == 0,
            };
            let out: BooleanArray = xs.iter().map(|x| x.map(keep)).collect();
            Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
        }),
    )
}

fn engine() -> weir::Engine {
    weir::Engine::new().with_function(udf("parity"), false).with_function(udf("jitter"), false)
}

/// A job keeping the bids `function` picks, into exactly-once CSV files, checkpointed.
fn job(dir: &std::path::Path, function: &str) -> std::path::PathBuf {
    let sql = format!(
        "SET 'parallelism' = '2';
SET 'checkpoint.interval' = '100ms';
SET 'checkpoint.dir' = '{ck}';
CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT)
  WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '30000', 'rate' = '20000');
CREATE TABLE picked (auction BIGINT, price BIGINT) WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv');
INSERT INTO picked SELECT auction, price FROM bid WHERE {function}(price);
",
        ck = dir.join(format!("ck-{function}")).display(),
        out = dir.join(format!("out-{function}")).display()
    );
    let path = dir.join(format!("{function}.sql"));
    std::fs::write(&path, sql).expect("write the job");
    path
}

async fn verify(file: &std::path::Path) -> (Result<bool, String>, String) {
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let said = lines.clone();
    let options = weir_verify::Options {
        crashes: 4,
        events: 10_000,
        keep: false,
        engines: Arc::new(engine),
        command: vec![std::env::current_exe().expect("this program").into_os_string()],
        say: Arc::new(move |line| said.lock().expect("lines").push(line.to_string())),
    };
    let verdict = weir_verify::verify(file, &options).await;
    let text = lines.lock().expect("lines").join("\n");
    println!("{text}");
    (verdict, text)
}

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        if let Some(code) = weir_verify::child(engine).await {
            return ExitCode::from(code as u8);
        }
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("weir-test-verify-udf-{}-{stamp}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("test dir");

        let (verdict, text) = verify(&job(&dir, "parity")).await;
        assert_eq!(verdict, Ok(true), "{text}");
        assert!(text.contains("table 'picked' (filesystem): exactly-once: 4 crashes in "), "{text}");

        let (verdict, text) = verify(&job(&dir, "jitter")).await;
        assert_eq!(verdict, Ok(false), "{text}");
        assert!(text.contains("table 'picked' (filesystem): NOT exactly-once"), "{text}");
        assert!(
            text.contains("likely cause: a function of the program, declared deterministic, whose results differ between runs: JITTER()"),
            "{text}"
        );
        assert!(!text.contains("PARITY()"), "{text}");
        // Neither job's own table was written.
        assert!(!dir.join("out-parity").exists() && !dir.join("out-jitter").exists());
        println!("verify_udf: 2 passed");
        ExitCode::SUCCESS
    })
}
