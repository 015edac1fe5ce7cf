#!/usr/bin/env python3
"""Record llama-cpp-python server answers for the `openai` backend's tests.

Run with the interpreter of a venv that has llama-cpp-python[server] installed:

    ~/.cache/rollbox/llamacpp-venv/bin/python scripts/record_openai_fixtures.py \
        [--model ~/.cache/rollbox/models/SmolLM2-135M-Instruct.Q4_1.gguf] \
        [--out tests/fixtures/engines/openai/llamacpp_python.json]

It starts llama-cpp-python's own server app (`llama_cpp.server.app.create_app`, the app that
`python -m llama_cpp.server` runs) under uvicorn on 127.0.0.1 in this process, sends the
requests that `OpenAiBackend` in `OpenAiServer::LlamaCppPython` mode sends (the same JSON
bodies, key for key), saves each request with the server's answer, and stops the server.

Reference token ids: the server reports output tokens only as decoded text, so the script
wraps `llama_cpp.Llama.generate` (the sampler loop the server's completion runs through) and
records the ids it yields for each request. Those ids, not anything the Rust code computes,
are the expected `output_tokens` in the tests. The ids the sampler yields past the reported
ones (the end-of-generation token llama-cpp-python drops) are kept as `unreported_tail`.

It also records the server's `/extras/tokenize` answers for every prompt and output piece and
its `/extras/detokenize` answers for the reference ids, which the backend uses to recover ids,
and the server's rejection of a token-id prompt.
"""

import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

import llama_cpp
import uvicorn
from llama_cpp.server.app import create_app
from llama_cpp.server.settings import ModelSettings, ServerSettings

DEFAULT_MODEL = os.path.expanduser("~/.cache/rollbox/models/SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_OUT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "..",
    "tests",
    "fixtures",
    "engines",
    "openai",
    "llamacpp_python.json",
)

# SmolLM2-Instruct: <|im_end|> is eos and pad (id 2); the host adds it to stop_token_ids.
STOP_IDS = [2]


def chat(user):
    return f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


# (name, prompt text, sampling) with rollbox's SamplingParams fields.
CASES = [
    ("greedy_stop", chat("What is 2+2?"), dict(max_new_tokens=32, greedy=True)),
    ("sampled_seed", chat("Name a color."), dict(max_new_tokens=12, temperature=0.8, top_p=0.9, top_k=50, seed=7)),
    ("stop_string", chat("Write one French word with an accent, like café."), dict(max_new_tokens=40, greedy=True, stop=[" word"])),
    ("length", chat("Tell me a story about a dragon."), dict(max_new_tokens=8, greedy=True)),
    ("split_character", chat("Reply with three emojis: 🎉🚀🔥"), dict(max_new_tokens=6, greedy=True)),
]


def body(prompt, s):
    """The JSON body OpenAiBackend sends in LlamaCppPython mode (openai.rs `wire_request`)."""
    greedy = s.get("greedy", False)
    b = {
        "prompt": prompt,
        "max_tokens": s["max_new_tokens"],
        "min_tokens": s.get("min_new_tokens", 0),
        "temperature": 0.0 if greedy else s.get("temperature", 1.0),
        "top_p": 1.0 if greedy else s.get("top_p", 1.0),
        "top_k": 1 if greedy else s.get("top_k", 100000000),
        "logprobs": 0,
    }
    if s.get("seed") is not None:
        b["seed"] = s["seed"]
    if s.get("stop"):
        b["stop"] = s["stop"]
    b.update(
        stop_token_ids=STOP_IDS,
        ignore_eos=False,
        frequency_penalty=0.0,
        skip_special_tokens=False,
        return_tokens_as_token_ids=True,
        return_token_ids=True,
        stream=False,
        min_p=0.0,
        repeat_penalty=1.0,
    )
    return b


def post(base, path, payload):
    req = urllib.request.Request(
        base + path,
        data=json.dumps(payload).encode(),
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()

    yielded = []
    original = llama_cpp.Llama.generate

    def spy(self, *a, **k):
        for token in original(self, *a, **k):
            yielded.append(int(token))
            yield token

    llama_cpp.Llama.generate = spy

    port = free_port()
    app = create_app(
        server_settings=ServerSettings(host="127.0.0.1", port=port),
        model_settings=[ModelSettings(model=args.model, n_ctx=2048, verbose=False)],
    )
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 120
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            sys.exit("llama-cpp-python server did not start")
        time.sleep(0.1)
    base = f"http://127.0.0.1:{port}"

    tokenize, detokenize, cases = {}, [], {}
    try:
        def tok(text):
            if text not in tokenize:
                status, reply = post(base, "/extras/tokenize", {"input": text})
                assert status == 200, reply
                tokenize[text] = reply["tokens"]
            return tokenize[text]

        tok("")
        for name, prompt, sampling in CASES:
            prompt_ids = tok(prompt)
            request = body(prompt, sampling)
            yielded.clear()
            status, response = post(base, "/v1/completions", request)
            assert status == 200, response
            choice = response["choices"][0]
            pieces = choice["logprobs"]["tokens"]
            ids = list(yielded[: len(pieces)])
            for piece in pieces:
                tok(piece)
            status, reply = post(base, "/extras/detokenize", {"tokens": ids})
            assert status == 200, reply
            detokenize.append({"tokens": ids, "text": reply["text"]})
            cases[name] = {
                "sampling": sampling,
                "prompt_ids": prompt_ids,
                "request": request,
                "response": response,
                "reference_output_ids": ids,
                "unreported_tail": yielded[len(pieces):],
            }
            print(f"{name}: {choice['finish_reason']} {len(ids)} tokens {choice['text']!r}")

        ids_prompt = cases["greedy_stop"]["prompt_ids"]
        status, response = post(base, "/v1/completions", {"prompt": ids_prompt, "max_tokens": 4, "logprobs": 0})
        rejected = {"request": {"prompt": ids_prompt, "max_tokens": 4, "logprobs": 0}, "status": status, "response": response}
        print(f"token-id prompt: HTTP {status}")
    finally:
        server.should_exit = True
        thread.join(timeout=30)

    with open(args.model, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    fixture = {
        "source": "Recorded by scripts/record_openai_fixtures.py from llama-cpp-python's server "
        "(create_app under uvicorn on 127.0.0.1). reference_output_ids are the ids "
        "llama_cpp.Llama.generate yielded for that request.",
        "llama_cpp_python": llama_cpp.__version__,
        "model": os.path.basename(args.model),
        "model_sha256": sha,
        "stop_token_ids": STOP_IDS,
        "cases": cases,
        "token_id_prompt": rejected,
        "tokenize": tokenize,
        "detokenize": detokenize,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(fixture, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {os.path.relpath(args.out)}")


if __name__ == "__main__":
    main()
