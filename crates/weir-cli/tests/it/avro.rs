//! The Avro formats against an independent encoder and decoder (fastavro, scripts/lake.sh)
//! and a stand-in for a Confluent schema registry (its REST API's few calls, served by the
//! same script: no registry can be installed here). Records fastavro wrote are read by
//! Weir, records Weir wrote are read by fastavro, writer schemas evolve, and a record whose
//! schema id the registry lacks is located, then skipped or failing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::iceberg::{run_err, run_ok, StandIn};
use crate::kafka::Broker;
use crate::repo;

/// The registry stand-in, killed on drop.
struct Registry {
    _server: StandIn,
    url: String,
}

impl Registry {
    fn start(dir: &Path, user_info: Option<&str>) -> Registry {
        let mut args = vec!["registry"];
        args.extend(user_info);
        let server = StandIn::start(dir, &args);
        Registry { url: server.url.clone(), _server: server }
    }
}

fn lake_lines(args: &[&str]) -> Vec<String> {
    let out = Command::new(repo().join("scripts/lake.sh")).args(args).output().expect("run scripts/lake.sh");
    assert!(out.status.success(), "lake.sh {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex")).collect()
}

/// fastavro's encoding of `rows` (JSON lines) with `schema`, framed with the id the registry
/// gives it under `subject` (`url` = `-`: plain).
fn encode(dir: &Path, url: &str, subject: &str, schema: &str, rows: &[String]) -> Vec<Vec<u8>> {
    let (s, r) = (dir.join(format!("{subject}.avsc")), dir.join(format!("{subject}.jsonl")));
    std::fs::write(&s, schema).expect("schema");
    std::fs::write(&r, rows.join("\n")).expect("rows");
    lake_lines(&["avro-encode", url, subject, s.to_str().expect("path"), r.to_str().expect("path")])
        .iter()
        .map(|h| unhex(h))
        .collect()
}

/// fastavro's reading of `values`: with the writer schemas from the registry at `source`, or
/// with the schema in the file `source`.
fn decode(dir: &Path, source: &str, values: &[Vec<u8>]) -> Vec<String> {
    let v = dir.join("values.hex");
    std::fs::write(&v, values.iter().map(|b| hex(b)).collect::<Vec<_>>().join("\n")).expect("values");
    let mut rows = lake_lines(&["avro-decode", source, v.to_str().expect("path")]);
    rows.sort();
    rows
}

fn produce(broker: &Broker, topic: &str, values: &[Vec<u8>]) {
    let producer: BaseProducer =
        ClientConfig::new().set("bootstrap.servers", &broker.bootstrap).create().expect("producer");
    for v in values {
        producer.send(BaseRecord::<(), _>::to(topic).partition(0).payload(v)).expect("send");
    }
    producer.flush(Duration::from_secs(10)).expect("flush");
}

/// Every value in partition 0 of `topic`, in order, read_committed.
fn consume(broker: &Broker, topic: &str) -> Vec<Vec<u8>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.bootstrap)
        .set("group.id", "weir-avro-reader")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    let (_, high) = consumer.fetch_watermarks(topic, 0, Duration::from_secs(10)).expect("watermarks");
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, Offset::Beginning).expect("partition");
    consumer.assign(&list).expect("assign");
    let mut values = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while (values.len() as i64) < high && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            values.push(m.payload().unwrap_or_default().to_vec());
        }
    }
    values
}

/// The schema Flink derives for (id BIGINT, name STRING, score DOUBLE), all nullable.
const TABLE_SCHEMA: &str = r#"{"type":"record","name":"record","namespace":"org.apache.flink.avro.generated","fields":[{"name":"id","type":["null","long"],"default":null},{"name":"name","type":["null","string"],"default":null},{"name":"score","type":["null","double"],"default":null}]}"#;
/// An earlier writer schema, without `score`, named by its producer (not as Flink names it).
const V1: &str = r#"{"type":"record","name":"Customer","namespace":"com.acme","fields":[{"name":"id","type":"long"},{"name":"name","type":"string"}]}"#;

