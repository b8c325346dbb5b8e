"""The infiniband collector reads RDMA port counters and matches them to device IDs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from exporter.collectors.base import CollectorContext, CollectorUnavailable
from exporter.collectors.infiniband import (
    IB_RECEIVE_BYTES,
    IB_RECEIVE_PACKETS,
    IB_TRANSMIT_BYTES,
    IB_TRANSMIT_PACKETS,
    IbPortCounters,
    InfinibandCollector,
    parse_counter,
    read_port_counters,
)
from exporter.model import DeviceIdentity, DeviceReading, MetricKind, Readings, Sample
from exporter.sim.fixtures import infiniband as ib_fixture
from exporter.sim.fixtures import pci as pci_fixture
from exporter.sim.fixtures.pci import replace_symlink, write_attribute
from exporter.sim.hardware import GIB, SimHardware, SimNumaNode, SimRdmaDevice, demo_hardware

MLX5_0 = SimRdmaDevice("mlx5_0", "0000:4b:00.0", 0)
MLX5_1 = SimRdmaDevice("mlx5_1", "0000:d8:00.0", 1, ports=(1, 2))
HARDWARE = SimHardware(
    numa_nodes=(SimNumaNode(0, (0, 1), GIB, 0, 0),), rdma_devices=(MLX5_0, MLX5_1)
)


def _tree(sysfs: Path, *, tick: int = 0) -> Path:
    pci_fixture.write(sysfs, HARDWARE, tick=tick)
    ib_fixture.write(sysfs, HARDWARE, tick=tick)
    return sysfs


def _collect(sysfs: Path, *device_ids: str) -> Readings:
    collector = InfinibandCollector(CollectorContext(sysfs=sysfs))
    return collector.collect(device_ids=frozenset(device_ids))


def _samples(device: SimRdmaDevice, *, tick: int) -> tuple[Sample, ...]:
    samples: list[Sample] = []
    for port in device.ports:
        raw = ib_fixture.port_counters(device, port, tick=tick)
        labels = (device.name, str(port))
        samples += [
            Sample(IB_RECEIVE_BYTES, float(raw["port_rcv_data"] * 4), labels),
            Sample(IB_TRANSMIT_BYTES, float(raw["port_xmit_data"] * 4), labels),
            Sample(IB_RECEIVE_PACKETS, float(raw["port_rcv_packets"]), labels),
            Sample(IB_TRANSMIT_PACKETS, float(raw["port_xmit_packets"]), labels),
        ]
    return tuple(samples)


def _identity(device: SimRdmaDevice) -> DeviceIdentity:
    return DeviceIdentity(pci_address=device.pci_address, vendor="0x15b3")


def _port(sysfs: Path, name: str, port: str, files: dict[str, str]) -> Path:
    port_dir = sysfs / "class" / "infiniband" / name / "ports" / port
    for relative, text in files.items():
        write_attribute(port_dir / relative, text)
    return port_dir


class TestFamilies:
    def test_names_kinds_and_labels(self) -> None:
        """Four counters named as DESIGN.md says, labelled by ib_device and port."""
        specs = (IB_RECEIVE_BYTES, IB_TRANSMIT_BYTES, IB_RECEIVE_PACKETS, IB_TRANSMIT_PACKETS)
        expected = [
            (f"podresources_infiniband_{direction}_{what}_total", MetricKind.COUNTER)
            for what in ("bytes", "packets")
            for direction in ("receive", "transmit")
        ]
        assert (expected, {("ib_device", "port")}) == (
            [(s.name, s.kind) for s in specs],
            {s.labels for s in specs},
        )


class TestParseCounter:
    def test_values_and_no_pma(self) -> None:
        """A number is itself; ``N/A (no PMA)`` is None."""
        expected = (12, None)
        assert expected == (parse_counter("12\n"), parse_counter("N/A (no PMA)\n"))

    def test_garbage_raises(self) -> None:
        """Anything else is refused."""
        with pytest.raises(ValueError, match="invalid literal"):
            parse_counter("lots")


class TestReadPortCounters:
    def test_data_counters_are_4_octet_words(self, tmp_path: Path) -> None:
        """port_rcv_data/port_xmit_data are multiplied by 4; packets are not."""
        port_dir = _port(
            tmp_path,
            "mlx5_0",
            "1",
            {
                "counters/port_rcv_data": "1000\n",
                "counters/port_xmit_data": "250\n",
                "counters/port_rcv_packets": "7\n",
                "counters/port_xmit_packets": "9\n",
            },
        )

        assert IbPortCounters(1, 4000, 1000, 7, 9) == read_port_counters(port_dir, port=1)

    def test_prefers_64_bit_counters_ext(self, tmp_path: Path) -> None:
        """Old kernels' counters_ext/*_64 win over the saturated 32-bit counters/."""
        port_dir = _port(
            tmp_path,
            "mlx4_0",
            "1",
            {
                "counters/port_rcv_data": "4294967295\n",
                "counters/port_rcv_packets": "4294967295\n",
                "counters/port_xmit_packets": "5\n",
                "counters_ext/port_rcv_data_64": "8589934592\n",
                "counters_ext/port_rcv_packets_64": "6000000000\n",
            },
        )

        expected = IbPortCounters(1, 4 * 8589934592, None, 6000000000, 5)
        assert expected == read_port_counters(port_dir, port=1)

    def test_no_pma_counters_are_absent(self, tmp_path: Path) -> None:
        """``N/A (no PMA)`` counters are None, not zero."""
        port_dir = _port(
            tmp_path,
            "mlx5_0",
            "1",
            {"counters/port_rcv_data": "N/A (no PMA)\n", "counters/port_xmit_data": "1\n"},
        )

        assert IbPortCounters(1, None, 4, None, None) == read_port_counters(port_dir, port=1)


