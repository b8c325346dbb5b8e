"""What the simulated kubelet reports, tick by tick.

``demo_scenario`` is a realistic GPU node (see ``exporter.sim.hardware.demo_hardware``):
whole GPUs, MIG devices, time-sliced replicas, SR-IOV VFs, an RDMA HCA, AMD and Intel
GPUs, exclusive CPUs, memory and hugepages (one block spanning both NUMA nodes), DRA
claims (``exporter.sim.dra``: NVIDIA GPU and MIG, AMD, a shared VF with KEP-5304
metadata, and an unresolvable driver), pods without devices, a sidecar, a container that
is not NUMA-aligned, and a batch pod that comes and goes (churn). ``dense_scenario`` is
the benchmark's busy node. Both are pure: the same tick always gives the same state.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from exporter.model import (
    AllocatableResources,
    ClaimDevice,
    ContainerResources,
    DeviceGroup,
    DynamicResource,
    MemoryBlock,
    PodResources,
)
from exporter.sim.dra import (
    SimDraClaim,
    demo_dra_claims,
    demo_dra_pods,
    dra_owned_pci_addresses,
)
from exporter.sim.hardware import (
    GIB,
    H100_SXM_NVLINKS,
    MIB,
    VIRTIO_NIC_ADDRESS,
    SimGpu,
    SimHardware,
    SimNic,
    SimNumaNode,
    SimPcieLink,
    SimRdmaDevice,
    demo_hardware,
)

__all__ = [
    "CHURN_PERIOD_TICKS",
    "CHURN_SLOTS",
    "DemoScenario",
    "DenseScenario",
    "DraScenario",
    "KubeletState",
    "Scenario",
    "dense_hardware",
]

# The demo's batch pod lives for this many ticks, then is gone for as many.
CHURN_PERIOD_TICKS = 3
# The dense node replaces the pods of one slot in this many each tick: 10%.
CHURN_SLOTS = 10
TIME_SLICE_REPLICAS = 4
RESERVED_CPUS_PER_NODE = 2  # kubelet --reserved-cpus: the first two CPUs of each node
INTEL_PLUGIN_NUMA = 0  # what the demo's Intel device plugin (wrongly) reports
VIRTIO_NET_RESOURCE = "example.com/virtio-net"  # device IDs: PCI addresses


@dataclass(frozen=True, slots=True)
class KubeletState:
    pods: tuple[PodResources, ...]
    allocatable: AllocatableResources


@runtime_checkable
class DraScenario(Protocol):
    """A scenario whose node has DRA drivers: their files go into the tree."""

    @property
    def dra_claims(self) -> tuple[SimDraClaim, ...]:
        """The DRA claims the node's drivers prepared."""
        ...


class Scenario(Protocol):
    @property
    def hardware(self) -> SimHardware: ...

    def state_at(self, tick: int) -> KubeletState:
        """What the kubelet reports at ``tick``."""
        ...


def _devices(resource: str, *ids: str, numa: tuple[int, ...] = ()) -> DeviceGroup:
    return DeviceGroup(resource=resource, device_ids=ids, numa_nodes=numa)


def _per_device(resource: str, ids_and_numa: list[tuple[str, int]]) -> tuple[DeviceGroup, ...]:
    # The kubelet reports one ContainerDevices per device ID, each with its own topology.
    return tuple(_devices(resource, device_id, numa=(node,)) for device_id, node in ids_and_numa)


def _allocatable_cpus(numa_nodes: tuple[SimNumaNode, ...]) -> tuple[int, ...]:
    return tuple(cpu for node in numa_nodes for cpu in node.cpus[RESERVED_CPUS_PER_NODE:])


