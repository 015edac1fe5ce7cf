use super::*;

const SERVER: Quota = Quota {
    requests_in_flight: 64,
    episodes_in_flight: 256,
    reward_calls_in_flight: 64,
    sandbox_seconds_per_minute: None,
    body_bytes: 1 << 20,
    rows_per_request: 100,
};

fn sha(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

fn write(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("tenants.toml");
    std::fs::write(&path, text).expect("write");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    path
}

#[test]
fn keys_find_their_tenant_and_nothing_else() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = write(
        dir.path(),
        &format!(
            "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{}\", \"{}\"]\nmax_requests_in_flight = 1\n\n[[tenant]]\nname = \"b\"\nkey_sha256 = [\"{}\"]\n",
            sha("key-a"),
            sha("key-a2"),
            sha("key-b")
        ),
    );
    let t = Tenants::load(&path, SERVER, Registered::default()).expect("load");
    let name = |h: &str| t.authenticate(Some(h.as_bytes())).map(|t| t.name.clone());
    assert_eq!(name("Bearer key-a").as_deref(), Some("a"));
    assert_eq!(name("bearer   key-a2 ").as_deref(), Some("a"));
    assert_eq!(name("Bearer key-b").as_deref(), Some("b"));
    for refused in [
        "Bearer key-c",
        "Bearer",
        "Bearer ",
        "Basic key-a",
        "key-a",
        "Bearerkey-a",
    ] {
        assert_eq!(name(refused), None, "{refused}");
    }
    assert!(t.authenticate(None).is_none());
    // The stored hash is not a key.
    assert_eq!(name(&format!("Bearer {}", sha("key-a"))), None);

    let a = t.authenticate(Some(b"Bearer key-a")).expect("a");
    assert_eq!(a.quota.requests_in_flight, 1);
    assert_eq!(a.quota.body_bytes, SERVER.body_bytes);
    let first = a.admit().expect("first");
    assert!(a.admit().is_none(), "at the quota");
    drop(first);
    assert!(a.admit().is_some());
    assert_eq!(a.usage.throttled.load(Ordering::Relaxed), 1);
    let b = t.authenticate(Some(b"Bearer key-b")).expect("b");
    assert_eq!(b.quota.requests_in_flight, 4, "the default");
}

/// Finding a key takes as long whichever tenant's it is, and as long as not finding one:
/// every key is compared, none is skipped once one matched. With 2,000 keys the compares
/// are most of the time taken (a stop at the first match would answer `a`'s first key in
/// a few hash-times and `b`'s, the last, after 2,000 compares); each case's best of 15
/// rounds, taken in turn, so the VM's noise falls on all three alike.
#[test]
fn finding_a_key_takes_as_long_whichever_it_is() {
    let dir = tempfile::tempdir().expect("tmp");
    let a_keys: Vec<String> = (0..1999)
        .map(|i| format!("\"{}\"", sha(&format!("a{i}"))))
        .collect();
    let path = write(
        dir.path(),
        &format!(
            "[[tenant]]\nname = \"a\"\nkey_sha256 = [{}]\n\n[[tenant]]\nname = \"b\"\nkey_sha256 = [\"{}\"]\n",
            a_keys.join(", "),
            sha("b0")
        ),
    );
    let t = Tenants::load(&path, SERVER, Registered::default()).expect("load");
    let cases = [
        ("Bearer a0", Some("a")),
        ("Bearer b0", Some("b")),
        ("Bearer c0", None),
    ];
    let mut best = [Duration::MAX; 3];
    for _ in 0..15 {
        for (i, (header, tenant)) in cases.iter().enumerate() {
            let start = std::time::Instant::now();
            for _ in 0..50 {
                let found = t.authenticate(Some(std::hint::black_box(header.as_bytes())));
                assert_eq!(found.map(|t| t.name.clone()).as_deref(), *tenant);
            }
            best[i] = best[i].min(start.elapsed());
        }
    }
    let fastest = best.iter().min().expect("three cases");
    let slowest = best.iter().max().expect("three cases");
    assert!(
        slowest.as_secs_f64() < fastest.as_secs_f64() * 1.5,
        "a's first key, b's key, no key: {best:?}"
    );
}

#[test]
fn sandbox_time_runs_out_and_refills() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = write(
        dir.path(),
        &format!(
            "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{}\"]\nsandbox_seconds_per_minute = 60\n",
            sha("k")
        ),
    );
    let t = Tenants::load(&path, SERVER, Registered::default()).expect("load");
    let a = t.authenticate(Some(b"Bearer k")).expect("a");
    assert_eq!(a.out_of_time(), None, "a full minute's worth to start");
    // 90 s of sandbox time: 30 s owed at 1 s a second, and a tenth of the minute's worth
    // (6 s) to refill before work starts again.
    a.charge(Duration::from_secs(90));
    let wait = a.out_of_time().expect("out of time");
    assert!(
        wait > Duration::from_secs(35) && wait <= Duration::from_secs(36),
        "{wait:?}"
    );
    assert_eq!(a.usage.out_of_time.load(Ordering::Relaxed), 1);
    // Time a tenant without the quota uses is counted, never refused.
    let path = write(
        dir.path(),
        &format!(
            "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{}\"]\n",
            sha("k")
        ),
    );
    t.reload().expect("reload");
    let a = t.authenticate(Some(b"Bearer k")).expect("a");
    a.charge(Duration::from_secs(1000));
    assert_eq!(a.out_of_time(), None);
    assert_eq!(a.usage.meter.used(), Duration::from_secs(1090));
    let _ = path;
}

