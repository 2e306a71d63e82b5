//! Kafka with TLS and SASL on every connection, through the test front
//! ([`crate::kafka_front`]): the exactly-once job killed in every phase of its commits (so
//! that restarts commit and fence through Weir's own client), and the refusals a user sees
//! for wrong credentials, an unknown CA, a certificate for another host, and a missing client
//! certificate, each on one line and without the password.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use weir::ErrorKind;
use weir_connectors::kafka::client::Cluster;
use weir_connectors::kafka::recovery::open_transactions;

use crate::kafka::{write_sql, Broker};
use crate::kafka_front::{Demands, Front};
use crate::kills::assert_same_rows;
use crate::weir_bin;

pub(crate) const PASSWORD: &str = "s3cret-pa55";

pub(crate) fn sasl_ssl(client_certificate: bool) -> Demands {
    Demands {
        tls: true,
        client_certificate,
        mechanisms: vec!["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
        users: vec![("weir", PASSWORD)],
        versions: Vec::new(),
    }
}

/// The windowed job of `crate::kafka::job`, with both tables reaching the cluster through
/// `front` with SCRAM-SHA-512: the source with librdkafka's names, the sink with a Java
/// client's `sasl.jaas.config`, as a Flink user writes it.
fn secured_job(front: &Front, out: &str, checkpoints: &Path) -> String {
    let ca = front.certs.join("ca.pem");
    format!(
        "SET 'parallelism' = '2';
SET 'checkpoint.interval' = '100ms';
SET 'checkpoint.dir' = '{ck}';
SET 'restart.attempts' = '0';
CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3),
    WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND)
  WITH ('connector' = 'kafka', 'topic' = 'bids', {source}, 'format' = 'json', 'key.fields' = 'auction',
        'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset',
        'scan.records-per-second' = '700');
CREATE TABLE {out} (auction BIGINT, window_start TIMESTAMP(3), cnt BIGINT, total BIGINT)
  WITH ('connector' = 'kafka', 'topic' = '{out}', 'format' = 'json', 'key.fields' = 'auction',
        'properties.bootstrap.servers' = '{bootstrap}', 'properties.security.protocol' = 'SASL_SSL',
        'properties.sasl.mechanism' = 'SCRAM-SHA-512', 'properties.ssl.ca.location' = '{ca}',
        'properties.sasl.jaas.config' = 'org.apache.kafka.common.security.scram.ScramLoginModule required username=\"weir\" password=\"{PASSWORD}\";',
        'sink.delivery-guarantee' = 'exactly-once', 'sink.transactional-id-prefix' = 'weir-{out}');
INSERT INTO {out}
SELECT auction, window_start, COUNT(*), SUM(price)
FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(date_time), INTERVAL '1' SECOND))
GROUP BY auction, window_start, window_end;
",
        ck = checkpoints.display(),
        source = front.properties("SCRAM-SHA-512", "weir", PASSWORD),
        bootstrap = front.bootstrap,
        ca = ca.display(),
    )
}

/// Exactly-once over SASL_SSL, killed with SIGKILL at least 3 times in each phase of the
/// two-phase commit: every restart commits what its checkpoint pre-committed and fences
/// what later attempts left open, through the front. A `read_committed` reader of the
/// broker itself then sees exactly the rows of a plain run that was never killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_over_sasl_ssl_under_sigkill() {
    let (dir, broker, want) = crate::kafka::with_reference().await;
    let front = Front::start(&broker.bootstrap, &dir, sasl_ssl(false));
    let sql = write_sql(&dir, "job.sql", secured_job(&front, "out", &dir.join("checkpoints")));
    let kills = crate::kills::kill_in_every_phase(&sql, &dir.join("faults"), "kafka", 20);
    let out = Command::new(weir_bin()).arg("run").arg(&sql).output().expect("weir run");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(!log.contains(PASSWORD), "the password was printed: {log}");
    assert_same_rows(&broker.read_committed("out"), &want);
    assert!(kills.values().all(|k| *k >= 3), "kills per phase: {kills:?}");
}

fn cluster(front: &Front, bootstrap: &str, extra: &[(&str, &str)]) -> weir::Result<Cluster> {
    let mut config = rdkafka::ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("security.protocol", "SASL_SSL")
        .set("sasl.mechanism", "SCRAM-SHA-256")
        .set("sasl.username", "weir")
        .set("sasl.password", PASSWORD)
        .set("ssl.ca.location", front.certs.join("ca.pem").display().to_string());
    for (k, v) in extra {
        config.set(*k, *v);
    }
    Cluster::from_config(&config, "test")
}

