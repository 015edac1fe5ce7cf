"""rollbox's `openai` backends against live servers (issue 39): vLLM's CPU build and
llama-cpp-python's server.

Starts the server (`--server vllm`: `python -m vllm.entrypoints.openai.api_server` of
`--server-python` on the project's model dequantised to float32, `--model`; `--server
llamacpp`: `python -m llama_cpp.server` on the GGUF itself) on 127.0.0.1, then runs `rollbox
rollout` (rlvr + math) through `openai:` (vLLM) or `openai+llamacpp:` and checks, against the
server's own answers as a recording proxy between the two saw them:

* vLLM: every trajectory's prompt ids are the request's prompt and the server's
  `prompt_token_ids`, its completion ids the server's `token_ids`; llama-cpp-python (text in,
  pieces out): the server tokenizes the request's prompt text to the trajectory's prompt ids
  and detokenizes its completion ids to the answer's text;
* its logprobs are the server's `token_logprobs` (as float32), `is_truncated` is the server's
  `finish_reason == "length"`, each request carrying the workflow's `max_new_tokens`;
* a greedy answer that stops is not truncated and (vLLM, which reports it) ends with eos;
* vLLM: an episode past its timeout aborts its request (its running requests drop to 0);
  llama-cpp-python: the time its next answer waits is printed (it does not stop on a dropped
  client);
* a server killed mid-run fails the episodes with the engine's `unavailable` error after the
  backend's three tries (its default), and the run ends.

    VPY=$(scripts/install/vllm-venv.sh); MODEL=$(scripts/install/vllm-model.sh "$VPY")
    LPY=$(scripts/install/llamacpp-venv.sh)
    GGUF=~/.cache/rollbox/models/SmolLM2-135M-Instruct.Q4_1.gguf
    python3 python/tests/engines_live.py --server vllm --server-python "$VPY" \\
        --rollbox target/debug/rollbox --model "$MODEL" --gguf "$GGUF"
    python3 python/tests/engines_live.py --server llamacpp --server-python "$LPY" \\
        --rollbox target/debug/rollbox --gguf "$GGUF"

The python running it needs numpy and safetensors (the test venv's, scripts/install/test-env.sh).
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


def post(url, payload, timeout=600.0):
    req = urllib.request.Request(url, data=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


class Server:
    """The server in a process group of its own, its output in `log`."""

    def __init__(self, kind, python, model, gguf, log):
        self.kind = kind
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        if kind == "vllm":
            cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
                   "--host", "127.0.0.1", "--port", str(self.port), "--dtype", "float32",
                   "--max-model-len", "2048", "--enforce-eager",
                   "--served-model-name", os.path.basename(model.rstrip("/"))]
            ready = "/health"
        else:
            cmd = [python, "-m", "llama_cpp.server", "--model", gguf, "--host", "127.0.0.1",
                   "--port", str(self.port), "--n_ctx", "2048"]
            ready = "/v1/models"
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_LOGGING_LEVEL": "WARNING"}
        self.log = open(log, "w")
        start = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        while True:
            if self.proc.poll() is not None:
                self.fail(f"{kind} exited with {self.proc.returncode} before it was ready")
            try:
                get(self.url + ready)
                break
            except OSError:
                if time.monotonic() - start > 600:
                    self.fail(f"{kind} was not ready within 600 s")
                time.sleep(1)
        self.start_s = time.monotonic() - start
        if kind == "vllm":
            self.version = "vllm " + json.loads(get(self.url + "/version"))["version"]
        else:
            out = subprocess.run([python, "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                                 capture_output=True, text=True, check=True)
            self.version = "llama-cpp-python " + out.stdout.strip()
        self.engine = ("openai:" if kind == "vllm" else "openai+llamacpp:") + self.url

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
    """Forwards POSTs to `upstream` and keeps each `/v1/completions` body and answer."""

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
                if self.path == "/v1/completions":
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
    """`rollbox rollout` of `rows` into tmp/name; its folder, stats and batch (None if none)."""
    out = os.path.join(tmp, name)
    data = os.path.join(tmp, name + ".jsonl")
    with open(data, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    cmd = [args.rollbox, "rollout", data, "--out", out, "--engine", engine,
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


def same_answer(server, prompt, completion, req, ans):
    """Whether this exchange is the trajectory's, in the server's own terms."""
    choice = ans["choices"][0]
    if server.kind == "vllm":
        return req["prompt"] == prompt and choice["token_ids"] == completion
    tokens = post(server.url + "/extras/tokenize", {"input": req["prompt"]})["tokens"]
    text = post(server.url + "/extras/detokenize", {"tokens": completion})["text"]
    return tokens == prompt and text == choice["text"]


def check_against_server(server, batch, exchanges, max_new_tokens):
    """Each trajectory matched to one answer of the server, field by field."""
    left = list(exchanges)
    for prompt, completion, logprobs, truncated in trajectories(batch):
        match = [k for k, (req, ans) in enumerate(left)
                 if same_answer(server, prompt, completion, req, ans)]
        assert match, f"no server answer has prompt {prompt[:8]}... and completion {completion}"
        req, ans = left.pop(match[0])
        choice = ans["choices"][0]
        assert req["max_tokens"] == max_new_tokens, req
        if choice.get("prompt_token_ids") is not None:
            assert choice["prompt_token_ids"] == prompt, "the server's prompt ids"
        theirs = np.array(choice["logprobs"]["token_logprobs"], dtype=np.float32)
        assert np.array_equal(logprobs, theirs), f"logprobs {logprobs} vs the server's {theirs}"
        assert truncated == (choice["finish_reason"] == "length"), (truncated, choice["finish_reason"])
    assert not left, f"{len(left)} server answers not in the batch"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", choices=["vllm", "llamacpp"], required=True)
    ap.add_argument("--server-python", required=True, help="the python of the server's venv")
    ap.add_argument("--rollbox", required=True)
    ap.add_argument("--model", help="vllm: the folder scripts/install/vllm-model.sh made")
    ap.add_argument("--gguf", required=True, help="the model's GGUF (rollbox's tokenizer; llamacpp's model)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix=f"rollbox-{args.server}-")
    server = Server(args.server, args.server_python, args.model, args.gguf,
                    os.path.join(tmp, "server.log"))
    print(f"{server.version} ready in {server.start_s:.0f} s")
    try:
        proxy = Proxy(server.url)
        engine = server.engine.replace(server.url, proxy.url)
        rows = [
            {"messages": [{"role": "user", "content": "Tom has 3 apples and buys 4 more. How many apples does he have? Put the answer in \\boxed{}."}], "answer": "7"},
            {"messages": [{"role": "user", "content": "What is 6 times 7? Put the answer in \\boxed{}."}], "answer": "42"},
        ]
        config = {"reward": "math", "gconfig": {"max_new_tokens": 16, "temperature": 1.0}}
        _, stats, batch = rollout(args, tmp, "sampled", engine, rows, config, ["--n-samples", "2"])
        assert stats["episodes"] == {"accepted": 4}, stats
        assert len(proxy.exchanges) == 4, len(proxy.exchanges)
        check_against_server(server, batch, proxy.exchanges, 16)
        reasons = collections.Counter(a["choices"][0]["finish_reason"] for _, a in proxy.exchanges)
        print(f"2 rows x 2 samples at temperature 1: ids, logprobs and truncation are the server's ({dict(reasons)})")

        proxy.exchanges.clear()
        stop_row = [{"messages": [{"role": "user", "content": "Reply with the single word yes."}], "answer": "yes"}]
        greedy = {"reward": "math", "gconfig": {"max_new_tokens": 64, "greedy": True}}
        _, stats, batch = rollout(args, tmp, "greedy", engine, stop_row, greedy, ["--n-samples", "1"])
        check_against_server(server, batch, proxy.exchanges, 64)
        (_, completion, _, truncated), = trajectories(batch)
        choice = proxy.exchanges[0][1]["choices"][0]
        assert choice["finish_reason"] == "stop" and not truncated, choice
        if server.kind == "vllm":
            assert completion[-1] == EOS, completion
        print(f"greedy: stopped after {len(completion)} tokens, not truncated")

        # An episode past its timeout: its request is dropped. (llama-cpp-python generates
        # ~20 tokens/s here and finishes a dropped request before the next: 300 tokens outlast
        # the 3 s timeout and the 2 s before the kill below without holding the server a minute.)
        budget = 1500 if server.kind == "vllm" else 300
        long = {"reward": "math", "gconfig": {"max_new_tokens": budget, "ignore_eos": True}}
        if server.kind == "vllm":
            seen = []

            def watch():
                while len(seen) < 400:
                    try:
                        seen.append(server.running())
                    except OSError:
                        pass
                    time.sleep(0.05)
            threading.Thread(target=watch, daemon=True).start()
        start = time.monotonic()
        _, stats, _ = rollout(args, tmp, "timeout", server.engine, stop_row, long,
                              ["--n-samples", "1", "--timeout", "3s"])
        ended = time.monotonic()
        assert stats["episodes"] == {"timeout": 1}, stats
        if server.kind == "vllm":
            assert max(seen, default=0) >= 1, "the request was running"
            # The request asked for far more tokens than vLLM's CPU build makes in a minute; a
            # minute leaves room for any load (issue 52).
            deadline = ended + 60
            while server.running() > 0:
                assert time.monotonic() < deadline, "vLLM still generates the timed-out request 60 s on"
                time.sleep(0.1)
            print(f"timeout: episode ended at {ended - start:.1f} s, vLLM's running requests back to 0 "
                  f"within {time.monotonic() - ended:.1f} s")
        else:
            post(server.url + "/v1/completions", {"prompt": "Hi", "max_tokens": 1})
            print(f"timeout: episode ended at {ended - start:.1f} s; the server's next one-token "
                  f"answer came {time.monotonic() - ended:.1f} s later (it finishes a dropped request)")

        # The server killed mid-run: the backend's tries fail, the episodes fail with the
        # engine's error, the run ends.
        def kill_soon():
            # vLLM: once its running set holds the requests; llama-cpp-python: 2 s in.
            deadline = time.monotonic() + (60 if server.kind == "vllm" else 2)
            while time.monotonic() < deadline:
                try:
                    if server.kind == "vllm" and server.running() >= 1:
                        break
                except OSError:
                    pass
                time.sleep(0.1)
            server.kill()
        killer = threading.Thread(target=kill_soon)
        killer.start()
        start = time.monotonic()
        out, stats, _ = rollout(args, tmp, "killed", server.engine, stop_row, long, ["--n-samples", "2"])
        killer.join()
        assert stats["episodes"] == {"guest_error": 2}, stats
        with open(os.path.join(out, "dropped-rows.jsonl")) as f:
            dropped = f.read()
        assert "unavailable" in dropped and "failed after 3 attempt(s)" in dropped, dropped
        print(f"killed server: both episodes failed `unavailable` after 3 tries, the run ended in "
              f"{time.monotonic() - start:.1f} s")
    finally:
        server.kill()
    print(f"{args.server} live: ok")


if __name__ == "__main__":
    main()
