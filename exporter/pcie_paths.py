"""How near each GPU a container holds sits to its NICs on the PCIe tree. Pure, no I/O.

GPUDirect RDMA moves a GPU's network traffic between the GPU and the NIC over PCIe,
without a copy through host memory. NCCL turns it on only where the path between the
two runs through PCIe switches alone (``NCCL_NET_GDR_LEVEL``, PXB by default: the
check in src/graph/paths.cc), so a training pod given a NIC beyond its GPU's switch
sends that GPU's traffic between nodes through the CPU and host memory, slower, with
nothing failing. (On Grace nodes NCCL 2.27 and later keep GPUDirect RDMA through the
CPU's NVLink-C2C for a NIC on the GPU's own CPU, P2C in paths.cc, ``NCCL_NET_GDR_C2C``:
the traffic still crosses the CPU instead of the GPU's switch.) The kubelet's Topology
Manager aligns devices by NUMA node only, and device plugins pick GPUs and NICs each on
their own: only the PCIe tree tells.

Levels follow the legend of ``nvidia-smi topo -m``, nearest first (NCCL's path types
call NODE PHB too):

- 1, PIX: through one PCIe switch;
- 2, PXB: through several switches, not through a host bridge;
- 3, PHB: through a PCIe host bridge (the CPU): under different switches or root ports
  of one host bridge;
- 4, NODE: between host bridges of one NUMA node;
- 5, SYS: between NUMA nodes, over the CPUs' interconnect.

The tree is read as NCCL reads it from sysfs (``ncclTopoGetXmlFromSys``, src/graph/
xml.cc): a function's switch is the function two folders up its real path (past the
switch's downstream port, its upstream port), that switch's own switch two folders
further up, and so on; a function with the host bridge among the two folders above it
hangs off the root complex. A function behind an Intel VMD hangs off the VMD's root
ports, on the VMD's own bus, but the VMD is part of the root complex of the host bridge
above it: that is the function's host bridge (``pcie_path_of``). Two switches with a
direct link between them (Broadcom's virtual switch links, ``PciDevice.switch_peers``)
join the functions below them at PXB, as NCCL joins them (a hop from switch to switch
is PXB in paths.cc), where the tree alone would go through the host bridge. A NUMA node
sysfs does not give (-1, as on one-socket machines and most VMs) is taken to be the
other's: such a pair reads PHB or NODE.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum

from exporter.collectors.pci import GPU_CLASS_PREFIXES, NIC_CLASS_PREFIX, switches_above
from exporter.metricwriter import Rows, gauge
from exporter.model import DEVICE_LABELS, DeviceView, Owner, PciDevice, Snapshot

__all__ = [
    "GpuNicPath",
    "PcieLevel",
    "gpu_nic_paths",
    "is_gpu",
    "is_nic",
    "pcie_level",
    "pcie_path_families",
]


class PcieLevel(IntEnum):
    """How far apart two PCI functions are, nearest first; names as nvidia-smi's."""

    PIX = 1
    PXB = 2
    PHB = 3
    NODE = 4
    SYS = 5


def is_gpu(function: PciDevice) -> bool:
    return function.class_id.startswith(GPU_CLASS_PREFIXES)


def is_nic(function: PciDevice) -> bool:
    return function.class_id.startswith(NIC_CLASS_PREFIX)


def pcie_level(a: PciDevice, b: PciDevice) -> PcieLevel | None:
    """How far apart ``a`` and ``b`` are; None where either's place is unknown."""
    if not a.pcie_path or not b.pcie_path:
        return None
    above_a, above_b = switches_above(a.pcie_path), switches_above(b.pcie_path)
    for climbed_a, switch in enumerate(above_a):
        if switch in above_b:
            # Each switch climbed past on the way to the shared one is one more.
            return PcieLevel.PIX if climbed_a + above_b.index(switch) == 0 else PcieLevel.PXB
    if not a.switch_peers.isdisjoint(above_b):
        return PcieLevel.PXB  # from a switch above a to one above b, switch to switch
    if a.numa_node is not None and b.numa_node is not None and a.numa_node != b.numa_node:
        return PcieLevel.SYS
    if a.pcie_path[0] != b.pcie_path[0]:
        return PcieLevel.NODE
    return PcieLevel.PHB


# A device a container holds, and its PCI function.
_Found = tuple[DeviceView, PciDevice]


@dataclass(frozen=True, slots=True)
class GpuNicPath:
    """A GPU a container holds, and the nearest NIC of one resource it holds."""

    owner: Owner
    resource: str  # the GPU's
    device_id: str
    nic_resource: str
    nic_device_id: str
    level: PcieLevel
    # The nearest any device of nic_resource the kubelet can allocate sits to the GPU;
    # None for a DRA driver's devices, which the kubelet does not list as allocatable.
    best_level: PcieLevel | None

    @property
    def placement_cost_gpudirect(self) -> bool:
        """Past PXB, where NCCL turns GPUDirect RDMA off by default, while a NIC of the
        resource within it was on the node: PodresourcesGPUNICNotAligned's rule."""
        best = self.best_level
        return best is not None and self.level > PcieLevel.PXB >= best


