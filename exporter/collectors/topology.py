"""Which NUMA node each CPU sits on, from ``<sysfs>/devices/system/node/nodeN/cpulist``.

Read every poll, like any other source, under the collector timeout: the files are few
and small, and CPU hotplug changes them. A kernel built without NUMA has no
``devices/system/node``: the map is then empty and every CPU's node is unknown (""),
which is success, not a failure. A garbage or unreadable cpulist fails the collector:
the poller keeps serving the last good map.
"""

from __future__ import annotations

from pathlib import Path

from exporter.collectors.base import Collector, CollectorError, Registration
from exporter.model import Readings
from exporter.sysfs import node_dirs, parse_cpulist, read_text

__all__ = ["REGISTRATION", "TopologyCollector", "read_cpu_numa_map"]


def read_cpu_numa_map(sysfs_root: Path) -> dict[int, int]:
    """CPU id to NUMA node id; {} on a kernel without NUMA.

    Raises CollectorError naming the file when a cpulist is garbage or unreadable.
    """
    cpu_to_node: dict[int, int] = {}
    for node, directory in node_dirs(sysfs_root):
        path = directory / "cpulist"
        text = read_text(path)
        if text is None:
            continue  # the node went offline between listing and reading
        try:
            cpus = parse_cpulist(text)
        except ValueError as error:
            raise CollectorError(f"{path}: {error}") from error
        for cpu in cpus:
            cpu_to_node[cpu] = node
    return cpu_to_node


class TopologyCollector(Collector):
    """The CPU to NUMA node map: ``numa_node`` of CPUs and NUMA alignment need it."""

    name = "topology"

    def collect(self) -> Readings:
        return Readings(cpu_numa=tuple(sorted(read_cpu_numa_map(self.context.sysfs).items())))


REGISTRATION = Registration(
    "topology",
    "CPU to NUMA node map from sysfs (numa_node of exclusive CPUs, NUMA alignment)",
    TopologyCollector,
)
