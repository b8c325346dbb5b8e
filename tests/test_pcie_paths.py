"""exporter.pcie_paths: how far on the PCIe tree a container's GPUs are from its NICs."""

from __future__ import annotations

import os
import shutil
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.collectors.base import CollectorContext
from exporter.collectors.pci import (
    PciCollector,
    pcie_path_of,
    read_switch_links,
    switch_peers_of,
)
from exporter.debugview import Filters, render_json, render_text
from exporter.join import join_snapshot
from exporter.model import (
    AllocatableResources,
    ClaimDevice,
    CollectorIssue,
    CollectorRun,
    ContainerResources,
    DeviceGroup,
    DeviceIdentity,
    DeviceReading,
    DraDevice,
    DraState,
    DynamicResource,
    HardwareKey,
    KeyKind,
    KubeletStatus,
    Owner,
    PciDevice,
    PodResources,
    Readings,
    Snapshot,
)
from exporter.pcie_paths import (
    PcieLevel,
    gpu_nic_paths,
    is_gpu,
    is_nic,
    pcie_level,
    pcie_path_families,
)
from exporter.sim.fixtures import write_tree
from exporter.sim.hardware import demo_hardware

CAPTURED = Path(__file__).parent / "fixtures" / "captured"

# An HGX-like tree: host bridge pci0000:14, root port 14:01.0, a switch (upstream port
# 15:00.0, downstream ports 16:0X.0); a second switch cascaded below 16:02.0.
SWITCH = ("pci0000:14", "0000:14:01.0", "0000:15:00.0")
GPU0 = (*SWITCH, "0000:16:00.0", "0000:17:00.0")
NIC0 = (*SWITCH, "0000:16:01.0", "0000:18:00.0")
VF0 = (*SWITCH, "0000:16:01.0", "0000:18:00.2")
CASCADED_GPU = (*SWITCH, "0000:16:02.0", "0000:19:00.0", "0000:1a:00.0", "0000:1b:00.0")
OTHER_ROOT_PORT_NIC = ("pci0000:14", "0000:14:03.0", "0000:20:00.0")
OTHER_HOST_BRIDGE_NIC = ("pci0000:30", "0000:30:01.0", "0000:31:00.0")

# Intel VMD: its endpoint 0000:00:0e.0 on host bridge pci0000:00, the root bus of its
# domain 10000 below it, root ports 10000:e0:0X.0 on that bus.
VMD = ("pci0000:00", "0000:00:0e.0", "pci10000:e0")
VMD_NVME = (*VMD, "10000:e0:06.0", "10000:e1:00.0")
VMD_NIC = (*VMD, "10000:e0:07.0", "10000:e2:00.0")
VMD_SWITCH_NIC = (*VMD, "10000:e0:07.0", "10000:e2:00.0", "10000:e3:01.0", "10000:e4:00.0")
VMD_SWITCH_GPU = (*VMD, "10000:e0:07.0", "10000:e2:00.0", "10000:e3:02.0", "10000:e5:00.0")
VMD_ON_ITS_BUS = (*VMD, "10000:e0:00.0")  # a function on the VMD's root bus itself
VMD_GPU_NEIGHBOUR = ("pci0000:00", "0000:00:01.0", "0000:01:00.0")
OTHER_VMD_NIC = ("pci0000:80", "0000:80:0e.0", "pci10001:e0", "10001:e0:06.0", "10001:e1:00.0")


def function(path: tuple[str, ...], *, numa: int | None = 0, nic: bool = False) -> PciDevice:
    address = path[-1] if path else "0000:99:00.0"
    class_id = "0x020000" if nic else "0x030200"
    return PciDevice(address, "0x10de", "0x2330", class_id, numa, pcie_path=path)


class TestLevels:
    @pytest.mark.parametrize(
        ("gpu", "nic", "level"),
        [
            pytest.param(GPU0, NIC0, PcieLevel.PIX, id="one switch"),
            pytest.param(GPU0, VF0, PcieLevel.PIX, id="a VF beside its PF"),
            pytest.param(CASCADED_GPU, NIC0, PcieLevel.PXB, id="two switches"),
            pytest.param(GPU0, OTHER_ROOT_PORT_NIC, PcieLevel.PHB, id="another root port"),
            pytest.param(GPU0, OTHER_HOST_BRIDGE_NIC, PcieLevel.NODE, id="another host bridge"),
            pytest.param(VMD_GPU_NEIGHBOUR, VMD_NIC, PcieLevel.PHB, id="behind a VMD"),
            pytest.param(VMD_NVME, VMD_NIC, PcieLevel.PHB, id="two root ports of a VMD"),
            pytest.param(VMD_ON_ITS_BUS, VMD_NIC, PcieLevel.PHB, id="on a VMD's bus"),
            pytest.param(VMD_SWITCH_GPU, VMD_SWITCH_NIC, PcieLevel.PIX, id="a switch behind"),
            pytest.param(VMD_SWITCH_GPU, VMD_NIC, PcieLevel.PHB, id="a switch, a root port"),
            pytest.param(VMD_GPU_NEIGHBOUR, OTHER_VMD_NIC, PcieLevel.NODE, id="another VMD"),
            pytest.param(
                ("pci0000:00", "0000:00:06.0"),
                ("pci0000:00", "0000:00:03.0"),
                PcieLevel.PHB,
                id="a VM's flat bus",
            ),
        ],
    )
    def test_levels_as_nvidia_smi_names_them(
        self, gpu: tuple[str, ...], nic: tuple[str, ...], level: PcieLevel
    ) -> None:
        assert level == pcie_level(function(gpu), function(nic, nic=True))
        assert level == pcie_level(function(nic, nic=True), function(gpu)), "symmetric"

    def test_other_numa_node_is_sys_even_below_one_host_bridge_name(self) -> None:
        """NUMA nodes decide before host bridges: a pair across sockets is SYS."""
        far = function(OTHER_HOST_BRIDGE_NIC, numa=1, nic=True)
        assert PcieLevel.SYS == pcie_level(function(GPU0, numa=0), far)

    def test_a_numa_node_sysfs_does_not_give_is_taken_as_the_same(self) -> None:
        far = function(OTHER_HOST_BRIDGE_NIC, numa=None, nic=True)
        assert PcieLevel.NODE == pcie_level(function(GPU0, numa=1), far)

    def test_a_switch_shared_by_numa_nodes_still_reads_pix(self) -> None:
        """Below one switch the pair never reaches a CPU, whatever numa_node says."""
        assert PcieLevel.PIX == pcie_level(function(GPU0, numa=0), function(NIC0, numa=1))

    def test_no_place_no_level(self) -> None:
        assert pcie_level(function(()), function(NIC0, nic=True)) is None
        assert pcie_level(function(GPU0), function((), nic=True)) is None


