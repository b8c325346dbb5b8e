"""Join kubelet allocations with hardware readings into one Snapshot. No I/O here.

Rules that matter to users:

- Every device ID, replica IDs ``<id>::<n>`` included, is one schedulable unit, so
  ``allocatable - allocated`` per resource and NUMA node is what the scheduler can
  still place. Both counts take one topology per device ID -- the allocatable one
  wherever the ID is allocatable -- so the difference stays the free count even while
  device plugins re-register after a kubelet restart.
- Telemetry is found through hardware keys: ``exporter.resolver`` maps each device ID
  and DRA device to keys, collectors report readings under keys, and a device takes
  the readings of its first key that any collector reported.
- A collector whose source is absent has failed where the node advertises resources
  it serves (NVML missing on a node with ``nvidia.com/gpu``).
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

from exporter.model import (
    NO_HARDWARE,
    UNALLOCATED,
    AllocatableResources,
    ClaimRef,
    CollectorRun,
    ContainerResources,
    ContainerView,
    CpuTimes,
    DeviceHardware,
    DeviceIdentity,
    DeviceProcesses,
    DeviceReading,
    DeviceView,
    DraState,
    DynamicResource,
    GpuDeviceProcesses,
    HardwareKey,
    KeyKind,
    KubeletStatus,
    MemoryBlock,
    NodeCount,
    Owner,
    PciDevice,
    PodResources,
    PodView,
    Resolution,
    Sample,
    Snapshot,
    WholeDevice,
    numa_label,
)
from exporter.processes import attribute_processes
from exporter.resolver import resolve_claim_device, resolve_device_id, whole_of

__all__ = [
    "AllocationChange",
    "JoinCache",
    "MergedReadings",
    "container_cpu_seconds",
    "diff_allocations",
    "holder_count",
    "join_fresh_pod",
    "join_snapshot",
    "judge_collectors",
    "merge_readings",
    "refresh_readings",
]

# Resolution.source of a device only a collector knows (no kubelet ID names it).
DISCOVERED_SOURCE = "hardware"


@dataclass(frozen=True, slots=True)
class MergedReadings:
    """Every collector's readings of one poll, indexed for the join."""

    by_key: Mapping[HardwareKey, tuple[DeviceReading, ...]]
    standalone: tuple[DeviceReading, ...]  # shown even where no allocation names them
    pci: Mapping[str, PciDevice]
    cpu_times: Mapping[int, CpuTimes]
    node_samples: tuple[Sample, ...]
    # GPU processes by device key; None when no collector lists them.
    gpu_processes: Mapping[HardwareKey, DeviceProcesses] | None = None


def merge_readings(runs: Iterable[CollectorRun]) -> MergedReadings:
    """Index all collectors' readings by each of their hardware keys."""
    by_key: dict[HardwareKey, list[DeviceReading]] = defaultdict(list)
    standalone: list[DeviceReading] = []
    pci: dict[str, PciDevice] = {}
    cpu_times: Mapping[int, CpuTimes] = {}
    node_samples: list[Sample] = []
    gpu_processes: dict[HardwareKey, DeviceProcesses] | None = None
    for run in runs:
        readings = run.readings
        if readings.gpu_processes is not None:
            gpu_processes = gpu_processes or {}
            gpu_processes.update((listed.key, listed) for listed in readings.gpu_processes)
        for reading in readings.devices:
            for key in dict.fromkeys(reading.keys):
                by_key[key].append(reading)
            if reading.standalone:
                standalone.append(reading)
        for pci_device in readings.pci_devices:
            pci[pci_device.address] = pci_device
        if readings.cpu_times:
            # One collector reads CPU times: its mapping is taken as it is, so CPUs
            # no container holds are never converted (see ProcStatTimes).
            cpu_times = {**cpu_times, **readings.cpu_times} if cpu_times else readings.cpu_times
        node_samples.extend(readings.node_samples)
    return MergedReadings(
        {key: tuple(found) for key, found in by_key.items()},
        tuple(standalone),
        pci,
        cpu_times,
        tuple(node_samples),
        gpu_processes,
    )


def _merge_identity(a: DeviceIdentity, b: DeviceIdentity) -> DeviceIdentity:
    return DeviceIdentity(
        uuid=a.uuid or b.uuid,
        pci_address=a.pci_address or b.pci_address,
        model=a.model or b.model,
        vendor=a.vendor or b.vendor,
    )


