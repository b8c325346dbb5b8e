"""The collector runner: timeouts, one call in flight, isolation of failures, no leaks.

Collectors here are small real ``Collector`` subclasses run on the runner's real
threads; a hung driver call is a thread blocked on a ``threading.Event``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import pytest
from freshprocess import run_python
from manualclock import ManualClock
from structlog.testing import capture_logs

from exporter.collectors import runner as runner_module
from exporter.collectors.base import Collector, CollectorContext, CollectorUnavailable
from exporter.collectors.gpu_metrics import GPU_DRIVER_INFO
from exporter.collectors.runner import HANDOVER_S, MAX_LOGGED_ISSUES, CollectorRunner
from exporter.model import (
    CollectorIssue,
    CollectorRun,
    DeviceIdentity,
    DeviceReading,
    HardwareKey,
    KeyKind,
    MetricKind,
    MetricSpec,
    PciDevice,
    Readings,
    Sample,
)

CONTEXT = CollectorContext()
POWER = MetricSpec("podresources_gpu_power_watts", MetricKind.GAUGE, "power")
READING = DeviceReading("eth0", (HardwareKey(KeyKind.NETDEV, "eth0"),))
# How long a test waits, at most, for a released thread to report back: a bound that
# only a broken runner reaches, never a measured duration.
BOUND_S = 30.0
# Where a hung collector shares a runner with working ones, the timeout must be long
# enough for the working ones' thread hop even on a loaded machine.
MIXED_TIMEOUT_S = 2.0


class _Working(Collector):
    name = "working"
    serves = ("example.com/",)

    def __init__(self, context: CollectorContext) -> None:
        super().__init__(context)
        self.closed = 0
        self.threads: list[threading.Thread] = []  # the thread of each call

    def collect(self) -> Readings:
        self.threads.append(threading.current_thread())
        return Readings(devices=(READING,))

    def close(self) -> None:
        self.closed += 1


class _Hung(Collector):
    """Blocks until released, like a wedged driver call."""

    name = "hung"
    serves = ("nvidia.com/",)

    def __init__(self, context: CollectorContext) -> None:
        super().__init__(context)
        self.release = threading.Event()
        self.calls = 0
        self.closed = 0
        self.threads: list[threading.Thread] = []

    def collect(self) -> Readings:
        self.calls += 1
        self.threads.append(threading.current_thread())
        self.release.wait()
        return Readings()

    def close(self) -> None:
        self.closed += 1


class _Working2(_Working):
    name = "working2"


class _Gated(Collector):
    """Blocks on whichever gate it holds when called: hangs again once given a new one."""

    name = "gated"

    def __init__(self, context: CollectorContext) -> None:
        super().__init__(context)
        self.gate = threading.Event()
        self.calls = 0

    def collect(self) -> Readings:
        self.calls += 1
        self.gate.wait(BOUND_S)
        return Readings()


class _Hung2(_Hung):
    name = "hung2"


class _BrokenReadError(Exception):
    """Raised by ``_Broken`` only, so the test can count its instances."""


class _Broken(Collector):
    name = "broken"

    def collect(self) -> Readings:
        raise _BrokenReadError("garbage in /sys/whatever")


class _Absent(Collector):
    name = "absent"

    def collect(self) -> Readings:
        raise CollectorUnavailable("no driver loaded")


class _Scripted(Collector):
    """Does, on each call, the next step of its script."""

    name = "scripted"
    known_errors = ("GPU_IS_LOST",)

    def __init__(self, context: CollectorContext, script: Sequence[Callable[[], Readings]]):
        super().__init__(context)
        self._script = list(script)

    def collect(self) -> Readings:
        return self._script.pop(0)()


class _Scripted2(_Scripted):
    name = "scripted2"


def _unavailable() -> Readings:
    raise CollectorUnavailable("no driver loaded")


def _failing() -> Readings:
    raise ValueError("driver fell over")


def _reporting(*issues: CollectorIssue) -> Callable[[], Readings]:
    return lambda: Readings(issues=issues)


@pytest.fixture
def make_runner() -> Iterator[Callable[..., CollectorRunner]]:
    """Builds runners and closes them after the test, so their threads end."""
    made: list[CollectorRunner] = []

    def make(
        collectors: Sequence[Collector], *, timeout_s: float, **options: Any
    ) -> CollectorRunner:
        runner = CollectorRunner(collectors, timeout_s=timeout_s, **options)
        made.append(runner)
        return runner

    yield make
    for runner in made:
        runner.close()


@pytest.fixture
def hung() -> Iterator[_Hung]:
    """A hung collector, released after the test."""
    collector = _Hung(CONTEXT)
    yield collector
    collector.release.set()


@pytest.fixture
def hung2() -> Iterator[_Hung]:
    """A second hung collector, of another name, released after the test."""
    collector = _Hung2(CONTEXT)
    yield collector
    collector.release.set()


class _Clock(ManualClock):
    """The runner's clock in a test: it moves only when a collector moves it."""

    def taking(self, seconds: float) -> Callable[[], Readings]:
        """A script step that takes ``seconds`` of this clock."""

        def step() -> Readings:
            self.now += seconds
            return Readings()

        return step


