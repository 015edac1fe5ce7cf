#!/usr/bin/env python3
"""Kill storm for `rollbox rollout` resume: KILLS `kill -9` at random moments of one rollout,
restarted each time, must end with the output of an uninterrupted run (no row lost, none
duplicated). Python 3.11, stdlib only. Usually started through scripts/stress/storm.sh, which builds
the binary and the guest components when they are missing (as scripts/quickstart.sh does):

    scripts/stress/storm.sh                       # KILLS=30 ROWS=400
    scripts/stress/storm.sh KILLS=50 ROWS=2000 SEED=7
    python3 scripts/stress/storm.py --kills 30 --rows 400 [--seed 1] [--work target/robustness/storm]
        [--binary target/release/rollbox] [--model ~/.cache/rollbox/models/SmolLM2-...gguf]
        [--kill-window spread|uniform] [--cold-cache]

Exit status 0 when the storm output is identical to the reference, 1 on any difference or
error, 2 when the setup is missing (binary, components, model).

What it does, from the repository root (component paths in rollbox are relative to it):

1. A deterministic engine. The embedded engine (SmolLM2, CPU) runs once over a few unique
   arithmetic prompts with `--n-samples 1 --record FILE`; the recording is reduced to exactly
   one answer per prompt and used as `--engine replay:FILE --tokenizer MODEL.gguf` from then
   on. The replay backend cycles through the recordings of a prompt in request order
   (host/engines/src/replay.rs:111, `next.fetch_add`), which depends on completion order and
   restarts at 0 in every process; with a single recording per prompt every (row, sample)
   gets the same answer in every run. Cached in WORK/replay-<hash>.jsonl (+ .json).
2. A dataset of ROWS lines (WORK/dataset.jsonl): rows reuse the recorded prompts (row
   identity is the line number, not the prompt) with varied `answer`s (the true one, the
   model's own, a wrong one) so rewards are a mix of 0 and 1; every 10th row has no
   `messages` (every episode fails: the group is dropped into dropped-rows.jsonl); every 25th
   asks a prompt that was never recorded (engine error: dropped too); a few lines are not JSON
   (bad lines, skipped, but they keep the line numbering).
3. The reference: one uninterrupted `rollbox rollout` (--n-samples 4 --batch-size 4 --seed S)
   into WORK/ref; then a no-op resume of a copy (WORK/ref-resume) that must run 0 rows and
   leave trajectories.jsonl byte-identical; its wall time is the start-up cost.
4. The storm into WORK/storm: start, `kill -9` after a random delay, restart (resume), until
   KILLS kills were delivered; then one last run to the end. Delays are uniform over the
   expected remaining run time: with --kill-window spread (default) over
   [0, startup + 2 * work_left / kills_left], so the kills are spread over the whole run
   (some land in start-up/resume, most during episodes and batch writes); with uniform over
   [0, reference wall time] of every attempt. If the run completes before KILLS kills, the
   remaining kills land in no-op resumes (reported as "after completion"). With --cold-cache
   the storm's attempts use a fresh ROLLBOX_CACHE_DIR, so the first kills hit component
   compilation and compile-cache writes too (and make no progress while compiling takes
   longer than the window). Each attempt prints one line (delay, rows done after it); the
   summary says how many kills came after new rows were committed, before any, after
   completion, and how many left a temporary file or trajectories.jsonl out of step with the
   batch headers (the resume repair paths that were exercised).
5. Checks, on both directories, then storm against reference:
   * every batch-NNNNNN.safetensors loads with the stdlib: 8-byte little-endian header
     length, JSON header, known dtypes, each tensor's byte length = prod(shape) * dtype size,
     offsets contiguous from 0 to the end of the file; metadata `rows`, `trajectories`,
     `group_sizes`, `batch` consistent; the `rewards` tensor equals the lines' rewards;
   * batch numbers contiguous from 0; no row in two batches; no temporary files left;
   * trajectories.jsonl = the concatenation of the batch headers' trajectories (batch order),
     no (row, sample) twice; dropped-rows.jsonl parses line by line, no row twice, disjoint
     from the batch rows; batch rows + dropped rows = every valid dataset row;
   * stats.json: rows_already_done + rows_run = rows_in_dataset, the bad lines reported;
   * storm vs reference: the same (row, sample) set with equal deterministic fields (all of a
     trajectory line but timings, i.e. keys ending in _ms/_us/_s such as `episode_ms`,
     `reward_ms` and the reward calls' `wall_us`, and the reward calls' `peak_memory_bytes`),
     the same dropped rows with the same reasons. Batch numbering and
     which groups share a batch are not compared (they follow completion order).

Assumptions about rollbox (checked against the source when written): `rollbox rollout
DATASET --out DIR --engine replay:FILE --tokenizer GGUF --record FILE --n-samples N
--batch-size N --seed N --config JSON --quiet` (host/cli/src/rollout.rs:20-103); the workflow
and reward components default to target/wasm-guests/wasm32-wasip2/guest/*.wasm relative to
the working directory (host/cli/src/rollout.rs:17,23,114); a batch is committed by renaming
`.batch-NNNNNN.safetensors.tmp-PID` (host/tensor/src/io.rs:159-167 in the working tree when
written) and resume reads the headers' `rows`/`trajectories` and dropped-rows.jsonl
(host/rollout/src/output.rs:81-142). Batch boundaries are not assumed: the controller may
split a batch (host/rollout/src/lib.rs, write_batch).
"""