def _combine(found: tuple[DeviceReading, ...]) -> DeviceReading:
    """Readings of one device from several collectors (a NIC's netdev and RDMA counters)."""
    if len(found) == 1:
        return found[0]
    identity = DeviceIdentity()
    for reading in found:
        identity = _merge_identity(identity, reading.identity)
    return DeviceReading(
        name=found[0].name,
        keys=tuple(dict.fromkeys(k for r in found for k in r.keys)),
        identity=identity,
        samples=tuple(s for r in found for s in r.samples),
        standalone=any(r.standalone for r in found),
    )


class _Matcher:
    """Finds readings for resolutions, and remembers which readings found an owner."""

    def __init__(self, readings: MergedReadings) -> None:
        self.readings = readings
        self.used: set[int] = set()  # id() of readings attached to some device
        self._combined: dict[HardwareKey, DeviceReading] = {}
        self._found: dict[Resolution, DeviceHardware] = {}

    def reading_for(self, resolution: Resolution) -> DeviceReading | None:
        for key in resolution.keys:
            found = self.readings.by_key.get(key)
            if not found:
                continue
            self.used.update(id(r) for r in found)
            combined = self._combined.get(key)
            if combined is None:
                combined = self._combined[key] = _combine(found)
            return combined
        return None

    def pci_for(self, resolution: Resolution, reading: DeviceReading | None) -> PciDevice | None:
        for key in resolution.keys:
            if key.kind is KeyKind.PCI:
                return self.readings.pci.get(key.value)
        if reading is not None and reading.identity.pci_address:
            return self.readings.pci.get(reading.identity.pci_address)
        return None

    def whole_for(
        self, keys: tuple[HardwareKey, ...], reading: DeviceReading | None
    ) -> WholeDevice | None:
        """The device this one is part of, from its resolution's and its reading's keys,
        with every key of the whole's own readings. Those are not marked used: a
        MIG-enabled GPU or a PF is still shown as a device of its own."""
        whole = whole_of((*keys, *(reading.keys if reading else ())))
        if whole is None:
            return None
        for key in whole.keys:
            found = self.readings.by_key.get(key)
            if found:
                named = (*whole.keys, *(k for r in found for k in r.keys))
                return replace(whole, keys=tuple(dict.fromkeys(named)))
        return whole

    def hardware(self, resolution: Resolution) -> DeviceHardware:
        """The device's reading, PCI function and whole, found once per resolution."""
        found = self._found.get(resolution)
        if found is None:
            reading = self.reading_for(resolution)
            pci = self.pci_for(resolution, reading)
            whole = self.whole_for(resolution.keys, reading)
            reading = _with_function_samples(reading, pci)
            found = (
                NO_HARDWARE
                if reading is None and pci is None and whole is None
                else DeviceHardware(reading, pci, whole)
            )
            self._found[resolution] = found
        return found


def _with_function_samples(
    reading: DeviceReading | None, pci: PciDevice | None
) -> DeviceReading | None:
    """The device's reading with its PCI function's own figures (its PCIe link and its
    errors) added; a reading of those alone where no collector read the device; the
    reading as it is where the function has none. A MIG device's are its GPU's: they
    stay with the GPU (a device no owner holds, shown under its own name), so that one
    link is one series, not one per slice."""
    if pci is None or not pci.samples:
        return reading
    if reading is None:
        return DeviceReading(
            name=pci.address, keys=(HardwareKey(KeyKind.PCI, pci.address),), samples=pci.samples
        )
    if any(key.kind is KeyKind.MIG_UUID for key in reading.keys):
        return reading
    return replace(reading, samples=(*reading.samples, *pci.samples))


def _sorted_nodes(nodes: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted(set(nodes)))


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


def container_cpu_seconds(
    container: ContainerView, cpu_times: Mapping[int, CpuTimes]
) -> tuple[tuple[str, float], ...]:
    """Seconds the container's exclusive CPUs spent per mode, summed over its CPUs
    (``cpu_times``: a snapshot's); () where a CPU's figures are missing."""
    cpu_ids = container.cpu_ids
    if len(cpu_ids) == 1:
        # Most containers hold one CPU: its own figures, as the collector made them.
        times = cpu_times.get(cpu_ids[0])
        return () if times is None else times.seconds_by_mode
    if not cpu_ids or any(c not in cpu_times for c in cpu_ids):
        return ()  # a partial sum would look like a counter reset
    totals: dict[str, float] = defaultdict(float)
    seen: Counter[str] = Counter()
    for cpu in cpu_ids:
        for mode, seconds in cpu_times[cpu].seconds_by_mode:
            totals[mode] += seconds
            seen[mode] += 1
    # A mode one CPU's line lost (a garbage figure) is left out for the same reason.
    # /proc/stat counts in USER_HZ ticks: rounding drops the float noise of summing.
    return tuple(
        (mode, round(seconds, 6)) for mode, seconds in totals.items() if seen[mode] == len(cpu_ids)
    )


