"""The PCI, network and InfiniBand fixture writers lay out sysfs as the kernel does."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import yaml

from exporter.config import DEFAULT_POLL_INTERVAL_S
from exporter.sim.fixtures import infiniband, net, pci
from exporter.sim.hardware import (
    GIB,
    LINK_FLAP_TICK,
    SimDrmGpu,
    SimGpu,
    SimHardware,
    SimNic,
    SimNumaNode,
    SimRdmaDevice,
    demo_hardware,
)

REPO = Path(__file__).resolve().parents[2]
CAPTURED_VM = Path(__file__).parents[1] / "fixtures" / "captured" / "vm-virtio-2cpu" / "sys"
PF = SimNic("0000:4b:00.0", "ens1f0np0", 0, "0x15b3", "0x101d")
VF0 = SimNic("0000:4b:00.2", "ens1f0v0", 0, "0x15b3", "0x101e", physfn=PF.pci_address, vf_index=0)
VF1 = SimNic("0000:4b:00.3", "ens1f0v1", 0, "0x15b3", "0x101e", physfn=PF.pci_address, vf_index=1)
SMALL = SimHardware(
    numa_nodes=(SimNumaNode(0, (0, 1), GIB, 0, 0), SimNumaNode(1, (2, 3), GIB, 0, 0)),
    gpus=(SimGpu(0, "GPU-1", "0000:17:00.0", "H100", 1, 80 * GIB, 700.0, 0.5),),
    drm_gpus=(
        SimDrmGpu(1, "amdgpu", "0000:e1:00.0", "0x1002", "0x74a1", 1, GIB, 0.5),
        SimDrmGpu(2, "i915", "0000:e9:00.0", "0x8086", "0x0bd5", 0, GIB, 0.5),
    ),
    nics=(PF, VF0, VF1),
    rdma_devices=(
        SimRdmaDevice("mlx5_0", PF.pci_address, 0),
        SimRdmaDevice("mlx5_4", "0000:c1:00.0", 1, ports=(1, 2)),
    ),
)


def _write_all(sysfs: Path, hardware: SimHardware, *, tick: int) -> None:
    pci.write(sysfs, hardware, tick=tick)
    net.write(sysfs, hardware, tick=tick)
    infiniband.write(sysfs, hardware, tick=tick)


def _attributes(directory: Path) -> dict[str, str]:
    return {
        name: (directory / name).read_text() for name in ("vendor", "device", "class", "numa_node")
    }


class TestPciDeviceDir:
    def test_derives_the_host_bridge_from_the_address(self, tmp_path: Path) -> None:
        """The real device directory sits below a host bridge named after domain and bus."""
        assert tmp_path / "devices" / "pci0000:af" / "0000:af:00.1" == pci.pci_device_dir(
            tmp_path, "0000:af:00.1"
        )


class TestPciWriter:
    def test_bus_links_are_relative_like_the_kernels(self, tmp_path: Path) -> None:
        """``bus/pci/devices/<address>`` is a relative link to the real device directory."""
        pci.write(tmp_path, SMALL, tick=0)

        link = tmp_path / "bus" / "pci" / "devices" / "0000:17:00.0"
        expected = (
            "../../../devices/pci0000:17/0000:17:00.0",
            pci.pci_device_dir(tmp_path, "0000:17:00.0"),
        )
        assert expected == (os.readlink(link), link.resolve())

    def test_lists_every_function_once(self, tmp_path: Path) -> None:
        """GPUs, DRM GPUs, NICs and a standalone HCA each get one bus entry."""
        pci.write(tmp_path, SMALL, tick=0)

        expected = [
            "0000:17:00.0",
            "0000:4b:00.0",
            "0000:4b:00.2",
            "0000:4b:00.3",
            "0000:c1:00.0",
            "0000:e1:00.0",
            "0000:e9:00.0",
        ]
        assert expected == sorted(os.listdir(tmp_path / "bus" / "pci" / "devices"))

    def test_writes_identity_files(self, tmp_path: Path) -> None:
        """Each kind of function gets its vendor, device, class and NUMA node."""
        pci.write(tmp_path, SMALL, tick=0)

        def attributes(address: str) -> dict[str, str]:
            return _attributes(pci.pci_device_dir(tmp_path, address))

        gpu = {
            "vendor": "0x10de\n",
            "device": "0x2330\n",
            "class": "0x030200\n",
            "numa_node": "1\n",
        }
        amd = {
            "vendor": "0x1002\n",
            "device": "0x74a1\n",
            "class": "0x038000\n",
            "numa_node": "1\n",
        }
        intel = {
            "vendor": "0x8086\n",
            "device": "0x0bd5\n",
            "class": "0x030000\n",
            "numa_node": "0\n",
        }
        nic = {
            "vendor": "0x15b3\n",
            "device": "0x101d\n",
            "class": "0x020000\n",
            "numa_node": "0\n",
        }
        hca = {
            "vendor": "0x15b3\n",
            "device": "0x1021\n",
            "class": "0x020700\n",
            "numa_node": "1\n",
        }
        assert gpu == attributes("0000:17:00.0")
        assert amd == attributes("0000:e1:00.0")
        assert intel == attributes("0000:e9:00.0")
        assert nic == attributes("0000:4b:00.0")  # the RoCE device is written as its NIC
        assert hca == attributes("0000:c1:00.0")

    def test_links_sriov_functions_both_ways(self, tmp_path: Path) -> None:
        """A PF has ``virtfnN`` links and ``sriov_numvfs``; each VF a ``physfn`` link back."""
        pci.write(tmp_path, SMALL, tick=0)
        pf_dir = pci.pci_device_dir(tmp_path, PF.pci_address)

        expected = {
            "sriov_numvfs": "2\n",
            "virtfn0": "../0000:4b:00.2",
            "virtfn1": "../0000:4b:00.3",
            "physfn of VF1": "../0000:4b:00.0",
        }
        actual = {
            "sriov_numvfs": (pf_dir / "sriov_numvfs").read_text(),
            "virtfn0": os.readlink(pf_dir / "virtfn0"),
            "virtfn1": os.readlink(pf_dir / "virtfn1"),
            "physfn of VF1": os.readlink(pci.pci_device_dir(tmp_path, VF1.pci_address) / "physfn"),
        }
        assert expected == actual

    def test_links_the_driver(self, tmp_path: Path) -> None:
        """``driver`` points into ``bus/pci/drivers``, as tools like lspci -k expect."""
        pci.write(tmp_path, SMALL, tick=0)

        driver = pci.pci_device_dir(tmp_path, "0000:e1:00.0") / "driver"
        assert tmp_path / "bus" / "pci" / "drivers" / "amdgpu" == driver.resolve()

    def test_demo_hardware_has_every_function(self, tmp_path: Path) -> None:
        """The demo node's NVIDIA GPUs, DRM GPUs and NIC functions are all on the bus, and
        the root and switch ports above them: 3 root ports, and the upstream port and the
        downstream ports of its 2 switches (2 and 3)."""
        hardware = demo_hardware()
        pci.write(tmp_path, hardware, tick=0)

        bridges = {b for _, chain in hardware.pcie_bridges for b in chain}
        expected = sorted(
            [g.pci_address for g in hardware.gpus]
            + [g.pci_address for g in hardware.drm_gpus]
            + [n.pci_address for n in hardware.nics]
            + list(bridges)
        )
        assert 10 == len(bridges)
        assert expected == sorted(os.listdir(tmp_path / "bus" / "pci" / "devices"))

    def test_demo_bridges_nest_as_the_kernel_nests_them(self, tmp_path: Path) -> None:
        """A function below a switch is a folder in its downstream port's, in its upstream
        port's, in its root port's, in its host bridge's; bridges are PCI-to-PCI bridges
        (class 0x060400), and a VF sits beside its PF."""
        hardware = demo_hardware()
        pci.write(tmp_path, hardware, tick=0)
        switch = tmp_path / "devices" / "pci0000:14" / "0000:14:01.0" / "0000:15:00.0"

        def real(address: str) -> Path:
            return (tmp_path / "bus" / "pci" / "devices" / address).resolve()

        assert switch / "0000:16:00.0" / "0000:17:00.0" == real("0000:17:00.0")
        assert switch / "0000:16:01.0" / "0000:4b:00.0" == real("0000:4b:00.0")
        assert switch / "0000:16:01.0" / "0000:4b:00.3" == real("0000:4b:00.3")
        assert switch / "0000:16:01.0" / "0000:4b:00.3" == pci.pci_device_dir(
            tmp_path, "0000:4b:00.3"
        ), "the other writers find it through the bus link"
        for port in ("0000:14:01.0", "0000:15:00.0", "0000:16:00.0", "0000:16:01.0"):
            assert "0x060400\n" == (real(port) / "class").read_text()
        gpu_2 = tmp_path / "devices" / "pci0000:c7" / "0000:c7:01.0" / "0000:c8:00.0"
        assert gpu_2 / "0000:c9:02.0" / "0000:b1:00.0" == real("0000:b1:00.0")
        assert tmp_path / "devices" / "pci0000:5d" / "0000:5d:00.0" == real("0000:5d:00.0")

    def test_each_demo_bridge_is_a_port_in_its_place(self, tmp_path: Path) -> None:
        """Every bridge's own folder (the one its bus link names, with its files) is
        nested below the bridges before it in its chain, as the functions below it are;
        root ports are Intel's, switch ports Broadcom's, each on the NUMA node of the
        functions below it."""
        hardware = demo_hardware()
        pci.write(tmp_path, hardware, tick=0)
        numa = {f.address: f.numa_node for f in pci.pci_functions(hardware)}

        for address, chain in hardware.pcie_bridges:
            domain, bus, _ = chain[0].split(":", 2)
            for depth, bridge in enumerate(chain):
                real = (tmp_path / "bus" / "pci" / "devices" / bridge).resolve()
                expected = tmp_path / "devices" / f"pci{domain}:{bus}" / Path(*chain[: depth + 1])
                assert expected == real, bridge
                vendor = "0x8086\n" if depth == 0 else "0x1000\n"
                assert vendor == (real / "vendor").read_text(), bridge
                assert f"{numa[address]}\n" == (real / "numa_node").read_text(), bridge

    def test_switch_links_as_broadcoms_module_lists_them(self, tmp_path: Path) -> None:
        """A folder per linked switch's upstream port, an entry per peer, linked to the
        peer's folder (``sysfs_create_link`` from both ends), and the refresh file whose
        read filled them; no folder at all where no link is (no module)."""
        pci.write(tmp_path / "none", demo_hardware(), tick=0)
        assert not (tmp_path / "none" / "kernel").exists()

        links = (("0000:15:00.0", "0000:c8:00.0"),)
        pci.write(tmp_path, replace(demo_hardware(), switch_links=links), tick=0)
        root = tmp_path / "kernel" / "pci_switch_link"
        folders = root / "virtual_switch_links"
        assert ["0000:15:00.0", "0000:c8:00.0"] == sorted(os.listdir(folders))
        assert ["0000:c8:00.0"] == os.listdir(folders / "0000:15:00.0")
        assert "../0000:c8:00.0" == os.readlink(folders / "0000:15:00.0" / "0000:c8:00.0")
        assert "../0000:15:00.0" == os.readlink(folders / "0000:c8:00.0" / "0000:15:00.0")
        assert "done\n" == (root / "refresh_switch_toplogy").read_text()

    def test_demo_links_as_the_kernel_writes_them(self, tmp_path: Path) -> None:
        """Every GPU and physical NIC of the demo has a Gen5 x16 link, GPU 0 trained at 8
        lanes and idle GPU 1 slowed to 2.5 GT/s; VFs and the virtio NIC have no link files."""
        hardware = demo_hardware()
        pci.write(tmp_path, hardware, tick=0)
        names = ("current_link_width", "max_link_width", "current_link_speed", "max_link_speed")

        def link_of(address: str) -> tuple[str, ...] | None:
            function = pci.pci_device_dir(tmp_path, address)
            if not (function / "current_link_width").exists():
                return None
            assert (function / "power" / "runtime_status").read_text() == "active\n"
            return tuple((function / name).read_text() for name in names)

        links = {n.pci_address: link_of(n.pci_address) for n in hardware.nics}
        links.update((g.pci_address, link_of(g.pci_address)) for g in hardware.gpus)
        links.update((g.pci_address, link_of(g.pci_address)) for g in hardware.drm_gpus)
        full = ("16\n", "16\n", "32.0 GT/s PCIe\n", "32.0 GT/s PCIe\n")
        expected = {address: full for address in links}
        expected.update(
            (n.pci_address, None) for n in hardware.nics if n.physfn or n.virtio_index is not None
        )
        expected[hardware.gpus[0].pci_address] = ("8\n", *full[1:])
        expected[hardware.gpus[1].pci_address] = ("16\n", "16\n", "2.5 GT/s PCIe\n", full[3])
        assert links == expected
        assert sum(link is None for link in links.values()) == 9  # 8 VFs, the virtio NIC


class TestReplaceSymlink:
    def test_replaces_a_link_pointing_elsewhere(self, tmp_path: Path) -> None:
        """An existing link to another target is swapped for the new one."""
        link = tmp_path / "a" / "link"
        pci.replace_symlink(link, tmp_path / "old")
        pci.replace_symlink(link, tmp_path / "new")

        expected = "../new"
        assert expected == os.readlink(link)


class TestNetWriter:
    def test_writes_statistics_and_class_link(self, tmp_path: Path) -> None:
        """A netdev's counters sit below its PCI function, reachable via ``class/net``."""
        _write_all(tmp_path, SMALL, tick=3)

        statistics = tmp_path / "class" / "net" / "ens1f0np0" / "statistics"
        actual = {name: int((statistics / name).read_text()) for name in os.listdir(statistics)}
        links = (
            os.readlink(tmp_path / "class" / "net" / "ens1f0np0"),
            os.readlink(statistics.parent / "device"),
        )
        expected_links = (
            "../../devices/pci0000:4b/0000:4b:00.0/net/ens1f0np0",
            "../../../0000:4b:00.0",
        )
        assert (net.interface_counters(PF, tick=3), expected_links) == (actual, links)

    def test_vf_in_pod_netns_has_an_empty_net_folder(self, tmp_path: Path) -> None:
        """VF index 0 is in a pod's namespace: empty ``net/`` and no ``class/net`` entry."""
        _write_all(tmp_path, SMALL, tick=0)

        vf_dir = pci.pci_device_dir(tmp_path, VF0.pci_address)
        expected: tuple[list[str], bool] = ([], False)
        assert expected == (
            os.listdir(vf_dir / "net"),
            (tmp_path / "class" / "net" / "ens1f0v0").is_symlink(),
        )

    def test_demo_moves_the_first_vf_of_each_pf(self, tmp_path: Path) -> None:
        """In the demo, ens1f0v0 and ens2f0v0 are the VFs in a pod's namespace."""
        hardware = demo_hardware()
        _write_all(tmp_path, hardware, tick=0)

        moved = sorted(n.netdev for n in hardware.nics if net.in_pod_netns(n))
        on_host = sorted(os.listdir(tmp_path / "class" / "net"))
        expected: tuple[list[str], list[str]] = (["ens1f0v0", "ens2f0v0"], [])
        assert expected == (moved, sorted(set(moved) & set(on_host)))

    def test_pf_keeps_per_vf_stats_like_mlx5(self, tmp_path: Path) -> None:
        """The PF shows each VF's counters as ``name : value`` lines in ``sriov/<n>/stats``."""
        _write_all(tmp_path, SMALL, tick=2)

        counters = net.interface_counters(VF0, tick=2)
        expected = (
            f"tx_packets    : {counters['tx_packets']}\n"
            f"tx_bytes      : {counters['tx_bytes']}\n"
            f"tx_dropped    : {counters['tx_dropped']}\n"
            f"rx_packets    : {counters['rx_packets']}\n"
            f"rx_bytes      : {counters['rx_bytes']}\n"
            "rx_broadcast  : 0\n"
            "rx_multicast  : 0\n"
            "tx_broadcast  : 0\n"
            "tx_multicast  : 0\n"
            f"rx_dropped    : {counters['rx_dropped']}\n"
        )
        stats = tmp_path / "class" / "net" / "ens1f0np0" / "device" / "sriov" / "0" / "stats"
        assert expected == stats.read_text()

    def test_virtio_nic_is_laid_out_like_the_captured_vm(self, tmp_path: Path) -> None:
        """Links and identity files of a virtio NIC match the real KVM guest's, byte for byte."""
        virtio = SimNic("0000:00:03.0", "eth0", 0, "0x1af4", "0x1041", virtio_index=2)
        _write_all(tmp_path, SimHardware(numa_nodes=SMALL.numa_nodes, nics=(virtio,)), tick=0)

        function = "devices/pci0000:00/0000:00:03.0"
        links = (
            "class/net/eth0",
            f"{function}/virtio2/net/eth0/device",
            f"{function}/virtio2/driver",
        )
        files = tuple(
            f"{function}/{name}"
            for name in ("vendor", "device", "class", "virtio2/vendor", "virtio2/device")
        )

        def layout(sysfs: Path) -> tuple[list[str], list[str], bool]:
            return (
                [os.readlink(sysfs / link) for link in links],
                [(sysfs / name).read_text() for name in files],
                (sysfs / function / "net").exists(),
            )

        assert layout(CAPTURED_VM) == layout(tmp_path)

    def test_virtio_nic_counters_below_its_virtio_device(self, tmp_path: Path) -> None:
        """The virtio NIC's statistics are reached through class/net like any netdev's."""
        virtio = SimNic("0000:00:03.0", "eth0", 0, "0x1af4", "0x1041", virtio_index=2)
        _write_all(tmp_path, SimHardware(numa_nodes=SMALL.numa_nodes, nics=(virtio,)), tick=4)

        statistics = tmp_path / "class" / "net" / "eth0" / "statistics"
        actual = {name: int((statistics / name).read_text()) for name in os.listdir(statistics)}
        expected = (net.interface_counters(virtio, tick=4), "virtio-pci")
        assert expected == (
            actual,
            os.path.basename(os.readlink(pci.pci_device_dir(tmp_path, "0000:00:03.0") / "driver")),
        )

    def test_counters_grow_with_tick(self, tmp_path: Path) -> None:
        """Every counter of a later tick is at least the earlier one, and traffic grows."""
        before = net.interface_counters(VF1, tick=10)
        after = net.interface_counters(VF1, tick=11)

        assert all(after[name] >= before[name] for name in before)
        assert after["rx_bytes"] > before["rx_bytes"]


