"""GSM8K GRPO with AReaL 1.0.4, the rollouts run by rollbox.

This is AReaL's `examples/math/gsm8k_rl.py` recipe (same config file, same launcher, same
dataset, trainer and reward) with one thing changed: the workflow AReaL's rollout workers run
is `rollbox.areal.WasmWorkflow` over rollbox's built-in `rlvr` component and `math` reward
(both may be paths to your own `.wasm` files instead), in place of
`areal.workflow.rlvr.RLVRWorkflow` with `areal.reward.gsm8k.gsm8k_reward_fn`. Every worker
loads the components once and runs each episode in a fresh sandbox, generating through the
engine AReaL hands it (its SGLang/vLLM client, version stamps and pauses unchanged).

    pip install areal==1.0.4 ./python
    python -m areal.launcher.local python/examples/areal/gsm8k_rl.py \\
        --config examples/math/gsm8k_grpo.yaml        # AReaL's own config file

Environment: `ROLLBOX_WORKFLOW` (default `rlvr`), `ROLLBOX_REWARD` (default `math`),
`ROLLBOX_TOKENIZER_DIR` (where the tokenizer is saved for the workers; default under the
cluster's `fileroot`, which every node sees).

`--check TOKENIZER` builds what the script gives the trainer (the workflow kwargs, as AReaL's
single-controller mode ships them: JSON) for a tokenizer path, loads the workflow from them as a
worker would, and exits: CI runs that; training itself needs GPUs and an inference server.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

WORKFLOW = "rollbox.areal.WasmWorkflow"


def rollbox_kwargs(tokenizer_dir: str, gconfig) -> dict:
    """The kwargs every rollout worker builds its `WasmWorkflow` from: plain JSON."""
    return {
        "workflow": os.environ.get("ROLLBOX_WORKFLOW", "rlvr"),
        "rewards": {"math": os.environ.get("ROLLBOX_REWARD", "math")},
        "tokenizer": tokenizer_dir,
        "config": {
            "reward": "math",
            "gconfig": {k: v for k, v in dataclasses.asdict(gconfig).items() if v is not None},
            "enable_thinking": False,
        },
    }


def save_tokenizer(tokenizer, root: str) -> str:
    """rollbox reads `tokenizer.json` and its config from a directory: save AReaL's tokenizer
    there once (a hub id such as `Qwen/Qwen2.5-1.5B-Instruct` then works too)."""
    out = Path(os.environ.get("ROLLBOX_TOKENIZER_DIR", Path(root) / "rollbox-tokenizer"))
    if not (out / "tokenizer.json").exists():
        out.mkdir(parents=True, exist_ok=True)
        tokenizer.save_pretrained(str(out))
    return str(out)


def main(argv: list[str]) -> None:
    from areal import PPOTrainer
    from areal.api.cli_args import GRPOConfig, load_expr_config
    from areal.dataset import get_custom_dataset
    from areal.utils.hf_utils import load_hf_tokenizer

    config, _ = load_expr_config(argv, GRPOConfig)
    tokenizer = load_hf_tokenizer(config.tokenizer_path)
    datasets = {
        split: get_custom_dataset(split=split, dataset_config=cfg, tokenizer=tokenizer)
        for split, cfg in (("train", config.train_dataset), ("test", config.valid_dataset))
    }
    tokenizer_dir = save_tokenizer(tokenizer, config.cluster.fileroot)
    train_kwargs = rollbox_kwargs(tokenizer_dir, config.gconfig)
    # Evaluation samples at temperature 0.6, as AReaL's recipe does.
    eval_kwargs = rollbox_kwargs(tokenizer_dir, config.gconfig.new(temperature=0.6))
    with PPOTrainer(config, train_dataset=datasets["train"], valid_dataset=datasets["test"]) as trainer:
        trainer.train(
            workflow=WORKFLOW,
            workflow_kwargs=train_kwargs,
            eval_workflow=WORKFLOW,
            eval_workflow_kwargs=eval_kwargs,
        )


def check(tokenizer_path: str) -> None:
    """What a worker does with the kwargs, short of training."""
    from areal.api.cli_args import GenerationHyperparameters
    from areal.utils.dynamic_import import import_from_string

    kwargs = rollbox_kwargs(tokenizer_path, GenerationHyperparameters(max_new_tokens=256))
    shipped = json.loads(json.dumps(kwargs))  # what the controller sends over RPC
    workflow = import_from_string(WORKFLOW)(**shipped)
    print(f"{WORKFLOW} built from JSON kwargs: workflow {shipped['workflow']!r}, "
          f"rewards {shipped['rewards']}, host {type(workflow.host).__name__}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2])
    else:
        main(sys.argv[1:])