#[test]
fn reload_revokes_keys_and_keeps_usage() {
    let dir = tempfile::tempdir().expect("tmp");
    let two = format!(
        "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{}\", \"{}\"]\n",
        sha("old"),
        sha("new")
    );
    let path = write(dir.path(), &two);
    let t = Tenants::load(&path, SERVER, Registered::default()).expect("load");
    let held = t.authenticate(Some(b"Bearer old")).expect("old").admit();
    write(
        dir.path(),
        &format!(
            "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{}\"]\n",
            sha("new")
        ),
    );
    assert_eq!(t.reload().expect("reload"), 1);
    assert!(t.authenticate(Some(b"Bearer old")).is_none(), "revoked");
    let a = t.authenticate(Some(b"Bearer new")).expect("new");
    assert_eq!(a.in_flight(), 1, "the request in flight carried over");
    drop(held);
    assert_eq!(a.in_flight(), 0);
    // A broken file leaves the tenants as they were.
    write(dir.path(), "[[tenant]]\nname = \"a\"\n");
    assert!(t.reload().is_err());
    assert!(t.authenticate(Some(b"Bearer new")).is_some());
}

/// The cores named at start are what the server set apart; a reload naming others is
/// warned of, with where the server's threads stay, and one naming the same is not.
#[test]
fn episode_cores_are_those_of_the_start() {
    let dir = tempfile::tempdir().expect("tmp");
    // A core this process may run on (a container's cpuset may leave out core 0).
    let (n, core) = (0..1024)
        .find_map(|n| Some((n, crate::threads::CpuSet::parse(&n.to_string()).ok()?)))
        .expect("a core");
    let entry = |cpus: &str| {
        format!(
            "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{}\"]\n{cpus}",
            sha("k")
        )
    };
    let path = write(dir.path(), &entry(&format!("episode_cpus = \"{n}\"\n")));
    let t = Tenants::load(&path, SERVER, Registered::default()).expect("load");
    assert_eq!(t.episode_cores(), Some(&core));
    write(dir.path(), &entry(""));
    t.reload().expect("reload");
    assert_eq!(t.episode_cores(), Some(&core), "fixed at start");
    assert_eq!(cores_moved(Some(&core), Some(&core), None), None);
    let said = cores_moved(Some(&core), None, None).expect("moved");
    assert!(
        said.contains(&format!("now name cores none (at start: {n})")) && said.contains("any core"),
        "{said}"
    );
    let said = cores_moved(None, Some(&core), Some(&core)).expect("added");
    assert!(said.contains(&format!("stay on cores {n}")), "{said}");
}

#[test]
fn bad_files_are_refused_naming_the_fix() {
    let dir = tempfile::tempdir().expect("tmp");
    let k = sha("k");
    for (text, says) in [
        ("", "no [[tenant]]"),
        (
            "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"k\"]\n",
            "not 64 hex digits",
        ),
        (
            &format!("[[tenant]]\nname = \"a b\"\nkey_sha256 = [\"{k}\"]\n"),
            "must be 1 to 64",
        ),
        (
            &format!(
                "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{k}\"]\n[[tenant]]\nname = \"b\"\nkey_sha256 = [\"{k}\"]\n"
            ),
            "share a key",
        ),
        (
            &format!(
                "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{k}\"]\nmax_body_bytes = 2000000\n"
            ),
            "from 1 to 1048576",
        ),
        (
            &format!("[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{k}\"]\nmax_rows = 5\n"),
            "unknown field",
        ),
        (
            &format!("[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{k}\"]\nrewards = [\"math\"]\n"),
            "which this server does not register",
        ),
        (
            &format!("[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{k}\"]\nworkflows = [\"x\"]\n"),
            "register it with --extra-workflow x=",
        ),
        (
            &format!(
                "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{k}\"]\nsandbox_seconds_per_minute = 0\n"
            ),
            "from 1 to 86400",
        ),
        (
            &format!(
                "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{k}\"]\nepisode_cpus = \"0-100000\"\n"
            ),
            "episode_cpus \"0-100000\" names core",
        ),
    ] {
        let path = write(dir.path(), text);
        let err = format!(
            "{:#}",
            Tenants::load(&path, SERVER, Registered::default())
                .err()
                .expect(says)
        );
        assert!(err.contains(says), "{says}: {err}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let path = write(
            dir.path(),
            &format!("[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{k}\"]\n"),
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o620)).expect("chmod");
        let err = format!(
            "{:#}",
            Tenants::load(&path, SERVER, Registered::default())
                .err()
                .expect("group-writable")
        );
        assert!(err.contains("chmod go-w"), "{err}");
    }
}
