"""Type stubs of the native module (see python/src/lib.rs)."""

from os import PathLike
from typing import Any, Awaitable, Mapping

import numpy as np

def build_info() -> dict[str, Any]:
    """This build: `version` (the package's), `commit`, `wit` (`rollbox:workflow@X.Y.Z`),
    `wasmtime`, `wasmtime_patches` (in the order they apply) and `line` (what `rollbox
    --version` prints after the name)."""
    ...

class EpisodeError(RuntimeError):
    """An episode failed; `kind` is the fault (`trap`, `timeout`, `guest_error`, ...)."""

    kind: str

class Host:
    """A workflow component with its rewards and tools, ready to run episodes."""

    def __init__(
        self,
        workflow: str | PathLike[str],
        *,
        rewards: Mapping[str, str | PathLike[str] | Mapping[str, Any]] | None = None,
        tools: Mapping[str, str | PathLike[str] | Mapping[str, Any]] | None = None,
        tokenizer: str | PathLike[str] | None = None,
        engine: str | None = None,
        config: Mapping[str, Any] | str | None = None,
        limits: Mapping[str, Any] | None = None,
    ) -> None: ...
    def arun_episode(
        self,
        data: Mapping[str, Any],
        engine: Any | None = None,
        *,
        report: bool = False,
        sample_index: int = 0,
        seed: int | None = None,
    ) -> Awaitable[dict[str, np.ndarray] | None | tuple[dict[str, np.ndarray] | None, dict[str, Any]]]: ...
    def set_version(self, version: int) -> None: ...
    @property
    def version(self) -> int: ...
    @property
    def sha256(self) -> str: ...

class Session:
    """A live instance of a tool, called any number of times (`Components.open_session`)."""

    def call(self, args: str | Mapping[str, Any]) -> Awaitable[dict[str, Any]]: ...
    def close(self) -> Awaitable[None]: ...

class Environment:
    """One episode of an environment (`Components.open_environment`)."""

    def reset(self, row: str | Mapping[str, Any]) -> Awaitable[dict[str, Any]]: ...
    def step(self, action: str) -> Awaitable[dict[str, Any]]: ...
    def close(self) -> Awaitable[None]: ...

class Components:
    """Reward and tool components without a workflow, each call in a fresh sandbox."""

    def __init__(
        self,
        *,
        rewards: Mapping[str, str | PathLike[str] | Mapping[str, Any]] | None = None,
        tools: Mapping[str, str | PathLike[str] | Mapping[str, Any]] | None = None,
        environments: Mapping[str, str | PathLike[str] | Mapping[str, Any]] | None = None,
        max_host_memory: str | int | None = None,
    ) -> None: ...
    def score(
        self,
        name: str,
        completion: str,
        *,
        prompt: str = "",
        data: Mapping[str, Any] | None = None,
        prompt_ids: list[int] = ...,
        completion_ids: list[int] = ...,
    ) -> Awaitable[dict[str, Any]]: ...
    def call_tool(self, name: str, args: str | Mapping[str, Any]) -> Awaitable[dict[str, Any]]: ...
    def open_session(self, name: str) -> Awaitable[Session]: ...
    def open_environment(self, name: str) -> Awaitable[Environment]: ...
    @property
    def environment_names(self) -> list[str]: ...
    def tool_schemas(self) -> list[dict[str, Any]]: ...
    @property
    def reward_names(self) -> list[str]: ...
    @property
    def tool_names(self) -> list[str]: ...
    @property
    def provenance(self) -> dict[str, str]: ...
