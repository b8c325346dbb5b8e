"""Run each poll's collectors one after another on one worker thread, each under a timeout.

One thread, not one per collector: collectors read many small files and every read
releases the GIL, so with a thread each the threads traded the GIL (and the CPU) on
every read, ~5 ms of CPU per poll on the dense simulated node over the calls' own ~10 ms
(docs/benchmarks.md), and each kept its own stack and malloc arena.

A *lane* is a daemon thread that runs a poll's queue of calls in order. It times each
``collect()`` itself, writes the outcome into the call as plain data and wakes the loop
once, when it finds the queue empty. Besides that wake-up the loop looks at the poll only
at deadlines:

- Each collector has ``timeout_s`` from when its own call starts (not from the poll's
  start: one queued behind a slow one loses no time to it). A call still running then
  is reported "timed out after Ns".
- A call still running after ``handover_s`` (``HANDOVER_S``, or ``timeout_s`` if shorter)
  gives the rest of the queue to another lane, an idle one or else a new one, at most
  one lane per collector. So a hung collector holds the ones after it up by
  ``handover_s``, not by its timeout, and a poll takes at most about ``timeout_s``, plus
  ``handover_s`` for each further collector that hangs in the same poll.

A lane stuck in a hung call (a wedged driver call, a read of a stuck file) stays out of
service until the call returns, then goes idle and serves later polls. Until then later
polls report that collector failed without starting another call. Should the system
refuse a new lane's thread while every lane is stuck, the calls queued behind them are
reported not run once they have waited ``timeout_s`` for one: the poll still ends. At
the end of each poll every idle lane but one ends: once the hang is over, one thread
serves again. Lanes
are daemons and hold nothing of a poll while they wait, so a stuck read never blocks
exit, and outcomes are plain data, never exceptions whose tracebacks would keep earlier
polls' frames alive.

The partial-failure contract: each issue a collector reports is counted (cumulative,
per error label, in ``podresources_collector_errors_total``) and each distinct one is
logged once. A collector's state (ok, unavailable, failed) is logged when it changes.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import structlog

from exporter.collectors.base import Collector
from exporter.errors import CollectorUnavailable
from exporter.model import CollectorIssue, CollectorRun, Readings

__all__ = ["HANDOVER_S", "CollectorRunner"]

log = structlog.get_logger(__name__)

# Distinct issue details logged per collector and error label; past it, one line says
# more were seen. Per label: details that carry a PID or a value use up a budget, and
# a new kind of failure hours later must still get its line.
MAX_LOGGED_ISSUES = 256
# How long one call may hold up the rest of its poll's queue. Far above any collector's
# normal run (milliseconds), so a second lane is made only for a collector in trouble.
HANDOVER_S = 0.5


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What one call of ``collect()`` came to, as plain data."""

    duration_s: float
    readings: Readings | None = None
    unavailable: str | None = None
    error: str | None = None


# For calls a cancelled poll took back before any lane started them.
_NOT_RUN = _Outcome(0.0, error="not run: the poll was cancelled")
# For queued calls no lane could take for a whole timeout: every lane is stuck in a hung
# call and the system refuses another thread (or the bound of one per collector is met).
_NO_LANE = _Outcome(0.0, error="not run: no worker thread was free or could be started")


@dataclass(slots=True, eq=False)
class _Call:
    """One call of one collector, shared by the loop and the lane that runs it.

    The lane sets ``started``, then ``outcome``, each once; the loop only reads them (a
    plain attribute store is atomic, so no lock). ``outcome`` None means still running
    or queued: the collector is busy.
    """

    collector: Collector
    started: float | None = None
    outcome: _Outcome | None = None


def _collect(collector: Collector, clock: Callable[[], float], started: float) -> _Outcome:
    try:
        readings = collector.collect()
    except CollectorUnavailable as error:
        return _Outcome(clock() - started, unavailable=str(error))
    except Exception as error:  # a collector bug must not take the poll down
        return _Outcome(clock() - started, error=f"{type(error).__name__}: {error}")
    return _Outcome(clock() - started, readings=readings)


