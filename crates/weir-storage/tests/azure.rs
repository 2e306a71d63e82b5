//! The object store storage against Azure Blob Storage's emulator (Azurite, started by
//! `scripts/azurite.sh`): every call of `weir_storage::Storage` through `az://`, with the account's
//! endpoint and key as settings, and the key kept out of errors.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

mod common;

/// Azurite's published account key (the same on every installation).
const KEY: &str = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

struct Emulator {
    pid: String,
    port: u16,
}

impl Emulator {
    fn start() -> Emulator {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/azurite.sh");
        let out = Command::new(script).args(["start", &port.to_string(), "weir"]).output().expect("start azurite");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Emulator { pid: String::from_utf8_lossy(&out.stdout).trim().to_string(), port }
    }

    fn settings(&self, key: &str) -> BTreeMap<String, String> {
        [
            ("azure.endpoint", format!("http://127.0.0.1:{}/devstoreaccount1", self.port)),
            ("azure.account-name", "devstoreaccount1".to_string()),
            ("azure.account-key", key.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(&self.pid).status();
    }
}

#[test]
fn every_call_works_against_azure_blob_storage() {
    let emulator = Emulator::start();
    let root = weir_storage::open("az://weir/jobs/q1", &emulator.settings(KEY)).expect("open");
    assert_eq!(root.describe(), "az://weir/jobs/q1");
    common::every_call_works(root.as_ref());

    // A wrong key: the request is refused, the error names the object, not the key.
    let wrong = "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmcta2V5LXdyb25nLWtleQ==";
    let root = weir_storage::open("az://weir/jobs/q1", &emulator.settings(wrong)).expect("open");
    let err = root.put("owner", b"x".to_vec()).expect_err("refused");
    let text = err.to_string();
    assert!(text.contains("checkpoint storage: cannot write 'az://weir/jobs/q1/owner'"), "{text}");
    assert!(!text.contains(wrong) && !text.contains('\n'), "{text}");
}
