"""The pci collector reports PCI functions from a sysfs tree shaped like the kernel's."""

from __future__ import annotations

import errno
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from openfiles import held_under
from oserrors import fail_reads

from exporter.collectors.base import CollectorContext, CollectorUnavailable, issue
from exporter.collectors.pci import (
    NUMA_RECHECK_POLLS,
    PCIE_AER_ERRORS,
    PCIE_LINK_MAX_SPEED,
    PCIE_LINK_MAX_WIDTH,
    PCIE_LINK_SPEED,
    PCIE_LINK_WIDTH,
    REGISTRATION,
    PciCollector,
    parse_aer_total,
    parse_link_speed,
    parse_link_width,
    parse_numa_node,
    read_pci_device,
)
from exporter.model import CollectorIssue, PciDevice, Readings, Sample
from exporter.sim.fixtures import pci as pci_fixture
from exporter.sim.fixtures.pci import (
    aer_attributes,
    pci_device_dir,
    replace_symlink,
    write_attribute,
)
from exporter.sim.hardware import (
    GIB,
    SimDrmGpu,
    SimGpu,
    SimHardware,
    SimNic,
    SimNumaNode,
    SimPcieLink,
    SimRdmaDevice,
)
from exporter.sysfs import parse_hex_id

PF = SimNic("0000:4b:00.0", "ens1f0np0", 0, "0x15b3", "0x101d")
VF = SimNic("0000:4b:00.2", "ens1f0v0", 0, "0x15b3", "0x101e", physfn=PF.pci_address, vf_index=0)
HARDWARE = SimHardware(
    numa_nodes=(SimNumaNode(0, (0, 1), GIB, 0, 0), SimNumaNode(1, (2, 3), GIB, 0, 0)),
    gpus=(SimGpu(0, "GPU-1", "0000:17:00.0", "H100", 1, 80 * GIB, 700.0, 0.5),),
    drm_gpus=(SimDrmGpu(1, "amdgpu", "0000:e1:00.0", "0x1002", "0x74a1", 1, GIB, 0.5),),
    nics=(PF, VF),
    rdma_devices=(SimRdmaDevice("mlx5_4", "0000:c1:00.0", 1),),
)


def placed(device: PciDevice) -> PciDevice:
    """``device`` where the fixture writes it, right below its own host bridge."""
    domain_and_bus = device.address.rsplit(":", 1)[0]
    return replace(device, pcie_path=(f"pci{domain_and_bus}", device.address))


GPU_17 = placed(PciDevice("0000:17:00.0", "0x10de", "0x2330", "0x030200", 1))
PF_4B = placed(PciDevice("0000:4b:00.0", "0x15b3", "0x101d", "0x020000", 0))
VF_4B = placed(PciDevice("0000:4b:00.2", "0x15b3", "0x101e", "0x020000", 0))
HCA_C1 = placed(PciDevice("0000:c1:00.0", "0x15b3", "0x1021", "0x020700", 1))
AMD_E1 = placed(PciDevice("0000:e1:00.0", "0x1002", "0x74a1", "0x038000", 1))


def _tree(sysfs: Path) -> Path:
    pci_fixture.write(sysfs, HARDWARE, tick=0)
    return sysfs


def _add_function(sysfs: Path, address: str, *, class_id: str, numa_node: str = "0\n") -> Path:
    device_dir = pci_device_dir(sysfs, address)
    write_attribute(device_dir / "vendor", "0x8086\n")
    write_attribute(device_dir / "device", "0x1234\n")
    write_attribute(device_dir / "class", f"{class_id}\n")
    write_attribute(device_dir / "numa_node", numa_node)
    replace_symlink(sysfs / "bus" / "pci" / "devices" / address, device_dir)
    return device_dir


CAPTURED = Path(__file__).parents[1] / "fixtures" / "captured" / "vm-virtio-2cpu"
CAPTURED_H100 = Path(__file__).parents[1] / "fixtures" / "captured" / "h100-firecracker"


def _collect(sysfs: Path) -> Readings:
    return PciCollector(CollectorContext(sysfs=sysfs)).collect()


def _function_dir(sysfs: Path, address: str) -> Path:
    return sysfs / "bus" / "pci" / "devices" / address


class TestParse:
    def test_hex_ids_are_normalised(self) -> None:
        """Upper-case hex and short values become lower-case, zero-padded ``0x`` IDs."""
        expected = ("0x10de", "0x030200")
        assert expected == (parse_hex_id("0x10DE\n", digits=4), parse_hex_id("0x30200", digits=6))

    @pytest.mark.parametrize(
        "text",
        ["10de", "0xzz", "", "0x", "0x-1", "0x 1", "0x10de0", "0x123456789", "0x" + "f" * 400],
    )
    def test_garbage_hex_raises(self, text: str) -> None:
        """Text that is not a 0x-prefixed hex ID of the right width is refused."""
        with pytest.raises(ValueError, match=r"0x|hex|digits"):
            parse_hex_id(text, digits=4)

    def test_underscore_in_hex_id_is_garbage(self) -> None:
        """int() takes ``0x1_de`` as 0x1de; the kernel never writes it: refused."""
        with pytest.raises(ValueError, match="hex"):
            parse_hex_id("0x1_de", digits=4)

    def test_numa_minus_one_means_none(self) -> None:
        """-1 (no affinity) is None; a node id is itself."""
        expected = (None, 1)
        assert expected == (parse_numa_node("-1\n"), parse_numa_node("1\n"))

    def test_four_digit_numa_node(self) -> None:
        """Node ids run to MAX_NUMNODES - 1 (1023 with x86's NODES_SHIFT of 10)."""
        assert 1023 == parse_numa_node("1023\n")

    @pytest.mark.parametrize("text", ["abc", "1" * 400, "1_0", "", "٣"])
    def test_garbage_numa_raises(self, text: str) -> None:
        """Anything but a small decimal node id is refused, a 400-digit one included."""
        with pytest.raises(ValueError, match="not a NUMA node"):
            parse_numa_node(text)


class TestReadPciDevice:
    def test_reads_one_function(self, tmp_path: Path) -> None:
        """A complete function directory gives one PciDevice and no issue."""
        _tree(tmp_path)
        issues: list[CollectorIssue] = []

        device = read_pci_device(
            _function_dir(tmp_path, "0000:17:00.0"), address="0000:17:00.0", issues=issues
        )

        # Its place in the tree is the collector's to add, once.
        assert (replace(GPU_17, pcie_path=()), []) == (device, issues)

    def test_missing_numa_node_is_none(self, tmp_path: Path) -> None:
        """A kernel without NUMA has no numa_node file: the node is None, silently."""
        device_dir = _add_function(tmp_path, "0000:01:00.0", class_id="0x020000")
        (device_dir / "numa_node").unlink()
        issues: list[CollectorIssue] = []

        device = read_pci_device(device_dir, address="0000:01:00.0", issues=issues)

        expected = PciDevice("0000:01:00.0", "0x8086", "0x1234", "0x020000", None)
        assert (expected, []) == (device, issues)

    def test_empty_numa_node_is_garbage(self, tmp_path: Path) -> None:
        """An empty numa_node is no node: unknown, with an issue, not node 0."""
        device_dir = _add_function(tmp_path, "0000:01:00.0", class_id="0x020000", numa_node="")
        issues: list[CollectorIssue] = []

        device = read_pci_device(device_dir, address="0000:01:00.0", issues=issues)

        expected = PciDevice("0000:01:00.0", "0x8086", "0x1234", "0x020000", None)
        garbage = issue("garbage", f"{device_dir / 'numa_node'}: not a NUMA node: ''")
        assert (expected, [garbage]) == (device, issues)

    def test_other_class_is_none_without_issue(self, tmp_path: Path) -> None:
        """A bridge is not reported, and is not an error either."""
        device_dir = _add_function(tmp_path, "0000:00:01.0", class_id="0x060400")
        issues: list[CollectorIssue] = []

        device = read_pci_device(device_dir, address="0000:00:01.0", issues=issues)

        assert (None, []) == (device, issues)