def _claim_views(
    container: ContainerResources, *, owner: Owner, matcher: _Matcher, dra: DraState
) -> tuple[DeviceView, ...]:
    """One view per device of each DRA claim: ``resource`` is the driver name.

    The kubelet reports no topology for DRA devices; where sysfs knows the device's
    PCI function, its NUMA node stands in, so alignment covers DRA devices too.
    """
    views = []
    for claim in container.dynamic_resources:
        for device in claim.devices:
            resolution = resolve_claim_device(
                device,
                claim_namespace=claim.claim_namespace,
                claim_name=claim.claim_name,
                dra=dra,
            )
            views.append(
                DeviceView(
                    resource=device.driver,
                    device_id=device.device,
                    numa_nodes=_sysfs_numa(matcher.hardware(resolution)),
                    owner=owner,
                    allocatable=False,
                    resolution=resolution,
                    claim=ClaimRef(
                        claim.claim_namespace, claim.claim_name, device.pool, device.share_id
                    ),
                )
            )
    return tuple(views)


def _sysfs_numa(hardware: DeviceHardware) -> tuple[int, ...]:
    """A DRA device's NUMA node, which the kubelet does not report: its PCI function's."""
    pci = hardware.pci
    return () if pci is None or pci.numa_node is None else (pci.numa_node,)


def _claims_read_alike(view: PodView, matcher: _Matcher) -> bool:
    """Whether the NUMA nodes of the pod's DRA devices are still what this poll's readings
    give. They come from sysfs and NVML, not from the kubelet: a view made while a
    collector failed, or before NVML was up, must not keep them missing."""
    return all(
        d.numa_nodes == _sysfs_numa(matcher.hardware(d.resolution))
        for container in view.containers
        for d in container.claim_devices
    )


def _resolved(device_id: str, made: dict[Resolution, Resolution]) -> Resolution:
    """The device's Resolution, the very object ``made`` holds where it holds an equal
    one: the join and the render look resolutions up in dicts every poll, and equal keys
    that are not one object are compared field by field there (one ID in several RDMA
    shared pools, the replicas of a time-sliced GPU: ~14,000 comparisons a poll with 8
    pools of 1,000 IDs). ``made`` lives for one join, so it holds nothing after it."""
    resolution = resolve_device_id(device_id)
    return made.setdefault(resolution, resolution)


