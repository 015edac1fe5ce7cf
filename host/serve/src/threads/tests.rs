use super::*;

/// A task on a tenant's threads runs on them, not on the caller's; dropping the threads
/// inside another runtime does not panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_run_on_the_tenants_threads() {
    let threads = Threads::new("a", Lane::Calls, None).expect("threads");
    let name = threads
        .spawn(async { std::thread::current().name().map(str::to_string) })
        .await
        .expect("joined");
    assert_eq!(name.as_deref(), Some("rollbox-tenant"));
    let here = std::thread::current().name().map(str::to_string);
    assert_ne!(here.as_deref(), Some("rollbox-tenant"));
    drop(threads);
}

/// A core list parses as Linux writes one and prints back the same; cores the process
/// may not run on, reversed ranges and junk are refused with the text named.
#[test]
fn core_lists_parse_and_print() {
    let allowed = allowed_cpus();
    let first = allowed[0];
    let set = CpuSet::parse(&format!("{first}, {first}-{first}")).expect("parsed");
    assert_eq!(set.len(), 1);
    assert_eq!(set.to_string(), first.to_string());
    let all = CpuSet::parse(
        &CpuSet {
            cpus: allowed.clone(),
        }
        .to_string(),
    )
    .expect("all");
    assert_eq!(all.cpus, allowed);
    let err = CpuSet::parse("100000").expect_err("beyond the mask");
    assert!(
        err.contains("core 100000") && err.contains("may run on"),
        "{err}"
    );
    let err = CpuSet::parse("3-1").expect_err("backwards");
    assert!(err.contains("runs backwards"), "{err}");
    for junk in ["", "a", "1-", "-1", "1;2"] {
        let err = CpuSet::parse(junk).expect_err(junk);
        assert!(err.contains("core list"), "{junk:?}: {err}");
    }
    let shown = CpuSet {
        cpus: vec![0, 1, 2, 3, 6, 8, 9],
    };
    assert_eq!(shown.to_string(), "0-3,6,8-9");
    let other = CpuSet {
        cpus: vec![3, 4, 5],
    };
    let both = CpuSet::union([&shown, &other]).expect("cores");
    assert_eq!(both.to_string(), "0-6,8-9");
    assert_eq!(CpuSet::union([]), None);
}

/// Threads made for a core set run only on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_threads_stay_on_their_cores() {
    let core = allowed_cpus()[0];
    let set = CpuSet::parse(&core.to_string()).expect("parsed");
    let threads = Threads::new("a", Lane::Episodes, Some(&set)).expect("threads");
    let seen = threads
        .spawn(async { allowed_cpus() })
        .await
        .expect("joined");
    assert_eq!(seen, vec![core]);
    let nice = threads
        .spawn(async {
            // SAFETY: getpriority takes no pointers; errno is cleared first as it asks.
            unsafe {
                *libc::__errno_location() = 0;
                libc::getpriority(libc::PRIO_PROCESS, super::thread_id())
            }
        })
        .await
        .expect("joined");
    assert_eq!(nice, EPISODE_NICE);
}