import argparse
import hashlib
import json
import math
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "fixtures"))
import make_arith_dataset as arith  # noqa: E402  (TEMPLATES, SUFFIX; its main() is guarded)

GUESTS = os.path.join(ROOT, "target", "wasm-guests", "wasm32-wasip2", "guest")
COMPONENTS = [os.path.join(GUESTS, "rollbox_workflow_rlvr.wasm"), os.path.join(GUESTS, "rollbox_reward_math.wasm")]
DEFAULT_BINARY = os.path.join(ROOT, "target", "release", "rollbox")
# The rlvr workflow's config for every run (recording and replays alike).
CONFIG = {"reward": "math", "gconfig": {"max_new_tokens": 48, "temperature": 1.0}}
N_SAMPLES = 4
BATCH_SIZE = 4

DTYPE_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}
# Fields that differ between any two runs: timings (by suffix, so a timing field added later is
# left out too) and a reward call's peak memory.
TIMING = re.compile(r".*_(ms|us|s)$")
REWARD_CALL_VOLATILE = ("peak_memory_bytes",)


class SetupError(Exception):
    """Something the storm needs is missing (exit 2)."""


def rel(path, start=ROOT):
    """`path` relative to the repository when it is inside it, else as is."""
    r = os.path.relpath(path, start)
    return path if r.startswith("..") else r


def default_model():
    d = os.environ.get("ROLLBOX_MODEL_DIR", os.path.expanduser("~/.cache/rollbox/models"))
    return os.path.join(d, "SmolLM2-135M-Instruct.Q4_1.gguf")


def check_setup(binary, model):
    missing = [p for p in [binary, model] + COMPONENTS if not os.path.exists(p)]
    if missing:
        raise SetupError(
            "missing: " + ", ".join(missing)
            + "\n  build with scripts/stress/storm.sh (it runs the build lines of scripts/quickstart.sh) or scripts/quickstart.sh"
        )


def tail(path, n=30):
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
        return "\n".join("    " + line for line in lines[-n:])
    except OSError:
        return "    (no log)"


# ---------------------------------------------------------------------------------------------
# The deterministic engine: record the embedded engine once, keep one answer per prompt.


def unique_prompts(n, seed):
    """n distinct arithmetic rows in make_arith_dataset.py's style."""
    rng = random.Random(seed)
    rows, seen, i = [], set(), 0
    while len(rows) < n:
        text, f = arith.TEMPLATES[i % len(arith.TEMPLATES)]
        i += 1
        a, b = rng.randint(6, 40), rng.randint(2, 9)
        if "shared equally" in text:
            a = b * rng.randint(2, 9)
        if "taken away" in text or "gave" in text:
            a = a + b
        content = text.format(a=a, b=b) + arith.SUFFIX
        if content in seen:
            continue
        seen.add(content)
        rows.append({"messages": [{"role": "user", "content": content}], "answer": str(f(a, b))})
    return rows


