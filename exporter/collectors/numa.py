"""Memory and hugepages per NUMA node, from sysfs (node_exporter's meminfo_numa, trimmed).

Reads, for every ``<sysfs>/devices/system/node/nodeN``:

- ``meminfo``: ``MemTotal`` and ``MemFree`` (kB, converted to bytes);
- ``hugepages/hugepages-<size>kB/{nr_hugepages,free_hugepages}`` (page counts, converted
  to bytes with the page size).

Hugepage series carry ``memory_type`` in the kubelet's naming (``hugepages-2Mi``,
``hugepages-1Gi``), so dashboards can set them beside
``podresources_node_allocated_memory_bytes{memory_type}``. A kernel without NUMA has no
node directory: the collector is then unavailable, not failed. Failures are per figure
(``Readings.issues``): a garbage ``meminfo`` line (or a missing one) or hugepage count
loses that figure, a file gone between listing its node and reading it is
``vanished``; the other figures and nodes are still reported. Only when nothing at
all could be read has the collector failed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from exporter.collectors.base import (
    Collector,
    CollectorContext,
    CollectorError,
    CollectorUnavailable,
    Registration,
    issue,
)
from exporter.model import CollectorIssue, MetricKind, MetricSpec, Readings, Sample
from exporter.sysfs import (
    GARBAGE,
    MAX_COUNTER,
    UNREADABLE,
    VANISHED,
    FileError,
    KeptFiles,
    node_dirs,
)

__all__ = [
    "NUMA_HUGEPAGES_FREE",
    "NUMA_HUGEPAGES_TOTAL",
    "NUMA_MEMORY_FREE",
    "NUMA_MEMORY_TOTAL",
    "REGISTRATION",
    "NumaCollector",
    "hugepages_memory_type",
    "parse_node_meminfo",
]

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
# Digits are bounded so a garbage line costs nothing; 64-bit values are checked after.
_MEMINFO_LINE = re.compile(r"^Node\s+\d{1,6}\s+(\S+):\s+(\d{1,40})(?:\s+(kB))?$")
# Bounded and non-zero: the largest page size of any architecture, 16 GiB, is 16777216 kB.
_HUGEPAGES_DIR = re.compile(r"^hugepages-([1-9]\d{0,9})kB$")
# resource.Quantity's canonical binary suffixes, largest first (Ki when none divides).
_BINARY_SUFFIXES: tuple[tuple[str, int], ...] = (
    ("Ei", 1 << 60),
    ("Pi", 1 << 50),
    ("Ti", 1 << 40),
    ("Gi", 1 << 30),
    ("Mi", 1 << 20),
)


def parse_node_meminfo(text: str) -> tuple[dict[str, int], tuple[str, ...]]:
    """Every field of a per-node ``meminfo`` (kB values in bytes, unitless ones as is),
    and one message per line that is not ``Node <n> <Field>: <value> [kB]`` with a
    64-bit value: such a line loses its own field only."""
    fields: dict[str, int] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        match = _MEMINFO_LINE.match(line)
        if match is None or int(match.group(2)) > MAX_COUNTER:
            problems.append(f"line {number}: not a node meminfo line: {line[:60]!r}")
            continue
        name, value, unit = match.groups()
        fields[name] = int(value) * KIB if unit else int(value)
    return fields, tuple(problems)


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
    """Memory and hugepages per NUMA node; the files read are kept open between polls."""

    name = "numa"
    known_errors = (UNREADABLE, GARBAGE, VANISHED)

    def __init__(self, context: CollectorContext) -> None:
        super().__init__(context)
        self._files = KeptFiles.under(context.sysfs)

    def close(self) -> None:
        self._files.close()

    def collect(self) -> Readings:
        """Read every node's memory and hugepages once."""
        nodes = node_dirs(self.context.sysfs)
        if not nodes:
            raise CollectorUnavailable(
                f"no NUMA nodes under {self.context.sysfs / 'devices' / 'system' / 'node'}"
            )
        issues: list[CollectorIssue] = []
        samples: list[Sample] = []
        try:
            for node, directory in nodes:
                samples.extend(_memory_samples(str(node), directory, self._files, issues))
                samples.extend(_hugepages_samples(str(node), directory, self._files, issues))
        finally:
            self._files.sweep()  # a node gone (memory hot-unplug) takes its files along
        if issues and not samples:
            # Nothing readable at all: a failure of the source, not a gap in it.
            raise CollectorError(issues[0].detail)
        return Readings(node_samples=tuple(samples), issues=tuple(issues))


def _memory_samples(
    node: str, directory: Path, files: KeptFiles, issues: list[CollectorIssue]
) -> list[Sample]:
    path = f"{directory}/meminfo"
    try:
        text = files.read_text(path)
    except FileError as error:
        issues.append(issue(error.label, str(error)))
        return []
    if text is None:
        issues.append(issue(VANISHED, f"{path}: gone while its node was read"))
        return []
    fields, problems = parse_node_meminfo(text)
    issues.extend(issue(GARBAGE, f"{path}: {problem}") for problem in problems)
    missing = [field for field in ("MemTotal", "MemFree") if field not in fields]
    if missing and not problems:  # the kernel prints both; a garbage line said why already
        issues.append(issue(GARBAGE, f"{path}: no {' or '.join(missing)} line"))
    samples = []
    for spec, field in ((NUMA_MEMORY_TOTAL, "MemTotal"), (NUMA_MEMORY_FREE, "MemFree")):
        if field in fields:
            samples.append(Sample(spec, float(fields[field]), (node,)))
    return samples


def _hugepages_samples(
    node: str, directory: Path, files: KeptFiles, issues: list[CollectorIssue]
) -> list[Sample]:
    root = f"{directory}/hugepages"
    try:
        names = os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []  # a kernel without hugetlbfs support
    except OSError as error:
        issues.append(issue(UNREADABLE, f"cannot list {root}: {error.strerror or error}"))
        return []
    sizes = sorted(int(m.group(1)) for m in map(_HUGEPAGES_DIR.match, names) if m is not None)
    samples = []
    for size_kib in sizes:
        size_dir = f"{root}/hugepages-{size_kib}kB"
        labels = (node, hugepages_memory_type(size_kib))
        for spec, file in (
            (NUMA_HUGEPAGES_TOTAL, "nr_hugepages"),
            (NUMA_HUGEPAGES_FREE, "free_hugepages"),
        ):
            path = f"{size_dir}/{file}"
            try:
                pages = files.read_int(path, unsigned=True)
            except FileError as error:
                issues.append(issue(error.label, str(error)))
                continue
            if pages is None:
                issues.append(issue(VANISHED, f"{path}: gone while its node was read"))
            else:
                samples.append(Sample(spec, float(pages * size_kib * KIB), labels))
    return samples


REGISTRATION = Registration(
    "numa",
    "Memory and hugepages per NUMA node, from /sys/devices/system/node",
    NumaCollector,
)