/// Weir's own requests (those of transaction recovery) with each mechanism, and the errors of
/// each setting a user can get wrong: of kind `User` (not retried), one line, naming what
/// failed, never showing the password.
#[test]
fn recovery_requests_authenticate_and_refuse_clearly() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    let front = Front::start(&broker.bootstrap, &dir, sasl_ssl(false));
    let timeout = Duration::from_secs(10);
    for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let c = cluster(&front, &front.bootstrap, &[("sasl.mechanism", mechanism)]).expect("settings");
        let open = open_transactions(&c, timeout).unwrap_or_else(|e| panic!("{mechanism}: {e}"));
        assert_eq!(open, Some(Vec::new()), "{mechanism}: no transaction is open");
    }
    let refused = |extra: &[(&str, &str)], bootstrap: &str| -> String {
        let c = cluster(&front, bootstrap, extra).expect("settings");
        let e = open_transactions(&c, timeout).expect_err("refused");
        assert_eq!(e.kind, ErrorKind::User, "not retried: {e}");
        assert!(!e.message.contains('\n') && !e.message.contains(PASSWORD), "{}", e.message);
        e.message
    };
    let e = refused(&[("sasl.password", "wrong")], &front.bootstrap);
    assert!(
        e.contains("SASL SCRAM-SHA-256 authentication as 'weir' failed") && e.contains("invalid credentials"),
        "{e}"
    );
    assert!(!e.contains("wrong"), "{e}");
    let e = refused(&[("sasl.mechanism", "PLAIN"), ("sasl.username", "nobody")], &front.bootstrap);
    assert!(e.contains("SASL PLAIN authentication as 'nobody' failed"), "{e}");
    // A CA that did not sign the broker's certificate: the client's own.
    let other_ca = front.certs.join("client.pem").display().to_string();
    let e = refused(&[("ssl.ca.location", &other_ca)], &front.bootstrap);
    assert!(e.contains("TLS handshake failed") && e.contains("UnknownIssuer"), "{e}");
    // The certificate is for localhost, not for 127.0.0.1; with the check off, it is accepted.
    let by_address = format!("127.0.0.1:{}", front.port);
    let e = refused(&[], &by_address);
    assert!(e.contains("TLS handshake failed") && e.contains("not valid for name \"127.0.0.1\""), "{e}");
    let c = cluster(&front, &by_address, &[("ssl.endpoint.identification.algorithm", "none")]).expect("settings");
    assert_eq!(open_transactions(&c, timeout).expect("no host name check"), Some(Vec::new()));
    // Settings that cannot work are refused before any connection, naming the property.
    let e = cluster(&front, &front.bootstrap, &[("sasl.mechanism", "GSSAPI")]).expect_err("GSSAPI");
    assert!(e.message.contains("'properties.sasl.mechanism'") && e.message.contains("GSSAPI"), "{}", e.message);
}

/// A listener that demands a client certificate: refused without one, served with the one
/// the CA signed (`ssl.certificate.location`, `ssl.key.location`).
#[test]
fn a_client_certificate_is_presented_when_demanded() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    let front = Front::start(&broker.bootstrap, &dir, sasl_ssl(true));
    let timeout = Duration::from_secs(10);
    let c = cluster(&front, &front.bootstrap, &[]).expect("settings");
    let e = open_transactions(&c, timeout).expect_err("no client certificate");
    assert!(e.message.contains("Kafka broker localhost:"), "{e}");
    let (cert, key) = (front.certs.join("client.pem"), front.certs.join("client.key"));
    let c = cluster(
        &front,
        &front.bootstrap,
        &[("ssl.certificate.location", &cert.display().to_string()), ("ssl.key.location", &key.display().to_string())],
    )
    .expect("settings");
    assert_eq!(open_transactions(&c, timeout).expect("with a client certificate"), Some(Vec::new()));
}