def gpu_nic_paths(snapshot: Snapshot) -> tuple[GpuNicPath, ...]:
    """For each GPU each container holds and each NIC resource it holds too: the
    nearest of its NICs of that resource, and how near the node's nearest one is."""
    held: list[tuple[Owner, list[_Found], dict[str, list[_Found]]]] = []
    for pod in snapshot.pods:
        for container in pod.containers:
            if len(container.devices) + len(container.claim_devices) < 2:
                continue  # most containers: a GPU and a NIC make two
            gpus: list[_Found] = []
            nics: dict[str, list[_Found]] = defaultdict(list)
            for device in (*container.devices, *container.claim_devices):
                function = snapshot.hardware_of(device).pci
                if function is None or not function.pcie_path:
                    continue
                if is_gpu(function):
                    gpus.append((device, function))
                elif is_nic(function):
                    nics[device.resource].append((device, function))
            if gpus and nics:
                held.append((container.owner, gpus, nics))
    if not held:
        return ()
    offered = _offered_places(snapshot, {r for _, _, nics in held for r in nics})
    found = []
    for owner, gpus, nics in held:
        for gpu, gpu_function in gpus:
            for nic_resource, candidates in sorted(nics.items()):
                nearest = _nearest(gpu_function, candidates)
                if nearest is None:
                    continue
                level, nic = nearest
                offered_levels = (
                    pcie_level(gpu_function, place) for place in offered.get(nic_resource, ())
                )
                best = min((lv for lv in offered_levels if lv is not None), default=None)
                found.append(
                    GpuNicPath(
                        owner,
                        gpu.resource,
                        gpu.device_id,
                        nic_resource,
                        nic.device_id,
                        level,
                        best,
                    )
                )
    return tuple(found)


def _nearest(gpu: PciDevice, candidates: list[_Found]) -> tuple[PcieLevel, DeviceView] | None:
    """The nearest candidate and its level; of equals, the lowest device ID."""
    best: tuple[PcieLevel, str, DeviceView] | None = None
    for device, function in candidates:
        level = pcie_level(gpu, function)
        if level is not None and (best is None or (level, device.device_id) < best[:2]):
            best = (level, device.device_id, device)
    return None if best is None else (best[0], best[2])


def _offered_places(snapshot: Snapshot, resources: set[str]) -> dict[str, list[PciDevice]]:
    """Where the NICs of ``resources`` the kubelet can allocate (held or not) sit: one
    function for each place. A level depends on a function's bridges and NUMA node
    only, so a PF's many VFs, all beside it, are measured once."""
    places: dict[str, dict[tuple[tuple[str, ...], int | None], PciDevice]] = defaultdict(dict)
    for device in snapshot.devices:
        if device.resource not in resources or not device.allocatable:
            continue
        function = snapshot.hardware_of(device).pci
        if function is not None and function.pcie_path and is_nic(function):
            place = (function.pcie_path[:-1], function.numa_node)
            places[device.resource].setdefault(place, function)
    return {resource: list(found.values()) for resource, found in places.items()}


def pcie_path_families(snapshot: Snapshot) -> Iterator[Rows]:
    """The level of each container's GPU to its nearest NIC, and the node's best."""
    level = gauge(
        "podresources_container_gpu_nic_pcie_level",
        "How far on the PCIe tree the GPU is from the nearest NIC of nic_resource the "
        "container holds, as nvidia-smi topo -m says it: 1 PIX (one PCIe switch), 2 PXB "
        "(several switches), 3 PHB (through the host bridge), 4 NODE (between host "
        "bridges of a NUMA node), 5 SYS (between NUMA nodes). NCCL uses GPUDirect RDMA "
        "only up to 2 by default (on Grace, 2.27+ also through the CPU's C2C).",
        (*DEVICE_LABELS, "nic_resource", "nic_device_id"),
    )
    best = gauge(
        "podresources_container_gpu_nic_pcie_best_level",
        "The nearest any device of nic_resource the kubelet can allocate on the node sits "
        "to the container's GPU, in podresources_container_gpu_nic_pcie_level's levels: "
        "lower than that one where a nearer NIC was there to be given.",
        (*DEVICE_LABELS, "nic_resource"),
    )
    for path in gpu_nic_paths(snapshot):
        device = (
            path.owner.namespace,
            path.owner.pod,
            path.owner.container,
            path.resource,
            path.device_id,
        )
        level.add((*device, path.nic_resource, path.nic_device_id), int(path.level))
        if path.best_level is not None:
            best.add((*device, path.nic_resource), int(path.best_level))
    yield level
    yield best
