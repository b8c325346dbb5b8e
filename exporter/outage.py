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
from dataclasses import dataclass
from typing import Any

import structlog

from exporter.ratelimit import TokenBucket

_log = structlog.get_logger(__name__)

__all__ = ["OutageLog", "RepeatedFailure", "Throttle", "flush_held_lines"]


class OutageLog:
    """Logs ``<name>_failed``, ``<name>_failure_changed`` and ``<name>_recovered``.

    A failure that comes and goes (a kubelet whose rate limit another client spends,
    failing every other poll) is an outage of a poll or two each time: two lines an
    outage made a line every poll. So after ``burst`` outages, those starting within
    the same ``interval_s`` get no lines of their own: the next line counts them
    (``outages_not_logged``); one still going when the interval ends is told then, and
    those that ended are told in one ``<name>_recovered`` line once it does.
    """

    def __init__(
        self,
        name: str,
        *,
        logger: Any = None,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = 60.0,
        burst: int = 2,
    ) -> None:
        self._name = name
        self._log = logger if logger is not None else structlog.get_logger(__name__)
        self._clock = clock
        self._kind: str | None = None
        self._key: object = None
        self._failures = 0
        self._since = 0.0
        self._logged = False  # this outage's start was told
        # The last failure of an outage whose start is not told yet: what the exit's
        # flush tells, if no later failure has.
        self._held: tuple[str, str, dict[str, Any]] | None = None
        self._starts = TokenBucket(rate_per_s=1 / interval_s, burst=burst, clock=clock)
        # Outages that came and went without lines since the last line.
        self._untold = _Untold()

    def failed(self, *, kind: str, error: str, key: object = None, **fields: Any) -> None:
        """One failure; ``kind`` is stable across repeats (an exception class, a code).
        A change of ``kind`` or of ``key`` (what else tells two failures of one kind
        apart for the reader: which call failed) is logged as a changed failure."""
        self._failures += 1
        if self._kind is None:
            self._since = self._clock()
            self._logged = False
        if not self._logged:
            if self._starts.try_take():
                self._tell_start(kind, error, fields)
            else:  # told when the interval ends, or at exit
                self._held = (kind, error, fields)
                _untold_logs.add(self)
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
        if self._kind is not None:
            duration_s = self._clock() - self._since
            if self._logged:
                self._log.info(
                    f"{self._name}_recovered",
                    failures=self._failures,
                    last_kind=self._kind,
                    duration_seconds=round(duration_s, 3),
                    **fields,
                )
            else:  # told with the next line
                self._untold.add(self._failures, duration_s, self._kind)
                _untold_logs.add(self)
            self._kind = self._key = None
            self._failures = 0
            self._logged = False
            self._held = None
        if self._untold.outages and self._starts.try_take():
            self._tell_untold(**fields)

    def flush(self) -> None:
        """Tell now the outage still going whose start is untold, else the outages that
        came and went untold: at exit, where no later poll will. (An outage still going
        at exit must not be left out: the last line would say the kubelet recovered.)"""
        if self._held is not None:
            self._tell_start(*self._held)
        elif self._untold.outages:
            self._tell_untold()

    def _tell_start(self, kind: str, error: str, fields: dict[str, Any]) -> None:
        self._logged = True
        self._held = None
        self._log.warning(
            f"{self._name}_failed", kind=kind, error=error, **self._take_untold(), **fields
        )

    def _tell_untold(self, **fields: Any) -> None:
        untold = self._untold
        self._log.info(
            f"{self._name}_recovered",
            failures=untold.failures,
            last_kind=untold.kind,
            duration_seconds=round(untold.seconds, 3),
            **self._take_untold(),
            **fields,
        )

    def _take_untold(self) -> dict[str, Any]:
        """``outages_not_logged`` for the line being logged, where there were any."""
        outages = self._untold.outages
        self._untold = _Untold()
        _untold_logs.discard(self)
        return {"outages_not_logged": outages} if outages else {}


@dataclass(slots=True)
class _Untold:
    """Outages that came and went without lines of their own: how many, their failures,
    their time, the last one's kind."""

    outages: int = 0
    failures: int = 0
    seconds: float = 0.0
    kind: str | None = None

    def add(self, failures: int, seconds: float, kind: str | None) -> None:
        self.outages += 1
        self.failures += failures
        self.seconds += seconds
        self.kind = kind


class RepeatedFailure:
    """Logs ``<name>_failed`` and ``<name>_recovered`` for an operation that fails by a
    bug (a poll, a render), retried every interval: the traceback with the first
    failure; while later tries fail with the same error, one line naming it
    (``repeated=true``); a line when one works again. Call ``failed`` in the ``except``
    block, where the traceback is."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._error: str | None = None  # the last try's, while it keeps failing

    def failed(self, error: Exception, **fields: Any) -> None:
        text = f"{type(error).__name__}: {error}"
        if text == self._error:
            _log.error(f"{self._name}_failed", error=text, repeated=True, **fields)
        else:
            _log.exception(f"{self._name}_failed", **fields)
        self._error = text

    def succeeded(self) -> None:
        if self._error is not None:
            _log.info(f"{self._name}_recovered", after_error=self._error)
            self._error = None


class Throttle:
    """At most one ``event`` per ``interval_s``; the next line says how many were held back.

    Under a running event loop, what an interval held back is logged when it ends, with
    the last held call's fields, even if no call comes after it: a burst is told whole
    within an interval of its end, not at the next burst (which may be days later). At
    exit ``flush_held_lines`` logs what is still held, which no timer will.
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


# Throttles holding calls back, until they log them: what flush_held_lines tells at exit.
# Weak: a throttle whose owner is gone has no one left to tell about.
_holding: weakref.WeakSet[Throttle] = weakref.WeakSet()


# Outage logs with outages that came and went untold: what flush_held_lines tells at exit.
_untold_logs: weakref.WeakSet[OutageLog] = weakref.WeakSet()


def flush_held_lines() -> None:
    """Log what every throttle still holds back, as its interval's end would have, and
    the outages each outage log has not told yet: at exit, where the timers and polls
    that would log them are never run."""
    for throttle in list(_holding):
        throttle.flush()
    for outage in list(_untold_logs):
        outage.flush()
