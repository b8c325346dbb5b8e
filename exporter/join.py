"""Join kubelet allocations with hardware readings into one Snapshot. No I/O here.

Rules that matter to users:

- Every device ID, replica IDs ``<id>::<n>`` included, is one schedulable unit, so
  ``allocatable - allocated`` per resource and NUMA node is what the scheduler can
  still place. Allocated counts use the allocatable topology of the device where the
  kubelet knows it, so both series carry the same label sets.
- A memory block spanning several NUMA nodes counts once, under the joined label
  (``"0,1"``), never its full size on each node.
- Telemetry belongs to the physical device: replicas of one GPU share it, and each
  owner gets one series. An unallocated device's series has empty owner labels.
- A container is NUMA-aligned when every device with topology shares a NUMA node with
  its exclusive CPUs and every memory block with topology lies within their nodes.
  Containers without exclusive CPUs have no alignment (None).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from exporter.deviceid import DeviceKind, parse_device_id
from exporter.model import (
    UNALLOCATED,
    AllocatableResources,
    CollectorRun,
    ContainerResources,
    ContainerView,
    CpuTimes,
    DeviceIdentity,
    DeviceReading,
    DeviceView,
    KubeletStatus,
    MemoryBlock,
    NodeCount,
    Owner,
    PciDevice,
    PodResources,
    PodView,
    Sample,
    Snapshot,
    numa_label,
)

__all__ = [
    "AllocationChange",
    "MergedReadings",
    "diff_allocations",
    "join_snapshot",
    "merge_readings",
    "telemetry_device_ids",
]


@dataclass(frozen=True, slots=True)
class MergedReadings:
    """Every collector's readings of one poll, indexed for the join."""

    devices: Mapping[str, DeviceReading]
    pci: Mapping[str, PciDevice]
    cpu_times: Mapping[int, CpuTimes]
    node_samples: tuple[Sample, ...]


def _merge_identity(a: DeviceIdentity, b: DeviceIdentity) -> DeviceIdentity:
    return DeviceIdentity(
        uuid=a.uuid or b.uuid,
        pci_address=a.pci_address or b.pci_address,
        model=a.model or b.model,
        vendor=a.vendor or b.vendor,
    )


def merge_readings(runs: Iterable[CollectorRun]) -> MergedReadings:
    """Index all collectors' readings; two readings of one device ID are combined."""
    devices: dict[str, DeviceReading] = {}
    pci: dict[str, PciDevice] = {}
    cpu_times: dict[int, CpuTimes] = {}
    node_samples: list[Sample] = []
    for run in runs:
        readings = run.readings
        for reading in readings.devices:
            known = devices.get(reading.device_id)
            if known is None:
                devices[reading.device_id] = reading
            else:
                devices[reading.device_id] = DeviceReading(
                    device_id=reading.device_id,
                    identity=_merge_identity(known.identity, reading.identity),
                    samples=known.samples + reading.samples,
                )
        for pci_device in readings.pci_devices:
            pci[pci_device.address] = pci_device
        for times in readings.cpu_times:
            cpu_times[times.cpu] = times
        node_samples.extend(readings.node_samples)
    return MergedReadings(devices, pci, cpu_times, tuple(node_samples))


def telemetry_device_ids(
    pods: Iterable[PodResources], allocatable: AllocatableResources
) -> frozenset[str]:
    """The device IDs collectors should match: every known ID, replica suffix stripped."""
    ids: set[str] = set()
    for group in allocatable.devices:
        ids.update(parse_device_id(d).base for d in group.device_ids)
    for pod in pods:
        for container in pod.containers:
            for group in container.devices:
                ids.update(parse_device_id(d).base for d in group.device_ids)
    return frozenset(ids)


def _sorted_nodes(nodes: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted(set(nodes)))


