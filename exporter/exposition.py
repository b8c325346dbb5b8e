"""Snapshot -> metric families -> bytes, once per poll.

Rendering costs microseconds per sample, so it happens once per poll in the poller's
worker thread and every scrape is served the cached bytes (plain text and OpenMetrics,
each also gzipped). Families are built fresh from the snapshot every time, so the
series of a pod that is gone cannot survive it.
"""

from __future__ import annotations

import gzip
import platform
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
)
from prometheus_client import exposition as text_format
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.openmetrics import exposition as openmetrics_format
from prometheus_client.registry import Collector

from exporter import __version__
from exporter.collectors.base import COLLECTOR_ERRORS
from exporter.model import (
    DeviceView,
    MetricKind,
    NodeCount,
    Owner,
    Sample,
    Snapshot,
    numa_label,
)
from exporter.process_metrics import process_families

__all__ = [
    "OPENMETRICS_CONTENT_TYPE",
    "TEXT_CONTENT_TYPE",
    "Exposition",
    "render",
]

TEXT_CONTENT_TYPE = text_format.CONTENT_TYPE_LATEST
OPENMETRICS_CONTENT_TYPE = openmetrics_format.CONTENT_TYPE_LATEST
# prometheus_client leaves the OpenMetrics writer unannotated; this gives it its real type.
_generate_openmetrics: Callable[[CollectorRegistry], bytes] = openmetrics_format.generate_latest
GZIP_LEVEL = 6  # gzip's own default: most of the gain for little CPU

OWNER_LABELS = ("namespace", "pod", "container")
DEVICE_LABELS = (*OWNER_LABELS, "resource", "device_id")


@dataclass(frozen=True, slots=True)
class Exposition:
    """One poll's /metrics page in every encoding a scraper may ask for."""

    text: bytes
    text_gzip: bytes
    openmetrics: bytes
    openmetrics_gzip: bytes
    series: int


