#!/usr/bin/env python3
"""A/B latency of `rollbox serve` answering one 64-episode request (16 rows x 4 samples, the
rlvr workflow + sandboxed math reward) for two builds, interleaved request by request so the
VM's slow phases hit both alike. Python 3.11, stdlib only.

    python3 scripts/baselines/serve_bench.py --a OLD_BINARY --b NEW_BINARY [--requests 40] [--rows 16]
        [--n-samples 4] [--model GGUF] [--work target/bench/serve]

The engine is deterministic and fast so the request's own path shows: the embedded engine is
recorded once (`rollbox rollout --record`) on the first --rows rows of
workflows/rlvr/data/arith.jsonl with --n-samples answers each, then both servers replay it
(`--engine replay:FILE --tokenizer MODEL.gguf`). Run from the repository root (default
component paths). Prints each build's median, p10 and p90 request latency and the ratio B/A.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request


def start(binary, replay, model, n_samples, log):
    p = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--engine", f"replay:{replay}",
         "--tokenizer", model, "--n-samples", str(n_samples)],
        stdout=subprocess.PIPE, stderr=log, text=True)
    line = p.stdout.readline()
    if not line.startswith("listening on "):
        p.kill()
        sys.exit(f"{binary} serve did not start: {line!r}")
    return p, line.split()[-1]


def post(url, body):
    t = time.perf_counter()
    req = urllib.request.Request(url + "/v1/episodes", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        data = r.read()
        if r.status != 200:
            sys.exit(f"{url}: HTTP {r.status}")
    dt = time.perf_counter() - t
    n = int.from_bytes(data[:8], "little")
    meta = json.loads(data[8:8 + n])["__metadata__"]
    return dt, len(json.loads(meta["trajectories"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--n-samples", type=int, default=4)
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/rollbox/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--work", default="target/bench/serve")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    dataset = os.path.join(a.work, "rows.jsonl")
    with open("workflows/rlvr/data/arith.jsonl") as f:
        rows = [json.loads(l) for l in f][: a.rows]
    with open(dataset, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    replay = os.path.join(a.work, "replay.jsonl")
    if not os.path.exists(replay):
        out = os.path.join(a.work, "record-out")
        subprocess.run([a.b, "rollout", dataset, "--out", out, "--n-samples", str(a.n_samples),
                        "--record", replay, "--quiet"], check=True)
    body = json.dumps({"rows": rows}).encode()
    log = open(os.path.join(a.work, "serve.log"), "w")
    servers = {k: start(b, replay, a.model, a.n_samples, log) for k, b in (("A", a.a), ("B", a.b))}
    times = {"A": [], "B": []}
    try:
        for k in ("A", "B"):  # warm-up: first-request allocations
            post(servers[k][1], body)
        for i in range(a.requests):
            for k in (("A", "B") if i % 2 == 0 else ("B", "A")):
                dt, n = post(servers[k][1], body)
                if n != a.rows * a.n_samples:
                    sys.exit(f"{k}: {n} trajectories, expected {a.rows * a.n_samples}")
                times[k].append(dt)
    finally:
        for p, _ in servers.values():
            p.kill()
    for k, b in (("A", a.a), ("B", a.b)):
        t = sorted(times[k])
        q = statistics.quantiles(t, n=10)
        print(f"{k} {b}: {a.rows * a.n_samples} episodes per request, median "
              f"{statistics.median(t) * 1e3:.1f} ms, p10 {q[0] * 1e3:.1f} ms, "
              f"p90 {q[-1] * 1e3:.1f} ms ({len(t)} requests)")
    print(f"B/A median latency: {statistics.median(times['B']) / statistics.median(times['A']):.3f}")


if __name__ == "__main__":
    main()