class TestPciCollector:
    def test_reports_gpus_nics_and_hcas(self, tmp_path: Path) -> None:
        """Every display, accelerator, network and InfiniBand function is reported, sorted."""
        _tree(tmp_path)
        _add_function(tmp_path, "0000:02:00.0", class_id="0x120000")  # an accelerator

        accelerator = placed(PciDevice("0000:02:00.0", "0x8086", "0x1234", "0x120000", 0))
        expected = Readings(pci_devices=(accelerator, GPU_17, PF_4B, VF_4B, HCA_C1, AMD_E1))
        assert expected == _collect(tmp_path)

    def test_other_classes_are_not_reported(self, tmp_path: Path) -> None:
        """Bridges and NVMe drives are left out: no kubelet ID decides what is read."""
        _add_function(tmp_path, "0000:00:01.0", class_id="0x060400")
        _add_function(tmp_path, "0000:5e:00.0", class_id="0x010802")

        assert Readings() == _collect(tmp_path)

    def test_captured_vm(self) -> None:
        """On the real VM only the virtio NIC (class 0x020000) is reported, without NUMA.

        The host bridge (0x060000), virtio block (0x018000) and the virtio balloon,
        console and socket functions (0xffff00) are other classes; every numa_node
        reads -1 on this one-node VM.
        """
        expected = Readings(
            pci_devices=(placed(PciDevice("0000:00:03.0", "0x1af4", "0x1041", "0x020000", None)),)
        )
        assert expected == _collect(CAPTURED / "sys")

    def test_captured_h100_vm(self) -> None:
        """On the real H100 VM the GPU, a 3D controller (0x030200) as NVIDIA's data-center
        GPUs are, is reported beside the virtio NIC; the VM has no NUMA (-1 everywhere)."""
        expected = Readings(
            pci_devices=(
                placed(PciDevice("0000:00:03.0", "0x1af4", "0x1041", "0x020000", None)),
                placed(PciDevice("0000:00:06.0", "0x10de", "0x2330", "0x030200", None)),
            )
        )
        assert expected == _collect(CAPTURED_H100 / "sys")

    def test_garbage_numa_node_loses_only_the_node(self, tmp_path: Path) -> None:
        """Garbage in one function's numa_node leaves the node unknown, with an issue."""
        _tree(tmp_path)
        numa_path = _function_dir(tmp_path, PF.pci_address) / "numa_node"
        write_attribute(numa_path, "abc\n")

        pf = placed(PciDevice("0000:4b:00.0", "0x15b3", "0x101d", "0x020000", None))
        expected = Readings(
            pci_devices=(GPU_17, pf, VF_4B, HCA_C1, AMD_E1),
            issues=(issue("garbage", f"{numa_path}: not a NUMA node: 'abc'"),),
        )
        assert expected == _collect(tmp_path)

    def test_garbage_class_drops_that_function(self, tmp_path: Path) -> None:
        """Garbage in a class file drops that function, with an issue naming the file."""
        _tree(tmp_path)
        _add_function(tmp_path, "0000:01:00.0", class_id="network")
        class_path = _function_dir(tmp_path, "0000:01:00.0") / "class"

        expected = Readings(
            pci_devices=(GPU_17, PF_4B, VF_4B, HCA_C1, AMD_E1),
            issues=(issue("garbage", f"{class_path}: not a 0x-prefixed hex number: 'network'"),),
        )
        assert expected == _collect(tmp_path)

    def test_huge_vendor_id_drops_that_function(self, tmp_path: Path) -> None:
        """A 400-digit vendor ID is garbage: that function is left out, the rest reported."""
        _tree(tmp_path)
        vendor_path = _function_dir(tmp_path, VF.pci_address) / "vendor"
        write_attribute(vendor_path, "0x" + "1" * 400 + "\n")

        expected = Readings(
            pci_devices=(GPU_17, PF_4B, HCA_C1, AMD_E1),
            issues=(issue("garbage", f"{vendor_path}: more than 4 hex digits: '0x{'1' * 38}'"),),
        )
        assert expected == _collect(tmp_path)

    def test_binary_and_huge_files_drop_their_functions(self, tmp_path: Path) -> None:
        """A binary class file and a 100 KiB device file each lose one function."""
        _tree(tmp_path)
        class_path = _function_dir(tmp_path, GPU_17.address) / "class"
        class_path.write_bytes(b"\x00\x02\x03\x00")
        device_path = _function_dir(tmp_path, HCA_C1.address) / "device"
        device_path.write_bytes(b"0x1021" * 20000)

        expected = Readings(
            pci_devices=(PF_4B, VF_4B, AMD_E1),
            issues=(
                issue("garbage", f"{class_path}: binary contents"),
                issue("garbage", f"{device_path}: longer than 65536 bytes"),
            ),
        )
        assert expected == _collect(tmp_path)

    def test_fifo_and_link_loop_are_unreadable(self, tmp_path: Path) -> None:
        """A FIFO as a class file and a bus link looping on itself: two issues, no hang."""
        _tree(tmp_path)
        class_path = _function_dir(tmp_path, PF.pci_address) / "class"
        class_path.unlink()
        os.mkfifo(class_path)
        loop = _function_dir(tmp_path, "0000:99:00.0")
        loop.symlink_to("0000:99:00.0")

        expected = Readings(
            pci_devices=(GPU_17, VF_4B, HCA_C1, AMD_E1),
            issues=(
                issue("unreadable", f"cannot read {class_path}: not a regular file"),
                issue(
                    "unreadable",
                    f"cannot read {loop / 'class'}: Too many levels of symbolic links",
                ),
            ),
        )
        assert expected == _collect(tmp_path)

    def test_function_vanishing_between_listing_and_reading(self, tmp_path: Path) -> None:
        """A function whose files are gone while the bus still lists it is left out as vanished."""
        _tree(tmp_path)
        shutil.rmtree(pci_device_dir(tmp_path, VF.pci_address))  # the bus link now dangles

        class_path = _function_dir(tmp_path, VF.pci_address) / "class"
        expected = Readings(
            pci_devices=(GPU_17, PF_4B, HCA_C1, AMD_E1),
            issues=(issue("vanished", f"{class_path}: gone while its function was read"),),
        )
        assert expected == _collect(tmp_path)

    def test_entries_not_named_like_a_function_are_ignored(self, tmp_path: Path) -> None:
        """Only ``dddd:bb:dd.f`` entries of bus/pci/devices are functions: a stray file
        beside them is neither read nor reported."""
        _tree(tmp_path)
        write_attribute(_function_dir(tmp_path, "README"), "not a function\n")

        assert Readings(pci_devices=(GPU_17, PF_4B, VF_4B, HCA_C1, AMD_E1)) == _collect(tmp_path)

    def test_a_function_in_a_vmd_domain_is_reported(self, tmp_path: Path) -> None:
        """Intel VMD's domains start at 0x10000 and the kernel prints them whole: a NIC
        at 10000:e1:00.0 is reported, where its entry was taken for a stray file."""
        nic = SimNic("10000:e1:00.0", "ens9f0np0", 0, "0x15b3", "0x101d")
        pci_fixture.write(
            tmp_path, SimHardware(numa_nodes=HARDWARE.numa_nodes, nics=(nic,)), tick=0
        )

        expected = placed(PciDevice("10000:e1:00.0", "0x15b3", "0x101d", "0x020000", 0))
        assert Readings(pci_devices=(expected,)) == _collect(tmp_path)

    def test_no_pci_bus_is_unavailable(self, tmp_path: Path) -> None:
        """Without bus/pci/devices the collector reports the source absent."""
        with pytest.raises(CollectorUnavailable, match="no PCI bus at"):
            _collect(tmp_path)