def _bus_link(sysfs: Path, real: Path) -> Path:
    link = sysfs / "bus" / "pci" / "devices" / real.name
    link.parent.mkdir(parents=True, exist_ok=True)
    real.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(real, link.parent))
    return link


class TestPlaceInTheTree:
    def test_a_function_below_a_switch(self, tmp_path: Path) -> None:
        real = tmp_path / "devices" / Path(*GPU0)
        assert GPU0 == pcie_path_of(_bus_link(tmp_path, real))

    def test_a_hyper_v_bus_starts_below_other_folders(self, tmp_path: Path) -> None:
        vmbus = "LNXSYSTM:00/LNXSYBUS:00/PNP0A03:00/device:07/VMBUS:01"
        real = tmp_path / "devices" / vmbus / "7870a1b2-0000" / "pci7870:00" / "7870:00:00.0"
        assert ("pci7870:00", "7870:00:00.0") == pcie_path_of(_bus_link(tmp_path, real))

    def test_a_function_behind_a_vmd_sits_under_the_vmds_host_bridge(self, tmp_path: Path) -> None:
        """Intel VMD (the endpoint 0000:00:0e.0) opens a bus of its own, in a domain
        from 0x10000, below itself: the path climbs past it to pci0000:00."""
        real = tmp_path / "devices" / Path(*VMD_NVME)
        assert VMD_NVME == pcie_path_of(_bus_link(tmp_path, real))

    def test_gpu_and_a_nic_behind_a_vmd_of_one_host_bridge_read_phb(self, tmp_path: Path) -> None:
        """The kernel's layout, as the collector reads it: the VMD's bus is no host
        bridge, so a GPU on a root port of pci0000:00 and a NIC behind the VMD on it
        meet at that host bridge (PHB), not between two (NODE)."""
        sysfs = tmp_path / "sys"
        for path, class_id in ((VMD_GPU_NEIGHBOUR, "0x030200"), (VMD_NIC, "0x020000")):
            real = _bus_link(sysfs, sysfs / "devices" / Path(*path))
            for name, text in (("vendor", "0x8086"), ("device", "0x1234"), ("class", class_id)):
                (real / name).write_text(f"{text}\n")
            (real / "numa_node").write_text("0\n")
        found = PciCollector(CollectorContext(sysfs=sysfs)).collect()
        by_address = {d.address: d for d in found.pci_devices}
        gpu, nic = by_address[VMD_GPU_NEIGHBOUR[-1]], by_address[VMD_NIC[-1]]
        assert (VMD_GPU_NEIGHBOUR, VMD_NIC) == (gpu.pcie_path, nic.pcie_path)
        assert PcieLevel.PHB == pcie_level(gpu, nic) == pcie_level(nic, gpu)

    def test_plain_folders_say_nothing(self, tmp_path: Path) -> None:
        """A fixture of plain folders (no link into devices/) has no place."""
        plain = tmp_path / "bus" / "pci" / "devices" / "0000:17:00.0"
        plain.mkdir(parents=True)
        assert () == pcie_path_of(plain)

    def test_a_link_to_a_folder_of_another_name_says_nothing(self, tmp_path: Path) -> None:
        real = tmp_path / "devices" / "pci0000:14" / "0000:14:01.0" / "0000:15:00.0"
        real.mkdir(parents=True)
        link = tmp_path / "bus" / "pci" / "devices" / "0000:17:00.0"
        link.parent.mkdir(parents=True)
        link.symlink_to(os.path.relpath(real, link.parent))
        assert () == pcie_path_of(link)

    def test_the_simulated_node_as_the_collector_reads_it(self, tmp_path: Path) -> None:
        write_tree(
            sysfs=tmp_path / "sys", procfs_root=tmp_path / "proc", hardware=demo_hardware(), tick=0
        )
        found = PciCollector(CollectorContext(sysfs=tmp_path / "sys")).collect()
        paths = {d.address: d.pcie_path for d in found.pci_devices}
        assert (
            "pci0000:14",
            "0000:14:01.0",
            "0000:15:00.0",
            "0000:16:01.0",
            "0000:4b:00.3",
        ) == paths["0000:4b:00.3"], "a VF sits beside its PF"
        assert ("pci0000:30", "0000:30:01.0", "0000:31:00.0") == paths["0000:31:00.0"]
        assert ("pci0000:5d", "0000:5d:00.0") == paths["0000:5d:00.0"], "off its own bridge"
        assert "0000:15:00.0" not in paths, "bridges are not a reported class"

    def test_a_real_vm_with_an_h100_reads_phb(self) -> None:
        """The capture of a Firecracker VM: the H100 and the virtio NIC hang off one
        host bridge, as on most cloud VMs, so every GPU-NIC pair reads PHB there."""
        sysfs = CAPTURED / "h100-firecracker" / "sys"
        found = PciCollector(CollectorContext(sysfs=sysfs)).collect()
        by_address = {d.address: d for d in found.pci_devices}
        gpu, nic = by_address["0000:00:06.0"], by_address["0000:00:03.0"]
        assert ("pci0000:00", "0000:00:06.0") == gpu.pcie_path
        assert ("pci0000:00", "0000:00:03.0") == nic.pcie_path
        assert PcieLevel.PHB == pcie_level(gpu, nic)