/// A job whose Kafka password is wrong, whose CA did not sign the broker's certificate, or
/// that reaches the broker by a name its certificate is not for, fails at once with one line
/// naming the table and the cause, without the password; one whose settings cannot work is
/// refused at `CREATE TABLE` with the option's position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_with_wrong_credentials_or_certificates_fails_with_one_line() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    broker.create_topic("bids", 1).await;
    broker.create_topic("out", 1).await;
    let front = Front::start(&broker.bootstrap, &dir, sasl_ssl(false));
    let job = secured_job(&front, "out", &dir.join("checkpoints"));
    let ca = front.certs.join("ca.pem").display().to_string();
    let other_ca = front.certs.join("client.pem").display().to_string();
    let cases = [
        ("password", job.replace(PASSWORD, "not-the-password"), "SASL authentication error"),
        ("ca", job.replace(&ca, &other_ca), "invalid peer certificate: UnknownIssuer"),
        (
            "hostname",
            job.replace(&front.bootstrap, &format!("127.0.0.1:{}", front.port)),
            "not valid for name \"127.0.0.1\"",
        ),
    ];
    for (case, sql, cause) in cases {
        let sql = write_sql(&dir, &format!("{case}.sql"), sql);
        let out = Command::new(weir_bin()).arg("run").arg(&sql).output().expect("weir run");
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{case}: ran: {log}");
        assert_eq!(log.trim().lines().count(), 1, "{case}: one line: {log}");
        assert!(log.contains("table 'bids': cannot read the metadata of Kafka topic 'bids'"), "{case}: {log}");
        assert!(log.contains(cause), "{case}: {log}");
        assert!(
            !log.contains(PASSWORD) && !log.contains("not-the-password"),
            "{case}: the password was printed: {log}"
        );
        println!("{case}: {log}");
    }

    // EXPLAIN shows the tables, never their secrets.
    let explain =
        secured_job(&front, "out", &dir.join("checkpoints")).replace("INSERT INTO out", "EXPLAIN INSERT INTO out");
    let out =
        Command::new(weir_bin()).arg("run").arg(write_sql(&dir, "explain.sql", explain)).output().expect("weir run");
    let shown = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && shown.contains("out"), "{shown}");
    assert!(!shown.contains(PASSWORD), "EXPLAIN printed the password: {shown}");

    let bad = "CREATE TABLE t (a INT) WITH ('connector' = 'kafka', 'topic' = 't',
        'properties.bootstrap.servers' = 'localhost:1', 'format' = 'json',
        'properties.sasl.jaas.config' = 'org.apache.kafka.common.security.plain.PlainLoginModule required;');";
    let sql = write_sql(&dir, "bad.sql", bad.to_string());
    let out = Command::new(weir_bin()).arg("run").arg(&sql).output().expect("weir run");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(log.contains("'properties.sasl.jaas.config' needs username") && log.contains("bad.sql:3:"), "{log}");
}

/// Weir's own requests at whatever versions the broker speaks: here a broker that speaks only
/// the oldest ones each request can use (FindCoordinator v1, InitProducerId v0, EndTxn v0,
/// Metadata v1, ListTransactions v0, ApiVersions v0-v2), where the test broker itself answers
/// FindCoordinator v4 and EndTxn v3 (flexible versions, batched coordinator lookups). The
/// sink's recovery commits and fences there as well.
#[test]
fn recovery_requests_speak_an_old_brokers_versions() {
    use kafka_protocol::messages::ApiKey;
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    let old = vec![
        (ApiKey::FindCoordinator, 0, 1),
        (ApiKey::InitProducerId, 0, 0),
        (ApiKey::EndTxn, 0, 0),
        (ApiKey::Metadata, 0, 1),
        (ApiKey::ListTransactions, 0, 0),
        (ApiKey::ApiVersions, 0, 2),
    ];
    let front = Front::start(&broker.bootstrap, &dir, Demands { versions: old, ..sasl_ssl(false) });
    let c = cluster(&front, &front.bootstrap, &[]).expect("settings");
    let timeout = Duration::from_secs(10);
    let (producer, epoch) = weir_connectors::kafka::txn::init_producer_id(&c, "old-1", timeout, timeout).expect("init");
    assert_eq!(epoch, 0, "a fresh id");
    let (again, epoch) = weir_connectors::kafka::txn::init_producer_id(&c, "old-1", timeout, timeout).expect("init");
    assert_eq!((again, epoch), (producer, 1), "initialized again: the same producer, fenced by a new epoch");
    assert_eq!(open_transactions(&c, timeout).expect("listed"), Some(Vec::new()));
    // Committing a transaction that was never begun under the current epoch is answered, not
    // failed: the broker says the producer moved on or the state is wrong.
    let txn = weir_connectors::kafka::txn::PreCommitted {
        transactional_id: "old-1".into(),
        producer_id: producer,
        producer_epoch: 0,
    };
    let outcome = weir_connectors::kafka::txn::commit(&c, &txn, timeout).expect("answered");
    assert!(matches!(outcome, weir_connectors::kafka::txn::Outcome::Superseded(_)), "{outcome:?}");
}
