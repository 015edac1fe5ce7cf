"""A Python workflow for the SDK's tests: `config["mode"]` picks what it does.

* `gather`: three `agenerate` calls under `asyncio.gather` (one `generate-many` on the host),
  merged into one padded batch with `rollbox.merge`.
* `raise`: an exception two frames deep (its traceback must reach the fault message).
* `reject`: returns None.
* `bad_dtype`: a float in an int32 tensor.
* `list_tensor`: a plain list where a tensor belongs.
* `open_file`: reads /etc/hostname (no files in the sandbox).
* `sync`: a plain `def arun_episode` using `engine.generate`.
* `sleep`: `asyncio.sleep(5)` between two generations (virtual time: returns at once).
* `never`: awaits a future nothing completes.
* `entropy`: `random`, `uuid4` and the clock into the metadata.
* `reward`: scores through `rollbox.score` in AReaL's argument order.
* `batching`: a request made alone (sent at once), one made while a task's request is waiting
  (the two go together), and one the host refuses (a `HostError` at the `await`).
"""

import asyncio
import random
import time
import uuid

# The guest SDK by its old name (`rollbox`, now `rollbox_sdk`): this probe keeps the alias
# working for components written before the rename.
import rollbox
from rollbox import GenerationHyperparameters, ModelRequest, RolloutWorkflow


def _request(ids, n=4):
    return ModelRequest(input_ids=list(ids), gconfig=GenerationHyperparameters(max_new_tokens=n))


def _deep_failure(x):
    return {"a": 1}[x]


class Probe(RolloutWorkflow):
    def __init__(self, mode="gather", **_):
        self.mode = mode

    async def arun_episode(self, engine, data):
        mode = self.mode
        prompt = rollbox.tokenizer.encode("Hello there", add_special_tokens=False)
        if mode == "gather":
            reqs = [_request(prompt + [i + 1]) for i in range(3)]
            resps = await asyncio.gather(*(engine.agenerate(r) for r in reqs))
            outs = [rollbox.single_turn(r, float(i)) for i, r in enumerate(resps)]
            rollbox.episode.metadata["rids"] = len(resps)
            return rollbox.merge(outs, 1.0)
        if mode == "raise":
            return _deep_failure("missing key")
        if mode == "reject":
            return None
        if mode == "bad_dtype":
            return {"loss_mask": rollbox.tensor([0, 1, 0.5], dtype=rollbox.int32)}
        if mode == "list_tensor":
            return {"input_ids": [1, 2, 3]}
        if mode == "open_file":
            with open("/etc/hostname") as f:
                return {"x": rollbox.tensor([len(f.read())], dtype=rollbox.int32)}
        if mode == "sleep":
            a = await engine.agenerate(_request(prompt))
            # An hour: past the episode's 600 s timeout, so the episode completes only if
            # the sleep is virtual (tests/tests/python_workflows.rs; no clock bound there).
            await asyncio.sleep(3600)
            b = await engine.agenerate(_request(prompt + a.output_tokens))
            return rollbox.single_turn(b, 0.0)
        if mode == "never":
            await asyncio.get_running_loop().create_future()
        if mode == "entropy":
            rollbox.episode.metadata.update(
                random=random.random(), uuid=uuid.uuid4().hex, clock=time.time() > 1.6e9
            )
            return None if data.get("reject") else rollbox.single_turn(
                await engine.agenerate(_request(prompt)), 0.0
            )
        if mode == "reward":
            value = rollbox.score("math", "q", "\\boxed{72}", prompt, [1, 2], **data)
            return {"rewards": rollbox.tensor([value], dtype=rollbox.float32)}
        if mode == "batching":
            loop = asyncio.get_running_loop()
            alone = await engine.agenerate(_request(prompt))
            task = asyncio.create_task(engine.agenerate(_request(prompt + [2])))
            own = await engine.agenerate(_request(prompt + [3]))
            other = await task
            refused = ModelRequest(input_ids=prompt, gconfig=GenerationHyperparameters(n_samples=2))
            try:
                await engine.agenerate(refused)
                error = None
            except rollbox.HostError as e:
                error = e.kind
            rollbox.episode.metadata.update(sdk_calls=loop.generate_calls, error=error)
            return rollbox.merge([rollbox.single_turn(r, 0.0) for r in (alone, own, other)], 0.0)
        raise ValueError(f"unknown mode {mode!r}")


class SyncProbe(RolloutWorkflow):
    def arun_episode(self, engine, data):
        prompt = rollbox.tokenizer.encode("Hello there", add_special_tokens=False)
        return rollbox.single_turn(engine.generate(_request(prompt)), 0.5)


def make(config):
    return SyncProbe() if config.get("mode") == "sync" else Probe(**config)


WitWorld = rollbox.export(make)