# A node for the join: GPU 0 below the switch of NIC 0's VFs, GPU 1 below another
# host bridge of the same NUMA node.
GPU0_UUID = "GPU-00000000-0000-0000-0000-000000000000"
GPU1_UUID = "GPU-11111111-1111-1111-1111-111111111111"
GPU1 = ("pci0000:30", "0000:30:01.0", "0000:31:00.0")
NEAR_VFS = tuple((*SWITCH, "0000:16:01.0", f"0000:18:00.{n}") for n in (2, 3))
FAR_VF = ("pci0000:50", "0000:50:01.0", "0000:51:00.2")
VF_RESOURCE = "mellanox.com/cx7_sriov_vf"
OWNER = Owner("ml", "trainer-0", "trainer")


def _gpu_reading(uuid: str, path: tuple[str, ...]) -> DeviceReading:
    return DeviceReading(
        uuid,
        (HardwareKey(KeyKind.GPU_UUID, uuid), HardwareKey(KeyKind.PCI, path[-1])),
        DeviceIdentity(uuid=uuid, pci_address=path[-1], vendor="nvidia"),
        standalone=True,
    )


def _snapshot(
    devices: tuple[DeviceGroup, ...],
    *,
    claims: tuple[DynamicResource, ...] = (),
    dra: DraState = DraState(),  # noqa: B008 - frozen
    extra_vfs: tuple[tuple[str, ...], ...] = (),
    links: tuple[tuple[str, str], ...] = (),
) -> Snapshot:
    """OWNER's container holding ``devices`` and ``claims`` on the node above, with
    ``extra_vfs`` more of VF_RESOURCE and ``links`` between switches."""
    by_switch = defaultdict(set)
    for one, other in links:
        by_switch[one].add(other)
        by_switch[other].add(one)
    peers = {switch: frozenset(linked) for switch, linked in by_switch.items()}
    functions = tuple(
        replace(f, switch_peers=switch_peers_of(f.pcie_path, peers))
        for f in (
            function(GPU0),
            function(GPU1),
            *(function(p, nic=True) for p in (*NEAR_VFS, FAR_VF, *extra_vfs)),
        )
    )
    runs = (
        CollectorRun(
            "nvml",
            True,
            0.0,
            Readings(devices=(_gpu_reading(GPU0_UUID, GPU0), _gpu_reading(GPU1_UUID, GPU1))),
        ),
        CollectorRun("pci", True, 0.0, Readings(pci_devices=functions)),
    )
    allocatable = AllocatableResources(
        devices=(
            DeviceGroup("nvidia.com/gpu", (GPU0_UUID, GPU1_UUID), (0,)),
            DeviceGroup(VF_RESOURCE, tuple(p[-1] for p in (*NEAR_VFS, FAR_VF, *extra_vfs)), (0,)),
        )
    )
    return _joined(runs, allocatable, devices, claims=claims, dra=dra)


def _joined(
    runs: tuple[CollectorRun, ...],
    allocatable: AllocatableResources,
    devices: tuple[DeviceGroup, ...],
    *,
    claims: tuple[DynamicResource, ...] = (),
    dra: DraState = DraState(),  # noqa: B008 - frozen
) -> Snapshot:
    """The node joined with OWNER's container holding ``devices`` and ``claims``."""
    container = ContainerResources(OWNER.container, devices=devices, dynamic_resources=claims)
    return join_snapshot(
        node="node-a",
        collected_at=1000.0,
        kubelet=KubeletStatus(up=True, socket="/kubelet.sock", api=(("List", True),)),
        pods=(PodResources(OWNER.namespace, OWNER.pod, (container,)),),
        allocatable=allocatable,
        cpu_numa={},
        dra=dra,
        collector_runs=runs,
    )


def _dra_nic_snapshot(vf: str) -> Snapshot:
    """GPU 0 from the device plugin, and the VF at ``vf`` through an SR-IOV DRA claim."""
    driver = "sriovnetwork.k8snetworkplumbingwg.io"
    prepared = DraDevice(driver, "node-a", "vf-0", (HardwareKey(KeyKind.PCI, vf),), "checkpoint")
    dra = DraState(devices=(replace(prepared, claim_namespace="ml", claim_name="rdma"),))
    claim = DynamicResource("rdma", "ml", (ClaimDevice(driver, "node-a", "vf-0"),))
    return _snapshot((DeviceGroup("nvidia.com/gpu", (GPU0_UUID,), (0,)),), claims=(claim,), dra=dra)


