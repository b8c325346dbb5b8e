"""Facts the exporter works with, as frozen dataclasses.

Three groups:

- what the kubelet says (``PodResources``, ``AllocatableResources`` and their parts),
  translated from protobuf inside ``exporter.kubelet`` so nothing else sees gRPC types;
- what collectors read from hardware (``Readings``), keyed by hardware keys (GPU UUID,
  PCI address, interface name...) and CPUs, never by kubelet device IDs or pods;
- the joined, immutable ``Snapshot`` that HTTP handlers and the exposition read.

NUMA node tuples are always sorted and free of duplicates.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from exporter.kubelet.stats import KubeletRequestStats

__all__ = [
    "DEVICE_LABELS",
    "NO_HARDWARE",
    "OWNER_LABELS",
    "UNALLOCATED",
    "AllocatableResources",
    "ClaimDevice",
    "CollectorIssue",
    "CollectorRun",
    "ContainerResources",
    "ContainerView",
    "CpuTimes",
    "DeviceGroup",
    "DeviceHardware",
    "DeviceIdentity",
    "DeviceProcesses",
    "DeviceReading",
    "DeviceView",
    "DraDevice",
    "DraState",
    "DynamicResource",
    "GpuDeviceProcesses",
    "GpuProcess",
    "GpuProcessUse",
    "HardwareKey",
    "KeyKind",
    "KubeletStatus",
    "MemoryBlock",
    "MetricKind",
    "MetricSpec",
    "NodeCount",
    "Owner",
    "PartKind",
    "PciDevice",
    "PodResources",
    "PodView",
    "ProcessKind",
    "ProcessOrigin",
    "Readings",
    "Resolution",
    "Sample",
    "Snapshot",
    "ViewedProcess",
    "WholeDevice",
    "numa_label",
]


@functools.lru_cache(maxsize=1024)  # a node has a few topologies; each join and render asks
def numa_label(numa_nodes: tuple[int, ...]) -> str:
    """The ``numa_node`` label value: decimal ids, sorted, comma-joined; "" when unknown."""
    return ",".join(str(n) for n in sorted(set(numa_nodes)))


def cpulist(ids: Iterable[int]) -> str:
    """IDs in the kernel's list notation, sorted: (0, 1, 2, 3, 8, 10, 11) -> "0-3,8,10-11"."""
    ranges: list[list[int]] = []
    for n in sorted(set(ids)):
        if ranges and n == ranges[-1][1] + 1:
            ranges[-1][1] = n
        else:
            ranges.append([n, n])
    return ",".join(f"{a}-{b}" if a != b else f"{a}" for a, b in ranges)


# --- What the kubelet says ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceGroup:
    """One ``ContainerDevices`` entry: device IDs of one resource sharing one topology."""

    resource: str
    device_ids: tuple[str, ...]
    numa_nodes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class MemoryBlock:
    """One ``ContainerMemory`` entry; a block spanning several NUMA nodes has one total size."""

    memory_type: str
    size_bytes: int
    numa_nodes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """One ``ClaimResource`` of a DRA claim."""

    driver: str
    pool: str
    device: str
    share_id: str | None = None
    cdi_devices: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DynamicResource:
    """One DRA claim as allocated to a container."""

    claim_name: str
    claim_namespace: str
    devices: tuple[ClaimDevice, ...] = ()


@dataclass(frozen=True, slots=True)
class ContainerResources:
    name: str
    devices: tuple[DeviceGroup, ...] = ()
    cpu_ids: tuple[int, ...] = ()
    memory: tuple[MemoryBlock, ...] = ()
    dynamic_resources: tuple[DynamicResource, ...] = ()


@dataclass(frozen=True, slots=True)
class PodResources:
    namespace: str
    name: str
    containers: tuple[ContainerResources, ...] = ()
    # Pod-level resources, reported by the newest kubelets only.
    cpu_ids: tuple[int, ...] = ()
    memory: tuple[MemoryBlock, ...] = ()


@dataclass(frozen=True, slots=True)
class AllocatableResources:
    devices: tuple[DeviceGroup, ...] = ()
    cpu_ids: tuple[int, ...] = ()
    memory: tuple[MemoryBlock, ...] = ()


# --- What collectors read --------------------------------------------------------------


