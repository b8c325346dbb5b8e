"""Which NUMA node each CPU sits on, from sysfs.

Read from ``<sysfs>/devices/system/node/nodeN/cpulist``. A kernel built without NUMA
has no ``devices/system/node`` at all: the map is then empty and callers treat every
CPU as being on an unknown node. The poller reads this once at start and now and
then after (CPU hotplug is rare), not on every poll.
"""

from __future__ import annotations

import re
from pathlib import Path

from exporter.collectors._sysfs import read_text
from exporter.collectors.base import CollectorError

__all__ = ["node_dirs", "parse_cpulist", "read_cpu_numa_map"]

_NODE_DIR = re.compile(r"^node(\d+)$")
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def parse_cpulist(text: str) -> tuple[int, ...]:
    """The CPUs of a kernel cpulist such as ``"0-3,8,10-11"``, sorted; ``""`` gives ().

    Raises ValueError on anything the kernel would not print.
    """
    text = text.strip()
    if not text:
        return ()  # a node with memory but no CPUs prints an empty line
    cpus: set[int] = set()
    for part in text.split(","):
        match = _RANGE.match(part)
        if match is None:
            raise ValueError(f"not a cpulist range: {part!r}")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise ValueError(f"descending cpulist range: {part!r}")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def node_dirs(sysfs: Path) -> tuple[tuple[int, Path], ...]:
    """``(node id, directory)`` of every NUMA node in sysfs, by id; () without NUMA.

    Raises CollectorError when the node directory exists but cannot be listed.
    """
    root = sysfs / "devices" / "system" / "node"
    try:
        names = [entry.name for entry in root.iterdir()]
    except (FileNotFoundError, NotADirectoryError):
        return ()
    except OSError as error:
        raise CollectorError(f"cannot list {root}: {error.strerror or error}") from error
    found = []
    for name in names:
        match = _NODE_DIR.match(name)
        if match is not None:
            found.append((int(match.group(1)), root / name))
    return tuple(sorted(found))


def read_cpu_numa_map(sysfs: Path) -> dict[int, int]:
    """CPU id to NUMA node id; {} on a kernel without NUMA.

    Raises CollectorError naming the file when a cpulist is garbage or unreadable.
    """
    cpu_to_node: dict[int, int] = {}
    for node, directory in node_dirs(sysfs):
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