async def _until(condition: Callable[[], bool]) -> None:
    """Yield to the loop until ``condition`` holds; only a broken runner reaches the bound."""
    deadline = time.monotonic() + BOUND_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"still not so after {BOUND_S:g}s")
        await asyncio.sleep(0.01)


class _FakeTime:
    """The runner module's ``time`` for close(): ``monotonic`` moves only by what
    ``sleep`` is asked for, and ``on_sleep`` runs at each sleep."""

    def __init__(self, on_sleep: Callable[[], None] = lambda: None) -> None:
        self.now = 0.0
        self.slept: list[float] = []
        self._on_sleep = on_sleep

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        self._on_sleep()


class _StallingClock(_Clock):
    """Holds a lane's readings of the clock until ``go`` is set: a call a lane has taken
    from the queue but not yet marked started."""

    def __init__(self, now: float) -> None:
        super().__init__(now)
        self.go = threading.Event()
        self.held = threading.Event()

    def __call__(self) -> float:
        if threading.current_thread() is not threading.main_thread() and not self.go.is_set():
            self.held.set()
            self.go.wait(BOUND_S)
        return self.now


async def _stopped_mid_call(runner: CollectorRunner, started: Callable[[], bool]) -> None:
    """A poll cancelled (a stop) once ``started`` holds."""
    poll = asyncio.ensure_future(runner.run_all())
    await _until(started)
    poll.cancel()
    with pytest.raises(asyncio.CancelledError):
        await poll


def _summary(run: CollectorRun) -> tuple[str, bool, str | None, str | None]:
    return (run.name, run.success, run.error, run.unavailable)


class TestIsolation:
    async def test_failures_stay_with_their_collector(
        self, make_runner: Callable[..., CollectorRunner], hung: _Hung
    ) -> None:
        """A raising and a hung collector fail alone; the working one still reports."""
        runner = make_runner([_Working(CONTEXT), hung, _Broken(CONTEXT)], timeout_s=MIXED_TIMEOUT_S)

        runs = await runner.run_all()

        assert [
            ("working", True, None, None),
            ("hung", False, f"timed out after {MIXED_TIMEOUT_S:g}s", None),
            ("broken", False, "_BrokenReadError: garbage in /sys/whatever", None),
        ] == [_summary(r) for r in runs]
        assert Readings(devices=(READING,)) == runs[0].readings

    async def test_runs_carry_what_the_collector_serves(
        self, make_runner: Callable[..., CollectorRunner], hung: _Hung
    ) -> None:
        """Timed-out and still-running runs carry ``serves`` too, like successful ones."""
        working = make_runner([_Working(CONTEXT)], timeout_s=BOUND_S)
        failing = make_runner([hung], timeout_s=0.05)

        runs = (*await working.run_all(), *await failing.run_all(), *await failing.run_all())

        expected = [("example.com/",), ("nvidia.com/",), ("nvidia.com/",)]
        assert expected == [r.serves for r in runs]

    async def test_absent_hardware_is_success_without_data(
        self, make_runner: Callable[..., CollectorRunner]
    ) -> None:
        """An absent source succeeds with no readings and says why; the join judges it."""
        runner = make_runner([_Absent(CONTEXT)], timeout_s=BOUND_S)

        (run,) = await runner.run_all()

        expected = ("absent", True, None, "no driver loaded")
        assert (expected, Readings()) == (_summary(run), run.readings)


class TestLanes:
    async def test_one_thread_runs_every_collector(
        self, make_runner: Callable[..., CollectorRunner]
    ) -> None:
        """While none hangs, every call of every poll runs on one and the same thread,
        the only one the runner starts."""
        first, second = _Working(CONTEXT), _Working2(CONTEXT)
        collectors = [first, _Broken(CONTEXT), _Absent(CONTEXT), second]
        before = set(threading.enumerate())
        runner = make_runner(collectors, timeout_s=BOUND_S)

        for _ in range(3):
            await runner.run_all()

        started = set(threading.enumerate()) - before
        ran_on = set(first.threads + second.threads)
        assert (1, 6, started) == (len(ran_on), len(first.threads + second.threads), ran_on)

    async def test_duration_is_each_collectors_own(
        self, make_runner: Callable[..., CollectorRunner]
    ) -> None:
        """Each run's duration is its own collect() call, not the time since the poll began."""
        clock = _Clock(100.0)
        collectors = [
            _Scripted(CONTEXT, [clock.taking(2.0)]),
            _Scripted2(CONTEXT, [clock.taking(3.0)]),
        ]
        runner = make_runner(collectors, timeout_s=BOUND_S, clock=clock)

        runs = await runner.run_all()

        assert [2.0, 3.0] == [r.duration_seconds for r in runs]

    async def test_cancelled_poll_leaves_no_queued_call_busy(
        self, make_runner: Callable[..., CollectorRunner], hung: _Hung
    ) -> None:
        """A poll cancelled while calls wait behind a hung one takes them back: only the
        hung collector stays busy, and the next poll collects the others."""
        working = _Working(CONTEXT)
        runner = make_runner([hung, working], timeout_s=2 * BOUND_S)
        poll = asyncio.ensure_future(runner.run_all())
        await _until(lambda: hung.calls == 1)

        poll.cancel()
        with pytest.raises(asyncio.CancelledError):
            await poll
        busy = runner.busy()
        runs = await runner.run_all()

        assert ("hung",) == busy
        assert [
            ("hung", False, "previous collection still running", None),
            ("working", True, None, None),
        ] == [_summary(r) for r in runs]


