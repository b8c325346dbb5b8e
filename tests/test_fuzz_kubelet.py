"""Kubelet replies fuzzed with hypothesis, from protobuf to served bytes.

Replies are drawn at the protobuf level with hostile but legal content (any UTF-8 in
names, IDs of every shape the resolver knows, pods and containers listed twice, IDs
repeated across containers and resources, NUMA and CPU ids anywhere in int64, DRA
claims, an inventory at odds with List) and go through what the poller runs: the
client's conversion, the join, the page's render and the debug views. Derandomized, so
CI sees the same examples every run.
"""

from __future__ import annotations

import io
import json
import logging
import os
import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families as parse_text
from test_metricwriter import PROMTOOL, parse_openmetrics, promtool_problems

from exporter.collectors.dra import CHECKPOINT_SOURCE
from exporter.collectors.gpu_metrics import GPU_TEMPERATURE, GPU_UTILIZATION
from exporter.collectors.pci import PCIE_LINK_WIDTH
from exporter.debugview import Filters, encode_json, encode_text
from exporter.exposition import Exposition, render
from exporter.join import (
    JoinCache,
    diff_allocations,
    join_fresh_pod,
    join_snapshot,
    refresh_readings,
)
from exporter.kubelet.api.v1 import api_pb2 as v1
from exporter.kubelet.api.v1alpha1 import api_pb2 as v1alpha1
from exporter.kubelet.convert import (
    allocatable_from_proto,
    allocatable_to_proto,
    list_response_to_proto,
    pod_from_proto,
    pods_from_list_response_reusing,
    pods_from_v1alpha1_list_response,
)
from exporter.logs import LOG_FORMATS, configure_logging
from exporter.model import (
    AllocatableResources,
    CollectorRun,
    CpuTimes,
    DeviceIdentity,
    DeviceReading,
    DraDevice,
    DraState,
    HardwareKey,
    KeyKind,
    KubeletStatus,
    PciDevice,
    PodResources,
    Readings,
    Sample,
    Snapshot,
)
from exporter.poller import log_allocation_changes
from exporter.resolver import physical_id

