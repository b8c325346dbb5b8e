"""The one interface every telemetry collector implements, and how it registers.

A collector reads one source (NVML, a sysfs class, procfs) and returns ``Readings``:
every device it sees under its hardware keys (GPU UUID, PCI address, interface
name...), never kubelet device IDs. It knows nothing of pods or of the kubelet:
``exporter.resolver`` and ``exporter.join`` attach readings to owners. ``collect`` is
blocking and runs in a worker thread (``exporter.collectors.runner``), which times it.

The partial-failure contract: a read that fails for one device or figure is reported
in ``Readings.issues`` and loses that figure only; the runner logs each distinct issue
once and counts them in ``podresources_collector_errors_total``. Raise
``CollectorUnavailable`` when the source is absent and ``CollectorError`` when the
whole source fails.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from exporter.config import DEFAULT_NVML_ENERGY_INTERVAL_S, DEFAULT_NVML_GPM_INTERVAL_S
from exporter.errors import CollectorError, CollectorUnavailable
from exporter.model import CollectorIssue, MetricKind, MetricSpec, Readings

__all__ = [
    "COLLECTOR_ERRORS",
    "Collector",
    "CollectorContext",
    "CollectorError",
    "CollectorUnavailable",
    "Registration",
    "issue",
]


# One family for every collector's per-figure failures (a lost GPU, a garbage file),
# counted by the runner from the issues collectors report.
COLLECTOR_ERRORS = MetricSpec(
    "podresources_collector_errors_total",
    MetricKind.COUNTER,
    "Problems a collector reported since the exporter started, by error: a figure it "
    "could not read, or (gpu_processes) a process it could not attribute.",
    labels=("collector", "error"),
)


@dataclass(frozen=True, slots=True)
class CollectorContext:
    """What every collector may use: the injected filesystem roots, and the one
    collector setting that is not a root."""

    sysfs: Path = Path("/sys")
    procfs: Path = Path("/proc")
    kubelet_plugins: Path = Path("/var/lib/kubelet/plugins")
    cdi: tuple[Path, ...] = (Path("/var/run/cdi"), Path("/etc/cdi"))
    pod_logs: Path = Path("/var/log/pods")  # the kubelet's, for PID -> pod (gpu_processes)
    # How long a GPU's energy counter reading is served before NVML is asked again
    # (nvml); 0: every poll.
    nvml_energy_interval_s: float = DEFAULT_NVML_ENERGY_INTERVAL_S
    # How long a GPU's GPM measurement is served before the next (nvml); 0: every poll.
    nvml_gpm_interval_s: float = DEFAULT_NVML_GPM_INTERVAL_S


def issue(error: str, detail: str) -> CollectorIssue:
    """A failed read: ``error`` is the short counted label, ``detail`` the log line."""
    return CollectorIssue(error=error, detail=detail)


class Collector(abc.ABC):
    """One telemetry source, switched by ``--collector.<name>``."""

    name: ClassVar[str]
    # Resource-name and DRA-driver prefixes whose telemetry this source provides: if
    # the kubelet advertises one while the source is absent, the collector has failed.
    serves: ClassVar[tuple[str, ...]] = ()
    # Error labels shown at 0 from the start, so increase() sees their first occurrence.
    known_errors: ClassVar[tuple[str, ...]] = ()

    def __init__(self, context: CollectorContext) -> None:
        self.context = context

    @abc.abstractmethod
    def collect(self) -> Readings:
        """Read the source once; blocking. Every device it sees, under hardware keys."""

    def close(self) -> None:  # noqa: B027 - optional hook, most collectors hold nothing
        """Release what the collector holds (NVML handle); called once at shutdown."""


@dataclass(frozen=True, slots=True)
class Registration:
    """One collector module's entry: the flag ``--collector.<name>`` and its help follow."""

    name: str
    help: str
    factory: Callable[[CollectorContext], Collector]
    enabled_by_default: bool = True
