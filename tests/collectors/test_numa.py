"""The numa collector reports memory and hugepages per NUMA node from sysfs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from exporter.collectors.base import CollectorContext, CollectorError, CollectorUnavailable
from exporter.collectors.numa import (
    NUMA_HUGEPAGES_FREE,
    NUMA_HUGEPAGES_TOTAL,
    NUMA_MEMORY_FREE,
    NUMA_MEMORY_TOTAL,
    NumaCollector,
    hugepages_memory_type,
    parse_node_meminfo,
)
from exporter.model import Readings, Sample
from exporter.sim.fixtures import node as node_fixture
from exporter.sim.fixtures.pci import write_attribute
from exporter.sim.hardware import GIB, MIB, SimHardware, SimNumaNode

MEMINFO = """\
Node 0 MemTotal:       263856768 kB
Node 0 MemFree:        254470012 kB
Node 0 MemUsed:          9386756 kB
Node 0 Active:           2146688 kB
Node 0 HugePages_Total:     1024
Node 0 HugePages_Free:       768
Node 0 HugePages_Surp:         0
"""
HARDWARE = SimHardware(
    numa_nodes=(
        SimNumaNode(0, (0, 1), 64 * GIB, hugepages_2mi=512, hugepages_1gi=4),
        SimNumaNode(1, (2, 3), 64 * GIB, hugepages_2mi=0, hugepages_1gi=8),
    )
)
NODE_ROOT = ("devices", "system", "node")


def _tree(sysfs: Path) -> Path:
    node_fixture.write(sysfs, HARDWARE, tick=0)
    return sysfs.joinpath(*NODE_ROOT)


def _collect(sysfs: Path) -> Readings:
    return NumaCollector(CollectorContext(sysfs=sysfs)).collect(device_ids=frozenset())


def _memory(node: str, total_kib: int, free_kib: int) -> tuple[Sample, ...]:
    return (
        Sample(NUMA_MEMORY_TOTAL, total_kib * 1024.0, (node,)),
        Sample(NUMA_MEMORY_FREE, free_kib * 1024.0, (node,)),
    )


def _hugepages(node: str, memory_type: str, total: float, free: float) -> tuple[Sample, ...]:
    return (
        Sample(NUMA_HUGEPAGES_TOTAL, total, (node, memory_type)),
        Sample(NUMA_HUGEPAGES_FREE, free, (node, memory_type)),
    )


# tick 0: 8 GiB of base use plus each node's hugepages; a quarter of the pages in use.
NODE0 = (
    *_memory("0", 67108864, 67108864 - 8388608 - 1048576 - 4194304),
    *_hugepages("0", "hugepages-2Mi", 512 * 2.0 * MIB, 384 * 2.0 * MIB),
    *_hugepages("0", "hugepages-1Gi", 4.0 * GIB, 3.0 * GIB),
)
NODE1 = (
    *_memory("1", 67108864, 67108864 - 8388608 - 8388608),
    *_hugepages("1", "hugepages-2Mi", 0.0, 0.0),
    *_hugepages("1", "hugepages-1Gi", 8.0 * GIB, 6.0 * GIB),
)


class TestParse:
    def test_node_meminfo_in_bytes(self) -> None:
        """kB fields become bytes; the unitless HugePages_* counts stay page counts."""
        expected = {
            "MemTotal": 263856768 * 1024,
            "MemFree": 254470012 * 1024,
            "MemUsed": 9386756 * 1024,
            "Active": 2146688 * 1024,
            "HugePages_Total": 1024,
            "HugePages_Free": 768,
            "HugePages_Surp": 0,
        }
        assert expected == parse_node_meminfo(MEMINFO)

    @pytest.mark.parametrize(
        "text",
        [
            "MemTotal: 12 kB\n",
            "Node 0 MemTotal: lots kB\n",
            "Node 0 MemTotal: 12 MB\n",
            "Node 0 MemTotal 12 kB\n",
        ],
    )
    def test_garbage_raises(self, text: str) -> None:
        """A line not shaped like the kernel's is refused with its number."""
        with pytest.raises(ValueError, match="line 1: not a node meminfo line"):
            parse_node_meminfo(text)

    @pytest.mark.parametrize(
        ("size_kib", "expected"),
        [
            (2048, "hugepages-2Mi"),
            (1048576, "hugepages-1Gi"),
            (64, "hugepages-64Ki"),
            (32768, "hugepages-32Mi"),
            (524288, "hugepages-512Mi"),
            (16777216, "hugepages-16Gi"),
            (3072, "hugepages-3Mi"),
            (1536, "hugepages-1536Ki"),
        ],
    )
    def test_memory_type_uses_kubelet_naming(self, size_kib: int, expected: str) -> None:
        """Page sizes are named as the kubelet names hugepage resources."""
        assert expected == hugepages_memory_type(size_kib)


