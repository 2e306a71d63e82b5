//! Incremental RocksDB checkpoints with a large keyed state: 10M keys of 100 bytes
//! (incompressible), then rounds that update 1% of the keys, spread over the whole key space,
//! each followed by a checkpoint. Prints per checkpoint the bytes copied against the bytes the
//! checkpoint references (the full state), the time to begin it (flush + hard links: the part
//! on the task's thread) and to upload it, and how many shared files pruning deletes when
//! only the last two checkpoints are retained. The shared files go to `DIR/shared`, or to
//! the storage `SHARED` names (an object store's URL, configured by the usual environment
//! variables, e.g. `AWS_ENDPOINT`), to compare the two. Release build:
//!
//!     [SHARED=s3://bucket/path] cargo bench -p weir-state --bench incremental_state -- [KEYS] [ROUNDS] [DIR]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use weir_state::{prune_shared, StateStore, StoreSnapshot};
use weir_storage::Storage;

/// xorshift: values that do not compress, as real accumulator states mostly do not.
fn value(key: u64, round: u64, out: &mut [u8]) {
    let mut x = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ round.wrapping_add(1).wrapping_mul(0xD1B5_4A32_D192_ED03);
    for chunk in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

fn write(store: &StateStore, keys: impl Iterator<Item = u64>, round: u64) {
    let keys: Vec<u64> = keys.collect();
    let table = store.table(1);
    for chunk in keys.chunks(50_000) {
        let ks: Vec<[u8; 8]> = chunk.iter().map(|k| k.to_be_bytes()).collect();
        let vs: Vec<[u8; 100]> = chunk
            .iter()
            .map(|k| {
                let mut v = [0u8; 100];
                value(*k, round, &mut v);
                v
            })
            .collect();
        let changes: Vec<(&[u8], Option<&[u8]>)> = ks.iter().zip(&vs).map(|(k, v)| (&k[..], Some(&v[..]))).collect();
        table.write(&changes).expect("write");
    }
}

fn checkpoint(store: &mut StateStore, shared: &Arc<dyn Storage>, own: &Path) -> (StoreSnapshot, f64, f64) {
    let started = Instant::now();
    let (snapshot, files, upload) = store.begin_checkpoint(shared).expect("begin checkpoint");
    let begun = started.elapsed().as_secs_f64();
    let started = Instant::now();
    upload.run().expect("upload");
    std::fs::create_dir_all(own).expect("checkpoint dir");
    for (name, bytes) in files {
        std::fs::write(own.join(name), bytes).expect("small files");
    }
    (snapshot, begun, started.elapsed().as_secs_f64())
}

fn stored_bytes(shared: &dyn Storage) -> u64 {
    shared.list("").map(|l| l.files.iter().map(|f| f.size).sum()).unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let keys: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(10_000_000);
    let rounds: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let dir = args.get(2).map(PathBuf::from).unwrap_or_else(|| std::env::temp_dir().join("weir-incremental-bench"));
    let _ = std::fs::remove_dir_all(&dir);
    let at = std::env::var("SHARED").unwrap_or_else(|_| dir.join("shared").to_string_lossy().into_owned());
    let shared = weir_storage::open(&at, &Default::default()).expect("shared storage");
    shared.delete_dir("").expect("empty shared storage");
    println!("shared files in '{}'", shared.describe());
    let mut store = StateStore::open(dir.join("db")).expect("open");
    let started = Instant::now();
    write(&store, 0..keys, 0);
    println!("{keys} keys x 100 bytes written in {:.1} s", started.elapsed().as_secs_f64());
    let (first, begun, uploaded) = checkpoint(&mut store, &shared, &dir.join("chk-1"));
    println!(
        "checkpoint 1: copied {:.1} MB of {:.1} MB referenced (begin {:.2} s, upload {:.2} s)",
        first.bytes_copied as f64 / 1e6,
        first.bytes_referenced as f64 / 1e6,
        begun,
        uploaded
    );
    let mut retained = vec![first];
    for round in 1..=rounds {
        // 1% of the keys, spread over the whole key space.
        write(&store, (0..keys).filter(|k| (k + round * 37) % 100 == 0), round);
        let (s, begun, uploaded) = checkpoint(&mut store, &shared, &dir.join(format!("chk-{}", round + 1)));
        println!(
            "checkpoint {}: copied {:.1} MB of {:.1} MB referenced = {:.1}% (begin {:.2} s, upload {:.2} s)",
            round + 1,
            s.bytes_copied as f64 / 1e6,
            s.bytes_referenced as f64 / 1e6,
            100.0 * s.bytes_copied as f64 / s.bytes_referenced as f64,
            begun,
            uploaded
        );
        retained.push(s);
        if retained.len() > 2 {
            retained.remove(0);
        }
        let deleted = prune_shared(shared.as_ref(), &retained).expect("prune");
        println!(
            "  retained 2: pruned {deleted} shared files; shared files {:.1} MB",
            stored_bytes(shared.as_ref()) as f64 / 1e6
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
