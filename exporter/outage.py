"""Say a failure once: when it starts, when its kind changes, and when it ends.

A source polled every few seconds that fails for an hour must not write a thousand
identical lines; a log that says nothing about the hour is no better. ``OutageLog``
keeps the middle: one warning when the failure starts, one when it turns into a
different kind of failure, one info line with the count and duration when it ends.
``Throttle`` is the companion for events without an end (refused accepts): at most one
line per interval, carrying how many were held back.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable
from typing import Any

import structlog

__all__ = ["OutageLog", "Throttle", "flush_throttles"]


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
    """At most one ``event`` per ``interval_s``; the next line says how many were held back.

    Under a running event loop, what an interval held back is logged when it ends, with
    the last held call's fields, even if no call comes after it: a burst is told whole
    within an interval of its end, not at the next burst (which may be days later). At
    exit ``flush_throttles`` logs what is still held, which no timer will.
    """

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
        self._held_fields: dict[str, Any] = {}
        self._flush: asyncio.TimerHandle | None = None

    def warning(self, **fields: Any) -> None:
        now = self._clock()
        if self._last is not None and now - self._last < self._interval_s:
            self._held_back += 1
            self._held_fields = fields
            _holding.add(self)
            self._flush_at_interval_end(self._last + self._interval_s - now)
            return
        self._emit(fields)

    def _emit(self, fields: dict[str, Any]) -> None:
        if self._flush is not None:
            # This line tells what the flush would have: left pending (a call came at the
            # interval's end before the timer ran), it would tell the new interval's first
            # held call at once, a second line within the interval.
            self._flush.cancel()
            self._flush = None
        self._log.warning(self._event, suppressed_since_last=self._held_back, **fields)
        self._last = self._clock()
        self._held_back = 0
        self._held_fields = {}
        _holding.discard(self)

    def _flush_at_interval_end(self, delay_s: float) -> None:
        if self._flush is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop in this thread: the next line says it
            return
        self._flush = loop.call_later(delay_s, self._flush_held)

    def _flush_held(self) -> None:
        """The interval is over: the last call it held back is logged, counting the rest."""
        self._flush = None
        self.flush()

    def flush(self) -> None:
        """Log the last call held back now, counting the rest; nothing if none is."""
        if self._held_back:
            self._held_back -= 1  # the call logged now is one of those held
            self._emit(self._held_fields)


# Throttles holding calls back, until they log them: what flush_throttles tells at exit.
# Weak: a throttle whose owner is gone has no one left to tell about.
_holding: weakref.WeakSet[Throttle] = weakref.WeakSet()


def flush_throttles() -> None:
    """Log what every throttle still holds back, as its interval's end would have: at
    exit, where the timers that would log it are never run."""
    for throttle in list(_holding):
        throttle.flush()
