"""The infiniband collector reports every RDMA device's port traffic under its hardware keys."""

from __future__ import annotations

import errno
import inspect
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from openfiles import held_under
from oserrors import fail_reads

from exporter.collectors import infiniband
from exporter.collectors.base import CollectorContext, CollectorUnavailable
from exporter.collectors.infiniband import (
    IB_PORT_ERRORS,
    IB_PORT_LINK_DOWNED,
    IB_PORT_PHYSICAL_STATE,
    IB_PORT_RATE,
    IB_PORT_STATE,
    IB_RECEIVE_BYTES,
    IB_RECEIVE_PACKETS,
    IB_TRANSMIT_BYTES,
    IB_TRANSMIT_PACKETS,
    REGISTRATION,
    IbPortCounters,
    IbPortHealth,
    InfinibandCollector,
    parse_counter,
    parse_rate,
    parse_state,
    read_port_counters,
    read_port_health,
)
from exporter.model import (
    CollectorIssue,
    DeviceIdentity,
    DeviceReading,
    HardwareKey,
    KeyKind,
    MetricKind,
    Readings,
    Sample,
)
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


def _collect(sysfs: Path) -> Readings:
    return InfinibandCollector(CollectorContext(sysfs=sysfs)).collect()


def _samples(device: SimRdmaDevice, *, tick: int) -> tuple[Sample, ...]:
    """Port by port: its traffic, then its health."""
    samples: list[Sample] = []
    for port in device.ports:
        raw = ib_fixture.port_counters(device, port, tick=tick)
        labels = (device.name, str(port))
        samples += [
            Sample(IB_RECEIVE_BYTES, float(raw["port_rcv_data"] * 4), labels),
            Sample(IB_TRANSMIT_BYTES, float(raw["port_xmit_data"] * 4), labels),
            Sample(IB_RECEIVE_PACKETS, float(raw["port_rcv_packets"]), labels),
            Sample(IB_TRANSMIT_PACKETS, float(raw["port_xmit_packets"]), labels),
            *_health_samples(device, port),
        ]
    return tuple(samples)


# The fixture's counters/ error files and the type each is served as, in the reader's order
_ERROR_TYPES = (
    ("symbol_error", "symbol"),
    ("link_error_recovery", "link_error_recovery"),
    ("local_link_integrity_errors", "local_link_integrity"),
    ("excessive_buffer_overrun_errors", "excessive_buffer_overrun"),
    ("port_rcv_errors", "receive"),
    ("port_rcv_remote_physical_errors", "receive_remote_physical"),
    ("port_xmit_discards", "transmit_discards"),
)


def _health_samples(device: SimRdmaDevice, port: int) -> tuple[Sample, ...]:
    """What the fixture's state, phys_state, rate and error files of a port read as:
    400 Gb/sec is 50e9 bytes a second."""
    counts = dict(device.errors)
    labels = (device.name, str(port))
    down = port in device.down_ports
    return (
        Sample(IB_PORT_STATE, 1.0 if down else 4.0, labels),
        Sample(IB_PORT_PHYSICAL_STATE, 2.0 if down else 5.0, labels),
        Sample(IB_PORT_RATE, 50e9, labels),
        Sample(IB_PORT_LINK_DOWNED, float(counts.get("link_downed", 0)), labels),
        *(
            Sample(IB_PORT_ERRORS, float(counts.get(name, 0)), (*labels, kind))
            for name, kind in _ERROR_TYPES
        ),
    )


def _reading(device: SimRdmaDevice, *, tick: int) -> DeviceReading:
    return DeviceReading(
        name=device.name,
        keys=(HardwareKey(KeyKind.RDMA, device.name), HardwareKey(KeyKind.PCI, device.pci_address)),
        identity=DeviceIdentity(pci_address=device.pci_address, vendor="mellanox"),
        samples=_samples(device, tick=tick),
    )


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


class TestRegistration:
    def test_registration_and_contract(self) -> None:
        """Registered as "infiniband", serving no resource prefix, collecting without arguments."""
        expected = ("infiniband", InfinibandCollector, (), ["self"])
        assert expected == (
            REGISTRATION.name,
            REGISTRATION.factory,
            InfinibandCollector.serves,
            list(inspect.signature(InfinibandCollector.collect).parameters),
        )


