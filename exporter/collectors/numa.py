"""Memory and hugepages per NUMA node, from sysfs (node_exporter's meminfo_numa, trimmed).

Reads, for every ``<sysfs>/devices/system/node/nodeN``:

- ``meminfo``: ``MemTotal`` and ``MemFree`` (kB, converted to bytes);
- ``hugepages/hugepages-<size>kB/{nr_hugepages,free_hugepages}`` (page counts, converted
  to bytes with the page size).

Hugepage series carry ``memory_type`` in the kubelet's naming (``hugepages-2Mi``,
``hugepages-1Gi``), so dashboards can set them beside
``podresources_node_allocated_memory_bytes{memory_type}``. A kernel without NUMA has no
node directory: the collector is then unavailable, not failed. A garbage file drops
that node's figure and is logged once; the other nodes are still reported.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import structlog

from exporter.collectors._sysfs import read_int, read_text
from exporter.collectors.base import (
    Collector,
    CollectorContext,
    CollectorError,
    CollectorUnavailable,
)
from exporter.model import MetricKind, MetricSpec, Readings, Sample
from exporter.topology import node_dirs

__all__ = [
    "NUMA_HUGEPAGES_FREE",
    "NUMA_HUGEPAGES_TOTAL",
    "NUMA_MEMORY_FREE",
    "NUMA_MEMORY_TOTAL",
    "NumaCollector",
    "hugepages_memory_type",
    "parse_node_meminfo",
]

log = structlog.get_logger(__name__)

NUMA_MEMORY_TOTAL = MetricSpec(
    "podresources_numa_memory_total_bytes",
    MetricKind.GAUGE,
    "Memory of the NUMA node in total, in bytes.",
    labels=("numa_node",),
)
NUMA_MEMORY_FREE = MetricSpec(
    "podresources_numa_memory_free_bytes",
    MetricKind.GAUGE,
    "Free memory of the NUMA node, in bytes.",
    labels=("numa_node",),
)
NUMA_HUGEPAGES_TOTAL = MetricSpec(
    "podresources_numa_hugepages_total_bytes",
    MetricKind.GAUGE,
    "Hugepages reserved on the NUMA node, in bytes, by page size (kubelet memory_type).",
    labels=("numa_node", "memory_type"),
)
NUMA_HUGEPAGES_FREE = MetricSpec(
    "podresources_numa_hugepages_free_bytes",
    MetricKind.GAUGE,
    "Hugepages of the NUMA node not in use, in bytes, by page size (kubelet memory_type).",
    labels=("numa_node", "memory_type"),
)

KIB = 1024
# "Node 0 MemTotal:       263856768 kB"; HugePages_* lines carry no unit (page counts).
_MEMINFO_LINE = re.compile(r"^Node\s+\d+\s+(\S+):\s+(\d+)(?:\s+(kB))?$")
_HUGEPAGES_DIR = re.compile(r"^hugepages-(\d+)kB$")
# resource.Quantity's canonical binary suffixes, largest first (Ki when none divides).
_BINARY_SUFFIXES: tuple[tuple[str, int], ...] = (
    ("Ei", 1 << 60),
    ("Pi", 1 << 50),
    ("Ti", 1 << 40),
    ("Gi", 1 << 30),
    ("Mi", 1 << 20),
)


def parse_node_meminfo(text: str) -> dict[str, int]:
    """Every field of a per-node ``meminfo``; kB values in bytes, unitless ones as is.

    Raises ValueError on a line that is not ``Node <n> <Field>: <value> [kB]``.
    """
    fields: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        match = _MEMINFO_LINE.match(line)
        if match is None:
            raise ValueError(f"line {number}: not a node meminfo line: {line[:60]!r}")
        name, value, unit = match.groups()
        fields[name] = int(value) * KIB if unit else int(value)
    return fields


def hugepages_memory_type(page_size_kib: int) -> str:
    """The kubelet's resource name for a hugepage size: 2048 kB gives ``hugepages-2Mi``.

    Kubernetes prints the size as a canonical quantity: the largest binary suffix that
    divides it exactly.
    """
    size = page_size_kib * KIB
    for suffix, unit in _BINARY_SUFFIXES:
        if size % unit == 0:
            return f"hugepages-{size // unit}{suffix}"
    return f"hugepages-{page_size_kib}Ki"


class NumaCollector(Collector):
    """Memory and hugepages per NUMA node."""

    name = "numa"
    description = "Memory and hugepages per NUMA node, from sysfs."

    def __init__(self, context: CollectorContext) -> None:
        super().__init__(context)
        self._noted_errors: frozenset[str] = frozenset()

    def collect(self, *, device_ids: frozenset[str]) -> Readings:
        """Read every node's memory and hugepages once."""
        nodes = node_dirs(self.context.sysfs)
        if not nodes:
            raise CollectorUnavailable(
                f"no NUMA nodes under {self.context.sysfs / 'devices' / 'system' / 'node'}"
            )
        errors: list[str] = []
        samples: list[Sample] = []
        for node, directory in nodes:
            samples.extend(_memory_samples(str(node), directory, errors))
            samples.extend(_hugepages_samples(str(node), directory, errors))
        self._note_errors(errors)
        if errors and not samples:
            raise CollectorError(errors[0])  # nothing readable at all: a failure, not a gap
        return Readings(node_samples=tuple(samples))

    def _note_errors(self, errors: Iterable[str]) -> None:
        # Log each error once while it lasts, not on every poll.
        current = frozenset(errors)
        for error in sorted(current - self._noted_errors):
            log.warning("numa_read_error", collector=self.name, error=error)
        self._noted_errors = current


def _memory_samples(node: str, directory: Path, errors: list[str]) -> list[Sample]:
    path = directory / "meminfo"
    try:
        text = read_text(path)
        fields = parse_node_meminfo(text) if text is not None else {}
    except CollectorError as error:
        errors.append(str(error))
        return []
    except ValueError as error:
        errors.append(f"{path}: {error}")
        return []
    samples = []
    for spec, field in ((NUMA_MEMORY_TOTAL, "MemTotal"), (NUMA_MEMORY_FREE, "MemFree")):
        if field in fields:
            samples.append(Sample(spec, float(fields[field]), (node,)))
    return samples


def _hugepages_samples(node: str, directory: Path, errors: list[str]) -> list[Sample]:
    root = directory / "hugepages"
    try:
        names = [entry.name for entry in root.iterdir()]
    except (FileNotFoundError, NotADirectoryError):
        return []  # a kernel without hugetlbfs support
    except OSError as error:
        errors.append(f"cannot list {root}: {error.strerror or error}")
        return []
    sizes = sorted(int(m.group(1)) for m in map(_HUGEPAGES_DIR.match, names) if m is not None)
    samples = []
    for size_kib in sizes:
        size_dir = root / f"hugepages-{size_kib}kB"
        labels = (node, hugepages_memory_type(size_kib))
        for spec, file in (
            (NUMA_HUGEPAGES_TOTAL, "nr_hugepages"),
            (NUMA_HUGEPAGES_FREE, "free_hugepages"),
        ):
            try:
                pages = read_int(size_dir / file)
            except CollectorError as error:
                errors.append(str(error))
                continue
            if pages is not None:
                samples.append(Sample(spec, float(pages * size_kib * KIB), labels))
    return samples
