"""Pure conversions between PodResources protobuf messages and ``exporter.model``.

proto -> model is what the client needs; model -> proto is what the simulated kubelet
serves. An unset ``share_id`` becomes ``None``.

The kubelet answers from Go maps: an unchanged node's replies come in a new order each
call, and every device is an entry of its own per NUMA node of its topology. So the
model is canonical: pods sorted by namespace and name, a container's device entries
merged per resource and device ID (their NUMA nodes joined) and grouped by resource and
NUMA nodes, device IDs, CPU ids, a claim's devices and NUMA nodes sorted (NUMA ids
de-duplicated). Two replies that differ only in order give equal models.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping

from exporter.kubelet.api.v1 import api_pb2 as v1
from exporter.kubelet.api.v1alpha1 import api_pb2 as v1alpha1
from exporter.model import (
    AllocatableResources,
    ClaimDevice,
    ContainerResources,
    DeviceGroup,
    DynamicResource,
    MemoryBlock,
    PodResources,
)

__all__ = [
    "allocatable_from_proto",
    "allocatable_from_proto_reusing",
    "allocatable_to_proto",
    "get_response_to_proto",
    "list_response_to_proto",
    "pod_from_proto",
    "pod_to_proto",
    "pods_from_list_response",
    "pods_from_list_response_reusing",
    "pods_from_v1alpha1_list_response",
    "sort_in_place",
    "v1alpha1_list_response_to_proto",
]


# --- proto -> model ----------------------------------------------------------------------


def _numa_nodes(msg: v1.ContainerDevices | v1.ContainerMemory) -> tuple[int, ...]:
    # An unset topology (topology-unaware plugin, no memory manager) means "unknown": ().
    if not msg.HasField("topology"):
        return ()
    return tuple(sorted({node.ID for node in msg.topology.nodes}))


def _cpu_ids(ids: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted(ids))


def _device_groups(msgs: Iterable[v1.ContainerDevices]) -> tuple[DeviceGroup, ...]:
    nodes_of: dict[tuple[str, str], set[int]] = {}  # (resource, device ID) -> NUMA nodes
    for msg in msgs:
        nodes = [node.ID for node in msg.topology.nodes] if msg.HasField("topology") else ()
        for device_id in msg.device_ids:
            nodes_of.setdefault((msg.resource_name, device_id), set()).update(nodes)
    return _grouped(nodes_of)


def _grouped(nodes_of: Mapping[tuple[str, str], Iterable[int]]) -> tuple[DeviceGroup, ...]:
    ids_of: dict[tuple[str, tuple[int, ...]], list[str]] = {}  # (resource, NUMA nodes) -> IDs
    for (resource, device_id), nodes in nodes_of.items():
        ids_of.setdefault((resource, tuple(sorted(nodes))), []).append(device_id)
    return tuple(
        DeviceGroup(resource=resource, device_ids=tuple(sorted(ids)), numa_nodes=nodes)
        for (resource, nodes), ids in sorted(ids_of.items())
    )


def _memory_block(msg: v1.ContainerMemory) -> MemoryBlock:
    return MemoryBlock(
        memory_type=msg.memory_type,
        size_bytes=msg.size,
        numa_nodes=_numa_nodes(msg),
    )


def _claim_device(msg: v1.ClaimResource) -> ClaimDevice:
    return ClaimDevice(
        driver=msg.driver_name,
        pool=msg.pool_name,
        device=msg.device_name,
        share_id=msg.share_id if msg.HasField("share_id") else None,
        cdi_devices=tuple(cdi.name for cdi in msg.cdi_devices),
    )


def _dynamic_resource(msg: v1.DynamicResource) -> DynamicResource:
    # The kubelet lists a claim's devices driver by driver from a map: sorted here.
    devices = sorted((_claim_device(c) for c in msg.claim_resources), key=_claim_device_order)
    return DynamicResource(
        claim_name=msg.claim_name,
        claim_namespace=msg.claim_namespace,
        devices=tuple(devices),
    )


def _claim_device_order(device: ClaimDevice) -> tuple[str, str, str, str, tuple[str, ...]]:
    return (device.driver, device.pool, device.device, device.share_id or "", device.cdi_devices)


def _container(msg: v1.ContainerResources) -> ContainerResources:
    return ContainerResources(
        name=msg.name,
        devices=_device_groups(msg.devices),
        cpu_ids=_cpu_ids(msg.cpu_ids),
        memory=tuple(_memory_block(m) for m in msg.memory),
        dynamic_resources=tuple(_dynamic_resource(r) for r in msg.dynamic_resources),
    )


def pod_from_proto(msg: v1.PodResources) -> PodResources:
    """One v1 ``PodResources`` message as the model."""
    return PodResources(
        namespace=msg.namespace,
        name=msg.name,
        containers=tuple(_container(c) for c in msg.containers),
        cpu_ids=_cpu_ids(msg.cpu_ids),
        memory=tuple(_memory_block(m) for m in msg.memory),
    )


def _in_order(pods: Iterable[PodResources]) -> tuple[PodResources, ...]:
    return tuple(sorted(pods, key=_POD_ORDER))


_POD_ORDER = operator.attrgetter("namespace", "name")
_BY_NAME_THEN_BYTES = operator.itemgetter(0, 1, 2)
_SERIALIZED = operator.methodcaller("SerializeToString", deterministic=True)


def pods_from_list_response(msg: v1.ListPodResourcesResponse) -> tuple[PodResources, ...]:
    """A v1 ``List`` reply as the model."""
    return _in_order(pod_from_proto(p) for p in msg.pod_resources)


def sort_in_place(pod: v1.PodResources) -> None:
    """Put what the kubelet sends in map order into one order (device entries and a
    claim's devices by their bytes, CPU ids by number), so that equal content
    serializes to equal bytes."""
    for container in pod.containers:
        if len(container.devices) > 1:
            container.devices.sort(key=_SERIALIZED)
        if len(container.cpu_ids) > 1:
            container.cpu_ids.sort()
        for claim in container.dynamic_resources:
            if len(claim.claim_resources) > 1:
                claim.claim_resources.sort(key=_SERIALIZED)
    if len(pod.cpu_ids) > 1:
        pod.cpu_ids.sort()


def pods_from_list_response_reusing(
    msg: v1.ListPodResourcesResponse, previous: Mapping[bytes, PodResources]
) -> tuple[tuple[PodResources, ...], dict[bytes, PodResources]]:
    """``pods_from_list_response``, re-using the model of each pod whose message, put in
    order (``sort_in_place``), is byte-identical to one in ``previous``; also returns
    the map for the next call.

    Serializing a pod costs well under a microsecond, ordering it about two, converting
    it about twenty: in most polls every pod is one of the last reply, in a new order.
    Most pods come in order already: a list of one entry (one device, one exclusive
    CPU, none) has no other order. So a pod's bytes are looked up as received first;
    bytes equal to those of a pod put in order are in order, and that pod's. A pod they
    miss (new, changed, or listed from the kubelet's maps in another order) is put in
    order and looked up again.
    """
    keyed: list[tuple[str, str, bytes, PodResources]] = []
    by_bytes: dict[bytes, PodResources] = {}
    for pod_msg in msg.pod_resources:
        key = pod_msg.SerializeToString(deterministic=True)
        pod = previous.get(key)
        if pod is None:
            sort_in_place(pod_msg)
            key = pod_msg.SerializeToString(deterministic=True)
            pod = previous.get(key)
            if pod is None:
                pod = pod_from_proto(pod_msg)
        by_bytes[key] = pod
        keyed.append((pod.namespace, pod.name, key, pod))
    # Two pods of one name (an old and a new one, in map order) in one order too.
    keyed.sort(key=_BY_NAME_THEN_BYTES)
    return tuple(pod for *_, pod in keyed), by_bytes


def pods_from_v1alpha1_list_response(
    msg: v1alpha1.ListPodResourcesResponse,
) -> tuple[PodResources, ...]:
    """A v1alpha1 ``List`` reply as the model: devices only, without topology."""
    return _in_order(
        PodResources(
            namespace=pod.namespace,
            name=pod.name,
            containers=tuple(
                ContainerResources(
                    name=c.name,
                    devices=_grouped(
                        {(d.resource_name, i): () for d in c.devices for i in d.device_ids}
                    ),
                )
                for c in pod.containers
            ),
        )
        for pod in msg.pod_resources
    )


def allocatable_from_proto(msg: v1.AllocatableResourcesResponse) -> AllocatableResources:
    """A ``GetAllocatableResources`` reply as the model."""
    return AllocatableResources(
        devices=_device_groups(msg.devices),
        cpu_ids=_cpu_ids(msg.cpu_ids),
        memory=tuple(_memory_block(m) for m in msg.memory),
    )


def allocatable_from_proto_reusing(
    msg: v1.AllocatableResourcesResponse, previous: tuple[bytes, AllocatableResources] | None
) -> tuple[AllocatableResources, bytes]:
    """``allocatable_from_proto``, or ``previous``'s model where the reply, put in order
    (its device entries by their bytes, CPU ids by number), has ``previous``'s bytes;
    also returns those bytes for the next call.

    The kubelet answers an unchanged inventory in a new order each call (a device entry
    per ID and NUMA node, from maps), which the model does not keep: its devices are
    grouped and sorted, its CPU ids sorted. Ordering and serializing the entries costs
    about a third of converting them (8,000 device IDs of RDMA shared pools: ~36 ms a
    poll). Memory blocks stay in the reply's order, as the model keeps them. ``msg`` is
    put in order in place."""
    if len(msg.devices) > 1:
        msg.devices.sort(key=_SERIALIZED)
    if len(msg.cpu_ids) > 1:
        msg.cpu_ids.sort()
    key = msg.SerializeToString(deterministic=True)
    if previous is not None and previous[0] == key:
        return previous[1], key
    return allocatable_from_proto(msg), key


# --- model -> proto ----------------------------------------------------------------------


def _topology(numa_nodes: tuple[int, ...]) -> v1.TopologyInfo | None:
    # The kubelet leaves topology unset rather than empty when it knows none.
    if not numa_nodes:
        return None
    return v1.TopologyInfo(nodes=[v1.NUMANode(ID=n) for n in sorted(set(numa_nodes))])


def _device_group_to_proto(group: DeviceGroup) -> v1.ContainerDevices:
    return v1.ContainerDevices(
        resource_name=group.resource,
        device_ids=group.device_ids,
        topology=_topology(group.numa_nodes),
    )


def _memory_block_to_proto(block: MemoryBlock) -> v1.ContainerMemory:
    return v1.ContainerMemory(
        memory_type=block.memory_type,
        size=block.size_bytes,
        topology=_topology(block.numa_nodes),
    )


def _claim_device_to_proto(device: ClaimDevice) -> v1.ClaimResource:
    return v1.ClaimResource(
        cdi_devices=[v1.CDIDevice(name=n) for n in device.cdi_devices],
        driver_name=device.driver,
        pool_name=device.pool,
        device_name=device.device,
        share_id=device.share_id,  # None leaves the optional field unset
    )


def _dynamic_resource_to_proto(resource: DynamicResource) -> v1.DynamicResource:
    return v1.DynamicResource(
        claim_name=resource.claim_name,
        claim_namespace=resource.claim_namespace,
        claim_resources=[_claim_device_to_proto(d) for d in resource.devices],
    )


def _container_to_proto(container: ContainerResources) -> v1.ContainerResources:
    return v1.ContainerResources(
        name=container.name,
        devices=[_device_group_to_proto(d) for d in container.devices],
        cpu_ids=container.cpu_ids,
        memory=[_memory_block_to_proto(m) for m in container.memory],
        dynamic_resources=[_dynamic_resource_to_proto(r) for r in container.dynamic_resources],
    )


def pod_to_proto(pod: PodResources) -> v1.PodResources:
    """The model of one pod as a v1 ``PodResources`` message."""
    return v1.PodResources(
        name=pod.name,
        namespace=pod.namespace,
        containers=[_container_to_proto(c) for c in pod.containers],
        cpu_ids=pod.cpu_ids,
        memory=[_memory_block_to_proto(m) for m in pod.memory],
    )


def list_response_to_proto(pods: Iterable[PodResources]) -> v1.ListPodResourcesResponse:
    """Pods as a v1 ``List`` reply."""
    return v1.ListPodResourcesResponse(pod_resources=[pod_to_proto(p) for p in pods])


def v1alpha1_list_response_to_proto(
    pods: Iterable[PodResources],
) -> v1alpha1.ListPodResourcesResponse:
    """Pods as a v1alpha1 ``List`` reply: what v1alpha1 cannot say (topology, CPUs, memory,
    DRA) is dropped."""
    return v1alpha1.ListPodResourcesResponse(
        pod_resources=[
            v1alpha1.PodResources(
                name=pod.name,
                namespace=pod.namespace,
                containers=[
                    v1alpha1.ContainerResources(
                        name=c.name,
                        devices=[
                            v1alpha1.ContainerDevices(
                                resource_name=d.resource, device_ids=d.device_ids
                            )
                            for d in c.devices
                        ],
                    )
                    for c in pod.containers
                ],
            )
            for pod in pods
        ]
    )


def allocatable_to_proto(allocatable: AllocatableResources) -> v1.AllocatableResourcesResponse:
    """The model of allocatable resources as a ``GetAllocatableResources`` reply."""
    return v1.AllocatableResourcesResponse(
        devices=[_device_group_to_proto(d) for d in allocatable.devices],
        cpu_ids=allocatable.cpu_ids,
        memory=[_memory_block_to_proto(m) for m in allocatable.memory],
    )


def get_response_to_proto(pod: PodResources) -> v1.GetPodResourcesResponse:
    """One pod as a ``Get`` reply."""
    return v1.GetPodResourcesResponse(pod_resources=pod_to_proto(pod))