def extract_answer(completion):
    """The model's own final answer, roughly as the math reward reads it: the last
    \\boxed{...}, else the last number; None when there is none."""
    if not completion:
        return None
    boxed = re.findall(r"\\boxed\{([^{}]*)\}", completion)
    if boxed and boxed[-1].strip():
        return boxed[-1].strip()
    nums = re.findall(r"-?\d+(?:\.\d+)?", completion)
    return nums[-1] if nums else None


def write_jsonl(path, rows):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    os.replace(tmp, path)


def prepare_engine(work, binary, model, n_unique=24, seed=4242, log=print):
    """Return {"replay": PATH, "tokenizer": MODEL, "prompts": [rows], "model_answers": [...]}.
    Records the embedded engine on `n_unique` prompts (n-samples 1) unless WORK already holds
    the recording for these prompts, config and model."""
    os.makedirs(work, exist_ok=True)
    prompts = unique_prompts(n_unique, seed)
    key_src = json.dumps([prompts, CONFIG, os.path.basename(model), os.path.getsize(model)], sort_keys=True)
    key = hashlib.sha256(key_src.encode()).hexdigest()[:12]
    replay = os.path.join(work, f"replay-{key}.jsonl")
    meta_path = os.path.join(work, f"replay-{key}.json")
    if os.path.exists(replay) and os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        log(f"engine   replay:{rel(replay, ROOT)} (cached: {meta['distinct']} prompts, one answer each)")
        return meta
    rec_dir = os.path.join(work, f"record-{key}")
    shutil.rmtree(rec_dir, ignore_errors=True)  # a stale --out would resume and record nothing
    os.makedirs(rec_dir)
    data = os.path.join(rec_dir, "prompts.jsonl")
    write_jsonl(data, prompts)
    rec = os.path.join(rec_dir, "record.jsonl")
    out = os.path.join(rec_dir, "out")
    log_path = os.path.join(rec_dir, "record.log")
    cmd = [binary, "rollout", data, "--out", out, "--engine", f"embedded:{model}", "--record", rec,
           "--n-samples", "1", "--batch-size", "8", "--seed", str(seed), "--config", json.dumps(CONFIG), "--quiet"]
    log(f"record   {n_unique} prompts on the embedded engine (one-off, cached; log {rel(log_path, ROOT)})")
    t0 = time.monotonic()
    with open(log_path, "wb") as lf:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=lf, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise SetupError(f"recording run failed (exit {rc}):\n{tail(log_path)}")
    first = {}
    n_records = 0
    with open(rec) as f:
        for line in f:
            if not line.strip():
                continue
            n_records += 1
            r = json.loads(line)
            first.setdefault(tuple(r["input_ids"]), line.rstrip("\n"))
    if not first:
        raise SetupError(f"the recording {rec} is empty:\n{tail(log_path)}")
    answers = [None] * len(prompts)
    try:
        with open(os.path.join(out, "trajectories.jsonl")) as f:
            for line in f:
                t = json.loads(line)
                answers[t["row"]] = extract_answer(t.get("completion"))
    except (OSError, ValueError, KeyError, IndexError):
        pass
    write_jsonl(replay, list(first.values()))
    meta = {"replay": replay, "tokenizer": model, "prompts": prompts, "model_answers": answers,
            "records": n_records, "distinct": len(first), "config": CONFIG}
    with open(meta_path + ".tmp", "w") as f:
        json.dump(meta, f)
    os.replace(meta_path + ".tmp", meta_path)
    log(f"engine   replay:{rel(replay, ROOT)} ({n_records} answers recorded in "
        f"{time.monotonic() - t0:.1f} s, {len(first)} distinct prompts kept with one answer each)")
    return meta


# ---------------------------------------------------------------------------------------------
# The dataset.


