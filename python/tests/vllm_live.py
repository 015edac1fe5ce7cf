"""rollbox's `openai` backend against a live vLLM server (issue 39).

Starts vLLM's CPU build (`python -m vllm.entrypoints.openai.api_server`, this interpreter's
vllm) on 127.0.0.1 with the project's model dequantised to float32, then runs `rollbox rollout`
(rlvr + math) through the `openai` backend and checks, against the server's own answers as a
recording proxy between the two saw them:

* every trajectory's prompt ids are the request's prompt and the server's `prompt_token_ids`,
  its completion ids the server's `token_ids`, its logprobs the server's `token_logprobs`
  (as float32), and `is_truncated` is the server's `finish_reason == "length"`, each request
  carrying the workflow's `max_new_tokens`;
* a greedy answer that stops ends with the eos id and is not truncated;
* an episode past its timeout aborts its request: vLLM's running requests drop to 0;
* a server killed mid-run fails the episodes with the engine's `unavailable` error after the
  backend's three tries (its default), and the run ends.

    PY=$(scripts/install/vllm-venv.sh); MODEL=$(scripts/install/vllm-model.sh "$PY")
    "$PY" python/tests/vllm_live.py --rollbox target/debug/rollbox --model "$MODEL" \\
        --gguf ~/.cache/rollbox/models/SmolLM2-135M-Instruct.Q4_1.gguf

Prints what it checked and the server's start time; exits non-zero on the first failure.
"""

import argparse
import collections
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import numpy as np
from safetensors.numpy import load_file

EOS = 2  # SmolLM2-Instruct's <|im_end|>, its eos and pad


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


