"""Which NUMA node each CPU sits on, from ``<sysfs>/devices/system/node/nodeN/cpulist``.

Read every poll, like any other source, under the collector timeout: the files are few
and small, and CPU hotplug changes them. A kernel built without NUMA has no
``devices/system/node``: the map is then empty and every CPU's node is unknown (""),
which is success, not a failure. A garbage or unreadable cpulist fails the collector:
the poller keeps serving the last good map.

A node's ``cpulist`` names its online CPUs only (``node_read_cpumap`` in the kernel's
``drivers/base/node.c`` masks it with ``cpu_online_mask``), but the kubelet keeps
exclusive CPUs taken offline after it started (SMT turned off) in its allocatable and
assigned sets. An offline CPU that is present keeps its ``cpu/cpuN/node<M>`` link
(``register_cpu`` links it under its node at registration, ``unregister_cpu`` at
removal only), so the CPUs ``cpu/offline`` and ``cpu/present`` both name are mapped
through it, not left on the unknown node. A CPU that is not present (a hotplug slot,
one past ``nr_cpus=``) has no node to tell.
"""

from __future__ import annotations

import os
import re
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
    for cpu, node in _offline_cpu_nodes(sysfs_root / "devices" / "system" / "cpu").items():
        cpu_to_node.setdefault(cpu, node)
    return cpu_to_node


_NODE_LINK = re.compile(r"^node(\d+)$")


def _cpu_set(path: Path) -> set[int]:
    """The CPUs of a cpulist file; none where it is absent (a kernel without hotplug)."""
    text = read_text(path)
    if text is None:
        return set()
    try:
        return set(parse_cpulist(text))
    except ValueError as error:
        raise CollectorError(f"{path}: {error}") from error


def _offline_cpu_nodes(cpu_root: Path) -> dict[int, int]:
    """The node of each offline CPU that is present, by its ``cpuN/node<M>`` link.
    ``present`` first: ``offline`` also names every possible CPU never plugged in."""
    offline = _cpu_set(cpu_root / "offline")
    if not offline:
        return {}  # the common case: every present CPU is online
    nodes = {}
    for cpu in sorted(offline & _cpu_set(cpu_root / "present")):
        try:
            names = os.listdir(cpu_root / f"cpu{cpu}")
        except OSError:
            continue  # removed since (hot-unplug): no node to tell
        for name in names:
            match = _NODE_LINK.match(name)
            if match is not None:
                nodes[cpu] = int(match.group(1))
                break
    return nodes


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
