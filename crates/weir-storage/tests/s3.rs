//! The object store storage against an S3-compatible server on loopback (moto's server mode,
//! started by `scripts/object-store.sh`): every call of [`Storage`], a multipart upload, the
//! conditional create two instances race on, and secrets kept out of errors.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use weir_storage::Storage;

mod common;

struct Server {
    pid: String,
    endpoint: String,
}

impl Server {
    fn start() -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/object-store.sh");
        let out = Command::new(script).args(["start", &port.to_string(), "weir"]).output().expect("start the store");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Server {
            pid: String::from_utf8_lossy(&out.stdout).trim().to_string(),
            endpoint: format!("http://127.0.0.1:{port}"),
        }
    }

    fn settings(&self) -> BTreeMap<String, String> {
        [
            ("s3.endpoint", self.endpoint.as_str()),
            ("s3.path.style.access", "true"),
            ("s3.region", "us-east-1"),
            ("s3.access-key", "weir"),
            ("s3.secret-key", "very-secret-value"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(&self.pid).status();
    }
}

#[test]
fn every_call_works_against_an_s3_compatible_server() {
    let server = Server::start();
    let root = weir_storage::open("s3://weir/jobs/q1", &server.settings()).expect("open");
    assert_eq!(root.describe(), "s3://weir/jobs/q1");
    common::every_call_works(root.as_ref());
}

#[test]
fn a_store_that_cannot_be_reached_says_where_without_its_secrets() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let mut settings = BTreeMap::new();
    settings.insert("s3.endpoint".to_string(), format!("http://127.0.0.1:{closed}"));
    settings.insert("s3.secret-key".to_string(), "very-secret-value".to_string());
    // Without an access key the store is refused when opened, naming the URL.
    let err = weir_storage::open("s3://weir/jobs", &settings).expect_err("no access key");
    assert!(
        err.to_string().contains("checkpoint storage 's3://weir/jobs': ") && err.to_string().contains("AccessKeyId"),
        "{err}"
    );
    settings.insert("s3.access-key".to_string(), "weir".to_string());
    let storage: Arc<dyn Storage> =
        weir_storage::open("s3://user:very-secret-value@weir/jobs", &settings).expect("configured");
    let err = storage.put("owner", b"x".to_vec()).expect_err("nothing listens");
    let text = err.to_string();
    assert!(text.contains("checkpoint storage: cannot write 's3://weir/jobs/owner'"), "{text}");
    assert!(!text.contains("very-secret-value") && !text.contains('\n'), "{text}");

    let err = weir_storage::open("ftp://host/x", &BTreeMap::new()).expect_err("unknown scheme");
    assert!(err.to_string().contains("'ftp://' is not a checkpoint storage Weir knows"), "{err}");
}
