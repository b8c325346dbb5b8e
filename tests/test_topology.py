"""The CPU-to-NUMA-node map is read from sysfs node cpulists."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.collectors.base import CollectorError
from exporter.sim.fixtures import node as node_fixture
from exporter.sim.fixtures.pci import write_attribute
from exporter.sim.hardware import demo_hardware
from exporter.topology import node_dirs, parse_cpulist, read_cpu_numa_map


def _node_root(sysfs: Path) -> Path:
    return sysfs / "devices" / "system" / "node"


class TestParseCpulist:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("0-3,8,10-11", (0, 1, 2, 3, 8, 10, 11)),
            ("5", (5,)),
            ("0-1,64-65\n", (0, 1, 64, 65)),
            ("10-11,0-1", (0, 1, 10, 11)),
            ("2-2", (2,)),
            ("", ()),
            ("\n", ()),
        ],
    )
    def test_ranges_and_single_cpus(self, text: str, expected: tuple[int, ...]) -> None:
        """Ranges and single CPUs are expanded and sorted; an empty list is no CPUs."""
        assert expected == parse_cpulist(text)

    @pytest.mark.parametrize("text", ["a", "3-1", "0-", "0,,1", "0-3:2/4", "-1", "0 1"])
    def test_garbage_raises(self, text: str) -> None:
        """Anything the kernel would not print is refused."""
        with pytest.raises(ValueError, match="cpulist range"):
            parse_cpulist(text)


class TestReadCpuNumaMap:
    def test_demo_node(self, tmp_path: Path) -> None:
        """The demo node's CPUs 0-31 sit on node 0 and 32-63 on node 1."""
        node_fixture.write(tmp_path, demo_hardware(), tick=0)

        expected = {cpu: 0 if cpu < 32 else 1 for cpu in range(64)}
        assert expected == read_cpu_numa_map(tmp_path)

    def test_multi_range_and_cpuless_nodes(self, tmp_path: Path) -> None:
        """Interleaved ranges map to their nodes; a memory-only node adds nothing."""
        root = _node_root(tmp_path)
        write_attribute(root / "node0" / "cpulist", "0-1,4\n")
        write_attribute(root / "node1" / "cpulist", "2-3,5-7\n")
        write_attribute(root / "node2" / "cpulist", "\n")  # CXL memory, no CPUs
        write_attribute(root / "online", "0-2\n")
        write_attribute(root / "has_cpu", "0-1\n")

        expected = {0: 0, 1: 0, 4: 0, 2: 1, 3: 1, 5: 1, 6: 1, 7: 1}
        assert expected == read_cpu_numa_map(tmp_path)

    def test_node_without_cpulist_is_skipped(self, tmp_path: Path) -> None:
        """A node directory that lost its cpulist (going offline) contributes nothing."""
        root = _node_root(tmp_path)
        write_attribute(root / "node0" / "cpulist", "0-1\n")
        (root / "node1").mkdir()

        expected = {0: 0, 1: 0}
        assert expected == read_cpu_numa_map(tmp_path)

    def test_non_numa_kernel_gives_empty_map(self, tmp_path: Path) -> None:
        """Without devices/system/node every CPU's node is unknown."""
        expected: dict[int, int] = {}
        assert expected == read_cpu_numa_map(tmp_path)

    def test_garbage_names_the_path(self, tmp_path: Path) -> None:
        """A garbage cpulist raises CollectorError naming the file."""
        path = _node_root(tmp_path) / "node1" / "cpulist"
        write_attribute(path, "zero-three\n")

        with pytest.raises(CollectorError, match=f"{path}: not a cpulist range: 'zero-three'"):
            read_cpu_numa_map(tmp_path)


class TestNodeDirs:
    def test_numbered_in_numeric_order(self, tmp_path: Path) -> None:
        """nodeN directories come by number (node10 after node2); other entries are ignored."""
        root = _node_root(tmp_path)
        for name in ("node10", "node2", "node0", "power", "nodefoo"):
            (root / name).mkdir(parents=True)
        write_attribute(root / "online", "0,2,10\n")

        expected = ((0, root / "node0"), (2, root / "node2"), (10, root / "node10"))
        assert expected == node_dirs(tmp_path)