fn topic_table(name: &str, topic: &str, broker: &Broker, format: &str) -> String {
    format!(
        "CREATE TABLE {name} (id BIGINT, name STRING, score DOUBLE) WITH ('connector' = 'kafka', 'topic' = '{topic}',
  'properties.bootstrap.servers' = '{}', 'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset',
  {format});
",
        broker.bootstrap
    )
}

fn job(dir: &Path, text: &str) -> PathBuf {
    let sql = dir.join(format!("job-{}.sql", text.len()));
    std::fs::write(&sql, text).expect("sql");
    sql
}

#[tokio::test(flavor = "multi_thread")]
async fn avro_confluent_records_round_trip_through_a_registry_with_evolution() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    broker.create_topic("in", 1).await;
    broker.create_topic("out", 1).await;
    let registry = Registry::start(&dir, Some("weir:secret"));
    // The stand-in asks for credentials: fastavro's side registers through a URL with them.
    let authed = registry.url.replace("http://", "http://weir:secret@");
    let v1: Vec<String> = (1..=150).map(|i| format!(r#"{{"id": {i}, "name": "n{i}"}}"#)).collect();
    let v2: Vec<String> = (151..=300).map(|i| format!(r#"{{"id": {i}, "name": "n{i}", "score": {i}.5}}"#)).collect();
    let mut values = encode(&dir, &authed, "in-value", V1, &v1);
    values.extend(encode(&dir, &authed, "in-value", TABLE_SCHEMA, &v2));
    // A record framed with a schema id the registry does not have.
    let mut unknown = vec![0u8, 0, 0, 0, 99];
    unknown.extend_from_slice(&values[0][5..]);
    values.insert(100, unknown);
    produce(&broker, "in", &values);

    let auth = |prefix: &str| {
        format!(
            "'{prefix}url' = '{}', '{prefix}basic-auth.credentials-source' = 'USER_INFO', \
             '{prefix}basic-auth.user-info' = 'weir:secret'",
            registry.url
        )
    };
    let source_format = format!("'value.format' = 'avro-confluent', {}", auth("value.avro-confluent."));
    let sink_format = format!("'format' = 'avro-confluent', {}", auth("avro-confluent."));
    let text = |skip: bool| {
        format!(
            "{}{}INSERT INTO dst SELECT id, name, score FROM src;\n",
            topic_table(
                "src",
                "in",
                &broker,
                &format!("{source_format}{}", if skip { ", 'format.ignore-parse-errors' = 'true'" } else { "" })
            ),
            topic_table("dst", "out", &broker, &sink_format)
        )
    };
    // Failing on the unknown schema id: located.
    let err = run_err(&job(&dir, &text(false)));
    assert!(
        err.contains("malformed avro-confluent record in topic 'in' partition 0 at offset 100: schema id 99 is not in the schema registry"),
        "{err}"
    );
    assert!(consume(&broker, "out").is_empty(), "nothing committed by the failed run");
    // Skipping it: counted, the rest read.
    let out = run_ok(&job(&dir, &text(true)));
    assert!(out.contains("300 rows written") && out.contains("1 malformed record(s) skipped"), "{out}");
    let written = consume(&broker, "out");
    assert_eq!(written.len(), 300);
    let got = decode(&dir, &registry.url.replace("http://", "http://weir:secret@"), &written);
    let mut want: Vec<String> = (1..=300)
        .map(|i| {
            let score = if i <= 150 { "null".to_string() } else { format!("{i}.5") };
            format!(r#"{{"id": {i}, "name": "n{i}", "score": {score}}}"#)
        })
        .collect();
    want.sort();
    assert_eq!(got, want);
    // Weir registered the table's schema under the sink topic's subject.
    assert!(written.iter().all(|v| v[0] == 0 && v[1..5] == written[0][1..5]), "one framing id");
}

#[tokio::test(flavor = "multi_thread")]
async fn plain_avro_records_are_flinks_encoding_of_the_table() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    broker.create_topic("in", 1).await;
    broker.create_topic("out", 1).await;
    let rows: Vec<String> = (1..=100)
        .map(|i| match i % 10 {
            0 => format!(r#"{{"id": {i}, "name": null, "score": null}}"#),
            _ => format!(r#"{{"id": {i}, "name": "é{i}", "score": {i}.25}}"#),
        })
        .collect();
    produce(&broker, "in", &encode(&dir, "-", "plain", TABLE_SCHEMA, &rows));
    let text = format!(
        "{}{}INSERT INTO dst SELECT id, name, score FROM src;\n",
        topic_table("src", "in", &broker, "'format' = 'avro'"),
        topic_table("dst", "out", &broker, "'format' = 'avro'")
    );
    run_ok(&job(&dir, &text));
    let written = consume(&broker, "out");
    let schema = dir.join("table.avsc");
    std::fs::write(&schema, TABLE_SCHEMA).expect("schema");
    let got = decode(&dir, schema.to_str().expect("path"), &written);
    let mut want: Vec<String> = (1..=100)
        .map(|i| match i % 10 {
            0 => format!(r#"{{"id": {i}, "name": null, "score": null}}"#),
            _ => format!(r#"{{"id": {i}, "name": "\u00e9{i}", "score": {i}.25}}"#),
        })
        .collect();
    want.sort();
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread")]
async fn registry_errors_name_the_registry_and_subject() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    broker.create_topic("in", 1).await;
    broker.create_topic("out", 1).await;
    produce(
        &broker,
        "in",
        &encode(&dir, "-", "plain", TABLE_SCHEMA, &[r#"{"id": 1, "name": null, "score": null}"#.to_string()]),
    );
    let registry = Registry::start(&dir, None);
    let sink = |url: &str, extra: &str| {
        format!(
            "{}{}INSERT INTO dst SELECT id, name, score FROM src;\n",
            topic_table("src", "in", &broker, "'format' = 'avro'"),
            topic_table(
                "dst",
                "out",
                &broker,
                &format!("'format' = 'avro-confluent', 'avro-confluent.url' = '{url}'{extra}")
            )
        )
    };
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let err = run_err(&job(&dir, &sink(&format!("http://127.0.0.1:{closed}"), "")));
    assert!(err.contains(&format!("the schema registry at http://127.0.0.1:{closed} cannot be reached")), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let err =
        run_err(&job(&dir, &sink(&registry.url, ", 'avro-confluent.properties.auto.register.schemas' = 'false'")));
    assert!(err.contains("has no subject 'out-value'"), "{err}");
    assert!(consume(&broker, "out").is_empty());
}

/// Debezium's Avro envelope as its connector registers it: records named `Envelope` and
/// `Value` (`after` naming `Value` again), a `source` block and `ts_ms` that the table does
/// not read.
const DEBEZIUM: &str = r#"{"type":"record","name":"Envelope","namespace":"dbserver1.inventory.customers","fields":[
 {"name":"before","type":["null",{"type":"record","name":"Value","fields":[{"name":"id","type":"long"},{"name":"name","type":["null","string"],"default":null}]}],"default":null},
 {"name":"after","type":["null","Value"],"default":null},
 {"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[{"name":"db","type":"string"},{"name":"lsn","type":["null","long"],"default":null}]}},
 {"name":"op","type":"string"},
 {"name":"ts_ms","type":["null","long"],"default":null}]}"#;

/// Change events fastavro wrote with Debezium's schema are read as a changelog (an update as
/// its pair, a tombstone as nothing, an update without its old row located, then skipped and
/// counted), and written by Weir as Flink writes `debezium-avro-confluent`: `+I`/`+U` as `c`
/// with `after`, `-U`/`-D` as `d` with `before`, read back by fastavro in order.
#[tokio::test(flavor = "multi_thread")]
async fn debezium_avro_confluent_change_events_round_trip() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    broker.create_topic("in", 1).await;
    broker.create_topic("out", 1).await;
    let registry = Registry::start(&dir, Some("weir:secret"));
    let authed = registry.url.replace("http://", "http://weir:secret@");
    let event = |op: &str, before: &str, after: &str| {
        format!(
            r#"{{"before": {before}, "after": {after}, "source": {{"db": "inventory", "lsn": 7}}, "op": "{op}", "ts_ms": 1}}"#
        )
    };
    let events = [
        event("c", "null", r#"{"id": 1, "name": "a"}"#),
        event("c", "null", r#"{"id": 2, "name": "b"}"#),
        event("u", r#"{"id": 1, "name": "a"}"#, r#"{"id": 1, "name": "a2"}"#),
        event("d", r#"{"id": 2, "name": "b"}"#, "null"),
        event("r", "null", r#"{"id": 3, "name": null}"#),
        // An update without its old row (a table without REPLICA IDENTITY FULL).
        event("u", "null", r#"{"id": 3, "name": "c"}"#),
    ];
    let mut values = encode(&dir, &authed, "in-value", DEBEZIUM, &events);
    values.insert(5, Vec::new()); // a tombstone, at offset 5
    produce(&broker, "in", &values);
    let table = |name: &str, topic: &str, extra: &str| {
        format!(
            "CREATE TABLE {name} (id BIGINT, name STRING) WITH ('connector' = 'kafka', 'topic' = '{topic}',
  'properties.bootstrap.servers' = '{}', 'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset',
  'format' = 'debezium-avro-confluent', 'debezium-avro-confluent.url' = '{}',
  'debezium-avro-confluent.bearer-auth.token' = 'secret'{extra});
",
            broker.bootstrap, registry.url
        )
    };
    let text = |skip: &str| {
        format!("{}{}INSERT INTO dst SELECT id, name FROM src;\n", table("src", "in", skip), table("dst", "out", ""))
    };
    let err = run_err(&job(&dir, &text("")));
    assert!(
        err.contains(
            "malformed debezium-avro-confluent record in topic 'in' partition 0 at offset 6: the event has no \
             'before' row: an update needs its old row"
        ),
        "{err}"
    );
    let out = run_ok(&job(&dir, &text(", 'format.ignore-parse-errors' = 'true'")));
    assert!(out.contains("1 malformed record(s) skipped"), "{out}");
    let written = consume(&broker, "out");
    let v = dir.join("out.hex");
    std::fs::write(&v, written.iter().map(|b| hex(b)).collect::<Vec<_>>().join("\n")).expect("values");
    let got = lake_lines(&["avro-decode", &authed, v.to_str().expect("path")]);
    let row = |id: u32, name: &str| format!(r#"{{"id": {id}, "name": {name}}}"#);
    let c = |r: String| format!(r#"{{"after": {r}, "before": null, "op": "c"}}"#);
    let d = |r: String| format!(r#"{{"after": null, "before": {r}, "op": "d"}}"#);
    let want = vec![
        c(row(1, "\"a\"")),
        c(row(2, "\"b\"")),
        d(row(1, "\"a\"")),
        c(row(1, "\"a2\"")),
        d(row(2, "\"b\"")),
        c(row(3, "null")),
    ];
    assert_eq!(got, want);
}

/// Avro object container files in the filesystem connector: files fastavro wrote (a record
/// named by its producer, a column the table does not read, columns in another order,
/// deflate-compressed and not) are read; the files Weir writes are read by fastavro, with
/// Flink's record name and default codec. A file without a table column, and a codec Weir
/// does not write, are one-line errors.
#[test]
fn avro_files_round_trip_with_fastavro() {
    let dir = crate::slt::tempdir();
    let input = dir.join("in");
    std::fs::create_dir_all(&input).expect("dir");
    let write = |name: &str, schema: &str, rows: &[String], codec: &str| {
        let (s, r) = (dir.join(format!("{name}.avsc")), dir.join(format!("{name}.jsonl")));
        std::fs::write(&s, schema).expect("schema");
        std::fs::write(&r, rows.join("\n")).expect("rows");
        let out = input.join(format!("{name}.avro"));
        lake_lines(&["avro-file-write", path(&s), path(&r), path(&out), codec]);
    };
    let first = r#"{"type":"record","name":"Order","namespace":"com.acme","fields":[{"name":"id","type":"long"},{"name":"note","type":"string"},{"name":"name","type":["null","string"]}]}"#;
    let second = r#"{"type":"record","name":"Order","fields":[{"name":"name","type":["null","string"]},{"name":"id","type":"long"}]}"#;
    let rows1: Vec<String> =
        (1..=1000).map(|i| format!(r#"{{"id": {i}, "note": "x", "name": {}}}"#, name_json(i))).collect();
    let rows2: Vec<String> = (1001..=1500).map(|i| format!(r#"{{"id": {i}, "name": {}}}"#, name_json(i))).collect();
    write("part-0", first, &rows1, "deflate");
    write("part-1", second, &rows2, "null");
    let out = dir.join("out");
    let text = format!(
        "CREATE TABLE src (id BIGINT, name STRING) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'avro');
CREATE TABLE dst (id BIGINT, name STRING) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'avro');
CREATE TABLE typed (id BIGINT, ts TIMESTAMP(3), amount DECIMAL(10, 2)) WITH ('connector' = 'filesystem',
  'path' = '{}', 'format' = 'avro', 'avro.codec' = 'deflate');
INSERT INTO dst SELECT id, name FROM src;
INSERT INTO typed SELECT id, TO_TIMESTAMP(CONCAT('2026-01-01 00:00:0', CAST(id AS STRING))),
  CAST(id AS DECIMAL(10, 2)) / 4 FROM src WHERE id <= 3;
",
        input.display(),
        out.display(),
        dir.join("typed").display()
    );
    run_ok(&job(&dir, &text));
    let read: serde_json::Value =
        serde_json::from_str(&lake_lines(&["avro-file-read", path(&out)]).join("")).expect("json");
    let mut want: Vec<String> = (1..=1500).map(|i| format!(r#"{{"id": {i}, "name": {}}}"#, name_json(i))).collect();
    want.sort();
    let got: Vec<String> =
        read["rows"].as_array().expect("rows").iter().map(|r| r.as_str().unwrap_or_default().to_string()).collect();
    assert_eq!(got, want);
    for f in read["files"].as_array().expect("files") {
        assert_eq!(f["codec"], "snappy", "Flink's default codec: {f}");
        assert_eq!(f["schema"], "org.apache.flink.avro.generated.record", "Flink's record name: {f}");
    }

    // Logical types as the table's schema gives them (timestamp-millis, bytes decimal).
    let typed: serde_json::Value =
        serde_json::from_str(&lake_lines(&["avro-file-read", path(&dir.join("typed"))]).join("")).expect("json");
    assert_eq!(
        typed["rows"],
        serde_json::json!([
            r#"{"amount": "0.25", "id": 1, "ts": "2026-01-01 00:00:01+00:00"}"#,
            r#"{"amount": "0.50", "id": 2, "ts": "2026-01-01 00:00:02+00:00"}"#,
            r#"{"amount": "0.75", "id": 3, "ts": "2026-01-01 00:00:03+00:00"}"#,
        ])
    );
    assert_eq!(typed["files"][0]["codec"], "deflate");

    let missing = format!(
        "CREATE TABLE src (id BIGINT, price DOUBLE) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'avro');
CREATE TABLE dst (id BIGINT) WITH ('connector' = 'print');
INSERT INTO dst SELECT id FROM src WHERE price > 0;
",
        input.display()
    );
    let err = run_err(&job(&dir, &missing));
    assert!(err.contains("has no column 'price'"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let codec = format!(
        "CREATE TABLE dst (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'avro',\n  'avro.codec' = 'lzo');
",
        out.display()
    );
    let err = run_err(&job(&dir, &codec));
    assert!(err.contains("'avro.codec' = 'lzo' is not a codec Weir writes") && err.contains("2:3"), "{err}");
}

fn name_json(i: u32) -> String {
    if i % 7 == 0 {
        "null".into()
    } else {
        format!("\"n{i}\"")
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}
