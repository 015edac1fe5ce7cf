#!/usr/bin/env python3
"""Load on `rollbox serve`'s reward endpoint (`POST /v1/rewards`, the Rust `math` reward):
requests/s, scored completions/s and request p50/p99 at each number of concurrent keep-alive
connections and each batch size; then the same with two tenants, the good one at every point
alone and beside the hostile one's calls spinning to their timeout; then the good tenant's
single calls beside the hostile one's flood of episodes that fill their memory and spin to
their timeout. Python 3.11, stdlib only; the client is threads with one connection each, so
on a 2-core VM it shares the CPU with the server (said with the figures).

    cargo build --release -p rollbox
    python3 scripts/serve_load.py [--rollbox target/release/rollbox] [--connections 1,16,128]
        [--batches 1,64] [--seconds 5]

Prints one line per (connections, batch): requests/s, completions/s, p50 and p99 ms, errors
(non-200 answers, timeouts, resets).
"""

import argparse
import hashlib
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start(binary, args, env=None):
    p = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    line = p.stdout.readline().strip()
    if not line.startswith("listening on http://"):
        p.kill()
        sys.exit(f"serve did not start: {line!r}")
    host, port = line.removeprefix("listening on http://").rsplit(":", 1)
    return p, host, int(port)


def body(batch, reward="math"):
    items = []
    for i in range(batch):
        answer = 40 + i % 60
        text = f"She sold {answer // 2} and {answer - answer // 2}, so \\boxed{{{answer if i % 3 else answer + 1}}}."
        items.append({"completion": text, "answer": str(answer)})
    return json.dumps({"reward": reward, "items": items}).encode()


def load(host, port, connections, payload, seconds, headers=None, timeout=60.0):
    """Each of `connections` threads posts `payload` on its own keep-alive connection for
    `seconds`; returns the latencies (s) of the answers and the error count."""
    latencies, errors = [], [0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    hdrs = {"Content-Type": "application/json", **(headers or {})}

    def worker():
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        mine, bad = [], 0
        while time.monotonic() < stop:
            t = time.perf_counter()
            try:
                conn.request("POST", "/v1/rewards", payload, hdrs)
                r = conn.getresponse()
                r.read()
                if r.status == 200:
                    mine.append(time.perf_counter() - t)
                else:
                    bad += 1
            except (OSError, http.client.HTTPException):
                bad += 1
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=timeout)
        conn.close()
        with lock:
            latencies.extend(mine)
            errors[0] += bad

    threads = [threading.Thread(target=worker) for _ in range(connections)]
    start_t = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, errors[0], time.monotonic() - start_t


def p99(latencies):
    lat = sorted(latencies)
    return lat[min(len(lat) - 1, int(len(lat) * 0.99))]


def report(label, latencies, errors, elapsed, batch):
    n = len(latencies)
    if not n:
        print(f"{label}: no answer, {errors} errors")
        return
    p50 = statistics.median(latencies) * 1e3
    p99_ms = p99(latencies) * 1e3
    print(f"{label}: {n / elapsed:8.1f} requests/s, {n * batch / elapsed:9.1f} completions/s, "
          f"p50 {p50:7.2f} ms, p99 {p99_ms:7.2f} ms, {errors} errors")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rollbox", default=os.path.join(ROOT, "target/release/rollbox"))
    ap.add_argument("--connections", default="1,16,128")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--spin", default=os.path.join(
        ROOT, "target/wasm-guests/wasm32-wasip2/guest/reward_spin.wasm"))
    ap.add_argument("--loop", default=os.path.join(
        ROOT, "target/wasm-guests/wasm32-wasip2/guest/adv_loop.wasm"))
    a = ap.parse_args()
    conns = [int(c) for c in a.connections.split(",")]
    batches = [int(b) for b in a.batches.split(",")]
    cache = tempfile.mkdtemp()
    env = {**os.environ, "ROLLBOX_CACHE_DIR": cache}

    proc, host, port = start(a.rollbox, ["--reward", "math=math", "--engine", "embedded",
                                         "--max-connections-per-ip", "1024"], env)
    try:
        print(f"one tenant (no --tenants), math reward, {os.cpu_count()} cores shared with the client")
        for batch in batches:
            payload = body(batch)
            load(host, port, 4, payload, 1.0)  # warm: compile cache, instances
            for c in conns:
                lat, err, el = load(host, port, c, payload, a.seconds)
                report(f"connections {c:4d} batch {batch:3d}", lat, err, el, batch)
    finally:
        proc.kill()
        proc.wait()

    if not os.path.exists(a.spin):
        print(f"two tenants: skipped ({a.spin} is built by `cargo test --workspace`)")
        return
    for hostile_quota in ("", "max_reward_calls_in_flight = 1\n"):
        two_tenants(a, env, cache, hostile_quota, conns, batches)
    floods = [("max_episodes_in_flight = 1\n", None), ("", None)]
    if len(os.sched_getaffinity(0)) > 1:
        # The hostile tenant's episodes on the last core only: the server keeps the others.
        last = max(os.sched_getaffinity(0))
        floods.append((f'episode_cpus = "{last}"\n', last))
    for hostile_quota, set_apart in floods:
        episode_flood(a, env, cache, hostile_quota, set_apart=set_apart)


