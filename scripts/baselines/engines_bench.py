"""rollbox's `openai` backend against a live vLLM server, beside vLLM's own client load, and the
embedded engine beside vLLM and llama.cpp on the same model and prompts (issue 39).

Every run generates exactly `--tokens` tokens per request (`ignore_eos`, greedy) for the same
`--rows` prompts (the built-in `arith` rows through rlvr's chat template, one sample each):

* **overhead**: `rollbox rollout --engine openai:URL --max-concurrent C` against vLLM, and the
  same token-id bodies (the prompts rollbox sent, recorded with `--record`) posted by C Python
  threads with `http.client`, interleaved A B A B for `--rounds`; tokens/s of each and what
  rollbox adds;
* **engines**: `rollbox rollout` at concurrency 1 and 8 with `--engine embedded` (the Q4_1
  GGUF), `openai:` vLLM (float32, the same weights dequantised) and `openai+llamacpp:`
  llama-cpp-python's server (the Q4_1 GGUF), tokens/s.

Servers are started here (vLLM from `--vllm-python`, llama-cpp-python's from
`--llamacpp-python`; either may be left out) on 127.0.0.1 and share the two cores with the
client, as in the live tests.

    VPY=$(scripts/install/vllm-venv.sh); MODEL=$(scripts/install/vllm-model.sh "$VPY")
    LPY=$(scripts/install/llamacpp-venv.sh)
    cargo build --release -p rollbox
    python3 scripts/baselines/engines_bench.py --rollbox target/release/rollbox \\
        --gguf ~/.cache/rollbox/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --vllm-python "$VPY" --vllm-model "$MODEL" --llamacpp-python "$LPY"
"""

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server(cmd, health, log, env=None):
    """Start `cmd` in its own process group; wait for `health` to answer."""
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                         start_new_session=True)
    deadline = time.monotonic() + 600
    while True:
        if p.poll() is not None:
            sys.exit(f"{cmd[2]} exited early; see {log.name}")
        try:
            urllib.request.urlopen(health, timeout=5).read()
            return p
        except OSError:
            if time.monotonic() > deadline:
                sys.exit(f"{cmd[2]} not ready in 600 s")
            time.sleep(1)


def stop(p):
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def rollout(a, tmp, tag, engine, concurrency, record=None):
    """Tokens/s and wall seconds of one `rollbox rollout` (the process, start to exit)."""
    out = os.path.join(tmp, tag)
    config = {"reward": "math", "gconfig": {"max_new_tokens": a.tokens, "greedy": True, "ignore_eos": True}}
    cmd = [a.rollbox, "rollout", os.path.join(ROOT, "workflows/rlvr/data/arith.jsonl"), "--out", out,
           "--engine", engine, "--tokenizer", a.gguf, "--n-samples", "1", "--max-rows", str(a.rows),
           "--max-concurrent", str(concurrency), "--batch-size", str(a.rows), "--config", json.dumps(config),
           "--quiet"]
    if record:
        cmd += ["--record", record]
    subprocess.run(["rm", "-rf", out], check=True)
    start = time.monotonic()
    subprocess.run(cmd, check=True)
    wall = time.monotonic() - start
    with open(os.path.join(out, "stats.json")) as f:
        stats = json.load(f)
    assert stats["episodes"] == {"accepted": a.rows}, stats
    return stats["generated_tokens"] / wall, wall


def client_load(url, bodies, concurrency):
    """Tokens/s of `bodies` posted by `concurrency` threads, one keep-alive connection each."""
    host, port = url.removeprefix("http://").split(":")
    queue = list(bodies)
    lock = threading.Lock()
    tokens = [0]

    def worker():
        conn = http.client.HTTPConnection(host, int(port), timeout=600)
        while True:
            with lock:
                if not queue:
                    return
                body = queue.pop()
            conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            answer = json.loads(conn.getresponse().read())
            with lock:
                tokens[0] += answer["usage"]["completion_tokens"]
    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    return tokens[0] / wall, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rollbox", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--vllm-python")
    ap.add_argument("--vllm-model")
    ap.add_argument("--llamacpp-python")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rollbox-engines-")
    servers = []
    engines = [("embedded (Q4_1)", f"embedded:{a.gguf}")]
    try:
        if a.vllm_python:
            port = free_port()
            servers.append(server(
                [a.vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", a.vllm_model,
                 "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-model-len", "2048",
                 "--enforce-eager"], f"http://127.0.0.1:{port}/health", open(os.path.join(tmp, "vllm.log"), "w"),
                {"VLLM_CPU_KVCACHE_SPACE": "2"}))
            vllm = f"http://127.0.0.1:{port}"
            engines.append(("vLLM 0.32 CPU (f32)", f"openai:{vllm}"))
            # The bodies rollbox sends, for the client baseline: its prompts, the same settings.
            record = os.path.join(tmp, "prompts.jsonl")
            rollout(a, tmp, "warm", f"openai:{vllm}", a.concurrency, record)
            with open(record) as f:
                prompts = [json.loads(line)["input_ids"] for line in f]
            bodies = [json.dumps({"prompt": p, "max_tokens": a.tokens, "temperature": 0.0, "top_k": 1,
                                  "logprobs": 0, "ignore_eos": True, "stop_token_ids": [2],
                                  "return_tokens_as_token_ids": True, "return_token_ids": True})
                      for p in prompts]
            print(f"overhead: {a.rows} requests x {a.tokens} tokens at concurrency {a.concurrency} on vLLM, "
                  f"{a.rounds} rounds interleaved")
            ours, theirs = [], []
            for r in range(a.rounds):
                theirs.append(client_load(vllm, bodies, a.concurrency)[0])
                ours.append(rollout(a, tmp, f"overhead-{r}", f"openai:{vllm}", a.concurrency)[0])
                print(f"  round {r}: python client {theirs[-1]:.1f} tok/s, rollbox rollout {ours[-1]:.1f} tok/s")
            m_ours, m_theirs = statistics.median(ours), statistics.median(theirs)
            print(f"  median: client {m_theirs:.1f}, rollbox {m_ours:.1f} tok/s: rollbox at "
                  f"{m_ours / m_theirs * 100:.1f}% of the client's throughput")
        if a.llamacpp_python:
            port = free_port()
            servers.append(server(
                [a.llamacpp_python, "-m", "llama_cpp.server", "--model", a.gguf, "--host", "127.0.0.1",
                 "--port", str(port), "--n_ctx", "2048", "--n_threads", str(os.cpu_count())],
                f"http://127.0.0.1:{port}/v1/models", open(os.path.join(tmp, "llamacpp.log"), "w")))
            engines.append(("llama-cpp-python 0.3.36 (Q4_1)", f"openai+llamacpp:http://127.0.0.1:{port}"))
        print(f"engines: {a.rows} requests x {a.tokens} tokens through rollbox rollout")
        for label, engine in engines:
            figures = []
            for c in (1, 8):
                tps, wall = rollout(a, tmp, "engine", engine, c)
                figures.append(f"{c} at once {tps:7.1f} tok/s ({wall:5.1f} s)")
            print(f"  {label:32} " + ", ".join(figures), flush=True)
    finally:
        for p in servers:
            stop(p)


if __name__ == "__main__":
    main()
