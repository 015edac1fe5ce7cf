"""The cost of the Python boundary per episode: the same Rust rlvr episodes through
`rollbox.Host`, answered (a) by rollbox's own replay backend inside Rust and (b) by a Python
object's `async agenerate` (one round trip into Python per generate call), with the same
recorded answers, 64 in flight, A/B interleaved. The difference is the agenerate round trip
(request built under the GIL, a coroutine awaited from Rust on the caller's loop, the response
read back); both include the tensor hand-over as numpy arrays.

    (cd python && maturin develop --release)
    python python/bench/boundary.py [EPISODES]
"""

import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import rollbox

ROOT = Path(__file__).resolve().parents[2]
GUESTS = ROOT / "target/wasm-guests/wasm32-wasip2/guest"
TOKENIZER = Path(os.environ.get("ROLLBOX_MODEL_DIR", Path.home() / ".cache/rollbox/models")) / "SmolLM2-135M-Instruct.Q4_1.gguf"
CASE = json.loads((ROOT / "tests/conformance/rlvr.json").read_text())["cases"][0]
RECORD = CASE["samples"][0]["record"]


class Engine:
    async def agenerate(self, req):
        return rollbox.ModelResponse(input_tokens=list(req.input_ids), output_tokens=RECORD["output_tokens"],
                                     output_logprobs=RECORD["output_logprobs"],
                                     output_versions=RECORD["output_versions"], stop_reason=RECORD["stop_reason"])


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def batch(host, n, engine):
    sem = asyncio.Semaphore(64)

    async def one():
        async with sem:
            return await host.arun_episode(CASE["row"], engine)

    c0, t0 = cpu(), time.perf_counter()
    out = await asyncio.gather(*(one() for _ in range(n)))
    assert all(o is not None for o in out)
    return (time.perf_counter() - t0) / n * 1e6, (cpu() - c0) / n * 1e6


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    common = dict(rewards={"math": str(GUESTS / "rollbox_reward_math.wasm")}, tokenizer=str(TOKENIZER),
                  config={"reward": "math", "gconfig": {"max_new_tokens": 24}})
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write(json.dumps(RECORD) + "\n")
    wf = str(GUESTS / "rollbox_workflow_rlvr.wasm")
    in_rust = rollbox.Host(wf, engine=f"replay:{f.name}", **common)
    in_python = rollbox.Host(wf, **common)
    engine = Engine()

    async def run():
        await batch(in_rust, 200, None)
        await batch(in_python, 200, engine)
        rows = []
        for _ in range(3):
            rows.append(("replay backend (in Rust)", *await batch(in_rust, n, None)))
            rows.append(("Python engine (agenerate)", *await batch(in_python, n, engine)))
        for name, wall, c in rows:
            print(f"{name:<28} wall {wall:7.1f} µs/episode  CPU {c:7.1f} µs/episode")
        best = lambda k, i: min(r[i] for r in rows if r[0].startswith(k))
        print(f"Python boundary: +{best('Python', 2) - best('replay', 2):.0f} µs CPU, "
              f"+{best('Python', 1) - best('replay', 1):.0f} µs wall per episode (one generate call)")

    asyncio.run(run())


if __name__ == "__main__":
    main()
