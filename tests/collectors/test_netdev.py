"""The netdev collector reads traffic counters of NICs and SR-IOV VFs the kubelet names."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from exporter.collectors.base import CollectorContext
from exporter.collectors.netdev import (
    NET_RECEIVE_BYTES,
    NET_RECEIVE_DROPS,
    NET_RECEIVE_ERRORS,
    NET_RECEIVE_PACKETS,
    NET_TRANSMIT_BYTES,
    NET_TRANSMIT_DROPS,
    NET_TRANSMIT_ERRORS,
    NET_TRANSMIT_PACKETS,
    NetdevCollector,
    find_vf_index,
    parse_vf_stats,
    read_vf_statistics,
)
from exporter.model import DeviceIdentity, DeviceReading, MetricKind, Readings, Sample
from exporter.sim.fixtures import net as net_fixture
from exporter.sim.fixtures import pci as pci_fixture
from exporter.sim.fixtures.pci import pci_device_dir, replace_symlink, write_attribute
from exporter.sim.hardware import GIB, SimGpu, SimHardware, SimNic, SimNumaNode, demo_hardware

PF = SimNic("0000:4b:00.0", "ens1f0np0", 0, "0x15b3", "0x101d")
VF0 = SimNic("0000:4b:00.2", "ens1f0v0", 0, "0x15b3", "0x101e", physfn=PF.pci_address, vf_index=0)
VF1 = SimNic("0000:4b:00.3", "ens1f0v1", 0, "0x15b3", "0x101e", physfn=PF.pci_address, vf_index=1)
HARDWARE = SimHardware(
    numa_nodes=(SimNumaNode(0, (0, 1), GIB, 0, 0),),
    gpus=(SimGpu(0, "GPU-1", "0000:17:00.0", "H100", 0, 80 * GIB, 700.0, 0.5),),
    nics=(PF, VF0, VF1),
)


def _tree(sysfs: Path, *, tick: int = 0) -> Path:
    pci_fixture.write(sysfs, HARDWARE, tick=tick)
    net_fixture.write(sysfs, HARDWARE, tick=tick)
    return sysfs


def _collect(sysfs: Path, *device_ids: str) -> Readings:
    return NetdevCollector(CollectorContext(sysfs=sysfs)).collect(device_ids=frozenset(device_ids))


def _statistics(rx_bytes: int, tx_bytes: int, rx_packets: int, tx_packets: int) -> dict[str, int]:
    return {
        "rx_bytes": rx_bytes,
        "tx_bytes": tx_bytes,
        "rx_packets": rx_packets,
        "tx_packets": tx_packets,
        "rx_errors": 1,
        "tx_errors": 2,
        "rx_dropped": 3,
        "tx_dropped": 4,
    }


def _write_statistics(interface_dir: Path, counters: dict[str, int]) -> None:
    for name, value in counters.items():
        write_attribute(interface_dir / "statistics" / name, f"{value}\n")


def _samples(interface: str, counters: dict[str, int]) -> tuple[Sample, ...]:
    specs = (
        ("rx_bytes", NET_RECEIVE_BYTES),
        ("tx_bytes", NET_TRANSMIT_BYTES),
        ("rx_packets", NET_RECEIVE_PACKETS),
        ("tx_packets", NET_TRANSMIT_PACKETS),
        ("rx_errors", NET_RECEIVE_ERRORS),
        ("tx_errors", NET_TRANSMIT_ERRORS),
        ("rx_dropped", NET_RECEIVE_DROPS),
        ("tx_dropped", NET_TRANSMIT_DROPS),
    )
    return tuple(
        Sample(spec, float(counters[name]), (interface,))
        for name, spec in specs
        if name in counters
    )


def _identity(address: str) -> DeviceIdentity:
    return DeviceIdentity(pci_address=address, vendor="0x15b3")


class TestFamilies:
    def test_names_kinds_and_labels(self) -> None:
        """Eight counters named as DESIGN.md says, each labelled by interface."""
        specs = (
            NET_RECEIVE_BYTES,
            NET_TRANSMIT_BYTES,
            NET_RECEIVE_PACKETS,
            NET_TRANSMIT_PACKETS,
            NET_RECEIVE_ERRORS,
            NET_TRANSMIT_ERRORS,
            NET_RECEIVE_DROPS,
            NET_TRANSMIT_DROPS,
        )
        expected = [
            (f"podresources_net_{direction}_{what}_total", MetricKind.COUNTER, ("interface",))
            for what in ("bytes", "packets", "errors", "drops")
            for direction in ("receive", "transmit")
        ]
        assert expected == [(s.name, s.kind, s.labels) for s in specs]


class TestParseVfStats:
    def test_parses_mlx5_lines(self) -> None:
        """``name : value`` lines become a dict; blank lines are ignored."""
        text = "tx_packets    : 5\nrx_bytes      : 4096\n\n"

        expected = {"tx_packets": 5, "rx_bytes": 4096}
        assert expected == parse_vf_stats(text)

    @pytest.mark.parametrize("text", ["tx_packets 5", "rx_bytes : lots"])
    def test_garbage_raises(self, text: str) -> None:
        """A line without a colon or with a non-number is refused."""
        with pytest.raises(ValueError, match="not a 'name : value' line"):
            parse_vf_stats(text)


class TestFindVfIndex:
    def test_finds_the_virtfn_link(self, tmp_path: Path) -> None:
        """The PF's ``virtfnN`` link pointing at the VF gives N."""
        _tree(tmp_path)
        pf_dir = tmp_path / "bus" / "pci" / "devices" / PF.pci_address

        expected = (1, None)
        assert expected == (
            find_vf_index(pf_dir, VF1.pci_address),
            find_vf_index(pf_dir, "0000:4b:00.7"),
        )