class TestNumaCollector:
    def test_reads_every_node(self, tmp_path: Path) -> None:
        """Memory and each hugepage size are reported per node, in bytes."""
        _tree(tmp_path)

        assert Readings(node_samples=NODE0 + NODE1) == _collect(tmp_path)

    def test_node_without_hugepages(self, tmp_path: Path) -> None:
        """A kernel without hugetlbfs has no hugepages directory: only memory is reported."""
        root = _tree(tmp_path)
        shutil.rmtree(root / "node1" / "hugepages")

        assert Readings(node_samples=NODE0 + NODE1[:2]) == _collect(tmp_path)

    def test_garbage_meminfo_drops_that_node_and_logs_once(self, tmp_path: Path) -> None:
        """Garbage in one node's meminfo drops its memory figures only, logged once."""
        root = _tree(tmp_path)
        write_attribute(root / "node0" / "meminfo", "Node 0 MemTotal: lots kB\n")
        collector = NumaCollector(CollectorContext(sysfs=tmp_path))

        with capture_logs() as logs:
            first = collector.collect(device_ids=frozenset())
            second = collector.collect(device_ids=frozenset())

        expected = Readings(node_samples=NODE0[2:] + NODE1)
        expected_logs = [
            {
                "event": "numa_read_error",
                "log_level": "warning",
                "collector": "numa",
                "error": f"{root / 'node0' / 'meminfo'}: line 1: not a node meminfo line: "
                "'Node 0 MemTotal: lots kB'",
            }
        ]
        assert (expected, expected, expected_logs) == (first, second, logs)

    def test_garbage_hugepage_count_drops_that_figure(self, tmp_path: Path) -> None:
        """Garbage in free_hugepages drops that one figure, total stays."""
        root = _tree(tmp_path)
        path = root / "node1" / "hugepages" / "hugepages-1048576kB" / "free_hugepages"
        write_attribute(path, "?\n")

        with capture_logs() as logs:
            readings = _collect(tmp_path)

        expected = Readings(node_samples=NODE0 + NODE1[:-1])
        assert (expected, [f"{path}: not an integer: '?'"]) == (
            readings,
            [entry["error"] for entry in logs],
        )

    def test_nothing_readable_fails(self, tmp_path: Path) -> None:
        """When every file is garbage the collector fails instead of reporting nothing."""
        root = tmp_path.joinpath(*NODE_ROOT)
        write_attribute(root / "node0" / "meminfo", "garbage\n")

        with pytest.raises(CollectorError, match="node0/meminfo: line 1"):
            _collect(tmp_path)

    def test_missing_meminfo_is_silent(self, tmp_path: Path) -> None:
        """A node whose meminfo vanished between listing and reading gives its hugepages only."""
        root = _tree(tmp_path)
        (root / "node0" / "meminfo").unlink()

        with capture_logs() as logs:
            readings = _collect(tmp_path)

        assert (Readings(node_samples=NODE0[2:] + NODE1), []) == (readings, logs)

    def test_non_numa_kernel_is_unavailable(self, tmp_path: Path) -> None:
        """Without devices/system/node the collector reports the source absent."""
        with pytest.raises(CollectorUnavailable, match="no NUMA nodes under"):
            _collect(tmp_path)
