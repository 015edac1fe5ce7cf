use super::*;

#[tokio::test]
async fn the_gate_takes_tenants_in_turn() {
    let name = |n: &str| -> Arc<str> { Arc::from(n) };
    let gate = FairGate::new(1);
    let held = gate.enter(&name("a"), usize::MAX).await;
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    // `a` queues five calls, then `b` and `c` one each: they pass a, b, c, a, a, a, a.
    for n in ["a", "a", "a", "a", "a", "b", "c"] {
        let (gate, order, n) = (gate.clone(), order.clone(), name(n));
        tasks.push(tokio::spawn(async move {
            let _pass = gate.enter(&n, usize::MAX).await;
            order.lock().expect("order").push(n.to_string());
            tokio::task::yield_now().await;
        }));
        tokio::task::yield_now().await;
    }
    // A waiter that gives up (its client went away) is skipped, its place not lost.
    let gone = tokio::spawn({
        let (gate, d) = (gate.clone(), name("d"));
        async move {
            let _pass = gate.enter(&d, usize::MAX).await;
        }
    });
    tokio::task::yield_now().await;
    gone.abort();
    let _ = gone.await;
    // `a`'s first call held its place for an hour: it has used the most time (however long
    // a loaded machine keeps `b`'s and `c`'s calls).
    gate.charge(&name("a"), std::time::Duration::from_secs(3600));
    drop(held);
    for t in tasks {
        t.await.expect("task");
    }
    let order = order.lock().expect("order").clone();
    assert_eq!(
        order[..2],
        ["b", "c"],
        "the tenants that used no time first: {order:?}"
    );
    assert_eq!(order[2..], ["a", "a", "a", "a", "a"], "{order:?}");
    // Every place came back.
    let _one = gate.enter(&name("x"), usize::MAX).await;
}

