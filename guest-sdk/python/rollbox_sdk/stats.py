"""Scalar statistics and logging, attributed to the episode (AReaL's `stats_tracker`)."""

from __future__ import annotations

from wit_world.imports import log as _wit


class _Tracker:
    """`stats_tracker.get(scope).scalar(reward=1.0, num_turns=2)`: each keyword is one stat;
    the run reports the mean of each key. Scopes are accepted and ignored (one per episode)."""

    def get(self, scope=None) -> _Tracker:
        return self

    def scalar(self, **values) -> None:
        for key, value in values.items():
            _wit.stat(str(key), float(value))

    def stat(self, **values) -> None:
        self.scalar(**values)


stats_tracker = _Tracker()


class _Logger:
    """A `logging.Logger`-like object whose lines go to the host's episode log."""

    def __init__(self, name: str):
        self.name = name

    def _log(self, level, msg, args):
        text = str(msg) % args if args else str(msg)
        _wit.log(level, f"{self.name}: {text}")

    def debug(self, msg, *args, **_):
        self._log(_wit.Level.DEBUG, msg, args)

    def info(self, msg, *args, **_):
        self._log(_wit.Level.INFO, msg, args)

    def warning(self, msg, *args, **_):
        self._log(_wit.Level.WARN, msg, args)

    warn = warning

    def error(self, msg, *args, **_):
        self._log(_wit.Level.ERROR, msg, args)


def getLogger(name: str = "workflow") -> _Logger:  # noqa: N802 - logging's name
    return _Logger(name)
