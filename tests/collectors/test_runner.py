"""The collector runner: timeouts, one call in flight, isolation of failures."""

from __future__ import annotations

import asyncio
import threading
from typing import ClassVar

from structlog.testing import capture_logs

from exporter.collectors.base import Collector, CollectorContext, CollectorUnavailable
from exporter.collectors.runner import CollectorRunner
from exporter.model import DeviceReading, Readings

CONTEXT = CollectorContext()


class _Working(Collector):
    name: ClassVar[str] = "working"
    description: ClassVar[str] = "returns one reading"

    def collect(self, *, device_ids: frozenset[str]) -> Readings:
        return Readings(devices=tuple(DeviceReading(d) for d in sorted(device_ids)))


class _Blocking(Collector):
    name: ClassVar[str] = "blocking"
    description: ClassVar[str] = "waits until released, like a wedged driver call"

    def __init__(self, context: CollectorContext) -> None:
        super().__init__(context)
        self.release = threading.Event()
        self.calls = 0

    def collect(self, *, device_ids: frozenset[str]) -> Readings:
        self.calls += 1
        self.release.wait(timeout=10)
        return Readings()


class _Broken(Collector):
    name: ClassVar[str] = "broken"
    description: ClassVar[str] = "raises"

    def collect(self, *, device_ids: frozenset[str]) -> Readings:
        raise ValueError("garbage in /sys/whatever")


class _Absent(Collector):
    name: ClassVar[str] = "absent"
    description: ClassVar[str] = "no such hardware"

    def collect(self, *, device_ids: frozenset[str]) -> Readings:
        raise CollectorUnavailable("no driver loaded")


async def test_failures_stay_with_their_collector() -> None:
    """A raising and a hung collector fail alone; the working one still reports."""
    blocking = _Blocking(CONTEXT)
    runner = CollectorRunner([_Working(CONTEXT), blocking, _Broken(CONTEXT)], timeout_s=0.2)
    runs = await runner.run_all(device_ids=frozenset({"d1"}))
    blocking.release.set()
    assert [(r.name, r.success, r.error) for r in runs] == [
        ("working", True, None),
        ("blocking", False, "timed out after 0.2s"),
        ("broken", False, "ValueError: garbage in /sys/whatever"),
    ]
    assert runs[0].readings == Readings(devices=(DeviceReading("d1"),))


async def test_hung_collector_gets_no_second_thread() -> None:
    """While a call hangs, later polls fail fast instead of piling up threads."""
    blocking = _Blocking(CONTEXT)
    runner = CollectorRunner([blocking], timeout_s=0.1)
    await runner.run_all(device_ids=frozenset())
    (second,) = await runner.run_all(device_ids=frozenset())
    assert (second.success, second.error, blocking.calls) == (
        False,
        "previous collection still running",
        1,
    )
    blocking.release.set()
    # The released thread's result reaches the event loop a moment later; until then
    # polls still fail fast. Bounded: 5 s.
    for _ in range(500):
        (third,) = await runner.run_all(device_ids=frozenset())
        if third.success:
            break
        await asyncio.sleep(0.01)
    assert (third.success, blocking.calls) == (True, 2)


async def test_absent_hardware_is_success_logged_once() -> None:
    """An absent source reports success with no data and is logged once, not every poll."""
    runner = CollectorRunner([_Absent(CONTEXT)], timeout_s=1)
    with capture_logs() as logs:
        first = await runner.run_all(device_ids=frozenset())
        await runner.run_all(device_ids=frozenset())
    assert (first[0].success, first[0].readings) == (True, Readings())
    assert [(e["event"], e["reason"]) for e in logs] == [
        ("collector_unavailable", "no driver loaded")
    ]


async def test_failure_logged_on_change_only() -> None:
    """A broken collector logs once while it stays broken, not once per poll."""
    runner = CollectorRunner([_Broken(CONTEXT)], timeout_s=1)
    with capture_logs() as logs:
        for _ in range(3):
            await runner.run_all(device_ids=frozenset())
    assert [e["event"] for e in logs] == ["collector_failed"]