class Vllm:
    """vLLM's OpenAI server in a process group of its own, its output in `log`."""

    def __init__(self, model, log):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_LOGGING_LEVEL": "WARNING"}
        self.log = open(log, "w")
        start = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
             "--host", "127.0.0.1", "--port", str(self.port), "--dtype", "float32",
             "--max-model-len", "2048", "--enforce-eager",
             "--served-model-name", os.path.basename(model.rstrip("/"))],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        while True:
            if self.proc.poll() is not None:
                self.fail(f"vLLM exited with {self.proc.returncode} before it was ready")
            try:
                get(self.url + "/health")
                break
            except OSError:
                if time.monotonic() - start > 600:
                    self.fail("vLLM was not ready within 600 s")
                time.sleep(1)
        self.start_s = time.monotonic() - start
        self.version = json.loads(get(self.url + "/version"))["version"]

    def fail(self, message):
        self.kill()
        self.log.flush()
        with open(self.log.name) as f:
            tail = f.read()[-6000:]
        sys.exit(f"{message}; its log ends:\n{tail}")

    def running(self):
        """vLLM's `vllm:num_requests_running`, summed over its label sets."""
        text = get(self.url + "/metrics").decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("vllm:num_requests_running"))

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class Proxy:
    """Forwards `POST /v1/completions` to `upstream` and keeps each body and answer."""

    def __init__(self, upstream):
        self.exchanges = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                req = urllib.request.Request(upstream + self.path, data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=600) as r:
                    answer, status = r.read(), r.status
                proxy.exchanges.append((json.loads(body), json.loads(answer)))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def rollout(args, tmp, name, engine, rows, config, extra=(), timeout=600):
    """`rollbox rollout` of `rows` into tmp/name; its stats, and its batch (None if none)."""
    out = os.path.join(tmp, name)
    data = os.path.join(tmp, name + ".jsonl")
    with open(data, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    cmd = [args.rollbox, "rollout", data, "--out", out, "--engine", f"openai:{engine}",
           "--tokenizer", args.gguf, "--workflow", "rlvr", "--reward", "math",
           "--config", json.dumps(config), "--quiet", *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    with open(os.path.join(out, "stats.json")) as f:
        stats = json.load(f)
    batch = os.path.join(out, "batch-000000.safetensors")
    return out, stats, (load_file(batch) if os.path.exists(batch) else None)


def trajectories(batch):
    """Per row of the batch: prompt ids, completion ids, completion logprobs, truncated."""
    out = []
    for i in range(batch["input_ids"].shape[0]):
        keep = batch["attention_mask"][i].astype(bool)
        ids = batch["input_ids"][i][keep]
        gen = batch["loss_mask"][i][keep].astype(bool)
        first = int(np.argmax(gen))
        assert gen[first:].all() and not gen[:first].any(), "one prompt, then one completion"
        out.append((ids[:first].tolist(), ids[first:].tolist(),
                    batch["logprobs"][i][keep][first:], bool(batch["is_truncated"][i])))
    return out


def check_against_server(batch, exchanges, max_new_tokens):
    """Each trajectory matched to one answer of the server, field by field."""
    left = list(exchanges)
    for prompt, completion, logprobs, truncated in trajectories(batch):
        match = [k for k, (req, ans) in enumerate(left)
                 if req["prompt"] == prompt and ans["choices"][0]["token_ids"] == completion]
        assert match, f"no server answer has prompt {prompt[:8]}... and completion {completion}"
        req, ans = left.pop(match[0])
        choice = ans["choices"][0]
        assert req["max_tokens"] == max_new_tokens, req
        if choice.get("prompt_token_ids") is not None:
            assert choice["prompt_token_ids"] == prompt, "the server's prompt ids"
        server = np.array(choice["logprobs"]["token_logprobs"], dtype=np.float32)
        assert np.array_equal(logprobs, server), f"logprobs {logprobs} vs the server's {server}"
        assert truncated == (choice["finish_reason"] == "length"), (truncated, choice["finish_reason"])
    assert not left, f"{len(left)} server answers not in the batch"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rollbox", required=True)
    ap.add_argument("--model", required=True, help="the folder scripts/install/vllm-model.sh made")
    ap.add_argument("--gguf", required=True, help="the same model's GGUF, for rollbox's tokenizer")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rollbox-vllm-")
    vllm = Vllm(args.model, os.path.join(tmp, "vllm.log"))
    print(f"vllm {vllm.version} ready in {vllm.start_s:.0f} s")
    try:
        proxy = Proxy(vllm.url)
        rows = [
            {"messages": [{"role": "user", "content": "Tom has 3 apples and buys 4 more. How many apples does he have? Put the answer in \\boxed{}."}], "answer": "7"},
            {"messages": [{"role": "user", "content": "What is 6 times 7? Put the answer in \\boxed{}."}], "answer": "42"},
        ]
        config = {"reward": "math", "gconfig": {"max_new_tokens": 16, "temperature": 1.0}}
        _, stats, batch = rollout(args, tmp, "sampled", proxy.url, rows, config, ["--n-samples", "2"])
        assert stats["episodes"] == {"accepted": 4}, stats
        assert len(proxy.exchanges) == 4, len(proxy.exchanges)
        check_against_server(batch, proxy.exchanges, 16)
        reasons = collections.Counter(a["choices"][0]["finish_reason"] for _, a in proxy.exchanges)
        print(f"2 rows x 2 samples at temperature 1: ids, logprobs and truncation are the server's ({dict(reasons)})")

        proxy.exchanges.clear()
        stop_row = [{"messages": [{"role": "user", "content": "Reply with the single word yes."}], "answer": "yes"}]
        greedy = {"reward": "math", "gconfig": {"max_new_tokens": 64, "greedy": True}}
        _, stats, batch = rollout(args, tmp, "greedy", proxy.url, stop_row, greedy, ["--n-samples", "1"])
        check_against_server(batch, proxy.exchanges, 64)
        (_, completion, _, truncated), = trajectories(batch)
        choice = proxy.exchanges[0][1]["choices"][0]
        assert choice["finish_reason"] == "stop" and completion[-1] == EOS and not truncated, choice
        print(f"greedy: stopped after {len(completion)} tokens on eos, not truncated")

        # An episode past its timeout: its request is dropped and vLLM stops generating it.
        long = {"reward": "math", "gconfig": {"max_new_tokens": 1500, "ignore_eos": True}}
        seen = []

        def watch():
            while len(seen) < 400:
                try:
                    seen.append(vllm.running())
                except OSError:
                    pass
                time.sleep(0.05)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        start = time.monotonic()
        _, stats, _ = rollout(args, tmp, "timeout", vllm.url, stop_row, long,
                              ["--n-samples", "1", "--timeout", "3s"])
        ended = time.monotonic()
        assert stats["episodes"] == {"timeout": 1}, stats
        assert max(seen, default=0) >= 1, "the request was running"
        deadline = ended + 5
        while vllm.running() > 0:
            assert time.monotonic() < deadline, "vLLM still generates the timed-out request 5 s on"
            time.sleep(0.1)
        print(f"timeout: episode ended at {ended - start:.1f} s, vLLM's running requests back to 0 "
              f"within {time.monotonic() - ended:.1f} s")

        # The server killed mid-run: the backend's tries fail, the episodes fail with the
        # engine's error, the run ends.
        def kill_when_running():
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if vllm.running() >= 1:
                        break
                except OSError:
                    pass
                time.sleep(0.1)
            vllm.kill()
        killer = threading.Thread(target=kill_when_running)
        killer.start()
        start = time.monotonic()
        out, stats, _ = rollout(args, tmp, "killed", vllm.url, stop_row, long, ["--n-samples", "2"])
        killer.join()
        assert stats["episodes"] == {"guest_error": 2}, stats
        with open(os.path.join(out, "dropped-rows.jsonl")) as f:
            dropped = f.read()
        assert "unavailable" in dropped and "failed after 3 attempt(s)" in dropped, dropped
        print(f"killed server: both episodes failed `unavailable` after 3 tries, the run ended in "
              f"{time.monotonic() - start:.1f} s")
    finally:
        vllm.kill()
    print("vllm live: ok")


if __name__ == "__main__":
    main()