class TestBetweenPolls:
    """One collector polled again and again: what it keeps must follow the bus."""

    def test_unplugged_function_is_dropped(self, tmp_path: Path) -> None:
        """A function gone from the bus between polls is gone from the next poll."""
        collector = PciCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        _function_dir(tmp_path, VF.pci_address).unlink()

        expected = Readings(pci_devices=(GPU_17, PF_4B, HCA_C1, AMD_E1))
        assert expected == collector.collect()

    def test_plugged_function_is_found(self, tmp_path: Path) -> None:
        """A function that appears between polls is in the next poll."""
        collector = PciCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        _add_function(tmp_path, "0000:02:00.0", class_id="0x120000")

        accelerator = placed(PciDevice("0000:02:00.0", "0x8086", "0x1234", "0x120000", 0))
        expected = Readings(pci_devices=(accelerator, GPU_17, PF_4B, VF_4B, HCA_C1, AMD_E1))
        assert expected == collector.collect()

    def test_recreated_function_is_read_anew(self, tmp_path: Path) -> None:
        """A VF re-created at its address as another device (a new bus entry) is re-read."""
        collector = PciCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        new_dir = tmp_path / "devices" / "pci0000:4b" / "recreated" / VF.pci_address
        write_attribute(new_dir / "vendor", "0x8086\n")
        write_attribute(new_dir / "device", "0x1889\n")
        write_attribute(new_dir / "class", "0x020000\n")
        write_attribute(new_dir / "numa_node", "1\n")
        replace_symlink(_function_dir(tmp_path, VF.pci_address), new_dir)

        # Below a folder no kernel makes ("recreated"): no place in the tree.
        recreated = PciDevice(VF.pci_address, "0x8086", "0x1889", "0x020000", 1)
        expected = Readings(pci_devices=(GPU_17, PF_4B, recreated, HCA_C1, AMD_E1))
        assert expected == collector.collect()

    def test_recreated_function_numa_node_is_its_own(self, tmp_path: Path) -> None:
        """A VF re-created at its address after its numa_node was kept open: the NUMA
        recheck reads the new function's file, not the one kept for the old function
        (whose kernfs node sysfs drains: ENODEV, read as no node)."""
        collector = PciCollector(CollectorContext(sysfs=_tree(tmp_path)))
        for _ in range(NUMA_RECHECK_POLLS):
            collector.collect()  # the last is due: the VF's numa_node is kept open
        new_dir = tmp_path / "devices" / "pci0000:4b" / "recreated" / VF.pci_address
        write_attribute(new_dir / "vendor", "0x15b3\n")
        write_attribute(new_dir / "device", "0x101e\n")
        write_attribute(new_dir / "class", "0x020000\n")
        write_attribute(new_dir / "numa_node", "1\n")
        replace_symlink(_function_dir(tmp_path, VF.pci_address), new_dir)

        due = [collector.collect() for _ in range(NUMA_RECHECK_POLLS)][-1]

        recreated = PciDevice(VF.pci_address, "0x15b3", "0x101e", "0x020000", 1)
        assert Readings(pci_devices=(GPU_17, PF_4B, recreated, HCA_C1, AMD_E1)) == due

    def test_failed_read_is_retried_and_reported_again(self, tmp_path: Path) -> None:
        """A read that failed is not kept: each poll reports it until the file is good."""
        collector = PciCollector(CollectorContext(sysfs=_tree(tmp_path)))
        numa_path = _function_dir(tmp_path, PF.pci_address) / "numa_node"
        write_attribute(numa_path, "abc\n")
        first = collector.collect().issues
        second = collector.collect().issues
        write_attribute(numa_path, "0\n")

        garbage = (issue("garbage", f"{numa_path}: not a NUMA node: 'abc'"),)
        expected = (garbage, garbage, Readings(pci_devices=(GPU_17, PF_4B, VF_4B, HCA_C1, AMD_E1)))
        assert expected == (first, second, collector.collect())

    def test_numa_node_override_is_seen(self, tmp_path: Path) -> None:
        """Root's ``echo 1 > numa_node`` (the kernel's fix for firmware that reports it
        wrong, and the NUMA-mismatch runbook's) shows within NUMA_RECHECK_POLLS polls,
        written in place as sysfs changes it; a garbage value after a good one keeps the
        last good node and reports the file."""
        collector = PciCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        numa_path = _function_dir(tmp_path, PF.pci_address) / "numa_node"
        numa_path.write_text("1\n")  # in place: the same file, as sysfs has it
        polls = [collector.collect() for _ in range(NUMA_RECHECK_POLLS - 1)]
        before_due, overridden = polls[-2], polls[-1]  # the last is the first due
        numa_path.write_text("x\n")
        garbled = [collector.collect() for _ in range(NUMA_RECHECK_POLLS)][-1]
        assert PF_4B in before_due.pci_devices  # not yet looked at

        moved = placed(PciDevice(PF.pci_address, "0x15b3", "0x101d", "0x020000", 1))
        expected = (
            Readings(pci_devices=(GPU_17, moved, VF_4B, HCA_C1, AMD_E1)),
            Readings(
                pci_devices=(GPU_17, moved, VF_4B, HCA_C1, AMD_E1),
                issues=(issue("garbage", f"{numa_path}: not a NUMA node: 'x'"),),
            ),
        )
        assert expected == (overridden, garbled)

    def test_other_class_survives_the_numa_recheck(self, tmp_path: Path) -> None:
        """A bridge (kept as not reported) is not looked at when the NUMA node is due:
        the poll that re-reads numa_node reports the others, without an issue."""
        collector = PciCollector(CollectorContext(sysfs=_tree(tmp_path)))
        _add_function(tmp_path, "0000:00:01.0", class_id="0x060400")

        due = [collector.collect() for _ in range(NUMA_RECHECK_POLLS)][-1]

        assert Readings(pci_devices=(GPU_17, PF_4B, VF_4B, HCA_C1, AMD_E1)) == due

    def test_unreadable_numa_node_on_recheck_keeps_the_node(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A numa_node read that fails when due keeps the last node, and says so."""
        collector = PciCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        numa_path = _function_dir(tmp_path, PF.pci_address) / "numa_node"
        numa_path.write_text("1\n")
        fail_reads(monkeypatch, path_suffix=f"{PF.pci_address}/numa_node", code=errno.EIO)

        due = [collector.collect() for _ in range(NUMA_RECHECK_POLLS - 1)][-1]

        expected = Readings(
            pci_devices=(GPU_17, PF_4B, VF_4B, HCA_C1, AMD_E1),
            issues=(issue("unreadable", f"cannot read {numa_path}: Input/output error"),),
        )
        assert expected == due

    def test_numa_node_gone_on_recheck_is_none(self, tmp_path: Path) -> None:
        """A numa_node file gone when due is no affinity, as a kernel without NUMA says."""
        collector = PciCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        (_function_dir(tmp_path, PF.pci_address) / "numa_node").unlink()

        due = [collector.collect() for _ in range(NUMA_RECHECK_POLLS - 1)][-1]

        pf = placed(PciDevice("0000:4b:00.0", "0x15b3", "0x101d", "0x020000", None))
        assert Readings(pci_devices=(GPU_17, pf, VF_4B, HCA_C1, AMD_E1)) == due

    def test_unplugged_function_is_forgotten(self, tmp_path: Path) -> None:
        """A function gone for one poll and back under the same bus entry (its inode) is
        read anew: what was kept of it went with it."""
        collector = PciCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        link = _function_dir(tmp_path, VF.pci_address)
        saved = tmp_path / "saved-link"
        os.link(link, saved, follow_symlinks=False)  # the same inode, kept aside
        link.unlink()
        collector.collect()
        write_attribute(pci_device_dir(tmp_path, VF.pci_address) / "device", "0x1889\n")
        os.link(saved, link, follow_symlinks=False)

        new_vf = placed(PciDevice(VF.pci_address, "0x15b3", "0x1889", "0x020000", 0))
        assert Readings(pci_devices=(GPU_17, PF_4B, new_vf, HCA_C1, AMD_E1)) == collector.collect()

    def test_unplugged_function_files_are_closed(self, tmp_path: Path) -> None:
        """The numa_node kept open for an unplugged function is closed within
        NUMA_RECHECK_POLLS polls, and close() closes the rest."""
        collector = PciCollector(CollectorContext(sysfs=_tree(tmp_path)))
        for _ in range(NUMA_RECHECK_POLLS):
            collector.collect()
        vf_dir = str(pci_device_dir(tmp_path, VF.pci_address))
        kept_before = held_under(vf_dir)
        _function_dir(tmp_path, VF.pci_address).unlink()
        for _ in range(NUMA_RECHECK_POLLS):
            collector.collect()
        kept_after = held_under(vf_dir)
        collector.close()

        closed = held_under(tmp_path)
        assert ([f"{vf_dir}/numa_node"], [], []) == (kept_before, kept_after, closed)


class TestRegistration:
    def test_registration(self) -> None:
        """The module registers the pci collector, on by default, serving no resource,
        with its error labels known from the start."""
        expected = ("pci", True, PciCollector, (), ("unreadable", "garbage", "vanished"))
        assert expected == (
            REGISTRATION.name,
            REGISTRATION.enabled_by_default,
            REGISTRATION.factory,
            PciCollector.serves,
            PciCollector.known_errors,
        )


class TestParseLink:
    @pytest.mark.parametrize(
        ("text", "lanes"),
        [("16\n", 16), ("8", 8), ("1", 1), ("32", 32), ("0\n", 0), ("63\n", None), ("3", None)],
    )
    def test_widths(self, text: str, lanes: int | None) -> None:
        """A negotiated width the spec defines, 0 for no link; None for any other number
        (63: the all-ones read of a function that no longer answers)."""
        assert lanes == parse_link_width(text)

    @pytest.mark.parametrize("text", ["", "x16", "-1", "1e3", "١٦", "1234"])
    def test_garbage_widths_raise(self, text: str) -> None:
        with pytest.raises(ValueError, match="not a link width"):
            parse_link_width(text)

    @pytest.mark.parametrize(
        ("text", "transfers"),
        [
            ("32.0 GT/s PCIe\n", 32e9),  # pci_speed_string, kernels 5.x on
            ("2.5 GT/s PCIe", 2.5e9),
            ("64.0 GT/s PCIe", 64e9),
            ("8 GT/s\n", 8e9),  # the older switch in current_link_speed_show
            ("5 GT/s", 5e9),
            ("Unknown\n", None),  # no link: PCI_SPEED_UNKNOWN
            ("Unknown speed", None),  # the older kernels' words for it
        ],
    )
    def test_speeds(self, text: str, transfers: float | None) -> None:
        assert transfers == parse_link_speed(text)

    @pytest.mark.parametrize("text", ["", "32 GB/s", "33 MHz PCI", "GT/s PCIe", "1e9 GT/s"])
    def test_garbage_speeds_raise(self, text: str) -> None:
        with pytest.raises(ValueError, match="not a PCIe link speed"):
            parse_link_speed(text)


# Without AER (TestAer has it): the link's own figures.
LINKED = replace(
    HARDWARE,
    pcie_links=(
        (GPU_17.address, SimPcieLink(8, 16, aer_errors=None)),
        (
            PF.pci_address,
            SimPcieLink(
                16, 16, speed="16.0 GT/s PCIe", max_speed="16.0 GT/s PCIe", aer_errors=None
            ),
        ),
        # The fixture writes no VF link (the spec reserves its registers); this one is
        # written anyway, as a kernel would show them: 0 lanes, Unknown.
        (VF.pci_address, SimPcieLink(0, 0, speed="Unknown", max_speed="Unknown", aer_errors=None)),
    ),
)


def _link(width: float, speed: float, most_width: float, most_speed: float) -> tuple[Sample, ...]:
    return (
        Sample(PCIE_LINK_WIDTH, width),
        Sample(PCIE_LINK_SPEED, speed),
        Sample(PCIE_LINK_MAX_WIDTH, most_width),
        Sample(PCIE_LINK_MAX_SPEED, most_speed),
    )


def _samples_of(readings: Readings) -> dict[str, tuple[Sample, ...]]:
    return {d.address: d.samples for d in readings.pci_devices if d.samples}


def _write_card(card: Path, *, width: int, most: int, speed: str, most_speed: str) -> None:
    """An H100's function at ``card`` (a real directory), with its link files."""
    for name, value in (
        ("vendor", "0x10de"),
        ("device", "0x2330"),
        ("class", "0x030200"),
        ("numa_node", "1"),
        ("current_link_width", str(width)),
        ("max_link_width", str(most)),
        ("current_link_speed", speed),
        ("max_link_speed", most_speed),
    ):
        write_attribute(card / name, f"{value}\n")


def _gpu_below_port(sysfs: Path, *, port: tuple[str, str], card: tuple[int, int, str, str]) -> None:
    """GPU_17's function below a root port (``0000:16:01.0``) whose ``max_link_width``
    and ``max_link_speed`` say ``port``; the card's link: now and most, lanes and speed."""
    port_dir = sysfs / "devices" / "pci0000:16" / "0000:16:01.0"
    write_attribute(port_dir / "class", "0x060400\n")
    write_attribute(port_dir / "max_link_width", f"{port[0]}\n")
    write_attribute(port_dir / "max_link_speed", f"{port[1]}\n")
    card_dir = port_dir / GPU_17.address
    width, most, speed, most_speed = card
    _write_card(card_dir, width=width, most=most, speed=speed, most_speed=most_speed)
    replace_symlink(_function_dir(sysfs, GPU_17.address), card_dir)


class TestPcieLink:
    def test_functions_with_a_link_report_it_vfs_and_others_do_not(self, tmp_path: Path) -> None:
        """The GPU at 8 of 16 lanes and the PF at 16 report now and at most; the VF (its
        link files read 0 and Unknown) and the functions without link files report none."""
        pci_fixture.write(tmp_path, LINKED, tick=0)

        readings = _collect(tmp_path)

        assert _samples_of(readings) == {
            GPU_17.address: _link(8, 32e9, 16, 32e9),
            PF.pci_address: _link(16, 16e9, 16, 16e9),
        }
        assert readings.issues == ()

    def test_the_upstream_port_limits_what_the_link_can_run_at(self, tmp_path: Path) -> None:
        """A x16 Gen5 card below a x8 Gen4 switch port can run at 8 lanes of 16 GT/s: that
        is its most, and 8 lanes is not degraded."""
        _gpu_below_port(
            tmp_path, port=("8", "16.0 GT/s PCIe"), card=(8, 16, "16.0 GT/s PCIe", "32.0 GT/s PCIe")
        )

        assert _samples_of(_collect(tmp_path)) == {GPU_17.address: _link(8, 16e9, 8, 16e9)}

    def test_a_changed_link_is_seen_at_the_next_poll(self, tmp_path: Path) -> None:
        """Retrained narrower (and an idle GPU slowed down) between two polls."""
        pci_fixture.write(tmp_path, LINKED, tick=0)
        collector = PciCollector(CollectorContext(sysfs=tmp_path))
        collector.collect()
        gpu_dir = pci_device_dir(tmp_path, GPU_17.address)
        write_attribute(gpu_dir / "current_link_width", "4\n")
        write_attribute(gpu_dir / "current_link_speed", "2.5 GT/s PCIe\n")

        assert _samples_of(collector.collect())[GPU_17.address] == _link(4, 2.5e9, 16, 32e9)

    def test_a_suspended_function_is_not_read_until_it_wakes(self, tmp_path: Path) -> None:
        """Runtime-suspended when first listed: no figure at all (reading the link would
        wake it); awake: all four; suspended again: what it can run at, kept."""
        pci_fixture.write(tmp_path, LINKED, tick=0)
        status = pci_device_dir(tmp_path, GPU_17.address) / "power" / "runtime_status"
        collector = PciCollector(CollectorContext(sysfs=tmp_path))

        write_attribute(status, "suspended\n")
        asleep = _samples_of(collector.collect())
        write_attribute(status, "active\n")
        awake = _samples_of(collector.collect())
        write_attribute(status, "suspending\n")
        asleep_again = _samples_of(collector.collect())

        assert GPU_17.address not in asleep
        assert awake[GPU_17.address] == _link(8, 32e9, 16, 32e9)
        assert asleep_again[GPU_17.address] == _link(8, 32e9, 16, 32e9)[2:]

    def test_a_kernel_without_runtime_pm_files_is_read(self, tmp_path: Path) -> None:
        """No power/runtime_status (CONFIG_PM off): the link is read all the same."""
        pci_fixture.write(tmp_path, LINKED, tick=0)
        (pci_device_dir(tmp_path, GPU_17.address) / "power" / "runtime_status").unlink()

        assert _samples_of(_collect(tmp_path))[GPU_17.address] == _link(8, 32e9, 16, 32e9)

    def test_garbage_loses_only_that_figure(self, tmp_path: Path) -> None:
        """A width that is not a number: the other three figures, and one garbage issue."""
        pci_fixture.write(tmp_path, LINKED, tick=0)
        width = pci_device_dir(tmp_path, GPU_17.address) / "current_link_width"
        write_attribute(width, "x8\n")

        readings = _collect(tmp_path)

        assert _samples_of(readings)[GPU_17.address] == _link(8, 32e9, 16, 32e9)[1:]
        assert readings.issues == (
            issue(
                "garbage",
                f"{_function_dir(tmp_path, GPU_17.address)}/current_link_width:"
                " not a link width: 'x8'",
            ),
        )

    def test_an_unreadable_link_is_reported_and_read_again(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """EIO on the width (a device that stopped answering config reads): an issue each
        poll, the other figures kept; the function itself stays reported."""
        pci_fixture.write(tmp_path, LINKED, tick=0)
        fail_reads(monkeypatch, path_suffix=f"{GPU_17.address}/current_link_width", code=errno.EIO)

        readings = _collect(tmp_path)

        assert _samples_of(readings)[GPU_17.address] == _link(8, 32e9, 16, 32e9)[1:]
        assert [i.error for i in readings.issues] == ["unreadable"]
        assert GPU_17.address in {d.address for d in readings.pci_devices}

    def test_what_it_can_run_at_is_read_once(self, tmp_path: Path) -> None:
        """The maximum is the hardware's: a later change to the file is not read."""
        pci_fixture.write(tmp_path, LINKED, tick=0)
        collector = PciCollector(CollectorContext(sysfs=tmp_path))
        collector.collect()
        write_attribute(pci_device_dir(tmp_path, GPU_17.address) / "max_link_width", "4\n")

        assert _samples_of(collector.collect())[GPU_17.address] == _link(8, 32e9, 16, 32e9)

    def test_a_port_that_says_no_link_leaves_the_devices_own(self, tmp_path: Path) -> None:
        """An upstream port whose capability reads 0 lanes and Unknown speed limits
        nothing: the card's own 16 lanes at 32 GT/s stand."""
        _gpu_below_port(
            tmp_path, port=("0", "Unknown"), card=(16, 16, "32.0 GT/s PCIe", "32.0 GT/s PCIe")
        )

        assert _samples_of(_collect(tmp_path)) == {GPU_17.address: _link(16, 32e9, 16, 32e9)}

    def test_a_recreated_function_s_link_is_its_own(self, tmp_path: Path) -> None:
        """A function re-created at its address (a new bus entry) while the old one's link
        files were kept open: the new function's files are read."""
        pci_fixture.write(tmp_path, LINKED, tick=0)
        collector = PciCollector(CollectorContext(sysfs=tmp_path))
        collector.collect()
        new_dir = tmp_path / "devices" / "pci0000:17" / "recreated" / GPU_17.address
        _write_card(new_dir, width=16, most=16, speed="2.5 GT/s PCIe", most_speed="32.0 GT/s PCIe")
        replace_symlink(_function_dir(tmp_path, GPU_17.address), new_dir)

        assert _samples_of(collector.collect())[GPU_17.address] == _link(16, 2.5e9, 16, 32e9)

    def test_a_function_with_a_bad_numa_node_still_reports_its_link(self, tmp_path: Path) -> None:
        """Garbage in numa_node loses the node, poll after poll (read anew each time),
        not the link."""
        pci_fixture.write(tmp_path, LINKED, tick=0)
        write_attribute(pci_device_dir(tmp_path, GPU_17.address) / "numa_node", "zero\n")
        collector = PciCollector(CollectorContext(sysfs=tmp_path))

        polls = [collector.collect() for _ in range(2)]

        for readings in polls:
            assert _samples_of(readings)[GPU_17.address] == _link(8, 32e9, 16, 32e9)
            assert [i.error for i in readings.issues] == ["garbage"]


class TestPcieLinkEdges:
    """Rules a mutation review of the PCIe link reading found no test holding."""

    def test_an_unknown_maximum_width_is_no_link_not_garbage(self) -> None:
        """255: PCIE_LNK_WIDTH_UNKNOWN, what max_link_width says where the function's
        Link Capabilities cannot be read (pcie_get_width_cap)."""
        assert parse_link_width("255\n") is None

    @pytest.mark.parametrize("text", ["8.0 GT/s PCIe x16", "8 GT/s!", "16.0 GT/s PCIe 3"])
    def test_a_speed_with_more_after_it_is_garbage(self, text: str) -> None:
        with pytest.raises(ValueError, match="not a PCIe link speed"):
            parse_link_speed(text)

    def test_a_link_that_is_down_reports_zero_lanes(self, tmp_path: Path) -> None:
        """Width 0 and speed Unknown (the link did not train): 0 lanes now, no speed now,
        and what it can run at."""
        pci_fixture.write(tmp_path, LINKED, tick=0)
        gpu_dir = pci_device_dir(tmp_path, GPU_17.address)
        write_attribute(gpu_dir / "current_link_width", "0\n")
        write_attribute(gpu_dir / "current_link_speed", "Unknown\n")

        readings = _collect(tmp_path)

        assert _samples_of(readings)[GPU_17.address] == (
            Sample(PCIE_LINK_WIDTH, 0.0),
            *_link(8, 32e9, 16, 32e9)[2:],
        )
        assert readings.issues == ()

    def test_a_card_narrower_than_its_port_runs_at_its_own_most(self, tmp_path: Path) -> None:
        """A x8 Gen4 card below a x16 Gen5 port: the card's 8 lanes at 16 GT/s."""
        _gpu_below_port(
            tmp_path, port=("16", "32.0 GT/s PCIe"), card=(4, 8, "8.0 GT/s PCIe", "16.0 GT/s PCIe")
        )

        assert _samples_of(_collect(tmp_path)) == {GPU_17.address: _link(4, 8e9, 8, 16e9)}

    def test_an_unreadable_runtime_status_is_reported_and_the_link_read(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        pci_fixture.write(tmp_path, LINKED, tick=0)
        fail_reads(
            monkeypatch, path_suffix=f"{GPU_17.address}/power/runtime_status", code=errno.EIO
        )

        readings = _collect(tmp_path)

        assert _samples_of(readings)[GPU_17.address] == _link(8, 32e9, 16, 32e9)
        assert [i.error for i in readings.issues] == ["unreadable"]

    def test_what_it_can_run_at_is_read_once_even_where_nothing_reads(self, tmp_path: Path) -> None:
        """Every link file garbage: the maximum's two issues in the first poll only; the
        current figures' in both."""
        pci_fixture.write(tmp_path, LINKED, tick=0)
        gpu_dir = pci_device_dir(tmp_path, GPU_17.address)
        for name in ("current_link", "max_link"):
            write_attribute(gpu_dir / f"{name}_width", "garbage\n")
            write_attribute(gpu_dir / f"{name}_speed", "garbage\n")
        collector = PciCollector(CollectorContext(sysfs=tmp_path))

        first = [i.detail.rsplit("/", 1)[-1].split(":")[0] for i in collector.collect().issues]
        second = [i.detail.rsplit("/", 1)[-1].split(":")[0] for i in collector.collect().issues]

        assert sorted(first) == [
            "current_link_speed",
            "current_link_width",
            "max_link_speed",
            "max_link_width",
        ]
        assert sorted(second) == ["current_link_speed", "current_link_width"]

    def test_a_link_as_last_poll_keeps_last_polls_device(self, tmp_path: Path) -> None:
        """Nothing changed: the same PciDevice object, so the join's cache holds."""
        pci_fixture.write(tmp_path, LINKED, tick=0)
        collector = PciCollector(CollectorContext(sysfs=tmp_path))

        first = {d.address: d for d in collector.collect().pci_devices}
        second = {d.address: d for d in collector.collect().pci_devices}

        assert second[GPU_17.address] is first[GPU_17.address]
        assert second[GPU_17.address].samples == _link(8, 32e9, 16, 32e9)

    def test_another_class_with_link_files_is_not_read(self, tmp_path: Path) -> None:
        """A USB controller (0x0c03) with a PCIe link: not reported, nothing read."""
        _tree(tmp_path)
        usb = _add_function(tmp_path, "0000:02:00.0", class_id="0x0c0330")
        for name, value in (
            ("current_link_width", "1"),
            ("max_link_width", "1"),
            ("current_link_speed", "5.0 GT/s PCIe"),
            ("max_link_speed", "5.0 GT/s PCIe"),
        ):
            write_attribute(usb / name, f"{value}\n")
        collector = PciCollector(CollectorContext(sysfs=tmp_path))

        readings = [collector.collect(), collector.collect()]

        assert all("0000:02:00.0" not in {d.address for d in r.pci_devices} for r in readings)
        assert [r.issues for r in readings] == [(), ()]

    def test_the_link_is_read_through_kept_files_and_its_maximum_is_not_kept(
        self, tmp_path: Path
    ) -> None:
        """Read every poll: the current figures and the runtime status stay open between
        polls; read once: what it can run at is closed after."""
        pci_fixture.write(tmp_path, LINKED, tick=0)
        collector = PciCollector(CollectorContext(sysfs=tmp_path))
        gpu_dir = str(pci_device_dir(tmp_path, GPU_17.address))

        collector.collect()
        held = set(held_under(gpu_dir))
        collector.close()

        assert {
            f"{gpu_dir}/current_link_width",
            f"{gpu_dir}/current_link_speed",
            f"{gpu_dir}/power/runtime_status",
        } <= held
        assert not {f"{gpu_dir}/max_link_width", f"{gpu_dir}/max_link_speed"} & held

    def test_only_unknown_is_no_speed(self) -> None:
        with pytest.raises(ValueError, match="not a PCIe link speed"):
            parse_link_speed("Unk")

    def test_a_function_without_link_files_is_not_watched(self, tmp_path: Path) -> None:
        """A reported function with no link files (conventional PCI, a VM's bus): its
        runtime status is not read, nor kept open, poll after poll."""
        _tree(tmp_path)
        gpu = _add_function(tmp_path, "0000:02:00.0", class_id="0x030000")
        write_attribute(gpu / "power" / "runtime_status", "active\n")
        collector = PciCollector(CollectorContext(sysfs=tmp_path))

        readings = [collector.collect(), collector.collect()]
        held = held_under(str(gpu))
        collector.close()

        assert [r.issues for r in readings] == [(), ()]
        assert held == []


def _function(
    directory: Path, *, vendor: str, class_id: str, link: tuple[str, str, str, str] | None
) -> None:
    """A PCI function's real directory: identity, and its link (now and most, lanes and
    speed)."""
    write_attribute(directory / "vendor", f"{vendor}\n")
    write_attribute(directory / "device", "0x1234\n")
    write_attribute(directory / "class", f"{class_id}\n")
    write_attribute(directory / "numa_node", "0\n")
    for name, value in zip(
        ("current_link_width", "max_link_width", "current_link_speed", "max_link_speed"),
        link or (),
        strict=link is not None,
    ):
        write_attribute(directory / name, f"{value}\n")


INTERNAL = ("16", "16", "32.0 GT/s PCIe", "32.0 GT/s PCIe")  # a link inside the card
X8_GEN4_OF_GEN5 = ("8", "16", "16.0 GT/s PCIe", "32.0 GT/s PCIe")


def _chain(sysfs: Path, *functions: tuple[str, str, str, tuple[str, str, str, str] | None]) -> str:
    """Functions (address, vendor, class, link), each below the one before, the first
    below the host bridge; the last on the bus. Returns its address."""
    directory = sysfs / "devices" / "pci0000:00"
    for address, vendor, class_id, link in functions:
        directory = directory / address
        _function(directory, vendor=vendor, class_id=class_id, link=link)
    replace_symlink(_function_dir(sysfs, directory.name), directory)
    return directory.name


BRIDGE = "0x060400"


class TestCardsWithTheirOwnSwitch:
    """AMD's and Intel's discrete GPUs carry a PCIe switch of the card's vendor: the GPU
    function's link ends inside the card; the card's link to its slot is the one of the
    switch's upstream port, below the root port."""

    @pytest.mark.parametrize(
        ("root_vendor", "card_vendor"),
        [("0x1022", "0x1002"), ("0x8086", "0x8086")],
        ids=["radeon-on-an-amd-cpu", "intel-gpu-on-an-intel-cpu"],
    )
    def test_the_slot_link_is_the_cards_upstream_port(
        self, tmp_path: Path, root_vendor: str, card_vendor: str
    ) -> None:
        """8 lanes at 16 GT/s in a x16 Gen5 slot, for a Gen4 x16 card: what its upstream
        port says, not the x16 Gen5 link inside the card; the walk stops below the root
        port whatever the root port's vendor."""
        gpu = _chain(
            tmp_path,
            ("0000:00:01.1", root_vendor, BRIDGE, X8_GEN4_OF_GEN5),
            ("0000:01:00.0", card_vendor, BRIDGE, ("8", "16", "16.0 GT/s PCIe", "16.0 GT/s PCIe")),
            ("0000:02:00.0", card_vendor, BRIDGE, INTERNAL),
            ("0000:03:00.0", card_vendor, "0x030000", INTERNAL),
        )

        assert _samples_of(_collect(tmp_path)) == {gpu: _link(8, 16e9, 16, 16e9)}

    def test_a_gpu_on_a_root_port_of_its_own_vendor_reads_its_own_link(
        self, tmp_path: Path
    ) -> None:
        """An NVIDIA GPU on a Grace CPU's root port (both 0x10de): its own link."""
        gpu = _chain(
            tmp_path,
            ("0000:00:01.0", "0x10de", BRIDGE, INTERNAL),
            ("0000:01:00.0", "0x10de", "0x030200", ("8", "16", "32.0 GT/s PCIe", "32.0 GT/s PCIe")),
        )

        assert _samples_of(_collect(tmp_path)) == {gpu: _link(8, 32e9, 16, 32e9)}

    def test_a_switch_of_another_vendor_is_the_board_s(self, tmp_path: Path) -> None:
        """An NVIDIA GPU behind a Broadcom switch on the board, as in GPU servers: the
        GPU's own link to the switch."""
        gpu = _chain(
            tmp_path,
            ("0000:00:01.0", "0x8086", BRIDGE, INTERNAL),
            ("0000:01:00.0", "0x1000", BRIDGE, INTERNAL),
            ("0000:02:00.0", "0x1000", BRIDGE, INTERNAL),
            ("0000:03:00.0", "0x10de", "0x030200", ("4", "16", "32.0 GT/s PCIe", "32.0 GT/s PCIe")),
        )

        assert _samples_of(_collect(tmp_path)) == {gpu: _link(4, 32e9, 16, 32e9)}

    def test_a_bridge_of_its_vendor_without_a_link_is_not_the_cards(self, tmp_path: Path) -> None:
        """An Intel GPU below an Intel bridge that has no PCIe link (a conventional PCI
        bridge, as a VM's emulated DMI-to-PCI bridge): the GPU's own link."""
        gpu = _chain(
            tmp_path,
            ("0000:00:1e.0", "0x8086", BRIDGE, INTERNAL),
            ("0000:01:00.0", "0x8086", BRIDGE, None),
            ("0000:02:00.0", "0x8086", "0x030000", ("8", "16", "16.0 GT/s PCIe", "16.0 GT/s PCIe")),
        )

        assert _samples_of(_collect(tmp_path)) == {gpu: _link(8, 16e9, 16, 16e9)}


# Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats' sample, as kernels before
# the short error names wrote it.
ABI_SAMPLE_CORRECTABLE = """Receiver Error 2
Bad TLP 0
Bad DLLP 0
RELAY_NUM Rollover 0
Replay Timer Timeout 0
Advisory Non-Fatal 0
Corrected Internal Error 0
Header Log Overflow 0
TOTAL_ERR_COR 2
"""


class TestParseAerTotal:
    def test_the_abi_documents_sample(self) -> None:
        assert parse_aer_total(ABI_SAMPLE_CORRECTABLE) == 2

    def test_the_total_not_the_sum_of_lines(self) -> None:
        """One ERR_COR message may carry several errors: the total is the kernel's own
        count of messages, and unnamed bits print as ``dev_cor_errs_bit[n]``."""
        text = "RxErr 3\nBadTLP 4\ndev_cor_errs_bit[9] 1\nTOTAL_ERR_COR 5\n"
        assert parse_aer_total(text) == 5

    @pytest.mark.parametrize("kind", ["correctable", "nonfatal", "fatal"])
    def test_every_file_the_fixture_writes(self, kind: str) -> None:
        counts = {"correctable": (7, 0, 0), "nonfatal": (0, 7, 0), "fatal": (0, 0, 7)}[kind]
        assert parse_aer_total(aer_attributes(*counts)[f"aer_dev_{kind}"]) == 7

    def test_the_largest_count(self) -> None:
        assert parse_aer_total(f"TOTAL_ERR_FATAL {2**64 - 1}\n") == 2**64 - 1

    @pytest.mark.parametrize(
        "text",
        [
            "RxErr 2\n",  # no total
            "TOTAL_ERR_COR 2\nRxErr 2\n",  # not at the end
            "TOTAL_ERR_COR -1\n",
            "TOTAL_ERR_COR 0x10\n",
            f"TOTAL_ERR_COR {2**64}\n",
            "TOTAL_ERR_OTHER 1\n",
            "",
        ],
    )
    def test_garbage_raises(self, text: str) -> None:
        with pytest.raises(ValueError, match="no TOTAL_ERR_"):
            parse_aer_total(text)

    def test_non_ascii_digits_are_garbage(self) -> None:
        """The kernel prints %llu: ASCII digits only, though str.isdigit and int take
        others."""
        with pytest.raises(ValueError, match="no TOTAL_ERR_"):
            parse_aer_total("TOTAL_ERR_COR \u0663\n")

    def test_garbage_is_quoted_up_to_40_characters(self) -> None:
        text = "TOTAL_ERR_NONFATAL " + "9" * 30 + "\n"
        expected = f"no TOTAL_ERR_* count at its end: {text[:40]!r}"
        with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
            parse_aer_total(text)


# The GPU's link saw 27 corrected errors and one uncorrectable one the system recovered
# from; the PF none; the VF's files (a VF may have AER) are not its link's.
AER = replace(
    HARDWARE,
    pcie_links=(
        (GPU_17.address, SimPcieLink(8, 16, aer_errors=(27, 1, 0))),
        (PF.pci_address, SimPcieLink(16, 16, aer_errors=(0, 0, 0))),
        (VF.pci_address, SimPcieLink(0, 0, aer_errors=(3, 0, 0))),
    ),
)


def _aer(correctable: float, nonfatal: float, fatal: float, by: str) -> tuple[Sample, ...]:
    return (
        Sample(PCIE_AER_ERRORS, correctable, ("correctable", by)),
        Sample(PCIE_AER_ERRORS, nonfatal, ("nonfatal", by)),
        Sample(PCIE_AER_ERRORS, fatal, ("fatal", by)),
    )


def _aer_of(readings: Readings) -> dict[str, tuple[Sample, ...]]:
    return {
        d.address: tuple(s for s in d.samples if s.spec is PCIE_AER_ERRORS)
        for d in readings.pci_devices
        if d.samples
    }


def _write_aer(directory: Path, correctable: int, nonfatal: int, fatal: int) -> None:
    for name, text in aer_attributes(correctable, nonfatal, fatal).items():
        write_attribute(directory / name, text)


class TestAer:
    def test_each_function_with_a_link_reports_its_totals(self, tmp_path: Path) -> None:
        """After the link's figures, the three totals of each function with a link; none
        for the VF, whose link is its PF's."""
        pci_fixture.write(tmp_path, AER, tick=0)

        readings = _collect(tmp_path)

        assert _samples_of(readings) == {
            GPU_17.address: (*_link(8, 32e9, 16, 32e9), *_aer(27, 1, 0, "device")),
            PF.pci_address: (*_link(16, 32e9, 16, 32e9), *_aer(0, 0, 0, "device")),
        }
        assert readings.issues == ()

    def test_the_upstream_port_s_totals_beside_the_device_s(self, tmp_path: Path) -> None:
        """The root port at the other end of the GPU's link saw the errors the GPU sent
        (the card's own counts read 0): both ends are reported, each under its name."""
        _gpu_below_port(
            tmp_path,
            port=("16", "32.0 GT/s PCIe"),
            card=(16, 16, "32.0 GT/s PCIe", "32.0 GT/s PCIe"),
        )
        port_dir = tmp_path / "devices" / "pci0000:16" / "0000:16:01.0"
        _write_aer(port_dir, 41, 2, 0)
        _write_aer(port_dir / GPU_17.address, 0, 0, 0)

        readings = _collect(tmp_path)

        assert _aer_of(readings) == {
            GPU_17.address: (*_aer(0, 0, 0, "device"), *_aer(41, 2, 0, "upstream_port"))
        }

    def test_a_port_without_aer_leaves_the_device_s(self, tmp_path: Path) -> None:
        _gpu_below_port(
            tmp_path,
            port=("16", "32.0 GT/s PCIe"),
            card=(16, 16, "32.0 GT/s PCIe", "32.0 GT/s PCIe"),
        )
        _write_aer(tmp_path / "devices" / "pci0000:16" / "0000:16:01.0" / GPU_17.address, 5, 0, 0)

        assert _aer_of(_collect(tmp_path)) == {GPU_17.address: _aer(5, 0, 0, "device")}

    def test_a_card_with_its_own_switch_reports_its_slot_s_port(self, tmp_path: Path) -> None:
        """An AMD card: the GPU function's own totals, the card's switch's upstream port
        (the card's end of the slot's link) and the root port above it (the slot's end);
        not the switch's downstream port inside the card."""
        root = tmp_path / "devices" / "pci0000:00" / "0000:00:01.1"
        gpu = _chain(
            tmp_path,
            ("0000:00:01.1", "0x1022", BRIDGE, INTERNAL),
            ("0000:01:00.0", "0x1002", BRIDGE, INTERNAL),
            ("0000:02:00.0", "0x1002", BRIDGE, INTERNAL),
            ("0000:03:00.0", "0x1002", "0x030000", INTERNAL),
        )
        card_upstream = root / "0000:01:00.0"
        _write_aer(root, 9, 0, 0)
        _write_aer(card_upstream, 8, 0, 0)
        _write_aer(card_upstream / "0000:02:00.0", 7, 0, 0)
        _write_aer(card_upstream / "0000:02:00.0" / gpu, 1, 0, 1)

        assert _aer_of(_collect(tmp_path)) == {
            gpu: (
                *_aer(1, 0, 1, "device"),
                *_aer(8, 0, 0, "card_switch"),
                *_aer(9, 0, 0, "upstream_port"),
            )
        }

    def test_totals_are_read_every_poll(self, tmp_path: Path) -> None:
        pci_fixture.write(tmp_path, AER, tick=0)
        collector = PciCollector(CollectorContext(sysfs=tmp_path))
        collector.collect()
        _write_aer(pci_device_dir(tmp_path, GPU_17.address), 30, 1, 1)

        assert _aer_of(collector.collect())[GPU_17.address] == _aer(30, 1, 1, "device")

    def test_a_suspended_function_s_totals_are_read(self, tmp_path: Path) -> None:
        """The counts are the kernel's, in memory: reading them wakes nothing."""
        pci_fixture.write(tmp_path, AER, tick=0)
        status = pci_device_dir(tmp_path, GPU_17.address) / "power" / "runtime_status"
        write_attribute(status, "suspended\n")

        assert _samples_of(_collect(tmp_path))[GPU_17.address] == _aer(27, 1, 0, "device")

    def test_suspended_after_a_poll_keeps_its_maxima_then_its_totals(self, tmp_path: Path) -> None:
        """Suspended after it was read awake: what the link can run at, then the totals,
        in the order an awake poll gives them."""
        pci_fixture.write(tmp_path, AER, tick=0)
        collector = PciCollector(CollectorContext(sysfs=tmp_path))
        collector.collect()
        status = pci_device_dir(tmp_path, GPU_17.address) / "power" / "runtime_status"
        write_attribute(status, "suspended\n")

        samples = _samples_of(collector.collect())[GPU_17.address]

        assert samples == (*_link(8, 32e9, 16, 32e9)[2:], *_aer(27, 1, 0, "device"))
        collector.close()

    def test_garbage_loses_only_that_total(self, tmp_path: Path) -> None:
        pci_fixture.write(tmp_path, AER, tick=0)
        fatal = pci_device_dir(tmp_path, GPU_17.address) / "aer_dev_fatal"
        write_attribute(fatal, "Undefined 0\nTOTAL_ERR_FATAL many\n")

        readings = _collect(tmp_path)

        assert _aer_of(readings)[GPU_17.address] == _aer(27, 1, 0, "device")[:2]
        assert readings.issues == (
            issue(
                "garbage",
                f"{_function_dir(tmp_path, GPU_17.address)}/aer_dev_fatal:"
                " no TOTAL_ERR_* count at its end: 'TOTAL_ERR_FATAL many'",
            ),
        )

    def test_the_files_are_kept_open(self, tmp_path: Path) -> None:
        """Read every poll: through kept descriptors, like the link's current figures."""
        pci_fixture.write(tmp_path, AER, tick=0)
        collector = PciCollector(CollectorContext(sysfs=tmp_path))
        collector.collect()

        held = held_under(pci_device_dir(tmp_path, GPU_17.address))

        assert {"aer_dev_correctable", "aer_dev_nonfatal", "aer_dev_fatal"} <= {
            Path(path).name for path in held
        }
        collector.close()

    def test_a_recreated_function_s_totals_are_its_own(self, tmp_path: Path) -> None:
        """A GPU re-created at its address (a new bus entry, its counts from 0 again):
        its totals are read from the new function's files, not through the descriptors
        kept for the old one."""
        pci_fixture.write(tmp_path, AER, tick=0)
        collector = PciCollector(CollectorContext(sysfs=tmp_path))
        collector.collect()  # the old function's aer_dev_* files are kept open
        new_dir = tmp_path / "devices" / "pci0000:17" / "recreated" / GPU_17.address
        shutil.copytree(pci_device_dir(tmp_path, GPU_17.address), new_dir, symlinks=True)
        _write_aer(new_dir, 0, 0, 0)
        replace_symlink(_function_dir(tmp_path, GPU_17.address), new_dir)

        readings = collector.collect()

        assert _aer_of(readings)[GPU_17.address] == _aer(0, 0, 0, "device")
        collector.close()
