"""The pci collector reports PCI functions from a sysfs tree shaped like the kernel's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from exporter.collectors.base import CollectorContext, CollectorUnavailable
from exporter.collectors.pci import (
    PciCollector,
    parse_hex_id,
    parse_numa_node,
    read_pci_device,
)
from exporter.model import PciDevice, Readings
from exporter.sim.fixtures import pci as pci_fixture
from exporter.sim.fixtures.pci import pci_device_dir, replace_symlink, write_attribute
from exporter.sim.hardware import (
    GIB,
    SimDrmGpu,
    SimGpu,
    SimHardware,
    SimNic,
    SimNumaNode,
    SimRdmaDevice,
)

PF = SimNic("0000:4b:00.0", "ens1f0np0", 0, "0x15b3", "0x101d")
VF = SimNic("0000:4b:00.2", "ens1f0v0", 0, "0x15b3", "0x101e", physfn=PF.pci_address, vf_index=0)
HARDWARE = SimHardware(
    numa_nodes=(SimNumaNode(0, (0, 1), GIB, 0, 0), SimNumaNode(1, (2, 3), GIB, 0, 0)),
    gpus=(SimGpu(0, "GPU-1", "0000:17:00.0", "H100", 1, 80 * GIB, 700.0, 0.5),),
    drm_gpus=(SimDrmGpu(1, "amdgpu", "0000:e1:00.0", "0x1002", "0x74a1", 1, GIB, 0.5),),
    nics=(PF, VF),
    rdma_devices=(SimRdmaDevice("mlx5_4", "0000:c1:00.0", 1),),
)
GPU_17 = PciDevice("0000:17:00.0", "0x10de", "0x2330", "0x030200", 1)
PF_4B = PciDevice("0000:4b:00.0", "0x15b3", "0x101d", "0x020000", 0)
VF_4B = PciDevice("0000:4b:00.2", "0x15b3", "0x101e", "0x020000", 0)
HCA_C1 = PciDevice("0000:c1:00.0", "0x15b3", "0x1021", "0x020700", 1)
AMD_E1 = PciDevice("0000:e1:00.0", "0x1002", "0x74a1", "0x038000", 1)


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


def _collect(sysfs: Path, device_ids: frozenset[str] = frozenset()) -> Readings:
    return PciCollector(CollectorContext(sysfs=sysfs)).collect(device_ids=device_ids)


class TestParse:
    def test_hex_ids_are_normalised(self) -> None:
        """Upper-case hex and short values become lower-case, zero-padded ``0x`` IDs."""
        expected = ("0x10de", "0x030200")
        assert expected == (parse_hex_id("0x10DE\n", digits=4), parse_hex_id("0x30200", digits=6))

    @pytest.mark.parametrize("text", ["10de", "0xzz", "", "0x123456789"])
    def test_garbage_hex_raises(self, text: str) -> None:
        """Text that is not a 0x-prefixed hex ID of the right width is refused."""
        with pytest.raises(ValueError, match=r"0x|hex|digits"):
            parse_hex_id(text, digits=4)

    def test_numa_minus_one_means_none(self) -> None:
        """-1 (no affinity) is None; a node id is itself."""
        expected = (None, 1)
        assert expected == (parse_numa_node("-1\n"), parse_numa_node("1\n"))


class TestReadPciDevice:
    def test_reads_one_function(self, tmp_path: Path) -> None:
        """A complete function directory gives one PciDevice."""
        _tree(tmp_path)

        device_dir = tmp_path / "bus" / "pci" / "devices" / "0000:17:00.0"
        expected = GPU_17
        assert expected == read_pci_device(device_dir, address="0000:17:00.0")

    def test_missing_numa_node_is_none(self, tmp_path: Path) -> None:
        """A kernel without NUMA has no numa_node file: the node is None."""
        device_dir = _add_function(tmp_path, "0000:01:00.0", class_id="0x020000")
        (device_dir / "numa_node").unlink()

        expected = PciDevice("0000:01:00.0", "0x8086", "0x1234", "0x020000", None)
        assert expected == read_pci_device(device_dir, address="0000:01:00.0")

    def test_vanished_function_is_none(self, tmp_path: Path) -> None:
        """A directory without its identity files (unplugged while read) gives None."""
        assert read_pci_device(tmp_path / "gone", address="0000:01:00.0") is None

    def test_garbage_numa_names_the_path(self, tmp_path: Path) -> None:
        """Garbage in numa_node raises an error naming that file."""
        device_dir = _add_function(tmp_path, "0000:01:00.0", class_id="0x020000", numa_node="abc")

        with pytest.raises(Exception, match=f"{device_dir / 'numa_node'}: not a NUMA node: 'abc'"):
            read_pci_device(device_dir, address="0000:01:00.0")


class TestPciCollector:
    def test_reports_gpus_nics_and_hcas(self, tmp_path: Path) -> None:
        """Every display, accelerator, network and InfiniBand function is reported, sorted."""
        _tree(tmp_path)
        _add_function(tmp_path, "0000:02:00.0", class_id="0x120000")  # an accelerator

        accelerator = PciDevice("0000:02:00.0", "0x8086", "0x1234", "0x120000", 0)
        expected = Readings(pci_devices=(accelerator, GPU_17, PF_4B, VF_4B, HCA_C1, AMD_E1))
        assert expected == _collect(tmp_path)

    def test_other_classes_only_when_named(self, tmp_path: Path) -> None:
        """A bridge or NVMe drive appears only when a device ID names it (any case)."""
        _add_function(tmp_path, "0000:00:01.0", class_id="0x060400")
        _add_function(tmp_path, "0000:5e:00.0", class_id="0x010802")

        expected = Readings(
            pci_devices=(PciDevice("0000:5e:00.0", "0x8086", "0x1234", "0x010802", 0),)
        )
        assert expected == _collect(tmp_path, frozenset({"0000:5E:00.0", "GPU-1", "mlx5_0"}))

    def test_garbage_skips_only_that_device(self, tmp_path: Path) -> None:
        """Garbage in one function's numa_node drops that function and logs its path once."""
        _tree(tmp_path)
        write_attribute(pci_device_dir(tmp_path, PF.pci_address) / "numa_node", "abc\n")
        numa_path = tmp_path / "bus" / "pci" / "devices" / PF.pci_address / "numa_node"
        collector = PciCollector(CollectorContext(sysfs=tmp_path))

        with capture_logs() as logs:
            first = collector.collect(device_ids=frozenset())
            second = collector.collect(device_ids=frozenset())

        expected_logs = [
            {
                "event": "device_skipped",
                "log_level": "warning",
                "collector": "pci",
                "error": f"{numa_path}: not a NUMA node: 'abc'",
            }
        ]
        expected = Readings(pci_devices=(GPU_17, VF_4B, HCA_C1, AMD_E1))
        assert (expected, expected, expected_logs) == (first, second, logs)

    def test_garbage_class_names_the_path(self, tmp_path: Path) -> None:
        """Garbage in a class file is logged with that file's path."""
        _add_function(tmp_path, "0000:01:00.0", class_id="network")
        class_path = tmp_path / "bus" / "pci" / "devices" / "0000:01:00.0" / "class"

        with capture_logs() as logs:
            readings = _collect(tmp_path)

        expected = (
            Readings(),
            [f"{class_path}: not a 0x-prefixed hex number: 'network'"],
        )
        assert expected == (readings, [entry["error"] for entry in logs])

    def test_device_vanishing_between_polls(self, tmp_path: Path) -> None:
        """A function removed after one poll (dangling bus link) is silently absent next time."""
        _tree(tmp_path)
        collector = PciCollector(CollectorContext(sysfs=tmp_path))
        first = collector.collect(device_ids=frozenset({VF.pci_address}))
        shutil.rmtree(pci_device_dir(tmp_path, VF.pci_address))

        with capture_logs() as logs:
            second = collector.collect(device_ids=frozenset({VF.pci_address}))

        expected: tuple[Readings, Readings, list[object]] = (
            Readings(pci_devices=(GPU_17, PF_4B, VF_4B, HCA_C1, AMD_E1)),
            Readings(pci_devices=(GPU_17, PF_4B, HCA_C1, AMD_E1)),
            [],
        )
        assert expected == (first, second, logs)

    def test_named_address_missing_from_sysfs(self, tmp_path: Path) -> None:
        """A device ID naming an address sysfs lacks gives nothing, and no error."""
        _tree(tmp_path)

        expected = Readings(pci_devices=(GPU_17, PF_4B, VF_4B, HCA_C1, AMD_E1))
        assert expected == _collect(tmp_path, frozenset({"0000:99:00.0"}))

    def test_no_pci_bus_is_unavailable(self, tmp_path: Path) -> None:
        """Without bus/pci/devices the collector reports the source absent."""
        with pytest.raises(CollectorUnavailable, match="no PCI bus at"):
            _collect(tmp_path)
