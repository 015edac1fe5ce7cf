"""The inference engine, and the event loop that runs an episode's coroutine.

`await engine.agenerate(req)` queues the request; when every task of the episode is waiting,
the loop sends all queued requests to the host in one `generate-many` call (so requests
gathered with `asyncio.gather` are generated concurrently), then resumes the tasks with their
responses. A request made when nothing else is ready, queued or scheduled is sent at once. Time inside the loop is virtual: `asyncio.sleep(s)` advances it without waiting.
"""

from __future__ import annotations

import asyncio
from asyncio import base_events

from componentize_py_types import Err

from wit_world.imports import engine as _wit

from .api import ModelRequest, ModelResponse, request_to_wit, response_from_wit
from .errors import host_error


class _HostSelector:
    """The loop's selector: where the loop would block, queued requests go to the host."""

    def __init__(self, loop: EpisodeLoop):
        self._loop = loop

    def select(self, timeout):
        self._loop._idle(timeout)
        return []

    def close(self):
        pass


class EpisodeLoop(base_events.BaseEventLoop):
    """An asyncio event loop for one episode, with no I/O of its own."""

    def __init__(self):
        super().__init__()
        self._selector = _HostSelector(self)
        self._queued = []
        self._now = 0.0
        self.generate_calls = 0

    def time(self):
        return self._now

    def _process_events(self, event_list):
        pass

    def _write_to_self(self):
        pass

    def _queue(self, request, future):
        self._queued.append((request, future))

    def _idle(self, timeout):
        if timeout == 0:
            return  # other tasks are ready: let them queue their requests first
        if self._queued:
            self._flush()
        elif timeout is None:
            raise RuntimeError(
                "the episode is waiting for something that nothing will complete "
                "(only engine.agenerate, rewards and asyncio.sleep can be awaited in a workflow)"
            )
        else:
            self._now += timeout

    def _flush(self):
        batch, self._queued = self._queued, []
        live = [(r, f) for r, f in batch if not f.cancelled()]
        if not live:
            return
        self.generate_calls += 1
        if len(live) == 1:
            try:
                results = [_wit.generate(live[0][0])]
            except Err as e:
                results = [e]
        else:
            results = _wit.generate_many([r for r, _ in live])
        for (_, future), result in zip(live, results):
            if isinstance(result, Err):
                future.set_exception(host_error(result.value))
            else:
                value = getattr(result, "value", result)
                future.set_result(response_from_wit(value))


class InferenceEngine:
    """The engine a workflow generates with (AReaL's `InferenceEngine`, rollout side)."""

    async def agenerate(self, req: ModelRequest) -> ModelResponse:
        """Generate one sample for `req` (`req.gconfig.n_samples` must be 1)."""
        loop = asyncio.get_running_loop()
        if not isinstance(loop, EpisodeLoop):
            raise RuntimeError("engine.agenerate must be awaited inside arun_episode")
        request = request_to_wit(req)
        if not (loop._ready or loop._queued or loop._scheduled):
            # Nothing else could run or queue a request before the loop would send this one
            # alone: send it now, without a round through the loop (the same call, result and
            # error as after a suspension, at a fraction of the cost).
            loop.generate_calls += 1
            try:
                return response_from_wit(_wit.generate(request))
            except Err as e:
                raise host_error(e.value) from None
        future = loop.create_future()
        loop._queue(request, future)
        return await future

    def generate(self, req: ModelRequest) -> ModelResponse:
        """Generate without a coroutine (blocks the episode until the response is back)."""
        try:
            return response_from_wit(_wit.generate(request_to_wit(req)))
        except Err as e:
            raise host_error(e.value) from None

    def get_version(self) -> int:
        """The current policy (weight) version."""
        return _wit.version()


engine = InferenceEngine()