def _node_memory(numa_nodes: tuple[SimNumaNode, ...]) -> tuple[MemoryBlock, ...]:
    blocks: list[MemoryBlock] = []
    for node in numa_nodes:
        # The kubelet subtracts system reservations; keep a round figure below the total.
        blocks.append(MemoryBlock("memory", node.memory_total_bytes - 8 * GIB, (node.id,)))
        blocks.append(MemoryBlock("hugepages-1Gi", node.hugepages_1gi * GIB, (node.id,)))
        blocks.append(MemoryBlock("hugepages-2Mi", node.hugepages_2mi * 2 * MIB, (node.id,)))
    return tuple(blocks)


@dataclass(frozen=True, slots=True)
class DemoScenario:
    hardware: SimHardware

    @classmethod
    def create(cls) -> DemoScenario:
        return cls(demo_hardware())

    @property
    def dra_claims(self) -> tuple[SimDraClaim, ...]:
        return demo_dra_claims(self.hardware)

    def _plugin_hardware(self) -> SimHardware:
        """The hardware device plugins advertise: all but what DRA drivers hand out."""
        owned = dra_owned_pci_addresses(self.dra_claims)
        hw = self.hardware
        return replace(
            hw,
            gpus=tuple(g for g in hw.gpus if g.pci_address not in owned),
            drm_gpus=tuple(g for g in hw.drm_gpus if g.pci_address not in owned),
            nics=tuple(n for n in hw.nics if n.pci_address not in owned),
        )

    def allocatable(self) -> AllocatableResources:
        hw = self._plugin_hardware()
        whole = [g for g in hw.gpus if not g.mig_devices and g.index != 3]
        shared = hw.gpus[3]
        mig_gpu = hw.gpus[2]
        devices: list[DeviceGroup] = list(
            _per_device("nvidia.com/gpu", [(g.uuid, g.numa_node) for g in whole])
        )
        for mig in mig_gpu.mig_devices:
            devices.append(
                _devices(f"nvidia.com/mig-{mig.profile}", mig.uuid, numa=(mig_gpu.numa_node,))
            )
        devices.extend(
            _per_device(
                "nvidia.com/gpu.shared",
                [(f"{shared.uuid}::{n}", shared.numa_node) for n in range(TIME_SLICE_REPLICAS)],
            )
        )
        vfs = [nic for nic in hw.nics if nic.physfn is not None]
        devices.extend(
            _per_device("mellanox.com/cx7_sriov_vf", [(v.pci_address, v.numa_node) for v in vfs])
        )
        devices.extend(
            _per_device("nvidia.com/hca", [(r.pci_address, r.numa_node) for r in hw.rdma_devices])
        )
        # A topology-unaware plugin (as in most VMs): no NUMA node.
        devices.append(_devices(VIRTIO_NET_RESOURCE, VIRTIO_NIC_ADDRESS))
        amd = [g for g in hw.drm_gpus if g.driver == "amdgpu"]
        intel = [g for g in hw.drm_gpus if g.driver != "amdgpu"]
        devices.extend(_per_device("amd.com/gpu", [(g.pci_address, g.numa_node) for g in amd]))
        # The Intel plugin here reports NUMA 0 for a card sysfs puts on NUMA 1: the silent
        # misplacement the pci collector's cross-check exists to show.
        devices.extend(
            _per_device(
                "gpu.intel.com/i915",
                [(f"card{g.card}-{n}", INTEL_PLUGIN_NUMA) for g in intel for n in range(2)],
            )
        )
        return AllocatableResources(
            devices=tuple(devices),
            cpu_ids=_allocatable_cpus(hw.numa_nodes),
            memory=_node_memory(hw.numa_nodes),
        )

    def pods(self, tick: int) -> tuple[PodResources, ...]:
        hw = self._plugin_hardware()
        gpu0, gpu1, mig_gpu, shared, _free = hw.gpus
        mig_a, mig_b, mig_c = mig_gpu.mig_devices
        pf0_vfs = [n.pci_address for n in hw.nics if n.physfn == hw.nics[0].pci_address]
        pf1 = next(n for n in hw.nics if n.physfn is None and n.numa_node == 1)
        pf1_vfs = [n.pci_address for n in hw.nics if n.physfn == pf1.pci_address]
        amd = next(g for g in hw.drm_gpus if g.driver == "amdgpu")
        intel = next(g for g in hw.drm_gpus if g.driver != "amdgpu")
        pods = [
            PodResources(
                "ml-training",
                "trainer-0",
                (
                    # A restartable init container (sidecar): reported, holds nothing. The
                    # kubelet lists these first, before the pod's containers (server_v1.go).
                    ContainerResources("log-shipper"),
                    ContainerResources(
                        "trainer",
                        devices=(
                            *_per_device("nvidia.com/gpu", [(gpu0.uuid, 0), (gpu1.uuid, 0)]),
                            _devices("mellanox.com/cx7_sriov_vf", pf0_vfs[1], numa=(0,)),
                            _devices("nvidia.com/hca", hw.rdma_devices[0].pci_address, numa=(0,)),
                        ),
                        cpu_ids=tuple(range(2, 10)),
                        memory=(
                            MemoryBlock("memory", 64 * GIB, (0,)),
                            MemoryBlock("hugepages-1Gi", 8 * GIB, (0,)),
                        ),
                    ),
                ),
            ),
            PodResources(
                "ml-inference",
                "llm-server-7d9f8",
                (
                    # MIG slice on NUMA 1, exclusive CPUs on NUMA 0: not NUMA-aligned.
                    # Its VF is PF 0's, on NUMA 0, though PF 1's VFs share the MIG GPU's
                    # PCIe switch: the GPU reaches it across the sockets (SYS).
                    ContainerResources(
                        "server",
                        devices=(
                            _devices(f"nvidia.com/mig-{mig_a.profile}", mig_a.uuid, numa=(1,)),
                            _devices("mellanox.com/cx7_sriov_vf", pf0_vfs[0], numa=(0,)),
                        ),
                        cpu_ids=tuple(range(10, 14)),
                        memory=(MemoryBlock("memory", 32 * GIB, (0,)),),
                    ),
                ),
            ),
            PodResources(
                "ml-inference",
                "embedder-0",
                (
                    ContainerResources(
                        "embedder",
                        devices=(
                            _devices(f"nvidia.com/mig-{mig_b.profile}", mig_b.uuid, numa=(1,)),
                            _devices(f"nvidia.com/mig-{mig_c.profile}", mig_c.uuid, numa=(1,)),
                        ),
                        cpu_ids=tuple(range(34, 38)),
                    ),
                ),
            ),
            # Two notebooks share one GPU through time-slicing replicas.
            PodResources(
                "notebooks",
                "jupyter-alice",
                (
                    ContainerResources(
                        "notebook",
                        devices=(
                            _devices("nvidia.com/gpu.shared", f"{shared.uuid}::0", numa=(1,)),
                        ),
                    ),
                ),
            ),
            PodResources(
                "notebooks",
                "jupyter-bob",
                (
                    ContainerResources(
                        "notebook",
                        devices=(
                            _devices("nvidia.com/gpu.shared", f"{shared.uuid}::1", numa=(1,)),
                        ),
                    ),
                ),
            ),
            # CPUs on both nodes and one memory block spanning both: counted once.
            PodResources(
                "hpc",
                "solver-0",
                (
                    ContainerResources(
                        "solver",
                        cpu_ids=(*range(14, 18), *range(42, 46)),
                        memory=(MemoryBlock("memory", 32 * GIB, (0, 1)),),
                    ),
                ),
            ),
            PodResources(
                "rendering",
                "blender-0",
                (
                    ContainerResources(
                        "render",
                        devices=(_devices("amd.com/gpu", amd.pci_address, numa=(1,)),),
                        cpu_ids=tuple(range(38, 42)),
                    ),
                ),
            ),
            PodResources(
                "media",
                "transcoder-0",
                (
                    ContainerResources(
                        "ffmpeg",
                        devices=(
                            _devices(
                                "gpu.intel.com/i915",
                                f"card{intel.card}-0",
                                numa=(INTEL_PLUGIN_NUMA,),
                            ),
                        ),
                    ),
                ),
            ),
            PodResources(
                "net",
                "dpdk-router-0",
                (
                    ContainerResources(
                        "router",
                        devices=(
                            _devices(
                                "mellanox.com/cx7_sriov_vf", pf1_vfs[0], pf1_vfs[1], numa=(1,)
                            ),
                        ),
                        cpu_ids=tuple(range(46, 50)),
                        memory=(MemoryBlock("hugepages-1Gi", 4 * GIB, (1,)),),
                    ),
                ),
            ),
            # A virtio NIC handed to a pod whole: its traffic follows it by PCI address.
            PodResources(
                "net",
                "edge-proxy-0",
                (
                    ContainerResources(
                        "proxy", devices=(_devices(VIRTIO_NET_RESOURCE, VIRTIO_NIC_ADDRESS),)
                    ),
                ),
            ),
            PodResources(
                "dra-demo",
                "inference-dra-0",
                (
                    ContainerResources(
                        "model",
                        dynamic_resources=(
                            DynamicResource(
                                claim_name="inference-dra-0-gpu",
                                claim_namespace="dra-demo",
                                devices=(
                                    ClaimDevice(
                                        driver="gpu.example.com",
                                        pool="demo-node",
                                        device="gpu-0",
                                        share_id="7c1e0f4a-2b57-4f6e-9a1d-3c8b5e2f6a90",
                                        cdi_devices=("gpu.example.com/gpu=gpu-0",),
                                    ),
                                ),
                            ),
                        ),
                    ),
                ),
            ),
            *demo_dra_pods(self.dra_claims),
            # Pods without devices or exclusive CPUs are listed too.
            PodResources("default", "web-frontend-5c7b9", (ContainerResources("nginx"),)),
            PodResources(
                "kube-system", "nvidia-device-plugin-x2k8f", (ContainerResources("plugin"),)
            ),
        ]
        generation = tick // CHURN_PERIOD_TICKS
        if generation % 2 == 0:
            pods.append(
                PodResources(
                    "batch",
                    f"etl-{generation // 2}",
                    (
                        ContainerResources(
                            "etl",
                            devices=(_devices("mellanox.com/cx7_sriov_vf", pf0_vfs[2], numa=(0,)),),
                            cpu_ids=tuple(range(18, 22)),
                        ),
                    ),
                )
            )
        return tuple(pods)

    def state_at(self, tick: int) -> KubeletState:
        return KubeletState(pods=self.pods(tick), allocatable=self.allocatable())