class MetricKind(enum.StrEnum):
    GAUGE = "gauge"
    COUNTER = "counter"


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """Name, type and help of one telemetry family.

    ``labels`` are the family's own labels. For device samples the exposition puts the
    owner and device labels (namespace, pod, container, resource, device_id) first.
    Counter names end in ``_total``.
    """

    name: str
    kind: MetricKind
    help: str
    labels: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Sample:
    spec: MetricSpec
    value: float
    label_values: tuple[str, ...] = ()  # aligned with spec.labels


@dataclass(frozen=True, slots=True)
class DeviceIdentity:
    """What hardware says a device is; each field is None where the source does not know."""

    uuid: str | None = None
    pci_address: str | None = None
    model: str | None = None
    vendor: str | None = None


class KeyKind(enum.StrEnum):
    """What a hardware key names; its value's form is given beside each."""

    GPU_UUID = "gpu_uuid"  # GPU-8f3c...
    MIG_UUID = "mig_uuid"  # MIG-1a2b... (also the MIG device's own UUID)
    MIG_PATH = "mig_path"  # <parent GPU UUID>/<GPU instance>/<compute instance>
    NVIDIA_MINOR = "nvidia_minor"  # 0, as in /dev/nvidia0
    NVIDIA_MINOR_GI = "nvidia_minor_gi"  # <minor>/<GPU instance>: a MIG GPU instance
    # <minor>/<GPU instance profile ID>/<placement start>: a MIG device by its physical
    # slot, as the NVIDIA DRA driver names it (nvmlGpuInstanceGetInfo gives both).
    MIG_PLACEMENT = "mig_placement"
    PCI = "pci"  # 0000:af:00.1, the kernel's form
    DRM_CARD = "drm_card"  # 0, as in /dev/dri/card0
    DRM_RENDER = "drm_render"  # 128, as in /dev/dri/renderD128
    NETDEV = "netdev"  # eth0
    SRIOV_VF = "sriov_vf"  # <PF PCI address>/<VF index>: 0000:af:00.0/3
    RDMA = "rdma"  # mlx5_0


@dataclass(frozen=True, slots=True, order=True)
class HardwareKey:
    """One way hardware identifies a device: the currency between collectors and resolver."""

    kind: KeyKind
    value: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}"


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """Telemetry of one device, under every hardware key that identifies it.

    ``name`` is the collector's own name for the device (a GPU or MIG UUID, a PCI
    address, an interface name): the ``device_id`` shown for a device no allocation
    names. ``standalone`` devices (GPUs) are shown even then; others (every NIC of the
    node) only where the kubelet lists them, allocated or allocatable.
    """

    name: str
    keys: tuple[HardwareKey, ...]
    identity: DeviceIdentity = field(default_factory=DeviceIdentity)
    samples: tuple[Sample, ...] = ()
    standalone: bool = False


@dataclass(frozen=True, slots=True)
class PciDevice:
    """A PCI function as sysfs describes it (``/sys/bus/pci/devices/<address>/``)."""

    address: str  # domain:bus:device.function, lower case: 0000:af:00.1
    vendor_id: str  # "0x10de"
    device_id: str
    class_id: str  # "0x030200"
    numa_node: int | None  # None where sysfs says -1 or has no numa_node file
    # Figures of the function itself (its PCIe link), added to its device's reading.
    samples: tuple[Sample, ...] = ()
    # Where it sits in the PCI tree: its host bridge (the last ``pci<domain>:<bus>``
    # folder of its real sysfs path no PCI function holds), then the folders below it
    # down to this one's address: functions, and an Intel VMD's bus below the VMD;
    # () where the path does not say (a fixture of plain folders).
    pcie_path: tuple[str, ...] = ()
    # Upstream ports of the switches a switch above this function has a direct link to
    # (Broadcom's virtual switch links, which NCCL reads): peer-to-peer traffic between
    # them stays in the switches. Empty on nodes without them.
    switch_peers: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """Time one CPU spent per mode, from /proc/stat, in seconds."""

    cpu: int
    seconds_by_mode: tuple[tuple[str, float], ...]


@dataclass(frozen=True, slots=True)
class DraDevice:
    """What node-local DRA driver files say of one prepared device.

    ``keys`` are the hardware keys it resolves to; ``source`` says which file said so
    (a checkpoint, KEP-5304 metadata, a CDI spec), for /debug/allocations.
    """

    driver: str
    pool: str
    device: str
    keys: tuple[HardwareKey, ...]
    source: str
    claim_namespace: str = ""  # "" where the file does not say which claim
    claim_name: str = ""