class TestReadVfStatistics:
    def test_reads_a_folder_of_files(self, tmp_path: Path) -> None:
        """The one-file-per-counter layout of some drivers is read too."""
        write_attribute(tmp_path / "stats" / "rx_bytes", "10\n")
        write_attribute(tmp_path / "stats" / "tx_dropped", "2\n")

        expected = {"rx_bytes": 10, "tx_dropped": 2}
        assert expected == read_vf_statistics(tmp_path / "stats")

    def test_absent_is_empty(self, tmp_path: Path) -> None:
        """A driver without per-VF counters gives an empty dict."""
        expected: dict[str, int] = {}
        assert expected == read_vf_statistics(tmp_path / "stats")


class TestNetdevCollector:
    def test_pf_by_pci_address(self, tmp_path: Path) -> None:
        """A PF's netdev counters come with its ifname and PCI identity."""
        _tree(tmp_path, tick=3)

        counters = net_fixture.interface_counters(PF, tick=3)
        expected = Readings(
            devices=(
                DeviceReading(
                    PF.pci_address, _identity(PF.pci_address), _samples("ens1f0np0", counters)
                ),
            )
        )
        assert expected == _collect(tmp_path, PF.pci_address)

    def test_vf_on_the_host_reads_its_own_netdev(self, tmp_path: Path) -> None:
        """A VF whose netdev is in the host namespace reports it like any NIC."""
        _tree(tmp_path)

        counters = net_fixture.interface_counters(VF1, tick=0)
        expected = Readings(
            devices=(
                DeviceReading(
                    VF1.pci_address, _identity(VF1.pci_address), _samples("ens1f0v1", counters)
                ),
            )
        )
        assert expected == _collect(tmp_path, VF1.pci_address)

    def test_vf_in_a_pod_netns_reads_the_pfs_counters(self, tmp_path: Path) -> None:
        """A VF with an empty net/ is read from the PF's sriov stats, as ``<pf>/vf<n>``."""
        _tree(tmp_path, tick=2)

        counters = net_fixture.interface_counters(VF0, tick=2)
        del counters["rx_errors"], counters["tx_errors"]  # mlx5 does not count them per VF
        expected = Readings(
            devices=(
                DeviceReading(
                    VF0.pci_address,
                    _identity(VF0.pci_address),
                    _samples("ens1f0np0/vf0", counters),
                ),
            )
        )
        assert expected == _collect(tmp_path, VF0.pci_address)

    def test_demo_vfs_in_pod_netns(self, tmp_path: Path) -> None:
        """In the demo, ens1f0v0 and ens2f0v0 report through their PFs."""
        hardware = demo_hardware()
        pci_fixture.write(tmp_path, hardware, tick=1)
        net_fixture.write(tmp_path, hardware, tick=1)

        readings = _collect(tmp_path, "0000:4b:00.2", "0000:d8:00.2", "0000:d8:00.3")
        interfaces = [
            (r.device_id, sorted({s.label_values[0] for s in r.samples})) for r in readings.devices
        ]
        expected = [
            ("0000:4b:00.2", ["ens1f0np0/vf0"]),
            ("0000:d8:00.2", ["ens2f0np0/vf0"]),
            ("0000:d8:00.3", ["ens2f0v1"]),
        ]
        assert expected == interfaces

    def test_netdev_name_as_device_id(self, tmp_path: Path) -> None:
        """A device ID equal to a netdev name is read via class/net, with its PCI identity."""
        _tree(tmp_path)

        counters = net_fixture.interface_counters(PF, tick=0)
        expected = Readings(
            devices=(
                DeviceReading(
                    "ens1f0np0", _identity(PF.pci_address), _samples("ens1f0np0", counters)
                ),
            )
        )
        assert expected == _collect(tmp_path, "ens1f0np0")

    def test_virtual_netdev_has_no_pci_identity(self, tmp_path: Path) -> None:
        """A netdev without a device link (veth, macvlan) reports counters and no identity."""
        counters = _statistics(100, 200, 3, 4)
        _write_statistics(tmp_path / "class" / "net" / "veth1", counters)

        expected = Readings(
            devices=(DeviceReading("veth1", DeviceIdentity(), _samples("veth1", counters)),)
        )
        assert expected == _collect(tmp_path, "veth1")

    def test_upper_case_pci_id_keeps_the_kubelet_spelling(self, tmp_path: Path) -> None:
        """The reading carries the kubelet's ID as given; the identity the kernel's address."""
        _tree(tmp_path)

        readings = _collect(tmp_path, "0000:4B:00.3")
        assert [("0000:4B:00.3", _identity("0000:4b:00.3"))] == [
            (r.device_id, r.identity) for r in readings.devices
        ]

    def test_ignores_ids_that_are_not_network_devices(self, tmp_path: Path) -> None:
        """GPU addresses, NVIDIA IDs, unknown names and path tricks give no readings."""
        _tree(tmp_path)

        ids = ("0000:17:00.0", "GPU-1", "nvidia0/gi0", "..", "eth9", "0000:99:00.0")
        assert Readings() == _collect(tmp_path, *ids)

    def test_missing_statistics_give_no_samples(self, tmp_path: Path) -> None:
        """A netdev whose statistics vanished is reported with its identity and no samples."""
        _tree(tmp_path)
        shutil.rmtree(pci_device_dir(tmp_path, VF1.pci_address) / "net" / "ens1f0v1" / "statistics")

        expected = Readings(devices=(DeviceReading(VF1.pci_address, _identity(VF1.pci_address)),))
        assert expected == _collect(tmp_path, VF1.pci_address)

    def test_vf_without_pf_stats_gives_no_samples(self, tmp_path: Path) -> None:
        """A moved VF whose PF keeps no per-VF counters has no samples, and no error."""
        _tree(tmp_path)
        shutil.rmtree(pci_device_dir(tmp_path, PF.pci_address) / "sriov")

        expected = Readings(devices=(DeviceReading(VF0.pci_address, _identity(VF0.pci_address)),))
        assert expected == _collect(tmp_path, VF0.pci_address)

    def test_garbage_skips_only_that_device(self, tmp_path: Path) -> None:
        """Garbage in one counter drops that device, keeps the others and logs the path once."""
        _tree(tmp_path)
        write_attribute(
            pci_device_dir(tmp_path, VF1.pci_address) / "net/ens1f0v1/statistics/rx_bytes", "x\n"
        )
        bad = tmp_path / "bus/pci/devices" / VF1.pci_address / "net/ens1f0v1/statistics/rx_bytes"
        collector = NetdevCollector(CollectorContext(sysfs=tmp_path))

        with capture_logs() as logs:
            first = collector.collect(device_ids=frozenset({PF.pci_address, VF1.pci_address}))
            second = collector.collect(device_ids=frozenset({PF.pci_address, VF1.pci_address}))

        counters = net_fixture.interface_counters(PF, tick=0)
        expected = Readings(
            devices=(
                DeviceReading(
                    PF.pci_address, _identity(PF.pci_address), _samples("ens1f0np0", counters)
                ),
            )
        )
        expected_logs = [
            {
                "event": "device_skipped",
                "log_level": "warning",
                "collector": "netdev",
                "error": f"{bad}: not an integer: 'x'",
            }
        ]
        assert (expected, expected, expected_logs) == (first, second, logs)

    def test_garbage_in_pf_stats_names_the_file(self, tmp_path: Path) -> None:
        """A malformed per-VF stats file drops the VF and is logged with its path."""
        _tree(tmp_path)
        stats = pci_device_dir(tmp_path, PF.pci_address) / "sriov" / "0" / "stats"
        write_attribute(stats, "tx_packets : many\n")

        with capture_logs() as logs:
            readings = _collect(tmp_path, VF0.pci_address)

        stats_seen = tmp_path / "bus/pci/devices" / PF.pci_address / "sriov/0/stats"
        expected_error = f"{stats_seen}: not a 'name : value' line: 'tx_packets : many'"
        assert (Readings(), [expected_error]) == (readings, [entry["error"] for entry in logs])

    def test_device_vanishing_between_polls(self, tmp_path: Path) -> None:
        """A VF destroyed after one poll is silently absent from the next."""
        _tree(tmp_path)
        collector = NetdevCollector(CollectorContext(sysfs=tmp_path))
        first = collector.collect(device_ids=frozenset({VF1.pci_address}))
        shutil.rmtree(pci_device_dir(tmp_path, VF1.pci_address))
        (tmp_path / "bus" / "pci" / "devices" / VF1.pci_address).unlink()

        second = collector.collect(device_ids=frozenset({VF1.pci_address}))
        assert (1, Readings()) == (len(first.devices), second)

    def test_counters_increase_with_tick(self, tmp_path: Path) -> None:
        """Polls of later fixture ticks see larger byte counters, direct and via the PF."""
        ids = (PF.pci_address, VF0.pci_address)
        before = _collect(_tree(tmp_path, tick=1), *ids)
        after = _collect(_tree(tmp_path, tick=2), *ids)

        def received(readings: Readings) -> list[float]:
            return [
                s.value for r in readings.devices for s in r.samples if s.spec == NET_RECEIVE_BYTES
            ]

        assert all(a > b for a, b in zip(received(after), received(before), strict=True))

    def test_reads_the_function_without_class_net(self, tmp_path: Path) -> None:
        """A function's own net/ folder is enough: no /sys/class/net entry is needed."""
        device_dir = pci_device_dir(tmp_path, "0000:01:00.0")
        write_attribute(device_dir / "vendor", "0x8086\n")
        replace_symlink(tmp_path / "bus" / "pci" / "devices" / "0000:01:00.0", device_dir)
        counters = _statistics(1, 2, 3, 4)
        _write_statistics(device_dir / "net" / "eth0", counters)

        expected = Readings(
            devices=(
                DeviceReading(
                    "0000:01:00.0",
                    DeviceIdentity(pci_address="0000:01:00.0", vendor="0x8086"),
                    _samples("eth0", counters),
                ),
            )
        )
        assert expected == _collect(tmp_path, "0000:01:00.0")