def _gauge(name: str, documentation: str, labels: Sequence[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=list(labels))


def _owner_values(owner: Owner) -> list[str]:
    return [owner.namespace, owner.pod, owner.container]


def _node_family(
    name: str, documentation: str, labels: Sequence[str], counts: Iterable[NodeCount]
) -> GaugeMetricFamily:
    family = _gauge(name, documentation, labels)
    for count in counts:
        family.add_metric(list(count.label_values), count.value)
    return family


_Family = GaugeMetricFamily | CounterMetricFamily


def _add_sample(
    families: dict[str, _Family], sample: Sample, *, labels: Sequence[str], values: Sequence[str]
) -> None:
    """Add one collector sample to its family; ``labels``/``values`` come before its own."""
    spec = sample.spec
    family = families.get(spec.name)
    if family is None:
        cls = CounterMetricFamily if spec.kind is MetricKind.COUNTER else GaugeMetricFamily
        family = cls(spec.name, spec.help, labels=[*labels, *spec.labels])
        families[spec.name] = family
    family.add_metric([*values, *sample.label_values], sample.value)


def _telemetry_owners(devices: Iterable[DeviceView]) -> dict[tuple[Owner, str, str], DeviceView]:
    """One entry per (owner, resource, physical device) that has telemetry.

    Replicas of one GPU held by one owner collapse into one series; a physical device
    with at least one allocated replica gets no extra unallocated series.
    """
    owned: dict[tuple[Owner, str, str], DeviceView] = {}
    allocated_bases = {
        (d.resource, d.resolution.physical_id) for d in devices if d.owner.pod and d.reading
    }
    for device in devices:
        if device.reading is None or not device.reading.samples:
            continue
        base = device.resolution.physical_id
        if not device.owner.pod and (device.resource, base) in allocated_bases:
            continue
        owned.setdefault((device.owner, device.resource, base), device)
    return owned


def _telemetry_families(snapshot: Snapshot) -> Iterator[Metric]:
    families: dict[str, _Family] = {}
    for (owner, resource, base), device in _telemetry_owners(snapshot.devices).items():
        assert device.reading is not None
        values = [*_owner_values(owner), resource, base]
        for sample in device.reading.samples:
            _add_sample(families, sample, labels=DEVICE_LABELS, values=values)
    for sample in snapshot.node_samples:
        _add_sample(families, sample, labels=(), values=())
    yield from families.values()
    errors = CounterMetricFamily(
        COLLECTOR_ERRORS.name, COLLECTOR_ERRORS.help, labels=list(COLLECTOR_ERRORS.labels)
    )
    for run in snapshot.collectors:
        for error, count in run.error_counts:
            errors.add_metric([run.name, error], count)
    yield errors


def _inventory_families(snapshot: Snapshot) -> Iterator[Metric]:
    yield _node_family(
        "podresources_node_allocatable_devices",
        "Device IDs the kubelet can allocate (each replica ID is one unit).",
        ("resource", "numa_node"),
        snapshot.allocatable_devices,
    )
    yield _node_family(
        "podresources_node_allocated_devices",
        "Device IDs allocated to containers.",
        ("resource", "numa_node"),
        snapshot.allocated_devices,
    )
    yield _node_family(
        "podresources_node_allocatable_cpus",
        "CPUs the kubelet can allocate exclusively.",
        ("numa_node",),
        snapshot.allocatable_cpus,
    )
    yield _node_family(
        "podresources_node_allocated_cpus",
        "CPUs allocated exclusively to containers.",
        ("numa_node",),
        snapshot.allocated_cpus,
    )
    yield _node_family(
        "podresources_node_allocatable_memory_bytes",
        "Memory and hugepages the kubelet memory manager can allocate, in bytes.",
        ("memory_type", "numa_node"),
        snapshot.allocatable_memory,
    )
    yield _node_family(
        "podresources_node_allocated_memory_bytes",
        "Memory and hugepages allocated to containers, in bytes.",
        ("memory_type", "numa_node"),
        snapshot.allocated_memory,
    )

    device_info = _gauge(
        "podresources_device_info",
        "Every device ID the kubelet knows, with identity from hardware telemetry.",
        ("resource", "device_id", "numa_node", "uuid", "pci_address", "model", "vendor"),
    )
    mismatch = _gauge(
        "podresources_device_numa_mismatch",
        "1 for a device whose kubelet-reported NUMA node disagrees with sysfs.",
        ("resource", "device_id", "kubelet_numa_node", "sysfs_numa_node"),
    )
    seen: set[tuple[str, str]] = set()
    for device in snapshot.devices:
        if (device.resource, device.device_id) in seen:
            continue
        seen.add((device.resource, device.device_id))
        identity = device.reading.identity if device.reading else None
        pci_address = (identity.pci_address if identity else None) or (
            device.pci.address if device.pci else ""
        )
        device_info.add_metric(
            [
                device.resource,
                device.device_id,
                numa_label(device.numa_nodes),
                (identity.uuid if identity else None) or "",
                pci_address or "",
                (identity.model if identity else None) or "",
                (identity.vendor if identity else None) or "",
            ],
            1,
        )
        sysfs_node = device.pci.numa_node if device.pci else None
        if device.numa_nodes and sysfs_node is not None and sysfs_node not in device.numa_nodes:
            mismatch.add_metric(
                [device.resource, device.device_id, numa_label(device.numa_nodes), str(sysfs_node)],
                1,
            )
    unresolved = _gauge(
        "podresources_dra_unresolved_devices",
        "DRA devices allocated to containers whose hardware nothing on the node identifies.",
        ("driver",),
    )
    unresolved_devices: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for device in snapshot.devices:
        if device.claim is not None and not device.resolution.keys:
            unresolved_devices[device.resource].add((device.claim.pool, device.device_id))
    for driver, found in sorted(unresolved_devices.items()):
        unresolved.add_metric([driver], len(found))
    yield device_info
    yield mismatch
    yield unresolved


def _container_families(snapshot: Snapshot) -> Iterator[Metric]:
    device_info = _gauge(
        "podresources_container_device_info",
        "A device allocated to a container.",
        (*OWNER_LABELS, "resource", "device_id", "numa_node"),
    )
    cpus = _gauge(
        "podresources_container_exclusive_cpus",
        "Exclusive CPUs allocated to a container, per NUMA node.",
        (*OWNER_LABELS, "numa_node"),
    )
    memory = _gauge(
        "podresources_container_memory_bytes",
        "Memory and hugepages allocated to a container by the memory manager, in bytes.",
        (*OWNER_LABELS, "memory_type", "numa_node"),
    )
    claims = _gauge(
        "podresources_container_dynamic_resource_info",
        "A device allocated to a container through a DRA resource claim.",
        (*OWNER_LABELS, "claim_namespace", "claim_name", "driver", "pool", "device"),
    )
    aligned = _gauge(
        "podresources_container_numa_aligned",
        "1 when the container's devices and memory sit on NUMA nodes of its exclusive CPUs.",
        OWNER_LABELS,
    )
    cpu_seconds = CounterMetricFamily(
        "podresources_container_exclusive_cpu_seconds",
        "Seconds the container's exclusive CPUs spent in each mode.",
        labels=[*OWNER_LABELS, "mode"],
    )
    for pod in snapshot.pods:
        for container in pod.containers:
            owner = _owner_values(container.owner)
            for device in container.devices:
                device_info.add_metric(
                    [*owner, device.resource, device.device_id, numa_label(device.numa_nodes)], 1
                )
            for node, count in container.cpus_by_numa:
                cpus.add_metric([*owner, node], count)
            totals: dict[tuple[str, str], int] = defaultdict(int)
            for block in container.memory:
                totals[(block.memory_type, numa_label(block.numa_nodes))] += block.size_bytes
            for (memory_type, node), size in sorted(totals.items()):
                memory.add_metric([*owner, memory_type, node], size)
            for claim in container.dynamic_resources:
                for claimed in claim.devices:
                    claims.add_metric(
                        [
                            *owner,
                            claim.claim_namespace,
                            claim.claim_name,
                            claimed.driver,
                            claimed.pool,
                            claimed.device,
                        ],
                        1,
                    )
            if container.numa_aligned is not None:
                aligned.add_metric(owner, 1 if container.numa_aligned else 0)
            for mode, seconds in container.cpu_seconds_by_mode:
                cpu_seconds.add_metric([*owner, mode], seconds)
    yield from (device_info, cpus, memory, claims, aligned, cpu_seconds)


def _self_families(snapshot: Snapshot) -> Iterator[Metric]:
    request_stats = snapshot.kubelet_requests
    build = _gauge(
        "podresources_exporter_build_info",
        "Always 1; the exporter's version and Python version.",
        ("version", "python_version"),
    )
    build.add_metric([__version__, platform.python_version()], 1)
    yield build
    up = _gauge("podresources_kubelet_up", "1 when the last kubelet List call succeeded.", ())
    up.add_metric([], 1 if snapshot.kubelet.up else 0)
    yield up
    api = _gauge(
        "podresources_kubelet_api_available",
        "1 when the kubelet serves the PodResources method (not unimplemented or disabled).",
        ("method",),
    )
    for method, available in snapshot.kubelet.api:
        api.add_metric([method], 1 if available else 0)
    yield api
    requests = CounterMetricFamily(
        "podresources_kubelet_requests",
        "PodResources calls made to the kubelet, by method and gRPC status code.",
        labels=["method", "code"],
    )
    for request in request_stats.requests:
        requests.add_metric([request.method, request.code], request.count)
    yield requests
    latency = HistogramMetricFamily(
        "podresources_kubelet_request_duration_seconds",
        "Latency of PodResources calls to the kubelet, in seconds.",
        labels=["method"],
    )
    for histogram in request_stats.durations:
        latency.add_metric(
            [histogram.method],
            [(_bound(bound), count) for bound, count in histogram.buckets],
            histogram.sum_seconds,
        )
    yield latency
    timestamp = _gauge(
        "podresources_snapshot_timestamp_seconds",
        "Unix time the kubelet data being served was collected; stale when far behind time().",
        (),
    )
    if snapshot.collected_at is not None:  # absent until the kubelet first answers
        timestamp.add_metric([], snapshot.collected_at)
    yield timestamp
    poll = _gauge(
        "podresources_poll_duration_seconds", "How long the last poll took, in seconds.", ()
    )
    poll.add_metric([], snapshot.poll_duration_seconds)
    yield poll
    success = _gauge(
        "podresources_collector_success",
        "1 when the collector's last run succeeded; an absent source counts as success "
        "unless the node advertises resources it serves.",
        ("collector",),
    )
    duration = _gauge(
        "podresources_collector_duration_seconds",
        "How long the collector's last run took, in seconds.",
        ("collector",),
    )
    for run in snapshot.collectors:
        success.add_metric([run.name], 1 if run.success else 0)
        duration.add_metric([run.name], run.duration_seconds)
    yield success
    yield duration


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


class _SnapshotCollector(Collector):
    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        yield from _self_families(self._snapshot)
        yield from _inventory_families(self._snapshot)
        yield from _container_families(self._snapshot)
        yield from _telemetry_families(self._snapshot)
        yield from process_families(self._snapshot)


def render(snapshot: Snapshot) -> Exposition:
    """The whole /metrics page for ``snapshot``, with process metrics; CPU-bound."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SnapshotCollector(snapshot))
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    text = text_format.generate_latest(registry)
    openmetrics = _generate_openmetrics(registry)
    return Exposition(
        text=text,
        text_gzip=gzip.compress(text, compresslevel=GZIP_LEVEL),
        openmetrics=openmetrics,
        openmetrics_gzip=gzip.compress(openmetrics, compresslevel=GZIP_LEVEL),
        series=sum(1 for line in text.splitlines() if not line.startswith(b"#")),
    )