def _container_view(
    *,
    owner: Owner,
    container: ContainerResources,
    allocatable_topology: Mapping[tuple[str, str], tuple[int, ...]],
    matcher: _Matcher,
    cpu_numa: Mapping[int, int],
    dra: DraState,
    resolutions: dict[Resolution, Resolution],
) -> ContainerView:
    if not (container.devices or container.cpu_ids or container.dynamic_resources):
        # Most containers hold nothing but maybe memory: no owners to resolve, no readings.
        return ContainerView(
            owner=owner,
            devices=(),
            cpu_ids=(),
            cpus_by_numa=(),
            memory=container.memory,
            dynamic_resources=(),
            numa_nodes=_sorted_nodes(n for b in container.memory for n in b.numa_nodes),
            numa_aligned=None,
        )
    devices = tuple(
        DeviceView(
            resource=group.resource,
            device_id=device_id,
            numa_nodes=_sorted_nodes(group.numa_nodes)
            or allocatable_topology.get((group.resource, device_id), ()),
            owner=owner,
            allocatable=(group.resource, device_id) in allocatable_topology,
            resolution=_resolved(device_id, resolutions),
        )
        for group in container.devices
        for device_id in group.device_ids
    )
    claim_devices = _claim_views(container, owner=owner, matcher=matcher, dra=dra)
    cpu_ids = tuple(sorted(set(container.cpu_ids)))
    cpu_nodes = (cpu_numa[c] for c in cpu_ids if c in cpu_numa)
    numa_nodes = _sorted_nodes(
        [
            *cpu_nodes,
            *(n for d in (*devices, *claim_devices) for n in d.numa_nodes),
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
            cpu_ids=cpu_ids,
            devices=(*devices, *claim_devices),
            memory=container.memory,
            cpu_numa=cpu_numa,
        ),
        claim_devices=claim_devices,
    )


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A pod as the kubelet sent it, without duplicates, and the resources it names."""

    sent: PodResources
    unique: PodResources
    resources: frozenset[str]


@dataclass(frozen=True, slots=True)
class _AllocatableTotals:
    """What the join takes from ``GetAllocatableResources`` and the CPU map alone."""

    # (resource, device ID) -> its NUMA nodes, sorted. By both: plugins give the same IDs
    # to several resources (the RDMA shared device plugin: "0".."N-1" for each).
    topology: Mapping[tuple[str, str], tuple[int, ...]]
    devices: Mapping[tuple[str, ...], int]  # (resource, numa_node) -> device IDs
    cpus: Mapping[str, int]  # numa_node -> CPUs
    memory: Mapping[tuple[str, ...], int]  # (type, numa_node) -> bytes
    # Each allocatable device as a view of it held by no container, by (resource, ID),
    # sorted so: those of the devices nobody holds are the snapshot's, the very objects
    # while the inventory is the same, so a join after churn does not resolve every ID
    # again and the render finds them as they were (thousands on some nodes: RDMA shared
    # pools, GPU replicas).
    free: Mapping[tuple[str, str], DeviceView]


SHARED_POOL = ""  # the container name under which a pod's shared pool is shown


def _shared_pool(pod: PodResources) -> ContainerResources | None:
    """A pod's shared pool under pod-level resource managers, as a container named "":
    the pod's exclusive CPUs no container holds exclusively, and its memory blocks less
    its containers' (reference/node/pod-level-resource-managers: "PodSharedPool = Pod -
    Union(containers)"), where containers without exclusive CPUs of their own run. So
    the pool gets its CPU seconds and a pod's per-container series add up to the pod's.
    None for a pod without pod-level resources, or whose containers hold it all."""
    if not (pod.cpu_ids or pod.memory) or any(c.name == SHARED_POOL for c in pod.containers):
        return None  # (a container named "", which validation forbids, would be two series)
    held = {c for container in pod.containers for c in container.cpu_ids}
    cpus = tuple(sorted(set(pod.cpu_ids) - held))
    # Matched on type and NUMA set alike: the memory manager's pod scope gives the pod's
    # blocks, each exclusive container's and the pool's one NUMA mask, the pod's hint
    # (its static policy's pod-level allocation), so a container block on a part of the
    # pod's nodes does not occur.
    left: dict[tuple[str, tuple[int, ...]], int] = defaultdict(int)
    for block in pod.memory:
        left[block.memory_type, _sorted_nodes(block.numa_nodes)] += block.size_bytes
    for container in pod.containers:
        for block in container.memory:
            key = (block.memory_type, _sorted_nodes(block.numa_nodes))
            if key in left:
                left[key] -= block.size_bytes
    memory = tuple(
        MemoryBlock(kind, size, nodes) for (kind, nodes), size in sorted(left.items()) if size > 0
    )
    if not (cpus or memory):
        return None
    return ContainerResources(SHARED_POOL, cpu_ids=cpus, memory=memory)


def _pod_memory(pod: PodView) -> tuple[MemoryBlock, ...]:
    """The memory a pod holds: its pod-level blocks where it has them (pod-level
    resource managers: the whole allocation, its exclusive containers' blocks a part of
    it), else its containers' blocks."""
    return pod.memory or tuple(b for c in pod.containers for b in c.memory)


def _allocatable_totals(
    allocatable: AllocatableResources,
    cpu_numa: Mapping[int, int],
    resolutions: dict[Resolution, Resolution],
) -> _AllocatableTotals:
    topology = {
        (group.resource, device_id): _sorted_nodes(group.numa_nodes)
        for group in allocatable.devices
        for device_id in group.device_ids
    }
    return _AllocatableTotals(
        topology=topology,
        devices=Counter((resource, numa_label(t)) for (resource, _), t in topology.items()),
        # Each CPU once, as allocated CPUs are: an ID listed twice is one CPU.
        cpus=_cpus_by_numa(set(allocatable.cpu_ids), cpu_numa),
        memory=_memory_totals(allocatable.memory),
        free={
            (resource, device_id): DeviceView(
                resource=resource,
                device_id=device_id,
                numa_nodes=nodes,
                owner=UNALLOCATED,
                allocatable=True,
                resolution=_resolved(device_id, resolutions),
            )
            for (resource, device_id), nodes in sorted(topology.items())
        },
    )


