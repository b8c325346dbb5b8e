"""Run collectors concurrently, each in a worker thread with its own timeout.

A collector that hangs (a wedged driver call) keeps its thread, but never more than
one: until it returns, later polls report it failed without starting another call.
A failure or timeout of one collector never blanks the others.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import structlog

from exporter.collectors.base import Collector, CollectorUnavailable
from exporter.model import CollectorRun, Readings

__all__ = ["CollectorRunner"]

log = structlog.get_logger(__name__)


class CollectorRunner:
    """Owns the enabled collectors and the threads their calls run in."""

    def __init__(self, collectors: Sequence[Collector], *, timeout_s: float) -> None:
        self._collectors = tuple(collectors)
        self._timeout_s = timeout_s
        self._in_flight: dict[str, asyncio.Future[Readings]] = {}
        self._unavailable_reason: dict[str, str] = {}
        self._last_error: dict[str, str | None] = {}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self._collectors)

    async def run_all(self, *, device_ids: frozenset[str]) -> tuple[CollectorRun, ...]:
        """One run of every collector, concurrently; never raises."""
        return tuple(
            await asyncio.gather(*(self._run(c, device_ids=device_ids) for c in self._collectors))
        )

    async def _run(self, collector: Collector, *, device_ids: frozenset[str]) -> CollectorRun:
        name = collector.name
        start = time.perf_counter()
        pending = self._in_flight.get(name)
        if pending is not None and not pending.done():
            return self._failed(name, start, "previous collection still running")
        future = asyncio.ensure_future(asyncio.to_thread(collector.collect, device_ids=device_ids))
        self._in_flight[name] = future
        # Retrieve a late failure so asyncio does not warn about a lost exception.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            readings = await asyncio.wait_for(asyncio.shield(future), self._timeout_s)
        except TimeoutError:
            return self._failed(name, start, f"timed out after {self._timeout_s:g}s")
        except CollectorUnavailable as error:
            self._note_unavailable(name, str(error))
            return CollectorRun(name, True, time.perf_counter() - start)
        except Exception as error:  # a collector bug must not take the poll down
            return self._failed(name, start, f"{type(error).__name__}: {error}")
        self._note_unavailable(name, None)
        self._note_error(name, None)
        return CollectorRun(name, True, time.perf_counter() - start, readings)

    def _failed(self, name: str, start: float, error: str) -> CollectorRun:
        self._note_error(name, error)
        return CollectorRun(name, False, time.perf_counter() - start, error=error)

    def _note_error(self, name: str, error: str | None) -> None:
        # Log state changes only: a broken collector must not flood the log every poll.
        if self._last_error.get(name) == error:
            return
        self._last_error[name] = error
        if error is None:
            log.info("collector_recovered", collector=name)
        else:
            log.warning("collector_failed", collector=name, error=error)

    def _note_unavailable(self, name: str, reason: str | None) -> None:
        if reason is None:
            self._unavailable_reason.pop(name, None)
            return
        if self._unavailable_reason.get(name) != reason:
            self._unavailable_reason[name] = reason
            log.info("collector_unavailable", collector=name, reason=reason)

    def close(self) -> None:
        for collector in self._collectors:
            try:
                collector.close()
            except Exception as error:  # shutting down: report and go on
                log.warning("collector_close_failed", collector=collector.name, error=str(error))
