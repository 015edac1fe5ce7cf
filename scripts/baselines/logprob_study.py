"""The embedded engine's logprobs against a trainer's forward pass (issue 39).

A PPO/GRPO trainer recomputes the logprobs of the generated tokens with its own model; where
they differ from the engine's, the importance ratio exp(new - old) is not 1 at the first step.
This script generates with `rollbox rollout --engine embedded` (200 GSM8K-style prompts,
templated below; temperature 1, 0.7 and greedy; up to 128 new tokens; `--record` keeps every
token and logprob), then recomputes the logprob of each generated token with transformers on
the same weights dequantised to float32 (what a trainer loading the GGUF holds), with the
logits divided by the temperature as the engine and AReaL's trainer do (greedy: temperature
1). It does this for the Q4_1 GGUF (the embedded default: Q4_1 weights, activations rounded to
8 bits per 32 values as llama.cpp does) and for the same weights written as a float32 GGUF
(no quantised arithmetic), and prints per setting: tokens, the per-token |new - old| (mean,
p50, p99, max), the share of tokens whose ratio leaves PPO's [0.8, 1.25], and the sequence
ratio exp(sum(new - old)) (p1, p50, p99, share outside [0.8, 1.25]).

Run in the trainers venv (torch, transformers, gguf):

    PY=$(scripts/install/trainers-venv.sh)
    cargo build --release -p rollbox
    "$PY" scripts/baselines/logprob_study.py --rollbox target/release/rollbox \\
        --gguf ~/.cache/rollbox/models/SmolLM2-135M-Instruct.Q4_1.gguf [--prompts 200] \\
        [--weights Q4_1,f32] [--json OUT]
"""

import argparse
import json
import os
import random
import subprocess
import tempfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM

TEMPLATES = [
    ("A baker fills {a} trays with {b} rolls each, then sells {c} rolls. How many rolls are left?", lambda a, b, c: a * b - c),
    ("Mia has {a} stickers, gets {b} more from a friend and gives {c} to her brother. How many stickers does she have now?", lambda a, b, c: a + b - c),
    ("A shop sells pens at {b} dollars each. Tom buys {a} pens and pays with a {c}-dollar bill plus enough extra. How much do the pens cost in total?", lambda a, b, c: a * b),
    ("{a} marbles are shared equally among {b} children, and each child then finds {c} more. How many marbles does each child have?", lambda a, b, c: a // b + c),
    ("A train travels {a} km every hour for {b} hours, then {c} km more. How far does it go?", lambda a, b, c: a * b + c),
    ("Leo saves {a} coins a week for {b} weeks and spends {c} coins. How many coins does he have?", lambda a, b, c: a * b - c),
    ("A garden has {a} rows of {b} tulips, and {c} tulips are picked. How many tulips remain?", lambda a, b, c: a * b - c),
    ("A class of {a} students splits into groups of {b}; {c} more groups join from another class. How many groups are there?", lambda a, b, c: a // b + c),
]
SUFFIX = " Think step by step and give the final answer as \\boxed{number}."
SETTINGS = [("temperature 1", {"temperature": 1.0}, 1.0), ("temperature 0.7", {"temperature": 0.7}, 0.7),
            ("greedy", {"greedy": True}, 1.0)]


def rows(n):
    rng = random.Random(39)
    out = []
    for i in range(n):
        text, f = TEMPLATES[i % len(TEMPLATES)]
        a, b, c = rng.randint(12, 60), rng.randint(2, 9), rng.randint(1, 9)
        if "equally" in text or "groups of" in text:
            a = b * rng.randint(3, 12)
        out.append({"messages": [{"role": "user", "content": text.format(a=a, b=b, c=c) + SUFFIX}],
                    "answer": str(f(a, b, c))})
    return out


def f32_gguf(src, dst):
    """`src` with every tensor dequantised to float32, the metadata as it was."""
    import gguf

    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst + ".part", arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), kind, sub_type=sub)
    for t in reader.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        writer.add_tensor(t.name, data, raw_shape=data.shape)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(dst + ".part", dst)