def tenants_file(cache, hostile_quota):
    """Two tenants, `good` and `hostile` (keys `good-key`, `hostile-key`); the hostile one's
    entry gets `hostile_quota` too."""
    keys = {"good": "good-key", "hostile": "hostile-key"}
    tenants = os.path.join(cache, "tenants.toml")
    with open(tenants, "w") as f:
        for name, key in keys.items():
            f.write(f'[[tenant]]\nname = "{name}"\nkey_sha256 = ["{hashlib.sha256(key.encode()).hexdigest()}"]\n'
                    "max_requests_in_flight = 256\n" + (hostile_quota if name == "hostile" else "") + "\n")
    os.chmod(tenants, 0o600)
    return tenants


def episode_flood(a, env, cache, hostile_quota, fill=True, set_apart=None):
    """The issue's noisy neighbour: the good tenant's reward calls one at a time (batch 1, one
    connection) alone, then while the hostile tenant floods with episodes that fill their
    memory cap (64 MiB; `fill=False`: not) and spin to their 1 s timeout: four connections
    each posting 32 episodes again as soon as the last are answered, for the whole window.
    `set_apart`: the core the hostile tenant's episodes are pinned to; the load client stays
    off it too once the server has started, as a trainer on another machine would."""
    if not os.path.exists(a.loop):
        print(f"episode flood: skipped ({a.loop} is built by `cargo test --workspace`)")
        return
    tenants = tenants_file(cache, 'max_memory = "64MiB"\n' + hostile_quota)
    label = hostile_quota.strip() or "no episode quota"
    print(f"two tenants, episode flood (hostile tenant with {label}{'' if fill else ', no memory fill'})")
    proc, host, port = start(a.rollbox, [
        "--tenants", tenants, "--workflow", a.loop, "--timeout", "1s", "--reward", "math=math",
        "--engine", "embedded", "--max-connections-per-ip", "1024"], env)
    client_cores = os.sched_getaffinity(0)
    if set_apart is not None:
        os.sched_setaffinity(0, client_cores - {set_apart})
    stop = threading.Event()
    answered = [0]
    rows = json.dumps({"rows": [{"messages": [{"role": "user", "content": "x"}], "fill": fill}] * 8,
                       "n_samples": 4}).encode()

    def flooder():
        conn = http.client.HTTPConnection(host, port, timeout=300)
        while not stop.is_set():
            try:
                conn.request("POST", "/v1/episodes", rows, {"Content-Type": "application/json",
                                                            "Authorization": "Bearer hostile-key"})
                conn.getresponse().read()
                answered[0] += 1
            except (OSError, http.client.HTTPException):
                return
    floods = []
    try:
        good = {"Authorization": "Bearer good-key"}
        payload = body(1)
        load(host, port, 1, payload, 1.0, good)
        alone = load(host, port, 1, payload, a.seconds, good)
        report("  good alone, 1 connection batch 1", *alone, 1)
        floods = [threading.Thread(target=flooder, daemon=True) for _ in range(4)]
        for t in floods:
            t.start()
        time.sleep(1.5)
        beside = load(host, port, 1, payload, a.seconds, good)
        report("  good beside 4 connections of 32 episodes each, filling 64 MiB and spinning", *beside, 1)
        print(f"  the hostile tenant had {answered[0]} requests of 32 episodes answered meanwhile")
        if alone[0] and beside[0]:
            print(f"  p99 beside / alone: {p99(beside[0]) / p99(alone[0]):.2f}x")
    finally:
        stop.set()
        proc.kill()
        proc.wait()
        os.sched_setaffinity(0, client_cores)


def two_tenants(a, env, cache, hostile_quota, conns, batches):
    """The good tenant's load at each (connections, batch) alone, then the same again beside
    the hostile tenant's flood of spinning calls (16 connections of 64 calls spinning to a
    300 ms timeout, for the whole window); the hostile tenant's entry gets `hostile_quota`."""
    tenants = tenants_file(cache, hostile_quota)
    label = f"hostile tenant with {hostile_quota.strip()}" if hostile_quota else "no quota but the turns"
    print(f"two tenants ({label})")
    proc, host, port = start(a.rollbox, [
        "--tenants", tenants, "--reward", "math=math",
        "--reward", f"spin={a.spin},timeout=300ms,retries=0", "--engine", "embedded",
        "--max-connections-per-ip", "1024"], env)
    points = [(c, b) for b in batches for c in conns]
    result = {}
    t = None
    try:
        good = {"Authorization": "Bearer good-key"}
        hostile = {"Authorization": "Bearer hostile-key"}
        load(host, port, 4, body(64), 1.0, good)
        alone = {}
        for c, b in points:
            alone[(c, b)] = load(host, port, c, body(b), a.seconds, good)
            report(f"  good alone,  connections {c:4d} batch {b:3d}", *alone[(c, b)], b)
        flood = body(64, reward="spin")

        def flooder():
            result["flood"] = load(host, port, 16, flood, a.seconds * len(points) + 2, hostile,
                                   timeout=120)

        t = threading.Thread(target=flooder)
        t.start()
        time.sleep(1.0)
        for c, b in points:
            beside = load(host, port, c, body(b), a.seconds, good)
            report(f"  good beside, connections {c:4d} batch {b:3d}", *beside, b)
            if alone[(c, b)][0] and beside[0]:
                print(f"    p99 beside / alone: {p99(beside[0]) / p99(alone[(c, b)][0]):.2f}x")
    finally:
        # The hostile requests still queued would take minutes: stop the server under them.
        proc.kill()
        proc.wait()
    if t is not None:
        t.join()
    flat, _, _ = result.get("flood", ([], 0, 0))
    print(f"  the hostile tenant had {len(flat)} requests answered while it flooded "
          "(the rest were cut when the server stopped)")


if __name__ == "__main__":
    main()