class TestContainers:
    def test_a_far_nic_beside_a_near_one_left_unheld(self) -> None:
        snapshot = _snapshot(
            (
                DeviceGroup("nvidia.com/gpu", (GPU0_UUID,), (0,)),
                DeviceGroup(VF_RESOURCE, (FAR_VF[-1],), (0,)),
            )
        )
        (path,) = gpu_nic_paths(snapshot)
        assert (OWNER, "nvidia.com/gpu", GPU0_UUID) == (path.owner, path.resource, path.device_id)
        assert (VF_RESOURCE, FAR_VF[-1]) == (path.nic_resource, path.nic_device_id)
        assert (PcieLevel.NODE, PcieLevel.PIX) == (path.level, path.best_level)

    def test_each_gpu_gets_its_nearest_nic_of_equals_the_lowest_id(self) -> None:
        held_vfs = (NEAR_VFS[1][-1], NEAR_VFS[0][-1], FAR_VF[-1])
        snapshot = _snapshot(
            (
                DeviceGroup("nvidia.com/gpu", (GPU0_UUID, GPU1_UUID), (0,)),
                DeviceGroup(VF_RESOURCE, held_vfs, (0,)),
            )
        )
        found = {p.device_id: p for p in gpu_nic_paths(snapshot)}
        assert (NEAR_VFS[0][-1], PcieLevel.PIX) == (
            found[GPU0_UUID].nic_device_id,
            found[GPU0_UUID].level,
        )
        # Every VF is another host bridge away from GPU 1: the lowest ID names the level.
        assert (NEAR_VFS[0][-1], PcieLevel.NODE, PcieLevel.NODE) == (
            found[GPU1_UUID].nic_device_id,
            found[GPU1_UUID].level,
            found[GPU1_UUID].best_level,
        )

    def test_gpus_alone_or_nics_alone_have_no_path(self) -> None:
        gpus = _snapshot((DeviceGroup("nvidia.com/gpu", (GPU0_UUID, GPU1_UUID), (0,)),))
        nics = _snapshot((DeviceGroup(VF_RESOURCE, (NEAR_VFS[0][-1], FAR_VF[-1]), (0,)),))
        assert () == gpu_nic_paths(gpus)
        assert () == gpu_nic_paths(nics)

    def test_a_dra_nic_has_a_level_but_no_best(self) -> None:
        """DRA devices are not in the kubelet's allocatable list: no node best to compare."""
        snapshot = _dra_nic_snapshot(NEAR_VFS[0][-1])
        (path,) = gpu_nic_paths(snapshot)
        assert ("sriovnetwork.k8snetworkplumbingwg.io", "vf-0") == (
            path.nic_resource,
            path.nic_device_id,
        )
        assert (PcieLevel.PIX, None) == (path.level, path.best_level)
        level, best = pcie_path_families(snapshot)
        assert 1 == len(level.rows)
        assert [] == best.rows, "no best level without the kubelet's allocatable list"

    def test_families_name_the_gpu_its_holder_and_the_nic(self) -> None:
        snapshot = _snapshot(
            (
                DeviceGroup("nvidia.com/gpu", (GPU0_UUID,), (0,)),
                DeviceGroup(VF_RESOURCE, (FAR_VF[-1],), (0,)),
            )
        )
        level, best = pcie_path_families(snapshot)
        device = (OWNER.namespace, OWNER.pod, OWNER.container, "nvidia.com/gpu", GPU0_UUID)
        assert [((*device, VF_RESOURCE, FAR_VF[-1]), 4)] == level.rows
        assert [((*device, VF_RESOURCE), 1)] == best.rows


class TestDebugView:
    def far_snapshot(self) -> Snapshot:
        return _snapshot(
            (
                DeviceGroup("nvidia.com/gpu", (GPU0_UUID, GPU1_UUID), (0,)),
                DeviceGroup(VF_RESOURCE, (FAR_VF[-1],), (0,)),
            )
        )

    def test_the_text_marks_a_gpu_that_lost_gpudirect_rdma(self) -> None:
        """A line per GPU and NIC resource; "!" where the level is past PXB and the node
        had one within it (GPU 0); GPU 1, NODE with NODE the nearest, is not marked."""
        text = render_text(self.far_snapshot(), filters=Filters(), now=1000.0)
        section = text.split("# GPU to NIC PCIe paths\n", 1)[1].splitlines()
        holder = "ml/trainer-0/trainer"
        assert [
            ["GPU", "NIC_RESOURCE", "NIC", "LEVEL", "NODE_NEAREST", "HOLDER"],
            [GPU0_UUID, VF_RESOURCE, FAR_VF[-1], "NODE", "!", "PIX", holder],
            [GPU1_UUID, VF_RESOURCE, FAR_VF[-1], "NODE", "NODE", holder],
        ] == [line.split() for line in section]

    def test_json_and_filters(self) -> None:
        """JSON lists the same under gpu_nic_paths; a filter that hides the container
        hides its paths, and the text its section."""
        shown = render_json(self.far_snapshot(), filters=Filters(), now=1000.0)
        hidden = Filters(pod="another")
        assert {
            "namespace": "ml",
            "pod": "trainer-0",
            "container": "trainer",
            "resource": "nvidia.com/gpu",
            "device_id": GPU0_UUID,
            "nic_resource": VF_RESOURCE,
            "nic_device_id": FAR_VF[-1],
            "level": "NODE",
            "node_nearest_level": "PIX",
        } == shown["gpu_nic_paths"][0]
        assert ([], False) == (
            render_json(self.far_snapshot(), filters=hidden, now=1000.0)["gpu_nic_paths"],
            "PCIe paths" in render_text(self.far_snapshot(), filters=hidden, now=1000.0),
        )