def _prepare_pods(
    pods: tuple[PodResources, ...], *, last: Mapping[int, _Prepared]
) -> dict[int, _Prepared]:
    """Each pod de-duplicated (the first of each container and device ID: a reply
    listing one twice, seen during kubelet restarts, must not produce duplicate series,
    which Prometheus rejects), with the resources it names, by ``id()`` of the pod sent.
    Pods listed under one namespace and name (a static pod replaced, a StatefulSet pod
    made again while the old one still holds its devices; the kubelet lists both, in
    map order) are merged: what either holds is that pod name's, whatever the order.

    A pod found in ``last`` (the last call's result) as the very same object is not
    looked through again.
    """
    by_name: dict[tuple[str, str], PodResources] = {}
    for pod in pods:
        key = (pod.namespace, pod.name)
        found_pod = by_name.get(key)
        by_name[key] = pod if found_pod is None else _merged(found_pod, pod)
    prepared: dict[int, _Prepared] = {}
    for pod in by_name.values():
        found = last.get(id(pod))
        if found is None or found.sent is not pod:
            found = _Prepared(pod, _unique_containers(pod), frozenset(_pod_resources(pod)))
        prepared[id(pod)] = found
    return prepared


def _merged(one: PodResources, other: PodResources) -> PodResources:
    """Two pods of one namespace and name as one, the same whichever came first. Their
    memory blocks add up: two blocks of 8 GiB are 16 (a set of blocks made them 8), also
    where both entries are alike (List makes one entry per pod object, server_v1.go: a
    replacement that holds memory but no exclusive CPUs lists just like the old pod)."""
    containers: dict[str, list[ContainerResources]] = defaultdict(list)
    for container in (*one.containers, *other.containers):
        containers[container.name].append(container)
    return replace(
        one,
        containers=tuple(
            ContainerResources(
                name=name,
                devices=tuple(sorted({g for c in held for g in c.devices}, key=repr)),
                cpu_ids=tuple(sorted({i for c in held for i in c.cpu_ids})),
                memory=tuple(sorted((b for c in held for b in c.memory), key=repr)),
                dynamic_resources=tuple(
                    sorted({r for c in held for r in c.dynamic_resources}, key=repr)
                ),
            )
            for name, held in sorted(containers.items())
        ),
        cpu_ids=tuple(sorted({*one.cpu_ids, *other.cpu_ids})),
        memory=tuple(sorted((*one.memory, *other.memory), key=repr)),
    )


def _unique_containers(pod: PodResources) -> PodResources:
    containers: dict[str, ContainerResources] = {}
    for container in pod.containers:
        if container.name in containers:
            continue
        containers[container.name] = _unique_devices(container)
    kept = tuple(containers.values())
    # The same objects where nothing was dropped: most replies, and cheaper.
    same = len(kept) == len(pod.containers) and all(
        a is b for a, b in zip(kept, pod.containers, strict=True)
    )
    return pod if same else replace(pod, containers=kept)


def _unique_devices(container: ContainerResources) -> ContainerResources:
    held: set[tuple[str, str]] = set()  # (resource, device ID): an ID may serve two
    groups = []
    dropped = False
    for group in container.devices:
        ids = tuple(d for d in dict.fromkeys(group.device_ids) if (group.resource, d) not in held)
        held.update((group.resource, d) for d in ids)
        if ids != group.device_ids:
            dropped = True
        if ids:
            groups.append(group if ids == group.device_ids else replace(group, device_ids=ids))
    claims = _unique_claims(container.dynamic_resources)
    if claims is not container.dynamic_resources:
        container = replace(container, dynamic_resources=claims)
    return replace(container, devices=tuple(groups)) if dropped else container


def _unique_claims(claims: tuple[DynamicResource, ...]) -> tuple[DynamicResource, ...]:
    """Each claim once: the kubelet lists a claim once per reference in the container's
    ``resources.claims`` (two requests of one claim: twice), with the same devices."""
    if len(claims) < 2:
        return claims
    merged: dict[tuple[str, str], DynamicResource] = {}
    for claim in claims:
        key = (claim.claim_namespace, claim.claim_name)
        found = merged.get(key)
        if found is None:
            merged[key] = claim
        elif found != claim:
            more = tuple(d for d in claim.devices if d not in found.devices)
            merged[key] = replace(found, devices=found.devices + more)
    return claims if len(merged) == len(claims) else tuple(merged.values())


def _counts(values: Mapping[tuple[str, ...], float]) -> tuple[NodeCount, ...]:
    return tuple(NodeCount(labels, value) for labels, value in sorted(values.items()))


