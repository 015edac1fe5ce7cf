use super::*;

/// A tenant's loads take one of the server's places at a time: while its first is loading
/// and its second waits, another tenant's load finds the other place free.
#[tokio::test]
async fn a_tenant_loads_one_file_at_a_time() {
    use std::time::Duration;
    let kept = RequestComponents::default();
    let (a, b, c) = (OwnTurn::default(), OwnTurn::default(), OwnTurn::default());
    let first = kept.load_turn(&a).await.expect("a's first");
    let waits = |own| tokio::time::timeout(Duration::from_millis(100), kept.load_turn(own));
    assert!(waits(&a).await.is_err(), "a's second waits for its first");
    let b_turn = waits(&b)
        .await
        .expect("b finds the other place")
        .expect("open");
    assert!(waits(&c).await.is_err(), "both places are taken");
    drop(first);
    let again = waits(&a).await.expect("a's next once its first is done");
    drop((again, b_turn));
}

/// A tenant's churn drops only its own compilations, oldest first; another's stays.
#[test]
fn a_tenant_keeps_its_own_share_and_drops_only_its_own() {
    let mut kept: Kept<u32> = Kept::default();
    let budget = HostMemory::new(1 << 30);
    kept.keep("b0".into(), Arc::new(0), "b", 1, &budget)
        .expect("kept");
    for i in 0..3 * MAX_KEPT_PER_TENANT as u32 {
        kept.keep(format!("a{i}"), Arc::new(i), "a", 1, &budget)
            .expect("kept");
        // b's is named now and then, a's newest more often.
        if i % 5 == 0 {
            assert_eq!(kept.get("b0").as_deref(), Some(&0));
        }
    }
    assert_eq!(
        kept.get("b0").as_deref(),
        Some(&0),
        "b's survives a's churn"
    );
    let a: Vec<_> = kept
        .by_sha256
        .iter()
        .filter(|(_, k)| k.bringer == "a")
        .map(|(s, _)| s.clone())
        .collect();
    assert_eq!(a.len(), MAX_KEPT_PER_TENANT, "{a:?}");
    let newest = 3 * MAX_KEPT_PER_TENANT - 1;
    assert!(a.contains(&format!("a{newest}")) && !a.contains(&"a0".to_string()));
}

/// A compilation the host budget cannot hold drops the bringer's own first, then is
/// refused naming the setting; nothing of another tenant's is dropped for it.
#[test]
fn kept_compilations_are_charged_to_the_host_budget() {
    let mut kept: Kept<u32> = Kept::default();
    let budget = HostMemory::new(1 << 30);
    kept.keep("small".into(), Arc::new(1), "b", 1 << 20, &budget)
        .expect("kept");
    assert_eq!(
        kept.by_sha256["small"]._held.bytes(),
        2 << 20,
        "charged while kept"
    );
    // More than the whole budget: refused, with b's kept.
    let err = kept
        .keep("huge".into(), Arc::new(2), "a", u64::MAX / 4, &budget)
        .expect_err("over the budget");
    assert!(err.contains("max_host_memory"), "{err}");
    assert_eq!(kept.get("small").as_deref(), Some(&1));
}

#[test]
fn paths_beneath_a_listed_directory_only() {
    let dirs = vec![PathBuf::from("/srv/a"), PathBuf::from("/srv/b/c")];
    let rest = |p: &str| beneath(&dirs, Path::new(p)).map(|(d, r)| (d.to_path_buf(), r));
    assert_eq!(
        rest("/srv/a/x/w.wasm"),
        Some((PathBuf::from("/srv/a"), PathBuf::from("x/w.wasm")))
    );
    assert_eq!(
        rest("/srv/b/c/w.wasm").map(|(_, r)| r),
        Some(PathBuf::from("w.wasm"))
    );
    for refused in [
        "/srv/a",
        "/srv/a/",
        "/srv/a/../b/c/w.wasm",
        "/srv/ab/w.wasm",
        "/srv/b/w.wasm",
        "srv/a/w.wasm",
    ] {
        assert_eq!(rest(refused), None, "{refused}");
    }
}

#[test]
fn symlinks_below_the_directory_are_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("team");
    std::fs::create_dir_all(dir.join("sub")).expect("dirs");
    std::fs::write(dir.join("sub/w.wasm"), b"x").expect("write");
    std::fs::write(tmp.path().join("secret"), b"s").expect("write");
    std::os::unix::fs::symlink(tmp.path().join("secret"), dir.join("link.wasm")).expect("ln");
    std::os::unix::fs::symlink(dir.join("sub"), dir.join("linkdir")).expect("ln");
    assert!(open_beneath(&dir, Path::new("sub/w.wasm")).is_ok());
    for refused in ["link.wasm", "linkdir/w.wasm", "missing.wasm"] {
        assert!(open_beneath(&dir, Path::new(refused)).is_err(), "{refused}");
    }
}
