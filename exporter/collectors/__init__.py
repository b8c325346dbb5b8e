"""Telemetry collectors: one module per source, each switched by ``--collector.<name>``.

Collector classes are imported only when enabled, so a node without NVML never loads
the NVML bindings.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass

from exporter.collectors.base import Collector, CollectorContext

__all__ = ["REGISTRY", "RegisteredCollector", "build_collectors"]


@dataclass(frozen=True, slots=True)
class RegisteredCollector:
    module: str
    class_name: str
    description: str  # one line for --help

    def load(self) -> type[Collector]:
        cls: type[Collector] = getattr(importlib.import_module(self.module), self.class_name)
        return cls


# The order is the order collectors run and are reported in.
REGISTRY: dict[str, RegisteredCollector] = {
    "nvml": RegisteredCollector(
        "exporter.collectors.nvml", "NvmlCollector", "NVIDIA GPUs and MIG devices through NVML"
    ),
    "pci": RegisteredCollector(
        "exporter.collectors.pci", "PciCollector", "PCI identity and NUMA node from sysfs"
    ),
    "netdev": RegisteredCollector(
        "exporter.collectors.netdev",
        "NetdevCollector",
        "network counters of NICs and SR-IOV VFs from sysfs",
    ),
    "infiniband": RegisteredCollector(
        "exporter.collectors.infiniband",
        "InfinibandCollector",
        "InfiniBand/RDMA port counters from sysfs",
    ),
    "drm": RegisteredCollector(
        "exporter.collectors.drm", "DrmCollector", "AMD and Intel GPUs from sysfs (drm class)"
    ),
    "cpu": RegisteredCollector(
        "exporter.collectors.cpu",
        "CpuCollector",
        "per-CPU times from /proc/stat, summed over containers' exclusive CPUs",
    ),
    "numa": RegisteredCollector(
        "exporter.collectors.numa",
        "NumaCollector",
        "memory and hugepages per NUMA node from sysfs",
    ),
}


def build_collectors(names: Iterable[str], context: CollectorContext) -> list[Collector]:
    """Instances of the named collectors, in registry order."""
    wanted = set(names)
    return [entry.load()(context) for name, entry in REGISTRY.items() if name in wanted]
