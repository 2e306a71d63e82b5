//! Kafka record headers as a `MAP<STRING, BYTES>` metadata column (Flink's `headers`), read
//! from records a plain producer wrote and written by Weir's sink; with `timestamp-type` and
//! `leader-epoch`. What Weir wrote is read back by rdkafka directly.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::kafka::Broker;

/// Each record of partition 0 of `topic`: its value and its headers as `name=value` (`name`
/// alone for a null value).
fn read_with_headers(bootstrap: &str, topic: &str, count: usize) -> Vec<(String, Vec<String>)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "weir-test-headers")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, Offset::Beginning).expect("partition");
    consumer.assign(&list).expect("assign");
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.len() < count && Instant::now() < deadline {
        let Some(m) = consumer.poll(Duration::from_millis(100)) else { continue };
        let m = m.expect("record");
        let headers = m.headers().map_or_else(Vec::new, |h| {
            h.iter()
                .map(|h| match h.value {
                    Some(v) => format!("{}={}", h.key, String::from_utf8_lossy(v)),
                    None => h.key.to_string(),
                })
                .collect()
        });
        out.push((String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(), headers));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_are_read_and_written_as_a_map() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    broker.create_topic("clicks", 1).await;
    broker.create_topic("tagged", 1).await;
    let producer: BaseProducer =
        ClientConfig::new().set("bootstrap.servers", &broker.bootstrap).create().expect("producer");
    let with = |pairs: &[(&str, Option<&str>)]| {
        pairs.iter().fold(OwnedHeaders::new(), |h, (k, v)| h.insert(Header { key: k, value: v.map(str::as_bytes) }))
    };
    let records = [
        // A name given twice keeps its last value, as in Flink; a null value is a null.
        ("{\"page\": \"p0\"}", Some(with(&[("trace", Some("t0")), ("flag", None), ("trace", Some("t0b"))]))),
        ("{\"page\": \"p1\"}", None),
        ("{\"page\": \"p2\"}", Some(with(&[("trace", Some("t2"))]))),
    ];
    for (value, headers) in records {
        let mut record = BaseRecord::<(), _>::to("clicks").partition(0).payload(value).timestamp(1672531200000);
        if let Some(h) = headers {
            record = record.headers(h);
        }
        producer.send(record).expect("send");
    }
    producer.flush(Duration::from_secs(10)).expect("flush");

    let engine = weir::Engine::new();
    let kafka = |topic: &str| {
        format!(
            "'connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{}', 'format' = 'json', \
             'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset'",
            broker.bootstrap
        )
    };
    crate::run(
        &engine,
        &format!(
            "SET 'parallelism' = '1';
             CREATE TABLE clicks (page STRING, headers MAP<STRING, BYTES> METADATA,
                                  kind STRING METADATA FROM 'timestamp-type' VIRTUAL,
                                  epoch INT METADATA FROM 'leader-epoch' VIRTUAL) WITH ({});
             CREATE TABLE tagged (page STRING, headers MAP<STRING, BYTES> METADATA) WITH ({})",
            kafka("clicks"),
            kafka("tagged")
        ),
    )
    .await;
    let rows = crate::rows(
        &engine
            .query(
                "SELECT page, CAST(headers['trace'] AS STRING), CARDINALITY(headers), headers['flag'] IS NULL, kind,
                        COALESCE(epoch, 0) >= 0
                 FROM clicks",
            )
            .await
            .expect("query")
            .collect()
            .await
            .expect("rows"),
    );
    assert_eq!(
        rows,
        ["p0|t0b|2|true|CreateTime|true", "p1|NULL|0|true|CreateTime|true", "p2|t2|1|true|CreateTime|true"]
    );

    // The sink writes each row's map as its record's headers; a NULL map writes none.
    crate::run(
        &engine,
        "INSERT INTO tagged SELECT page, CASE WHEN page <> 'p1' THEN headers END
         FROM clicks",
    )
    .await;
    let written = read_with_headers(&broker.bootstrap, "tagged", 3);
    let want: Vec<(String, Vec<String>)> = vec![
        ("{\"page\":\"p0\"}".into(), vec!["trace=t0b".into(), "flag".into()]),
        ("{\"page\":\"p1\"}".into(), vec![]),
        ("{\"page\":\"p2\"}".into(), vec!["trace=t2".into()]),
    ];
    assert_eq!(written, want);
}
