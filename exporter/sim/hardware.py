"""What the simulated node is made of: NUMA nodes, CPUs, GPUs, NICs, RDMA devices.

One description feeds every simulated part, so they agree with each other: the
scenario's kubelet device IDs, the fixture sysfs/procfs tree (``exporter.sim.sysfs``)
and the simulated NVML source (``exporter.sim.gpus``). Telemetry that changes over
time is a pure function of the description and a tick, so tests can predict it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

__all__ = [
    "GIB",
    "H100_SXM_NVLINKS",
    "LINK_FLAP_TICK",
    "MIB",
    "VIRTIO_NIC_ADDRESS",
    "SimDrmGpu",
    "SimGpu",
    "SimGpuProcess",
    "SimHardware",
    "SimMigDevice",
    "SimNic",
    "SimNumaNode",
    "SimPodContainer",
    "SimRdmaDevice",
    "demo_hardware",
]

MIB = 1024 * 1024
GIB = 1024 * MIB
VIRTIO_NIC_ADDRESS = "0000:00:05.0"  # the demo's virtio NIC
H100_SXM_NVLINKS = 18  # an H100 SXM5 board's NVLinks (fourth generation)
# The tick (a poll, in --demo) at which an RDMA port's link flaps (SimRdmaDevice.flap):
# a minute in at the default 10 s poll, so that a Prometheus scraping every 30 s has
# seen the counts before it (a flap counted at the first poll would be a series born
# above 0, and increase(), which the link-down alert reads, never sees a series' first
# value).
LINK_FLAP_TICK = 6


@dataclass(frozen=True, slots=True)
class SimNumaNode:
    id: int
    cpus: tuple[int, ...]
    memory_total_bytes: int
    hugepages_2mi: int  # pages of 2 MiB reserved on this node
    hugepages_1gi: int  # pages of 1 GiB reserved on this node


@dataclass(frozen=True, slots=True)
class SimMigDevice:
    uuid: str  # "MIG-<uuid>"
    gpu_instance: int
    compute_instance: int
    profile: str  # "1g.10gb"
    memory_total_bytes: int
    # The GPU instance's physical place, as nvmlGpuInstanceGetInfo gives it: the profile
    # ID (H100 80GB: 1g.10gb 19, 1g.20gb 15, 2g.20gb 14, 3g.40gb 9, 4g.40gb 5, 7g.80gb 0)
    # and the first slot (of 0-7) it takes: 1g.10gb takes 1, 1g.20gb and 2g 2, 3g and
    # 4g 4, 7g all 8. The GPU instances of one GPU never share a slot.
    profile_id: int
    placement_start: int


@dataclass(frozen=True, slots=True)
class SimGpu:
    """An NVIDIA GPU as NVML would describe it."""

    index: int  # NVML index and minor number (/dev/nvidia<index>)
    uuid: str  # "GPU-<uuid>"
    pci_address: str  # 0000:17:00.0
    model: str
    numa_node: int
    memory_total_bytes: int
    power_limit_watts: float
    utilization: float  # base utilization ratio 0-1 the simulation wobbles around
    mig_devices: tuple[SimMigDevice, ...] = ()
    xids: tuple[int, ...] = ()  # Xid errors the driver raises for it, once registered
    nvlinks: int = 0  # NVLinks it has: 18 on an H100 SXM board, 12 on a PCIe one (for its bridge)
    nvlinks_down: tuple[int, ...] = ()  # links that are inactive
    nvlink_errors: tuple[tuple[str, int], ...] = ()  # (type, count), all links together
    # (type, count) added to those in a burst while the GPU is watched: from the
    # gpus.NVLINK_BURST_AFTER_DRAINS-th poll after its NVLink counters are first read
    nvlink_burst: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class SimDrmGpu:
    """An AMD or Intel GPU seen through /sys/class/drm/cardN."""

    card: int
    driver: str  # "amdgpu", "i915" or "xe"
    pci_address: str
    vendor_id: str  # "0x1002" AMD, "0x8086" Intel
    device_id: str
    numa_node: int
    memory_total_bytes: int
    utilization: float


@dataclass(frozen=True, slots=True)
class SimNic:
    """A PCI network function with a netdev: a physical function, an SR-IOV VF, or a
    virtio NIC (its netdev below ``<function>/virtio<N>``, as in every KVM guest)."""

    pci_address: str
    netdev: str
    numa_node: int
    vendor_id: str
    device_id: str
    physfn: str | None = None  # PF address, for a VF
    vf_index: int | None = None  # index below the PF, for a VF
    virtio_index: int | None = None  # N of virtio<N>, for a virtio NIC
    # A PF whose eswitch is in switchdev mode under the in-kernel mlx5: a port
    # representor netdev per VF, and no per-VF counters of its own.
    switchdev: bool = False

    @property
    def pci_driver(self) -> str:
        return "mlx5_core" if self.virtio_index is None else "virtio-pci"


@dataclass(frozen=True, slots=True)
class SimPcieLink:
    """A PCI function's PCIe link as sysfs shows it: lanes and speed, now and at most."""

    width: int
    max_width: int
    speed: str = "32.0 GT/s PCIe"  # as the kernel writes it; a GPU idles at 2.5 GT/s
    max_speed: str = "32.0 GT/s PCIe"
    # AER's counts of the function (aer_dev_correctable, _nonfatal, _fatal); None: no
    # AER capability, no files
    aer_errors: tuple[int, int, int] | None = (0, 0, 0)