def dense_hardware(
    *, cpus: int = 256, gpus: int = 8, vfs: int = 56, numa_nodes: int = 2, hcas: int = 8
) -> SimHardware:
    """A big node: ``numa_nodes`` NUMA nodes sharing ``cpus``, 2 TiB of memory and the
    huge pages, ``gpus`` GPUs spread over the nodes, ``vfs`` VFs of two PFs and ``hcas``
    InfiniBand HCAs, one a GPU as on a training node's compute fabric (read every poll,
    though no pod is given one: the scenario's kubelet does not list them)."""
    per_node = cpus // numa_nodes
    nodes = tuple(
        SimNumaNode(
            n,
            tuple(range(n * per_node, (n + 1) * per_node)),
            2048 // numa_nodes * GIB,
            8192 // numa_nodes,
            128 // numa_nodes,
        )
        for n in range(numa_nodes)
    )
    gpu_list = tuple(
        SimGpu(
            index=i,
            uuid=f"GPU-{i:08x}-0000-4000-8000-{i:012x}",
            pci_address=f"0000:{0x10 + i:02x}:00.0",
            model="NVIDIA H100 80GB HBM3",
            numa_node=i * numa_nodes // gpus,
            memory_total_bytes=80 * GIB,
            power_limit_watts=700.0,
            utilization=(i % 4) / 4,
            nvlinks=H100_SXM_NVLINKS,
        )
        for i in range(gpus)
    )
    nics: list[SimNic] = []
    for pf in range(2):
        pf_address = f"0000:{0x80 + pf:02x}:00.0"
        pf_node = pf * numa_nodes // 2
        nics.append(SimNic(pf_address, f"ens{pf}f0np0", pf_node, "0x15b3", "0x101d"))
        for vf in range(vfs // 2):
            device, function = divmod(vf + 1, 8)
            nics.append(
                SimNic(
                    f"0000:{0x80 + pf:02x}:{device:02x}.{function}",
                    f"ens{pf}f0v{vf}",
                    pf_node,
                    "0x15b3",
                    "0x101e",
                    physfn=pf_address,
                    vf_index=vf,
                )
            )
    hca_list = tuple(
        SimRdmaDevice(f"mlx5_{i}", f"0000:{0x40 + i:02x}:00.0", i * numa_nodes // hcas)
        for i in range(hcas)
    )
    # Every GPU, PF and HCA on a Gen5 x16 link, as on a real node: its link is read
    # every poll.
    linked = [g.pci_address for g in gpu_list] + [n.pci_address for n in nics if n.physfn is None]
    linked += [h.pci_address for h in hca_list]
    links = tuple((address, SimPcieLink(16, 16)) for address in sorted(linked))
    return SimHardware(nodes, gpu_list, nics=tuple(nics), rdma_devices=hca_list, pcie_links=links)


_SIDECARS = ("sidecar", "log-shipper", "metrics-agent")


@dataclass(frozen=True, slots=True)
class DenseScenario:
    """``pod_count`` pods packed on ``dense_hardware``: devices and CPUs spread round-robin.

    Each pod has a ``main`` container, which holds what the pod holds, and ``sidecars``
    that hold nothing. Each tick replaces one pod in ``CHURN_SLOTS`` (the pod in the same
    slot gets a new name): the benchmark's churn. A fixed tick is a node where nothing
    changes.
    """

    hardware: SimHardware
    pod_count: int = 250
    sidecars: int = 1

    @classmethod
    def create(cls, *, pod_count: int = 250, cpus: int = 256) -> DenseScenario:
        return cls(dense_hardware(cpus=cpus), pod_count)

    def _device_ids(self) -> list[tuple[str, str, int]]:
        hw = self.hardware
        ids = [("nvidia.com/gpu", g.uuid, g.numa_node) for g in hw.gpus]
        ids += [
            ("mellanox.com/cx7_sriov_vf", n.pci_address, n.numa_node)
            for n in hw.nics
            if n.physfn is not None
        ]
        return ids

    def allocatable(self) -> AllocatableResources:
        groups = tuple(_devices(r, d, numa=(n,)) for r, d, n in self._device_ids())
        return AllocatableResources(
            devices=groups,
            cpu_ids=_allocatable_cpus(self.hardware.numa_nodes),
            memory=_node_memory(self.hardware.numa_nodes),
        )

    def state_at(self, tick: int) -> KubeletState:
        device_ids = self._device_ids()
        free_cpus = list(_allocatable_cpus(self.hardware.numa_nodes))
        pods: list[PodResources] = []
        for i in range(self.pod_count):
            devices: tuple[DeviceGroup, ...] = ()
            if i < len(device_ids):
                resource, device_id, node = device_ids[i]
                devices = (_devices(resource, device_id, numa=(node,)),)
            cpus = tuple(free_cpus[:1]) if i % 2 == 0 and free_cpus else ()
            del free_cpus[: len(cpus)]
            pods.append(
                PodResources(
                    f"team-{i % 10}",
                    f"worker-{i}-{(tick - i % CHURN_SLOTS + CHURN_SLOTS) // CHURN_SLOTS}",
                    (
                        ContainerResources("main", devices=devices, cpu_ids=cpus),
                        *(ContainerResources(name) for name in _SIDECARS[: self.sidecars]),
                    ),
                )
            )
        return KubeletState(pods=tuple(pods), allocatable=self.allocatable())
