//! What every storage must do, whatever it is: the calls of [`Storage`] against an empty
//! root, shared by the tests of each store.

use std::path::PathBuf;

use weir_storage::Storage;

pub fn scratch() -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("weir-storage-test-{nanos}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch");
    dir
}

/// Every call: the conditional create two instances race on, replacing, multipart and small
/// uploads read back exactly, listings one level deep, deletes of a name twice, a missing
/// one and a whole directory.
pub fn every_call_works(root: &dyn Storage) {
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