@dataclass(frozen=True, slots=True)
class SimRdmaDevice:
    """An InfiniBand/RoCE device: /sys/class/infiniband/<name>."""

    name: str  # "mlx5_0"
    pci_address: str
    numa_node: int
    ports: tuple[int, ...] = (1,)
    rate: str = "400 Gb/sec (4X NDR)"  # as ib core's rate_show writes it
    down_ports: tuple[int, ...] = ()  # DOWN and Polling: no cable, or the far end down
    # PortCounters' error fields (counters/<name>) above 0, the same on every port
    errors: tuple[tuple[str, int], ...] = ()
    # What some of them rise by when the link flaps, at tick LINK_FLAP_TICK, every port
    flap: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class SimPodContainer:
    """The container a simulated process runs in, and the cgroup layout of its node.

    ``layout`` picks how ``/proc/<pid>/cgroup`` reads (``exporter.sim.fixtures.processes``):
    cgroup v1 or v2, systemd or cgroupfs driver, containerd or CRI-O naming.
    """

    namespace: str
    pod: str
    uid: str
    container: str
    container_id: str  # 64 hex digits
    qos: str  # "guaranteed", "burstable" or "besteffort"
    layout: str  # "v1-cgroupfs-containerd", "v2-systemd-crio", ...


@dataclass(frozen=True, slots=True)
class SimGpuProcess:
    """A process on a GPU or MIG device (``device_uuid``); no ``container``: the host's."""

    pid: int
    device_uuid: str
    memory_used_bytes: int
    sm_percent: int  # per-process SM utilization NVML samples (not on MIG devices)
    container: SimPodContainer | None = None


@dataclass(frozen=True, slots=True)
class SimHardware:
    numa_nodes: tuple[SimNumaNode, ...]
    gpus: tuple[SimGpu, ...] = ()
    drm_gpus: tuple[SimDrmGpu, ...] = ()
    nics: tuple[SimNic, ...] = ()
    rdma_devices: tuple[SimRdmaDevice, ...] = ()
    gpu_processes: tuple[SimGpuProcess, ...] = ()
    # (PCI address, its link): functions without one have no link files (a VM's bus)
    pcie_links: tuple[tuple[str, SimPcieLink], ...] = ()
    # (PCI address, the bridges above it): its root port, then each switch's upstream
    # and downstream port down to it. A VF sits beside its PF. Functions not named here
    # hang off their host bridge directly, as on a VM's bus.
    pcie_bridges: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # Pairs of switches (by upstream port, in pcie_bridges) with a direct link between
    # them, as Broadcom's switch-link module lists them; none: the module is not loaded.
    switch_links: tuple[tuple[str, str], ...] = ()

    def bridges_of(self, address: str) -> tuple[str, ...]:
        """The bridges above the function at ``address``, root port first."""
        chains = dict(self.pcie_bridges)
        if address in chains:
            return chains[address]
        pf = next((n.physfn for n in self.nics if n.pci_address == address), None)
        return chains.get(pf, ()) if pf is not None else ()

    @property
    def cpus(self) -> tuple[int, ...]:
        return tuple(sorted(cpu for node in self.numa_nodes for cpu in node.cpus))