#[tokio::test]
async fn the_gate_shares_time_not_calls() {
    let (slow, quick) = (Arc::<str>::from("slow"), Arc::<str>::from("quick"));
    let gate = FairGate::new(1);
    // A pass counts the time it is held (at least the 50 ms slept: load only adds).
    {
        let _p = gate.enter(&slow, usize::MAX).await;
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(gate.used(&slow) >= std::time::Duration::from_millis(50));
    // `slow` has used an hour of the place, `quick` nothing: when both wait, every one of
    // `quick`'s calls goes first (however long a loaded machine keeps each).
    gate.charge(&slow, std::time::Duration::from_secs(3600));
    let held = gate.enter(&slow, usize::MAX).await;
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for n in [&slow, &slow, &quick, &quick, &quick] {
        let (gate, order, n) = (gate.clone(), order.clone(), n.clone());
        tasks.push(tokio::spawn(async move {
            let _pass = gate.enter(&n, usize::MAX).await;
            order.lock().expect("order").push(n.to_string());
        }));
        tokio::task::yield_now().await;
    }
    drop(held);
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(
        *order.lock().expect("order"),
        ["quick", "quick", "quick", "slow", "slow"]
    );
}

#[tokio::test]
async fn the_gate_counts_calls_in_flight() {
    let (slow, quick) = (Arc::<str>::from("slow"), Arc::<str>::from("quick"));
    let gate = FairGate::new(3);
    // `slow` holds two places with calls still running, `quick` one.
    let s1 = gate.enter(&slow, usize::MAX).await;
    let s2 = gate.enter(&slow, usize::MAX).await;
    let q1 = gate.enter(&quick, usize::MAX).await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for n in [&quick, &slow] {
        let (gate, order, n) = (gate.clone(), order.clone(), n.clone());
        tasks.push(tokio::spawn(async move {
            let _pass = gate.enter(&n, usize::MAX).await;
            order.lock().expect("order").push(n.to_string());
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }));
        tokio::task::yield_now().await;
    }
    // `quick`'s call ends after 20 ms; `slow`'s two have held theirs 40 ms together and
    // go on: the freed place is `quick`'s, though `slow` has finished no call yet.
    drop(q1);
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    assert_eq!(*order.lock().expect("order"), ["quick"]);
    drop((s1, s2));
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(*order.lock().expect("order"), ["quick", "slow"]);
}

#[tokio::test]
async fn the_gate_holds_a_tenant_to_its_cap() {
    let (a, b) = (Arc::<str>::from("a"), Arc::<str>::from("b"));
    let gate = FairGate::new(4);
    let first = gate.enter(&a, 1).await;
    // Places are free, but `a` holds its one: its next call waits, `b`'s pass at once.
    let second = tokio::spawn({
        let (gate, a) = (gate.clone(), a.clone());
        async move { gate.enter(&a, 1).await }
    });
    tokio::task::yield_now().await;
    let b1 = gate.enter(&b, 8).await;
    let b2 = gate.enter(&b, 8).await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(!second.is_finished(), "a is at its cap of one");
    drop(first);
    let second = tokio::time::timeout(std::time::Duration::from_secs(5), second)
        .await
        .expect("a's next call passes once its first ends")
        .expect("task");
    drop((second, b1, b2));
    // Every place came back: four calls of a tenant with no cap pass (the fourth once
    // `a`, which asked a moment ago, has not asked again within the reserve window).
    let all: Vec<_> = futures_all(&gate, &b, 4).await;
    assert_eq!(all.len(), 4);
}

/// A reload that removes tenants removes what the gate kept of them, but for one with a
/// call still in flight.
#[tokio::test]
async fn the_gate_forgets_removed_tenants() {
    let gate = FairGate::new(4);
    let names: Vec<Arc<str>> = ["a", "b", "c"].into_iter().map(Arc::from).collect();
    for n in &names {
        drop(gate.enter(n, usize::MAX).await);
    }
    let held = gate.enter(&names[2], usize::MAX).await;
    assert_eq!(gate.known(), 3);
    gate.forget_all_but(&["a".to_string()]);
    assert_eq!(gate.known(), 2, "b is gone, c has a call in flight");
    drop(held);
    gate.forget_all_but(&["a".to_string()]);
    assert_eq!(gate.known(), 1);
}

/// With two places, a tenant whose calls spin cannot hold both while another tenant is
/// calling: the last place waits for the other's next call, and goes to the spinner once
/// the other has not asked for [`RESERVE_WINDOW`].
#[tokio::test]
async fn the_gate_keeps_the_last_place_for_a_tenant_calling() {
    let (spin, calls) = (Arc::<str>::from("spin"), Arc::<str>::from("calls"));
    let gate = FairGate::new(2);
    drop(gate.enter(&calls, usize::MAX).await);
    let s1 = gate.enter(&spin, usize::MAX).await;
    let s2 = tokio::spawn({
        let (gate, spin) = (gate.clone(), spin.clone());
        async move { gate.enter(&spin, usize::MAX).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!s2.is_finished(), "the last place is kept for `calls`");
    let c = tokio::time::timeout(Duration::from_millis(100), gate.enter(&calls, usize::MAX))
        .await
        .expect("`calls` finds its place at once");
    drop(c);
    let asked = Instant::now();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !s2.is_finished(),
        "kept again for `calls`, which just called"
    );
    let s2 = tokio::time::timeout(Duration::from_secs(5), s2)
        .await
        .expect("the spinner gets it when `calls` stops asking")
        .expect("task");
    assert!(asked.elapsed() >= RESERVE_WINDOW - Duration::from_millis(50));
    drop((s1, s2));
}

async fn futures_all(gate: &Arc<FairGate>, t: &Arc<str>, n: usize) -> Vec<GatePass> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            tokio::time::timeout(std::time::Duration::from_secs(5), gate.enter(t, usize::MAX))
                .await
                .expect("a free place"),
        );
    }
    out
}
