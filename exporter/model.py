"""Facts the exporter works with, as frozen dataclasses.

Three groups:

- what the kubelet says (``PodResources``, ``AllocatableResources`` and their parts),
  translated from protobuf inside ``exporter.kubelet`` so nothing else sees gRPC types;
- what collectors read from hardware (``Readings``), keyed by device IDs and CPUs,
  never by pods;
- the joined, immutable ``Snapshot`` that HTTP handlers and the exposition read.

NUMA node tuples are always sorted and free of duplicates.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = [
    "UNALLOCATED",
    "AllocatableResources",
    "ClaimDevice",
    "CollectorRun",
    "ContainerResources",
    "ContainerView",
    "CpuTimes",
    "DeviceGroup",
    "DeviceIdentity",
    "DeviceReading",
    "DeviceView",
    "DynamicResource",
    "KubeletStatus",
    "MemoryBlock",
    "MetricKind",
    "MetricSpec",
    "NodeCount",
    "Owner",
    "PciDevice",
    "PodResources",
    "PodView",
    "Readings",
    "Sample",
    "Snapshot",
    "numa_label",
]


def numa_label(numa_nodes: tuple[int, ...]) -> str:
    """The ``numa_node`` label value: decimal ids, sorted, comma-joined; "" when unknown."""
    return ",".join(str(n) for n in sorted(set(numa_nodes)))


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


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """Telemetry of one device.

    ``device_id`` is the kubelet device ID the collector matched (replica suffix
    ``::n`` stripped), or the collector's own canonical ID (``GPU-<uuid>``, a PCI
    address) for a device no kubelet ID names.
    """

    device_id: str
    identity: DeviceIdentity = field(default_factory=DeviceIdentity)
    samples: tuple[Sample, ...] = ()


@dataclass(frozen=True, slots=True)
class PciDevice:
    """A PCI function as sysfs describes it (``/sys/bus/pci/devices/<address>/``)."""

    address: str  # domain:bus:device.function, lower case: 0000:af:00.1
    vendor_id: str  # "0x10de"
    device_id: str
    class_id: str  # "0x030200"
    numa_node: int | None  # None where sysfs says -1 or has no numa_node file


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """Time one CPU spent per mode, from /proc/stat, in seconds."""

    cpu: int
    seconds_by_mode: tuple[tuple[str, float], ...]


@dataclass(frozen=True, slots=True)
class Readings:
    """Everything one collector read in one poll."""

    devices: tuple[DeviceReading, ...] = ()
    pci_devices: tuple[PciDevice, ...] = ()
    cpu_times: tuple[CpuTimes, ...] = ()
    # Node-level samples (NUMA memory, a collector's own error counters): their labels
    # are entirely the spec's own.
    node_samples: tuple[Sample, ...] = ()


@dataclass(frozen=True, slots=True)
class CollectorRun:
    """How one collector fared in one poll."""

    name: str
    success: bool
    duration_seconds: float
    readings: Readings = field(default_factory=Readings)
    error: str | None = None


# --- The joined snapshot -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Owner:
    """The container a device belongs to; all fields "" for an unallocated device."""

    namespace: str
    pod: str
    container: str


UNALLOCATED = Owner("", "", "")


@dataclass(frozen=True, slots=True)
class DeviceView:
    """One device ID the kubelet (or a collector) knows, with owner and telemetry."""

    resource: str  # "" for a device only a collector knows
    device_id: str
    numa_nodes: tuple[int, ...]  # as the kubelet reports them
    owner: Owner
    allocatable: bool
    reading: DeviceReading | None = None
    pci: PciDevice | None = None


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
    cpu_seconds_by_mode: tuple[tuple[str, float], ...] = ()


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
    collected_at: float  # unix seconds of the kubelet data it holds
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