def _uuid(prefix: str, n: int) -> str:
    return f"{prefix}-{n:08x}-5e1f-4c2a-9d3b-{n:012x}"


def _container_id(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def _demo_processes(gpus: tuple[SimGpu, ...]) -> tuple[SimGpuProcess, ...]:
    """Who runs what on the demo's GPUs, each container on a different cgroup layout.

    GPU 3 is shared by two notebooks, each with its own share; GPU 1, held by the
    trainer, carries a leftover process of the embedder pod; GPU 4 runs its DRA
    claim's pod; GPU 6, allocated to nobody, is busy with a host process.
    """

    def container(
        namespace: str, pod: str, name: str, n: int, *, qos: str, layout: str
    ) -> SimPodContainer:
        uid = f"{n:08x}-7a1c-4e0b-9f3d-{n:012x}"
        return SimPodContainer(
            namespace, pod, uid, name, _container_id(f"{pod}/{name}"), qos, layout
        )

    trainer = container(
        "ml-training",
        "trainer-0",
        "trainer",
        0xA1,
        qos="guaranteed",
        layout="v1-cgroupfs-containerd",
    )
    llm = container(
        "ml-inference",
        "llm-server-7d9f8",
        "server",
        0xA2,
        qos="guaranteed",
        layout="v2-cgroupfs-crio",
    )
    embedder = container(
        "ml-inference",
        "embedder-0",
        "embedder",
        0xA3,
        qos="guaranteed",
        layout="v1-systemd-containerd",
    )
    alice = container(
        "notebooks",
        "jupyter-alice",
        "notebook",
        0xA4,
        qos="besteffort",
        layout="v2-systemd-containerd",
    )
    bob = container(
        "notebooks", "jupyter-bob", "notebook", 0xA5, qos="burstable", layout="v2-systemd-crio"
    )
    dra = container(
        "dra-demo", "llm-gpus-0", "main", 0xA6, qos="guaranteed", layout="v2-systemd-containerd"
    )
    gpu0, gpu1, mig_gpu, shared, dra_gpu, free = gpus
    return (
        SimGpuProcess(3101, gpu0.uuid, 60 * GIB, 85, trainer),
        SimGpuProcess(3377, gpu1.uuid, 2 * GIB, 0, embedder),
        SimGpuProcess(4242, mig_gpu.mig_devices[0].uuid, 30 * GIB, 0, llm),
        SimGpuProcess(5150, shared.uuid, 12 * GIB, 25, alice),
        SimGpuProcess(5151, shared.uuid, 6 * GIB, 15, bob),
        SimGpuProcess(7001, free.uuid, 8 * GIB, 30),
        SimGpuProcess(8080, dra_gpu.uuid, 40 * GIB, 70, dra),
    )


def demo_hardware() -> SimHardware:
    """A realistic two-socket GPU node.

    NUMA 0: CPUs 0-31, GPUs 0 and 1, Mellanox PF 0 with 4 VFs, mlx5_0, a virtio NIC
    (eth1, as a KVM guest sees one).
    NUMA 1: CPUs 32-63, GPU 2 (MIG: three instances), GPU 3 (time-sliced by the
    scenario), Mellanox PF 1 with 4 VFs, mlx5_1 (its link flaps at LINK_FLAP_TICK), one
    AMD and one Intel GPU, GPU 6 (allocated to nobody, busy with a host process: "free
    but busy").
    PCIe: GPU 0 and PF 0 below a switch of node 0, GPUs 2 and 3 and PF 1 below one of
    node 1 (``_DEMO_BRIDGES``).
    DRA (``exporter.sim.dra``): GPU 4 (NUMA 0), GPU 5 (NUMA 1, one MIG device) and AMD
    card 3 (NUMA 1).
    """
    numa_nodes = (
        SimNumaNode(0, tuple(range(0, 32)), 256 * GIB, hugepages_2mi=1024, hugepages_1gi=16),
        SimNumaNode(1, tuple(range(32, 64)), 256 * GIB, hugepages_2mi=1024, hugepages_1gi=16),
    )
    gpu_pci = ("0000:17:00.0", "0000:31:00.0", "0000:b1:00.0", "0000:ca:00.0")
    utilization = (0.85, 0.0, 0.6, 0.4)  # GPU 1 sits idle: the "allocated but idle" case
    mig = (  # slots 0-3, 4-5 and 6
        SimMigDevice(_uuid("MIG", 0x201), 1, 0, "3g.40gb", 40 * GIB, 9, 0),
        SimMigDevice(_uuid("MIG", 0x202), 2, 0, "2g.20gb", 20 * GIB, 14, 4),
        SimMigDevice(_uuid("MIG", 0x203), 3, 0, "1g.10gb", 10 * GIB, 19, 6),
    )
    gpus = tuple(
        SimGpu(
            index=i,
            uuid=_uuid("GPU", 0x100 + i),
            pci_address=gpu_pci[i],
            model="NVIDIA H100 80GB HBM3",
            numa_node=0 if i < 2 else 1,
            memory_total_bytes=80 * GIB,
            power_limit_watts=700.0,
            utilization=utilization[i],
            mig_devices=mig if i == 2 else (),
            nvlinks=H100_SXM_NVLINKS,
        )
        for i in range(4)
    )
    nics: list[SimNic] = []
    for pf, (bus, node) in enumerate((("4b", 0), ("d8", 1))):
        pf_address = f"0000:{bus}:00.0"
        # The second PF offloads OVS: switchdev mode, its VFs' traffic in representors.
        nics.append(
            SimNic(pf_address, f"ens{pf + 1}f0np0", node, "0x15b3", "0x101d", switchdev=pf == 1)
        )
        for vf in range(4):
            nics.append(
                SimNic(
                    f"0000:{bus}:00.{vf + 2}",
                    f"ens{pf + 1}f0v{vf}",
                    node,
                    "0x15b3",
                    "0x101e",
                    physfn=pf_address,
                    vf_index=vf,
                )
            )
    # A virtio NIC as a KVM guest sees it (0x1af4/0x1041, modern virtio-net), handed to a
    # pod whole by a device plugin.
    nics.append(SimNic(VIRTIO_NIC_ADDRESS, "eth1", 0, "0x1af4", "0x1041", virtio_index=3))
    rdma = (
        SimRdmaDevice("mlx5_0", "0000:4b:00.0", 0),
        # Its link went down once and recovered, with symbol errors around it, and does
        # so again while watched (LINK_FLAP_TICK): a cable or transceiver going bad.
        SimRdmaDevice(
            "mlx5_1",
            "0000:d8:00.0",
            1,
            errors=(("link_downed", 1), ("link_error_recovery", 3), ("symbol_error", 57)),
            flap=(("link_downed", 1), ("link_error_recovery", 2), ("symbol_error", 219)),
        ),
    )
    drm = (
        SimDrmGpu(1, "amdgpu", "0000:e1:00.0", "0x1002", "0x74a1", 1, 192 * GIB, 0.55),
        SimDrmGpu(2, "i915", "0000:e9:00.0", "0x8086", "0x0bd5", 1, 64 * GIB, 0.3),
        *_dra_drm_gpus(),
    )
    free = _free_gpu()
    dra_gpus = _dra_gpus()
    processes = _demo_processes((*gpus, dra_gpus[0], free))
    all_gpus = gpus + dra_gpus + (free,)
    return SimHardware(
        numa_nodes,
        all_gpus,
        drm,
        tuple(nics),
        rdma,
        processes,
        pcie_links=_demo_links(all_gpus, drm, nics),
        pcie_bridges=_DEMO_BRIDGES,
    )


# As on an HGX board: GPU 0 and Mellanox PF 0 (its VFs beside it) below one PCIe switch
# of NUMA node 0, GPUs 2 and 3 and PF 1 below one of node 1; GPU 1 alone below a root
# port of another host bridge of node 0. The other functions hang off host bridges of
# their own.
_DEMO_BRIDGES = (
    ("0000:17:00.0", ("0000:14:01.0", "0000:15:00.0", "0000:16:00.0")),
    ("0000:4b:00.0", ("0000:14:01.0", "0000:15:00.0", "0000:16:01.0")),
    ("0000:31:00.0", ("0000:30:01.0",)),
    ("0000:b1:00.0", ("0000:c7:01.0", "0000:c8:00.0", "0000:c9:02.0")),
    ("0000:ca:00.0", ("0000:c7:01.0", "0000:c8:00.0", "0000:c9:00.0")),
    ("0000:d8:00.0", ("0000:c7:01.0", "0000:c8:00.0", "0000:c9:01.0")),
)


def _demo_links(
    gpus: tuple[SimGpu, ...], drm: tuple[SimDrmGpu, ...], nics: list[SimNic]
) -> tuple[tuple[str, SimPcieLink], ...]:
    """Gen5 x16 for every GPU and physical NIC, but: GPU 0, busy training, trained at 8
    lanes (a card or riser to reseat) after a burst of corrected errors; GPU 1, idle,
    lowered its speed to 2.5 GT/s as idle GPUs do. VFs (reserved link registers) and the
    virtio NIC (a VM's bus) have none."""
    links = {gpu.pci_address: SimPcieLink(16, 16) for gpu in gpus}
    links.update((card.pci_address, SimPcieLink(16, 16)) for card in drm)
    links.update(
        (nic.pci_address, SimPcieLink(16, 16))
        for nic in nics
        if nic.physfn is None and nic.virtio_index is None
    )
    links[gpus[0].pci_address] = SimPcieLink(8, 16, aer_errors=(27, 0, 0))
    links[gpus[1].pci_address] = SimPcieLink(16, 16, speed="2.5 GT/s PCIe")
    return tuple(sorted(links.items()))


def _free_gpu() -> SimGpu:
    """GPU 6: advertised by the device plugin, allocated to nobody, yet busy; the process
    nobody holds it for has hit a GPU memory page fault (Xid 31)."""
    return SimGpu(
        index=6,
        uuid=_uuid("GPU", 0x106),
        pci_address="0000:da:00.0",
        model="NVIDIA H100 80GB HBM3",
        numa_node=1,
        memory_total_bytes=80 * GIB,
        power_limit_watts=700.0,
        utilization=0.3,
        xids=(31,),
        nvlinks=H100_SXM_NVLINKS,
    )


def _dra_gpus() -> tuple[SimGpu, ...]:
    """GPUs 4 and 5, handed out by the NVIDIA DRA driver (``exporter.sim.dra``): 4 whole,
    5 MIG-enabled with the one MIG device the driver created for a claim. Its GPU
    instance ID (5) and UUID are not in its DRA name (profile 19, placement 3): the
    driver's checkpoint links them, and so does NVML's placement of GPU instance 5.
    GPU 4 has lost one of its 18 NVLinks (link 7) after replays and recoveries on it: a
    board or NVSwitch tray to look at. Its other links hold, but while watched they see
    a burst of CRC errors, and the replays that resend what they spoiled
    (gpus.NVLINK_BURST_AFTER_DRAINS)."""
    mig = SimMigDevice(_uuid("MIG", 0x501), 5, 0, "1g.10gb", 10 * GIB, 19, 3)
    return tuple(
        SimGpu(
            index=index,
            uuid=_uuid("GPU", 0x100 + index),
            pci_address=pci_address,
            model="NVIDIA H100 80GB HBM3",
            numa_node=numa_node,
            memory_total_bytes=80 * GIB,
            power_limit_watts=700.0,
            utilization=utilization,
            mig_devices=migs,
            nvlinks=H100_SXM_NVLINKS,
            nvlinks_down=(7,) if index == 4 else (),
            nvlink_errors=(
                (("crc_flit", 1180), ("replay", 42), ("recovery", 3)) if index == 4 else ()
            ),
            # 36000 CRC errors between two polls: 120 a second or more over 5 minutes
            # that hold both (the NVLink errors alert's CRC rate, above its 100), and
            # a replay for about every 28 of them, as before
            nvlink_burst=(("crc_flit", 36000), ("replay", 1300)) if index == 4 else (),
        )
        for index, pci_address, numa_node, utilization, migs in (
            (4, "0000:5d:00.0", 0, 0.7, ()),
            (5, "0000:9a:00.0", 1, 0.5, (mig,)),
        )
    )


def _dra_drm_gpus() -> tuple[SimDrmGpu, ...]:
    """An AMD GPU handed out by the AMD DRA driver (``exporter.sim.dra``)."""
    return (SimDrmGpu(3, "amdgpu", "0000:e5:00.0", "0x1002", "0x74a1", 1, 192 * GIB, 0.35),)
