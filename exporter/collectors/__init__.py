"""Telemetry collectors: one module per source, each switched by ``--collector.<name>``.

Each module ends with one ``REGISTRATION``; the flags, their help and the run order
follow from ``MODULES``. Importing a module is cheap: heavy bindings (pynvml) are
imported only when a collector is built.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from exporter.collectors.base import Collector, CollectorContext, Registration

__all__ = ["MODULES", "build_collectors", "registrations"]

# The order collectors run and are reported in.
MODULES = (
    "nvml",
    "pci",
    "netdev",
    "infiniband",
    "drm",
    "cpu",
    "numa",
    "topology",
    "dra",
    "gpu_processes",
)


def registrations() -> tuple[Registration, ...]:
    """Every collector's registration, in ``MODULES`` order."""
    found = []
    for module in MODULES:
        registration = importlib.import_module(f"exporter.collectors.{module}").REGISTRATION
        if not isinstance(registration, Registration) or registration.name != module:
            raise TypeError(f"exporter.collectors.{module}.REGISTRATION is not its registration")
        found.append(registration)
    return tuple(found)


def build_collectors(names: Iterable[str], context: CollectorContext) -> list[Collector]:
    """Instances of the named collectors, in registry order."""
    wanted = set(names)
    return [r.factory(context) for r in registrations() if r.name in wanted]
