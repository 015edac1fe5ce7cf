"""Errors the host returns, as Python exceptions."""

from __future__ import annotations

from componentize_py_types import Err

from wit_world.imports import types as _wit

_KINDS = {
    _wit.Error_InvalidArgument: "invalid-argument",
    _wit.Error_LimitExceeded: "limit-exceeded",
    _wit.Error_Unknown: "unknown",
    _wit.Error_Unavailable: "unavailable",
    _wit.Error_Timeout: "timeout",
    _wit.Error_Trapped: "trapped",
    _wit.Error_InvalidOutput: "invalid-output",
    _wit.Error_Unsupported: "unsupported",
}


class HostError(RuntimeError):
    """A host call failed. `kind` is the WIT error case (`invalid-argument`, `limit-exceeded`,
    `unknown`, `unavailable`, `timeout`, `trapped`, `invalid-output`, `unsupported`)."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


def host_error(value) -> HostError:
    """The `HostError` for a WIT `error` value."""
    return HostError(_KINDS.get(type(value), "error"), getattr(value, "value", str(value)))


def call(fn, *args):
    """Call a host function, turning its `Err` into a `HostError`."""
    try:
        return fn(*args)
    except Err as e:
        raise host_error(e.value) from None
