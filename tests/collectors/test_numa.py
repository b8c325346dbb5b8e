"""The numa collector reports memory and hugepages per NUMA node from sysfs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from openfiles import held_under

from exporter.collectors.base import (
    CollectorContext,
    CollectorError,
    CollectorUnavailable,
    issue,
)
from exporter.collectors.numa import (
    NUMA_HUGEPAGES_FREE,
    NUMA_HUGEPAGES_TOTAL,
    NUMA_MEMORY_FREE,
    NUMA_MEMORY_TOTAL,
    REGISTRATION,
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
CAPTURED = Path(__file__).parents[1] / "fixtures" / "captured" / "vm-virtio-2cpu"


def _tree(sysfs: Path) -> Path:
    node_fixture.write(sysfs, HARDWARE, tick=0)
    return sysfs.joinpath(*NODE_ROOT)


def _collect(sysfs: Path) -> Readings:
    return NumaCollector(CollectorContext(sysfs=sysfs)).collect()


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
        expected = (
            {
                "MemTotal": 263856768 * 1024,
                "MemFree": 254470012 * 1024,
                "MemUsed": 9386756 * 1024,
                "Active": 2146688 * 1024,
                "HugePages_Total": 1024,
                "HugePages_Free": 768,
                "HugePages_Surp": 0,
            },
            (),
        )
        assert expected == parse_node_meminfo(MEMINFO)

    @pytest.mark.parametrize(
        "line",
        [
            "MemTotal: 12 kB",
            "Node 0 MemTotal: lots kB",
            "Node 0 MemTotal: 12 MB",
            "Node 0 MemTotal 12 kB",
            f"Node 0 MemTotal: {2**64} kB",
            f"Node 0 MemTotal: {'9' * 400} kB",
            f"Node 0 MemTotal: {'9' * 5000} kB",  # past int()'s 4,300 digits
        ],
    )
    def test_garbage_line_loses_its_field_only(self, line: str) -> None:
        """A line not shaped like the kernel's, or beyond 64 bits, is reported by number."""
        expected = ({"MemFree": 1024}, (f"line 1: not a node meminfo line: {line[:60]!r}",))
        assert expected == parse_node_meminfo(f"{line}\nNode 0 MemFree: 1 kB\n")

    def test_leading_blank_line_is_skipped(self) -> None:
        """Kernels before 2.6.28 began the file with an empty line: not a garbage line."""
        expected = ({"MemTotal": 1024, "MemFree": 2048}, ())
        assert expected == parse_node_meminfo("\nNode 0 MemTotal: 1 kB\nNode 0 MemFree: 2 kB\n")

    @pytest.mark.parametrize(
        ("size_kib", "expected"),
        [
            (2048, "hugepages-2Mi"),
            (1048576, "hugepages-1Gi"),
            (64, "hugepages-64Ki"),
            (32768, "hugepages-32Mi"),
            (524288, "hugepages-512Mi"),
            (16777216, "hugepages-16Gi"),
            (1073741824, "hugepages-1Ti"),  # as resource.Quantity prints it, not 1024Gi
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

    def test_captured_vm(self) -> None:
        """The real VM's one node: 5596960 kB in total, 3956068 kB free, no hugepages reserved."""
        expected = Readings(
            node_samples=(
                *_memory("0", 5596960, 3956068),
                *_hugepages("0", "hugepages-2Mi", 0.0, 0.0),
                *_hugepages("0", "hugepages-1Gi", 0.0, 0.0),
            )
        )
        assert expected == _collect(CAPTURED / "sys")

    def test_captured_h100_vm(self) -> None:
        """The real 16-vCPU H100 VM (kernel 6.18): 4943344 kB in total, 3529340 kB free."""
        expected = Readings(
            node_samples=(
                *_memory("0", 4943344, 3529340),
                *_hugepages("0", "hugepages-2Mi", 0.0, 0.0),
                *_hugepages("0", "hugepages-1Gi", 0.0, 0.0),
            )
        )
        assert expected == _collect(CAPTURED.parent / "h100-firecracker" / "sys")

    def test_node_without_hugepages(self, tmp_path: Path) -> None:
        """A kernel without hugetlbfs has no hugepages directory: only memory is reported."""
        root = _tree(tmp_path)
        shutil.rmtree(root / "node1" / "hugepages")

        assert Readings(node_samples=NODE0 + NODE1[:2]) == _collect(tmp_path)

    def test_garbage_meminfo_line_drops_that_figure(self, tmp_path: Path) -> None:
        """Garbage in one node's MemTotal line drops that figure only, with an issue."""
        root = _tree(tmp_path)
        meminfo = root / "node0" / "meminfo"
        write_attribute(meminfo, "Node 0 MemTotal: lots kB\nNode 0 MemFree: 1 kB\n")

        expected = Readings(
            node_samples=(Sample(NUMA_MEMORY_FREE, 1024.0, ("0",)), *NODE0[2:], *NODE1),
            issues=(
                issue(
                    "garbage",
                    f"{meminfo}: line 1: not a node meminfo line: 'Node 0 MemTotal: lots kB'",
                ),
            ),
        )
        assert expected == _collect(tmp_path)

    @pytest.mark.parametrize(
        ("text", "missing", "memory"),
        [
            ("", "MemTotal or MemFree", ()),
            (" \n\t\n", "MemTotal or MemFree", ()),
            ("Node 0 MemFree: 1 kB\n", "MemTotal", (Sample(NUMA_MEMORY_FREE, 1024.0, ("0",)),)),
        ],
        ids=["empty", "blank", "no-total"],
    )
    def test_meminfo_without_its_figures_is_garbage(
        self, tmp_path: Path, text: str, missing: str, memory: tuple[Sample, ...]
    ) -> None:
        """An empty or blank meminfo, or one without MemTotal, is no node's (the kernel
        prints both lines): its figures go with an issue, not silently."""
        root = _tree(tmp_path)
        meminfo = root / "node0" / "meminfo"
        write_attribute(meminfo, text)

        expected = Readings(
            node_samples=(*memory, *NODE0[2:], *NODE1),
            issues=(issue("garbage", f"{meminfo}: no {missing} line"),),
        )
        assert expected == _collect(tmp_path)

    def test_400_digit_hugepage_count_loses_one_figure(self, tmp_path: Path) -> None:
        """A 400-digit free_hugepages drops that one figure; total and other nodes stay."""
        root = _tree(tmp_path)
        path = root / "node1" / "hugepages" / "hugepages-1048576kB" / "free_hugepages"
        write_attribute(path, "7" * 400 + "\n")

        expected = Readings(
            node_samples=NODE0 + NODE1[:-1],
            issues=(issue("garbage", f"{path}: not a 64-bit integer: '{'7' * 40}'"),),
        )
        assert expected == _collect(tmp_path)

    def test_garbage_hugepage_count_drops_that_figure(self, tmp_path: Path) -> None:
        """Garbage or a negative count in a hugepage file drops that one figure."""
        root = _tree(tmp_path)
        free = root / "node1" / "hugepages" / "hugepages-1048576kB" / "free_hugepages"
        write_attribute(free, "?\n")
        total = root / "node0" / "hugepages" / "hugepages-2048kB" / "nr_hugepages"
        write_attribute(total, "-3\n")

        expected = Readings(
            node_samples=NODE0[:2] + NODE0[3:] + NODE1[:-1],
            issues=(
                issue("garbage", f"{total}: negative: -3"),
                issue("garbage", f"{free}: not a 64-bit integer: '?'"),
            ),
        )
        assert expected == _collect(tmp_path)

    def test_fifo_binary_and_huge_meminfo(self, tmp_path: Path) -> None:
        """A FIFO, a binary and a huge meminfo each lose their node's memory, without blocking."""
        root = _tree(tmp_path)
        node2 = root / "node2"
        node2.mkdir()
        (root / "node0" / "meminfo").unlink()
        os.mkfifo(root / "node0" / "meminfo")
        (root / "node1" / "meminfo").write_bytes(b"Node 1 MemTotal:\x00\x00 1 kB\n")
        (node2 / "meminfo").write_bytes(b"Node 2 MemFree: 1 kB\n" * 4000)

        expected = Readings(
            node_samples=NODE0[2:] + NODE1[2:],
            issues=(
                issue(
                    "unreadable", f"cannot read {root / 'node0' / 'meminfo'}: not a regular file"
                ),
                issue("garbage", f"{root / 'node1' / 'meminfo'}: binary contents"),
                issue("garbage", f"{node2 / 'meminfo'}: longer than 65536 bytes"),
            ),
        )
        assert expected == _collect(tmp_path)

    def test_symlink_loop_loses_that_file(self, tmp_path: Path) -> None:
        """A meminfo that is a link loop loses that node's memory figures, with an issue."""
        root = _tree(tmp_path)
        meminfo = root / "node1" / "meminfo"
        meminfo.unlink()
        meminfo.symlink_to("meminfo")

        expected = Readings(
            node_samples=NODE0 + NODE1[2:],
            issues=(
                issue("unreadable", f"cannot read {meminfo}: Too many levels of symbolic links"),
            ),
        )
        assert expected == _collect(tmp_path)

    def test_meminfo_vanishing_after_listing(self, tmp_path: Path) -> None:
        """A node whose meminfo is gone when read gives its hugepages and a vanished issue."""
        root = _tree(tmp_path)
        (root / "node0" / "meminfo").unlink()

        expected = Readings(
            node_samples=NODE0[2:] + NODE1,
            issues=(
                issue("vanished", f"{root / 'node0' / 'meminfo'}: gone while its node was read"),
            ),
        )
        assert expected == _collect(tmp_path)

    def test_unlistable_hugepages_loses_that_node_s_pages(self, tmp_path: Path) -> None:
        """A hugepages directory that cannot be listed (a link loop) is unreadable: that
        node's hugepages are lost with an issue, its memory and other nodes stay."""
        root = _tree(tmp_path)
        hugepages = root / "node1" / "hugepages"
        shutil.rmtree(hugepages)
        hugepages.symlink_to("hugepages")

        expected = Readings(
            node_samples=NODE0 + NODE1[:2],
            issues=(
                issue(
                    "unreadable",
                    f"cannot list {hugepages}: Too many levels of symbolic links",
                ),
            ),
        )
        assert expected == _collect(tmp_path)

    def test_hugepage_count_vanishing_after_listing(self, tmp_path: Path) -> None:
        """A page count gone when read loses that figure with a vanished issue."""
        root = _tree(tmp_path)
        path = root / "node1" / "hugepages" / "hugepages-1048576kB" / "free_hugepages"
        path.unlink()

        expected = Readings(
            node_samples=NODE0 + NODE1[:-1],
            issues=(issue("vanished", f"{path}: gone while its node was read"),),
        )
        assert expected == _collect(tmp_path)

    def test_absurd_page_size_directory_is_ignored(self, tmp_path: Path) -> None:
        """A hugepages directory named with hundreds of digits, or 0 kB, is not a page size."""
        root = _tree(tmp_path)
        (root / "node0" / "hugepages" / f"hugepages-{'9' * 200}kB").mkdir()
        (root / "node0" / "hugepages" / "hugepages-0kB").mkdir()

        assert Readings(node_samples=NODE0 + NODE1) == _collect(tmp_path)

    def test_nothing_readable_fails(self, tmp_path: Path) -> None:
        """When every file is garbage the collector fails instead of reporting nothing."""
        root = tmp_path.joinpath(*NODE_ROOT)
        write_attribute(root / "node0" / "meminfo", "garbage\n")

        with pytest.raises(CollectorError, match="node0/meminfo: line 1"):
            _collect(tmp_path)

    def test_non_numa_kernel_is_unavailable(self, tmp_path: Path) -> None:
        """Without devices/system/node the collector reports the source absent."""
        with pytest.raises(CollectorUnavailable, match="no NUMA nodes under"):
            _collect(tmp_path)


class TestBetweenPolls:
    """One collector polled again and again: what it keeps open must follow the tree."""

    def test_changed_figures_are_read_anew(self, tmp_path: Path) -> None:
        """Hugepages reserved between polls (the fixture replaces the file) are seen."""
        root = _tree(tmp_path)
        collector = NumaCollector(CollectorContext(sysfs=tmp_path))
        collector.collect()
        write_attribute(root / "node1" / "hugepages" / "hugepages-2048kB" / "nr_hugepages", "3\n")

        changed = (*NODE1[:2], *_hugepages("1", "hugepages-2Mi", 3 * 2.0 * MIB, 0.0), *NODE1[4:])
        assert Readings(node_samples=NODE0 + changed) == collector.collect()

    def test_removed_node_is_dropped_and_its_files_closed(self, tmp_path: Path) -> None:
        """A node gone between polls is gone from the next one, with its descriptors."""
        root = _tree(tmp_path)
        collector = NumaCollector(CollectorContext(sysfs=tmp_path))
        collector.collect()
        shutil.rmtree(root / "node1")

        readings = collector.collect()
        assert (Readings(node_samples=NODE0), []) == (readings, held_under(root / "node1"))

    def test_close_releases_every_kept_file(self, tmp_path: Path) -> None:
        """Closing the collector (the exporter stopping, a reload) closes what it kept."""
        root = _tree(tmp_path)
        collector = NumaCollector(CollectorContext(sysfs=tmp_path))
        collector.collect()
        collector.close()

        assert [] == held_under(root)


class TestRegistration:
    def test_registration(self) -> None:
        """The module registers the numa collector, on by default, serving no resource,
        with its error labels known from the start."""
        expected = ("numa", True, NumaCollector, (), ("unreadable", "garbage", "vanished"))
        assert expected == (
            REGISTRATION.name,
            REGISTRATION.enabled_by_default,
            REGISTRATION.factory,
            NumaCollector.serves,
            NumaCollector.known_errors,
        )
