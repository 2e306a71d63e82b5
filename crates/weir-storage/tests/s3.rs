//! The object store storage against an S3-compatible server on loopback (moto's server mode,
//! started by `scripts/object-store.sh`): every call of [`Storage`], a multipart upload, the
//! conditional create two instances race on, and secrets kept out of errors.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use weir_storage::Storage;

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

fn scratch() -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("weir-s3-test-{nanos}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch");
    dir
}

#[test]
fn every_call_works_against_an_s3_compatible_server() {
    let server = Server::start();
    let root = weir_storage::open("s3://weir/jobs/q1", &server.settings()).expect("open");
    assert_eq!(root.describe(), "s3://weir/jobs/q1");
    assert_eq!(root.list("").expect("empty"), weir_storage::Listing::default());

    // The conditional create: the second writer of a name loses, the first's bytes stay.
    assert!(root.put_new("chk-1/manifest.json", b"first".to_vec()).expect("create"));
    assert!(!root.put_new("chk-1/manifest.json", b"second".to_vec()).expect("exists"));
    assert_eq!(root.get("chk-1/manifest.json").expect("get"), Some(b"first".to_vec()));
    root.put_all((0..20).map(|i| (format!("chk-1/state-{i}.bin"), vec![i as u8; 100])).collect()).expect("put all");
    root.put("owner", b"a".to_vec()).expect("put");
    root.put("owner", b"b".to_vec()).expect("replace");
    assert_eq!(root.get("owner").expect("get"), Some(b"b".to_vec()));
    assert_eq!(root.get("nothing").expect("get"), None);

    // Uploads: a 20 MiB file goes in parts, small ones whole; all read back exactly.
    let dir = scratch();
    let big: Vec<u8> = (0..20u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(dir.join("big.sst"), &big).expect("big");
    std::fs::write(dir.join("small.sst"), b"small").expect("small");
    let shared = root.scoped("shared");
    shared
        .upload(&[(dir.join("big.sst"), "l-1.sst".into()), (dir.join("small.sst"), "l-2.sst".into())])
        .expect("upload");
    let listing = shared.list("").expect("list shared");
    let mut sizes: Vec<(String, u64)> = listing.files.iter().map(|f| (f.name.clone(), f.size)).collect();
    sizes.sort();
    assert_eq!(sizes, vec![("l-1.sst".to_string(), big.len() as u64), ("l-2.sst".to_string(), 5)]);
    shared
        .download(&[("l-1.sst".into(), dir.join("back-1")), ("l-2.sst".into(), dir.join("back-2"))])
        .expect("download");
    assert!(std::fs::read(dir.join("back-1")).expect("back") == big, "the big file differs");
    assert_eq!(std::fs::read(dir.join("back-2")).expect("back"), b"small");

    // Listing one level: files and directories apart.
    let top = root.list("").expect("list");
    let mut dirs = top.dirs.clone();
    dirs.sort();
    assert_eq!(dirs, vec!["chk-1".to_string(), "shared".to_string()]);
    assert_eq!(top.files.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), vec!["owner"]);
    assert_eq!(root.list("chk-1").expect("list chk").files.len(), 21);

    // Deletes: a name twice, a missing one, a whole directory.
    shared.delete(&["l-2.sst".into(), "l-2.sst".into(), "never.sst".into()]).expect("delete");
    assert_eq!(shared.list("").expect("list").files.len(), 1);
    root.delete_dir("chk-1").expect("delete dir");
    assert!(root.list("chk-1").expect("list").files.is_empty());
    assert_eq!(root.get("owner").expect("still there"), Some(b"b".to_vec()));
    let _ = std::fs::remove_dir_all(&dir);
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