class TestInfinibandCollector:
    def test_matches_by_pci_address_and_reports_the_rest_by_name(self, tmp_path: Path) -> None:
        """mlx5_0 is named by its HCA's address; unnamed mlx5_1 is reported as itself."""
        _tree(tmp_path, tick=2)

        expected = Readings(
            devices=(
                DeviceReading("0000:4b:00.0", _identity(MLX5_0), _samples(MLX5_0, tick=2)),
                DeviceReading("mlx5_1", _identity(MLX5_1), _samples(MLX5_1, tick=2)),
            )
        )
        assert expected == _collect(tmp_path, "0000:4b:00.0", "GPU-1")

    def test_matches_by_ib_device_name(self, tmp_path: Path) -> None:
        """A device ID equal to the RDMA device name matches it."""
        _tree(tmp_path)

        readings = _collect(tmp_path, "mlx5_0")
        expected = ["mlx5_0", "mlx5_1"]
        assert expected == [r.device_id for r in readings.devices]

    def test_one_reading_per_matching_id(self, tmp_path: Path) -> None:
        """Named both ways (two resources), the device is reported under each kubelet ID."""
        _tree(tmp_path)

        readings = _collect(tmp_path, "0000:4B:00.0", "mlx5_0")
        expected = [
            ("0000:4B:00.0", _samples(MLX5_0, tick=0)),
            ("mlx5_0", _samples(MLX5_0, tick=0)),
            ("mlx5_1", _samples(MLX5_1, tick=0)),
        ]
        assert expected == [(r.device_id, r.samples) for r in readings.devices]

    def test_demo_hardware(self, tmp_path: Path) -> None:
        """The demo node's two HCAs report one port each, byte counters four times the words."""
        hardware = demo_hardware()
        pci_fixture.write(tmp_path, hardware, tick=1)
        ib_fixture.write(tmp_path, hardware, tick=1)

        readings = _collect(tmp_path, "0000:4b:00.0", "0000:d8:00.0")
        device = hardware.rdma_devices[1]
        words = ib_fixture.port_counters(device, 1, tick=1)["port_rcv_data"]
        assert (["0000:4b:00.0", "0000:d8:00.0"], 4.0 * words) == (
            [r.device_id for r in readings.devices],
            readings.devices[1].samples[0].value,
        )

    def test_software_device_has_no_pci_identity(self, tmp_path: Path) -> None:
        """A soft-RoCE device without a PCI parent is reported under its name, no identity."""
        _port(tmp_path, "rxe0", "1", {"counters/port_rcv_packets": "3\n"})

        expected = Readings(
            devices=(
                DeviceReading(
                    "rxe0",
                    DeviceIdentity(),
                    (Sample(IB_RECEIVE_PACKETS, 3.0, ("rxe0", "1")),),
                ),
            )
        )
        assert expected == _collect(tmp_path)

    def test_ports_in_numeric_order(self, tmp_path: Path) -> None:
        """Port 10 comes after port 2."""
        for port in ("10", "2"):
            _port(tmp_path, "hfi1_0", port, {"counters/port_xmit_packets": f"{port}\n"})

        readings = _collect(tmp_path)
        expected = [("hfi1_0", "2"), ("hfi1_0", "10")]
        assert expected == [s.label_values for s in readings.devices[0].samples]

    def test_garbage_skips_only_that_device(self, tmp_path: Path) -> None:
        """Garbage in one counter drops that device, keeps the others and logs the path once."""
        _tree(tmp_path)
        bad = tmp_path / "class/infiniband/mlx5_1/ports/2/counters/port_xmit_packets"
        write_attribute(bad, "garbage\n")
        collector = InfinibandCollector(CollectorContext(sysfs=tmp_path))

        with capture_logs() as logs:
            first = collector.collect(device_ids=frozenset())
            second = collector.collect(device_ids=frozenset())

        expected = Readings(
            devices=(DeviceReading("mlx5_0", _identity(MLX5_0), _samples(MLX5_0, tick=0)),)
        )
        expected_logs = [
            {
                "event": "device_skipped",
                "log_level": "warning",
                "collector": "infiniband",
                "error": f"{bad}: not a counter: 'garbage'",
            }
        ]
        assert (expected, expected, expected_logs) == (first, second, logs)

    def test_device_vanishing_between_polls(self, tmp_path: Path) -> None:
        """A device removed after one poll (dangling class link) is silently absent."""
        _tree(tmp_path)
        collector = InfinibandCollector(CollectorContext(sysfs=tmp_path))
        first = collector.collect(device_ids=frozenset())
        shutil.rmtree(pci_fixture.pci_device_dir(tmp_path, MLX5_1.pci_address) / "infiniband")

        with capture_logs() as logs:
            second = collector.collect(device_ids=frozenset())

        expected: tuple[list[str], list[str], list[object]] = (["mlx5_0", "mlx5_1"], ["mlx5_0"], [])
        assert expected == (
            [r.device_id for r in first.devices],
            [r.device_id for r in second.devices],
            logs,
        )

    def test_counters_increase_with_tick(self, tmp_path: Path) -> None:
        """Polls of later fixture ticks see every counter grow."""
        before = _collect(_tree(tmp_path, tick=3))
        after = _collect(_tree(tmp_path, tick=4))

        def values(readings: Readings) -> list[float]:
            return [s.value for r in readings.devices for s in r.samples]

        assert all(a > b for a, b in zip(values(after), values(before), strict=True))

    def test_no_class_dir_is_unavailable(self, tmp_path: Path) -> None:
        """Without class/infiniband the source is absent, not broken."""
        with pytest.raises(CollectorUnavailable, match="no RDMA devices"):
            _collect(tmp_path)

    def test_empty_class_dir_is_empty(self, tmp_path: Path) -> None:
        """With the class present but no devices the readings are empty."""
        (tmp_path / "class" / "infiniband").mkdir(parents=True)

        assert Readings() == _collect(tmp_path)

    def test_device_link_to_a_non_pci_parent(self, tmp_path: Path) -> None:
        """A device link that does not end in a PCI address gives no PCI identity."""
        _port(tmp_path, "siw0", "1", {"counters/port_rcv_packets": "1\n"})
        replace_symlink(tmp_path / "class" / "infiniband" / "siw0" / "device", tmp_path / "eth0")

        readings = _collect(tmp_path)
        assert [DeviceIdentity()] == [r.identity for r in readings.devices]
