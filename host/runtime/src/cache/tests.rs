use super::*;

/// The authenticated artefact of the entry at `path`.
fn read_entry(path: &Path, key: &Key, tag: &str, sha256: &str) -> anyhow::Result<Option<Vec<u8>>> {
    Ok(open_entry(path, key, tag, sha256)?.map(|e| e.map[..e.len].to_vec()))
}

#[test]
fn entries_round_trip_and_any_change_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = dir.path().join("c");
    let key = open_cache_dir(&cache).expect("new cache dir");
    assert_eq!(key.len(), KEY_BYTES);
    assert_eq!(
        open_cache_dir(&cache).expect("again"),
        key,
        "the key persists"
    );
    let path = cache.join("a-t.cwasm");
    store_entry(&cache, &path, &key, "t", "a", b"compiled").expect("stored");
    let got = read_entry(&path, &key, "t", "a")
        .expect("valid")
        .expect("present");
    assert_eq!(got, b"compiled");
    // Another component's name, another engine, another key: refused.
    let err = read_entry(&path, &key, "t", "b").expect_err("other sha");
    assert!(err.to_string().contains("MAC does not match"), "{err}");
    read_entry(&path, &key, "u", "a").expect_err("other engine");
    read_entry(&path, &[7; KEY_BYTES], "t", "a").expect_err("other key");
    // One flipped byte of the compiled code, or of the trailer: refused.
    let good = std::fs::read(&path).expect("entry");
    for at in [0, good.len() - 1, good.len() - TRAILER_BYTES] {
        let mut bytes = good.clone();
        bytes[at] ^= 1;
        std::fs::write(&path, &bytes).expect("patched");
        read_entry(&path, &key, "t", "a").expect_err("patched");
    }
    // Cut short, or with bytes appended: refused.
    std::fs::write(&path, &good[..good.len() - 1]).expect("cut");
    read_entry(&path, &key, "t", "a").expect_err("cut short");
    std::fs::write(&path, [&good[..], b"x"].concat()).expect("grown");
    read_entry(&path, &key, "t", "a").expect_err("grown");
    assert!(
        read_entry(&cache.join("none"), &key, "t", "a")
            .expect("absent")
            .is_none()
    );
}

/// Past its bounds the cache removes the least recently used entries, never the one just
/// written; other files are left.
#[test]
fn the_cache_keeps_within_its_bounds_least_recently_used_first() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = dir.path().join("c");
    let key = open_cache_dir(&cache).expect("new cache dir");
    let t0 = std::time::SystemTime::now() - std::time::Duration::from_secs(100);
    for i in 0..6u64 {
        let path = cache.join(format!("{i}-t.cwasm"));
        store_entry(&cache, &path, &key, "t", &i.to_string(), &[0; 100]).expect("stored");
        let f = open_nofollow(&path).expect("open");
        f.set_modified(t0 + std::time::Duration::from_secs(i * 10))
            .expect("mtime");
    }
    // Entry 1 used last: kept; entry 5 just written: kept.
    open_nofollow(&cache.join("1-t.cwasm"))
        .expect("open")
        .set_modified(std::time::SystemTime::now())
        .expect("mtime");
    let entry = (100 + TRAILER_BYTES) as u64;
    evict(&cache, &cache.join("5-t.cwasm"), "cwasm", 3 * entry, 10).expect("evicted");
    let mut left: Vec<String> = std::fs::read_dir(&cache)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["1-t.cwasm", "4-t.cwasm", "5-t.cwasm", KEY_FILE]);
    evict(&cache, &cache.join("5-t.cwasm"), "cwasm", u64::MAX, 1).expect("evicted");
    assert!(cache.join("5-t.cwasm").exists() && !cache.join("1-t.cwasm").exists());
}

#[cfg(unix)]
#[test]
fn writable_by_others_or_symlinked_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = dir.path().join("c");
    let key = open_cache_dir(&cache).expect("new cache dir");
    let path = cache.join("a-t.cwasm");
    store_entry(&cache, &path, &key, "t", "a", b"compiled").expect("stored");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let err = read_entry(&path, &key, "t", "a").expect_err("world-writable entry");
    assert!(err.to_string().contains("write to it"), "{err}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let link = cache.join("b-t.cwasm");
    std::os::unix::fs::symlink(&path, &link).expect("symlink");
    read_entry(&link, &key, "t", "a").expect_err("a symlink is not followed");
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let err = open_cache_dir(&cache).expect_err("group/world-writable directory");
    assert!(err.to_string().contains("write to it"), "{err}");
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::set_permissions(cache.join(KEY_FILE), std::fs::Permissions::from_mode(0o644))
        .expect("chmod");
    let err = open_cache_dir(&cache).expect_err("readable key");
    assert!(err.to_string().contains("read it"), "{err}");
}

/// A file's recorded sha256 is found by its identity only while the file is unchanged, and
/// only under this user's key; a file that changed while it was read, or too recently, is not
/// recorded.
#[cfg(unix)]
#[test]
fn a_file_is_known_by_its_identity_until_it_changes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache_dir = dir.path().join("c");
    let engine = Engine::default();
    let cache = ComponentCache::new(Some(cache_dir.clone()), &engine);
    let file = dir.path().join("x.wasm");
    std::fs::write(&file, b"one").expect("write");
    let sha = "ab".repeat(32);
    let fresh = std::fs::metadata(&file).expect("meta");
    cache.remember_sha256(&fresh, &fresh, &sha);
    assert_eq!(
        cache.known_sha256(&fresh),
        None,
        "changed under a second ago: not recorded"
    );

    // Changed while it was read: not recorded either.
    std::thread::sleep(SETTLED + std::time::Duration::from_millis(50));
    let before = std::fs::metadata(&file).expect("meta");
    std::fs::write(&file, b"two").expect("write");
    let after = std::fs::metadata(&file).expect("meta");
    cache.remember_sha256(&before, &after, &sha);
    assert_eq!(cache.known_sha256(&after), None);

    std::thread::sleep(SETTLED + std::time::Duration::from_millis(50));
    let settled = std::fs::metadata(&file).expect("meta");
    cache.remember_sha256(&settled, &settled, &sha);
    assert_eq!(cache.known_sha256(&settled), Some(sha.clone()));

    // Any write changes the change time: the identity misses, even with the old size and
    // modification time put back.
    let mtime = settled.modified().expect("mtime");
    std::fs::write(&file, b"six").expect("write");
    std::fs::File::options()
        .write(true)
        .open(&file)
        .expect("open")
        .set_modified(mtime)
        .expect("mtime");
    let changed = std::fs::metadata(&file).expect("meta");
    assert_eq!(changed.len(), settled.len());
    assert_eq!(cache.known_sha256(&changed), None);

    // An entry rewritten to name another sha256, or made under another key: refused.
    let key = open_cache_dir(&cache_dir).expect("key");
    let identity = FileIdentity::of(&settled);
    let entry = cache_dir.join(identity.entry_name(&key));
    let text = std::fs::read_to_string(&entry).expect("entry");
    let forged = text.replacen(&sha, &"cd".repeat(32), 1);
    std::fs::write(&entry, forged).expect("forge");
    assert_eq!(cache.known_sha256(&settled), None);
    assert!(!entry.exists(), "the forged entry is removed");
    let other = [9u8; KEY_BYTES];
    let text = format!("{sha}\n{}\n", identity.mac(&other, &sha).to_hex());
    write_atomically(&cache_dir, &entry, &[text.as_bytes()]).expect("write");
    assert_eq!(cache.known_sha256(&settled), None);
}
