"""Run collectors concurrently, each on its own daemon thread, under one timeout.

A collector that hangs (a wedged driver call, a read of a stuck file) keeps its
thread, but never more than one: until it returns, later polls report it failed
without starting another call. The threads are daemons and hold no reference to the
event loop's futures beyond one call, so a stuck read never blocks exit and a failing
collector leaks nothing: outcomes cross back as plain data, never as exceptions whose
tracebacks would keep earlier polls' frames alive.

The partial-failure contract: each issue a collector reports is counted (cumulative,
per error label, in ``podresources_collector_errors_total``) and each distinct one is
logged once. A collector's state (ok, unavailable, failed) is logged when it changes.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from exporter.collectors.base import Collector
from exporter.errors import CollectorUnavailable
from exporter.model import CollectorIssue, CollectorRun, Readings

__all__ = ["CollectorRunner"]

log = structlog.get_logger(__name__)

# Distinct issue details logged per collector; past it, one line says more were seen.
MAX_LOGGED_ISSUES = 256


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What one call of ``collect()`` came to, as plain data."""

    readings: Readings | None = None
    unavailable: str | None = None
    error: str | None = None


def _collect(collector: Collector) -> _Outcome:
    try:
        return _Outcome(readings=collector.collect())
    except CollectorUnavailable as error:
        return _Outcome(unavailable=str(error))
    except Exception as error:  # a collector bug must not take the poll down
        return _Outcome(error=f"{type(error).__name__}: {error}")


_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[_Outcome]"]


class _Worker:
    """One daemon thread that runs one collector's calls, one at a time."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.busy = False  # set on the loop when a call is queued, cleared when it ends
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._serve, name=f"collector-{collector.name}", daemon=True
        )
        self._thread.start()

    def submit(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[_Outcome]:
        future: asyncio.Future[_Outcome] = loop.create_future()
        self.busy = True
        self._jobs.put((loop, future))
        return future

    def stop(self) -> None:
        self._jobs.put(None)

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, future = job
            outcome = _collect(self.collector)
            try:
                loop.call_soon_threadsafe(self._deliver, future, outcome)
            except RuntimeError:
                return  # the loop is closed: the process is exiting
            del job, loop, future, outcome  # hold nothing of this call while waiting

    def _deliver(self, future: asyncio.Future[_Outcome], outcome: _Outcome) -> None:
        self.busy = False
        if not future.done():  # else it timed out and was cancelled
            future.set_result(outcome)


class CollectorRunner:
    """Owns the enabled collectors and the threads their calls run in."""

    def __init__(self, collectors: Sequence[Collector], *, timeout_s: float) -> None:
        self._workers = tuple(_Worker(c) for c in collectors)
        self._timeout_s = timeout_s
        self._state: dict[str, str] = {}
        self._error_counts: dict[str, Counter[str]] = {
            c.name: Counter(dict.fromkeys(c.known_errors, 0)) for c in collectors
        }
        self._logged: dict[str, set[str]] = {c.name: set() for c in collectors}

    async def run_all(self) -> tuple[CollectorRun, ...]:
        """One run of every collector, concurrently; never raises."""
        return tuple(await asyncio.gather(*(self._run(w) for w in self._workers)))

    def busy(self) -> tuple[str, ...]:
        """Collectors with a call still running (a hung read), by name."""
        return tuple(w.collector.name for w in self._workers if w.busy)

    async def _run(self, worker: _Worker) -> CollectorRun:
        name = worker.collector.name
        start = time.perf_counter()
        if worker.busy:
            return self._failed(worker, start, "previous collection still running")
        future = worker.submit(asyncio.get_running_loop())
        try:
            outcome = await asyncio.wait_for(future, self._timeout_s)
        except TimeoutError:
            return self._failed(worker, start, f"timed out after {self._timeout_s:g}s")
        duration = time.perf_counter() - start
        if outcome.error is not None:
            return self._failed(worker, start, outcome.error)
        if outcome.unavailable is not None:
            self._note_state(name, f"unavailable: {outcome.unavailable}")
            return CollectorRun(
                name,
                True,
                duration,
                unavailable=outcome.unavailable,
                error_counts=self._counts(name),
                serves=worker.collector.serves,
            )
        readings = outcome.readings or Readings()
        self._note_state(name, "ok")
        self._note_issues(name, readings.issues)
        return CollectorRun(
            name,
            True,
            duration,
            readings,
            error_counts=self._counts(name),
            serves=worker.collector.serves,
        )

    def _failed(self, worker: _Worker, start: float, error: str) -> CollectorRun:
        name = worker.collector.name
        self._note_state(name, f"failed: {error}")
        return CollectorRun(
            name,
            False,
            time.perf_counter() - start,
            error=error,
            error_counts=self._counts(name),
            serves=worker.collector.serves,  # every run describes its collector alike
        )

    def _counts(self, name: str) -> tuple[tuple[str, int], ...]:
        return tuple(sorted(self._error_counts[name].items()))

    def _note_state(self, name: str, state: str) -> None:
        # Log changes only: a broken collector must not flood the log every poll.
        previous = self._state.get(name)
        if previous == state:
            return
        self._state[name] = state
        if state == "ok":
            if previous is not None:
                log.info("collector_recovered", collector=name, was=previous)
        elif state.startswith("unavailable: "):
            log.info("collector_unavailable", collector=name, reason=state.split(": ", 1)[1])
        else:
            log.warning("collector_failed", collector=name, error=state.split(": ", 1)[1])

    def _note_issues(self, name: str, issues: Sequence[CollectorIssue]) -> None:
        counts, logged = self._error_counts[name], self._logged[name]
        for found in issues:
            counts[found.error] += 1
            if found.detail in logged or len(logged) > MAX_LOGGED_ISSUES:
                continue
            logged.add(found.detail)
            if len(logged) > MAX_LOGGED_ISSUES:
                log.warning("collector_issues_not_logged", collector=name, limit=MAX_LOGGED_ISSUES)
            else:
                log.warning(
                    "collector_read_failed", collector=name, error=found.error, detail=found.detail
                )

    def close(self) -> None:
        for worker in self._workers:
            worker.stop()
            if worker.busy:
                log.warning("collector_abandoned", collector=worker.collector.name)
                continue  # its thread is a daemon: exit does not wait for it
            try:
                worker.collector.close()
            except Exception as error:  # shutting down: report and go on
                log.warning(
                    "collector_close_failed", collector=worker.collector.name, error=str(error)
                )