class TestHungCollector:
    async def test_hung_collector_gets_no_second_call(
        self, make_runner: Callable[..., CollectorRunner], hung: _Hung
    ) -> None:
        """After a timeout, polls fail fast without calling the hung collector again."""
        runner = make_runner([hung], timeout_s=0.05)

        (first,) = await runner.run_all()
        (second,) = await runner.run_all()
        (third,) = await runner.run_all()

        assert [
            ("hung", False, "timed out after 0.05s", None),
            ("hung", False, "previous collection still running", None),
            ("hung", False, "previous collection still running", None),
        ] == [_summary(first), _summary(second), _summary(third)]
        assert 1 == hung.calls

    async def test_released_collector_is_called_again(
        self, make_runner: Callable[..., CollectorRunner], hung: _Hung
    ) -> None:
        """Once the hung call returns, the next poll calls the collector afresh."""
        runner = make_runner([hung], timeout_s=0.05)
        await runner.run_all()

        hung.release.set()
        await _until(lambda: not runner.busy())
        (run,) = await runner.run_all()

        assert (("hung", True, None, None), 2) == (_summary(run), hung.calls)

    async def test_a_hang_is_one_failure_in_the_log_until_it_ends(
        self, make_runner: Callable[..., CollectorRunner], hung: _Hung
    ) -> None:
        """The polls that find the timed-out call still running log nothing more: the
        hang's one line says it timed out, and its recovery names that."""
        runner = make_runner([hung], timeout_s=0.05)

        with capture_logs() as logs:
            for _ in range(3):
                await runner.run_all()
            hung.release.set()
            await _until(lambda: not runner.busy())
            await runner.run_all()

        assert [
            ("collector_failed", "timed out after 0.05s", None),
            ("collector_recovered", None, "failed: timed out after 0.05s"),
        ] == [(e["event"], e.get("error"), e.get("was")) for e in logs]

    async def test_a_call_a_stop_left_running_is_logged_after_a_hang_that_ended(
        self, make_runner: Callable[..., CollectorRunner]
    ) -> None:
        """A hang that ended leaves nothing behind: a later call left running by a
        cancelled poll (not timed out, so never logged) gets its collector_failed line
        at the next poll."""
        gated = _Gated(CONTEXT)
        runner = make_runner([gated], timeout_s=1.0)
        try:
            await runner.run_all()  # times out
            gated.gate.set()
            await _until(lambda: not runner.busy())
            await runner.run_all()  # recovers
            gated.gate = threading.Event()
            await _stopped_mid_call(runner, lambda: gated.calls == 3)
            with capture_logs() as logs:
                await runner.run_all()
        finally:
            gated.gate.set()
        assert [("collector_failed", "previous collection still running")] == [
            (e["event"], e.get("error")) for e in logs
        ]

    async def test_collectors_after_a_hung_one_are_collected(
        self, make_runner: Callable[..., CollectorRunner], hung: _Hung
    ) -> None:
        """Collectors queued behind a hung one are collected in the same poll, on
        another thread, while the hung one is reported timed out."""
        first, second = _Working(CONTEXT), _Working2(CONTEXT)
        runner = make_runner([hung, first, second], timeout_s=MIXED_TIMEOUT_S)

        runs = await runner.run_all()

        assert [
            ("hung", False, f"timed out after {MIXED_TIMEOUT_S:g}s", None),
            ("working", True, None, None),
            ("working2", True, None, None),
        ] == [_summary(r) for r in runs]
        assert (False, False) == (
            hung.threads[0] in first.threads,
            hung.threads[0] in second.threads,
        )

    async def test_next_poll_skips_the_hung_one_and_collects_the_rest(
        self, make_runner: Callable[..., CollectorRunner], hung: _Hung
    ) -> None:
        """The poll after a timeout calls the others and not the hung collector."""
        first, second = _Working(CONTEXT), _Working2(CONTEXT)
        runner = make_runner([hung, first, second], timeout_s=MIXED_TIMEOUT_S)
        await runner.run_all()

        runs = await runner.run_all()

        assert [
            ("hung", False, "previous collection still running", None),
            ("working", True, None, None),
            ("working2", True, None, None),
        ] == [_summary(r) for r in runs]
        assert (1, 2, 2) == (hung.calls, len(first.threads), len(second.threads))

    async def test_slow_collector_does_not_hold_up_the_rest(
        self, make_runner: Callable[..., CollectorRunner], hung: _Hung
    ) -> None:
        """The one queued behind a slow call runs while that call still runs, long before
        its timeout; both succeed once the slow call returns in time."""
        working = _Working(CONTEXT)
        runner = make_runner([hung, working], timeout_s=2 * BOUND_S)
        poll = asyncio.ensure_future(runner.run_all())

        await _until(lambda: bool(working.threads))  # the slow call is still blocked
        hung.release.set()
        runs = await poll

        expected = [("hung", True, None, None), ("working", True, None, None)]
        assert expected == [_summary(r) for r in runs]

    async def test_released_lane_serves_again(
        self, make_runner: Callable[..., CollectorRunner], hung: _Hung
    ) -> None:
        """Once the hung call returns, polls call it again, each poll's calls on one
        thread, and no thread is started beyond those the hang needed."""
        working = _Working(CONTEXT)
        runner = make_runner([hung, working], timeout_s=MIXED_TIMEOUT_S)
        await runner.run_all()
        hung.release.set()
        await _until(lambda: not runner.busy())
        before = set(threading.enumerate())

        runs = [await runner.run_all() for _ in range(2)]

        assert [[("hung", True, None, None), ("working", True, None, None)]] * 2 == [
            [_summary(r) for r in poll] for poll in runs
        ]
        assert [True, True] == [
            h is w for h, w in zip(hung.threads[1:], working.threads[1:], strict=True)
        ]
        assert set() == set(threading.enumerate()) - before

    async def test_lanes_made_for_a_hang_end_once_it_is_over(
        self, make_runner: Callable[..., CollectorRunner], hung: _Hung, hung2: _Hung
    ) -> None:
        """Two hangs in one poll need three lanes; once both calls return, the next
        poll runs on one and the other two threads end."""
        working = _Working(CONTEXT)
        runner = make_runner([hung, hung2, working], timeout_s=MIXED_TIMEOUT_S)
        await runner.run_all()
        lanes = {*hung.threads, *hung2.threads, *working.threads}
        hung.release.set()
        hung2.release.set()
        await _until(lambda: not runner.busy())

        runs = await runner.run_all()
        serving = {hung.threads[-1], hung2.threads[-1], working.threads[-1]}
        spares = lanes - serving
        for thread in spares:
            await asyncio.to_thread(thread.join, BOUND_S)

        assert [True] * 3 == [r.success for r in runs]
        assert (3, 1, 2) == (len(lanes), len(serving), len(spares))
        assert [False, False] == [t.is_alive() for t in spares]
        assert [True] == [t.is_alive() for t in serving]

    async def test_two_hung_collectors_take_a_lane_each(
        self, make_runner: Callable[..., CollectorRunner], hung: _Hung, hung2: _Hung
    ) -> None:
        """Two collectors hanging in one poll take a lane each and the third gets its
        own: three threads for three collectors, and the next poll starts none."""
        working = _Working(CONTEXT)
        before = set(threading.enumerate())
        runner = make_runner([hung, hung2, working], timeout_s=MIXED_TIMEOUT_S)

        first = await runner.run_all()
        after_first = set(threading.enumerate())
        second = await runner.run_all()

        timed_out = f"timed out after {MIXED_TIMEOUT_S:g}s"
        running = "previous collection still running"
        assert [
            [("hung", False, timed_out, None), ("hung2", False, timed_out, None)],
            [("hung", False, running, None), ("hung2", False, running, None)],
        ] == [[_summary(r) for r in poll[:2]] for poll in (first, second)]
        assert [True, True] == [poll[2].success for poll in (first, second)]
        assert (3, set()) == (len(after_first - before), set(threading.enumerate()) - after_first)

    async def test_busy_names_the_hung_collector(
        self, make_runner: Callable[..., CollectorRunner], hung: _Hung
    ) -> None:
        """busy() names the collector whose call is still running, and no other."""
        runner = make_runner([_Working(CONTEXT), hung], timeout_s=MIXED_TIMEOUT_S)
        before = runner.busy()

        await runner.run_all()

        assert ((), ("hung",)) == (before, runner.busy())

    async def test_worker_thread_is_a_daemon(
        self, make_runner: Callable[..., CollectorRunner], hung: _Hung
    ) -> None:
        """The thread a hung call holds is a daemon: it cannot keep the process alive."""
        runner = make_runner([hung], timeout_s=0.05)
        await runner.run_all()

        assert [(True, True)] == [(t.is_alive(), t.daemon) for t in hung.threads]

    def test_process_exits_with_a_hung_collector(self) -> None:
        """A process whose asyncio.run returns while a collector hangs exits, code 0."""
        script = """
import asyncio, json, threading
from exporter.collectors.base import Collector, CollectorContext
from exporter.collectors.runner import CollectorRunner
from exporter.model import Readings

class Hung(Collector):
    name = "hung"
    def collect(self) -> Readings:
        threading.Event().wait()  # never set
        return Readings()

async def main() -> None:
    runner = CollectorRunner([Hung(CollectorContext())], timeout_s=0.05)
    (run,) = await runner.run_all()
    busy = runner.busy()
    runner.close()
    print(json.dumps([run.error, list(busy)]))

asyncio.run(main())
"""
        # The timeout bounds a hang (the bug this guards against), it measures nothing.
        done = run_python(script, timeout=120, check=False)

        last_line = done.stdout.strip().splitlines()[-1]
        assert (0, ["timed out after 0.05s", ["hung"]]) == (done.returncode, json.loads(last_line))