def make_dataset(path, n_rows, engine):
    """Write the storm dataset; return what a complete run must show."""
    prompts, model_answers = engine["prompts"], engine["model_answers"]
    lines, valid, expect_kept, expect_dropped, bad = [], [], set(), set(), 0
    for i in range(n_rows):
        if i % 97 == 41:
            lines.append('{"messages": [{"role": "user", "content": "a line cut short')
            bad += 1
            continue
        valid.append(i)
        if i % 10 == 7:
            lines.append(json.dumps({"answer": "3", "note": f"row {i}: no messages, every episode fails"}))
            expect_dropped.add(i)
        elif i % 25 == 13:
            content = f"Row {i} asks what {i} plus 1 is (never recorded).{arith.SUFFIX}"
            lines.append(json.dumps({"messages": [{"role": "user", "content": content}], "answer": str(i + 1)}))
            expect_dropped.add(i)
        else:
            j = (i * 7 + i // len(prompts)) % len(prompts)
            row = dict(prompts[j])
            variant = (i // 3) % 3
            if variant == 1 and model_answers[j]:
                row["answer"] = model_answers[j]
            elif variant == 2:
                row["answer"] = str(int(row["answer"]) + 1000)
            row["id"] = i
            lines.append(json.dumps(row))
            expect_kept.add(i)
    write_jsonl(path, lines)
    return {"valid": set(valid), "kept": expect_kept, "dropped": expect_dropped, "bad_lines": bad}


# ---------------------------------------------------------------------------------------------
# Reading an output directory.


def read_safetensors(path):
    """(tensors {name: (dtype, shape, bytes)}, metadata {str: str}) of a file; raises
    ValueError with the reason when it is not a valid safetensors file."""
    with open(path, "rb") as f:
        return parse_safetensors(f.read())


def parse_safetensors(data):
    """`read_safetensors` of bytes in memory (also used by serve_load.py on response bodies)."""
    if len(data) < 8:
        raise ValueError(f"{len(data)} bytes: no header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > 100 << 20 or 8 + n > len(data):
        raise ValueError(f"header length {n} for a file of {len(data)} bytes")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"header is not UTF-8 JSON: {e}") from None
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ValueError("__metadata__ is not a map of strings")
    body = data[8 + n:]
    spans, tensors = [], {}
    for name, t in header.items():
        try:
            dtype, shape, (b, e) = t["dtype"], t["shape"], t["data_offsets"]
        except (TypeError, KeyError, ValueError) as exc:
            raise ValueError(f"tensor {name!r}: bad entry {t!r} ({exc})") from None
        if dtype not in DTYPE_SIZES:
            raise ValueError(f"tensor {name!r}: unknown dtype {dtype}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ValueError(f"tensor {name!r}: bad shape {shape}")
        if not (isinstance(b, int) and isinstance(e, int) and 0 <= b <= e):
            raise ValueError(f"tensor {name!r}: bad offsets {[b, e]}")
        want = math.prod(shape) * DTYPE_SIZES[dtype]
        if e - b != want:
            raise ValueError(f"tensor {name!r}: {e - b} bytes for {dtype} {shape} (want {want})")
        spans.append((b, e, name))
        tensors[name] = (dtype, shape, body[b:e])
    spans.sort()
    pos = 0
    for b, e, name in spans:
        if b != pos:
            raise ValueError(f"tensor {name!r} starts at {b}, expected {pos} (hole or overlap)")
        pos = e
    if pos != len(body):
        raise ValueError(f"tensors cover {pos} bytes, the data section has {len(body)}")
    return tensors, meta


def strip_timings(line):
    t = {k: v for k, v in line.items() if not TIMING.match(k)}
    if isinstance(t.get("reward_calls"), list):
        t["reward_calls"] = [
            {k: v for k, v in c.items() if not TIMING.match(k) and k not in REWARD_CALL_VOLATILE}
            if isinstance(c, dict) else c
            for c in t["reward_calls"]
        ]
    return t


def done_rows(out):
    """Rows a resume would skip (batch headers + dropped-rows.jsonl); None if unreadable."""
    rows = set()
    try:
        for name in os.listdir(out):
            m = re.fullmatch(r"batch-(\d+)\.safetensors", name)
            if m:
                _, meta = read_safetensors(os.path.join(out, name))
                rows.update(json.loads(meta.get("rows", "[]")))
        p = os.path.join(out, "dropped-rows.jsonl")
        if os.path.exists(p):
            with open(p, "rb") as f:
                for line in f:
                    try:
                        rows.add(json.loads(line)["row"])
                    except (ValueError, KeyError, TypeError):
                        pass
    except (OSError, ValueError):
        return None
    return rows


def snapshot(out):
    """Facts about a directory between two attempts: temporary files, whether
    trajectories.jsonl holds exactly the batch headers' lines."""
    tmp, header_lines = [], 0
    for name in os.listdir(out) if os.path.isdir(out) else []:
        if name.startswith(".") and ".tmp-" in name:
            tmp.append(name)
        elif re.fullmatch(r"batch-(\d+)\.safetensors", name):
            try:
                _, meta = read_safetensors(os.path.join(out, name))
                header_lines += len(json.loads(meta.get("trajectories", "[]")))
            except (OSError, ValueError):
                pass
    try:
        with open(os.path.join(out, "trajectories.jsonl"), "rb") as f:
            jsonl_lines = f.read().count(b"\n")
    except OSError:
        jsonl_lines = 0
    return {"tmp": tmp, "behind": jsonl_lines != header_lines}


def verify_dir(out, expect):
    """Check one finished output directory on its own. Returns (problems, facts)."""
    problems = []
    batches = {}
    names = sorted(os.listdir(out))
    for name in names:
        if name.startswith(".") and ".tmp-" in name:
            problems.append(f"temporary file left behind: {name}")
        m = re.fullmatch(r"batch-(\d+)\.safetensors", name)
        if m:
            batches[int(m.group(1))] = name
    nums = sorted(batches)
    if nums != list(range(len(nums))):
        problems.append(f"batch numbers are not contiguous from 0: {nums[:10]}{'...' if len(nums) > 10 else ''}")
    header_lines, batch_of_row, twice = [], {}, []
    for n in nums:
        path = os.path.join(out, batches[n])
        try:
            tensors, meta = read_safetensors(path)
        except (OSError, ValueError) as e:
            problems.append(f"{batches[n]}: does not load: {e}")
            continue
        try:
            rows = json.loads(meta["rows"])
            lines = json.loads(meta["trajectories"])
            sizes = json.loads(meta.get("group_sizes", "null"))
        except (KeyError, ValueError) as e:
            problems.append(f"{batches[n]}: metadata rows/trajectories missing or not JSON ({e})")
            continue
        if meta.get("batch") != str(n):
            problems.append(f"{batches[n]}: metadata batch = {meta.get('batch')!r}")
        if len(set(rows)) != len(rows):
            problems.append(f"{batches[n]}: a row twice in one batch: {rows}")
        for r in rows:
            if r in batch_of_row:
                twice.append(f"{r} ({batches[batch_of_row[r]]}, {batches[n]})")
            batch_of_row[r] = n
        if {t.get("row") for t in lines} != set(rows):
            problems.append(f"{batches[n]}: trajectory rows {sorted({t.get('row') for t in lines})} != rows {sorted(rows)}")
        if sizes is not None and (len(sizes) != len(rows) or sum(sizes) != len(lines)):
            problems.append(f"{batches[n]}: group_sizes {sizes} do not match {len(rows)} rows / {len(lines)} trajectories")
        if "input_ids" in tensors and tensors["input_ids"][1][:1] != [len(lines)]:
            problems.append(f"{batches[n]}: input_ids {tensors['input_ids'][1]} for {len(lines)} trajectories")
        if "rewards" in tensors and tensors["rewards"][0] == "F32" and tensors["rewards"][1] == [len(lines)]:
            values = struct.unpack(f"<{len(lines)}f", tensors["rewards"][2])
            got = [t.get("reward") for t in lines]
            if any(g is None or abs(g - v) > 1e-6 for g, v in zip(got, values)):
                problems.append(f"{batches[n]}: rewards tensor {list(values)} != the lines' rewards {got}")
        header_lines.extend(lines)
    if twice:
        problems.append(f"{len(twice)} rows in two batches (duplicated): {', '.join(twice[:5])}")
    # trajectories.jsonl
    jsonl = []
    try:
        with open(os.path.join(out, "trajectories.jsonl"), "rb") as f:
            for k, raw in enumerate(f.read().splitlines()):
                try:
                    jsonl.append(json.loads(raw))
                except ValueError:
                    problems.append(f"trajectories.jsonl line {k + 1} is not JSON: {raw[:80]!r}")
    except OSError as e:
        problems.append(f"trajectories.jsonl: {e}")
    if jsonl != header_lines:
        problems.append(
            f"trajectories.jsonl ({len(jsonl)} lines) is not the batch headers' trajectories in batch order ({len(header_lines)})"
        )
    trajs, twice = {}, []
    for t in jsonl:
        key = (t.get("row"), t.get("sample"))
        if key in trajs:
            twice.append(key)
        trajs[key] = strip_timings(t)
    if twice:
        problems.append(f"{len(twice)} (row, sample) pairs twice in trajectories.jsonl: {twice[:5]}")
    # dropped-rows.jsonl
    dropped, twice = {}, []
    p = os.path.join(out, "dropped-rows.jsonl")
    if os.path.exists(p):
        with open(p, "rb") as f:
            for k, raw in enumerate(f.read().split(b"\n")):
                if not raw:
                    continue
                try:
                    d = json.loads(raw)
                    r = d["row"]
                except (ValueError, KeyError, TypeError):
                    problems.append(f"dropped-rows.jsonl line {k + 1} is not a {{row, reason}} object: {raw[:80]!r}")
                    continue
                if r in dropped:
                    twice.append(r)
                dropped[r] = d.get("reason")
    if twice:
        problems.append(f"{len(twice)} rows twice in dropped-rows.jsonl (ran twice): {twice[:10]}")
    both = set(dropped) & set(batch_of_row)
    if both:
        problems.append(f"rows both in a batch and in dropped-rows.jsonl: {sorted(both)[:10]}")
    done = set(dropped) | set(batch_of_row)
    if done != expect["valid"]:
        lost = sorted(expect["valid"] - done)
        extra = sorted(done - expect["valid"])
        problems.append(f"rows done != dataset rows: missing {lost[:10]} ({len(lost)}), unexpected {extra[:10]} ({len(extra)})")
    # stats.json (the last run's own counts)
    try:
        with open(os.path.join(out, "stats.json")) as f:
            stats = json.load(f)
        if stats.get("rows_in_dataset") != len(expect["valid"]):
            problems.append(f"stats.json rows_in_dataset {stats.get('rows_in_dataset')} != {len(expect['valid'])}")
        if stats.get("rows_already_done", 0) + stats.get("rows_run", 0) != stats.get("rows_in_dataset"):
            problems.append(f"stats.json rows_already_done + rows_run != rows_in_dataset: {stats}")
        if len(stats.get("bad_rows", [])) != expect["bad_lines"]:
            problems.append(f"stats.json reports {len(stats.get('bad_rows', []))} bad lines, the dataset has {expect['bad_lines']}")
    except (OSError, ValueError) as e:
        problems.append(f"stats.json: {e}")
        stats = {}
    facts = {"trajs": trajs, "dropped": dropped, "batches": len(nums), "batch_rows": set(batch_of_row), "stats": stats}
    return problems, facts


def compare(ref, storm):
    problems = []
    rk, sk = set(ref["trajs"]), set(storm["trajs"])
    if rk - sk:
        problems.append(f"trajectories lost in the storm: {sorted(rk - sk)[:10]} ({len(rk - sk)})")
    if sk - rk:
        problems.append(f"trajectories only in the storm: {sorted(sk - rk)[:10]} ({len(sk - rk)})")
    diff = [k for k in sorted(rk & sk) if ref["trajs"][k] != storm["trajs"][k]]
    if diff:
        k = diff[0]
        fields = sorted(f for f in set(ref["trajs"][k]) | set(storm["trajs"][k])
                        if ref["trajs"][k].get(f) != storm["trajs"][k].get(f))
        problems.append(f"{len(diff)} trajectories differ, e.g. (row {k[0]}, sample {k[1]}) in {fields}")
    if ref["dropped"] != storm["dropped"]:
        a, b = set(ref["dropped"].items()), set(storm["dropped"].items())
        problems.append(f"dropped rows differ: reference only {sorted(a - b)[:5]}, storm only {sorted(b - a)[:5]}")
    return problems


# ---------------------------------------------------------------------------------------------
# Running.


def run_to_end(cmd, log_path, timeout, env=None):
    t0 = time.monotonic()
    with open(log_path, "ab") as lf:
        lf.write(f"=== {' '.join(cmd)}\n".encode())
        lf.flush()
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=lf, stderr=subprocess.STDOUT, env=env)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
            rc = "timeout"
    return rc, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=30)
    ap.add_argument("--rows", type=int, default=400, help="dataset lines (a few are deliberately bad)")
    ap.add_argument("--seed", type=int, default=1, help="rollout --seed and the kill-delay RNG")
    ap.add_argument("--work", default=os.path.join(ROOT, "target", "robustness", "storm"))
    ap.add_argument("--binary", default=DEFAULT_BINARY)
    ap.add_argument("--model", default=default_model(), help="GGUF: recording engine and tokenizer")
    ap.add_argument("--kill-window", choices=["spread", "uniform"], default="spread")
    ap.add_argument("--cold-cache", action="store_true",
                    help="storm attempts use a fresh ROLLBOX_CACHE_DIR (WORK/cache-cold), so early kills also hit "
                         "component compilation and cache writes")
    a = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    work = os.path.abspath(a.work)
    try:
        check_setup(a.binary, a.model)
        engine = prepare_engine(work, a.binary, a.model)
    except SetupError as e:
        print(f"storm: {e}", file=sys.stderr)
        return 2
    dataset = os.path.join(work, "dataset.jsonl")
    expect = make_dataset(dataset, a.rows, engine)
    print(f"dataset  {rel(dataset, ROOT)}: {a.rows} lines, {len(expect['valid'])} rows "
          f"({len(expect['kept'])} to keep, {len(expect['dropped'])} to drop), {expect['bad_lines']} bad lines")

    def cmd(out):
        return [a.binary, "rollout", dataset, "--out", out, "--engine", f"replay:{engine['replay']}",
                "--tokenizer", engine["tokenizer"], "--n-samples", str(N_SAMPLES), "--batch-size", str(BATCH_SIZE),
                "--seed", str(a.seed), "--config", json.dumps(CONFIG), "--quiet"]

    ref, ref_resume, storm = (os.path.join(work, d) for d in ("ref", "ref-resume", "storm"))
    logs = os.path.join(work, "logs")
    for d in (ref, ref_resume, storm, logs):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(logs, exist_ok=True)
    problems = []

    # The reference, uninterrupted.
    ref_log = os.path.join(logs, "ref.log")
    rc, t_ref = run_to_end(cmd(ref), ref_log, timeout=1800)
    if rc != 0:
        print(f"storm: the reference run failed (exit {rc}):\n{tail(ref_log)}", file=sys.stderr)
        return 1
    ref_problems, ref_facts = verify_dir(ref, expect)
    problems += [f"reference: {p}" for p in ref_problems]
    kept_rows = ref_facts["batch_rows"]
    if kept_rows != expect["kept"]:
        problems.append(
            f"reference: kept rows differ from the plan ({len(kept_rows)} kept, {len(expect['kept'])} planned); "
            "is the replay file from this tokenizer? (see logs/ref.log)")
    # A no-op resume of a copy: start-up cost, and resuming a finished run changes nothing.
    shutil.copytree(ref, ref_resume)
    with open(os.path.join(ref_resume, "trajectories.jsonl"), "rb") as f:
        before = f.read()
    rc, t_start = run_to_end(cmd(ref_resume), os.path.join(logs, "ref-resume.log"), timeout=600)
    with open(os.path.join(ref_resume, "trajectories.jsonl"), "rb") as f:
        after = f.read()
    if rc != 0:
        problems.append(f"no-op resume of the reference exited {rc}")
    if before != after:
        problems.append("no-op resume of the reference changed trajectories.jsonl")
    try:
        with open(os.path.join(ref_resume, "stats.json")) as f:
            if json.load(f).get("rows_run") != 0:
                problems.append("no-op resume of the reference ran rows again")
    except (OSError, ValueError) as e:
        problems.append(f"no-op resume: stats.json: {e}")
    work_s = max(t_ref - t_start, 0.05)
    print(f"ref      {len(ref_facts['trajs'])} trajectories in {ref_facts['batches']} batches, "
          f"{len(ref_facts['dropped'])} rows dropped; {t_ref:.2f} s (start-up/no-op resume {t_start:.2f} s)")
    if work_s < t_start:
        print(f"note     the run's work ({work_s:.2f} s) is shorter than its start-up ({t_start:.2f} s): many kills "
              "will land in start-up; raise ROWS for more kills during batch writes")

    # The storm.
    storm_env = None
    if a.cold_cache:
        cold = os.path.join(work, "cache-cold")
        shutil.rmtree(cold, ignore_errors=True)  # rollbox creates it owner-only
        storm_env = dict(os.environ, ROLLBOX_CACHE_DIR=cold)
    rng = random.Random(a.seed)
    storm_log = os.path.join(logs, "storm.log")
    open(storm_log, "wb").close()
    kills = attempts = 0
    finished = aborted = False
    tally = {"progress": 0, "startup": 0, "after_completion": 0, "tmp_left": 0, "jsonl_behind": 0}
    delays = []
    n_valid = len(expect["valid"])
    while kills < a.kills and attempts < 4 * a.kills + 10:
        attempts += 1
        before_rows = done_rows(storm) if os.path.isdir(storm) else set()
        left = 1.0 if before_rows is None else (n_valid - len(before_rows & expect["valid"])) / n_valid
        if finished:
            window = t_start
        elif a.kill_window == "uniform":
            window = t_ref
        else:
            window = t_start + 2 * work_s * left / (a.kills - kills)
        delay = rng.uniform(0, window)
        with open(storm_log, "ab") as lf:
            lf.write(f"=== attempt {attempts}: kill after {delay:.3f} s\n".encode())
            lf.flush()
            p = subprocess.Popen(cmd(storm), cwd=ROOT, stdout=lf, stderr=subprocess.STDOUT, env=storm_env)
            try:
                rc = p.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)  # our own child, by pid
                rc = p.wait()
        after_rows = done_rows(storm)
        done_text = "?" if after_rows is None else f"{len(after_rows & expect['valid'])}/{n_valid}"
        print(f"attempt  {attempts:3}: " + (f"killed after {delay:.2f} s" if rc == -signal.SIGKILL else f"exited {rc}")
              + f", rows done {done_text}")
        if rc == -signal.SIGKILL:
            kills += 1
            delays.append(delay)
            snap = snapshot(storm)
            tally["tmp_left"] += bool(snap["tmp"])
            tally["jsonl_behind"] += snap["behind"]
            if finished:
                tally["after_completion"] += 1
            elif before_rows is not None and after_rows is not None and len(after_rows) > len(before_rows):
                tally["progress"] += 1
            else:
                tally["startup"] += 1
        elif rc == 0:
            finished = True
        else:
            print(f"storm: attempt {attempts} exited {rc} on its own (not killed):\n{tail(storm_log)}", file=sys.stderr)
            problems.append(f"attempt {attempts} failed with exit {rc}")
            aborted = True
            break
    if not aborted:
        rc, _ = run_to_end(cmd(storm), storm_log, timeout=max(600, 20 * t_ref), env=storm_env)
        if rc != 0:
            problems.append(f"the final (unkilled) run exited {rc}; see {rel(storm_log, ROOT)}")
            print(tail(storm_log), file=sys.stderr)
    storm_problems, storm_facts = verify_dir(storm, expect)
    problems += [f"storm: {p}" for p in storm_problems]
    diff = compare(ref_facts, storm_facts)
    problems += diff

    print(f"storm    {kills} kills in {attempts} attempts (+1 final run), seed {a.seed}, window {a.kill_window}; "
          f"delays {min(delays, default=0):.2f}-{max(delays, default=0):.2f} s")
    print(f"         kills after new rows were committed {tally['progress']}, before any new commit {tally['startup']}, "
          f"after completion {tally['after_completion']}; kills that left a temporary file {tally['tmp_left']}, "
          f"left trajectories.jsonl out of step with the batches {tally['jsonl_behind']}")
    print(f"         {len(storm_facts['trajs'])} trajectories in {storm_facts['batches']} batches, "
          f"{len(storm_facts['dropped'])} rows dropped")
    if kills < a.kills:
        problems.append(f"only {kills} of {a.kills} kills were delivered")
    print(f"rows     {n_valid} (reference kept {len(ref_facts['batch_rows'])}, storm kept {len(storm_facts['batch_rows'])})")
    print(f"identical: {'yes' if not diff and not storm_problems else 'no'}")
    for p in problems:
        print(f"  FAIL {p}")
    print(f"logs     {rel(logs, ROOT)}/")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