class TestReadingsNcclWouldMake:
    """Cases the levels above leave open, each as NCCL or nvidia-smi reads it."""

    def test_whatever_function_sits_two_folders_up_is_the_switch_the_root_port_too(
        self,
    ) -> None:
        """NCCL (ncclTopoGetXmlFromSys) takes the function two folders up for the switch
        while it is a PCI address, a root port included: two functions each below a
        bridge of their own under one root port share it (PIX), and only the host bridge
        folder ends the climb."""
        gpu = ("pci0000:00", "0000:00:1c.0", "0000:01:00.0", "0000:02:00.0")
        nic = ("pci0000:00", "0000:00:1c.0", "0000:01:00.1", "0000:03:00.0")
        assert PcieLevel.PIX == pcie_level(function(gpu), function(nic, nic=True))

    def test_an_unknown_numa_node_on_either_side_is_taken_as_the_same(self) -> None:
        """-1 in sysfs (None) on the GPU's side too: never SYS, whichever side says it."""
        gpu = function(GPU0, numa=None)
        assert PcieLevel.NODE == pcie_level(gpu, function(OTHER_HOST_BRIDGE_NIC, numa=1, nic=True))
        assert PcieLevel.NODE == pcie_level(function(OTHER_HOST_BRIDGE_NIC, numa=1, nic=True), gpu)

    @pytest.mark.parametrize(
        ("class_id", "gpu", "nic"),
        [
            pytest.param("0x030200", True, False, id="3D controller (NVIDIA data-centre GPUs)"),
            pytest.param("0x030000", True, False, id="VGA controller"),
            pytest.param("0x120000", True, False, id="processing accelerator (AMD MI300X)"),
            pytest.param("0x020000", False, True, id="Ethernet"),
            pytest.param("0x020700", False, True, id="InfiniBand (ConnectX in IB mode)"),
            pytest.param("0x060400", False, False, id="PCI bridge"),
        ],
    )
    def test_gpus_accelerators_and_every_network_class(
        self, class_id: str, gpu: bool, nic: bool
    ) -> None:
        found = PciDevice("0000:17:00.0", "0x10de", "0x2330", class_id, 0, pcie_path=GPU0)
        assert (gpu, nic) == (is_gpu(found), is_nic(found))


def _pair_snapshot(
    gpu: tuple[str, ...], held: tuple[str, ...], offered: tuple[tuple[str, ...], ...]
) -> Snapshot:
    """GPU 0 at ``gpu`` and a NIC at ``held`` in one container; the NIC resource also
    offers NICs at ``offered``, in that order before the held one."""
    nics = (*offered, held)
    runs = (
        CollectorRun("nvml", True, 0.0, Readings(devices=(_gpu_reading(GPU0_UUID, gpu),))),
        CollectorRun(
            "pci",
            True,
            0.0,
            Readings(pci_devices=(function(gpu), *(function(p, nic=True) for p in nics))),
        ),
    )
    allocatable = AllocatableResources(
        devices=(
            DeviceGroup("nvidia.com/gpu", (GPU0_UUID,), (0,)),
            DeviceGroup(VF_RESOURCE, tuple(p[-1] for p in nics), (0,)),
        )
    )
    held_devices = (
        DeviceGroup("nvidia.com/gpu", (GPU0_UUID,), (0,)),
        DeviceGroup(VF_RESOURCE, (held[-1],), (0,)),
    )
    return _joined(runs, allocatable, held_devices)


# A NIC beside the cascaded GPU, below the second switch.
CASCADED_NIC = (*SWITCH, "0000:16:02.0", "0000:19:00.0", "0000:1a:01.0", "0000:1c:00.0")


class TestNodeBest:
    def test_the_best_tells_nics_of_one_host_bridge_apart(self) -> None:
        """The node's NICs are measured once per place, and a place is every bridge
        above a NIC: one on another root port of the GPU's host bridge, listed first,
        does not stand for one below the GPU's switch."""
        snapshot = _pair_snapshot(GPU0, FAR_VF, (OTHER_ROOT_PORT_NIC, NIC0))
        (path,) = gpu_nic_paths(snapshot)
        assert (PcieLevel.NODE, PcieLevel.PIX) == (path.level, path.best_level)


class TestDebugViewMark:
    @pytest.mark.parametrize(
        ("gpu", "held", "offered", "line"),
        [
            pytest.param(
                CASCADED_GPU, NIC0, (CASCADED_NIC,), ["PXB", "PIX"], id="PXB, PIX near: kept"
            ),
            pytest.param(
                CASCADED_GPU,
                OTHER_HOST_BRIDGE_NIC,
                (NIC0,),
                ["NODE", "!", "PXB"],
                id="NODE, PXB near: lost",
            ),
            pytest.param(
                GPU0, OTHER_ROOT_PORT_NIC, (NIC0,), ["PHB", "!", "PIX"], id="PHB, PIX near: lost"
            ),
            pytest.param(
                GPU0,
                OTHER_HOST_BRIDGE_NIC,
                (OTHER_ROOT_PORT_NIC,),
                ["NODE", "PHB"],
                id="NODE, PHB near: never had it",
            ),
        ],
    )
    def test_the_mark_is_the_alerts_rule(
        self,
        gpu: tuple[str, ...],
        held: tuple[str, ...],
        offered: tuple[tuple[str, ...], ...],
        line: list[str],
    ) -> None:
        """ "!" where the level is past PXB and the node's nearest within it, as
        PodresourcesGPUNICNotAligned says: not for PXB, and not where the nearest is
        past PXB too."""
        text = render_text(_pair_snapshot(gpu, held, offered), filters=Filters(), now=1000.0)
        (row,) = text.split("# GPU to NIC PCIe paths\n", 1)[1].splitlines()[1:]
        assert [GPU0_UUID, VF_RESOURCE, held[-1], *line, "ml/trainer-0/trainer"] == row.split()

    def test_a_dra_nic_shows_no_nearest(self) -> None:
        """A DRA NIC has no node best: "-" in the text, null in JSON, and no mark."""
        snapshot = _dra_nic_snapshot(FAR_VF[-1])
        text = render_text(snapshot, filters=Filters(), now=1000.0)
        (row,) = text.split("# GPU to NIC PCIe paths\n", 1)[1].splitlines()[1:]
        driver = "sriovnetwork.k8snetworkplumbingwg.io"
        assert [GPU0_UUID, driver, "vf-0", "NODE", "-", "ml/trainer-0/trainer"] == row.split()
        (shown,) = render_json(snapshot, filters=Filters(), now=1000.0)["gpu_nic_paths"]
        assert ("NODE", None) == (shown["level"], shown["node_nearest_level"])