@dataclass(frozen=True, slots=True)
class DraState:
    """Every DRA device the node's driver files describe, and the CDI device names known."""

    devices: tuple[DraDevice, ...] = ()
    # CDI device name ("k8s.gpu.nvidia.com/device=gpu-0") -> hardware keys its spec names.
    cdi_devices: tuple[tuple[str, tuple[HardwareKey, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class CollectorIssue:
    """One failed read of a collector: ``error`` is the short label counted in
    ``podresources_collector_errors_total``; ``detail`` is the one-line log message."""

    error: str
    detail: str


@dataclass(frozen=True, slots=True)
class ProcessOrigin:
    """Where a GPU process runs, from ``/proc/<pid>/cgroup`` and the kubelet's pod-log dir.

    ``pod_uid`` is None for a host process (its cgroup is no pod's), "" for a pod's
    cgroup whose path does not say which pod. ``namespace`` and
    ``pod`` are "" where no pod-log directory names the UID; ``container`` is "" where
    the directory does not say which of the pod's containers has ``container_id``.
    """

    pod_uid: str | None = None
    container_id: str = ""
    namespace: str = ""
    pod: str = ""
    container: str = ""


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One process NVML lists on a GPU or MIG device.

    ``memory_used_bytes`` is None where NVML does not say (MIG without privileges);
    ``sm_utilization_ratio`` is the mean of NVML's samples since the previous poll, 0
    for a listed process without samples, None where the device gives none.
    ``command`` is ``/proc/<pid>/comm``, the name's first 15 bytes ("" where unread):
    it tells an MPS server apart.
    """

    pid: int
    origin: ProcessOrigin
    memory_used_bytes: int | None = None
    sm_utilization_ratio: float | None = None
    command: str = ""


@dataclass(frozen=True, slots=True)
class DeviceProcesses:
    """The processes of one device, under the hardware key it is reported by
    (``gpu_uuid`` or ``mig_uuid``); ``utilization_supported`` is False where the
    device answers no per-process samples, so absent figures are not read as idle."""

    key: HardwareKey
    processes: tuple[GpuProcess, ...] = ()
    utilization_supported: bool = False


@dataclass(frozen=True, slots=True)
class Readings:
    """Everything one collector read in one poll, and the reads that failed."""

    devices: tuple[DeviceReading, ...] = ()
    pci_devices: tuple[PciDevice, ...] = ()
    cpu_times: Mapping[int, CpuTimes] = field(default_factory=dict)  # by CPU
    cpu_numa: tuple[tuple[int, int], ...] = ()  # (cpu, NUMA node)
    dra: DraState | None = None
    # Node-level samples (NUMA memory): their labels are entirely the spec's own.
    node_samples: tuple[Sample, ...] = ()
    issues: tuple[CollectorIssue, ...] = ()
    # None from collectors that do not list GPU processes; () when none run.
    gpu_processes: tuple[DeviceProcesses, ...] | None = None


@dataclass(frozen=True, slots=True)
class CollectorRun:
    """How one collector fared in one poll.

    ``unavailable`` is the reason its source is absent (no driver, no subsystem): the
    join decides whether that is a failure, from what the kubelet advertises.
    ``error_counts`` are cumulative since start, per error label.
    """

    name: str
    success: bool
    duration_seconds: float
    readings: Readings = field(default_factory=Readings)
    error: str | None = None
    unavailable: str | None = None
    error_counts: tuple[tuple[str, int], ...] = ()
    serves: tuple[str, ...] = ()  # the collector's ``serves`` prefixes


# --- The joined snapshot -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Owner:
    """The container a device belongs to; all fields "" for an unallocated device."""

    namespace: str
    pod: str
    container: str


UNALLOCATED = Owner("", "", "")
# The label names an owner's fields, and a device of an owner, are exported under.
OWNER_LABELS = ("namespace", "pod", "container")
DEVICE_LABELS = (*OWNER_LABELS, "resource", "device_id")


@dataclass(frozen=True, slots=True)
class Resolution:
    """What the resolver made of one allocated device.

    ``keys`` are the hardware keys that may name it, most specific first; the join
    takes telemetry from the first key some collector reported. ``physical_id`` is
    the device the telemetry belongs to (a replica's ID without ``::n``).
    ``unresolved`` says why no hardware key is known (a DRA driver we cannot read).
    """

    physical_id: str
    keys: tuple[HardwareKey, ...] = ()
    unresolved: str | None = None
    source: str = ""  # where the keys came from: "device id", a checkpoint, metadata...
    # The hash, made once: a Resolution keys the snapshot's hardware map and is looked
    # up several times a poll for every device, and the generated __hash__ hashed each
    # key again every time (~20 ms a poll on a node of 8,000 device IDs).
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        cached = self._hash
        if cached is None:
            cached = hash((self.physical_id, self.keys, self.unresolved, self.source))
            object.__setattr__(self, "_hash", cached)
        return cached


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """The DRA claim a device was allocated through."""

    claim_namespace: str
    claim_name: str
    pool: str
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class DeviceView:
    """One device the kubelet (or a collector) knows, and its owner.

    For a DRA device ``resource`` is the driver name and ``device_id`` the DRA device
    name; ``claim`` names the claim. Its telemetry is this poll's, beside the views:
    ``Snapshot.hardware_of``.
    """

    resource: str  # "" for a device only a collector knows
    device_id: str
    numa_nodes: tuple[int, ...]  # as the kubelet reports them
    owner: Owner
    allocatable: bool
    resolution: Resolution
    claim: ClaimRef | None = None


class PartKind(enum.StrEnum):
    """What a device is of the physical device it is part of."""

    MIG_SLICE = "mig_slice"  # a MIG device (or GPU instance) of a GPU
    SRIOV_VF = "sriov_vf"  # an SR-IOV virtual function of a physical function


@dataclass(frozen=True, slots=True)
class WholeDevice:
    """The physical device another is part of: a MIG device's GPU, a VF's PF.

    ``keys`` are the whole's keys, as the part's own keys give them (its GPU's UUID
    or minor number, its PF's PCI address) and, where a collector read the whole,
    every key of its reading (the GPU's PCI address, the PF's interface and RDMA names).
    """

    part: PartKind
    keys: tuple[HardwareKey, ...]


@dataclass(frozen=True, slots=True)
class DeviceHardware:
    """What this poll's collectors say of one resolved device: ``reading``, the
    telemetry found through its resolution; ``pci``, what sysfs says of its PCI
    function; ``whole``, the device it is part of (None for a whole device)."""

    reading: DeviceReading | None = None
    pci: PciDevice | None = None
    whole: WholeDevice | None = None


NO_HARDWARE = DeviceHardware()


@dataclass(frozen=True, slots=True)
class ContainerView:
    owner: Owner
    devices: tuple[DeviceView, ...]
    cpu_ids: tuple[int, ...]
    cpus_by_numa: tuple[tuple[str, int], ...]  # (numa_node label, exclusive CPU count)
    memory: tuple[MemoryBlock, ...]
    dynamic_resources: tuple[DynamicResource, ...]
    numa_nodes: tuple[int, ...]  # every node its devices, CPUs and memory sit on
    numa_aligned: bool | None  # None when the container has no exclusive CPUs
    claim_devices: tuple[DeviceView, ...] = ()  # devices of its DRA claims


class ProcessKind(enum.StrEnum):
    """Whose a process on a device is, from the device's point of view."""

    HOLDER = "holder"  # a container the device is allocated to
    OTHER_POD = "other_pod"  # a container that does not hold the device
    HOST = "host"  # no pod
    UNKNOWN_POD = "unknown_pod"  # a pod's cgroup, but no pod-log dir names it
    # The MPS server that runs the holders' MPS clients: sharing machinery, not a user.
    MPS_SERVER = "mps_server"


@dataclass(frozen=True, slots=True)
class ViewedProcess:
    """A GPU process as the join sees it: ``owner`` is the holder it is counted for,
    the other pod's container, or ``UNALLOCATED`` (host, unknown pod)."""

    process: GpuProcess
    kind: ProcessKind
    owner: Owner


@dataclass(frozen=True, slots=True)
class GpuProcessUse:
    """One container's processes on one device, summed: a series of each figure.

    ``resource``/``device_id`` are the holder's own view of the device (its replica
    ID on a shared GPU); a non-holder's use is shown under the physical device.
    A figure is None where no process of the container has it.
    """

    owner: Owner
    resource: str
    device_id: str
    memory_used_bytes: int | None
    sm_utilization_ratio: float | None


@dataclass(frozen=True, slots=True)
class GpuDeviceProcesses:
    """The processes of one physical device (a GPU or MIG device), attributed.

    ``resource``/``device_id`` name the physical device (a replica's ID without
    ``::n``); ``views`` are every (resource, device_id) the kubelet knows it by.
    ``foreign`` counts per kind: ``other_pod`` and ``host`` on a held device,
    ``unallocated_device`` (every process) on a device no container holds.
    """

    resource: str
    device_id: str
    views: tuple[tuple[str, str], ...]
    holders: tuple[Owner, ...]
    processes: tuple[ViewedProcess, ...]
    uses: tuple[GpuProcessUse, ...]
    foreign: tuple[tuple[str, int], ...]
    utilization_supported: bool


@dataclass(frozen=True, slots=True)
class PodView:
    namespace: str
    name: str
    containers: tuple[ContainerView, ...]
    cpu_ids: tuple[int, ...] = ()  # pod-level exclusive CPUs (newest kubelets)
    memory: tuple[MemoryBlock, ...] = ()  # pod-level memory (newest kubelets)


@dataclass(frozen=True, slots=True)
class NodeCount:
    """One node-level series: label values in the family's label order, and its value."""

    label_values: tuple[str, ...]
    value: float


@dataclass(frozen=True, slots=True)
class KubeletStatus:
    up: bool
    socket: str
    api: tuple[tuple[str, bool], ...]  # (method, available)
    last_error: str | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one poll learnt, joined; published by swapping one reference."""

    node: str
    collected_at: float | None  # unix seconds of the kubelet data it holds; None: none yet
    kubelet: KubeletStatus
    allocatable: AllocatableResources
    pods: tuple[PodView, ...]
    devices: tuple[DeviceView, ...]
    allocatable_devices: tuple[NodeCount, ...]  # (resource, numa_node)
    allocated_devices: tuple[NodeCount, ...]  # (resource, numa_node)
    allocatable_cpus: tuple[NodeCount, ...]  # (numa_node,)
    allocated_cpus: tuple[NodeCount, ...]  # (numa_node,)
    allocatable_memory: tuple[NodeCount, ...]  # (memory_type, numa_node)
    allocated_memory: tuple[NodeCount, ...]  # (memory_type, numa_node)
    collectors: tuple[CollectorRun, ...] = ()
    node_samples: tuple[Sample, ...] = ()
    cpu_numa: tuple[tuple[int, int], ...] = ()  # (cpu, NUMA node) as sysfs said
    # This poll's readings, beside the views rather than in them: a poll with only new
    # figures re-uses every pod's views as they were. See hardware_of, and
    # join.container_cpu_seconds for the CPU times.
    hardware: Mapping[Resolution, DeviceHardware] = field(default_factory=dict)
    cpu_times: Mapping[int, CpuTimes] = field(default_factory=dict)
    dra: DraState = field(default_factory=DraState)  # what DRA driver files said
    poll_duration_seconds: float = 0.0
    # --poll.interval, for the page: how far behind time() the timestamp may fall between
    # polls. None for a snapshot made outside a poller.
    poll_interval_seconds: float | None = None
    kubelet_requests: KubeletRequestStats = field(default_factory=KubeletRequestStats)
    # Per-process GPU use; None when the gpu_processes collector is off.
    gpu_processes: tuple[GpuDeviceProcesses, ...] | None = None
    # Every resource name and DRA driver the kubelet mentioned: what collectors serve.
    advertised: frozenset[str] = frozenset()
    # Unix seconds the poll took its readings: collected_at is the kubelet data's, which
    # stays where it was while List fails and the collectors go on (and is Get's time in
    # a view of one pod Get has just answered for, joined with the last poll's readings).
    readings_at: float | None = None
    # time.monotonic() when collected_at was taken, for the data's age: a step of the
    # wall clock (NTP, a corrected RTC) moves time() but not this. None in a snapshot
    # made outside a poller: ages are then taken from collected_at.
    collected_monotonic: float | None = None
    # False where the kubelet gave no inventory (``allocatable`` then stands empty): no
    # held device is "no longer offered" for being absent from it.
    allocatable_known: bool = True

    def hardware_of(self, device: DeviceView) -> DeviceHardware:
        """This poll's telemetry and PCI function of one of the snapshot's devices."""
        return self.hardware.get(device.resolution, NO_HARDWARE)
