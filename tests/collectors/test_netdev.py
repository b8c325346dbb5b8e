"""The netdev collector reports every device-backed NIC's traffic under its hardware keys."""

from __future__ import annotations

import errno
import inspect
import os
import shutil
from pathlib import Path

import pytest
from openfiles import held_under
from oserrors import fail_reads

from exporter.collectors.base import CollectorContext, CollectorUnavailable
from exporter.collectors.netdev import (
    NET_RECEIVE_BYTES,
    NET_RECEIVE_DROPS,
    NET_RECEIVE_ERRORS,
    NET_RECEIVE_PACKETS,
    NET_TRANSMIT_BYTES,
    NET_TRANSMIT_DROPS,
    NET_TRANSMIT_ERRORS,
    NET_TRANSMIT_PACKETS,
    REGISTRATION,
    NetdevCollector,
    parse_vf_stats,
    pci_function,
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
from exporter.sim.fixtures import net as net_fixture
from exporter.sim.fixtures import pci as pci_fixture
from exporter.sim.fixtures.pci import pci_device_dir, replace_symlink, write_attribute
from exporter.sim.hardware import (
    GIB,
    VIRTIO_NIC_ADDRESS,
    SimGpu,
    SimHardware,
    SimNic,
    SimNumaNode,
    demo_hardware,
)
from exporter.sim.scenario import dense_hardware
from exporter.sysfs import kept_files_budget

CAPTURED_VM = Path(__file__).parents[1] / "fixtures" / "captured" / "vm-virtio-2cpu" / "sys"

PF = SimNic("0000:4b:00.0", "ens1f0np0", 0, "0x15b3", "0x101d")
VF0 = SimNic("0000:4b:00.2", "ens1f0v0", 0, "0x15b3", "0x101e", physfn=PF.pci_address, vf_index=0)
VF1 = SimNic("0000:4b:00.3", "ens1f0v1", 0, "0x15b3", "0x101e", physfn=PF.pci_address, vf_index=1)
# Shaped like the captured VM's NIC: 0000:00:03.0/virtio2/net/eth0.
VIRTIO = SimNic("0000:00:03.0", "eth0", 0, "0x1af4", "0x1041", virtio_index=2)
HARDWARE = SimHardware(
    numa_nodes=(SimNumaNode(0, (0, 1), GIB, 0, 0),),
    gpus=(SimGpu(0, "GPU-1", "0000:17:00.0", "H100", 0, 80 * GIB, 700.0, 0.5),),
    nics=(PF, VF0, VF1, VIRTIO),
)


def _tree(sysfs: Path, *, tick: int = 0) -> Path:
    pci_fixture.write(sysfs, HARDWARE, tick=tick)
    net_fixture.write(sysfs, HARDWARE, tick=tick)
    return sysfs


def _collect(sysfs: Path) -> Readings:
    return NetdevCollector(CollectorContext(sysfs=sysfs)).collect()


_SPECS = (
    ("rx_bytes", NET_RECEIVE_BYTES),
    ("tx_bytes", NET_TRANSMIT_BYTES),
    ("rx_packets", NET_RECEIVE_PACKETS),
    ("tx_packets", NET_TRANSMIT_PACKETS),
    ("rx_errors", NET_RECEIVE_ERRORS),
    ("tx_errors", NET_TRANSMIT_ERRORS),
    ("rx_dropped", NET_RECEIVE_DROPS),
    ("tx_dropped", NET_TRANSMIT_DROPS),
)


def _samples(interface: str, counters: dict[str, int]) -> tuple[Sample, ...]:
    return tuple(
        Sample(spec, float(counters[name]), (interface,))
        for name, spec in _SPECS
        if name in counters
    )


def _pci(address: str) -> HardwareKey:
    return HardwareKey(KeyKind.PCI, address)


def _netdev(name: str) -> HardwareKey:
    return HardwareKey(KeyKind.NETDEV, name)


def _vf(pf: str, index: int) -> HardwareKey:
    return HardwareKey(KeyKind.SRIOV_VF, f"{pf}/{index}")


def _host_reading(nic: SimNic, *, tick: int, vendor: str = "mellanox") -> DeviceReading:
    keys = [_netdev(nic.netdev), _pci(nic.pci_address)]
    if nic.physfn is not None and nic.vf_index is not None:
        keys.append(_vf(nic.physfn, nic.vf_index))
    return DeviceReading(
        name=nic.netdev,
        keys=tuple(keys),
        identity=DeviceIdentity(pci_address=nic.pci_address, vendor=vendor),
        samples=_samples(nic.netdev, net_fixture.interface_counters(nic, tick=tick)),
    )


def _moved_vf_reading(vf: SimNic, *, tick: int, pf_netdev: str) -> DeviceReading:
    assert vf.physfn is not None
    assert vf.vf_index is not None
    counters = net_fixture.interface_counters(vf, tick=tick)
    del counters["rx_errors"], counters["tx_errors"]  # mlx5 does not count them per VF
    return DeviceReading(
        name=vf.pci_address,
        keys=(_pci(vf.pci_address), _vf(vf.physfn, vf.vf_index)),
        identity=DeviceIdentity(pci_address=vf.pci_address, vendor="mellanox"),
        samples=_samples(f"{pf_netdev}/vf{vf.vf_index}", counters),
    )


def _expected_tree(*, tick: int) -> tuple[DeviceReading, ...]:
    return (
        _host_reading(PF, tick=tick),
        _host_reading(VF1, tick=tick),
        _host_reading(VIRTIO, tick=tick, vendor="virtio"),
        _moved_vf_reading(VF0, tick=tick, pf_netdev=PF.netdev),
    )


def _without(readings: tuple[DeviceReading, ...], name: str) -> tuple[DeviceReading, ...]:
    return tuple(r for r in readings if r.name != name)


class TestFamilies:
    def test_names_kinds_and_labels(self) -> None:
        """Eight counters named as DESIGN.md says, each labelled by interface."""
        expected = [
            (f"podresources_net_{direction}_{what}_total", MetricKind.COUNTER, ("interface",))
            for what in ("bytes", "packets", "errors", "drops")
            for direction in ("receive", "transmit")
        ]
        assert expected == [(s.name, s.kind, s.labels) for _, s in _SPECS]


class TestRegistration:
    def test_registration_and_contract(self) -> None:
        """Registered as "netdev", serving no resource prefix, collecting without arguments."""
        expected = ("netdev", NetdevCollector, (), ["self"])
        assert expected == (
            REGISTRATION.name,
            REGISTRATION.factory,
            NetdevCollector.serves,
            list(inspect.signature(NetdevCollector.collect).parameters),
        )


class TestParseVfStats:
    def test_parses_mlx5_lines(self) -> None:
        """``name : value`` lines become a dict; blank lines are ignored."""
        text = "tx_packets    : 5\nrx_bytes      : 4096\n\n"

        expected = ({"tx_packets": 5, "rx_bytes": 4096}, ())
        assert expected == parse_vf_stats(text)

    def test_bad_lines_lose_only_their_figure(self) -> None:
        """No colon, a non-number or a value beyond 64 bits: that line only is refused."""
        text = (
            "tx_packets 5\n"
            "rx_bytes : lots\n"
            "tx_bytes : 18446744073709551616\n"
            "rx_packets : 18446744073709551615\n"
            f"tx_dropped : {'9' * 5000}\n"
        )

        expected = (
            {"rx_packets": 18446744073709551615},
            (
                "tx_packets 5",
                "rx_bytes : lots",
                "tx_bytes : 18446744073709551616",
                "tx_dropped : " + "9" * 27,
            ),
        )
        assert expected == parse_vf_stats(text)

    def test_non_ascii_digits_are_refused(self) -> None:
        """A value in digits other than ASCII ones (which int() would take) is a bad line."""
        assert ({}, ("rx_bytes : \u0663",)) == parse_vf_stats("rx_bytes : \u0663\n")


# Where the kernel puts the bus of an Intel VMD at 0000:00:0e.0 (drivers/pci/controller/vmd.c).
VMD_BUS = "devices/pci0000:00/0000:00:0e.0/pci10000:e0"


class TestPciFunction:
    @pytest.mark.parametrize(
        ("device", "expected"),
        [
            ("devices/pci0000:4b/0000:4b:00.0", "devices/pci0000:4b/0000:4b:00.0"),
            ("devices/pci0000:00/0000:00:03.0/virtio2", "devices/pci0000:00/0000:00:03.0"),
            ("devices/platform/a000000.virtio_mmio/virtio0", None),
            ("devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0", None),
            ("devices/pci0000:00/0000:00:02.0/0000:01:00.2/vdpa0/virtio0", None),
            # Behind an Intel VMD, whose domains start at 0x10000.
            (f"{VMD_BUS}/10000:e0:06.0/10000:e1:00.0", f"{VMD_BUS}/10000:e0:06.0/10000:e1:00.0"),
        ],
    )
    def test_function_of_a_device_folder(self, device: str, expected: str | None) -> None:
        """A PCI function is itself; virtio<N> below one is that function; else none."""
        result = pci_function(Path("/sys") / device)
        assert (None if expected is None else Path("/sys") / expected) == result


class TestSimulatedNode:
    def test_every_nic_under_its_keys(self, tmp_path: Path) -> None:
        """PF, host VF, virtio NIC and a VF moved into a pod, each with keys and counters."""
        _tree(tmp_path, tick=3)

        expected = Readings(devices=_expected_tree(tick=3))
        assert expected == _collect(tmp_path)

    def test_virtio_nic_is_found_through_its_virtio_device(self, tmp_path: Path) -> None:
        """The simulated virtio NIC's PCI address and vendor come from the function above it."""
        _tree(tmp_path)

        readings = {r.name: r for r in _collect(tmp_path).devices}
        expected = (
            (_netdev("eth0"), _pci("0000:00:03.0")),
            DeviceIdentity(pci_address="0000:00:03.0", vendor="virtio"),
        )
        assert expected == (readings["eth0"].keys, readings["eth0"].identity)

    def test_demo_node(self, tmp_path: Path) -> None:
        """The demo's NICs: PFs, host VFs, the virtio NIC, the second PF's representors
        (switchdev), and the moved VFs: through the first PF's per-VF counters, and
        through its representor for the second PF's, bytes and packets as the VF counts
        them."""
        hardware = demo_hardware()
        pci_fixture.write(tmp_path, hardware, tick=1)
        net_fixture.write(tmp_path, hardware, tick=1)

        readings = _collect(tmp_path)
        switchdev = next(n for n in hardware.nics if n.switchdev)
        moved = [n for n in hardware.nics if net_fixture.in_pod_netns(n)]
        on_host = [n.netdev for n in hardware.nics if not net_fixture.in_pod_netns(n)]
        representors = [
            net_fixture.representor_name(switchdev, n)
            for n in hardware.nics
            if n.physfn == switchdev.pci_address
        ]
        virtio = next(r for r in readings.devices if r.name == "eth1")
        (through_representor,) = (n for n in moved if n.physfn == switchdev.pci_address)
        counters = net_fixture.interface_counters(through_representor, tick=1)
        four = {k: counters[k] for k in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets")}
        expected = (
            sorted(on_host + representors) + [n.pci_address for n in moved],
            (_netdev("eth1"), _pci(VIRTIO_NIC_ADDRESS)),
            "virtio",
            8,
            _samples(f"{switchdev.netdev}/vf{through_representor.vf_index}", four),
            (),
        )
        assert expected == (
            [r.name for r in readings.devices],
            virtio.keys,
            virtio.identity.vendor,
            len(virtio.samples),
            readings.devices[-1].samples,
            readings.issues,
        )

    def test_a_dense_sriov_node_keeps_every_counter_file_open(self, tmp_path: Path) -> None:
        """90 NICs (two PFs, 88 VFs): every counter file stays open between polls, so a
        poll re-reads them instead of opening them (512 were kept before: the rest were
        opened every poll). A VF in a pod's netns is one stats file of its PF."""
        hardware = dense_hardware(cpus=4, vfs=88)
        pci_fixture.write(tmp_path, hardware, tick=0)
        net_fixture.write(tmp_path, hardware, tick=0)
        collector = NetdevCollector(CollectorContext(sysfs=tmp_path))
        before = len(os.listdir("/proc/self/fd"))
        readings = collector.collect()
        kept = len(os.listdir("/proc/self/fd")) - before
        collector.close()

        moved = sum(net_fixture.in_pod_netns(n) for n in hardware.nics)
        files = (90 - moved) * 8 + moved
        assert (90, (), True) == (len(readings.devices), readings.issues, files > 512)
        assert min(files, kept_files_budget()) == kept

    def test_nics_in_a_vmd_domain_under_their_keys(self, tmp_path: Path) -> None:
        """A PF in an Intel VMD domain (from 0x10000: 10000:e1:00.0) and its VF moved into
        a pod are read, under their PCI and VF keys: the PF had no PCI key and the VF was
        not found, their folders taken for no PCI function."""
        pf = SimNic("10000:e1:00.0", "ens9f0np0", 0, "0x15b3", "0x101d")
        vf = SimNic(
            "10000:e1:00.2", "ens9f0v0", 0, "0x15b3", "0x101e", physfn=pf.pci_address, vf_index=0
        )
        hardware = SimHardware(numa_nodes=HARDWARE.numa_nodes, nics=(pf, vf))
        pci_fixture.write(tmp_path, hardware, tick=1)
        net_fixture.write(tmp_path, hardware, tick=1)

        expected = Readings(
            devices=(
                _host_reading(pf, tick=1),
                _moved_vf_reading(vf, tick=1, pf_netdev=pf.netdev),
            )
        )
        assert expected == _collect(tmp_path)

    def test_vf_leaving_the_host_is_read_through_its_pf(self, tmp_path: Path) -> None:
        """Once a VF's netdev moves into a pod, its traffic comes from the PF's counters."""
        _tree(tmp_path)
        shutil.rmtree(pci_device_dir(tmp_path, VF1.pci_address) / "net" / "ens1f0v1")
        (tmp_path / "class" / "net" / "ens1f0v1").unlink()
        stats = pci_device_dir(tmp_path, PF.pci_address) / "sriov" / "1" / "stats"
        write_attribute(stats, "rx_bytes : 99\n")

        vf1 = DeviceReading(
            name=VF1.pci_address,
            keys=(_pci(VF1.pci_address), _vf(PF.pci_address, 1)),
            identity=DeviceIdentity(pci_address=VF1.pci_address, vendor="mellanox"),
            samples=_samples("ens1f0np0/vf1", {"rx_bytes": 99}),
        )
        expected = Readings(devices=(*_without(_expected_tree(tick=0), "ens1f0v1"), vf1))
        assert expected == _collect(tmp_path)

    def test_counters_increase_with_tick(self, tmp_path: Path) -> None:
        """Polls of later fixture ticks see larger byte counters, direct and via the PF."""
        before = _collect(_tree(tmp_path, tick=1))
        after = _collect(_tree(tmp_path, tick=2))

        def received(readings: Readings) -> list[float]:
            return [
                s.value for r in readings.devices for s in r.samples if s.spec == NET_RECEIVE_BYTES
            ]

        # Every netdev of the tree, direct and via the PF, has one: all() of nothing passes.
        assert len(received(before)) == len(before.devices) > 1
        assert all(a > b for a, b in zip(received(after), received(before), strict=True))

    def test_vf_without_pf_stats_has_no_samples(self, tmp_path: Path) -> None:
        """A moved VF whose PF keeps no per-VF counters is reported bare, without an issue."""
        _tree(tmp_path)
        shutil.rmtree(pci_device_dir(tmp_path, PF.pci_address) / "sriov")

        vf0 = DeviceReading(
            name=VF0.pci_address,
            keys=(_pci(VF0.pci_address), _vf(PF.pci_address, 0)),
            identity=DeviceIdentity(pci_address=VF0.pci_address, vendor="mellanox"),
        )
        expected = Readings(devices=(*_expected_tree(tick=0)[:3], vf0))
        assert expected == _collect(tmp_path)

    def test_per_vf_counters_in_a_folder(self, tmp_path: Path) -> None:
        """The one-file-per-counter layout of some drivers is read too."""
        _tree(tmp_path)
        stats = pci_device_dir(tmp_path, PF.pci_address) / "sriov" / "0" / "stats"
        stats.unlink()
        write_attribute(stats / "rx_bytes", "10\n")
        write_attribute(stats / "tx_dropped", "2\n")

        moved = _collect(tmp_path).devices[-1]
        expected = _samples("ens1f0np0/vf0", {"rx_bytes": 10, "tx_dropped": 2})
        assert expected == moved.samples

    def test_vf_ten_and_up_is_named_through_its_pf(self, tmp_path: Path) -> None:
        """virtfn10 (two digits, as on any PF with more than ten VFs) gives the VF its
        SRIOV_VF key like virtfn1 does."""
        vf10 = SimNic(
            "0000:4b:01.4", "ens1f0v10", 0, "0x15b3", "0x101e", physfn=PF.pci_address, vf_index=10
        )
        hardware = SimHardware(HARDWARE.numa_nodes, (), nics=(PF, vf10))
        pci_fixture.write(tmp_path, hardware, tick=0)
        net_fixture.write(tmp_path, hardware, tick=0)

        expected = (_host_reading(PF, tick=0), _host_reading(vf10, tick=0))
        assert expected == _collect(tmp_path).devices

    def test_host_vf_of_a_pf_without_host_netdev_keeps_its_sriov_key(self, tmp_path: Path) -> None:
        """A VF on the host whose PF has no netdev here (an IB-mode PF, or one moved
        away) is still named as its PF's VF: the PF is looked up through physfn."""
        _tree(tmp_path)
        (tmp_path / "class" / "net" / PF.netdev).unlink()

        vf1 = next(r for r in _collect(tmp_path).devices if r.name == VF1.netdev)
        assert _host_reading(VF1, tick=0).keys == vf1.keys

    def test_moved_vf_is_labelled_with_the_pfs_first_netdev(self, tmp_path: Path) -> None:
        """A PF function with two netdevs (a second port, a child interface) labels its
        VFs' samples with the first by name."""
        _tree(tmp_path)
        pf_dir = pci_device_dir(tmp_path, PF.pci_address)
        second = pf_dir / "net" / "ens1f0np0x"
        second.mkdir(parents=True)
        replace_symlink(second / "device", pf_dir)
        replace_symlink(tmp_path / "class" / "net" / "ens1f0np0x", second)

        moved = _collect(tmp_path).devices[-1]
        assert _moved_vf_reading(VF0, tick=0, pf_netdev=PF.netdev) == moved

    def test_per_vf_counter_folder_made_after_first_poll(self, tmp_path: Path) -> None:
        """A PF whose per-VF ``stats`` folder appears after the VF was first seen is read
        as a folder from then on, not as a file."""
        _tree(tmp_path)
        sriov = pci_device_dir(tmp_path, PF.pci_address) / "sriov"
        shutil.rmtree(sriov)
        collector = NetdevCollector(CollectorContext(sysfs=tmp_path))
        collector.collect()
        write_attribute(sriov / "0" / "stats" / "rx_bytes", "10\n")

        readings = collector.collect()
        expected = (_samples("ens1f0np0/vf0", {"rx_bytes": 10}), ())
        assert expected == (readings.devices[-1].samples, readings.issues)


# A representor's own counters: what its eswitch port saw (mlx5: the VF's sent traffic
# as received).
_REPRESENTOR_COUNTERS = {
    "rx_bytes": 7000,
    "tx_bytes": 9000,
    "rx_packets": 7,
    "tx_packets": 9,
    "rx_errors": 0,
    "tx_errors": 1,
    "rx_dropped": 2,
    "tx_dropped": 3,
}

# ice_repr_get_stats64 sets these of its VF's VSI; rx_errors it leaves at 0.
_ICE_VF_COUNTERS = {k: v for k, v in _REPRESENTOR_COUNTERS.items() if k != "rx_errors"}
# mlx5's representor counts its eswitch port: the VF's traffic the other way round.
_MLX5_VF_COUNTERS = {"rx_bytes": 9000, "tx_bytes": 7000, "rx_packets": 9, "tx_packets": 7}


def _switchdev(sysfs: Path, *ports: tuple[str, str], driver: str = "mlx5_core") -> None:
    """PF of the fixture tree in switchdev mode, as the in-kernel driver lays it out: no
    per-VF counters, the uplink's phys_port_name p0, and a representor netdev below the
    PF for each (ifname, phys_port_name) of ``ports``."""
    pf_dir = pci_device_dir(sysfs, PF.pci_address)
    shutil.rmtree(pf_dir / "sriov")
    write_attribute(pf_dir / "net" / PF.netdev / "phys_port_name", "p0\n")
    driver_dir = sysfs / "bus" / "pci" / "drivers" / driver
    driver_dir.mkdir(parents=True, exist_ok=True)
    replace_symlink(pf_dir / "driver", driver_dir)
    for name, port in ports:
        interface = pf_dir / "net" / name
        for counter, value in _REPRESENTOR_COUNTERS.items():
            write_attribute(interface / "statistics" / counter, f"{value}\n")
        write_attribute(interface / "phys_port_name", f"{port}\n")
        replace_symlink(interface / "device", pf_dir)
        replace_symlink(sysfs / "class" / "net" / name, interface)


def _representor_reading(name: str) -> DeviceReading:
    return DeviceReading(
        name=name, keys=(_netdev(name),), samples=_samples(name, _REPRESENTOR_COUNTERS)
    )


def _moved_vf0(samples: tuple[Sample, ...] = ()) -> DeviceReading:
    return DeviceReading(
        name=VF0.pci_address,
        keys=(_pci(VF0.pci_address), _vf(PF.pci_address, 0)),
        identity=DeviceIdentity(pci_address=VF0.pci_address, vendor="mellanox"),
        samples=samples,
    )


class TestSwitchdev:
    def test_mlx5_vf_in_a_pod_is_read_through_its_representor_flipped(self, tmp_path: Path) -> None:
        """In-kernel mlx5 keeps no per-VF counters; in switchdev mode its representor
        counts the VF's eswitch port, so what the VF received is what the representor
        transmitted (en_rep.c flips them), and only bytes and packets are the VF's.
        Representors are not the PF: they carry no PCI key (a holder of the PF would
        otherwise be given every VF's traffic)."""
        _tree(tmp_path)
        _switchdev(tmp_path, ("ens1f0npf0vf0", "pf0vf0"), ("ens1f0npf0vf1", "pf0vf1"))
        pf, vf1, virtio, _ = _expected_tree(tick=0)
        expected = {
            pf,
            vf1,
            virtio,
            _representor_reading("ens1f0npf0vf0"),
            _representor_reading("ens1f0npf0vf1"),
            _moved_vf0(_samples("ens1f0np0/vf0", _MLX5_VF_COUNTERS)),
        }
        readings = _collect(tmp_path)
        assert (expected, ()) == (set(readings.devices), readings.issues)

    def test_ice_representor_gives_its_vfs_own_counters(self, tmp_path: Path) -> None:
        """ice's representor reports its VF's VSI counters as the VF counts them."""
        _tree(tmp_path)
        _switchdev(tmp_path, ("eth5", "pf0vf0"), driver="ice")
        moved = _collect(tmp_path).devices[-1]
        assert _moved_vf0(_samples("ens1f0np0/vf0", _ICE_VF_COUNTERS)) == moved

    def test_per_vf_counters_win_over_the_representor(self, tmp_path: Path) -> None:
        """Where the PF keeps per-VF counters too (MLNX_OFED), those are read."""
        _tree(tmp_path)
        _switchdev(tmp_path, ("eth5", "pf0vf0"))
        stats = pci_device_dir(tmp_path, PF.pci_address) / "sriov" / "0" / "stats"
        write_attribute(stats, "rx_bytes : 99\n")
        moved = _collect(tmp_path).devices[-1]
        assert _moved_vf0(_samples("ens1f0np0/vf0", {"rx_bytes": 99})) == moved

    @pytest.mark.parametrize(
        ("port", "driver"),
        [
            ("pf0vf0", "bnxt_en"),  # a driver whose counting is not known here
            ("c1pf0vf0", "mlx5_core"),  # another host's VF (a DPU's controller)
            ("pf0sf0", "mlx5_core"),  # a subfunction
            ("pf0", "mlx5_core"),  # another host's PF
        ],
    )
    def test_representors_that_say_nothing_of_our_vf(
        self, tmp_path: Path, port: str, driver: str
    ) -> None:
        """Such a representor is reported by name only, and the VF gets no figures."""
        _tree(tmp_path)
        _switchdev(tmp_path, ("eth5", port), driver=driver)
        readings = _collect(tmp_path)
        assert (_representor_reading("eth5"), _moved_vf0(), ()) == (
            next(r for r in readings.devices if r.name == "eth5"),
            readings.devices[-1],
            readings.issues,
        )

    @pytest.mark.parametrize(
        ("driver", "counters"),
        [("ice", _ICE_VF_COUNTERS), ("mlx5_core", _MLX5_VF_COUNTERS)],
    )
    def test_pf_number_of_a_representor_is_not_the_pfs_function(
        self, tmp_path: Path, driver: str, counters: dict[str, int]
    ) -> None:
        """ice names a VF's port pf<hw.pf_id>vf<m> (ice_devlink_create_vf_port), no PCI
        function number where the PF is passed through to a VM, and mlx5 used its port
        index on some kernels (here pf1 under function 0): a representor is its own PF's
        VF's all the same, as drivers make them on their own PF."""
        _tree(tmp_path)
        _switchdev(tmp_path, ("eth5", "pf1vf0"), driver=driver)
        moved = _collect(tmp_path).devices[-1]
        assert _moved_vf0(_samples("ens1f0np0/vf0", counters)) == moved

    def test_old_ice_representor_names(self, tmp_path: Path) -> None:
        """ice named its representors pf<switch port>vfr<VF> before devlink ports: the
        first number is no PCI function, and is not checked."""
        _tree(tmp_path)
        _switchdev(tmp_path, ("eth5", "pf3vfr0"), driver="ice")
        moved = _collect(tmp_path).devices[-1]
        assert _moved_vf0(_samples("ens1f0np0/vf0", _ICE_VF_COUNTERS)) == moved

    def test_each_moved_vf_is_read_through_its_own_representor(self, tmp_path: Path) -> None:
        """With two VFs in pods, each takes the figures of the representor whose
        pf<n>vf<m> names it, not another VF's."""
        _tree(tmp_path)
        shutil.rmtree(pci_device_dir(tmp_path, VF1.pci_address) / "net" / VF1.netdev)
        (tmp_path / "class" / "net" / VF1.netdev).unlink()
        _switchdev(tmp_path, ("eth5", "pf0vf0"), ("eth6", "pf0vf1"), driver="ice")
        eth6 = pci_device_dir(tmp_path, PF.pci_address) / "net" / "eth6"
        write_attribute(eth6 / "statistics" / "rx_bytes", "5\n")

        readings = {r.name: r for r in _collect(tmp_path).devices}
        expected = (
            _samples("ens1f0np0/vf0", _ICE_VF_COUNTERS),
            _samples("ens1f0np0/vf1", {**_ICE_VF_COUNTERS, "rx_bytes": 5}),
        )
        assert expected == (readings[VF0.pci_address].samples, readings[VF1.pci_address].samples)

    @pytest.mark.parametrize("nic", [VF1, VIRTIO])
    def test_only_a_pfs_own_netdev_is_taken_for_a_representor(
        self, tmp_path: Path, nic: SimNic
    ) -> None:
        """A VF's netdev, or one below a PCI function (virtio), is read as itself whatever
        its phys_port_name says: only a netdev whose device is a PF can represent a port."""
        _tree(tmp_path)
        netdev = net_fixture.netdev_parent(tmp_path, nic) / "net" / nic.netdev
        write_attribute(netdev / "phys_port_name", "pf0vf0\n")
        readings = _collect(tmp_path)
        assert (_expected_tree(tick=0), ()) == (readings.devices, readings.issues)

    def test_an_unreadable_driver_link_is_an_issue(self, tmp_path: Path) -> None:
        """Where the PF's driver link cannot be resolved, which driver counts its
        representors is not known: one issue, and the VF gets no figures."""
        _tree(tmp_path)
        _switchdev(tmp_path, ("eth5", "pf0vf0"))
        driver = pci_device_dir(tmp_path, PF.pci_address) / "driver"
        driver.unlink()
        os.symlink("driver", driver)
        readings = _collect(tmp_path)
        loop = "Too many levels of symbolic links"
        expected = (
            _moved_vf0(),
            (CollectorIssue("unreadable", f"cannot resolve {driver}: {loop}"),),
        )
        assert expected == (readings.devices[-1], readings.issues)

    @pytest.mark.parametrize(("code", "issues"), [(errno.EOPNOTSUPP, 0), (errno.EIO, 1)])
    def test_a_netdev_without_a_switch_port(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, issues: int
    ) -> None:
        """phys_port_name answers EOPNOTSUPP where a netdev has no switch port (most
        NICs): an ordinary netdev, no issue. Another failure is an issue, and the netdev
        is read as an ordinary one meanwhile."""
        _tree(tmp_path)
        port_name = pci_device_dir(tmp_path, PF.pci_address) / "net" / PF.netdev / "phys_port_name"
        write_attribute(port_name, "pf0vf0\n")  # what it says is never read
        fail_reads(monkeypatch, path_suffix="/phys_port_name", code=code)
        readings = _collect(tmp_path)
        assert (_expected_tree(tick=0), issues) == (readings.devices, len(readings.issues))


class TestCapturedVm:
    def test_virtio_nic_of_a_real_kernel(self) -> None:
        """On the captured KVM guest, eth0 is found through virtio2; lo and ifb are not NICs."""
        counters = {
            "rx_bytes": 424749990,
            "tx_bytes": 640087,
            "rx_packets": 13552,
            "tx_packets": 7102,
            "rx_errors": 0,
            "tx_errors": 0,
            "rx_dropped": 0,
            "tx_dropped": 0,
        }
        expected = Readings(
            devices=(
                DeviceReading(
                    name="eth0",
                    keys=(_netdev("eth0"), _pci("0000:00:03.0")),
                    identity=DeviceIdentity(pci_address="0000:00:03.0", vendor="virtio"),
                    samples=_samples("eth0", counters),
                ),
            )
        )
        assert expected == _collect(CAPTURED_VM)


class TestVirtualAndOtherParents:
    def test_virtual_netdevs_are_not_reported(self, tmp_path: Path) -> None:
        """A netdev without a device link (veth, bridge, lo) is no physical device."""
        _tree(tmp_path)
        write_attribute(tmp_path / "devices/virtual/net/veth1/statistics/rx_bytes", "5\n")
        replace_symlink(tmp_path / "class/net/veth1", tmp_path / "devices/virtual/net/veth1")

        assert Readings(devices=_expected_tree(tick=0)) == _collect(tmp_path)

    def test_non_pci_parent_has_only_its_name(self, tmp_path: Path) -> None:
        """A USB NIC is reported under its name, without the USB controller's address."""
        usb = tmp_path / "devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0"
        write_attribute(usb / "net/enx0/statistics/rx_bytes", "7\n")
        replace_symlink(usb / "net/enx0/device", usb)
        replace_symlink(tmp_path / "class/net/enx0", usb / "net/enx0")

        expected = Readings(
            devices=(
                DeviceReading(
                    name="enx0",
                    keys=(_netdev("enx0"),),
                    samples=(Sample(NET_RECEIVE_BYTES, 7.0, ("enx0",)),),
                ),
            )
        )
        assert expected == _collect(tmp_path)

    def test_no_class_net_is_unavailable(self, tmp_path: Path) -> None:
        """Without class/net the source is absent, not broken."""
        with pytest.raises(CollectorUnavailable, match="no network devices"):
            _collect(tmp_path)


class TestPartialFailures:
    @pytest.mark.parametrize(
        ("contents", "shown"),
        [
            (b"x\n", "not a 64-bit integer: 'x'"),
            (b"18446744073709551616\n", "not a 64-bit integer: '18446744073709551616'"),
            (b"\x00\xff\xfe\x01\n", "binary contents"),
            (b"7" * (1024 * 1024), "longer than 65536 bytes"),
            (b"-5\n", "negative: -5"),
            (b"-1\n", "negative: -1"),
        ],
        ids=["garbage", "beyond-64-bits", "binary", "huge", "negative", "minus-one"],
    )
    def test_bad_counter_loses_that_figure(
        self, tmp_path: Path, contents: bytes, shown: str
    ) -> None:
        """Garbage, a 65-bit value, binary, a huge file or a negative count (a counter
        served below zero): that one figure goes, an issue comes."""
        _tree(tmp_path)
        bad = pci_device_dir(tmp_path, VF1.pci_address) / "net/ens1f0v1/statistics/rx_bytes"
        bad.write_bytes(contents)

        readings = _collect(tmp_path)
        vf1 = _host_reading(VF1, tick=0)
        seen = tmp_path / "class/net/ens1f0v1/statistics/rx_bytes"
        expected = (
            _without(_expected_tree(tick=0), "ens1f0v1"),
            vf1.samples[1:],
            (CollectorIssue("garbage", f"{seen}: {shown}"),),
        )
        assert expected == (
            _without(readings.devices, "ens1f0v1"),
            next(r for r in readings.devices if r.name == "ens1f0v1").samples,
            readings.issues,
        )

    def test_unreadable_counter_loses_that_figure(self, tmp_path: Path) -> None:
        """A counter that cannot be read (here a folder) is one lost figure and one issue."""
        _tree(tmp_path)
        bad = pci_device_dir(tmp_path, VF1.pci_address) / "net/ens1f0v1/statistics/tx_bytes"
        bad.unlink()
        bad.mkdir()

        readings = _collect(tmp_path)
        vf1 = _host_reading(VF1, tick=0)
        seen = tmp_path / "class/net/ens1f0v1/statistics/tx_bytes"
        expected = (
            tuple(s for s in vf1.samples if s.spec != NET_TRANSMIT_BYTES),
            (CollectorIssue("unreadable", f"cannot read {seen}: Is a directory"),),
        )
        assert expected == (readings.devices[1].samples, readings.issues)

    @pytest.mark.parametrize(("code", "issues"), [(errno.EINVAL, 0), (errno.EIO, 1)])
    def test_netdev_being_unregistered_is_gone_not_an_error(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, issues: int
    ) -> None:
        """A netdev being unregistered answers its counters with EINVAL (netstat_show
        once the device is not alive): that figure is gone, not an error; EIO still is."""
        _tree(tmp_path)
        fail_reads(monkeypatch, path_suffix="ens1f0v1/statistics/tx_bytes", code=code)

        readings = _collect(tmp_path)
        vf1 = _host_reading(VF1, tick=0)
        expected = tuple(s for s in vf1.samples if s.spec != NET_TRANSMIT_BYTES)
        assert (expected, issues) == (readings.devices[1].samples, len(readings.issues))

    def test_netdev_vanishing_after_the_listing(self, tmp_path: Path) -> None:
        """A netdev listed but gone when read (dangling class link) is absent, not an error."""
        _tree(tmp_path)
        shutil.rmtree(net_fixture.netdev_parent(tmp_path, VIRTIO) / "net" / "eth0")

        expected = Readings(devices=_without(_expected_tree(tick=0), "eth0"))
        assert expected == _collect(tmp_path)

    def test_counters_vanishing_after_the_listing(self, tmp_path: Path) -> None:
        """Statistics gone when read leave the NIC with fewer figures and no issue."""
        _tree(tmp_path)
        shutil.rmtree(pci_device_dir(tmp_path, VF1.pci_address) / "net/ens1f0v1/statistics")

        vf1 = _host_reading(VF1, tick=0)
        expected = Readings(
            devices=tuple(
                DeviceReading(r.name, r.keys, r.identity) if r.name == vf1.name else r
                for r in _expected_tree(tick=0)
            )
        )
        assert expected == _collect(tmp_path)

    def test_symlink_loop_in_class_net(self, tmp_path: Path) -> None:
        """A class/net entry that loops onto itself is one issue; the other NICs are read."""
        _tree(tmp_path)
        loop = tmp_path / "class" / "net" / "loop0"
        os.symlink("loop0", loop)

        readings = _collect(tmp_path)
        expected = (
            _expected_tree(tick=0),
            (
                CollectorIssue(
                    "unreadable", f"cannot resolve {loop}/device: Too many levels of symbolic links"
                ),
            ),
        )
        assert expected == (readings.devices, readings.issues)

    def test_symlink_loop_in_a_counter(self, tmp_path: Path) -> None:
        """A counter file that is a looping link loses that figure only."""
        _tree(tmp_path)
        bad = pci_device_dir(tmp_path, PF.pci_address) / "net/ens1f0np0/statistics/rx_packets"
        bad.unlink()
        os.symlink("rx_packets", bad)

        readings = _collect(tmp_path)
        pf = _host_reading(PF, tick=0)
        seen = tmp_path / "class/net/ens1f0np0/statistics/rx_packets"
        expected = (
            tuple(s for s in pf.samples if s.spec != NET_RECEIVE_PACKETS),
            ("unreadable",),
            f"cannot read {seen}: Too many levels of symbolic links",
        )
        assert expected == (
            readings.devices[0].samples,
            tuple(i.error for i in readings.issues),
            readings.issues[0].detail,
        )

    def test_garbage_line_in_pf_stats_loses_that_figure(self, tmp_path: Path) -> None:
        """A malformed per-VF stats line loses its own figure; the file's others are kept."""
        _tree(tmp_path)
        stats = pci_device_dir(tmp_path, PF.pci_address) / "sriov" / "0" / "stats"
        write_attribute(stats, "tx_packets : many\nrx_bytes : 4096\n")

        readings = _collect(tmp_path)
        expected = (
            _samples("ens1f0np0/vf0", {"rx_bytes": 4096}),
            (
                CollectorIssue(
                    "garbage", f"{stats}: not a 'name : value' line: 'tx_packets : many'"
                ),
            ),
        )
        assert expected == (readings.devices[-1].samples, readings.issues)

    @pytest.mark.parametrize(("code", "issues"), [(errno.EINVAL, 0), (errno.EIO, 1)])
    def test_pf_stats_of_a_vf_being_torn_down_are_gone_not_an_error(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, issues: int
    ) -> None:
        """MLNX_OFED answers a VF's stats with EINVAL when its vport query fails (the VF
        being torn down): no figures and no issue, as a netdev being unregistered; EIO
        is still an error."""
        _tree(tmp_path)
        fail_reads(monkeypatch, path_suffix="sriov/0/stats", code=code)

        readings = _collect(tmp_path)
        assert ((), issues) == (readings.devices[-1].samples, len(readings.issues))

    def test_huge_pf_stats_file_is_refused(self, tmp_path: Path) -> None:
        """A per-VF stats file past the read bound (its end cut) gives no figures and an issue."""
        _tree(tmp_path)
        stats = pci_device_dir(tmp_path, PF.pci_address) / "sriov" / "0" / "stats"
        stats.write_text("rx_bytes : 1\n" * 100_000)

        readings = _collect(tmp_path)
        expected = ((), (CollectorIssue("garbage", f"{stats}: longer than 65536 bytes"),))
        assert expected == (readings.devices[-1].samples, readings.issues)

    def test_unreadable_vendor_loses_only_the_vendor(self, tmp_path: Path) -> None:
        """A vendor file that cannot be read leaves the identity without vendor, and an issue."""
        _tree(tmp_path)
        vendor = pci_device_dir(tmp_path, VIRTIO.pci_address) / "vendor"
        vendor.unlink()
        vendor.mkdir()

        readings = _collect(tmp_path)
        expected = (
            DeviceIdentity(pci_address=VIRTIO.pci_address),
            ("unreadable",),
        )
        assert expected == (readings.devices[2].identity, tuple(i.error for i in readings.issues))

    @pytest.mark.parametrize("text", ["garbage", "0x1af4f", "0x1af4x", "-5", "1.5", "\u00ff\u00fe"])
    def test_garbage_vendor_loses_only_the_vendor(self, tmp_path: Path, text: str) -> None:
        """A vendor file that is no PCI ID is garbage, not a ``vendor`` label: the
        identity has no vendor, the figures stay."""
        _tree(tmp_path)
        vendor = pci_device_dir(tmp_path, VIRTIO.pci_address) / "vendor"
        write_attribute(vendor, f"{text}\n")

        readings = _collect(tmp_path)
        expected = (
            DeviceIdentity(pci_address=VIRTIO.pci_address),
            _host_reading(VIRTIO, tick=0, vendor="virtio").samples,
            [("garbage", f"{vendor}: ", True)],
        )
        assert expected == (
            readings.devices[2].identity,
            readings.devices[2].samples,
            [
                (i.error, i.detail[: len(f"{vendor}: ")], repr(text) in i.detail)
                for i in readings.issues
            ],
        )

    def test_physfn_and_virtfn_link_loops_are_issues(self, tmp_path: Path) -> None:
        """A VF's physfn link and a PF's virtfn link that loop are each one issue; the
        rest is read."""
        _tree(tmp_path)
        physfn = pci_device_dir(tmp_path, VF1.pci_address) / "physfn"
        physfn.unlink()
        os.symlink("physfn", physfn)
        virtfn = pci_device_dir(tmp_path, PF.pci_address) / "virtfn7"
        os.symlink("virtfn7", virtfn)

        readings = _collect(tmp_path)

        loop = "Too many levels of symbolic links"
        expected = (
            # VF1 stays a host netdev: it is not read a second time through its PF.
            [PF.netdev, VF1.netdev, VIRTIO.netdev, VF0.pci_address],
            (
                CollectorIssue("unreadable", f"cannot resolve {physfn}: {loop}"),
                CollectorIssue("unreadable", f"cannot resolve {virtfn}: {loop}"),
            ),
        )
        assert expected == ([r.name for r in readings.devices], readings.issues)

    def test_unreadable_vendor_is_reported_every_poll(self, tmp_path: Path) -> None:
        """A failed read is not kept: the vendor of a host netdev and of a VF read through
        its PF is read, and reported, again each poll."""
        _tree(tmp_path)
        vendors = [pci_device_dir(tmp_path, nic.pci_address) / "vendor" for nic in (VIRTIO, VF0)]
        for vendor in vendors:
            vendor.unlink()
            vendor.mkdir()
        collector = NetdevCollector(CollectorContext(sysfs=tmp_path))

        polls = [collector.collect() for _ in range(2)]

        issues = tuple(
            CollectorIssue("unreadable", f"cannot read {v}: Is a directory") for v in vendors
        )
        vf0 = DeviceIdentity(pci_address=VF0.pci_address)  # still read through its PF
        assert [(issues, vf0), (issues, vf0)] == [(p.issues, p.devices[-1].identity) for p in polls]


class TestBetweenPolls:
    """One collector polled again and again: what it keeps must follow the tree."""

    def test_counters_advance_for_one_collector(self, tmp_path: Path) -> None:
        """Files the fixture replaced between polls are read anew, direct and via the PF."""
        collector = NetdevCollector(CollectorContext(sysfs=_tree(tmp_path, tick=1)))
        collector.collect()
        _tree(tmp_path, tick=2)

        assert Readings(devices=_expected_tree(tick=2)) == collector.collect()

    def test_removed_netdev_is_dropped_and_its_files_closed(self, tmp_path: Path) -> None:
        """A netdev unplugged between polls is gone from the next one, with its descriptors."""
        collector = NetdevCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        interface_dir = net_fixture.netdev_parent(tmp_path, VIRTIO) / "net" / "eth0"
        shutil.rmtree(interface_dir)
        (tmp_path / "class" / "net" / "eth0").unlink()

        readings = collector.collect()
        still_open = held_under(interface_dir)
        assert (_without(_expected_tree(tick=0), "eth0"), []) == (
            readings.devices,
            still_open,
        )

    def test_added_netdev_is_found(self, tmp_path: Path) -> None:
        """A netdev that appears between polls is in the next poll."""
        collector = NetdevCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        extra = SimNic("0000:4c:00.0", "ens2f0np0", 0, "0x15b3", "0x101d")
        hardware = SimHardware(HARDWARE.numa_nodes, HARDWARE.gpus, nics=(*HARDWARE.nics, extra))
        pci_fixture.write(tmp_path, hardware, tick=0)
        net_fixture.write(tmp_path, hardware, tick=0)

        devices = _expected_tree(tick=0)
        expected = (*devices[:2], _host_reading(extra, tick=0), *devices[2:])
        assert Readings(devices=expected) == collector.collect()

    def test_netdev_recreated_on_another_function(self, tmp_path: Path) -> None:
        """A name re-created on another device (a new class entry) gets that device's keys."""
        collector = NetdevCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        moved = SimNic("0000:4c:00.0", VIRTIO.netdev, 0, "0x15b3", "0x101d")
        pci_fixture.write(tmp_path, SimHardware(HARDWARE.numa_nodes, (), nics=(moved,)), tick=0)
        shutil.rmtree(net_fixture.netdev_parent(tmp_path, VIRTIO) / "net" / "eth0")
        net_fixture.write(tmp_path, SimHardware(HARDWARE.numa_nodes, (), nics=(moved,)), tick=0)

        devices = _expected_tree(tick=0)
        expected = (*devices[:2], _host_reading(moved, tick=0), devices[3])
        assert Readings(devices=expected) == collector.collect()

    def test_name_taken_by_another_netdev_reads_that_netdev(self, tmp_path: Path) -> None:
        """udev renames: ens1f0v1 becomes eth0 once eth0 is renamed away. The files stay
        (kernfs moves the nodes, and a kept descriptor follows its node), so without
        forgetting them eth0 would keep reading the old eth0's counters."""
        collector = NetdevCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        class_net = tmp_path / "class" / "net"
        (class_net / "eth0").unlink()
        (class_net / VF1.netdev).rename(class_net / "eth0")  # a new inode for the name

        eth0 = next(r for r in collector.collect().devices if r.name == "eth0")
        assert (
            _pci(VF1.pci_address),
            _samples("eth0", net_fixture.interface_counters(VF1, tick=0)),
        ) == (
            eth0.keys[1],
            eth0.samples,
        )

    def test_vf_recreated_on_another_function(self, tmp_path: Path) -> None:
        """A PF's virtfn link re-pointed (VFs re-created) names the new VF next poll."""
        collector = NetdevCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        new_vf0 = SimNic(
            "0000:4b:00.6", "ens1f0v0", 0, "0x15b3", "0x101e", physfn=PF.pci_address, vf_index=0
        )
        pci_fixture.write(tmp_path, SimHardware(HARDWARE.numa_nodes, (), nics=(new_vf0,)), tick=0)
        pf_dir = pci_device_dir(tmp_path, PF.pci_address)
        replace_symlink(pf_dir / "virtfn0", pci_device_dir(tmp_path, new_vf0.pci_address))

        moved = DeviceReading(
            name=new_vf0.pci_address,
            keys=(_pci(new_vf0.pci_address), _vf(PF.pci_address, 0)),
            identity=DeviceIdentity(pci_address=new_vf0.pci_address, vendor="mellanox"),
            samples=_moved_vf_reading(VF0, tick=0, pf_netdev=PF.netdev).samples,
        )
        assert (*_expected_tree(tick=0)[:3], moved) == collector.collect().devices

    def test_netdev_gone_for_a_poll_is_forgotten(self, tmp_path: Path) -> None:
        """A netdev gone for one poll and back under the same class entry (its inode) is
        resolved anew: what was kept of it went with it."""
        collector = NetdevCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        link = tmp_path / "class" / "net" / VIRTIO.netdev
        saved = tmp_path / "saved-link"
        os.link(link, saved, follow_symlinks=False)  # the same inode, kept aside
        link.unlink()
        collector.collect()
        interface_dir = net_fixture.netdev_parent(tmp_path, VIRTIO) / "net" / VIRTIO.netdev
        replace_symlink(interface_dir / "device", pci_device_dir(tmp_path, PF.pci_address))
        os.link(saved, link, follow_symlinks=False)

        eth0 = next(r for r in collector.collect().devices if r.name == VIRTIO.netdev)
        assert (_netdev(VIRTIO.netdev), _pci(PF.pci_address)) == eth0.keys

    def test_close_releases_every_file(self, tmp_path: Path) -> None:
        """close() leaves no descriptor of the tree open."""
        collector = NetdevCollector(CollectorContext(sysfs=_tree(tmp_path)))
        collector.collect()
        collector.close()

        assert [] == held_under(tmp_path)