# Two switches on other root ports of GPU 0's host bridge, as a PEX89000 split in two
# virtual switches shows them: the NIC's switch 21:00.0 below root port 14:03.0.
LINKED_SWITCH = ("pci0000:14", "0000:14:03.0", "0000:21:00.0")
LINKED_NIC = (*LINKED_SWITCH, "0000:22:00.0", "0000:23:00.0")


def _linked(path: tuple[str, ...], *peers: str, numa: int = 0, nic: bool = False) -> PciDevice:
    return replace(function(path, numa=numa, nic=nic), switch_peers=frozenset(peers))


class TestSwitchLinks:
    """Broadcom's virtual switch links, as NCCL reads them: a GPU and a NIC below two
    linked switches are PXB, not PHB, and so keep GPUDirect RDMA."""

    def test_linked_switches_are_pxb_where_the_tree_says_phb(self) -> None:
        gpu, nic = _linked(GPU0, "0000:21:00.0"), _linked(LINKED_NIC, "0000:15:00.0", nic=True)
        assert PcieLevel.PXB == pcie_level(gpu, nic) == pcie_level(nic, gpu)
        assert PcieLevel.PHB == pcie_level(function(GPU0), function(LINKED_NIC, nic=True))

    def test_a_link_further_up_the_chain_counts(self) -> None:
        """The GPU's nearest switch is 19:00.0; the one above it, 15:00.0, is linked."""
        gpu = _linked(CASCADED_GPU, "0000:21:00.0")
        assert PcieLevel.PXB == pcie_level(gpu, _linked(LINKED_NIC, "0000:15:00.0", nic=True))

    def test_a_function_has_the_peers_of_every_switch_above_it(self) -> None:
        links = {
            "0000:15:00.0": frozenset({"0000:21:00.0"}),
            "0000:19:00.0": frozenset({"0000:30:00.0"}),
            "0000:21:00.0": frozenset({"0000:15:00.0"}),
        }
        assert {"0000:21:00.0", "0000:30:00.0"} == switch_peers_of(CASCADED_GPU, links)
        assert {"0000:21:00.0"} == switch_peers_of(GPU0, links)
        assert frozenset() == switch_peers_of(OTHER_ROOT_PORT_NIC, links), "no switch above"

    def test_a_link_between_numa_nodes_stays_in_the_switches(self) -> None:
        gpu = _linked(GPU0, "0000:21:00.0", numa=0)
        nic = _linked(LINKED_NIC, "0000:15:00.0", numa=1, nic=True)
        assert PcieLevel.PXB == pcie_level(gpu, nic)

    def test_a_shared_switch_is_still_pix(self) -> None:
        gpu, nic = _linked(GPU0, "0000:21:00.0"), _linked(NIC0, "0000:21:00.0", nic=True)
        assert PcieLevel.PIX == pcie_level(gpu, nic)

    def test_a_link_to_a_switch_elsewhere_changes_nothing(self) -> None:
        gpu = _linked(GPU0, "0000:99:00.0")
        assert PcieLevel.PHB == pcie_level(gpu, _linked(LINKED_NIC, nic=True))

    def test_the_alert_rule_no_longer_holds_for_a_nic_beyond_a_link(self) -> None:
        """trainer-0's VF below the linked switch: PXB, no GPUDirect cost to report."""
        vf = (*LINKED_SWITCH, "0000:22:01.0", "0000:24:00.2")
        snapshot = _snapshot(
            (
                DeviceGroup("nvidia.com/gpu", (GPU0_UUID,), (0,)),
                DeviceGroup(VF_RESOURCE, (vf[-1],), (0,)),
            ),
            extra_vfs=(vf,),
            links=(("0000:15:00.0", "0000:21:00.0"),),
        )
        (path,) = gpu_nic_paths(snapshot)
        assert (PcieLevel.PXB, PcieLevel.PIX, False) == (
            path.level,
            path.best_level,
            path.placement_cost_gpudirect,
        )

    @pytest.mark.parametrize("linked", ["0000:19:00.0", "0000:15:00.0"])
    def test_a_link_at_either_switch_of_a_cascade_counts_asked_from_either_end(
        self, linked: str
    ) -> None:
        """The GPU's switches are 19:00.0 and, above it, 15:00.0: a link from either to
        the NIC's switch is a path through switches alone (paths.cc takes any PCI-to-PCI
        hop as PXB), whichever of the pair is asked about first."""
        gpu = _linked(CASCADED_GPU, "0000:21:00.0")
        nic = _linked(LINKED_NIC, linked, nic=True)
        assert PcieLevel.PXB == pcie_level(gpu, nic) == pcie_level(nic, gpu)

    def test_links_to_switches_neither_is_below_join_nothing(self) -> None:
        """Two split switches, the GPU below one, the NIC below the other: each has a
        peer, but no link joins their switches, so the pair still meets at the CPUs."""
        gpu = _linked(GPU0, "0000:21:00.0")
        other = ("pci0000:30", "0000:30:01.0", "0000:40:00.0", "0000:41:00.0", "0000:42:00.0")
        nic = _linked(other, "0000:50:00.0", nic=True)
        assert PcieLevel.NODE == pcie_level(gpu, nic) == pcie_level(nic, gpu)

    def test_the_switch_a_pair_shares_decides_before_any_link(self) -> None:
        """GPU and NIC below one switch, 19:00.0, linked to the switch above it: still
        PIX, as NCCL keeps the nearer of its paths (GPU, switch, NIC) whatever links
        the switches have."""
        nic = (*CASCADED_GPU[:-2], "0000:1a:01.0", "0000:1c:00.0")
        gpu = _linked(CASCADED_GPU, "0000:15:00.0", "0000:19:00.0")
        near = _linked(nic, "0000:15:00.0", "0000:19:00.0", nic=True)
        assert PcieLevel.PIX == pcie_level(gpu, near) == pcie_level(near, gpu)


