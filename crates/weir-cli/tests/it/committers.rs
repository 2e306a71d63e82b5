//! The two-phase-commit contract (`weir_connectors::committer_contract`) run by the Kafka
//! and PostgreSQL committers against real servers: what they make visible, and when, through
//! given-up checkpoints, crashes between a checkpoint's completion and its commit, repeated
//! restores, restores at another parallelism and the final pre-commit.

use std::sync::Arc;

use weir::connector::{Options, Split, TableDef};
use weir_connectors::committer_contract::{run, schema, Harness};
use weir_connectors::jdbc::JdbcSink;
use weir_connectors::kafka::KafkaSink;

use crate::kafka::Broker;
use crate::postgres::Postgres;

const CASES: [&str; 6] = ["visible", "given_up", "restore", "rescale", "final", "foreign"];

fn table(name: &str, options: &[(&str, &str)]) -> TableDef {
    let mut o = Options::default();
    for (k, v) in options {
        o.insert(k.to_string(), v.to_string(), None);
    }
    TableDef::new(name, schema(), o)
}

struct Topic {
    broker: Arc<Broker>,
    topic: String,
}

impl Harness for Topic {
    type C = KafkaSink;

    fn make(&self, task: usize, count: usize) -> KafkaSink {
        let t = table(
            &self.topic,
            &[
                ("connector", "kafka"),
                ("topic", &self.topic),
                ("properties.bootstrap.servers", &self.broker.bootstrap),
                ("format", "json"),
                ("sink.delivery-guarantee", "exactly-once"),
                ("sink.transactional-id-prefix", &format!("contract-{}", self.topic)),
            ],
        );
        KafkaSink::new(&t, schema(), Split { index: task, count }).expect("a Kafka sink")
    }

    /// What a `read_committed` consumer sees.
    fn published(&self) -> Vec<i64> {
        let mut values: Vec<i64> = self
            .broker
            .read_committed(&self.topic)
            .iter()
            .map(|v| v.trim_start_matches("{\"v\":").trim_end_matches('}').parse().expect("a {\"v\":n} record"))
            .collect();
        values.sort();
        values
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kafka_committer_keeps_the_contract() {
    let dir = crate::slt::tempdir();
    let broker = Arc::new(Broker::start(&dir));
    for case in CASES {
        broker.create_topic(&format!("contract_{case}"), 1).await;
    }
    run(|case| Topic { broker: broker.clone(), topic: format!("contract_{case}") }).await;
}

struct Table {
    pg: Arc<Postgres>,
    name: String,
}

impl Harness for Table {
    type C = JdbcSink;

    fn make(&self, task: usize, count: usize) -> JdbcSink {
        let t = table(
            &self.name,
            &[
                ("connector", "jdbc"),
                ("url", &self.pg.url()),
                ("table-name", &self.name),
                ("username", "weir"),
                ("sink.delivery-guarantee", "exactly-once"),
                ("sink.transactional-id-prefix", &format!("contract-{}", self.name)),
            ],
        );
        JdbcSink::new(&t, schema(), Split { index: task, count }).expect("a PostgreSQL sink")
    }

    /// What a reader sees (committed rows only).
    fn published(&self) -> Vec<i64> {
        let rows = self.pg.psql(&format!("SELECT v FROM {} ORDER BY v", self.name));
        rows.iter().map(|r| r.parse().expect("a bigint")).collect()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_postgres_committer_keeps_the_contract() {
    let dir = crate::slt::tempdir();
    let pg = Arc::new(Postgres::start(&dir));
    for case in CASES {
        pg.psql(&format!("CREATE TABLE contract_{case} (v bigint NOT NULL)"));
    }
    run(|case| Table { pg: pg.clone(), name: format!("contract_{case}") }).await;
}
