"""Say a failure once: when it starts, when its kind changes, and when it ends.

A source polled every few seconds that fails for an hour must not write a thousand
identical lines; a log that says nothing about the hour is no better. ``OutageLog``
keeps the middle: one warning when the failure starts, one when it turns into a
different kind of failure, one info line with the count and duration when it ends.
``Throttle`` is the companion for events without an end (refused accepts): at most one
line per interval, carrying how many were held back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog

__all__ = ["OutageLog", "Throttle"]


class OutageLog:
    """Logs ``<name>_failed``, ``<name>_failure_changed`` and ``<name>_recovered``."""

    def __init__(
        self,
        name: str,
        *,
        logger: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._name = name
        self._log = logger if logger is not None else structlog.get_logger(__name__)
        self._clock = clock
        self._kind: str | None = None
        self._key: object = None
        self._failures = 0
        self._since = 0.0

    def failed(self, *, kind: str, error: str, key: object = None, **fields: Any) -> None:
        """One failure; ``kind`` is stable across repeats (an exception class, a code).
        A change of ``kind`` or of ``key`` (what else tells two failures of one kind
        apart for the reader: which call failed) is logged as a changed failure."""
        self._failures += 1
        if self._kind is None:
            self._since = self._clock()
            self._log.warning(f"{self._name}_failed", kind=kind, error=error, **fields)
        elif (kind, key) != (self._kind, self._key):
            self._log.warning(
                f"{self._name}_failure_changed",
                kind=kind,
                previous_kind=self._kind,
                error=error,
                failures=self._failures,
                **fields,
            )
        self._kind, self._key = kind, key

    def succeeded(self, **fields: Any) -> None:
        """A success: ends the outage, if one was running."""
        if self._kind is None:
            return
        self._log.info(
            f"{self._name}_recovered",
            failures=self._failures,
            last_kind=self._kind,
            duration_seconds=round(self._clock() - self._since, 3),
            **fields,
        )
        self._kind = self._key = None
        self._failures = 0


class Throttle:
    """At most one ``event`` per ``interval_s``; the next line says how many were held back."""

    def __init__(
        self,
        event: str,
        *,
        interval_s: float,
        logger: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._event = event
        self._interval_s = interval_s
        self._log = logger if logger is not None else structlog.get_logger(__name__)
        self._clock = clock
        self._last: float | None = None
        self._held_back = 0

    def warning(self, **fields: Any) -> None:
        now = self._clock()
        if self._last is not None and now - self._last < self._interval_s:
            self._held_back += 1
            return
        self._log.warning(self._event, suppressed_since_last=self._held_back, **fields)
        self._last = now
        self._held_back = 0