def _demo_with_links(sysfs: Path, *links: tuple[str, str]) -> None:
    hardware = replace(demo_hardware(), switch_links=links)
    write_tree(sysfs=sysfs, procfs_root=sysfs.parent / "proc", hardware=hardware, tick=0)


# The demo's two switches: GPU 0 and Mellanox PF 0 below 15:00.0 (NUMA node 0); GPUs 2
# and 3 and PF 1 below c8:00.0 (node 1).
DEMO_SWITCHES = ("0000:15:00.0", "0000:c8:00.0")
LINKS_DIR = ("kernel", "pci_switch_link", "virtual_switch_links")


def _peers(readings: Readings) -> dict[str, frozenset[str]]:
    return {d.address: d.switch_peers for d in readings.pci_devices if d.switch_peers}


def _below(readings: Readings, switch: str) -> set[str]:
    return {d.address for d in readings.pci_devices if switch in d.pcie_path}


class TestSwitchLinksRead:
    """The pci collector reads the links where Broadcom's module lists them."""

    def test_every_function_below_a_linked_switch_has_the_peer(self, tmp_path: Path) -> None:
        sysfs = tmp_path / "sys"
        _demo_with_links(sysfs, DEMO_SWITCHES)
        found = PciCollector(CollectorContext(sysfs=sysfs)).collect()
        left, right = DEMO_SWITCHES
        expected = {a: frozenset({right}) for a in _below(found, left)}
        expected.update({a: frozenset({left}) for a in _below(found, right)})
        assert 13 == len(expected), "3 GPUs, 2 PFs and their 8 VFs below the two switches"
        assert (expected, ()) == (_peers(found), found.issues)
        by_address = {d.address: d for d in found.pci_devices}
        # The demo's llm-server: its GPU below c8:00.0, its VF below 15:00.0, across
        # the sockets (SYS) but for the link.
        gpu, vf = by_address["0000:b1:00.0"], by_address["0000:4b:00.2"]
        assert PcieLevel.PXB == pcie_level(gpu, vf)
        assert PcieLevel.SYS == pcie_level(
            replace(gpu, switch_peers=frozenset()), replace(vf, switch_peers=frozenset())
        )

    def test_the_links_appear_and_go_after_the_exporter_started(self, tmp_path: Path) -> None:
        """The module fills its folders when NCCL first reads its refresh file, after the
        exporter started; a function's reading changes only when its peers do."""
        sysfs = tmp_path / "sys"
        _demo_with_links(sysfs)
        collector = PciCollector(CollectorContext(sysfs=sysfs))
        assert {} == _peers(collector.collect())
        _demo_with_links(sysfs, DEMO_SWITCHES)
        linked = collector.collect()
        again = collector.collect()
        assert 13 == len(_peers(linked))
        assert _peers(linked) == _peers(again)
        assert all(a is b for a, b in zip(linked.pci_devices, again.pci_devices, strict=True))
        shutil.rmtree(sysfs / "kernel")
        gone = collector.collect()
        assert ({}, ()) == (_peers(gone), gone.issues)

    def test_a_link_listed_from_one_end_only_is_not_a_link(self, tmp_path: Path) -> None:
        sysfs = tmp_path / "sys"
        _demo_with_links(sysfs, DEMO_SWITCHES)
        left, right = DEMO_SWITCHES
        sysfs.joinpath(*LINKS_DIR, right, left).unlink()
        assert {} == _peers(PciCollector(CollectorContext(sysfs=sysfs)).collect())

    def test_entries_that_name_no_function_on_the_bus_are_left_out(self, tmp_path: Path) -> None:
        """NCCL keeps only names of PCI functions it finds; so do we, and never read
        the refresh file, whose read rescans the bus."""
        sysfs = tmp_path / "sys"
        _demo_with_links(sysfs, DEMO_SWITCHES)
        folders = sysfs.joinpath(*LINKS_DIR)
        left, right = DEMO_SWITCHES
        for here, there in ((left, "0000:ee:00.0"), ("0000:ee:00.0", left)):
            (folders / here / there).mkdir(parents=True, exist_ok=True)
        (folders / left / "not-a-function").mkdir()
        (folders / "README").write_text("a stray file\n")
        (folders / left / f".{right}.tmp").symlink_to(f"../{right}")
        refresh = sysfs / "kernel" / "pci_switch_link" / "refresh_switch_toplogy"
        refresh.chmod(0)  # a read would fail (as root too: it is a fixture)
        found = PciCollector(CollectorContext(sysfs=sysfs)).collect()
        assert {frozenset({left}), frozenset({right})} == set(_peers(found).values())
        assert () == found.issues

    def test_a_folder_that_cannot_be_listed_is_an_issue(self, tmp_path: Path) -> None:
        sysfs = tmp_path / "sys"
        _demo_with_links(sysfs, DEMO_SWITCHES)
        left = DEMO_SWITCHES[0]
        broken = sysfs.joinpath(*LINKS_DIR, left)
        shutil.rmtree(broken)
        broken.symlink_to(left)  # a loop: ELOOP, as root too
        found = PciCollector(CollectorContext(sysfs=sysfs)).collect()
        assert {} == _peers(found), "the other end alone lists the link"
        (problem,) = found.issues
        assert ("unreadable", True) == (problem.error, f"cannot list {broken}" in problem.detail)
        assert len(found.pci_devices) > 20, "the functions are still read"

    def test_a_link_to_a_switch_not_broadcoms_is_not_a_link(self, tmp_path: Path) -> None:
        """NCCL reads a switch's links only where its vendor is 0x1000 (xml.cc): with
        the demo's second switch a PLX one (0x10b5), NCCL would have the link one way
        at most, so it is no link here, and no issue."""
        sysfs = tmp_path / "sys"
        _demo_with_links(sysfs, DEMO_SWITCHES)
        right = sysfs / "bus" / "pci" / "devices" / DEMO_SWITCHES[1]
        (right / "vendor").write_text("0x10b5\n")
        found = PciCollector(CollectorContext(sysfs=sysfs)).collect()
        assert ({}, ()) == (_peers(found), found.issues)

    def test_a_links_folder_that_cannot_be_listed_is_an_issue(self, tmp_path: Path) -> None:
        """The module's folder is there but cannot be listed: an issue naming it, no
        links, and every function still read."""
        sysfs = tmp_path / "sys"
        _demo_with_links(sysfs, DEMO_SWITCHES)
        folders = sysfs.joinpath(*LINKS_DIR)
        shutil.rmtree(folders)
        folders.symlink_to(folders.name)  # a loop: ELOOP, as root too
        found = PciCollector(CollectorContext(sysfs=sysfs)).collect()
        (problem,) = found.issues
        assert ("unreadable", True) == (problem.error, f"cannot list {folders}" in problem.detail)
        assert {} == _peers(found)
        assert len(found.pci_devices) > 20, "the functions are still read"


