"""`rollbox serve`'s `POST /get_reward` with OpenRLHF 0.11.2's own client code
(`SingleTurnAgentExecutor._fetch_rewards_via_http`, what `--reward.remote_url` uses): the
rewards come back in the shape OpenRLHF reads (`rewards`, `scores`, `extra_logs`), for one
request and for 64 at once, rotating over two URLs as OpenRLHF does.

Run in the trainers venv (scripts/install/trainers-venv.sh) by scripts/test.sh."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from openrlhf.utils.agent import SingleTurnAgentExecutor

ROOT = Path(__file__).resolve().parents[3]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
ROLLBOX = TARGET / "debug/rollbox"

PROMPT = "<|im_start|>user\nNatalia sold 48 clips, then 24 more. How many?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    assert ROLLBOX.exists(), f"{ROLLBOX} is built by `cargo test --workspace`"
    proc = subprocess.Popen(
        [str(ROLLBOX), "serve", "--listen", "127.0.0.1:0", "--reward", "math=math",
         "--engine", "embedded"],
        stdout=subprocess.PIPE,
        env={**os.environ, "ROLLBOX_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))},
        text=True,
    )
    line = proc.stdout.readline().strip()
    assert line.startswith("listening on http://"), line
    yield line.removeprefix("listening on ")
    proc.kill()
    proc.wait()


def test_openrlhfs_client_reads_the_rewards(server):
    executor = SingleTurnAgentExecutor(remote_rm_url=f"{server}/get_reward")
    for response, label, want in [
        ("48 + 24 = 72, so \\boxed{72}<|im_end|>", "72", 1.0),
        ("The answer is 96.<|im_end|>", "72", 0.0),
    ]:
        out = asyncio.run(executor._fetch_rewards_via_http([PROMPT + response], [PROMPT], [label]))
        assert len(out) == 1, out
        info = out[0]
        assert info["rewards"] == [want] and info["scores"] == [want], info
        assert info["extra_logs"]["rollbox_fault"] == [0.0], info


def test_64_concurrent_requests_over_two_urls(server):
    url = f"{server}/get_reward?reward=math"
    executor = SingleTurnAgentExecutor(remote_rm_url=[url, url])

    async def many():
        return await asyncio.gather(
            *(
                executor._fetch_rewards_via_http(
                    [PROMPT + f"so \\boxed{{{70 + i % 4}}}"], [PROMPT], ["72"]
                )
                for i in range(64)
            )
        )

    outs = asyncio.run(many())
    got = [o[0]["rewards"][0] for o in outs]
    assert got == [1.0 if i % 4 == 2 else 0.0 for i in range(64)]


KEY = "team-a-secret-key"


@pytest.fixture(scope="module")
def tenant_server(tmp_path_factory):
    """`rollbox serve --tenants`: one tenant whose key OpenRLHF carries in the URL."""
    import hashlib

    tmp = tmp_path_factory.mktemp("tenants")
    tenants = tmp / "tenants.toml"
    tenants.write_text(
        f'[[tenant]]\nname = "team-a"\nkey_sha256 = ["{hashlib.sha256(KEY.encode()).hexdigest()}"]\n'
    )
    tenants.chmod(0o600)
    proc = subprocess.Popen(
        [str(ROLLBOX), "serve", "--listen", "127.0.0.1:0", "--tenants", str(tenants),
         "--reward", "math=math", "--engine", "embedded"],
        stdout=subprocess.PIPE,
        env={**os.environ, "ROLLBOX_CACHE_DIR": str(tmp / "cache")},
        text=True,
    )
    line = proc.stdout.readline().strip()
    assert line.startswith("listening on http://"), line
    yield line.removeprefix("listening on http://")
    proc.kill()
    proc.wait()


def test_openrlhfs_client_carries_a_tenant_key_in_the_url(tenant_server):
    """A shared server: OpenRLHF's client, given `http://team-a:KEY@host/...`, is let in (its
    aiohttp session sends the URL's key as `Authorization: Basic`); without the key, 401."""
    import requests

    url = f"http://team-a:{KEY}@{tenant_server}/get_reward?reward=math"
    executor = SingleTurnAgentExecutor(remote_rm_url=url)
    out = asyncio.run(
        executor._fetch_rewards_via_http([PROMPT + "so \\boxed{72}"], [PROMPT], ["72"])
    )
    assert out[0]["rewards"] == [1.0], out
    body = {"query": ["x"], "prompts": [""], "labels": ["1"]}
    bare = requests.post(f"http://{tenant_server}/get_reward?reward=math", json=body, timeout=30)
    assert bare.status_code == 401, bare.text
    wrong = requests.post(
        f"http://team-a:nope@{tenant_server}/get_reward?reward=math", json=body, timeout=30
    )
    assert wrong.status_code == 401, wrong.text