class TestParseCounter:
    def test_values_and_no_pma(self) -> None:
        """A number is itself, up to 64 bits; ``N/A (no PMA)`` is None."""
        expected = (12, 2**64 - 1, None)
        assert expected == (
            parse_counter("12\n"),
            parse_counter("18446744073709551615\n"),
            parse_counter("N/A (no PMA)\n"),
        )

    @pytest.mark.parametrize(
        "text", ["lots", "-1", "18446744073709551616", "1" * 5000, "1e3", "\u0663"]
    )
    def test_garbage_raises(self, text: str) -> None:
        """Anything else is refused, a value beyond 64 bits and a huge one included."""
        with pytest.raises(ValueError, match="not a 64-bit counter"):
            parse_counter(text)


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
        issues: list[CollectorIssue] = []

        counters = read_port_counters(port_dir, port=1, issues=issues)
        assert (IbPortCounters(1, 4000, 1000, 7, 9), []) == (counters, issues)

    def test_idle_port_counts_zero(self, tmp_path: Path) -> None:
        """A port that never carried traffic reads 0 in every counter: zero, not absent."""
        files = ("port_rcv_data", "port_xmit_data", "port_rcv_packets", "port_xmit_packets")
        port_dir = _port(tmp_path, "mlx5_0", "1", {f"counters/{f}": "0\n" for f in files})
        issues: list[CollectorIssue] = []

        counters = read_port_counters(port_dir, port=1, issues=issues)

        assert (IbPortCounters(1, 0, 0, 0, 0), []) == (counters, issues)

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
        assert expected == read_port_counters(port_dir, port=1, issues=[])

    def test_a_saturated_32_bit_counter_gives_no_sample(self, tmp_path: Path) -> None:
        """A counters/ figure at 2^32 - 1 is a 32-bit PortCounters value that stopped
        there: no sample, rather than a flat counter that reads as an idle port. One
        below it, or the same value in counters_ext/, is a figure."""
        port_dir = _port(
            tmp_path,
            "mthca0",
            "1",
            {
                "counters/port_rcv_data": "4294967295\n",
                "counters/port_xmit_data": "4294967294\n",
                "counters/port_rcv_packets": "4294967295\n",
                "counters/port_xmit_packets": "4294967295\n",
                "counters_ext/port_xmit_packets_64": "4294967295\n",
            },
        )
        issues: list[CollectorIssue] = []

        counters = read_port_counters(port_dir, port=1, issues=issues)
        expected = IbPortCounters(1, None, 4 * 4294967294, None, 4294967295)
        assert (expected, []) == (counters, issues)

    def test_a_64_bit_counters_figure_past_the_32_bit_maximum_is_kept(self, tmp_path: Path) -> None:
        """Only the 32-bit maximum itself is dropped: a counters/ figure beyond it (mlx5's
        64-bit counters/, no counters_ext/) is a sample."""
        port_dir = _port(
            tmp_path,
            "mlx5_0",
            "1",
            {
                "counters/port_rcv_data": "4294967296\n",
                "counters/port_xmit_data": "0\n",
                "counters/port_rcv_packets": "8589934592\n",
                "counters/port_xmit_packets": "0\n",
            },
        )

        expected = IbPortCounters(1, 4 * 4294967296, 0, 8589934592, 0)
        assert expected == read_port_counters(port_dir, port=1, issues=[])

    def test_a_saturated_counter_behind_a_refusing_counters_ext_gives_no_sample(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """counters_ext/ there but answering EINVAL (no PMA for it) leaves counters/ to
        answer: at the 32-bit maximum that is still no sample."""
        port_dir = _port(
            tmp_path,
            "mthca0",
            "1",
            {
                "counters/port_rcv_packets": "4294967295\n",
                "counters_ext/port_rcv_packets_64": "1\n",
            },
        )
        fail_reads(monkeypatch, path_suffix="port_rcv_packets_64", code=errno.EINVAL)
        issues: list[CollectorIssue] = []

        counters = read_port_counters(port_dir, port=1, issues=issues)
        assert (IbPortCounters(1, None, None, None, None), []) == (counters, issues)

    def test_no_pma_counters_are_absent(self, tmp_path: Path) -> None:
        """``N/A (no PMA)`` counters are None, not zero, and no issue."""
        port_dir = _port(
            tmp_path,
            "mlx5_0",
            "1",
            {"counters/port_rcv_data": "N/A (no PMA)\n", "counters/port_xmit_data": "1\n"},
        )
        issues: list[CollectorIssue] = []

        counters = read_port_counters(port_dir, port=1, issues=issues)
        assert (IbPortCounters(1, None, 4, None, None), []) == (counters, issues)

    @pytest.mark.parametrize(
        ("code", "errors"),
        [(errno.EINVAL, []), (errno.EOPNOTSUPP, []), (errno.EIO, ["unreadable"])],
        ids=["EINVAL", "EOPNOTSUPP", "EIO"],
    )
    def test_no_pma_read_error_is_absent(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, errors: list[str]
    ) -> None:
        """Newer kernels fail the read where older ones printed ``N/A (no PMA)``
        (EINVAL from the MAD query): absent too, not an error every poll. Other
        errors lose the figure and are issues."""
        port_dir = _port(
            tmp_path,
            "mlx5_0",
            "1",
            {"counters/port_rcv_data": "7\n", "counters/port_xmit_data": "1\n"},
        )
        fail_reads(monkeypatch, path_suffix="port_rcv_data", code=code)
        issues: list[CollectorIssue] = []

        counters = read_port_counters(port_dir, port=1, issues=issues)
        assert (IbPortCounters(1, None, 4, None, None), errors) == (
            counters,
            [i.error for i in issues],
        )

    def test_garbage_counters_ext_is_not_replaced_by_32_bit(self, tmp_path: Path) -> None:
        """A garbage 64-bit counter loses the figure rather than fall back to a saturated one."""
        port_dir = _port(
            tmp_path,
            "mlx4_0",
            "1",
            {
                "counters/port_rcv_packets": "4294967295\n",
                "counters_ext/port_rcv_packets_64": "junk\n",
            },
        )
        issues: list[CollectorIssue] = []

        counters = read_port_counters(port_dir, port=1, issues=issues)
        bad = port_dir / "counters_ext" / "port_rcv_packets_64"
        expected = (
            IbPortCounters(1, None, None, None, None),
            [CollectorIssue("garbage", f"{bad}: not a 64-bit counter: 'junk'")],
        )
        assert expected == (counters, issues)

    def test_efa_traffic_is_in_hw_counters(self, tmp_path: Path) -> None:
        """AWS EFA has no MAD support, so ib core makes no ``counters/`` for its port;
        its traffic is the driver's ``hw_counters`` (efa_verbs.c EFA_DEFINE_PORT_STATS),
        counted in octets: not multiplied by 4. Its other hw_counters are not traffic."""
        port_dir = _port(
            tmp_path,
            "efa_0",
            "1",
            {
                f"hw_counters/{name}": f"{value}\n"
                for name, value in {
                    "tx_bytes": 123456789012,
                    "tx_pkts": 1000000,
                    "rx_bytes": 98765432109,
                    "rx_pkts": 900000,
                    "rx_drops": 3,
                    "send_bytes": 5,
                    "recv_bytes": 6,
                    "rdma_read_bytes": 7,
                    "lifespan": 12,
                }.items()
            },
        )
        issues: list[CollectorIssue] = []

        counters = read_port_counters(port_dir, port=1, issues=issues)
        expected = IbPortCounters(1, 98765432109, 123456789012, 900000, 1000000)
        assert (expected, []) == (counters, issues)

    def test_hw_counters_never_add_to_pma_counters(self, tmp_path: Path) -> None:
        """Where ``counters/`` exists, it alone is read, even with traffic-like names in
        ``hw_counters``: no figure is taken from two sources."""
        port_dir = _port(
            tmp_path,
            "bnxt_re0",
            "1",
            {
                "counters/port_rcv_data": "10\n",
                "hw_counters/rx_bytes": "999\n",
                "hw_counters/tx_bytes": "999\n",
            },
        )

        expected = IbPortCounters(1, 40, None, None, None)
        assert expected == read_port_counters(port_dir, port=1, issues=[])

    def test_garbage_hw_counter_is_an_issue(self, tmp_path: Path) -> None:
        """A bad EFA counter loses its figure, reported with its path, like a PMA one."""
        port_dir = _port(
            tmp_path, "efa_0", "1", {"hw_counters/rx_bytes": "junk\n", "hw_counters/rx_pkts": "2\n"}
        )
        issues: list[CollectorIssue] = []

        counters = read_port_counters(port_dir, port=1, issues=issues)
        bad = port_dir / "hw_counters" / "rx_bytes"
        expected = (
            IbPortCounters(1, None, None, 2, None),
            [CollectorIssue("garbage", f"{bad}: not a 64-bit counter: 'junk'")],
        )
        assert expected == (counters, issues)


class TestInfinibandCollector:
    def test_every_device_under_rdma_and_pci_keys(self, tmp_path: Path) -> None:
        """Each HCA is reported under its RDMA name and PCI address, vendor by name."""
        _tree(tmp_path, tick=2)

        expected = Readings(devices=(_reading(MLX5_0, tick=2), _reading(MLX5_1, tick=2)))
        assert expected == _collect(tmp_path)

    def test_demo_hardware(self, tmp_path: Path) -> None:
        """The demo node's two HCAs report one port each, byte counters four times the words."""
        hardware = demo_hardware()
        pci_fixture.write(tmp_path, hardware, tick=1)
        ib_fixture.write(tmp_path, hardware, tick=1)

        expected = Readings(devices=tuple(_reading(d, tick=1) for d in hardware.rdma_devices))
        assert expected == _collect(tmp_path)

    def test_an_hca_in_a_vmd_domain_has_its_pci_key(self, tmp_path: Path) -> None:
        """Intel VMD's domains start at 0x10000 and the kernel prints them whole
        (10000:e1:00.0): such an HCA had no PCI key, as if its parent were no function."""
        vmd = SimRdmaDevice("mlx5_0", "10000:e1:00.0", 0)
        hardware = replace(HARDWARE, rdma_devices=(vmd,))
        pci_fixture.write(tmp_path, hardware, tick=1)
        ib_fixture.write(tmp_path, hardware, tick=1)

        assert Readings(devices=(_reading(vmd, tick=1),)) == _collect(tmp_path)

    def test_software_device_has_no_pci_key(self, tmp_path: Path) -> None:
        """A soft-RoCE device without a PCI parent is reported under its RDMA name only."""
        _port(tmp_path, "rxe0", "1", {"counters/port_rcv_packets": "3\n"})

        expected = Readings(
            devices=(
                DeviceReading(
                    name="rxe0",
                    keys=(HardwareKey(KeyKind.RDMA, "rxe0"),),
                    samples=(Sample(IB_RECEIVE_PACKETS, 3.0, ("rxe0", "1")),),
                ),
            )
        )
        assert expected == _collect(tmp_path)

    def test_device_link_to_a_non_pci_parent(self, tmp_path: Path) -> None:
        """A device link that does not end in a PCI address gives no PCI key or identity."""
        _port(tmp_path, "siw0", "1", {"counters/port_rcv_packets": "1\n"})
        (tmp_path / "eth0").mkdir()
        replace_symlink(tmp_path / "class" / "infiniband" / "siw0" / "device", tmp_path / "eth0")

        readings = _collect(tmp_path)
        expected = [((HardwareKey(KeyKind.RDMA, "siw0"),), DeviceIdentity())]
        assert expected == [(r.keys, r.identity) for r in readings.devices]

    def test_ports_in_numeric_order(self, tmp_path: Path) -> None:
        """Port 10 comes after port 2."""
        for port in ("10", "2"):
            _port(tmp_path, "hfi1_0", port, {"counters/port_xmit_packets": f"{port}\n"})

        readings = _collect(tmp_path)
        expected = [("hfi1_0", "2"), ("hfi1_0", "10")]
        assert expected == [s.label_values for s in readings.devices[0].samples]

    def test_counters_increase_with_tick(self, tmp_path: Path) -> None:
        """Polls of later fixture ticks see every counter grow."""
        before = _collect(_tree(tmp_path, tick=3))
        after = _collect(_tree(tmp_path, tick=4))

        traffic = {IB_RECEIVE_BYTES, IB_TRANSMIT_BYTES, IB_RECEIVE_PACKETS, IB_TRANSMIT_PACKETS}

        def values(readings: Readings) -> list[float]:
            return [s.value for r in readings.devices for s in r.samples if s.spec in traffic]

        assert values(before)  # all() of nothing would pass
        assert all(a > b for a, b in zip(values(after), values(before), strict=True))

    def test_no_class_dir_is_unavailable(self, tmp_path: Path) -> None:
        """Without class/infiniband the source is absent, not broken."""
        with pytest.raises(CollectorUnavailable, match="no RDMA devices"):
            _collect(tmp_path)

    def test_empty_class_dir_is_empty(self, tmp_path: Path) -> None:
        """With the class present but no devices the readings are empty."""
        (tmp_path / "class" / "infiniband").mkdir(parents=True)

        assert Readings() == _collect(tmp_path)


class TestPartialFailures:
    @pytest.mark.parametrize(
        ("contents", "shown"),
        [
            (b"garbage\n", "not a 64-bit counter: 'garbage'"),
            (b"18446744073709551616\n", "not a 64-bit counter: '18446744073709551616'"),
            (b"\x00\xff\xfe\x01\n", "binary contents"),
            (b"7" * (1024 * 1024), "longer than 65536 bytes"),
        ],
        ids=["garbage", "beyond-64-bits", "binary", "huge"],
    )
    def test_bad_counter_loses_that_figure(
        self, tmp_path: Path, contents: bytes, shown: str
    ) -> None:
        """Garbage, a 65-bit value, binary or a huge file: that one figure goes, an issue comes."""
        _tree(tmp_path)
        bad = tmp_path / "class/infiniband/mlx5_1/ports/2/counters/port_xmit_packets"
        bad.write_bytes(contents)

        mlx5_1 = _reading(MLX5_1, tick=0)
        samples = tuple(
            s
            for s in mlx5_1.samples
            if (s.spec, s.label_values) != (IB_TRANSMIT_PACKETS, ("mlx5_1", "2"))
        )
        expected = Readings(
            devices=(
                _reading(MLX5_0, tick=0),
                DeviceReading(mlx5_1.name, mlx5_1.keys, mlx5_1.identity, samples),
            ),
            issues=(CollectorIssue("garbage", f"{bad}: {shown}"),),
        )
        assert expected == _collect(tmp_path)

    def test_unreadable_counter_loses_that_figure(self, tmp_path: Path) -> None:
        """A counter that cannot be read (here a folder) is one lost figure and one issue."""
        _tree(tmp_path)
        bad = tmp_path / "class/infiniband/mlx5_0/ports/1/counters/port_rcv_data"
        bad.unlink()
        bad.mkdir()

        readings = _collect(tmp_path)
        expected = (
            _reading(MLX5_0, tick=0).samples[1:],
            (CollectorIssue("unreadable", f"cannot read {bad}: Is a directory"),),
        )
        assert expected == (readings.devices[0].samples, readings.issues)

    def test_symlink_loop_in_a_counter(self, tmp_path: Path) -> None:
        """A counter file that is a looping link loses that figure only."""
        _tree(tmp_path)
        bad = tmp_path / "class/infiniband/mlx5_0/ports/1/counters/port_rcv_data"
        bad.unlink()
        os.symlink("port_rcv_data", bad)

        readings = _collect(tmp_path)
        expected = (
            _reading(MLX5_0, tick=0).samples[1:],
            (
                CollectorIssue(
                    "unreadable", f"cannot read {bad}: Too many levels of symbolic links"
                ),
            ),
        )
        assert expected == (readings.devices[0].samples, readings.issues)

    def test_symlink_loop_as_device_link(self, tmp_path: Path) -> None:
        """A looping device link loses the PCI key and identity, keeps the counters."""
        _port(tmp_path, "mlx5_9", "1", {"counters/port_rcv_packets": "3\n"})
        link = tmp_path / "class" / "infiniband" / "mlx5_9" / "device"
        os.symlink("device", link)

        expected = Readings(
            devices=(
                DeviceReading(
                    name="mlx5_9",
                    keys=(HardwareKey(KeyKind.RDMA, "mlx5_9"),),
                    samples=(Sample(IB_RECEIVE_PACKETS, 3.0, ("mlx5_9", "1")),),
                ),
            ),
            issues=(
                CollectorIssue(
                    "unreadable", f"cannot resolve {link}: Too many levels of symbolic links"
                ),
            ),
        )
        assert expected == _collect(tmp_path)

    def test_symlink_loop_in_class_dir(self, tmp_path: Path) -> None:
        """A class entry that loops onto itself is one issue; the other devices are read."""
        _tree(tmp_path)
        loop = tmp_path / "class" / "infiniband" / "mlx5_9"
        os.symlink("mlx5_9", loop)

        readings = _collect(tmp_path)
        expected = (
            (_reading(MLX5_0, tick=0), _reading(MLX5_1, tick=0)),
            (
                CollectorIssue(
                    "unreadable",
                    f"cannot read {loop}: Too many levels of symbolic links",
                ),
            ),
        )
        assert expected == (readings.devices, readings.issues)

    def test_device_vanishing_after_the_listing(self, tmp_path: Path) -> None:
        """A device removed after the listing (dangling class link) is absent, not an error."""
        _tree(tmp_path)
        shutil.rmtree(pci_fixture.pci_device_dir(tmp_path, MLX5_1.pci_address) / "infiniband")

        expected = Readings(devices=(_reading(MLX5_0, tick=0),))
        assert expected == _collect(tmp_path)

    def test_ports_folder_vanishing_after_the_listing(self, tmp_path: Path) -> None:
        """A device whose ports/ folder is gone when read (being unregistered) is left
        out, not reported as a device without ports."""
        _tree(tmp_path)
        shutil.rmtree(tmp_path / "class/infiniband/mlx5_1/ports")

        assert Readings(devices=(_reading(MLX5_0, tick=0),)) == _collect(tmp_path)

    def test_unlistable_ports_folder_is_an_issue(self, tmp_path: Path) -> None:
        """A ports/ folder that cannot be listed (here a looping link) is one issue; the
        device is still reported under its keys, without figures."""
        _tree(tmp_path)
        ports = tmp_path / "class/infiniband/mlx5_1/ports"
        shutil.rmtree(ports)
        os.symlink("ports", ports)

        mlx5_1 = _reading(MLX5_1, tick=0)
        expected = Readings(
            devices=(
                _reading(MLX5_0, tick=0),
                DeviceReading(mlx5_1.name, mlx5_1.keys, mlx5_1.identity, ()),
            ),
            issues=(
                CollectorIssue(
                    "unreadable", f"cannot list {ports}: Too many levels of symbolic links"
                ),
            ),
        )
        assert expected == _collect(tmp_path)

    def test_entries_of_ports_that_are_not_port_numbers_are_ignored(self, tmp_path: Path) -> None:
        """Only numbered entries of ports/ are ports: a stray one is neither read nor a crash."""
        _tree(tmp_path)
        write_attribute(tmp_path / "class/infiniband/mlx5_0/ports/README", "not a port\n")

        expected = Readings(devices=(_reading(MLX5_0, tick=0), _reading(MLX5_1, tick=0)))
        assert expected == _collect(tmp_path)

    def test_unreadable_vendor_loses_only_the_vendor(self, tmp_path: Path) -> None:
        """An HCA whose PCI vendor file cannot be read keeps its keys and counters."""
        _tree(tmp_path)
        vendor = pci_fixture.pci_device_dir(tmp_path, MLX5_0.pci_address) / "vendor"
        vendor.unlink()
        os.mkfifo(vendor)

        mlx5_0 = _reading(MLX5_0, tick=0)
        expected = Readings(
            devices=(
                DeviceReading(
                    mlx5_0.name,
                    mlx5_0.keys,
                    DeviceIdentity(pci_address=MLX5_0.pci_address),
                    mlx5_0.samples,
                ),
                _reading(MLX5_1, tick=0),
            ),
            issues=(CollectorIssue("unreadable", f"cannot read {vendor}: not a regular file"),),
        )
        assert expected == _collect(tmp_path)

    def test_garbage_vendor_loses_only_the_vendor(self, tmp_path: Path) -> None:
        """A vendor file that is no PCI ID is garbage, not a ``vendor`` label."""
        _tree(tmp_path)
        vendor = pci_fixture.pci_device_dir(tmp_path, MLX5_0.pci_address) / "vendor"
        write_attribute(vendor, "garbage\n")

        mlx5_0 = _reading(MLX5_0, tick=0)
        expected = Readings(
            devices=(
                replace(mlx5_0, identity=DeviceIdentity(pci_address=MLX5_0.pci_address)),
                _reading(MLX5_1, tick=0),
            ),
            issues=(
                CollectorIssue("garbage", f"{vendor}: not a 0x-prefixed hex number: 'garbage'"),
            ),
        )
        assert expected == _collect(tmp_path)

    def test_counters_vanishing_after_the_listing(self, tmp_path: Path) -> None:
        """Counters gone when read leave the device with fewer figures and no issue."""
        _tree(tmp_path)
        shutil.rmtree(tmp_path / "class/infiniband/mlx5_1/ports/2/counters")

        mlx5_1 = _reading(MLX5_1, tick=0)
        # port 1's traffic and health; port 2's state, physical state and rate alone
        port_2_files = {IB_PORT_STATE, IB_PORT_PHYSICAL_STATE, IB_PORT_RATE}
        left = tuple(
            s for s in mlx5_1.samples if s.label_values[1] == "1" or s.spec in port_2_files
        )
        expected = Readings(
            devices=(
                _reading(MLX5_0, tick=0),
                DeviceReading(mlx5_1.name, mlx5_1.keys, mlx5_1.identity, left),
            )
        )
        assert expected == _collect(tmp_path)


class TestParsePortState:
    # Every string ib core's sysfs.c writes (state_show's state_name, phys_state_to_str)
    @pytest.mark.parametrize(
        ("text", "number"),
        [
            ("0: NOP\n", 0),
            ("1: DOWN\n", 1),
            ("2: INIT\n", 2),
            ("3: ARMED\n", 3),
            ("4: ACTIVE\n", 4),
            ("5: ACTIVE_DEFER\n", 5),
            ("1: Sleep\n", 1),
            ("2: Polling\n", 2),
            ("3: Disabled\n", 3),
            ("4: PortConfigurationTraining\n", 4),
            ("5: LinkUp\n", 5),
            ("6: LinkErrorRecovery\n", 6),
            ("7: Phy Test\n", 7),
            ("9: <unknown>\n", 9),
            ("12: UNKNOWN\n", 12),
            ("255: <unknown>\n", 255),  # phys_state is a u8 printed with %u
        ],
    )
    def test_the_kernels_strings(self, text: str, number: int) -> None:
        """The number before the colon, whatever name follows it."""
        assert number == parse_state(text)

    @pytest.mark.parametrize(
        "text", ["ACTIVE", "", ": ACTIVE", "-1: DOWN", "4 ACTIVE", "\u0661: X", "4\n"]
    )
    def test_garbage_raises(self, text: str) -> None:
        with pytest.raises(ValueError, match="not a numbered port state"):
            parse_state(text)


class TestParseRate:
    @pytest.mark.parametrize(
        ("text", "bytes_per_second"),
        [
            ("400 Gb/sec (4X NDR)\n", 50e9),
            ("200 Gb/sec (4X HDR)\n", 25e9),
            ("100 Gb/sec (2X HDR)\n", 12.5e9),
            ("56 Gb/sec (4X FDR)\n", 7e9),
            ("2.5 Gb/sec (1X SDR)\n", 312.5e6),
            ("800 Gb/sec (4X XDR)\n", 100e9),  # a speed this code does not name
            ("25.78125 Gb/sec\n", 25.78125 * 125e6),  # procfs's test of a rate without lanes
        ],
    )
    def test_gigabits_become_bytes(self, text: str, bytes_per_second: float) -> None:
        """The leading figure, in Gb/s as rate_show writes it (rate / 10, ".5"), as bytes."""
        assert bytes_per_second == pytest.approx(parse_rate(text), rel=1e-12)

    @pytest.mark.parametrize(
        "text",
        [
            "",
            "fast",
            "400 Mb/sec",
            "Gb/sec",
            "4.0.0 Gb/sec",
            "x Gb/sec",
            "400 Gb/s",
            "1" * 400 + " Gb/sec (4X NDR)",  # float() gives inf
            "\u0664\u0660\u0660 Gb/sec",  # Arabic-Indic 400: float() takes it
            "400Gb/sec",  # rate_show writes a space
            "400. Gb/sec",  # a point with no fraction
            "2.1234567 Gb/sec",  # more fraction than rate_show or procfs give
            "400 Gb/se",
        ],
        ids=lambda text: text[:16],
    )
    def test_garbage_raises(self, text: str) -> None:
        with pytest.raises(ValueError, match="not a port rate"):
            parse_rate(text)


_HEALTHY_PORT = {
    "state": "4: ACTIVE\n",
    "phys_state": "5: LinkUp\n",
    "rate": "200 Gb/sec (4X HDR)\n",
    "counters/link_downed": "2\n",
    "counters/symbol_error": "65535\n",
    "counters/port_rcv_errors": "7\n",
    "counters/port_xmit_discards": "0\n",
}


class TestReadPortHealth:
    def test_state_rate_and_the_error_counters_present(self, tmp_path: Path) -> None:
        """Each figure from its file; a counter at its 16-bit maximum as it is; error
        types whose file is absent have no entry."""
        port_dir = _port(tmp_path, "mlx5_0", "1", _HEALTHY_PORT)
        issues: list[CollectorIssue] = []

        health = read_port_health(port_dir, port=1, issues=issues)
        expected = IbPortHealth(
            port=1,
            state=4,
            physical_state=5,
            rate_bytes_per_second=25e9,
            link_downed=2,
            errors=(("symbol", 65535), ("receive", 7), ("transmit_discards", 0)),
        )
        assert (expected, []) == (health, issues)

    def test_a_port_without_a_link(self, tmp_path: Path) -> None:
        """DOWN and Polling are figures like any other; a rate the kernel refuses
        (EINVAL: no valid width) is no figure and no issue."""
        files = {**_HEALTHY_PORT, "state": "1: DOWN\n", "phys_state": "2: Polling\n"}
        port_dir = _port(tmp_path, "mlx5_0", "1", files)

        def read(monkeypatch: pytest.MonkeyPatch) -> tuple[IbPortHealth, list[CollectorIssue]]:
            fail_reads(monkeypatch, path_suffix="/rate", code=errno.EINVAL)
            issues: list[CollectorIssue] = []
            return read_port_health(port_dir, port=1, issues=issues), issues

        with pytest.MonkeyPatch.context() as monkeypatch:
            health, issues = read(monkeypatch)
        assert ((1, 2, None), []) == (
            (health.state, health.physical_state, health.rate_bytes_per_second),
            issues,
        )

    def test_eopnotsupp_is_no_figure_and_no_issue(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A port attribute the driver refuses with EOPNOTSUPP is absent, as EINVAL is:
        no figure, no issue; the other files are read all the same."""
        port_dir = _port(tmp_path, "mlx5_0", "1", _HEALTHY_PORT)
        fail_reads(monkeypatch, path_suffix="/state", code=errno.EOPNOTSUPP)
        issues: list[CollectorIssue] = []

        health = read_port_health(port_dir, port=1, issues=issues)
        assert ((None, 5, 25e9), []) == (
            (health.state, health.physical_state, health.rate_bytes_per_second),
            issues,
        )

    def test_counters_at_their_maximum_are_served_as_they_are(self, tmp_path: Path) -> None:
        """A PortCounters error field stops at its maximum (255 for the 8-bit
        link_downed, 15 for the 4-bit local_link_integrity_errors): it is served as it
        is, unlike a traffic figure at the 32-bit maximum, which gives no sample."""
        files = {
            **_HEALTHY_PORT,
            "counters/link_downed": "255\n",
            "counters/local_link_integrity_errors": "15\n",
        }
        port_dir = _port(tmp_path, "mlx5_0", "1", files)
        issues: list[CollectorIssue] = []

        health = read_port_health(port_dir, port=1, issues=issues)
        assert (255, ("local_link_integrity", 15), []) == (
            health.link_downed,
            health.errors[1],
            issues,
        )

    def test_without_counters_state_and_rate_still(self, tmp_path: Path) -> None:
        """A driver without MAD support (EFA) has no counters/: no error figures, its
        state and rate all the same; ``N/A (no PMA)`` is no figure either."""
        files = {k: v for k, v in _HEALTHY_PORT.items() if not k.startswith("counters/")}
        files["counters/link_downed"] = "N/A (no PMA)\n"
        port_dir = _port(tmp_path, "efa_0", "1", files)
        issues: list[CollectorIssue] = []

        health = read_port_health(port_dir, port=1, issues=issues)
        assert (IbPortHealth(1, 4, 5, 25e9, None, ()), []) == (health, issues)

    @pytest.mark.parametrize(
        ("name", "text", "field"),
        [
            ("state", "ACTIVE\n", "state"),
            ("phys_state", "LinkUp\n", "physical_state"),
            ("rate", "fast\n", "rate_bytes_per_second"),
            ("counters/link_downed", "-1\n", "link_downed"),
        ],
    )
    def test_garbage_loses_that_figure_with_its_path(
        self, tmp_path: Path, name: str, text: str, field: str
    ) -> None:
        port_dir = _port(tmp_path, "mlx5_0", "1", {**_HEALTHY_PORT, name: text})
        issues: list[CollectorIssue] = []

        health = read_port_health(port_dir, port=1, issues=issues)
        healthy = read_port_health(
            _port(tmp_path / "other", "mlx5_0", "1", _HEALTHY_PORT), port=1, issues=[]
        )
        assert (None, ["garbage"], True) == (
            getattr(health, field),
            [i.error for i in issues],
            str(port_dir / name) in issues[0].detail,
        )
        # the other figures are read all the same
        others = [f for f in ("state", "physical_state", "rate_bytes_per_second") if f != field]
        assert [getattr(healthy, f) for f in others] == [getattr(health, f) for f in others]

    @pytest.mark.parametrize("name", ["state", "rate", "counters/symbol_error"])
    def test_an_unreadable_file_is_an_issue(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
    ) -> None:
        port_dir = _port(tmp_path, "mlx5_0", "1", _HEALTHY_PORT)
        fail_reads(monkeypatch, path_suffix=f"/{name}", code=errno.EIO)
        issues: list[CollectorIssue] = []

        read_port_health(port_dir, port=1, issues=issues)
        assert (["unreadable"], True) == (
            [i.error for i in issues],
            str(port_dir / name) in issues[0].detail,
        )


class TestPortHealthSamples:
    def test_a_down_port_and_error_counts_reach_the_reading(self, tmp_path: Path) -> None:
        """Through the collector: a port the fixture writes DOWN/Polling, and a
        device's error counts under their types."""
        device = SimRdmaDevice(
            "mlx5_2",
            "0000:4b:00.0",
            0,
            ports=(1, 2),
            down_ports=(2,),
            errors=(("link_downed", 3), ("port_rcv_remote_physical_errors", 11)),
        )
        hardware = SimHardware(numa_nodes=HARDWARE.numa_nodes, rdma_devices=(device,))
        pci_fixture.write(tmp_path, hardware, tick=0)
        ib_fixture.write(tmp_path, hardware, tick=0)

        (reading,) = _collect(tmp_path).devices
        figures = {
            (s.spec.name, s.label_values): s.value
            for s in reading.samples
            if s.spec
            in (IB_PORT_STATE, IB_PORT_PHYSICAL_STATE, IB_PORT_LINK_DOWNED, IB_PORT_ERRORS)
            and s.value
        }
        assert {
            ("podresources_infiniband_port_state_id", ("mlx5_2", "1")): 4.0,
            ("podresources_infiniband_port_state_id", ("mlx5_2", "2")): 1.0,
            ("podresources_infiniband_port_physical_state_id", ("mlx5_2", "1")): 5.0,
            ("podresources_infiniband_port_physical_state_id", ("mlx5_2", "2")): 2.0,
            ("podresources_infiniband_port_link_downed_total", ("mlx5_2", "1")): 3.0,
            ("podresources_infiniband_port_link_downed_total", ("mlx5_2", "2")): 3.0,
            (
                "podresources_infiniband_port_errors_total",
                ("mlx5_2", "1", "receive_remote_physical"),
            ): 11.0,
            (
                "podresources_infiniband_port_errors_total",
                ("mlx5_2", "2", "receive_remote_physical"),
            ): 11.0,
        } == figures

    def test_the_devices_rate_is_what_the_fixture_writes(self, tmp_path: Path) -> None:
        """A device at another rate than the default (4X HDR, 200 Gb/s) reads as that rate
        in bytes a second: 25e9."""
        device = SimRdmaDevice("mlx5_2", "0000:4b:00.0", 0, rate="200 Gb/sec (4X HDR)")
        hardware = SimHardware(numa_nodes=HARDWARE.numa_nodes, rdma_devices=(device,))
        pci_fixture.write(tmp_path, hardware, tick=0)
        ib_fixture.write(tmp_path, hardware, tick=0)

        (reading,) = _collect(tmp_path).devices
        assert [25e9] == [s.value for s in reading.samples if s.spec == IB_PORT_RATE]

    def test_health_families(self) -> None:
        """Two gauges of numbered states, a rate in bytes, two counters, named as
        node_exporter's infiniband collector names the same figures (with our prefix)."""
        specs = (
            IB_PORT_STATE,
            IB_PORT_PHYSICAL_STATE,
            IB_PORT_RATE,
            IB_PORT_LINK_DOWNED,
            IB_PORT_ERRORS,
        )
        assert [
            ("podresources_infiniband_port_state_id", MetricKind.GAUGE, ("ib_device", "port")),
            (
                "podresources_infiniband_port_physical_state_id",
                MetricKind.GAUGE,
                ("ib_device", "port"),
            ),
            (
                "podresources_infiniband_port_rate_bytes_per_second",
                MetricKind.GAUGE,
                ("ib_device", "port"),
            ),
            (
                "podresources_infiniband_port_link_downed_total",
                MetricKind.COUNTER,
                ("ib_device", "port"),
            ),
            (
                "podresources_infiniband_port_errors_total",
                MetricKind.COUNTER,
                ("ib_device", "port", "type"),
            ),
        ] == [(s.name, s.kind, s.labels) for s in specs]


class TestPolledAgain:
    """One collector polled again and again: what it keeps must follow the tree."""

    def test_counters_advance_for_one_collector(self, tmp_path: Path) -> None:
        """Files the fixture replaced between polls are read anew through kept files."""
        collector = InfinibandCollector(CollectorContext(sysfs=_tree(tmp_path, tick=1)))
        collector.collect()
        _tree(tmp_path, tick=2)

        expected = Readings(devices=(_reading(MLX5_0, tick=2), _reading(MLX5_1, tick=2)))
        assert expected == collector.collect()

    def test_files_are_kept_open_between_polls(self, tmp_path: Path) -> None:
        """A poll keeps each port's files open for the next one: ``N`` files read, ``N``
        held, whatever number of polls."""
        collector = InfinibandCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        first = sorted(held_under(tmp_path))
        collector.collect()

        # per port: 4 traffic counters, state, phys_state, rate, link_downed, 7 errors
        assert (15 * 3, first) == (len(first), sorted(held_under(tmp_path)))

    def test_removed_device_is_dropped_and_its_files_closed(self, tmp_path: Path) -> None:
        """A device gone between polls is gone from the next one, with its descriptors."""
        collector = InfinibandCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        device_dir = pci_fixture.pci_device_dir(tmp_path, MLX5_1.pci_address) / "infiniband"
        shutil.rmtree(device_dir)
        (tmp_path / "class" / "infiniband" / "mlx5_1").unlink()

        readings = collector.collect()
        assert (Readings(devices=(_reading(MLX5_0, tick=0),)), []) == (
            readings,
            held_under(device_dir),
        )

    def test_added_device_is_found(self, tmp_path: Path) -> None:
        """A device that appears between polls is in the next poll."""
        collector = InfinibandCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        extra = SimRdmaDevice("mlx5_2", "0000:5b:00.0", 0)
        hardware = SimHardware(HARDWARE.numa_nodes, rdma_devices=(MLX5_0, MLX5_1, extra))
        pci_fixture.write(tmp_path, hardware, tick=0)
        ib_fixture.write(tmp_path, hardware, tick=0)

        expected = (_reading(MLX5_0, tick=0), _reading(MLX5_1, tick=0), _reading(extra, tick=0))
        assert expected == collector.collect().devices

    def test_name_taken_by_another_device_reads_that_device(self, tmp_path: Path) -> None:
        """A renamed device (``rdma dev set mlx5_1 name mlx5_0`` once mlx5_0 is gone): a
        new class entry for the name. Its files are the other device's, so without
        forgetting the kept ones mlx5_0 would keep reading the old device's counters."""
        collector = InfinibandCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        class_dir = tmp_path / "class" / "infiniband"
        (class_dir / "mlx5_0").unlink()
        (class_dir / "mlx5_1").rename(class_dir / "mlx5_0")  # a new inode for the name

        (mlx5_0,) = collector.collect().devices
        # the renamed device's ports and address, its samples under the name it has now
        renamed = _reading(MLX5_1, tick=0)
        assert (
            (HardwareKey(KeyKind.RDMA, "mlx5_0"), HardwareKey(KeyKind.PCI, MLX5_1.pci_address)),
            [("mlx5_0", *s.label_values[1:]) for s in renamed.samples],
            [s.value for s in renamed.samples],
        ) == (
            mlx5_0.keys,
            [s.label_values for s in mlx5_0.samples],
            [s.value for s in mlx5_0.samples],
        )

    def test_a_failed_vendor_read_is_tried_again(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """What was found with a failure is not kept: the next poll reads it again, and
        finds the vendor once it answers."""
        collector = InfinibandCollector(CollectorContext(sysfs=_tree(tmp_path)))
        with pytest.MonkeyPatch.context() as failing:
            fail_reads(failing, path_suffix=f"{MLX5_0.pci_address}/vendor", code=errno.EIO)
            first = collector.collect()
        second = collector.collect()

        assert (None, ["unreadable"], "mellanox", []) == (
            first.devices[0].identity.vendor,
            [i.error for i in first.issues],
            second.devices[0].identity.vendor,
            list(second.issues),
        )

    def test_close_releases_every_file(self, tmp_path: Path) -> None:
        """close() leaves no descriptor of the tree open."""
        collector = InfinibandCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        collector.close()

        assert [] == held_under(tmp_path)

    def test_a_device_listed_while_it_registers_is_walked_again(self, tmp_path: Path) -> None:
        """ib core makes the class entry before the device's ports and their counter
        folders (kernel e7a5b4aafd82): a device listed in between, its port without
        ``counters/`` yet, or its ``ports/`` still empty, is not kept so; once ib core
        has made them, its traffic and error counters are read."""
        _tree(tmp_path)
        port_dir = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
        ports_dir = tmp_path / "class" / "infiniband" / "mlx5_1" / "ports"
        shutil.move(port_dir / "counters", tmp_path / "counters-later")
        for port in ("1", "2"):
            shutil.move(ports_dir / port, tmp_path / f"port-{port}-later")
        collector = InfinibandCollector(CollectorContext(sysfs=tmp_path))
        collector.collect()
        shutil.move(tmp_path / "counters-later", port_dir / "counters")
        for port in ("1", "2"):
            shutil.move(tmp_path / f"port-{port}-later", ports_dir / port)

        expected = Readings(devices=(_reading(MLX5_0, tick=0), _reading(MLX5_1, tick=0)))
        assert expected == collector.collect()

    def test_a_port_made_after_the_first_walks_is_read(self, tmp_path: Path) -> None:
        """A two-port device listed while ib core has made its first port alone: the
        layout of one port is not kept for good, so its second port, made by the next
        poll, is read from then on (a third walk finds what the second did)."""
        _tree(tmp_path)
        ports_dir = tmp_path / "class" / "infiniband" / "mlx5_1" / "ports"
        shutil.move(ports_dir / "2", tmp_path / "port-2-later")
        collector = InfinibandCollector(CollectorContext(sysfs=tmp_path))
        collector.collect()
        shutil.move(tmp_path / "port-2-later", ports_dir / "2")

        expected = Readings(devices=(_reading(MLX5_0, tick=0), _reading(MLX5_1, tick=0)))
        assert [expected] * 3 == [collector.collect() for _ in range(3)]

    def test_files_are_closed_when_the_class_folder_goes(self, tmp_path: Path) -> None:
        """A poll that finds no ``class/infiniband`` (ib_core unloaded) reads no device
        and keeps none of their files open, as the collector before kept files did."""
        collector = InfinibandCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        shutil.rmtree(tmp_path / "class" / "infiniband")

        with pytest.raises(CollectorUnavailable):
            collector.collect()
        assert [] == held_under(tmp_path)

    def test_a_device_layout_is_found_once(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Each device's folders are walked in the first two polls that list it (the
        second confirms the first found it whole), not again while its class entry
        stands: four polls of two devices walk them four times in all."""
        walked: list[str] = []
        find = infiniband._device_layout

        def counting(device_dir: Path, *, issues: list[CollectorIssue]) -> object:
            walked.append(device_dir.name)
            return find(device_dir, issues=issues)

        monkeypatch.setattr(infiniband, "_device_layout", counting)
        collector = InfinibandCollector(CollectorContext(sysfs=_tree(tmp_path)))
        readings = [collector.collect() for _ in range(4)]

        assert (["mlx5_0", "mlx5_1"] * 2, [readings[0]] * 4) == (walked, readings)

    def test_a_removed_device_leaves_no_layout_behind(self, tmp_path: Path) -> None:
        """What is kept of a device goes with its class entry: names that come and go
        (VFs' RDMA devices) do not pile up for the exporter's lifetime."""
        collector = InfinibandCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        (tmp_path / "class" / "infiniband" / "mlx5_1").unlink()
        collector.collect()

        assert ["mlx5_0"] == sorted(collector._layouts)

    def test_a_renamed_device_reads_its_own_rate_and_errors(self, tmp_path: Path) -> None:
        """Every kept file of a name taken by another device is forgotten, its rate and
        error counters too: the new holder of the name reads 200 Gb/s and 7 symbol
        errors where the old one read 400 and none."""
        collector = InfinibandCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        class_dir = tmp_path / "class" / "infiniband"
        port_dir = class_dir / "mlx5_1" / "ports" / "1"
        write_attribute(port_dir / "rate", "200 Gb/sec (4X HDR)\n")
        write_attribute(port_dir / "counters" / "symbol_error", "7\n")
        (class_dir / "mlx5_0").unlink()
        (class_dir / "mlx5_1").rename(class_dir / "mlx5_0")

        (mlx5_0,) = collector.collect().devices
        figures = {
            (s.spec.name, s.label_values[2:]): s.value
            for s in mlx5_0.samples
            if s.label_values[1] == "1"
        }
        assert (25e9, 7.0) == (
            figures[(IB_PORT_RATE.name, ())],
            figures[(IB_PORT_ERRORS.name, ("symbol",))],
        )

    def test_a_port_is_read_only_from_files_it_has(self, tmp_path: Path) -> None:
        """A port's layout names the files its folders hold: an EFA port (no
        ``counters/``) is not asked for PortCounters' error files every poll, nor an
        mlx5 port for ``counters_ext/`` or ``hw_counters/``."""
        _tree(tmp_path)
        efa_dir = _port(
            tmp_path,
            "efa_0",
            "1",
            {
                "state": "4: ACTIVE\n",
                "phys_state": "5: LinkUp\n",
                "rate": "100 Gb/sec (4X EDR)\n",
                **{
                    f"hw_counters/{n}": "1\n"
                    for n in ("rx_bytes", "tx_bytes", "rx_pkts", "tx_pkts")
                },
            },
        )
        mlx5_dir = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1"

        named = [
            infiniband._port_layout(port_dir, port=1).files for port_dir in (efa_dir, mlx5_dir)
        ]
        assert ([7, 15], []) == (
            [len(files) for files in named],
            [f for files in named for f in files if not os.path.isfile(f)],
        )
