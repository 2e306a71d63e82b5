//! One suite over both backends: what an operator does with its tables, and what the runtime
//! does with them at checkpoints and rescales.

use std::path::Path;

use super::*;

const DECLS: [TableDecl; 3] = [
    TableDecl { name: "acc", kind: TableKind::Value },
    TableDecl { name: "rows", kind: TableKind::Sorted },
    TableDecl { name: "timers", kind: TableKind::Timed },
];

/// A timed key: 8 bytes of time, then the rest.
fn timed(time: u64, rest: &[u8]) -> Vec<u8> {
    [time.to_be_bytes().as_slice(), rest].concat()
}

fn scratch(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("weir-tables-{name}-{nanos}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// A backend for a task, by the task's name.
type MakeBackend = Box<dyn Fn(&str) -> Backend>;

/// Both backends, each in its own directory under `dir`.
fn backends(dir: &Path) -> Vec<(&'static str, MakeBackend)> {
    let rocks_root = dir.to_path_buf();
    vec![
        ("memory", Box::new(|_: &str| Backend::Memory)),
        (
            "rocksdb",
            Box::new(move |task: &str| Backend::RocksDb {
                local: rocks_root.join(format!("local-{task}")),
                shared: std::sync::Arc::new(weir_storage::LocalDir::new(rocks_root.join("shared"))),
            }),
        ),
    ]
}

/// A snapshot with its upload done, as the runtime leaves it.
fn snapshot(tables: &mut StateTables) -> Vec<u8> {
    let s = tables.snapshot(serde_json::json!({ "owned_from": tables.owned().start })).expect("snapshot");
    if let Some(upload) = s.upload {
        upload().expect("upload");
    }
    s.state
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{i:05}").into_bytes()
}

/// The key group of key `i` (the runtime gives the group the exchange routed by).
fn group_of(groups: KeyGroups, i: u32) -> u16 {
    groups.of_hash(u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

#[test]
fn key_groups_split_into_contiguous_ranges_that_cover_every_group_once() {
    let groups = KeyGroups::new(128).expect("groups");
    for p in [1, 2, 3, 5, 7, 128] {
        let mut next = 0;
        for task in 0..p {
            let range = groups.range_of(task, p);
            assert_eq!(range.start, next, "p={p} task {task}");
            for g in range.clone() {
                assert_eq!(groups.task_of(g, p), task, "p={p} group {g}");
            }
            next = range.end;
        }
        assert_eq!(next, 128, "p={p}");
    }
    assert!(groups.check_parallelism(129).is_err());
    assert!(KeyGroups::new(0).is_err());
}

#[test]
fn put_get_scan_and_delete_behave_the_same_in_both_backends() {
    let dir = scratch("ops");
    let groups = KeyGroups::new(8).expect("groups");
    for (name, backend) in backends(&dir) {
        let mut t = StateTables::open(&DECLS, groups, 0..8, &backend("one")).expect("open");
        let acc = t.table("acc").expect("acc");
        let rows = t.table("rows").expect("rows");
        let (ka, kb) = (key(1), key(2));
        t.write(acc, &[(3, &ka, Some(b"one")), (5, &kb, Some(b"two"))]).expect("write");
        let got = t.get_many(acc, &[(3, &ka), (5, &kb), (3, &kb)]).expect("get");
        assert_eq!(got, vec![Some(b"one".to_vec()), Some(b"two".to_vec()), None], "{name}: a key is its group's");
        assert_eq!(t.get_many(rows, &[(3, &ka)]).expect("get"), vec![None], "{name}: tables share keys");
        t.write(acc, &[(3, &ka, None)]).expect("delete");
        assert_eq!(t.get_many(acc, &[(3, &ka)]).expect("get"), vec![None], "{name}");

        // Sorted entries per key: "a"'s entries do not run into "ab"'s.
        let (a, ab) = (b"a".to_vec(), b"ab".to_vec());
        let entries: Vec<(Vec<u8>, &[u8])> = vec![
            (StateTables::entry_key(&a, b"2"), b"a2"),
            (StateTables::entry_key(&a, b"1"), b"a1"),
            (StateTables::entry_key(&ab, b"0"), b"ab0"),
            (StateTables::entry_key(&[0xFF], b"x"), b"ffx"),
        ];
        let changes: Vec<Change<'_>> = entries.iter().map(|(k, v)| (1, k.as_slice(), Some(*v))).collect();
        t.write(rows, &changes).expect("write entries");
        let got = t.entries(rows, 1, &a).expect("entries");
        assert_eq!(got, vec![(b"1".to_vec(), b"a1".to_vec()), (b"2".to_vec(), b"a2".to_vec())], "{name}");
        assert_eq!(t.entries(rows, 1, &ab).expect("entries"), vec![(b"0".to_vec(), b"ab0".to_vec())], "{name}");
        assert_eq!(t.entries(rows, 1, &[0xFF]).expect("entries"), vec![(b"x".to_vec(), b"ffx".to_vec())], "{name}");
        assert!(t.entries(rows, 2, &a).expect("entries").is_empty(), "{name}: groups are apart");
        // Many keys in one call: the same entries, key by key, in the order asked.
        let asked: Vec<(u16, &[u8])> = vec![(1, &ab), (2, &a), (1, &[0xFF]), (1, &a), (1, b"none")];
        let many = t.entries_many(rows, &asked).expect("entries_many");
        let one_by_one: Vec<_> = asked.iter().map(|(g, k)| t.entries(rows, *g, k).expect("entries")).collect();
        assert_eq!(many, one_by_one, "{name}: entries_many");
        assert_eq!(many[3].len(), 2, "{name}");
        t.delete_entries(rows, 1, &a).expect("delete entries");
        assert!(t.entries(rows, 1, &a).expect("entries").is_empty(), "{name}: deleted");
        assert_eq!(t.entries(rows, 1, &ab).expect("entries").len(), 1, "{name}: a longer key is kept");
        t.delete_entries(rows, 1, &[0xFF]).expect("delete entries");
        assert!(t.entries(rows, 1, &[0xFF]).expect("entries").is_empty(), "{name}: deleted");
        assert_eq!(t.entries(rows, 1, &ab).expect("entries").len(), 1, "{name}: a longer key is kept");

        // Range scan and range delete within a group.
        let ks: Vec<Vec<u8>> = (0..10).map(key).collect();
        let changes: Vec<Change<'_>> = ks.iter().map(|k| (6, k.as_slice(), Some(k.as_slice()))).collect();
        t.write(acc, &changes).expect("write");
        let got: Vec<Vec<u8>> =
            t.scan(acc, 6, &key(3), Some(&key(6))).expect("scan").into_iter().map(|(k, _)| k).collect();
        assert_eq!(got, vec![key(3), key(4), key(5)], "{name}");
        t.delete_range(acc, 6, &key(0), Some(&key(8))).expect("delete range");
        let left: Vec<Vec<u8>> = t.scan(acc, 6, &[], None).expect("scan").into_iter().map(|(k, _)| k).collect();
        assert_eq!(left, vec![key(8), key(9)], "{name}");
        assert_eq!(
            t.get_many(acc, &[(5, &kb)]).expect("get"),
            vec![Some(b"two".to_vec())],
            "{name}: other groups kept"
        );

        // Timed: read and dropped by time over every group, in time order.
        let timers = t.table("timers").expect("timers");
        let tk: Vec<(u16, Vec<u8>)> =
            vec![(7, timed(30, b"c")), (1, timed(10, b"a")), (4, timed(20, b"b")), (2, timed(10, b"z"))];
        let changes: Vec<Change<'_>> = tk.iter().map(|(g, k)| (*g, k.as_slice(), Some(&b"v"[..]))).collect();
        t.write(timers, &changes).expect("write timed");
        let got = t.scan_times(timers, &10u64.to_be_bytes(), &30u64.to_be_bytes()).expect("scan times");
        let got: Vec<(u16, Vec<u8>)> = got.into_iter().map(|(g, k, _)| (g, k)).collect();
        assert_eq!(got, vec![(1, timed(10, b"a")), (2, timed(10, b"z")), (4, timed(20, b"b"))], "{name}");
        let c = timed(30, b"c");
        assert_eq!(t.get_many(timers, &[(7, &c)]).expect("get"), vec![Some(b"v".to_vec())], "{name}");
        t.delete_times(timers, &0u64.to_be_bytes(), &30u64.to_be_bytes()).expect("delete times");
        let left = t.scan_times(timers, &0u64.to_be_bytes(), &u64::MAX.to_be_bytes()).expect("scan");
        assert_eq!(left.len(), 1, "{name}: only time 30 is left");
        assert!(t.scan(timers, 7, &[], None).is_err(), "{name}: a timed table is read by time");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes are held in memory until a read needs the store (`pending.rs`): a later write of a
/// key shadows what the store has, a delete hides it, a range delete and a scan see the held
/// writes, and a snapshot holds them all.
#[test]
fn writes_held_in_memory_shadow_the_store_and_reach_the_snapshot() {
    let dir = scratch("pending");
    let groups = KeyGroups::new(8).expect("groups");
    for (name, backend) in backends(&dir) {
        let mut t = StateTables::open(&DECLS, groups, 0..8, &backend("one")).expect("open");
        let acc = t.table("acc").expect("acc");
        let ks: Vec<Vec<u8>> = (0..6).map(key).collect();
        let changes: Vec<Change<'_>> = ks.iter().map(|k| (2, k.as_slice(), Some(&b"old"[..]))).collect();
        t.write(acc, &changes).expect("write");
        // A scan moves them to the store; what follows is held again.
        assert_eq!(t.scan(acc, 2, &[], None).expect("scan").len(), 6, "{name}");
        t.write(acc, &[(2, &ks[0], Some(b"new")), (2, &ks[1], None), (2, &ks[1], Some(b"back")), (2, &ks[2], None)])
            .expect("write");
        t.write(acc, &[(2, &ks[0], Some(b"newer"))]).expect("write");
        let got = t.get_many(acc, &[(2, &ks[0]), (2, &ks[1]), (2, &ks[2]), (2, &ks[3])]).expect("get");
        let want = vec![Some(b"newer".to_vec()), Some(b"back".to_vec()), None, Some(b"old".to_vec())];
        assert_eq!(got, want, "{name}: held writes answer first");
        // A range delete covers held writes too; a key written after it is kept.
        t.write(acc, &[(2, &ks[4], Some(b"held"))]).expect("write");
        t.delete_range(acc, 2, &ks[3], Some(&ks[5])).expect("delete range");
        t.write(acc, &[(2, &ks[3], Some(b"again"))]).expect("write");
        let scanned: Vec<(Vec<u8>, Vec<u8>)> = t.scan(acc, 2, &[], None).expect("scan");
        let want: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (ks[0].clone(), b"newer".to_vec()),
            (ks[1].clone(), b"back".to_vec()),
            (ks[3].clone(), b"again".to_vec()),
            (ks[5].clone(), b"old".to_vec()),
        ];
        assert_eq!(scanned, want, "{name}");
        // Held writes at a snapshot are in it.
        t.write(acc, &[(2, &ks[5], Some(b"last")), (2, &ks[1], None)]).expect("write");
        let snap = snapshot(&mut t);
        let restored =
            StateTables::restore(&DECLS, groups, 0..8, &backend("two"), &[snap.as_slice()]).expect("restore").0;
        let want: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (ks[0].clone(), b"newer".to_vec()),
            (ks[3].clone(), b"again".to_vec()),
            (ks[5].clone(), b"last".to_vec()),
        ];
        assert_eq!(restored.scan(acc, 2, &[], None).expect("scan"), want, "{name}: restored");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_key_group_the_task_does_not_own_is_refused() {
    let groups = KeyGroups::new(8).expect("groups");
    let mut t = StateTables::open(&DECLS, groups, 0..4, &Backend::Memory).expect("open");
    let acc = t.table("acc").expect("acc");
    let err = t.write(acc, &[(4, b"k", Some(b"v"))]).expect_err("group 4 is not owned");
    assert!(err.message.contains("key group 4"), "{}", err.message);
    assert!(t.table("nosuch").is_err());
}

/// Two tasks' tables (p=2) snapshot, then restored at p=2, p=3 and p=1: every key is in the
/// one new task that owns its group, with its value, and nothing else is anywhere.
#[test]
fn snapshots_restore_at_the_same_and_at_another_parallelism() {
    let dir = scratch("rescale");
    let groups = KeyGroups::new(128).expect("groups");
    let keys: Vec<u32> = (0..3_000).collect();
    for (name, backend) in backends(&dir) {
        let mut snapshots = Vec::new();
        for task in 0..2 {
            let owned = groups.range_of(task, 2);
            let mut t =
                StateTables::open(&DECLS, groups, owned.clone(), &backend(&format!("old-{task}"))).expect("open");
            let acc = t.table("acc").expect("acc");
            let rows = t.table("rows").expect("rows");
            let mine: Vec<u32> = keys.iter().copied().filter(|i| owned.contains(&group_of(groups, *i))).collect();
            let ks: Vec<Vec<u8>> = mine.iter().map(|i| key(*i)).collect();
            let vs: Vec<Vec<u8>> = mine.iter().map(|i| format!("value-{i}").into_bytes()).collect();
            let es: Vec<Vec<u8>> = mine.iter().map(|i| StateTables::entry_key(&key(*i), b"e")).collect();
            let changes: Vec<Change<'_>> = mine
                .iter()
                .zip(&ks)
                .zip(&vs)
                .map(|((i, k), v)| (group_of(groups, *i), k.as_slice(), Some(v.as_slice())))
                .collect();
            t.write(acc, &changes).expect("write");
            // A first snapshot, then more changes: the restore must see the last one.
            let _ = snapshot(&mut t);
            let changes: Vec<Change<'_>> =
                mine.iter().zip(&es).map(|(i, e)| (group_of(groups, *i), e.as_slice(), Some(&b"entry"[..]))).collect();
            t.write(rows, &changes).expect("write rows");
            let timer_keys: Vec<Vec<u8>> = mine.iter().map(|i| timed(u64::from(*i % 7), &key(*i))).collect();
            let changes: Vec<Change<'_>> = mine
                .iter()
                .zip(&timer_keys)
                .map(|(i, k)| (group_of(groups, *i), k.as_slice(), Some(&b"t"[..])))
                .collect();
            let timers = t.table("timers").expect("timers");
            t.write(timers, &changes).expect("write timers");
            snapshots.push(snapshot(&mut t));
        }
        // In RocksDB, the second snapshot carries the changes since the first as a write log
        // (`log.rs`), which every restore below replays.
        for s in &snapshots {
            let len = u64::from_le_bytes(s[..8].try_into().expect("length")) as usize;
            let header: serde_json::Value = serde_json::from_slice(&s[8..8 + len]).expect("header");
            let expected = if name == "rocksdb" { crate::tables::LOG_SNAPSHOT_VERSION } else { SNAPSHOT_VERSION };
            assert_eq!(header["version"].as_u64(), Some(expected), "{name}");
        }
        for p in [2, 3, 1] {
            let mut seen = 0;
            let mut primaries = 0;
            let mut timers_seen = 0;
            for task in 0..p {
                let owned = groups.range_of(task, p);
                let parts: Vec<&[u8]> = snapshots.iter().map(|s| s.as_slice()).collect();
                let (t, metas) =
                    StateTables::restore(&DECLS, groups, owned.clone(), &backend(&format!("p{p}-{task}")), &parts)
                        .expect("restore");
                // The metas of the old tasks whose groups it took; each old task's is primary
                // in exactly one new task.
                for m in &metas {
                    let from = m.meta["owned_from"].as_u64().expect("meta") as u16;
                    assert_eq!(m.primary, owned.contains(&from), "{name}: p={p} task {task}");
                    primaries += usize::from(m.primary);
                }
                let acc = t.table("acc").expect("acc");
                let rows = t.table("rows").expect("rows");
                let timers = t.table("timers").expect("timers");
                for (g, k, _) in t.scan_times(timers, &0u64.to_be_bytes(), &u64::MAX.to_be_bytes()).expect("timers") {
                    let i: u32 = String::from_utf8_lossy(&k[12..]).parse().expect("key number");
                    assert!(owned.contains(&g) && group_of(groups, i) == g, "{name}: p={p}: timer of key {i} in {g}");
                    assert_eq!(k, timed(u64::from(i % 7), &key(i)), "{name}");
                    timers_seen += 1;
                }
                for g in owned.clone() {
                    let got = t.scan(acc, g, &[], None).expect("scan");
                    let want: Vec<(Vec<u8>, Vec<u8>)> = keys
                        .iter()
                        .filter(|i| group_of(groups, **i) == g)
                        .map(|i| (key(*i), format!("value-{i}").into_bytes()))
                        .collect();
                    assert_eq!(got, want, "{name}: p={p} task {task} group {g}");
                    seen += got.len();
                    for (k, _) in &got {
                        let entries = t.entries(rows, g, k).expect("entries");
                        assert_eq!(entries, vec![(b"e".to_vec(), b"entry".to_vec())], "{name}: p={p}");
                    }
                }
            }
            assert_eq!(seen, keys.len(), "{name}: p={p}: every key once");
            assert_eq!(timers_seen, keys.len(), "{name}: p={p}: every timer once");
            assert_eq!(primaries, 2, "{name}: p={p}: each old task's meta is primary once");
        }
        // Another declaration or key-group count is refused, naming the problem.
        let parts: Vec<&[u8]> = snapshots.iter().map(|s| s.as_slice()).collect();
        let other =
            [TableDecl { name: "acc", kind: TableKind::Value }, TableDecl { name: "rows", kind: TableKind::Sorted }];
        let err = StateTables::restore(&other, groups, 0..128, &backend("other"), &parts).err().expect("other tables");
        assert!(err.message.contains("--from-scratch"), "{name}: {}", err.message);
        let err = StateTables::restore(&DECLS, KeyGroups::new(64).expect("groups"), 0..64, &backend("g64"), &parts)
            .err()
            .expect("other key groups");
        assert!(err.message.contains("max-parallelism"), "{name}: {}", err.message);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A timed key without its time refuses the whole write: none of its changes is held or
/// stored, in either backend (a held write could not be taken back).
#[test]
fn a_timed_key_without_its_time_refuses_the_whole_write() {
    let dir = scratch("short-timed");
    let groups = KeyGroups::new(8).expect("groups");
    for (name, backend) in backends(&dir) {
        let mut t = StateTables::open(&DECLS, groups, 0..8, &backend("one")).expect("open");
        let timers = t.table("timers").expect("timers");
        let good = timed(5, b"a");
        let err = t.write(timers, &[(0, &good[..], Some(&b"v"[..])), (0, &b"short"[..], Some(&b"v"[..]))]);
        assert!(err.is_err(), "{name}");
        let all = t.scan_times(timers, &[0; 8], &[0xff; 8]).expect("scan");
        assert!(all.is_empty(), "{name}: {} entries written", all.len());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
