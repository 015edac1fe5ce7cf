"""rollbox.ray on a real local Ray cluster: `ray start --head --num-cpus=2`, a pool of 2 rollout
actors (one rollbox Host each) over the replay engine with the conformance suite's answers,
a version broadcast, then every row comes back once, in row order, with AReaL's tensors (the
group's rows as a multiset: the replay engine hands a prompt's answers out in call order) and
the broadcast version on every output token. Stops the head afterwards.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import rollbox.ray  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GUESTS = ROOT / "target" / "wasm-guests" / "wasm32-wasip2" / "guest"
TOKENIZER = Path(os.environ.get("ROLLBOX_MODEL_DIR", Path.home() / ".cache/rollbox/models")) / "SmolLM2-135M-Instruct.Q4_1.gguf"
FIXTURE = json.loads((ROOT / "tests" / "conformance" / "rlvr.json").read_text())
PORT = "6391"


@pytest.fixture(scope="module")
def cluster():
    ray_bin = Path(sys.executable).parent / "ray"
    start = [str(ray_bin), "start", "--head", "--num-cpus=2", f"--port={PORT}",
             "--include-dashboard=false", "--disable-usage-stats"]
    subprocess.run([str(ray_bin), "stop", "--force"], capture_output=True)
    subprocess.run(start, check=True, capture_output=True)
    try:
        ray.init(address=f"127.0.0.1:{PORT}", log_to_driver=False)
        yield
    finally:
        ray.shutdown()
        subprocess.run([str(ray_bin), "stop", "--force"], capture_output=True)


def test_two_actors_return_every_row_once_with_the_broadcast_version(cluster, tmp_path):
    replay = tmp_path / "answers.jsonl"
    with replay.open("w") as f:
        for case in FIXTURE["cases"]:
            for s in case["samples"]:
                # No versions in the answers: the host stamps the broadcast one.
                rec = {k: v for k, v in s["record"].items() if k != "output_versions"}
                f.write(json.dumps(rec) + "\n")
    pool = rollbox.ray.RolloutPool(
        2,
        str(GUESTS / "rollbox_workflow_rlvr.wasm"),
        rewards={"math": str(GUESTS / "rollbox_reward_math.wasm")},
        tokenizer=str(TOKENIZER),
        engine=f"replay:{replay}",
        config=FIXTURE["config"],
    )
    pool.set_version(11)
    assert pool.versions() == [11, 11]
    # Each case's rows are one group; groups alternate between the two actors.
    groups = [[case["row"]] * len(case["samples"]) for case in FIXTURE["cases"]]
    sizes = [len(g) for g in groups]
    out = [t for g in pool.rollout_groups(groups) for t in g]
    assert len(out) == sum(sizes)
    assert pool.served() == [sizes[0] + sizes[2], sizes[1] + sizes[3]], "both actors ran their groups"
    start = 0
    for case, size in zip(FIXTURE["cases"], sizes):
        group = out[start:start + size]
        start += size
        assert all(isinstance(t, dict) for t in group), group
        for t in group:
            assert t["input_ids"].dtype == np.int32 and t["rewards"].dtype == np.float32
            gen = t["versions"][t["loss_mask"] == 1]
            assert (gen == 11).all(), "the broadcast version on every output token"
        # AReaL's group (versions aside) as a multiset of rows.
        exp = case["expected"]
        got_ids = sorted(tuple(t["input_ids"][0].tolist()) for t in group)
        width = exp["input_ids"]["shape"][1]
        want = np.array(exp["input_ids"]["data"], dtype=np.int32).reshape(exp["input_ids"]["shape"])
        mask = np.array(exp["attention_mask"]["data"], dtype=bool).reshape(exp["attention_mask"]["shape"])
        want_ids = sorted(tuple(want[i][mask[i]].tolist()) for i in range(want.shape[0]))
        assert got_ids == want_ids, case["name"]
        assert sorted(float(t["rewards"][0]) for t in group) == sorted(s["reward"] for s in case["samples"])
        assert width >= max(len(r) for r in got_ids)