class _Poll:
    """One poll's calls: the queue lanes take them from, their deadlines, the handover.

    Used on the loop, but for ``queue``: lanes pop calls from it (a deque's popleft is
    atomic, so each call is taken once, by one lane, or taken back by the loop).
    """

    def __init__(
        self,
        calls: Sequence[_Call],
        *,
        give_lane: Callable[[_Poll], bool],
        timeout_s: float,
        handover_s: float,
        clock: Callable[[], float],
    ) -> None:
        self.calls = calls
        self.queue: deque[_Call] = deque(calls)
        self.loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self.loop.create_future()
        self.timed_out: dict[_Call, float] = {}  # call -> how long it had run
        self._lanes_given = 0
        self._refused_at: float | None = None  # when the queue last could get no lane
        self._give_lane = give_lane
        self._clock = clock
        self._timeout_s = timeout_s
        self._handover_s = handover_s
        self._timer: asyncio.TimerHandle | None = None

    def check(self) -> None:
        """Time out calls past their deadline, hand the queue on if no lane is making
        progress on it, and finish once every call has an outcome or timed out."""
        if self.done.done():  # a lane's late wake-up, or the poll was cancelled
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        now = self._clock()
        next_check = now + self._handover_s  # for calls not started yet
        pending = progressing = stalled = False
        for call in self.calls:
            started = call.started
            if call.outcome is not None:
                continue
            if call in self.timed_out:  # its lane is still stuck in it
                stalled = True
                continue
            if started is None:
                refused_at = self._refused_at
                if refused_at is not None and now - refused_at >= self._timeout_s:
                    try:
                        self.queue.remove(call)
                    except ValueError:  # a lane took it just now
                        pending = True
                        continue
                    call.outcome = _NO_LANE
                    continue
                pending = True
                continue
            ran = now - started
            if ran >= self._timeout_s:
                self.timed_out[call] = ran
                stalled = True
                continue
            pending = True
            next_check = min(next_check, started + self._timeout_s)
            if ran < self._handover_s:
                progressing = True
                next_check = min(next_check, started + self._handover_s)
            else:
                stalled = True
        if self.queue and not progressing and (stalled or not self._lanes_given):
            if self._give_lane(self):
                self._lanes_given += 1
                self._refused_at = None
            elif self._refused_at is None:
                self._refused_at = now
        if not pending:
            self.done.set_result(None)
            return
        self._timer = self.loop.call_later(next_check - now, self.check)

    def take_back(self) -> None:
        """Stop: calls no lane has taken yet are marked not run, the timer cancelled."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while True:
            try:
                call = self.queue.popleft()
            except IndexError:
                return
            call.outcome = _NOT_RUN


class _Lane:
    """A daemon thread that runs the calls of the polls it is given, one at a time."""

    def __init__(self, number: int, *, clock: Callable[[], float]) -> None:
        self.idle = True  # cleared on the loop when given a poll, set here when done with it
        self._clock = clock
        self._polls: queue.SimpleQueue[_Poll | None] = queue.SimpleQueue()
        name = f"collector-lane-{number}"
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def take(self, poll: _Poll) -> None:
        self.idle = False
        self._polls.put(poll)

    def stop(self) -> None:
        self._polls.put(None)

    def _serve(self) -> None:
        while (poll := self._polls.get()) is not None:
            _run_queue(poll.queue, self._clock)
            self.idle = True  # before the wake-up: the loop's next poll finds this lane idle
            try:
                poll.loop.call_soon_threadsafe(poll.check)
            except RuntimeError:
                return  # the loop is closed: the process is exiting
            del poll  # hold nothing of this poll while waiting


def _run_queue(calls: deque[_Call], clock: Callable[[], float]) -> None:
    """Run calls until the queue is empty; other lanes may be taking from it too."""
    while True:
        try:
            call = calls.popleft()
        except IndexError:
            return
        call.started = started = clock()
        call.outcome = _collect(call.collector, clock, started)


def _identities_of(readings: Readings | None) -> Readings:
    """What a failed run still says: the devices its last good run found, with their
    identities and keys but no figures, the PCI functions where they sit (NUMA node,
    PCIe path) without their link's figures, and its node-level ``_info`` samples (the
    driver's version). A device's identity (UUID, model, PCI address) is its
    hardware's: an NVML call that fails or hangs for a poll must not blank
    ``podresources_device_info``'s labels (a new series, then the old one back) or drop
    the GPUs only NVML finds, while no stale figure is served as fresh."""
    if readings is None:
        return Readings()
    return Readings(
        devices=tuple(replace(d, samples=()) for d in readings.devices),
        pci_devices=tuple(replace(p, samples=()) if p.samples else p for p in readings.pci_devices),
        node_samples=tuple(s for s in readings.node_samples if s.spec.name.endswith("_info")),
    )


class CollectorRunner:
    """Owns the enabled collectors and the lanes their calls run in."""

    def __init__(
        self,
        collectors: Sequence[Collector],
        *,
        timeout_s: float,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._collectors = tuple(collectors)
        self._timeout_s = timeout_s
        self._handover_s = min(HANDOVER_S, timeout_s)
        self._clock = clock
        # The first lane now, so a process out of threads fails at start; the others when a
        # hung call needs them, at most one per collector.
        self._lane_numbers = itertools.count()
        self._lanes = [_Lane(next(self._lane_numbers), clock=clock)] if collectors else []
        self._in_flight: dict[str, _Call] = {}  # calls not known to have returned, by name
        self._lane_refused = False  # the last new lane's thread was refused: logged once
        self._state: dict[str, str] = {}
        # Collectors whose last call timed out and has not returned since: a poll that
        # finds one still running reports the same failure, not a new one.
        self._hung: set[str] = set()
        self._error_counts: dict[str, Counter[str]] = {
            c.name: Counter(dict.fromkeys(c.known_errors, 0)) for c in collectors
        }
        # collector -> error label -> details logged
        self._logged: dict[str, defaultdict[str, set[str]]] = {
            c.name: defaultdict(set) for c in collectors
        }
        # collector -> its last successful readings: the very objects the published
        # snapshot holds, so keeping them costs nothing until a run fails
        self._last_good: dict[str, Readings] = {}

    async def run_all(self) -> tuple[CollectorRun, ...]:
        """One run of every collector, in order on one lane while none hangs; never raises."""
        calls: dict[str, _Call] = {}
        busy = self.busy()
        for collector in self._collectors:
            if collector.name not in busy:
                calls[collector.name] = self._in_flight[collector.name] = _Call(collector)
        poll = _Poll(
            tuple(calls.values()),
            give_lane=self._give_lane,
            timeout_s=self._timeout_s,
            handover_s=self._handover_s,
            clock=self._clock,
        )
        poll.check()
        try:
            await poll.done
        finally:
            poll.take_back()
            self._retire_spare_lanes()
        runs = tuple(self._report(c, calls.get(c.name), poll) for c in self._collectors)
        for name, call in calls.items():
            if call.outcome is not None:
                del self._in_flight[name]  # keep only calls still running: hung ones
        return runs

    def busy(self) -> tuple[str, ...]:
        """Collectors with a call still running (a hung read), by name."""
        in_flight = self._in_flight
        return tuple(
            c.name
            for c in self._collectors
            if (call := in_flight.get(c.name)) is not None and call.outcome is None
        )

    def _give_lane(self, poll: _Poll) -> bool:
        """Give the poll's queue to an idle lane, or a new one while under the bound; if
        none can be had, the poll's next check asks again."""
        lane = next((lane for lane in self._lanes if lane.idle), None)
        if lane is None:
            if len(self._lanes) >= len(self._collectors):
                return False  # the lane that is not stuck is finishing: idle in a moment
            try:
                lane = _Lane(next(self._lane_numbers), clock=self._clock)
            except RuntimeError as error:  # "can't start new thread"
                if not self._lane_refused:  # asked again at every check while refused
                    log.warning("collector_lane_not_started", error=str(error))
                self._lane_refused = True
                return False
            self._lane_refused = False
            self._lanes.append(lane)
        lane.take(poll)
        return True

    def _retire_spare_lanes(self) -> None:
        """End every idle lane but the first: spares were made for a hang that is over."""
        idle = [lane for lane in self._lanes if lane.idle]
        for lane in idle[1:]:
            lane.stop()
            self._lanes.remove(lane)

    def _report(self, collector: Collector, call: _Call | None, poll: _Poll) -> CollectorRun:
        name = collector.name
        if call is None:
            # Where the call still running is one that timed out, this is the same
            # failure, not a new one: the log keeps its "timed out" line, and
            # collector_recovered names it.
            note = name not in self._hung
            return self._failed(collector, "previous collection still running", 0.0, note=note)
        if call in poll.timed_out:
            self._hung.add(name)
            ran = poll.timed_out[call]
            return self._failed(collector, f"timed out after {self._timeout_s:g}s", ran)
        self._hung.discard(name)
        outcome = call.outcome
        assert outcome is not None  # the poll ended: every call returned or timed out
        if outcome.error is not None:
            return self._failed(collector, outcome.error, outcome.duration_s)
        if outcome.unavailable is not None:
            self._last_good.pop(name, None)  # the source is gone, and what it named
            self._note_state(name, f"unavailable: {outcome.unavailable}")
            return CollectorRun(
                name,
                True,
                outcome.duration_s,
                unavailable=outcome.unavailable,
                error_counts=self._counts(name),
                serves=collector.serves,
            )
        readings = outcome.readings or Readings()
        self._last_good[name] = readings
        self._note_state(name, "ok")
        self._note_issues(name, readings.issues)
        return CollectorRun(
            name,
            True,
            outcome.duration_s,
            readings,
            error_counts=self._counts(name),
            serves=collector.serves,
        )

    def _failed(
        self, collector: Collector, error: str, duration_s: float, *, note: bool = True
    ) -> CollectorRun:
        name = collector.name
        if note:
            self._note_state(name, f"failed: {error}")
        return CollectorRun(
            name,
            False,
            duration_s,
            readings=_identities_of(self._last_good.get(name)),
            error=error,
            error_counts=self._counts(name),
            serves=collector.serves,  # every run describes its collector alike
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
        counts = self._error_counts[name]
        for found in issues:
            counts[found.error] += 1
            logged = self._logged[name][found.error]
            if found.detail in logged or len(logged) > MAX_LOGGED_ISSUES:
                continue
            logged.add(found.detail)
            if len(logged) > MAX_LOGGED_ISSUES:
                log.warning(
                    "collector_issues_not_logged",
                    collector=name,
                    error=found.error,
                    limit=MAX_LOGGED_ISSUES,
                )
            else:
                log.warning(
                    "collector_read_failed", collector=name, error=found.error, detail=found.detail
                )

    def _let_reads_end(self) -> None:
        """Wait for each call still running to end, until ``handover_s`` after its start:
        a stop that cancels a poll finds a collector in an ordinary read (milliseconds)
        far more often than in a hung one, and a read that ends is no hang; its
        collector is closed as the others are. A call that ran longer (a timed-out one)
        is not waited for."""
        for call in self._in_flight.values():
            if call.outcome is not None:
                continue
            started = call.started
            left = (
                self._handover_s if started is None else started + self._handover_s - self._clock()
            )
            # Real time: the runner's clock may be a test's, which only a collector moves.
            deadline = time.monotonic() + max(0.0, left)
            while call.outcome is None and time.monotonic() < deadline:
                time.sleep(0.005)

    def close(self) -> None:
        """Stop the lanes and close the collectors; one whose call still runs is left be."""
        for lane in self._lanes:
            lane.stop()  # a lane in a hung call ends when the call returns
        self._lanes.clear()
        self._let_reads_end()
        busy = self.busy()
        for collector in self._collectors:
            if collector.name in busy:
                log.warning("collector_abandoned", collector=collector.name)
                continue  # its lane is a daemon: exit does not wait for it
            try:
                collector.close()
            except Exception as error:  # shutting down: report and go on
                log.warning("collector_close_failed", collector=collector.name, error=str(error))