def generate(rollbox, gguf_path, data, gconfig, tmp, tag):
    out, record = os.path.join(tmp, tag), os.path.join(tmp, tag + ".jsonl")
    config = {"reward": "math", "gconfig": {"max_new_tokens": 128, **gconfig}}
    subprocess.run([rollbox, "rollout", data, "--out", out, "--engine", f"embedded:{gguf_path}",
                    "--record", record, "--n-samples", "1", "--config", json.dumps(config), "--quiet"],
                   check=True)
    with open(record) as f:
        return [json.loads(line) for line in f]


@torch.no_grad()
def recompute(model, records, temperature):
    """Per record: (engine logprobs, transformers logprobs) of the generated tokens."""
    pairs = []
    for r in records:
        prompt, output = r["input_ids"], r["output_tokens"]
        if not output:
            continue
        ids = torch.tensor([prompt + output])
        logits = model(ids).logits[0, len(prompt) - 1:-1].float() / temperature
        new = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(output)[:, None])[:, 0]
        pairs.append((np.array(r["output_logprobs"], dtype=np.float64), new.double().numpy()))
    return pairs


def summarize(pairs):
    d = np.concatenate([new - old for old, new in pairs])
    seq = np.array([np.exp(np.sum(new - old)) for old, new in pairs])
    outside = lambda r: float(np.mean((r < 0.8) | (r > 1.25)) * 100)
    return {
        "sequences": len(pairs), "tokens": int(d.size),
        "abs_diff_mean": float(np.mean(np.abs(d))), "abs_diff_p50": float(np.percentile(np.abs(d), 50)),
        "abs_diff_p99": float(np.percentile(np.abs(d), 99)), "abs_diff_max": float(np.max(np.abs(d))),
        "mean_diff": float(np.mean(d)),
        "token_ratio_outside_pct": outside(np.exp(d)),
        "seq_ratio_p1": float(np.percentile(seq, 1)), "seq_ratio_p50": float(np.percentile(seq, 50)),
        "seq_ratio_p99": float(np.percentile(seq, 99)), "seq_ratio_outside_pct": outside(seq),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rollbox", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--weights", default="Q4_1,f32", help="which of Q4_1 and f32 to run")
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rollbox-logprobs-")
    data = os.path.join(tmp, "rows.jsonl")
    with open(data, "w") as f:
        for row in rows(a.prompts):
            f.write(json.dumps(row) + "\n")
    f32 = os.path.join(tmp, "f32.gguf")
    f32_gguf(a.gguf, f32)
    folder, name = os.path.split(a.gguf)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    torch.set_num_threads(os.cpu_count())
    results = []
    print(f"{a.prompts} prompts, up to 128 new tokens; transformers {__import__('transformers').__version__}, "
          f"torch {torch.__version__}, float32, on the GGUF's weights dequantised")
    print(f"{'weights':8} {'setting':16} {'tokens':>6} {'|d| mean':>9} {'p50':>8} {'p99':>8} {'max':>7} "
          f"{'tok out%':>8} {'seq p1':>7} {'p50':>6} {'p99':>6} {'seq out%':>8}")
    for weights, path in (("Q4_1", a.gguf), ("f32", f32)):
        if weights not in a.weights.split(","):
            continue
        for label, gconfig, temperature in SETTINGS:
            records = generate(a.rollbox, path, data, gconfig, tmp, f"{weights}-{label.replace(' ', '-')}")
            s = summarize(recompute(model, records, temperature))
            results.append({"weights": weights, "setting": label, **s})
            print(f"{weights:8} {label:16} {s['tokens']:6d} {s['abs_diff_mean']:9.5f} {s['abs_diff_p50']:8.5f} "
                  f"{s['abs_diff_p99']:8.5f} {s['abs_diff_max']:7.4f} {s['token_ratio_outside_pct']:8.2f} "
                  f"{s['seq_ratio_p1']:7.3f} {s['seq_ratio_p50']:6.3f} {s['seq_ratio_p99']:6.3f} "
                  f"{s['seq_ratio_outside_pct']:8.1f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
