//! Functions of the embedding program declare whether they are deterministic (their
//! signature's volatility) and whether they have side effects; the exactly-once checks of
//! `EXPLAIN INSERT` and `INSERT` read both.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, Int64Array};
use datafusion::arrow::datatypes::DataType;
use datafusion::logical_expr::{create_udf, ColumnarValue, Volatility};
use weir::{Engine, Outcome};

/// `name(x)`: x is even, computed as `volatility` says.
fn udf(name: &str, volatility: Volatility) -> datafusion::logical_expr::ScalarUDF {
    create_udf(
        name,
        vec![DataType::Int64],
        DataType::Boolean,
        volatility,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let xs = arrays[0]
                .as_any()
                .downcast_ref::<Int64Array>()
                .cloned()
                .unwrap_or_else(|| Int64Array::from(Vec::<i64>::new()));
            let out: BooleanArray = xs.iter().map(|x| x.map(|x| x % 2 == 0)).collect();
            Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
        }),
    )
}

/// Checkpoints every second; `gen`, 1,000 Nexmark events' bids; `out`, a CSV file table.
async fn setup(engine: &Engine, dir: &std::path::Path) {
    engine
        .execute_all(&format!(
            "SET 'checkpoint.interval' = '1s';
             SET 'checkpoint.dir' = '{ck}';
             CREATE TABLE gen (auction BIGINT, price BIGINT) WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '1000');
             CREATE TABLE out (auction BIGINT, price BIGINT) WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv');",
            ck = dir.join("ck").display(),
            out = dir.join("out").display()
        ))
        .await
        .expect("setup");
}

async fn explain(engine: &Engine, sql: &str) -> String {
    let outcome = engine.execute_all(sql).await.expect("explain").pop().expect("an outcome");
    let Outcome::Table(batches) = outcome else { panic!("EXPLAIN gave no table") };
    crate::rows(&batches).join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_functions_are_checked_for_exactly_once() {
    let dir = crate::slt::tempdir();
    let engine = Engine::new();
    engine.register_function(udf("even", Volatility::Immutable), false).await;
    engine.register_function(udf("coin", Volatility::Volatile), false).await;
    engine.register_function(udf("notify", Volatility::Immutable), true).await;
    setup(&engine, &dir).await;
    // Deterministic and without effects: nothing to say.
    let plain = explain(&engine, "EXPLAIN INSERT INTO out SELECT auction, price FROM gen WHERE even(price)").await;
    assert!(plain.contains("Guarantee: exactly-once into 'out'"), "{plain}");
    assert!(!plain.contains("error:") && !plain.contains("warning:"), "{plain}");
    // Declared volatile: deciding a filter is refused.
    let volatile = explain(&engine, "EXPLAIN INSERT INTO out SELECT auction, price FROM gen WHERE coin(price)").await;
    assert!(volatile.contains("error: COIN() decides the filter coin(gen.price)"), "{volatile}");
    let refused = engine.execute_all("INSERT INTO out SELECT auction, price FROM gen WHERE coin(price)").await;
    let error = refused.err().expect("the INSERT was refused").to_string();
    assert!(error.contains("COIN() decides the filter"), "{error}");
    // Declared with side effects: a warning that they repeat on replay.
    let effects = explain(&engine, "EXPLAIN INSERT INTO out SELECT auction, price FROM gen WHERE notify(price)").await;
    assert!(
        effects.contains("warning: notify() has side effects: a replay after a failure calls it again"),
        "{effects}"
    );
    assert!(!effects.contains("error:"), "{effects}");
}

/// The built-in connectors, and `'connector' = 'socket'`: a source of the embedding program
/// that cannot rewind (what it delivered is gone), as it declares.
struct WithSocket;

impl weir::connector::ConnectorFactory for WithSocket {
    fn validate(&self, table: &weir::connector::TableDef) -> weir::Result<()> {
        match table.options.get("connector") {
            Some("socket") => Ok(()),
            _ => weir::connector::Connectors.validate(table),
        }
    }

    fn source(
        &self,
        table: &weir::connector::TableDef,
        projection: Option<Vec<usize>>,
        split: weir::connector::Split,
    ) -> weir::Result<Box<dyn weir::connector::Source>> {
        weir::connector::Connectors.source(table, projection, split)
    }

    fn sink(
        &self,
        table: &weir::connector::TableDef,
        schema: weir::arrow::datatypes::SchemaRef,
        split: weir::connector::Split,
    ) -> weir::Result<Box<dyn weir::connector::Sink>> {
        weir::connector::Connectors.sink(table, schema, split)
    }

    fn source_rewinds(&self, table: &weir::connector::TableDef) -> bool {
        table.options.get("connector") != Some("socket")
    }

    fn sink_guarantee(&self, table: &weir::connector::TableDef) -> weir::connector::SinkGuarantee {
        weir::connector::Connectors.sink_guarantee(table)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_cannot_rewind_is_refused_under_an_exactly_once_sink() {
    let dir = crate::slt::tempdir();
    let engine = Engine::with_connectors(Arc::new(WithSocket));
    setup(&engine, &dir).await;
    engine
        .execute_all("CREATE TABLE clicks (auction BIGINT, price BIGINT) WITH ('connector' = 'socket')")
        .await
        .expect("socket table");
    let found = explain(&engine, "EXPLAIN INSERT INTO out SELECT auction, price FROM clicks").await;
    assert!(
        found.contains("error: table 'clicks' is read by a source that cannot rewind to a checkpoint's position"),
        "{found}"
    );
    let refused = engine.execute_all("INSERT INTO out SELECT auction, price FROM clicks").await;
    let error = refused.err().expect("the INSERT was refused").to_string();
    assert!(error.contains("Land its records in a log first"), "{error}");
    // Read from a source that rewinds, the same job is exactly-once.
    let fixed = explain(&engine, "EXPLAIN INSERT INTO out SELECT auction, price FROM gen").await;
    assert!(fixed.contains("Guarantee: exactly-once into 'out'") && !fixed.contains("error:"), "{fixed}");
}
