"""Every collector of the exporter's that a test makes is closed after it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from exporter.collectors.base import Collector, CollectorContext


@pytest.fixture(autouse=True)
def _close_collectors(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close, after the test, each collector it made, as the exporter closes its own at
    exit: left to the garbage collector, one keeps its sysfs files (KeptFiles) and NVML
    open until a collection happens to come, somewhere in a later test. Only the
    exporter's classes: a test's stand-in holds nothing, and some count their close()
    calls or raise from them on purpose."""
    made: list[Collector] = []
    init = Collector.__init__

    def init_noted(self: Collector, context: CollectorContext) -> None:
        init(self, context)
        if type(self).__module__.startswith("exporter."):
            made.append(self)

    monkeypatch.setattr(Collector, "__init__", init_noted)
    yield
    for collector in made:
        collector.close()  # a second close() (the test's own came first) does nothing