def judge_collectors(
    runs: Iterable[CollectorRun], *, advertised: Iterable[str]
) -> tuple[CollectorRun, ...]:
    """Runs as reported: a collector whose source is absent has failed where the node
    advertises a resource or DRA driver it serves; elsewhere absence is quiet."""
    names = sorted(set(advertised))
    judged = []
    for run in runs:
        if run.unavailable is not None and run.success:
            wanted = (
                next((n for n in names if n.startswith(run.serves)), None) if run.serves else None
            )
            if wanted is not None:
                run = replace(
                    run, success=False, error=f"{run.unavailable}, but the node has {wanted}"
                )
        judged.append(run)
    return tuple(judged)


def _pod_resources(pod: PodResources) -> set[str]:
    names: set[str] = set()
    for container in pod.containers:
        names.update(group.resource for group in container.devices)
        names.update(d.driver for c in container.dynamic_resources for d in c.devices)
    return names


def _with_hardware(
    matcher: _Matcher, known: tuple[DeviceView, ...]
) -> tuple[tuple[DeviceView, ...], dict[Resolution, DeviceHardware]]:
    """``known`` and the devices only a collector knows (a GPU no device plugin
    advertises, shown with empty owner labels), with what each one's resolution found."""
    hardware = {d.resolution: matcher.hardware(d.resolution) for d in known}
    # Every reading an owner found is marked used only now.
    discovered = []
    for reading in sorted(matcher.readings.standalone, key=lambda r: r.name):
        if id(reading) in matcher.used:
            continue
        view = DeviceView(
            resource="",
            device_id=reading.name,
            numa_nodes=(),
            owner=UNALLOCATED,
            allocatable=False,
            resolution=Resolution(
                physical_id=reading.name, keys=reading.keys, source=DISCOVERED_SOURCE
            ),
        )
        pci = matcher.readings.pci.get(reading.identity.pci_address or "")
        hardware[view.resolution] = DeviceHardware(
            _with_function_samples(reading, pci), pci, matcher.whole_for((), reading)
        )
        discovered.append(view)
    return (*known, *discovered), hardware


