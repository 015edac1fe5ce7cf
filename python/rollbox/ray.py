"""Scale-out on Ray: rollout actors, each holding one `rollbox.Host`, and a pool that spreads
rows over them and gathers the results.

    import ray, rollbox.ray
    ray.init(address="auto")                     # a running cluster (`ray start --head`, ...)
    pool = rollbox.ray.RolloutPool(
        4, "rlvr.wasm", rewards={"math": "math.wasm"}, tokenizer="/models/tokenizer.json",
        engine="sglang:http://router:30000", config={"reward": "math"},
    )
    pool.set_version(7)                          # after a weight update, on every actor
    results = pool.rollout(rows, group_size=8)   # one entry per row, in row order

Each actor needs an engine of its own: a spec string for rollbox's backends (`sglang:URL`,
`openai:URL`, `replay:FILE`), or `engine_factory="module:function"` (+ `engine_kwargs`) that
the actor calls once to build an object with AReaL's `async agenerate` (e.g. AReaL's remote
SGLang client). Results are AReaL's tensor dicts as numpy arrays (`None` for a rejected
episode, an `EpisodeError` for a failed one), carried by Ray's object store.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import ray

from ._native import EpisodeError, Host


@ray.remote(num_cpus=1, max_concurrency=1024)
class RolloutActor:
    """One `Host` per actor process; episodes run concurrently on the actor's event loop."""

    def __init__(self, workflow: str, engine_factory: str | None = None,
                 engine_kwargs: dict | None = None, **host_kwargs):
        self.host = Host(workflow, **host_kwargs)
        self.episodes = 0
        self.engine = None
        if engine_factory:
            module, _, name = engine_factory.partition(":")
            self.engine = getattr(importlib.import_module(module), name)(**(engine_kwargs or {}))

    async def run(self, rows: list[dict]) -> list[Any]:
        self.episodes += len(rows)

        async def one(i, row):
            try:
                return await self.host.arun_episode(row, self.engine, sample_index=i)
            except EpisodeError as e:
                return e

        return await asyncio.gather(*(one(i, r) for i, r in enumerate(rows)))

    def set_version(self, version: int) -> int:
        self.host.set_version(version)
        return self.host.version

    def version(self) -> int:
        return self.host.version

    def served(self) -> int:
        """Episodes this actor has run."""
        return self.episodes


class RolloutPool:
    """`n` rollout actors for one workflow; `rollout` spreads rows over them."""

    def __init__(self, n: int, workflow: str, *, num_cpus: float = 1, **actor_kwargs):
        if n < 1:
            raise ValueError("a RolloutPool needs at least one actor")
        self.actors = [
            RolloutActor.options(num_cpus=num_cpus).remote(str(workflow), **actor_kwargs)
            for _ in range(n)
        ]

    def rollout(self, rows: list[dict], group_size: int = 1) -> list[Any]:
        """Run every row once; results in row order. Consecutive `group_size` rows (a GRPO
        group: the same prompt sampled several times) go to the same actor."""
        if group_size < 1:
            raise ValueError("group_size must be at least 1")
        groups = [rows[i:i + group_size] for i in range(0, len(rows), group_size)]
        return [r for g in self.rollout_groups(groups) for r in g]

    def rollout_groups(self, groups: list[list[dict]]) -> list[list[Any]]:
        """Run every row of every group once; each group on one actor, groups spread round
        robin. Results as the groups were given."""
        shares: list[list[int]] = [[] for _ in self.actors]
        for g in range(len(groups)):
            shares[g % len(self.actors)].append(g)
        refs = [
            actor.run.remote([row for g in share for row in groups[g]])
            for actor, share in zip(self.actors, shares)
            if share
        ]
        out: list[list[Any]] = [[] for _ in groups]
        for share, results in zip([s for s in shares if s], ray.get(refs)):
            k = 0
            for g in share:
                out[g] = results[k:k + len(groups[g])]
                k += len(groups[g])
        return out

    def set_version(self, version: int) -> None:
        """Set the policy version on every actor (after a weight update)."""
        ray.get([a.set_version.remote(version) for a in self.actors])

    def versions(self) -> list[int]:
        return ray.get([a.version.remote() for a in self.actors])

    def served(self) -> list[int]:
        """Episodes each actor has run."""
        return ray.get([a.served.remote() for a in self.actors])
