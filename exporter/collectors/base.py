"""The one interface every telemetry collector implements.

A collector reads one source (NVML, a sysfs class, procfs) and returns ``Readings``
keyed by device IDs and CPUs. It knows nothing of pods: ``exporter.join`` attaches
readings to owners. ``collect`` is blocking and runs in a worker thread
(``exporter.collectors.runner``), which times it and turns exceptions into
``podresources_collector_success 0``.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from exporter.model import MetricKind, MetricSpec, Readings

__all__ = [
    "COLLECTOR_ERRORS",
    "Collector",
    "CollectorContext",
    "CollectorError",
    "CollectorUnavailable",
]


# One family for every collector's per-figure failures (a lost GPU, a garbage file):
# a collector keeps its own cumulative counts and reports them as node samples.
COLLECTOR_ERRORS = MetricSpec(
    "podresources_collector_errors_total",
    MetricKind.COUNTER,
    "Failed reads of single figures of single devices since the exporter started, by error.",
    labels=("collector", "error"),
)


@dataclass(frozen=True, slots=True)
class CollectorContext:
    """What every collector may use: the injected filesystem roots."""

    sysfs: Path = Path("/sys")
    procfs: Path = Path("/proc")


class CollectorError(Exception):
    """A collector could not read its source; the message names the path or call."""


class CollectorUnavailable(CollectorError):
    """The source is absent on this node (no driver, no such subsystem): not a failure.

    The runner logs the reason once and reports the collector as successful with no data,
    so a CPU-only node does not page anyone.
    """


class Collector(abc.ABC):
    """One telemetry source, switched by ``--collector.<name>``."""

    name: ClassVar[str]
    description: ClassVar[str]  # one line for --help
    enabled_by_default: ClassVar[bool] = True

    def __init__(self, context: CollectorContext) -> None:
        self.context = context

    @abc.abstractmethod
    def collect(self, *, device_ids: frozenset[str]) -> Readings:
        """Read the source once; blocking.

        ``device_ids`` are the kubelet's device IDs (allocatable and allocated, replica
        suffixes ``::n`` stripped), so a collector can match its devices to them.
        Raise ``CollectorUnavailable`` when the source is absent, ``CollectorError`` when
        it fails; return partial readings when only some devices or figures fail.
        """

    def close(self) -> None:  # noqa: B027 - optional hook, most collectors hold nothing
        """Release what the collector holds (NVML handle); called once at shutdown."""
