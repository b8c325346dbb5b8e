"""The topology collector maps CPUs to NUMA nodes from sysfs node cpulists."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporter.collectors.base import CollectorContext, CollectorError
from exporter.collectors.topology import REGISTRATION, TopologyCollector, read_cpu_numa_map
from exporter.model import Readings
from exporter.sim.fixtures import node as node_fixture
from exporter.sim.fixtures.pci import write_attribute
from exporter.sim.hardware import demo_hardware

CAPTURED = Path(__file__).parents[1] / "fixtures" / "captured" / "vm-virtio-2cpu"
CAPTURED_H100 = Path(__file__).parents[1] / "fixtures" / "captured" / "h100-firecracker"


def _node_root(sysfs: Path) -> Path:
    return sysfs / "devices" / "system" / "node"


def _collect(sysfs: Path) -> Readings:
    return TopologyCollector(CollectorContext(sysfs=sysfs)).collect()


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

    def test_nodes_after_one_without_cpulist_are_still_read(self, tmp_path: Path) -> None:
        """node0 losing its cpulist does not stop node1's CPUs from being mapped."""
        root = _node_root(tmp_path)
        (root / "node0").mkdir(parents=True)
        write_attribute(root / "node1" / "cpulist", "2-3\n")

        expected = {2: 1, 3: 1}
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

    def test_huge_cpulist_is_refused_unexpanded(self, tmp_path: Path) -> None:
        """ "0-20000000" is refused by its shape, naming the file, without building the range."""
        path = _node_root(tmp_path) / "node0" / "cpulist"
        write_attribute(path, "0-20000000\n")

        with pytest.raises(CollectorError, match=f"{path}: not a cpulist range: '0-20000000'"):
            read_cpu_numa_map(tmp_path)

    def test_offline_cpus_keep_their_node(self, tmp_path: Path) -> None:
        """A node's cpulist names its online CPUs only; CPUs 6 and 7, taken offline
        (SMT off) after the kubelet gave them out, are placed by their cpuN/node<M>
        links. CPUs 16-31 are possible, never present (hotplug slots): unknown."""
        root = _node_root(tmp_path)
        write_attribute(root / "node0" / "cpulist", "0-1,4-5\n")
        write_attribute(root / "node1" / "cpulist", "2-3\n")
        cpu_root = tmp_path / "devices" / "system" / "cpu"
        write_attribute(cpu_root / "online", "0-5\n")
        write_attribute(cpu_root / "offline", "6-7,16-31\n")
        write_attribute(cpu_root / "present", "0-7\n")
        write_attribute(cpu_root / "possible", "0-31\n")
        for cpu, node in ((6, 1), (7, 0)):
            write_attribute(cpu_root / f"cpu{cpu}" / "online", "0\n")
            os.symlink(f"../../node/node{node}", cpu_root / f"cpu{cpu}" / f"node{node}")

        expected = {0: 0, 1: 0, 4: 0, 5: 0, 2: 1, 3: 1, 6: 1, 7: 0}
        assert expected == read_cpu_numa_map(tmp_path)

    def test_an_offline_cpu_gone_since_leaves_the_next_one_placed(self, tmp_path: Path) -> None:
        """An offline CPU whose cpuN directory is gone (hot-unplugged between the reads)
        has no node to tell; the offline CPUs after it are still placed."""
        write_attribute(_node_root(tmp_path) / "node0" / "cpulist", "0-1\n")
        cpu_root = tmp_path / "devices" / "system" / "cpu"
        write_attribute(cpu_root / "offline", "2-3\n")
        write_attribute(cpu_root / "present", "0-3\n")
        write_attribute(cpu_root / "cpu3" / "online", "0\n")
        os.symlink("../../node/node0", cpu_root / "cpu3" / "node0")

        assert {0: 0, 1: 0, 3: 0} == read_cpu_numa_map(tmp_path)

    def test_garbage_offline_list_names_the_path(self, tmp_path: Path) -> None:
        """A garbage cpu/offline fails the map as a garbage cpulist does."""
        write_attribute(_node_root(tmp_path) / "node0" / "cpulist", "0-1\n")
        path = tmp_path / "devices" / "system" / "cpu" / "offline"
        write_attribute(path, "six\n")

        with pytest.raises(CollectorError, match=f"{path}: not a cpulist range: 'six'"):
            read_cpu_numa_map(tmp_path)

    def test_fifo_cpulist_fails_without_blocking(self, tmp_path: Path) -> None:
        """A FIFO in place of a cpulist is refused at once (sysfs.read_text opens non-blocking)."""
        path = _node_root(tmp_path) / "node0" / "cpulist"
        path.parent.mkdir(parents=True)
        os.mkfifo(path)

        with pytest.raises(CollectorError, match=f"cannot read {path}: not a regular file"):
            read_cpu_numa_map(tmp_path)


class TestTopologyCollector:
    def test_captured_vm(self) -> None:
        """On the real VM both vCPUs sit on node 0 (node0/cpulist reads "0-1")."""
        assert Readings(cpu_numa=((0, 0), (1, 0))) == _collect(CAPTURED / "sys")

    def test_captured_h100_vm(self) -> None:
        """The real 16-vCPU H100 VM: node0/cpulist reads "0-15", a range."""
        expected = Readings(cpu_numa=tuple((cpu, 0) for cpu in range(16)))
        assert expected == _collect(CAPTURED_H100 / "sys")

    def test_pairs_sorted_by_cpu(self, tmp_path: Path) -> None:
        """The map is reported as (cpu, node) pairs sorted by CPU."""
        root = _node_root(tmp_path)
        write_attribute(root / "node1" / "cpulist", "0,2\n")
        write_attribute(root / "node0" / "cpulist", "1,3\n")

        assert Readings(cpu_numa=((0, 1), (1, 0), (2, 1), (3, 0))) == _collect(tmp_path)

    def test_non_numa_kernel_is_an_empty_map(self, tmp_path: Path) -> None:
        """A kernel without NUMA gives an empty map: success, every CPU's node unknown."""
        assert Readings() == _collect(tmp_path)

    def test_registration(self) -> None:
        """The module registers the topology collector, on by default, serving no resource."""
        expected = ("topology", True, TopologyCollector, ())
        assert expected == (
            REGISTRATION.name,
            REGISTRATION.enabled_by_default,
            REGISTRATION.factory,
            TopologyCollector.serves,
        )