def join_snapshot(
    *,
    node: str,
    collected_at: float | None,
    kubelet: KubeletStatus,
    pods: tuple[PodResources, ...],
    allocatable: AllocatableResources,
    cpu_numa: Mapping[int, int],
    dra: DraState = DraState(),  # noqa: B008 - frozen, shared safely
    collector_runs: tuple[CollectorRun, ...] = (),
    cache: JoinCache | None = None,
    allocatable_known: bool = True,
) -> Snapshot:
    """Everything one poll learnt, joined per container and per node.

    ``cache`` only saves work (see ``JoinCache``): the result is the same without.
    """
    prepared = _prepare_pods(pods, last=cache.prepared if cache is not None else {})
    advertised = frozenset(
        {group.resource for group in allocatable.devices}.union(
            *(p.resources for p in prepared.values())
        )
    )
    collector_runs = judge_collectors(collector_runs, advertised=advertised)
    matcher = _Matcher(merge_readings(collector_runs))
    pods = tuple(p.unique for p in prepared.values())
    inputs = (allocatable, cpu_numa, dra)
    same_inputs = (
        cache is not None
        and cache.inputs is not None
        and all(a is b for a, b in zip(inputs, cache.inputs, strict=True))
    )
    totals = cache.totals if cache is not None and same_inputs else None
    resolutions: dict[Resolution, Resolution] = {}  # each device's one, this join
    if totals is None:
        totals = _allocatable_totals(allocatable, cpu_numa, resolutions)

    def pod_view(pod: PodResources) -> PodView:
        pool = _shared_pool(pod)
        return PodView(
            namespace=pod.namespace,
            name=pod.name,
            containers=tuple(
                _container_view(
                    owner=Owner(pod.namespace, pod.name, container.name),
                    container=container,
                    allocatable_topology=totals.topology,
                    matcher=matcher,
                    cpu_numa=cpu_numa,
                    dra=dra,
                    resolutions=resolutions,
                )
                for container in (*pod.containers, *((pool,) if pool else ()))
            ),
            cpu_ids=tuple(sorted(set(pod.cpu_ids))),
            memory=pod.memory,
        )

    last: dict[int, tuple[PodResources, PodView]] = {}
    last_claiming: frozenset[int] = frozenset()
    if cache is not None and same_inputs:
        last, last_claiming = cache.views, cache.claiming
    views: dict[int, tuple[PodResources, PodView]] = {}
    claiming: set[int] = set()  # pods whose views hold DRA devices
    for pod in pods:
        key = id(pod)
        found = last.get(key)
        if (
            found is not None
            and found[0] is pod
            and (key not in last_claiming or _claims_read_alike(found[1], matcher))
        ):
            view = found[1]
            if key in last_claiming:
                claiming.add(key)
        else:
            view = pod_view(pod)
            if any(c.claim_devices for c in view.containers):
                claiming.add(key)
        views[key] = (pod, view)
    pod_views = tuple(view for _, view in views.values())
    if cache is not None:
        cache.inputs, cache.views, cache.prepared, cache.totals = inputs, views, prepared, totals
        cache.claiming = frozenset(claiming)

    allocated = [d for p in pod_views for c in p.containers for d in c.devices]
    claimed = [d for p in pod_views for c in p.containers for d in c.claim_devices]
    allocated_keys = {(d.resource, d.device_id) for d in allocated}
    unallocated = [view for key, view in totals.free.items() if key not in allocated_keys]
    devices, hardware = _with_hardware(matcher, (*allocated, *claimed, *unallocated))

    allocated_devices: Counter[tuple[str, ...]] = Counter(dict.fromkeys(totals.devices, 0))
    # Each device ID once, as CPUs are: two pods listing one (the kubelet keeps a
    # finished pod's devices listed while it hands them on) hold one unit.
    for device in {(d.resource, d.device_id): d for d in allocated}.values():
        # One topology per device ID on both sides: the allocatable one where there is one.
        topology = totals.topology.get((device.resource, device.device_id), device.numa_nodes)
        allocated_devices[(device.resource, numa_label(topology))] += 1

    allocated_cpu_ids = {c for p in pod_views for c in p.cpu_ids} | {
        c for p in pod_views for ct in p.containers for c in ct.cpu_ids
    }
    allocated_cpus = dict.fromkeys(totals.cpus, 0) | _cpus_by_numa(allocated_cpu_ids, cpu_numa)
    allocated_memory = dict.fromkeys(totals.memory, 0) | _memory_totals(
        [b for p in pod_views for b in _pod_memory(p)]
    )

    listed = matcher.readings.gpu_processes
    return Snapshot(
        node=node,
        collected_at=collected_at,
        kubelet=kubelet,
        allocatable=allocatable,
        allocatable_known=allocatable_known,
        pods=pod_views,
        devices=devices,
        allocatable_devices=_counts(totals.devices),
        allocated_devices=_counts(allocated_devices),
        allocatable_cpus=_counts({(k,): v for k, v in totals.cpus.items()}),
        allocated_cpus=_counts({(k,): v for k, v in allocated_cpus.items()}),
        allocatable_memory=_counts(totals.memory),
        allocated_memory=_counts(allocated_memory),
        collectors=collector_runs,
        node_samples=matcher.readings.node_samples,
        cpu_numa=tuple(sorted(cpu_numa.items())),
        hardware=hardware,
        cpu_times=matcher.readings.cpu_times,
        dra=dra,
        gpu_processes=_attributed(listed, devices, hardware, collected_at=collected_at),
        advertised=advertised,
    )


class JoinCache:
    """The pod views of the last ``join_snapshot``, for the next one to re-use.

    A pod reported again as the very same object (the kubelet client hands back the
    last model of each pod whose bytes did not change) is not joined again while the
    allocatable resources, CPU map and DRA state are the same objects too: its view is
    taken as it was (views hold no readings); nor are the node's allocatable totals
    counted again, nor the views of the devices nobody holds made again. A view holding
    DRA devices is made again when their NUMA nodes, which this poll's readings give,
    differ. The result is what a join from scratch gives. Holds one poll's pods and
    inventory, so it does not grow over churn.
    """

    def __init__(self) -> None:
        self.inputs: tuple[object, ...] | None = None
        self.views: dict[int, tuple[PodResources, PodView]] = {}
        self.prepared: dict[int, _Prepared] = {}  # by id() of the pod the kubelet sent
        self.totals: _AllocatableTotals | None = None  # of inputs' allocatable and CPU map
        self.claiming: frozenset[int] = frozenset()  # views' keys holding DRA devices