# FUZZ_KUBELET_EXAMPLES=5000 searches deeper, with fresh random examples each run.
_DEEP = int(os.environ.get("FUZZ_KUBELET_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=_DEEP or 60,
    deadline=None,
    derandomize=not _DEEP,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
INT64 = st.integers(-(2**63), 2**63 - 1)
UINT64 = st.integers(0, 2**64 - 1)
COLLECTED_AT = 1_700_000_000.0
_T = TypeVar("_T")

# --- strategies ----------------------------------------------------------------------

# Characters that need escaping somewhere (label values, JSON, a table cell) or that a
# careless reader splits lines on; proto3 strings are any UTF-8, NUL included.
_NASTY = (
    '"',
    "\\",
    "\n",
    "\r",
    "\t",
    "\x00",
    "\x1b",
    "\x7f",
    "\x85",
    "\u2028",
    "\u202e",
    "\ufeff",
    "𝄞",
    "🚀",
    "日",
    "ü",
    "=",
    ",",
    "{",
    "}",
    " ",
    "#",
)
_CHARS = st.one_of(st.sampled_from(_NASTY), st.characters(exclude_categories=("Cs",)))
_LONG = st.builds(
    lambda piece, count: piece * count,
    st.sampled_from(["a", "é", "🚀", "\\", '"', "\n"]),
    st.integers(100, 3000),
)
HOSTILE_TEXT = st.one_of(
    st.text(_CHARS, max_size=10),
    st.sampled_from(['say "hi"', "back\\slash", "trailing\\", "new\nline", "", "a\x00b"]),
    _LONG,
)


def _names(common: Iterable[str]) -> st.SearchStrategy[str]:
    """Mostly a few common names (so pods and containers collide), else anything."""
    return st.one_of(st.sampled_from(tuple(common)), HOSTILE_TEXT)


_HEX = st.text("0123456789abcdef", min_size=1, max_size=12)
_UUID = st.uuids().map(str)
_DIGITS = st.one_of(st.integers(0, 16).map(str), st.text("0123456789", min_size=1, max_size=400))
_PCI = st.builds(
    lambda domain, bus, slot, function, upper: (
        f"{domain:04x}:{bus:02x}:{slot:02x}.{function}".upper()
        if upper
        else f"{domain:04x}:{bus:02x}:{slot:02x}.{function}"
    ),
    # The kernel prints a domain "%04x", wider past 0xffff: Intel VMD's from 0x10000
    # (drivers/pci/controller/vmd.c, up to INT_MAX), so 10000:e1:00.0.
    st.one_of(st.integers(0, 0xFFFF), st.integers(0x10000, 0x7FFFFFFF)),
    st.integers(0, 0xFF),
    st.integers(0, 0x1F),
    st.integers(0, 7),
    st.booleans(),
)
_PHYSICAL_ID = st.one_of(
    st.sampled_from(["GPU-aaaa", "GPU-bbbb", "MIG-cccc", "0000:af:00.1", "nvidia0", "eth0"]),
    _UUID.map(lambda u: f"GPU-{u}"),
    _UUID.map(lambda u: f"MIG-{u}"),
    st.builds(lambda u, g, c: f"MIG-GPU-{u}/{g}/{c}", _HEX, _DIGITS, _DIGITS),
    _PCI,
    st.builds(lambda n: f"nvidia{n}", _DIGITS),
    st.builds(lambda n, m: f"nvidia{n}/gi{m}", _DIGITS, _DIGITS),
    st.builds(lambda n, k: f"nvidia{n}/vgpu{k}", _DIGITS, _DIGITS),
    st.builds(lambda n, m, k: f"nvidia{n}/gi{m}/vgpu{k}", _DIGITS, _DIGITS, _DIGITS),
    st.builds(lambda n, m: f"card{n}-{m}", _DIGITS, _DIGITS),
    st.from_regex(r"\A[A-Za-z0-9_.:-]{1,15}\Z"),  # an interface or RDMA device name
    HOSTILE_TEXT,
)
DEVICE_ID = st.one_of(
    _PHYSICAL_ID,
    st.builds(lambda base, n: f"{base}::{n}", _PHYSICAL_ID, _DIGITS),  # a replica
)
RESOURCE = _names(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "example.com/nic", "rdma/hca"])
NUMA_ID = st.one_of(st.integers(0, 3), INT64)
CPU_ID = st.one_of(st.integers(0, 15), INT64)
MEMORY_TYPE = _names(["memory", "hugepages-1Gi", "hugepages-2Mi"])
DRIVER = _names(
    ["gpu.nvidia.com", "gpu.amd.com", "sriovnetwork.k8snetworkplumbingwg.io", "example.com"]
)
DRA_DEVICE = st.one_of(
    st.sampled_from(["gpu-0", "gpu-1", "gpu-0-mig-1g10gb-9-0", "gpu-0-128", "0000-af-00-1"]),
    st.builds(lambda n: f"gpu-{n}", _DIGITS),
    st.builds(lambda n, p, s: f"gpu-{n}-mig-{p}-{s}-1", _DIGITS, _DIGITS, _DIGITS),
    HOSTILE_TEXT,
)


def _topology(draw: st.DrawFn) -> v1.TopologyInfo | None:
    """Unset, set with no node, or nodes with repeats and any int64 id."""
    kind = draw(st.sampled_from(["unset", "empty", "nodes"]))
    if kind == "unset":
        return None
    ids = [] if kind == "empty" else draw(st.lists(NUMA_ID, min_size=1, max_size=4))
    return v1.TopologyInfo(nodes=[v1.NUMANode(ID=i) for i in ids])


def _device_entries(draw: st.DrawFn, pool: list[str]) -> list[v1.ContainerDevices]:
    # Mostly the node's few IDs, so that they repeat and collectors know them.
    ids = st.one_of(*[st.sampled_from(pool)] * 3, DEVICE_ID)
    return [
        v1.ContainerDevices(
            resource_name=draw(RESOURCE),
            device_ids=draw(st.lists(ids, max_size=4)),
            topology=_topology(draw),
        )
        for _ in range(draw(st.integers(0, 3)))
    ]


def _memory(draw: st.DrawFn) -> list[v1.ContainerMemory]:
    size = st.one_of(st.sampled_from([0, 1, 2**30, 2**63, 2**64 - 1]), UINT64)
    return [
        v1.ContainerMemory(memory_type=draw(MEMORY_TYPE), size=draw(size), topology=_topology(draw))
        for _ in range(draw(st.integers(0, 2)))
    ]


def _claim(draw: st.DrawFn) -> v1.DynamicResource:
    resources = []
    for _ in range(draw(st.integers(0, 3))):
        device = draw(DRA_DEVICE)
        cdi = draw(
            st.lists(
                st.one_of(
                    st.just(
                        f"k8s.gpu.nvidia.com/claim=0123abcd-0123-0123-0123-0123456789ab-{device}"
                    ),
                    st.just(f"vendor.com/device={device}"),
                    HOSTILE_TEXT,
                ),
                max_size=2,
            )
        )
        share = draw(st.one_of(st.none(), st.sampled_from(["", "a", "b"]), HOSTILE_TEXT))
        resources.append(
            v1.ClaimResource(
                cdi_devices=[v1.CDIDevice(name=n) for n in cdi],
                driver_name=draw(DRIVER),
                pool_name=draw(_names(["node-1", ""])),
                device_name=device,
                share_id=share,
            )
        )
    return v1.DynamicResource(
        claim_name=draw(_names(["claim", "shared"])),
        claim_namespace=draw(_names(["ml", ""])),
        claim_resources=resources,
    )


def _container(draw: st.DrawFn, pool: list[str]) -> v1.ContainerResources:
    return v1.ContainerResources(
        name=draw(_names(["main", "sidecar", ""])),
        devices=_device_entries(draw, pool),
        cpu_ids=draw(st.lists(CPU_ID, max_size=5)),
        memory=_memory(draw),
        dynamic_resources=[_claim(draw) for _ in range(draw(st.integers(0, 2)))],
    )


def _pod(draw: st.DrawFn, pool: list[str]) -> v1.PodResources:
    return v1.PodResources(
        namespace=draw(_names(["ml", "default", ""])),
        name=draw(_names(["trainer-0", "web", ""])),
        containers=[_container(draw, pool) for _ in range(draw(st.integers(0, 3)))],
        cpu_ids=draw(st.lists(CPU_ID, max_size=3)) if draw(st.booleans()) else [],
        memory=_memory(draw) if draw(st.booleans()) else [],
    )


@dataclass(frozen=True)
class Node:
    """What one poll gets: the kubelet's two replies, the CPU map, collector readings."""

    listed: v1.ListPodResourcesResponse
    allocatable: v1.AllocatableResourcesResponse
    cpu_numa: dict[int, int]
    runs: tuple[CollectorRun, ...]
    dra: DraState = field(default_factory=DraState)


def _readings(draw: st.DrawFn, pool: list[str], cpus: Iterable[int]) -> tuple[CollectorRun, ...]:
    """Telemetry for some of the pool's GPUs (standalone ones too), PCI functions and
    CPUs (collectors give finite figures only)."""
    devices = []
    # One reading per GPU: one collector reads it (replicas and repeats share it).
    for base in dict.fromkeys(device_id.split("::")[0] for device_id in pool):
        if re.fullmatch(r"GPU-[0-9a-fA-F-]+", base) and draw(st.booleans()):
            devices.append(
                DeviceReading(
                    name=base,
                    keys=(HardwareKey(KeyKind.GPU_UUID, base),),
                    identity=DeviceIdentity(uuid=base, model=draw(HOSTILE_TEXT)),
                    samples=(
                        Sample(
                            GPU_UTILIZATION, draw(st.floats(allow_nan=False, allow_infinity=False))
                        ),
                        Sample(GPU_TEMPERATURE, draw(st.integers(-(2**70), 2**70))),
                    ),
                    standalone=True,
                )
            )
    devices.append(  # a GPU no ID names: shown with empty owner labels
        DeviceReading(
            name="GPU-ffff",
            keys=(HardwareKey(KeyKind.GPU_UUID, "GPU-ffff"),),
            samples=(Sample(GPU_UTILIZATION, 0.5),),
            standalone=True,
        )
    )
    pci = [
        PciDevice(
            address=device_id.lower(),
            vendor_id="0x10de",
            device_id="0x2330",
            class_id="0x030200",
            numa_node=draw(st.one_of(st.none(), NUMA_ID)),
            samples=(Sample(PCIE_LINK_WIDTH, 16),),
        )
        for device_id in pool
        if re.fullmatch(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]", device_id)
    ]
    seconds = st.floats(0, 1e12, allow_nan=False)
    cpu_times = {
        cpu: CpuTimes(cpu, (("user", draw(seconds)), ("system", draw(seconds))))
        for cpu in cpus
        if draw(st.booleans())
    }
    readings = Readings(devices=tuple(devices), pci_devices=tuple(pci), cpu_times=cpu_times)
    return (CollectorRun("fuzz", success=True, duration_seconds=0.0, readings=readings),)


@st.composite
def nodes(draw: st.DrawFn) -> Node:
    gpus = st.one_of(st.sampled_from(["GPU-aaaa", "GPU-bbbb"]), _UUID.map(lambda u: f"GPU-{u}"))
    replica = st.builds(lambda base, n: f"{base}::{n}", gpus, st.integers(0, 3).map(str))
    pool = [
        draw(gpus),
        draw(st.one_of(gpus, replica)),
        draw(_PCI),
        *draw(st.lists(DEVICE_ID, max_size=4)),
    ]
    pods = [_pod(draw, pool) for _ in range(draw(st.integers(0, 4)))]
    if pods and draw(st.booleans()):  # one pod listed twice, maybe changed
        again = v1.PodResources()
        again.CopyFrom(draw(st.sampled_from(pods)))
        if draw(st.booleans()):
            again.containers.append(_container(draw, pool))
        pods.append(again)
    if pods and draw(st.booleans()):  # one container listed twice in its pod
        pod = draw(st.sampled_from(pods))
        if pod.containers:
            pod.containers.append(draw(st.sampled_from(list(pod.containers))))
    allocatable = v1.AllocatableResourcesResponse(
        devices=_device_entries(draw, pool),
        cpu_ids=draw(st.lists(CPU_ID, max_size=6)),
        memory=_memory(draw),
    )
    cpus = {c for p in pods for c in p.cpu_ids} | {
        c for p in pods for ct in p.containers for c in ct.cpu_ids
    }
    cpu_numa = {
        c: draw(NUMA_ID) for c in sorted(cpus | set(allocatable.cpu_ids)) if draw(st.booleans())
    }
    return Node(
        listed=v1.ListPodResourcesResponse(pod_resources=pods),
        allocatable=allocatable,
        cpu_numa=cpu_numa,
        runs=_readings(draw, pool, sorted(cpus)),
        dra=_dra_state(draw, pods, pool),
    )


def _dra_state(draw: st.DrawFn, pods: list[v1.PodResources], pool: list[str]) -> DraState:
    """Driver files describing some of the claimed devices (maybe for another claim),
    and CDI specs naming some of the CDI devices, with keys of the pool's IDs."""
    keys = st.sampled_from(pool).map(lambda i: HardwareKey(KeyKind.GPU_UUID, i.split("::")[0]))
    devices, cdi = [], []
    for pod in pods:
        for container in pod.containers:
            for claim in container.dynamic_resources:
                for c in claim.claim_resources:
                    if draw(st.booleans()):
                        devices.append(
                            DraDevice(
                                driver=c.driver_name,
                                pool=draw(st.sampled_from([c.pool_name, ""])),
                                device=c.device_name,
                                keys=tuple(draw(st.lists(keys, max_size=2))),
                                source=CHECKPOINT_SOURCE,
                                claim_namespace=claim.claim_namespace,
                                claim_name=draw(st.sampled_from([claim.claim_name, "", "other"])),
                            )
                        )
                    cdi += [(n.name, (draw(keys),)) for n in c.cdi_devices if draw(st.booleans())]
    return DraState(devices=tuple(devices), cdi_devices=tuple(cdi))


# --- the pipeline, as the poller runs it ---------------------------------------------

KUBELET = KubeletStatus(up=True, socket="/var/lib/kubelet/pod-resources/kubelet.sock", api=())


@dataclass
class Poller:
    """What the client, the poller and the store keep between polls: the conversion's
    pods by bytes and last models (equal content hands back the last object), what
    the last join was made from and its cache, and the last page with its
    allocations number. ``cold()`` keeps nothing."""

    keep: bool = True
    by_bytes: dict[bytes, PodResources] = field(default_factory=dict)
    pods: tuple[PodResources, ...] | None = None
    allocatable: AllocatableResources | None = None
    cpu_numa: dict[int, int] | None = None
    dra: DraState | None = None
    joined_from: tuple[object, ...] | None = None
    snapshot: Snapshot | None = None
    cache: JoinCache = field(default_factory=JoinCache)
    allocations: int = 0
    page: tuple[int, Exposition] | None = None

    @classmethod
    def cold(cls) -> Poller:
        return cls(keep=False)


@dataclass(frozen=True)
class Polled:
    pods: tuple[PodResources, ...]
    allocatable: AllocatableResources
    snapshot: Snapshot
    text: str
    openmetrics: str


def wire(message: Any) -> Any:
    """``message`` as the client gets it: serialized and parsed again."""
    return type(message).FromString(message.SerializeToString())


def _same(new: _T, last: _T | None) -> _T:
    """The last object where ``new`` equals it, as the client's reply memo and the
    poller's node state hand it back."""
    return last if last is not None and new == last else new


def _all_same(new: tuple[object, ...], last: tuple[object, ...] | None) -> bool:
    return last is not None and all(a is b for a, b in zip(new, last, strict=True))


def poll(node: Node, state: Poller | None = None) -> Polled:
    """One poll as ``KubeletClient``, ``Poller._join`` and ``SnapshotStore`` make it:
    a join, or only new readings where its inputs are the last ones, then the page."""
    state = state or Poller.cold()
    if not state.keep:
        state = Poller()
    pods, state.by_bytes = pods_from_list_response_reusing(wire(node.listed), state.by_bytes)
    pods = state.pods = _same(pods, state.pods)
    allocatable = allocatable_from_proto(wire(node.allocatable))
    allocatable = state.allocatable = _same(allocatable, state.allocatable)
    cpu_numa = state.cpu_numa = _same(node.cpu_numa, state.cpu_numa)
    dra = state.dra = _same(node.dra, state.dra)
    joined_from = (pods, allocatable, cpu_numa, dra)
    snapshot = None
    if state.snapshot is not None and _all_same(joined_from, state.joined_from):
        snapshot = refresh_readings(
            state.snapshot, collected_at=COLLECTED_AT, kubelet=KUBELET, collector_runs=node.runs
        )
    if snapshot is None:
        state.allocations += 1
        snapshot = join_snapshot(
            node="node",
            collected_at=COLLECTED_AT,
            kubelet=KUBELET,
            pods=pods,
            allocatable=allocatable,
            cpu_numa=cpu_numa,
            dra=dra,
            collector_runs=node.runs,
            cache=state.cache,
        )
    state.snapshot, state.joined_from = snapshot, joined_from
    last = state.page
    page = render(
        snapshot,
        previous=last[1] if last else None,
        same_allocations=last is not None and last[0] == state.allocations,
    )
    state.page = (state.allocations, page)
    return Polled(
        pods,
        allocatable,
        snapshot,
        page.static(openmetrics=False).decode(),
        page.static(openmetrics=True).decode() + "# EOF\n",
    )


def kubelet_order(node: Node, seed: int, *, regroup: bool = False) -> Node:
    """``node`` as the kubelet may send it another time: what it keeps in Go maps in
    another order (pods; device entries, one per ID and NUMA node; CPU ids; a claim's
    devices). Containers, memory blocks and claims keep the pod spec's order.
    ``regroup`` also lists each memory block's NUMA ids in another order: equal
    content the kubelet itself does not send two ways."""
    rng = random.Random(seed)
    listed = v1.ListPodResourcesResponse()
    listed.CopyFrom(node.listed)
    pods = list(listed.pod_resources)
    rng.shuffle(pods)
    for pod in pods:
        for container in pod.containers:
            _shuffle_devices(container.devices, rng)
            _shuffle(container.cpu_ids, rng)
            for claim in container.dynamic_resources:
                _shuffle(claim.claim_resources, rng)
            if regroup:
                _shuffle_memory(container.memory, rng)
        _shuffle(pod.cpu_ids, rng)
        if regroup:
            _shuffle_memory(pod.memory, rng)
    shuffled = v1.ListPodResourcesResponse(pod_resources=pods)
    allocatable = v1.AllocatableResourcesResponse()
    allocatable.CopyFrom(node.allocatable)
    _shuffle_devices(allocatable.devices, rng)
    _shuffle(allocatable.cpu_ids, rng)
    if regroup:
        _shuffle_memory(allocatable.memory, rng)
    return Node(shuffled, allocatable, node.cpu_numa, node.runs, node.dra)


def _shuffle(field: Any, rng: random.Random) -> None:
    items = list(field)
    rng.shuffle(items)
    del field[:]
    field.extend(items)


def _shuffle_memory(blocks: Any, rng: random.Random) -> None:
    for block in blocks:
        if block.HasField("topology"):
            _shuffle(block.topology.nodes, rng)


def _shuffle_devices(entries: Any, rng: random.Random) -> None:
    """One entry per device ID and NUMA node, as ``containerDevicesFromResourceDeviceInstances``
    makes them, in map order; an ID without topology keeps none."""
    split = []
    for entry in entries:
        nodes = [n.ID for n in entry.topology.nodes] if entry.HasField("topology") else []
        for device_id in entry.device_ids:
            for node in nodes or [None]:
                topology = None if node is None else v1.TopologyInfo(nodes=[v1.NUMANode(ID=node)])
                split.append(
                    v1.ContainerDevices(
                        resource_name=entry.resource_name,
                        device_ids=[device_id],
                        topology=topology,
                    )
                )
    rng.shuffle(split)
    del entries[:]
    entries.extend(split)


# --- what the kubelet said, independently of the exporter ----------------------------

Owner3 = tuple[str, str, str]


def held_containers(listed: v1.ListPodResourcesResponse) -> dict[Owner3, list[Any]]:
    """The containers each (namespace, pod, container) stands for, as documented: a pod
    listed once keeps the first container of a name; a pod listed twice holds what any
    of its entries' containers hold."""
    entries: dict[tuple[str, str], list[v1.PodResources]] = defaultdict(list)
    for pod in listed.pod_resources:
        entries[(pod.namespace, pod.name)].append(pod)
    held: dict[Owner3, list[Any]] = {}
    for (namespace, name), pods in entries.items():
        for pod in pods:
            for container in pod.containers:
                found = held.setdefault((namespace, name, container.name), [])
                if len(pods) > 1 or not found:
                    found.append(container)
    return held


def expected_devices(listed: v1.ListPodResourcesResponse) -> set[tuple[str, ...]]:
    """(namespace, pod, container, resource, device ID) of every device List holds."""
    return {
        (*owner, entry.resource_name, device_id)
        for owner, containers in held_containers(listed).items()
        for container in containers
        for entry in container.devices
        for device_id in entry.device_ids
    }


def expected_claims(listed: v1.ListPodResourcesResponse) -> set[tuple[str, ...]]:
    """Owner, claim and device of every DRA device List holds."""
    return {
        (*owner, claim.claim_namespace, claim.claim_name, c.driver_name, c.pool_name, c.device_name)
        for owner, containers in held_containers(listed).items()
        for container in containers
        for claim in container.dynamic_resources
        for c in claim.claim_resources
    }


def strings_of(message: Any) -> set[str]:
    """Every string field anywhere in ``message``."""
    found: set[str] = set()
    for descriptor, value in message.ListFields():
        values = value if descriptor.is_repeated else [value]
        for item in values:
            if isinstance(item, str):
                found.add(item)
            elif hasattr(item, "ListFields"):
                found |= strings_of(item)
    return found


# Labels whose values are the kubelet's strings as it sent them.
KUBELET_LABELS = frozenset(
    {
        "namespace",
        "pod",
        "container",
        "resource",
        "device_id",
        "claim_namespace",
        "claim_name",
        "driver",
        "pool",
        "device",
        "memory_type",
    }
)
NUMA_LABELS = frozenset({"numa_node", "kubelet_numa_node"})


def series(families: Iterable[Any]) -> Iterator[tuple[str, frozenset[tuple[str, str]]]]:
    for family in families:
        for sample in family.samples:
            yield sample.name, frozenset(sample.labels.items())


def samples_of(families: Iterable[Any], name: str, *, values: bool = False) -> list[dict[str, str]]:
    """The labels of each sample of ``name``; its value under "value" too if asked."""
    return [
        {**s.labels, "value": str(s.value)} if values else s.labels
        for f in families
        for s in f.samples
        if s.name == name
    ]


def owner_labels(labels: dict[str, str], *rest: str) -> tuple[str, ...]:
    return tuple(labels[k] for k in ("namespace", "pod", "container", *rest))


def is_numa_label(value: str) -> bool:
    if value == "":
        return True
    try:
        ids = [int(part) for part in value.split(",")]
    except ValueError:
        return False
    return ids == sorted(set(ids)) and value == ",".join(map(str, ids))


def by_content(pods: tuple[PodResources, ...]) -> list[str]:
    """Pods in an order their content alone gives. The client orders entries of one
    pod name by their bytes, which equal content need not share (an entry without
    device IDs, IDs grouped otherwise; the kubelet sends neither); the join merges
    such entries whatever their order."""
    return sorted(map(repr, pods))


# --- properties ------------------------------------------------------------------------


@FUZZ
@given(nodes())
def test_every_page_parses_and_says_what_the_kubelet_said(node: Node) -> None:
    """Both formats parse with prometheus_client's parsers, hold no series twice, and
    every kubelet string comes back exactly as the kubelet sent it."""
    polled = poll(node)
    text = list(parse_text(polled.text))
    openmetrics = list(parse_openmetrics(polled.openmetrics))

    for families in (text, openmetrics):
        twice = [s for s, n in Counter(series(families)).items() if n > 1]
        assert [] == twice
    assert set(series(text)) == set(series(openmetrics))

    sent = strings_of(node.listed) | strings_of(node.allocatable) | {""}
    sent |= {r.name for run in node.runs for r in run.readings.devices}
    sent |= {physical_id(i) for i in sent}  # telemetry is the physical device's
    for _, labels in series(openmetrics):
        for key, value in labels:
            if key in KUBELET_LABELS:
                assert value in sent, (key, value)
            if key in NUMA_LABELS:
                assert is_numa_label(value), (key, value)

    devices = {
        owner_labels(s, "resource", "device_id")
        for s in samples_of(openmetrics, "podresources_container_device_info")
    }
    assert expected_devices(node.listed) == devices
    claims = {
        owner_labels(s, "claim_namespace", "claim_name", "driver", "pool", "device")
        for s in samples_of(openmetrics, "podresources_container_dynamic_resource_info")
    }
    assert expected_claims(node.listed) == claims
    listed = {(r, d) for *_, r, d in devices} | {
        (e.resource_name, i) for e in node.allocatable.devices for i in e.device_ids
    }
    known = {
        (s["resource"], s["device_id"]) for s in samples_of(openmetrics, "podresources_device_info")
    }
    assert listed <= known


def _totals(families: list[Any], name: str, key: str) -> dict[str, float]:
    """A family's values summed per value of the label ``key`` ("" for all)."""
    totals: dict[str, float] = defaultdict(float)
    for f in families:
        for sample in f.samples:
            if sample.name == name:
                totals[sample.labels.get(key, "")] += sample.value
    return {k: v for k, v in totals.items() if v}


@FUZZ
@given(nodes())
def test_node_counts_are_what_the_kubelet_listed(node: Node) -> None:
    """Each device ID and CPU counts once, whatever pods and containers list it twice:
    allocatable and allocated per resource, CPUs per container and on the node."""
    families = list(parse_openmetrics(poll(node).openmetrics))
    allocatable = {(e.resource_name, i) for e in node.allocatable.devices for i in e.device_ids}
    allocated = {(r, d) for *_, r, d in expected_devices(node.listed)}
    assert dict(Counter(r for r, _ in allocatable)) == _totals(
        families, "podresources_node_allocatable_devices", "resource"
    )
    assert dict(Counter(r for r, _ in allocated)) == _totals(
        families, "podresources_node_allocated_devices", "resource"
    )
    assert (len(set(node.allocatable.cpu_ids)) or None) == _totals(
        families, "podresources_node_allocatable_cpus", ""
    ).get("")

    held = held_containers(node.listed)
    cpus = {(*owner, c) for owner, found in held.items() for ct in found for c in ct.cpu_ids}
    pod_cpus = {c for p in node.listed.pod_resources for c in p.cpu_ids}
    assert (len({c for *_, c in cpus} | pod_cpus) or None) == _totals(
        families, "podresources_node_allocated_cpus", ""
    ).get("")
    by_owner: dict[tuple[str, ...], float] = defaultdict(float)
    for labels in samples_of(families, "podresources_container_exclusive_cpus", values=True):
        by_owner[owner_labels(labels)] += float(labels["value"])
    # A pod's shared pool (container "") holds what its containers do not: not listed.
    named = {owner: n for owner, n in by_owner.items() if owner[2] or owner in held}
    assert Counter((ns, pod, c) for ns, pod, c, _ in cpus) == named


@FUZZ
@given(nodes(), st.integers(0, 2**32), st.integers(0, 2**32))
def test_the_kubelets_map_order_changes_nothing(node: Node, one: int, other: int) -> None:
    """Two replies in the kubelet's shape that differ in map order only give an equal
    model, and the same page and debug views byte for byte, whether converted cold or
    re-using the last poll's pods."""
    first = poll(kubelet_order(node, one))
    again = kubelet_order(node, other)
    cold = poll(again)
    state = Poller()
    poll(kubelet_order(node, one), state)
    warm = poll(again, state)
    assert warm.pods is state.pods  # the last object: the join was skipped

    for polled in (cold, warm):
        assert (first.pods, first.allocatable) == (polled.pods, polled.allocatable)
        assert (first.text, first.openmetrics) == (polled.text, polled.openmetrics)
        for encode in (encode_json, encode_text):
            view = encode(first.snapshot, filters=Filters())
            other_view = encode(polled.snapshot, filters=Filters())
            assert view.parts(1.0) == other_view.parts(1.0)


@FUZZ
@given(nodes(), st.integers(0, 2**32))
def test_equal_content_gives_equal_models_and_pages(node: Node, seed: int) -> None:
    """A reply regrouped (several IDs or NUMA nodes to an entry, split as the kubelet
    splits them, memory NUMA ids in another order) converts to equal pods, but for the
    order of two entries of one pod name, and to the same page."""
    first = poll(node)
    again = poll(kubelet_order(node, seed, regroup=True))
    assert by_content(first.pods) == by_content(again.pods)
    assert first.allocatable == again.allocatable
    assert (first.text, first.openmetrics) == (again.text, again.openmetrics)
    view = encode_json(first.snapshot, filters=Filters()).parts(0.0)
    assert view == encode_json(again.snapshot, filters=Filters()).parts(0.0)


@FUZZ
@given(nodes(), nodes(), st.integers(0, 2**32))
def test_polls_after_others_are_what_a_cold_poll_makes(a: Node, b: Node, seed: int) -> None:
    """The client's pods by bytes and reply memo, the join's cache, the poller's
    refresh of readings alone and the render's caches only save work: each poll of a
    sequence (a node, the same in map order, then with new readings, another node, the
    first again) writes what a poll from nothing writes."""
    sequence = [
        a,
        kubelet_order(a, seed),
        replace(kubelet_order(a, seed + 1), runs=b.runs),
        b,
        kubelet_order(a, seed + 2),
    ]
    state = Poller()
    for node in sequence:
        warm, cold = poll(node, state), poll(node)
        assert (cold.pods, cold.text, cold.openmetrics) == (warm.pods, warm.text, warm.openmetrics)
        for encode in (encode_json, encode_text):
            view = encode(cold.snapshot, filters=Filters()).parts(0.0)
            assert view == encode(warm.snapshot, filters=Filters()).parts(0.0)


@FUZZ
@given(nodes())
def test_the_model_is_canonical(node: Node) -> None:
    """The model sent back as a reply converts to itself: what the simulated kubelet
    serves is what it was given, and no conversion loses or invents content."""
    pods = poll(node).pods
    again, _ = pods_from_list_response_reusing(wire(list_response_to_proto(pods)), {})
    assert by_content(pods) == by_content(again)
    allocatable = allocatable_from_proto(wire(node.allocatable))
    assert allocatable == allocatable_from_proto(wire(allocatable_to_proto(allocatable)))
    assert [pod_from_proto(wire(p)) for p in node.listed.pod_resources] == [
        pod_from_proto(wire(v1.PodResources.FromString(p.SerializeToString())))
        for p in node.listed.pod_resources
    ]


def strict_json(body: bytes | str) -> Any:
    """``body`` parsed as JSON is, not as Python reads it: NaN and Infinity refused."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    text = body.decode("utf-8") if isinstance(body, bytes) else body
    return json.loads(text, parse_constant=refuse)


def as_v1alpha1(listed: v1.ListPodResourcesResponse) -> v1alpha1.ListPodResourcesResponse:
    """What a kubelet serving only v1alpha1 says of the same pods: devices alone."""
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
                                resource_name=d.resource_name, device_ids=d.device_ids
                            )
                            for d in c.devices
                        ],
                    )
                    for c in pod.containers
                ],
            )
            for pod in listed.pod_resources
        ]
    )


@FUZZ
@given(nodes(), st.integers(0, 2**32))
def test_a_v1alpha1_kubelets_pages_parse_and_hold_its_devices(node: Node, seed: int) -> None:
    """The v1alpha1 fallback: the same devices on a page that parses, whatever the order."""
    texts = []
    for listed in (node.listed, kubelet_order(node, seed).listed):
        pods = pods_from_v1alpha1_list_response(wire(as_v1alpha1(listed)))
        snapshot = join_snapshot(
            node="node",
            collected_at=COLLECTED_AT,
            kubelet=KUBELET,
            pods=pods,
            allocatable=AllocatableResources(),
            cpu_numa={},
            allocatable_known=False,
        )
        texts.append(render(snapshot).static(openmetrics=True).decode() + "# EOF\n")
    assert texts[0] == texts[1]
    families = list(parse_openmetrics(texts[0]))
    assert [] == [s for s, n in Counter(series(families)).items() if n > 1]
    devices = {
        owner_labels(s, "resource", "device_id")
        for s in samples_of(families, "podresources_container_device_info")
    }
    assert expected_devices(node.listed) == devices


def _table_rows(text: str) -> list[str]:
    """The allocation table's rows: after its header, up to the next table."""
    lines = text.split("\n")
    rows = []
    for line in lines[2:]:
        if line in ("# GPUs held", "# GPU to NIC PCIe paths", "# GPU processes", ""):
            break
        rows.append(line)
    return rows


@FUZZ
@given(nodes())
def test_debug_views_show_the_kubelets_allocations(node: Node) -> None:
    """The JSON view is valid JSON whose pods, containers and devices are List's; the
    table has one row per allocation and no raw control character."""
    snapshot = poll(node).snapshot
    view = encode_json(snapshot, filters=Filters())
    body = strict_json(b"".join(view.parts(2.5)))
    assert 2.5 == body["age_seconds"]

    shown_devices = {
        (pod["namespace"], pod["name"], c["name"], d["resource"], d["device_id"])
        for pod in body["pods"]
        for c in pod["containers"]
        for d in c["devices"]
    }
    assert expected_devices(node.listed) == shown_devices
    shown = {(p["namespace"], p["name"], c["name"]) for p in body["pods"] for c in p["containers"]}
    expected = set(held_containers(node.listed))
    assert expected <= shown
    assert all(owner[2] == "" for owner in shown - expected)  # a pod's shared pool
    claims = {
        (p["namespace"], p["name"], c["name"], r["claim_namespace"], r["claim_name"], *device)
        for p in body["pods"]
        for c in p["containers"]
        for r in c["dynamic_resources"]
        for device in ((d["driver"], d["pool"], d["device"]) for d in r["devices"])
    }
    assert expected_claims(node.listed) == claims

    text = b"".join(encode_text(snapshot, filters=Filters()).parts(2.5)).decode()
    assert all(line.isprintable() for line in text.split("\n"))
    allocations = sum(
        max(1, len(c.devices) + len(c.claim_devices)) for p in snapshot.pods for c in p.containers
    )
    assert allocations == len(_table_rows(text))


@FUZZ
@given(nodes(), st.data())
def test_a_pod_get_answers_for_joins_and_shows(node: Node, data: st.DataObject) -> None:
    """/debug/allocations/<namespace>/<pod>: the pod as Get returns it, joined with the
    poll's readings, and shown by exactly its names, however hostile."""
    snapshot = poll(node).snapshot
    if not node.listed.pod_resources:
        return
    sent = data.draw(st.sampled_from(list(node.listed.pod_resources)))
    got = wire(v1.GetPodResourcesResponse(pod_resources=sent))
    fresh = join_fresh_pod(snapshot, pod_from_proto(got.pod_resources), collected_at=COLLECTED_AT)
    filters = Filters(namespace=sent.namespace, pod=sent.name)
    body = strict_json(
        b"".join(encode_json(fresh, filters=filters, source="kubelet Get").parts(0.0))
    )
    assert {(p["namespace"], p["name"]) for p in body["pods"]} <= {(sent.namespace, sent.name)}
    text = b"".join(encode_text(fresh, filters=filters).parts(0.0)).decode()
    assert all(line.isprintable() for line in text.split("\n"))


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not found: apt-get install prometheus")
@settings(FUZZ, max_examples=4)
@given(nodes())
def test_promtool_accepts_a_sample_of_pages(node: Node) -> None:
    """`promtool check metrics` on a few pages (it is slow: a process each)."""
    polled = poll(node)
    assert [] == promtool_problems(polled.text, openmetrics=False)
    assert [] == promtool_problems(polled.openmetrics, openmetrics=True)


def _logged_changes(before: Snapshot, after: Snapshot, fmt: str) -> tuple[int, str]:
    """The poller's allocation_changed events between two snapshots, logged in ``fmt``
    (by the poller's own ``log_allocation_changes``): how many, and the stream's text."""
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    changes = diff_allocations(before, after)
    try:
        configure_logging(level="info", fmt=fmt, stream=stream)
        # A new logger: cached ones keep their config.
        log_allocation_changes(changes, structlog.get_logger("fuzz"))
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.reset_defaults()
    return len(changes), stream.getvalue()


@FUZZ
@given(nodes(), nodes(), st.sampled_from(LOG_FORMATS))
def test_allocation_changes_log_one_printable_line_each(
    before: Node, after: Node, fmt: str
) -> None:
    """Every change of hands between two polls is one log line, whatever the names:
    no newline, carriage return or terminal escape from the kubelet reaches the log raw;
    JSON lines give back the owner exactly."""
    old, new = poll(before).snapshot, poll(after).snapshot
    count, logged = _logged_changes(old, new, fmt)
    lines = logged.split("\n")
    assert ("", count) == (lines[-1], len(lines) - 1)
    assert all(line.isprintable() for line in lines)
    if fmt == "json":
        owners = [(e["namespace"], e["pod"], e["container"]) for e in map(strict_json, lines[:-1])]
        expected = diff_allocations(old, new)
        assert [(c.owner.namespace, c.owner.pod, c.owner.container) for c in expected] == owners


@FUZZ
@given(_PCI)
def test_a_device_id_that_is_a_pci_address_gets_its_functions_link(address: str) -> None:
    """A device ID that is a PCI address, in any case and any domain the kernel prints,
    carries the link width of the function the pci collector read."""
    held = v1.ContainerDevices(resource_name="example.com/nic", device_ids=[address])
    container = v1.ContainerResources(name="c", devices=[held])
    pci = PciDevice(
        address.lower(), "0x15b3", "0x101e", "0x020000", 0, (Sample(PCIE_LINK_WIDTH, 16),)
    )
    node = Node(
        listed=v1.ListPodResourcesResponse(
            pod_resources=[v1.PodResources(name="p", namespace="n", containers=[container])]
        ),
        allocatable=v1.AllocatableResourcesResponse(devices=[held]),
        cpu_numa={},
        runs=(CollectorRun("pci", True, 0.0, Readings(pci_devices=(pci,))),),
    )
    families = parse_openmetrics(poll(node).openmetrics)
    widths = samples_of(families, "podresources_pcie_link_width")
    assert [address] == [s["device_id"] for s in widths if s["pod"] == "p"]