class TestInfinibandWriter:
    def test_links_device_and_class(self, tmp_path: Path) -> None:
        """``class/infiniband/<dev>`` links below the PCI function; ``device`` links back."""
        _write_all(tmp_path, SMALL, tick=0)

        device_link = tmp_path / "class" / "infiniband" / "mlx5_0"
        expected = (
            "../../devices/pci0000:4b/0000:4b:00.0/infiniband/mlx5_0",
            "../../../0000:4b:00.0",
        )
        assert expected == (os.readlink(device_link), os.readlink(device_link / "device"))

    def test_writes_port_counters(self, tmp_path: Path) -> None:
        """Each port has its raw ``counters/`` files (data in 4-octet words)."""
        _write_all(tmp_path, SMALL, tick=4)
        device = SMALL.rdma_devices[1]

        counters = tmp_path / "class" / "infiniband" / "mlx5_4" / "ports" / "2" / "counters"
        actual = {name: int((counters / name).read_text()) for name in os.listdir(counters)}
        assert infiniband.port_counters(device, 2, tick=4) == actual

    def test_port_files_as_ib_core_gives_them(self, tmp_path: Path) -> None:
        """A port has the attributes ib core's sysfs.c reads from the driver (state,
        phys_state, rate, link_layer) and the counters/ of a port with extended counters
        (pma_attrs_ext): the PortCounters error fields, port_xmit_wait, the traffic
        counters, 64 bits wide, and the packets by cast type."""
        _write_all(tmp_path, SMALL, tick=0)

        port_dir = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
        attributes = {
            name: (port_dir / name).read_text()
            for name in ("state", "phys_state", "rate", "link_layer")
        }
        pma_attrs_ext = {
            "symbol_error",
            "link_error_recovery",
            "link_downed",
            "port_rcv_errors",
            "port_rcv_remote_physical_errors",
            "port_rcv_switch_relay_errors",
            "port_xmit_discards",
            "port_xmit_constraint_errors",
            "port_rcv_constraint_errors",
            "local_link_integrity_errors",
            "excessive_buffer_overrun_errors",
            "VL15_dropped",
            "port_xmit_data",
            "port_rcv_data",
            "port_xmit_packets",
            "port_rcv_packets",
            "port_xmit_wait",
            "unicast_rcv_packets",
            "unicast_xmit_packets",
            "multicast_rcv_packets",
            "multicast_xmit_packets",
        }
        assert (
            {
                "state": "4: ACTIVE\n",
                "phys_state": "5: LinkUp\n",
                "rate": "400 Gb/sec (4X NDR)\n",
                "link_layer": "InfiniBand\n",
            },
            pma_attrs_ext,
        ) == (attributes, set(os.listdir(port_dir / "counters")))

    def test_the_demos_flap_comes_at_its_tick_and_stays(self, tmp_path: Path) -> None:
        """mlx5_1's error counts are those from before the exporter started until tick
        LINK_FLAP_TICK, where its link flaps (down once more, retrained twice, symbol
        errors around it); counters, they stay risen after."""
        (device,) = [d for d in demo_hardware().rdma_devices if d.name == "mlx5_1"]
        names = ("link_downed", "link_error_recovery", "symbol_error")

        def errors(tick: int) -> tuple[int, ...]:
            _write_all(tmp_path, replace(SMALL, rdma_devices=(device,)), tick=tick)
            counters = tmp_path / "class" / "infiniband" / "mlx5_1" / "ports" / "1" / "counters"
            return tuple(int((counters / name).read_text()) for name in names)

        ticks = (0, LINK_FLAP_TICK - 1, LINK_FLAP_TICK, LINK_FLAP_TICK + 1, 10 * LINK_FLAP_TICK)
        assert [(1, 3, 57)] * 2 + [(2, 5, 276)] * 3 == [errors(tick) for tick in ticks]

    def test_the_demos_flap_comes_after_a_scrape_at_the_shipped_interval(self) -> None:
        """At the default poll interval (the demo's tick), the flap comes after the
        shipped ServiceMonitor's scrape interval: Prometheus scrapes the counts from
        before first, so the link-down alert's increase() sees the flap."""
        monitor = yaml.safe_load(
            (REPO / "manifests/components/prometheus-operator/servicemonitor.yaml").read_text()
        )
        (endpoint,) = monitor["spec"]["endpoints"]
        scrape_s = float(endpoint["interval"].removesuffix("s"))
        assert LINK_FLAP_TICK * DEFAULT_POLL_INTERVAL_S > scrape_s


class TestRewrite:
    def test_rewriting_with_a_later_tick_moves_counters_on(self, tmp_path: Path) -> None:
        """Writing the tree again (links already there) succeeds and updates the counters."""
        _write_all(tmp_path, SMALL, tick=0)
        _write_all(tmp_path, SMALL, tick=5)

        rx_bytes = tmp_path / "class" / "net" / "ens1f0v1" / "statistics" / "rx_bytes"
        port_rcv = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports/1/counters/port_rcv_data"
        expected = (
            net.interface_counters(VF1, tick=5)["rx_bytes"],
            infiniband.port_counters(SMALL.rdma_devices[0], 1, tick=5)["port_rcv_data"],
        )
        assert expected == (int(rx_bytes.read_text()), int(port_rcv.read_text()))

    def test_leaves_no_temporary_files(self, tmp_path: Path) -> None:
        """Atomic replacement leaves nothing but the kernel's names behind."""
        _write_all(tmp_path, SMALL, tick=0)
        _write_all(tmp_path, SMALL, tick=1)

        expected: list[Path] = []
        assert expected == list(tmp_path.rglob(".*.tmp"))