def refresh_readings(
    previous: Snapshot,
    *,
    collected_at: float | None,
    kubelet: KubeletStatus,
    collector_runs: tuple[CollectorRun, ...] = (),
) -> Snapshot | None:
    """``previous`` with this poll's readings, for a poll whose kubelet data, CPU map and
    DRA state are those ``previous`` was joined from: the same result as
    ``join_snapshot`` at a fraction of the cost. The views stay as they were (readings
    are beside them): only each device's reading is looked up again. None where a DRA
    device's NUMA node, which the readings give, changed: that needs a join."""
    collector_runs = judge_collectors(collector_runs, advertised=previous.advertised)
    matcher = _Matcher(merge_readings(collector_runs))
    known = tuple(
        d
        for d in previous.devices
        if not (d.resource == "" and d.resolution.source == DISCOVERED_SOURCE)
    )
    devices, hardware = _with_hardware(matcher, known)
    if any(
        d.claim is not None and d.numa_nodes != _sysfs_numa(hardware[d.resolution]) for d in known
    ):
        return None
    listed = matcher.readings.gpu_processes  # processes come and go between polls
    return replace(
        previous,
        collected_at=collected_at,
        kubelet=kubelet,
        devices=devices,
        collectors=collector_runs,
        node_samples=matcher.readings.node_samples,
        hardware=hardware,
        cpu_times=matcher.readings.cpu_times,
        gpu_processes=_attributed(listed, devices, hardware, collected_at=collected_at),
    )


def join_fresh_pod(snapshot: Snapshot, pod: PodResources, *, collected_at: float) -> Snapshot:
    """One pod as ``Get`` just returned it, joined with the snapshot's readings."""
    fresh = join_snapshot(
        node=snapshot.node,
        collected_at=collected_at,
        kubelet=snapshot.kubelet,
        pods=(pod,),
        allocatable=snapshot.allocatable,
        cpu_numa=dict(snapshot.cpu_numa),
        dra=snapshot.dra,
        collector_runs=snapshot.collectors,
    )
    # Processes were attributed knowing every pod; with one pod alone, the other holders
    # of a shared GPU would look like foreign pods. The readings are the poll's, as old.
    return replace(
        fresh,
        gpu_processes=snapshot.gpu_processes,
        readings_at=snapshot.readings_at or snapshot.collected_at,
    )


def _attributed(
    listed: Mapping[HardwareKey, DeviceProcesses] | None,
    devices: tuple[DeviceView, ...],
    hardware: Mapping[Resolution, DeviceHardware],
    *,
    collected_at: float | None,
) -> tuple[GpuDeviceProcesses, ...] | None:
    """The GPU processes attributed to the devices' holders; None while the collector is
    off. None attributed before the kubelet has first answered (an exporter started
    while it restarts, or whose socket it cannot open): who holds a device is not known
    then, and every process would count as foreign, on a device nobody holds."""
    if listed is None:
        return None
    if collected_at is None:
        return ()
    return attribute_processes(devices, listed, hardware)


@dataclass(frozen=True, slots=True)
class AllocationChange:
    """A container gained or lost devices or exclusive CPUs between two snapshots."""

    owner: Owner
    devices_added: tuple[str, ...]
    devices_removed: tuple[str, ...]
    cpus_added: tuple[int, ...]
    cpus_removed: tuple[int, ...]


def _holders(pods: Iterable[PodView]) -> dict[Owner, ContainerView]:
    """The containers of ``pods`` that hold devices or exclusive CPUs, by owner."""
    return {
        c.owner: c for p in pods for c in p.containers if c.devices or c.claim_devices or c.cpu_ids
    }


def _holdings(container: ContainerView | None) -> tuple[set[str], set[int]]:
    if container is None:
        return set(), set()
    # "<resource>/<ID>": one ID may serve two resources (the RDMA shared device plugin).
    devices = {
        f"{d.resource}/{d.device_id}" for d in (*container.devices, *container.claim_devices)
    }
    return devices, set(container.cpu_ids)


def holder_count(snapshot: Snapshot) -> int:
    """How many containers hold devices or exclusive CPUs in ``snapshot``."""
    return len(_holders(snapshot.pods))


def diff_allocations(old: Snapshot | None, new: Snapshot) -> tuple[AllocationChange, ...]:
    """What changed hands: one entry per container whose devices or CPUs changed."""
    old_pods = old.pods if old is not None else ()
    # A view the join kept from the last poll (the very object) holds what it held: only
    # the pods on one side alone are looked into (by id(): both snapshots hold them).
    old_ids, new_ids = {id(p) for p in old_pods}, {id(p) for p in new.pods}
    before = _holders(p for p in old_pods if id(p) not in new_ids)
    after = _holders(p for p in new.pods if id(p) not in old_ids)
    moved = [o for o in before.keys() | after.keys() if before.get(o) is not after.get(o)]
    changes = []
    for owner in sorted(moved, key=lambda o: (o.namespace, o.pod, o.container)):
        old_devices, old_cpus = _holdings(before.get(owner))
        new_devices, new_cpus = _holdings(after.get(owner))
        if old_devices == new_devices and old_cpus == new_cpus:
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