# Three switches' upstream ports, for read_switch_links alone: the demo's two and one more.
LEFT, RIGHT, THIRD = (*DEMO_SWITCHES, "0000:9a:00.0")


def _links_folder(root: Path, listed: dict[str, tuple[str, ...]]) -> Path:
    """A virtual_switch_links folder: for each switch, an entry per peer it lists."""
    for switch, peers in listed.items():
        (root / switch).mkdir(parents=True)
        for peer in peers:
            (root / switch / peer).symlink_to(f"../{peer}")
    return root


class TestReadSwitchLinks:
    """read_switch_links on its own: which links count, and what a bad folder costs."""

    def test_a_switch_whose_links_only_it_lists_has_no_entry(self, tmp_path: Path) -> None:
        """THIRD lists RIGHT, which does not list it back: THIRD has no link at all, so
        no entry (the collector then skips recomputing peers on such nodes)."""
        folder = _links_folder(tmp_path, {LEFT: (RIGHT,), RIGHT: (LEFT,), THIRD: (RIGHT,)})
        issues: list[CollectorIssue] = []
        links = read_switch_links(folder, on_bus=(LEFT, RIGHT, THIRD), issues=issues)
        assert ({LEFT: {RIGHT}, RIGHT: {LEFT}}, []) == (links, issues)

    def test_a_link_to_a_name_not_on_the_bus_is_not_a_link(self, tmp_path: Path) -> None:
        """THIRD and LEFT list each other, but THIRD is not on the bus: NCCL keeps only
        names whose real path it finds (ncclOsGetPciPath), and so do we."""
        folder = _links_folder(tmp_path, {LEFT: (RIGHT, THIRD), RIGHT: (LEFT,), THIRD: (LEFT,)})
        issues: list[CollectorIssue] = []
        links = read_switch_links(folder, on_bus=(LEFT, RIGHT), issues=issues)
        assert ({LEFT: {RIGHT}, RIGHT: {LEFT}}, []) == (links, issues)

    def test_a_switch_folder_that_cannot_be_listed_loses_only_its_links(
        self, tmp_path: Path
    ) -> None:
        """THIRD's folder loops: an issue, and the links LEFT and RIGHT list both ways
        are still read."""
        folder = _links_folder(tmp_path, {LEFT: (RIGHT, THIRD), RIGHT: (LEFT,)})
        (folder / THIRD).symlink_to(THIRD)  # a loop: ELOOP, as root too
        issues: list[CollectorIssue] = []
        links = read_switch_links(folder, on_bus=(LEFT, RIGHT, THIRD), issues=issues)
        assert {LEFT: {RIGHT}, RIGHT: {LEFT}} == links
        (problem,) = issues
        assert ("unreadable", True) == (
            problem.error,
            f"cannot list {folder / THIRD}" in problem.detail,
        )

    def test_a_switch_folder_gone_since_the_listing_is_skipped_quietly(
        self, tmp_path: Path
    ) -> None:
        """The module rebuilds its folders at each refresh: one listed a moment ago may
        be gone (here, an entry whose folder is not there), which is no issue."""
        folder = _links_folder(tmp_path, {LEFT: (RIGHT,), RIGHT: (LEFT,)})
        (folder / THIRD).symlink_to("gone")
        issues: list[CollectorIssue] = []
        links = read_switch_links(folder, on_bus=(LEFT, RIGHT, THIRD), issues=issues)
        assert ({LEFT: {RIGHT}, RIGHT: {LEFT}}, []) == (links, issues)

    def test_entries_not_named_as_a_pci_address_are_never_listed(self, tmp_path: Path) -> None:
        """Only a switch's folder is listed: a stray entry of another name is not, even
        one that could not be (a loop), so it is no issue."""
        folder = _links_folder(tmp_path, {LEFT: (RIGHT,), RIGHT: (LEFT,)})
        (folder / "stray").symlink_to("stray")
        issues: list[CollectorIssue] = []
        links = read_switch_links(folder, on_bus=(LEFT, RIGHT), issues=issues)
        assert ({LEFT: {RIGHT}, RIGHT: {LEFT}}, []) == (links, issues)