class TestClose:
    async def test_close_skips_a_collector_still_running(
        self, make_runner: Callable[..., CollectorRunner], hung: _Hung
    ) -> None:
        """close() leaves a collector whose call still runs alone, and closes the others."""
        working = _Working(CONTEXT)
        runner = make_runner([working, hung], timeout_s=MIXED_TIMEOUT_S)
        await runner.run_all()

        with capture_logs() as logs:
            runner.close()

        assert (1, 0) == (working.closed, hung.closed)
        assert [
            {"event": "collector_abandoned", "collector": "hung", "log_level": "warning"}
        ] == logs

    async def test_close_at_a_stop_mid_read_waits_for_the_read(
        self, make_runner: Callable[..., CollectorRunner], hung: _Hung
    ) -> None:
        """SIGTERM cancels a poll while a collector is in an ordinary read (milliseconds):
        close() lets the read end and closes the collector. It is not stuck, and saying
        so (collector_abandoned: "a wedged driver, check dmesg") at a routine rollout
        sent on-call looking for a hang that never was."""
        runner = make_runner([hung], timeout_s=BOUND_S)
        poll = asyncio.ensure_future(runner.run_all())
        await _until(lambda: hung.calls == 1)
        poll.cancel()
        with pytest.raises(asyncio.CancelledError):
            await poll
        # The read ends a moment after the stop began, as an ordinary one does.
        threading.Timer(0.05, hung.release.set).start()

        with capture_logs() as logs:
            runner.close()

        assert ([], 1) == (logs, hung.closed)

    async def test_close_does_not_wait_for_a_call_past_its_handover(
        self,
        make_runner: Callable[..., CollectorRunner],
        hung: _Hung,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A call that has run longer than the handover by the runner's clock (a hang, if
        not yet timed out) is not waited for: the stop goes on at once and says so."""
        clock = _Clock(100.0)
        runner = make_runner([hung], timeout_s=BOUND_S, clock=clock)
        await _stopped_mid_call(runner, lambda: hung.calls == 1)
        clock.advance(HANDOVER_S + 0.5)  # past the handover, well within the timeout
        fake = _FakeTime()
        monkeypatch.setattr(runner_module, "time", fake)

        with capture_logs() as logs:
            runner.close()

        assert ([], ["collector_abandoned"], 0) == (
            fake.slept,
            [e["event"] for e in logs],
            hung.closed,
        )

    async def test_close_stops_waiting_once_the_read_ends(
        self,
        make_runner: Callable[..., CollectorRunner],
        hung: _Hung,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A read that ends a moment into the wait is closed then: the stop is not held
        for the rest of the handover."""
        runner = make_runner([hung], timeout_s=BOUND_S, clock=_Clock(100.0))
        await _stopped_mid_call(runner, lambda: hung.calls == 1)
        ended_at: list[float] = []

        def read_ends() -> None:
            if not ended_at:
                hung.release.set()
                deadline = time.monotonic() + BOUND_S
                while runner.busy() and time.monotonic() < deadline:
                    time.sleep(0.001)
                ended_at.append(fake.now)

        fake = _FakeTime(read_ends)
        monkeypatch.setattr(runner_module, "time", fake)

        with capture_logs() as logs:
            runner.close()

        assert ([], 1, fake.now) == (logs, hung.closed, ended_at[0])
        assert ended_at[0] < HANDOVER_S

    async def test_close_waits_for_a_call_taken_but_not_yet_started(
        self, make_runner: Callable[..., CollectorRunner], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A stop between a lane taking a call and marking it started still gives the
        call its handover: it runs, ends, and its collector is closed."""
        clock = _StallingClock(100.0)
        working = _Working(CONTEXT)
        runner = make_runner([working], timeout_s=BOUND_S, clock=clock)
        try:
            await _stopped_mid_call(runner, clock.held.is_set)

            def call_runs() -> None:
                clock.go.set()
                deadline = time.monotonic() + BOUND_S
                while runner.busy() and time.monotonic() < deadline:
                    time.sleep(0.001)

            monkeypatch.setattr(runner_module, "time", _FakeTime(call_runs))
            with capture_logs() as logs:
                runner.close()
        finally:
            clock.go.set()

        assert ([], 1, 1) == (logs, len(working.threads), working.closed)

    async def test_close_ends_every_lane(
        self, make_runner: Callable[..., CollectorRunner], hung: _Hung
    ) -> None:
        """close() ends the idle lanes at once and the hung one's when its call returns."""
        working = _Working(CONTEXT)
        runner = make_runner([hung, working], timeout_s=MIXED_TIMEOUT_S)
        await runner.run_all()
        hung_lane, other_lane = hung.threads[0], working.threads[0]

        runner.close()
        await asyncio.to_thread(other_lane.join, BOUND_S)
        alive = (hung_lane.is_alive(), other_lane.is_alive())
        hung.release.set()
        await asyncio.to_thread(hung_lane.join, BOUND_S)

        assert ((True, False), False) == (alive, hung_lane.is_alive())


class TestLogsAndCounts:
    async def test_state_changes_and_issues_logged_once(
        self, make_runner: Callable[..., CollectorRunner]
    ) -> None:
        """Each state change is logged once, failing after unavailable included; each
        distinct issue detail once, however many polls report it."""
        lost_0 = CollectorIssue("GPU_IS_LOST", "utilization: GPU 0 lost")
        lost_1 = CollectorIssue("GPU_IS_LOST", "utilization: GPU 1 lost")
        garbage = CollectorIssue("GARBAGE", "temperature: not a number")
        script = [
            _unavailable,
            _unavailable,
            _failing,
            _failing,
            _reporting(lost_0, lost_1),
            _reporting(lost_0, garbage),
            _reporting(lost_0),
            _unavailable,
        ]
        runner = make_runner([_Scripted(CONTEXT, script)], timeout_s=BOUND_S)

        with capture_logs() as logs:
            for _ in script:
                await runner.run_all()

        def event(name: str, level: str, **fields: Any) -> dict[str, Any]:
            return {"event": name, "collector": "scripted", "log_level": level, **fields}

        assert [
            event("collector_unavailable", "info", reason="no driver loaded"),
            event("collector_failed", "warning", error="ValueError: driver fell over"),
            event("collector_recovered", "info", was="failed: ValueError: driver fell over"),
            event("collector_read_failed", "warning", error=lost_0.error, detail=lost_0.detail),
            event("collector_read_failed", "warning", error=lost_1.error, detail=lost_1.detail),
            event("collector_read_failed", "warning", error=garbage.error, detail=garbage.detail),
            event("collector_unavailable", "info", reason="no driver loaded"),
        ] == logs

    async def test_a_new_kind_of_failure_is_logged_after_a_flood_of_another(
        self, make_runner: Callable[..., CollectorRunner]
    ) -> None:
        """Details that carry a PID use up the log's budget for their kind only: a
        first unreadable cgroup hours later still gets its line (it got none, for the
        whole life of the process, once 256 exited processes had been logged)."""
        exited = [CollectorIssue("process_exited", f"pid {n} exited") for n in range(300)]
        unreadable = CollectorIssue("cgroup_unreadable", "/proc/7/cgroup: Permission denied")
        script = [_reporting(*exited), _reporting(unreadable)]
        runner = make_runner([_Scripted(CONTEXT, script)], timeout_s=BOUND_S)

        with capture_logs() as logs:
            for _ in script:
                await runner.run_all()

        lines = [(e["event"], e.get("error")) for e in logs]
        assert lines.count(("collector_read_failed", "process_exited")) == MAX_LOGGED_ISSUES
        assert lines[MAX_LOGGED_ISSUES:] == [
            ("collector_issues_not_logged", "process_exited"),
            ("collector_read_failed", "cgroup_unreadable"),
        ]

    async def test_error_counts_cumulative_from_zero(
        self, make_runner: Callable[..., CollectorRunner]
    ) -> None:
        """Known errors start at 0; every issue counts, per label, across polls and states."""
        lost = CollectorIssue("GPU_IS_LOST", "utilization: GPU 0 lost")
        garbage = CollectorIssue("GARBAGE", "temperature: not a number")
        script = [_unavailable, _reporting(lost, lost), _reporting(lost, garbage), _failing]
        runner = make_runner([_Scripted(CONTEXT, script)], timeout_s=BOUND_S)

        counts = [(await runner.run_all())[0].error_counts for _ in script]

        assert [
            (("GPU_IS_LOST", 0),),
            (("GPU_IS_LOST", 2),),
            (("GARBAGE", 1), ("GPU_IS_LOST", 3)),
            (("GARBAGE", 1), ("GPU_IS_LOST", 3)),
        ] == counts


class TestFailedRunsKeepIdentities:
    async def test_a_failed_run_names_the_last_devices_without_figures(
        self, make_runner: Callable[..., CollectorRunner]
    ) -> None:
        """A run that fails (NVML hung or erroring for a poll) still names the devices
        its last good run found, identity and keys, but no figure: device_info's
        labels stay put and nothing stale passes for fresh. A source gone unavailable
        names nothing."""
        gpu = DeviceReading(
            "GPU-a",
            (HardwareKey(KeyKind.GPU_UUID, "GPU-a"),),
            DeviceIdentity(uuid="GPU-a", pci_address="0000:17:00.0", model="H100", vendor="nvidia"),
            (Sample(POWER, 300.0),),
            standalone=True,
        )
        pci = PciDevice("0000:17:00.0", "0x10de", "0x2330", "0x030200", 0)
        driver = Sample(GPU_DRIVER_INFO, 1.0, ("nvidia", "580.159.04", "13.0"))
        good = Readings(
            devices=(gpu,), pci_devices=(pci,), node_samples=(Sample(POWER, 1.0), driver)
        )
        script = [lambda: good, _failing, _failing, _unavailable, _failing]
        runner = make_runner([_Scripted(CONTEXT, script)], timeout_s=BOUND_S)

        runs = [(await runner.run_all())[0] for _ in script]

        # The driver's version is an identity too: kept, where the node figure is not.
        kept = Readings(
            devices=(replace(gpu, samples=()),), pci_devices=(pci,), node_samples=(driver,)
        )
        assert [(r.success, r.readings) for r in runs] == [
            (True, good),
            (False, kept),
            (False, kept),
            (True, Readings()),
            (False, Readings()),
        ]

    async def test_a_failed_run_keeps_no_figure_of_a_pci_function(
        self, make_runner: Callable[..., CollectorRunner]
    ) -> None:
        """The pci collector's functions carry figures of their own (the PCIe link, its
        AER counts): a failed run keeps where each function sits (NUMA node, PCIe path),
        not those figures, which would pass for fresh for as long as it fails."""
        width = MetricSpec("podresources_pcie_link_width", MetricKind.GAUGE, "Lanes.")
        pci = PciDevice(
            "0000:17:00.0",
            "0x10de",
            "0x2330",
            "0x030200",
            0,
            samples=(Sample(width, 16.0),),
            pcie_path=("pci0000:15", "0000:16:00.0", "0000:17:00.0"),
        )
        script = [lambda: Readings(pci_devices=(pci,)), _failing]
        runner = make_runner([_Scripted(CONTEXT, script)], timeout_s=BOUND_S)

        runs = [(await runner.run_all())[0] for _ in script]

        assert runs[1].readings == Readings(pci_devices=(replace(pci, samples=()),))


class TestNoLeak:
    async def test_failing_collector_leaks_no_exceptions_or_frames(
        self, make_runner: Callable[..., CollectorRunner]
    ) -> None:
        """After 200 polls of a raising collector at most one of its exceptions is alive,
        and no earlier poll's frame: outcomes cross back as data, not tracebacks."""
        runner = make_runner([_Broken(CONTEXT)], timeout_s=BOUND_S)
        for _ in range(200):
            (run,) = await runner.run_all()
        assert not run.success

        gc.collect()
        alive = gc.get_objects()
        exceptions = [o for o in alive if isinstance(o, _BrokenReadError)]
        frames = [
            o.f_code.co_name
            for o in alive
            if isinstance(o, types.FrameType)
            and o.f_code in {_Broken.collect.__code__, CollectorRunner.run_all.__code__}
        ]
        del alive

        # One exception may survive, and with it the last poll's frames; never more.
        assert len(exceptions) <= 1
        assert [] == [name for name, count in Counter(frames).items() if count > 1]


class _HangsAfter(Collector):
    """Takes ``seconds`` of the runner's clock, then blocks until released."""

    name = "hangs_after"

    def __init__(self, clock: _Clock, seconds: float) -> None:
        super().__init__(CONTEXT)
        self.release = threading.Event()
        self._clock = clock
        self._seconds = seconds

    def collect(self) -> Readings:
        self._clock.now += self._seconds
        self.release.wait()
        return Readings()


class TestTimeoutOnTheRunnersClock:
    async def test_a_call_that_has_run_its_timeout_is_timed_out(
        self, make_runner: Callable[..., CollectorRunner]
    ) -> None:
        """By the runner's clock, a call that has run exactly its timeout is timed out,
        and its run lasted that long: the deadline is its own start plus timeout_s."""
        clock = _Clock(100.0)
        stuck = _HangsAfter(clock, 5.0)
        runner = make_runner([stuck], timeout_s=5.0, clock=clock)
        try:
            (run,) = await asyncio.wait_for(runner.run_all(), BOUND_S)
        finally:
            stuck.release.set()

        assert (("hangs_after", False, "timed out after 5s", None), 5.0) == (
            _summary(run),
            run.duration_seconds,
        )


class TestThreadsRefused:
    async def test_a_lane_the_system_refuses_is_logged_and_asked_for_again(
        self,
        make_runner: Callable[..., CollectorRunner],
        hung: _Hung,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Out of threads ("can't start new thread"), the lane a hung call needs is not
        made: a warning, and the poll asks again at its next check rather than failing."""
        working = _Working(CONTEXT)
        runner = make_runner([hung, working], timeout_s=MIXED_TIMEOUT_S)
        real_start = threading.Thread.start
        refused: list[str] = []

        def start(thread: threading.Thread) -> None:
            if not refused:
                refused.append(thread.name)
                raise RuntimeError("can't start new thread")
            real_start(thread)

        monkeypatch.setattr(threading.Thread, "start", start)
        with capture_logs() as logs:
            runs = await asyncio.wait_for(runner.run_all(), BOUND_S)

        assert (
            ["collector-lane-1"],
            [
                ("hung", False, f"timed out after {MIXED_TIMEOUT_S:g}s", None),
                ("working", True, None, None),
            ],
            ["collector_lane_not_started"],
        ) == (
            refused,
            [_summary(r) for r in runs],
            [e["event"] for e in logs if e["event"] == "collector_lane_not_started"],
        )


class _CloseFails(_Working):
    name = "close_fails"

    def close(self) -> None:
        raise OSError(5, "Input/output error")


class TestCloseFailing:
    async def test_a_close_that_raises_is_logged_and_the_rest_are_closed(
        self, make_runner: Callable[..., CollectorRunner]
    ) -> None:
        """Shutting down, a collector whose close() raises (NVML's shutdown failing) is a
        warning; the collectors after it are still closed."""
        working = _Working(CONTEXT)
        runner = make_runner([_CloseFails(CONTEXT), working], timeout_s=BOUND_S)
        await runner.run_all()

        with capture_logs() as logs:
            runner.close()

        assert (1, ["close_fails"]) == (
            working.closed,
            [e["collector"] for e in logs if e["event"] == "collector_close_failed"],
        )


def _polls_alive() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, runner_module._Poll))


class TestLanesHoldNothing:
    async def test_an_idle_lane_holds_no_poll(
        self, make_runner: Callable[..., CollectorRunner]
    ) -> None:
        """Once a poll is over, no lane keeps it (and with it that poll's readings) while
        it waits for the next."""
        runner = make_runner([_Working(CONTEXT)], timeout_s=BOUND_S)
        await runner.run_all()

        await _until(lambda: _polls_alive() == 0)


class TestNoLaneAtAll:
    async def test_calls_no_lane_can_take_are_not_run_once_their_timeout_is_past(
        self,
        make_runner: Callable[..., CollectorRunner],
        hung: _Hung,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Out of threads while the only lane is stuck in a hung call, the calls queued
        behind it cannot start: once they have waited a timeout for a lane they are
        reported not run, and the poll ends (it used to wait for the hang to end)."""
        working = _Working(CONTEXT)
        runner = make_runner([hung, working], timeout_s=MIXED_TIMEOUT_S)

        def start(thread: threading.Thread) -> None:
            raise RuntimeError("can't start new thread")

        monkeypatch.setattr(threading.Thread, "start", start)
        with capture_logs() as logs:
            runs = await asyncio.wait_for(runner.run_all(), BOUND_S)

        assert (
            [
                ("hung", False, f"timed out after {MIXED_TIMEOUT_S:g}s", None),
                (
                    "working",
                    False,
                    "not run: no worker thread was free or could be started",
                    None,
                ),
            ],
            ["collector_lane_not_started"],  # once, not at every check of the poll
        ) == (
            [_summary(r) for r in runs],
            [e["event"] for e in logs if e["event"] == "collector_lane_not_started"],
        )


class TestLoopClosed:
    def test_a_lane_returning_after_the_loop_closed_ends_quietly(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A hung call that returns after the event loop is closed (the process is
        exiting) ends its lane without an uncaught exception."""
        hung = _Hung(CONTEXT)
        raised: list[type[BaseException]] = []
        monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_type))
        loop = asyncio.new_event_loop()
        runner = CollectorRunner([hung], timeout_s=0.05)
        try:
            loop.run_until_complete(runner.run_all())
        finally:
            loop.close()
        lane = hung.threads[0]
        hung.release.set()
        lane.join(BOUND_S)

        assert ([], False) == (raised, lane.is_alive())