def _pci_address_of(device_id: str, reading: DeviceReading | None) -> str | None:
    parsed = parse_device_id(device_id)
    if parsed.kind is DeviceKind.PCI:
        return parsed.base.lower()
    if reading is not None and reading.identity.pci_address:
        return reading.identity.pci_address
    return None


def _reading_for(device_id: str, readings: MergedReadings) -> DeviceReading | None:
    found = readings.devices.get(device_id)
    if found is None:
        found = readings.devices.get(parse_device_id(device_id).base)
    return found


def _device_view(
    *,
    resource: str,
    device_id: str,
    numa_nodes: tuple[int, ...],
    owner: Owner,
    allocatable: bool,
    readings: MergedReadings,
) -> DeviceView:
    reading = _reading_for(device_id, readings)
    address = _pci_address_of(device_id, reading)
    return DeviceView(
        resource=resource,
        device_id=device_id,
        numa_nodes=numa_nodes,
        owner=owner,
        allocatable=allocatable,
        reading=reading,
        pci=readings.pci.get(address) if address else None,
    )


def _cpus_by_numa(cpu_ids: Iterable[int], cpu_numa: Mapping[int, int]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for cpu in cpu_ids:
        node = cpu_numa.get(cpu)
        counts["" if node is None else str(node)] += 1
    return dict(counts)


def _memory_totals(blocks: Iterable[MemoryBlock]) -> dict[tuple[str, ...], int]:
    totals: Counter[tuple[str, ...]] = Counter()
    for block in blocks:
        totals[(block.memory_type, numa_label(block.numa_nodes))] += block.size_bytes
    return dict(totals)


def _numa_aligned(
    *,
    cpu_ids: tuple[int, ...],
    devices: Iterable[DeviceView],
    memory: Iterable[MemoryBlock],
    cpu_numa: Mapping[int, int],
) -> bool | None:
    if not cpu_ids:
        return None
    cpu_nodes = {cpu_numa[c] for c in cpu_ids if c in cpu_numa}
    if not cpu_nodes:
        return None  # sysfs gave no CPU topology: alignment cannot be judged
    # A device affine to several nodes is close to CPUs on any of them; memory spread
    # over nodes without the container's CPUs is remote for part of its pages.
    devices_ok = all(cpu_nodes.intersection(d.numa_nodes) for d in devices if d.numa_nodes)
    memory_ok = all(set(b.numa_nodes) <= cpu_nodes for b in memory if b.numa_nodes)
    return devices_ok and memory_ok


def _cpu_seconds(
    cpu_ids: tuple[int, ...], cpu_times: Mapping[int, CpuTimes]
) -> tuple[tuple[str, float], ...]:
    if not cpu_ids or any(c not in cpu_times for c in cpu_ids):
        return ()  # a partial sum would look like a counter reset
    totals: dict[str, float] = defaultdict(float)
    for cpu in cpu_ids:
        for mode, seconds in cpu_times[cpu].seconds_by_mode:
            totals[mode] += seconds
    # /proc/stat counts in USER_HZ ticks: rounding drops float noise, not information.
    return tuple((mode, round(seconds, 6)) for mode, seconds in totals.items())


def _container_view(
    *,
    owner: Owner,
    container: ContainerResources,
    allocatable_topology: Mapping[str, tuple[int, ...]],
    allocatable_ids: frozenset[str],
    readings: MergedReadings,
    cpu_numa: Mapping[int, int],
) -> ContainerView:
    devices = tuple(
        _device_view(
            resource=group.resource,
            device_id=device_id,
            numa_nodes=_sorted_nodes(group.numa_nodes) or allocatable_topology.get(device_id, ()),
            owner=owner,
            allocatable=device_id in allocatable_ids,
            readings=readings,
        )
        for group in container.devices
        for device_id in group.device_ids
    )
    cpu_ids = tuple(sorted(set(container.cpu_ids)))
    cpu_nodes = (cpu_numa[c] for c in cpu_ids if c in cpu_numa)
    numa_nodes = _sorted_nodes(
        [
            *cpu_nodes,
            *(n for d in devices for n in d.numa_nodes),
            *(n for b in container.memory for n in b.numa_nodes),
        ]
    )
    return ContainerView(
        owner=owner,
        devices=devices,
        cpu_ids=cpu_ids,
        cpus_by_numa=tuple(sorted(_cpus_by_numa(cpu_ids, cpu_numa).items())),
        memory=container.memory,
        dynamic_resources=container.dynamic_resources,
        numa_nodes=numa_nodes,
        numa_aligned=_numa_aligned(
            cpu_ids=cpu_ids, devices=devices, memory=container.memory, cpu_numa=cpu_numa
        ),
        cpu_seconds_by_mode=_cpu_seconds(cpu_ids, readings.cpu_times),
    )


def _unique_pods(pods: tuple[PodResources, ...]) -> tuple[PodResources, ...]:
    """First of each pod, container and device ID: a reply listing one twice (seen during
    kubelet restarts) must not produce duplicate series, which Prometheus rejects."""
    seen: set[tuple[str, str]] = set()
    unique: list[PodResources] = []
    for pod in pods:
        if (pod.namespace, pod.name) in seen:
            continue
        seen.add((pod.namespace, pod.name))
        containers: dict[str, ContainerResources] = {}
        for container in pod.containers:
            if container.name in containers:
                continue
            held: set[str] = set()
            groups = []
            for group in container.devices:
                ids = tuple(d for d in dict.fromkeys(group.device_ids) if d not in held)
                held.update(ids)
                if ids:
                    groups.append(replace(group, device_ids=ids))
            containers[container.name] = replace(container, devices=tuple(groups))
        unique.append(replace(pod, containers=tuple(containers.values())))
    return tuple(unique)


def _counts(values: Mapping[tuple[str, ...], float]) -> tuple[NodeCount, ...]:
    return tuple(NodeCount(labels, value) for labels, value in sorted(values.items()))


def join_snapshot(
    *,
    node: str,
    collected_at: float,
    kubelet: KubeletStatus,
    pods: tuple[PodResources, ...],
    allocatable: AllocatableResources,
    cpu_numa: Mapping[int, int],
    collector_runs: tuple[CollectorRun, ...] = (),
) -> Snapshot:
    """Everything one poll learnt, joined per container and per node."""
    readings = merge_readings(collector_runs)
    pods = _unique_pods(pods)
    allocatable_topology = {
        device_id: _sorted_nodes(group.numa_nodes)
        for group in allocatable.devices
        for device_id in group.device_ids
    }
    allocatable_resource = {
        device_id: group.resource for group in allocatable.devices for device_id in group.device_ids
    }
    allocatable_ids = frozenset(allocatable_topology)

    pod_views = tuple(
        PodView(
            namespace=pod.namespace,
            name=pod.name,
            containers=tuple(
                _container_view(
                    owner=Owner(pod.namespace, pod.name, container.name),
                    container=container,
                    allocatable_topology=allocatable_topology,
                    allocatable_ids=allocatable_ids,
                    readings=readings,
                    cpu_numa=cpu_numa,
                )
                for container in pod.containers
            ),
            cpu_ids=tuple(sorted(set(pod.cpu_ids))),
            memory=pod.memory,
        )
        for pod in pods
    )

    allocated = [d for p in pod_views for c in p.containers for d in c.devices]
    allocated_ids = {d.device_id for d in allocated}
    unallocated = [
        _device_view(
            resource=allocatable_resource[device_id],
            device_id=device_id,
            numa_nodes=topology,
            owner=UNALLOCATED,
            allocatable=True,
            readings=readings,
        )
        for device_id, topology in allocatable_topology.items()
        if device_id not in allocated_ids
    ]
    known_bases = {parse_device_id(d.device_id).base for d in (*allocated, *unallocated)}
    known_bases |= {d.device_id for d in (*allocated, *unallocated)}
    # Devices only a collector knows (a GPU no device plugin advertises) still show up.
    discovered = [
        _device_view(
            resource="",
            device_id=device_id,
            numa_nodes=(),
            owner=UNALLOCATED,
            allocatable=False,
            readings=readings,
        )
        for device_id in sorted(readings.devices)
        if device_id not in known_bases
    ]

    allocatable_devices: Counter[tuple[str, ...]] = Counter(
        (allocatable_resource[d], numa_label(t)) for d, t in allocatable_topology.items()
    )
    allocated_devices: Counter[tuple[str, ...]] = Counter({key: 0 for key in allocatable_devices})
    for device in allocated:
        allocated_devices[(device.resource, numa_label(device.numa_nodes))] += 1

    allocatable_cpus = _cpus_by_numa(allocatable.cpu_ids, cpu_numa)
    allocated_cpu_ids = {c for p in pod_views for c in p.cpu_ids} | {
        c for p in pod_views for ct in p.containers for c in ct.cpu_ids
    }
    allocated_cpus = dict.fromkeys(allocatable_cpus, 0) | _cpus_by_numa(allocated_cpu_ids, cpu_numa)

    allocatable_memory = _memory_totals(allocatable.memory)
    allocated_memory = dict.fromkeys(allocatable_memory, 0) | _memory_totals(
        [
            *(b for p in pod_views for b in p.memory),
            *(b for p in pod_views for c in p.containers for b in c.memory),
        ]
    )

    return Snapshot(
        node=node,
        collected_at=collected_at,
        kubelet=kubelet,
        allocatable=allocatable,
        pods=pod_views,
        devices=(*allocated, *sorted(unallocated, key=_device_key), *discovered),
        allocatable_devices=_counts(allocatable_devices),
        allocated_devices=_counts(allocated_devices),
        allocatable_cpus=_counts({(k,): v for k, v in allocatable_cpus.items()}),
        allocated_cpus=_counts({(k,): v for k, v in allocated_cpus.items()}),
        allocatable_memory=_counts(allocatable_memory),
        allocated_memory=_counts(allocated_memory),
        collectors=collector_runs,
        node_samples=readings.node_samples,
        cpu_numa=tuple(sorted(cpu_numa.items())),
    )


def _device_key(device: DeviceView) -> tuple[str, str]:
    return (device.resource, device.device_id)


@dataclass(frozen=True, slots=True)
class AllocationChange:
    """A container gained or lost devices or exclusive CPUs between two snapshots."""

    owner: Owner
    devices_added: tuple[str, ...]
    devices_removed: tuple[str, ...]
    cpus_added: tuple[int, ...]
    cpus_removed: tuple[int, ...]


def _holdings(snapshot: Snapshot | None) -> dict[Owner, tuple[set[str], set[int]]]:
    if snapshot is None:
        return {}
    return {
        c.owner: ({d.device_id for d in c.devices}, set(c.cpu_ids))
        for p in snapshot.pods
        for c in p.containers
        if c.devices or c.cpu_ids
    }


def diff_allocations(old: Snapshot | None, new: Snapshot) -> tuple[AllocationChange, ...]:
    """What changed hands: one entry per container whose devices or CPUs changed."""
    before, after = _holdings(old), _holdings(new)
    changes = []
    for owner in sorted(
        before.keys() | after.keys(), key=lambda o: (o.namespace, o.pod, o.container)
    ):
        old_devices, old_cpus = before.get(owner, (set(), set()))
        new_devices, new_cpus = after.get(owner, (set(), set()))
        if (old_devices, old_cpus) == (new_devices, new_cpus):
            continue
        changes.append(
            AllocationChange(
                owner=owner,
                devices_added=tuple(sorted(new_devices - old_devices)),
                devices_removed=tuple(sorted(old_devices - new_devices)),
                cpus_added=tuple(sorted(new_cpus - old_cpus)),
                cpus_removed=tuple(sorted(old_cpus - new_cpus)),
            )
        )
    return tuple(changes)
