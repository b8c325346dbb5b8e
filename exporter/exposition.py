"""Snapshot -> metric families -> bytes: rendered and encoded on demand.

A snapshot's sample lines are rendered once, in a thread, when a scraper first asks for
its page (``exporter.store``; our own writer, ``exporter.metricwriter``). What a poll
mostly changes is values, so a render keeps for the next the escaped ``name{labels}``
prefixes of every sample (per telemetry series owner while its samples keep their
families and labels, per container and CPU mode), each unchanged container's
allocation lines, and the allocation families' bodies while every container's lines
stay the same objects; likewise the per-device inventory families (one series per
device ID: thousands on a node with RDMA shared pools or GPU replicas) whole, and which
device each telemetry series reads, while the devices and their hardware's facts stay
the same.
A format (text or OpenMetrics) is joined and encoded only when a scraper first asks
for it in this snapshot, gzip likewise, and both are then kept for every later scrape.
The ``process_*``/``python_*`` families are rendered at scrape time (at most once a
second, shared by the scrapes of that second, which share the whole page too), so they
are never a poll interval old. Families are built fresh from the snapshot every time,
so the series of a pod that is gone cannot survive it.
"""

from __future__ import annotations

import platform
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from exporter import __version__
from exporter.collectors.base import COLLECTOR_ERRORS
from exporter.join import container_cpu_seconds
from exporter.metricwriter import (
    OPENMETRICS_EOF,
    FamilyText,
    PrefixCache,
    Rows,
    counter,
    format_value,
    gauge,
    join_families,
    label_prefix,
    sample_line,
    write_family,
)
from exporter.model import (
    DEVICE_LABELS,
    NO_HARDWARE,
    OWNER_LABELS,
    ContainerView,
    DeviceHardware,
    DeviceReading,
    DeviceView,
    MetricKind,
    MetricSpec,
    NodeCount,
    Owner,
    Resolution,
    Sample,
    Snapshot,
    cpulist,
    numa_label,
)
from exporter.pcie_paths import pcie_path_families
from exporter.process_metrics import process_families
from exporter.selfmetrics import live_rows

__all__ = [
    "GZIP_LEVEL",
    "OPENMETRICS_CONTENT_TYPE",
    "TEXT_CONTENT_TYPE",
    "Exposition",
    "RenderCache",
    "render",
]

# Written out so that serving pages does not import prometheus_client (a test holds
# them equal to its constants). Text is version 0.0.4, as prometheus_client and
# client_golang answer unless a scraper names 1.0.0: every name here is a legacy one, so
# the page is the same in both, and older parsers (expfmt before 1.0.0 existed) take a
# text/plain of any other version for an unknown format.
TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
# Measured on the dense node's ~280 KiB page (docs/benchmarks.md): level 1 takes 0.7 ms
# for 19.5 KiB, 3 takes 0.8 ms for 16 KiB, 6 (gzip's default) 2.2 ms for 13 KiB.
# Level 3 is the knee: near 6's size for a third of its time, paid on the loop once.
GZIP_LEVEL = 3
_GZIP_WBITS = 31  # zlib's gzip container: header and CRC trailer written by zlib


_ContainerLines = tuple[str, str, str, str, str]
# A telemetry device's samples by (family, label values): what its prefixes follow from.
_Shape = tuple[tuple[str, tuple[str, ...]], ...]
# What the inventory families take from a device's hardware: uuid, PCI address, model,
# vendor (its device_info labels) and the NUMA node sysfs gives its PCI function.
_Facts = tuple[str, str, str, str, int | None]
_NO_FACTS: _Facts = ("", "", "", "", None)
# A telemetry series' key: its owner, resource and physical device.
_SeriesKey = tuple[Owner, str, str]


@dataclass(frozen=True, slots=True)
class _DeviceTables:
    """The per-device inventory families as one render made them, and what from
    besides the devices (``RenderCache.devices``): the facts of every resolution with
    any, and ``allocatable_known``."""

    facts: tuple[tuple[Resolution, _Facts], ...]
    allocatable_known: bool
    families: tuple[FamilyText, ...]
    prefixes: PrefixCache  # their sample prefixes, for a render of changed devices


@dataclass(frozen=True, slots=True)
class _SeriesOwners:
    """Which device's reading each telemetry series takes, and what that follows from
    besides the devices: the resolutions with a reading, and whether it has samples."""

    read: tuple[tuple[Resolution, bool], ...]
    owners: tuple[tuple[_SeriesKey, Resolution], ...]


@dataclass(slots=True)
class RenderCache:
    """What one render keeps for the next: exactly the prefixes and container lines it
    used, so the cache follows the node's series and does not grow over churn. Filled
    by the render that made it, then only read."""

    prefixes: PrefixCache = field(default_factory=dict)
    containers: dict[Hashable, _ContainerLines] = field(default_factory=dict)
    # The same lines by id() of the container's view, with the view (the id is only
    # trusted while it is the same object) and its key: a view the join kept is found
    # without making its key, which hashes every part of its allocation.
    views: dict[int, tuple[ContainerView, Hashable, _ContainerLines]] = field(default_factory=dict)
    # The allocation families' bodies, and the container lines they were joined from.
    container_bodies: tuple[list[_ContainerLines], tuple[FamilyText, ...]] | None = None
    # Escaped "name{labels} " of each exclusive-CPU mode, by owner: (modes, CPUs, prefixes).
    cpu_prefixes: dict[Owner, tuple[tuple[str, ...], tuple[int, ...], tuple[str, ...]]] = field(
        default_factory=dict
    )
    # Escaped "name{labels} " of each sample of a telemetry series owner, by shape.
    telemetry: dict[tuple[Hashable, _Shape], tuple[str, ...]] = field(default_factory=dict)
    # The snapshot's devices, and what was made of them and of their hardware: a node
    # with thousands of allocatable IDs (RDMA shared pools, GPU replicas, VF pools)
    # would otherwise look each one up and write its line again every poll.
    devices: tuple[DeviceView, ...] = ()
    device_tables: _DeviceTables | None = None
    series_owners: _SeriesOwners | None = None


# Scrapes this close together share one rendering of the live families (~0.25 ms, half
# a scrape's CPU): ten concurrent scrapers then pay it once, and no figure is older.
LIVE_MAX_AGE_S = 1.0


class _Live:
    """The process families, rendered at most every LIVE_MAX_AGE_S; loop thread only."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._prefixes: PrefixCache = {}
        self._rendered_at = -LIVE_MAX_AGE_S
        self._texts: dict[bool, str] = {}

    def text(self, *, openmetrics: bool) -> str:
        now = self._clock()
        if now - self._rendered_at >= LIVE_MAX_AGE_S:
            prefixes: PrefixCache = {}
            families = [
                write_family(rows, cache=prefixes, previous=self._prefixes) for rows in live_rows()
            ]
            self._prefixes = prefixes
            self._texts = {om: join_families(families, openmetrics=om) for om in (False, True)}
            self._rendered_at = now
        return self._texts[openmetrics]


_LIVE = _Live()


@dataclass(frozen=True, slots=True)
class _Gzipped:
    """A gzip stream of the static page, flushed to a byte boundary and left open, so a
    scrape appends its live families and closes a copy instead of compressing it all."""

    head: bytes
    compressor: zlib._Compress


@dataclass(frozen=True, slots=True)
class Exposition:
    """One snapshot's /metrics page: its families rendered, each encoding made on demand.

    ``page()`` is called from the event loop only; the encodings it keeps in ``_pages``
    are shared with a later Exposition whose families are the same.
    """

    families: tuple[FamilyText, ...]
    series: int
    cache: RenderCache = field(default_factory=RenderCache, compare=False, repr=False)
    _pages: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)
    _gzipped: dict[str, _Gzipped] = field(default_factory=dict, compare=False, repr=False)
    # Each variant's last whole page, by the live families' text it was made with.
    _served: dict[tuple[bool, bool], tuple[str, bytes]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def static(self, *, openmetrics: bool) -> bytes:
        """The snapshot's families in one format, without live ones nor ``# EOF``."""
        key = "openmetrics" if openmetrics else "text"
        page = self._pages.get(key)
        if page is None:
            page = self._pages[key] = join_families(self.families, openmetrics=openmetrics).encode()
        return page

    def page(self, *, openmetrics: bool, gzipped: bool) -> bytes:
        """The whole page as a scraper gets it, live process families included; the
        scrapes of one second share it, as they share the live families' rendering."""
        live = _LIVE.text(openmetrics=openmetrics)
        served = self._served.get((openmetrics, gzipped))
        if served is not None and served[0] is live:
            return served[1]
        body = self._assemble(live, openmetrics=openmetrics, gzipped=gzipped)
        self._served[(openmetrics, gzipped)] = (live, body)
        return body

    def _assemble(self, live: str, *, openmetrics: bool, gzipped: bool) -> bytes:
        if openmetrics:
            live += OPENMETRICS_EOF
        if not gzipped:
            return self.static(openmetrics=openmetrics) + live.encode()
        key = "openmetrics" if openmetrics else "text"
        found = self._gzipped.get(key)
        if found is None:
            compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
            head = compressor.compress(self.static(openmetrics=openmetrics))
            head += compressor.flush(zlib.Z_SYNC_FLUSH)
            found = self._gzipped[key] = _Gzipped(head, compressor)
        tail = found.compressor.copy()
        return found.head + tail.compress(live.encode()) + tail.flush()

    @property
    def text(self) -> bytes:
        return self.page(openmetrics=False, gzipped=False)

    @property
    def openmetrics(self) -> bytes:
        return self.page(openmetrics=True, gzipped=False)

    @property
    def openmetrics_gzip(self) -> bytes:
        return self.page(openmetrics=True, gzipped=True)


def _owner_values(owner: Owner) -> list[str]:
    return [owner.namespace, owner.pod, owner.container]


def _node_family(
    name: str, documentation: str, labels: Sequence[str], counts: Iterable[NodeCount]
) -> Rows:
    family = gauge(name, documentation, labels)
    for count in counts:
        family.add(count.label_values, count.value)
    return family


def _family_text(spec: MetricSpec, lines: list[str]) -> FamilyText:
    """A collector family's text: a counter's family name is its samples' less ``_total``."""
    counter = spec.kind is MetricKind.COUNTER
    name = spec.name.removesuffix("_total") if counter else spec.name
    return FamilyText(
        name, "counter" if counter else "gauge", spec.help, "".join(lines), len(lines)
    )


def _sample_name(spec: MetricSpec) -> str:
    if spec.kind is MetricKind.COUNTER:
        return spec.name.removesuffix("_total") + "_total"
    return spec.name


def _series_owners(
    devices: Iterable[DeviceView], sampled: Mapping[Resolution, bool]
) -> tuple[tuple[_SeriesKey, Resolution], ...]:
    """The device whose reading each telemetry series takes, by (owner, resource,
    physical device); ``sampled``: the resolutions with a reading, and whether it has
    samples.

    Replicas of one GPU held by one owner collapse into one series; a physical device
    with at least one allocated replica gets no extra unallocated series.
    """
    read = [(d, sampled.get(d.resolution)) for d in devices]
    owned: dict[_SeriesKey, Resolution] = {}
    allocated_bases = {
        (d.resource, d.resolution.physical_id)
        for d, samples in read
        if d.owner.pod and samples is not None
    }
    for device, samples in read:
        if not samples:
            continue
        base = device.resolution.physical_id
        if not device.owner.pod and (device.resource, base) in allocated_bases:
            continue
        owned.setdefault((device.owner, device.resource, base), device.resolution)
    return tuple(owned.items())


def _telemetry_owners(
    snapshot: Snapshot, *, cache: RenderCache, previous: RenderCache, same_devices: bool
) -> dict[_SeriesKey, DeviceReading]:
    """One reading per (owner, resource, physical device) that has telemetry. Which
    device each series reads from is kept while the devices and the resolutions with
    readings stay the same, so only those are looked up."""
    hardware = snapshot.hardware
    read = tuple(
        [(r, bool(h.reading.samples)) for r, h in hardware.items() if h.reading is not None]
    )
    found = previous.series_owners
    if found is None or not same_devices or found.read != read:
        found = _SeriesOwners(read, _series_owners(snapshot.devices, dict(read)))
    cache.series_owners = found
    # Every resolution here has a reading: the check only tells mypy so.
    return {
        key: reading
        for key, resolution in found.owners
        if (reading := hardware[resolution].reading) is not None
    }


def _telemetry_families(
    snapshot: Snapshot, *, cache: RenderCache, previous: RenderCache, same_devices: bool
) -> Iterator[FamilyText | Rows]:
    """Collector samples, per series owner and for the node. A series owner's escaped
    prefixes are kept while its samples keep their families and labels, so a render
    formats only the values."""
    bodies: dict[str, tuple[MetricSpec, list[str]]] = {}
    owned = _telemetry_owners(snapshot, cache=cache, previous=previous, same_devices=same_devices)
    owners: list[tuple[Hashable, tuple[str, ...], tuple[str, ...], tuple[Sample, ...]]] = [
        (key, DEVICE_LABELS, (*_owner_values(key[0]), key[1], key[2]), reading.samples)
        for key, reading in owned.items()
    ]
    owners.append((None, (), (), snapshot.node_samples))
    for key, labels, values, samples in owners:
        shape = tuple([(s.spec.name, s.label_values) for s in samples])
        prefixes = previous.telemetry.get((key, shape))
        if prefixes is None:
            prefixes = tuple(
                label_prefix(
                    _sample_name(sample.spec),
                    zip(
                        (*labels, *sample.spec.labels),
                        (*values, *sample.label_values),
                        strict=True,
                    ),
                )
                + " "
                for sample in samples
            )
        cache.telemetry[(key, shape)] = prefixes
        for prefix, sample in zip(prefixes, samples, strict=True):
            found = bodies.get(sample.spec.name)
            if found is None:
                found = bodies[sample.spec.name] = (sample.spec, [])
            found[1].append(f"{prefix}{format_value(sample.value)}\n")
    for spec, lines in bodies.values():
        yield _family_text(spec, lines)
    errors = counter(COLLECTOR_ERRORS.name, COLLECTOR_ERRORS.help, COLLECTOR_ERRORS.labels)
    for run in snapshot.collectors:
        for error, count in run.error_counts:
            errors.add((run.name, error), count)
    yield errors


def _inventory_families(
    snapshot: Snapshot, *, cache: RenderCache, previous: RenderCache, same_devices: bool
) -> Iterator[FamilyText | Rows]:
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

    yield from _device_tables(snapshot, cache=cache, previous=previous, same_devices=same_devices)


def _facts(hardware: DeviceHardware) -> _Facts:
    identity = hardware.reading.identity if hardware.reading else None
    pci_address = (identity.pci_address if identity else None) or (
        hardware.pci.address if hardware.pci else ""
    )
    return (
        (identity.uuid if identity else None) or "",
        pci_address or "",
        (identity.model if identity else None) or "",
        (identity.vendor if identity else None) or "",
        hardware.pci.numa_node if hardware.pci else None,
    )


def _device_tables(
    snapshot: Snapshot, *, cache: RenderCache, previous: RenderCache, same_devices: bool
) -> tuple[FamilyText, ...]:
    """The per-device inventory families, taken whole from the last render while the
    devices, their hardware's facts and ``allocatable_known`` are what it had: most
    polls change none of them, and a node may have thousands of device IDs."""
    hardware = snapshot.hardware
    facts = tuple(
        [
            (resolution, found)
            for resolution, device_hardware in hardware.items()
            if device_hardware is not NO_HARDWARE
            and (found := _facts(device_hardware)) != _NO_FACTS
        ]
    )
    kept = previous.device_tables
    if (
        kept is None
        or kept.allocatable_known != snapshot.allocatable_known
        or kept.facts != facts
        or not (same_devices or _read_alike(previous.devices, snapshot.devices))
    ):
        prefixes: PrefixCache = {}
        families = tuple(
            write_family(rows, cache=prefixes, previous=kept.prefixes if kept else None)
            for rows in _device_rows(snapshot, dict(facts))
        )
        kept = _DeviceTables(facts, snapshot.allocatable_known, families, prefixes)
    cache.device_tables = kept
    return kept.families


def _read_alike(old: tuple[DeviceView, ...], new: tuple[DeviceView, ...]) -> bool:
    """Whether the inventory families read the devices alike: in the same order, each
    the same but maybe for its owner (a join after churn gives a replaced pod's devices
    another, which these families do not show)."""
    return len(old) == len(new) and all(
        a is b or _inventory_view(a) == _inventory_view(b) for a, b in zip(old, new, strict=True)
    )


def _inventory_view(device: DeviceView) -> tuple[object, ...]:
    """All the inventory families read of a device."""
    return (
        device.resource,
        device.device_id,
        device.numa_nodes,
        device.allocatable,
        device.claim,
        device.resolution,
    )


def _device_rows(snapshot: Snapshot, facts: Mapping[Resolution, _Facts]) -> tuple[Rows, ...]:
    """One row per device of ``snapshot``, and per resolution the ``facts`` of its
    hardware (none where absent)."""
    device_info = gauge(
        "podresources_device_info",
        "Every device ID the kubelet knows, and every GPU NVML finds that none names "
        "(resource empty), with identity from hardware telemetry.",
        ("resource", "device_id", "numa_node", "uuid", "pci_address", "model", "vendor"),
    )
    mismatch = gauge(
        "podresources_device_numa_mismatch",
        "1 for a device whose kubelet-reported NUMA node disagrees with sysfs.",
        ("resource", "device_id", "kubelet_numa_node", "sysfs_numa_node"),
    )
    # Present only where it is 1, as numa_mismatch: a series per device would add a
    # third of the page on nodes with ~100,000 device IDs (the large-reply bench).
    unoffered = gauge(
        "podresources_device_not_allocatable",
        "1 for a device a container holds that the kubelet no longer offers as allocatable "
        "(unhealthy, or its device plugin gone).",
        ("resource", "device_id"),
    )
    seen: set[tuple[str, str]] = set()
    for device in snapshot.devices:
        if (device.resource, device.device_id) in seen:
            continue
        seen.add((device.resource, device.device_id))
        # Device-plugin devices only: DRA devices and GPUs NVML alone finds have no
        # inventory to leave.
        if (
            snapshot.allocatable_known
            and not device.allocatable
            and device.claim is None
            and device.resource
        ):
            unoffered.add((device.resource, device.device_id), 1)
        uuid, pci_address, model, vendor, sysfs_node = facts.get(device.resolution, _NO_FACTS)
        device_info.add(
            (
                device.resource,
                device.device_id,
                numa_label(device.numa_nodes),
                uuid,
                pci_address,
                model,
                vendor,
            ),
            1,
        )
        if device.numa_nodes and sysfs_node is not None and sysfs_node not in device.numa_nodes:
            mismatch.add(
                (device.resource, device.device_id, numa_label(device.numa_nodes), str(sysfs_node)),
                1,
            )
    unresolved = gauge(
        "podresources_dra_unresolved_devices",
        "DRA devices allocated to containers whose hardware nothing on the node identifies.",
        ("driver",),
    )
    unresolved_devices: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for device in snapshot.devices:
        if device.claim is not None and not device.resolution.keys:
            unresolved_devices[device.resource].add((device.claim.pool, device.device_id))
    for driver, found in sorted(unresolved_devices.items()):
        unresolved.add((driver,), len(found))
    return (device_info, unoffered, mismatch, unresolved)


# The container families that follow from allocations alone, in page order: their
# lines are kept per container and re-used while its allocation stays the same.
_CONTAINER_FAMILIES = (
    (
        "podresources_container_device_info",
        "A device allocated to a container.",
    ),
    (
        "podresources_container_exclusive_cpus",
        "Exclusive CPUs allocated to a container, per NUMA node; an empty container label "
        "is a pod's shared pool under pod-level resources.",
    ),
    (
        "podresources_container_memory_bytes",
        "Memory and hugepages allocated to a container by the memory manager, in bytes; an "
        "empty container label is a pod's shared pool under pod-level resources.",
    ),
    (
        "podresources_container_dynamic_resource_info",
        "A device allocated to a container through a DRA resource claim.",
    ),
    (
        "podresources_container_numa_aligned",
        "1 when the container's devices and memory sit on NUMA nodes of its exclusive CPUs.",
    ),
)


def _line(name: str, labels: Iterable[tuple[str, str]], value: float) -> str:
    return f"{label_prefix(name, labels)} {format_value(value)}\n"


def _container_key(container: ContainerView) -> Hashable:
    """Everything the allocation families of one container are made of."""
    return (
        container.owner,
        tuple((d.resource, d.device_id, d.numa_nodes) for d in container.devices),
        container.cpus_by_numa,
        container.memory,
        container.dynamic_resources,
        container.numa_aligned,
    )


def _container_lines(container: ContainerView) -> _ContainerLines:
    owner = tuple(zip(OWNER_LABELS, _owner_values(container.owner), strict=True))
    names = [name for name, _ in _CONTAINER_FAMILIES]
    devices = "".join(
        _line(
            names[0],
            (
                *owner,
                ("resource", d.resource),
                ("device_id", d.device_id),
                ("numa_node", numa_label(d.numa_nodes)),
            ),
            1,
        )
        for d in container.devices
    )
    cpus = "".join(
        _line(names[1], (*owner, ("numa_node", node)), count)
        for node, count in container.cpus_by_numa
    )
    totals: dict[tuple[str, str], int] = defaultdict(int)
    for block in container.memory:
        totals[(block.memory_type, numa_label(block.numa_nodes))] += block.size_bytes
    memory = "".join(
        _line(names[2], (*owner, ("memory_type", kind), ("numa_node", node)), size)
        for (kind, node), size in sorted(totals.items())
    )
    # dict.fromkeys: two shares of one device (KEP-5075, told apart by share_id only)
    # are one series.
    claims = "".join(
        dict.fromkeys(
            _line(
                names[3],
                (
                    *owner,
                    ("claim_namespace", claim.claim_namespace),
                    ("claim_name", claim.claim_name),
                    ("driver", claimed.driver),
                    ("pool", claimed.pool),
                    ("device", claimed.device),
                ),
                1,
            )
            for claim in container.dynamic_resources
            for claimed in claim.devices
        )
    )
    aligned = (
        ""
        if container.numa_aligned is None
        else _line(names[4], owner, 1 if container.numa_aligned else 0)
    )
    return (devices, cpus, memory, claims, aligned)


def _cpu_seconds_lines(
    container: ContainerView,
    pairs: tuple[tuple[str, float], ...],
    *,
    cache: RenderCache,
    previous: RenderCache,
) -> Iterator[str]:
    modes = tuple([mode for mode, _ in pairs])
    found = previous.cpu_prefixes.get(container.owner)
    if found is None or found[0] != modes or found[1] != container.cpu_ids:
        # The CPUs are part of the series: the figure is their since-boot time, so the
        # same container on other CPUs (a pod made again) counts from elsewhere.
        labels = (
            *zip(OWNER_LABELS, _owner_values(container.owner), strict=True),
            ("cpus", cpulist(container.cpu_ids)),
        )
        found = (
            modes,
            container.cpu_ids,
            tuple(label_prefix(_CPU_SECONDS, (*labels, ("mode", m))) + " " for m in modes),
        )
    cache.cpu_prefixes[container.owner] = found
    return (
        f"{prefix}{format_value(seconds)}\n"
        for prefix, (_, seconds) in zip(found[2], pairs, strict=True)
    )


_CPU_SECONDS = "podresources_container_exclusive_cpu_seconds_total"


def _container_families(
    snapshot: Snapshot, *, cache: RenderCache, previous: RenderCache, same_allocations: bool
) -> Iterator[FamilyText]:
    kept = previous.container_bodies
    # Joined from the very data the last snapshot was: its allocation families are the
    # last ones, and only the CPU seconds need formatting (at 1,000 pods, keying and
    # looking up 2,000 containers' lines was half of this function).
    keep_all = same_allocations and kept is not None
    per_container: list[_ContainerLines] = []
    cpu_seconds: list[str] = []
    for pod in snapshot.pods:
        for container in pod.containers:
            if not keep_all:
                found = previous.views.get(id(container))
                if found is not None and found[0] is container:
                    key, lines = found[1], found[2]
                else:
                    key = _container_key(container)
                    lines = previous.containers.get(key) or _container_lines(container)
                cache.containers[key] = lines
                cache.views[id(container)] = (container, key, lines)
                per_container.append(lines)
            if container.cpu_ids:
                pairs = container_cpu_seconds(container, snapshot.cpu_times)
                if pairs:
                    cpu_seconds.extend(
                        _cpu_seconds_lines(container, pairs, cache=cache, previous=previous)
                    )
    if kept is not None and keep_all:
        cache.containers, cache.views = previous.containers, previous.views
        per_container = kept[0]
    if kept is not None and (keep_all or kept[0] == per_container):  # identity, per line
        bodies = kept[1]
    else:
        bodies = tuple(
            FamilyText(name, "gauge", documentation, body, body.count("\n"))
            for index, (name, documentation) in enumerate(_CONTAINER_FAMILIES)
            for body in ("".join([lines[index] for lines in per_container]),)
        )
    cache.container_bodies = (per_container, bodies)
    yield from bodies
    yield _cpu_seconds_family(cpu_seconds)


def _cpu_seconds_family(lines: list[str]) -> FamilyText:
    return FamilyText(
        _CPU_SECONDS.removesuffix("_total"),
        "counter",
        "Seconds the container's exclusive CPUs (cpus, in cpulist notation) spent in each "
        "mode since boot; other CPUs for the same container are another series.",
        "".join(lines),
        len(lines),
    )


def _self_families(
    snapshot: Snapshot, *, cache: RenderCache, previous: RenderCache
) -> Iterator[FamilyText | Rows]:
    request_stats = snapshot.kubelet_requests
    build = gauge(
        "podresources_exporter_build_info",
        "Always 1; the exporter's version and Python version.",
        ("version", "python_version"),
    )
    build.add((__version__, platform.python_version()), 1)
    yield build
    up = gauge("podresources_kubelet_up", "1 when the last kubelet List call succeeded.", ())
    up.add((), 1 if snapshot.kubelet.up else 0)
    yield up
    api = gauge(
        "podresources_kubelet_api_available",
        "1 when the kubelet serves the PodResources method (not unimplemented or disabled).",
        ("method",),
    )
    for method, available in snapshot.kubelet.api:
        api.add((method,), 1 if available else 0)
    yield api
    requests = counter(
        "podresources_kubelet_requests",
        "PodResources calls made to the kubelet, by method and gRPC status code.",
        ("method", "code"),
    )
    for request in request_stats.requests:
        requests.add((request.method, request.code), request.count)
    yield requests
    latency = "podresources_kubelet_request_duration_seconds"

    def line(name: str, labels: tuple[tuple[str, str], ...], value: float) -> str:
        return sample_line(name, labels, value, cache=cache.prefixes, previous=previous.prefixes)

    lines = []
    for histogram in request_stats.durations:
        by_method = ("method", histogram.method)
        observed = 0
        for bound, observed in histogram.buckets:
            lines.append(line(f"{latency}_bucket", (("le", _bound(bound)), by_method), observed))
        # As prometheus_client writes a histogram: _count is the +Inf bucket's count.
        lines.append(line(f"{latency}_count", (by_method,), observed))
        lines.append(line(f"{latency}_sum", (by_method,), histogram.sum_seconds))
    yield FamilyText(
        latency,
        "histogram",
        "Latency of PodResources calls to the kubelet, in seconds.",
        "".join(lines),
        len(lines),
    )
    timestamp = gauge(
        "podresources_snapshot_timestamp_seconds",
        "Unix time the kubelet data being served was collected; stale when far behind time().",
        (),
    )
    if snapshot.collected_at is not None:  # absent until the kubelet first answers
        timestamp.add((), snapshot.collected_at)
    yield timestamp
    poll = gauge(
        "podresources_poll_duration_seconds", "How long the last poll took, in seconds.", ()
    )
    poll.add((), snapshot.poll_duration_seconds)
    yield poll
    interval = gauge(
        "podresources_poll_interval_seconds",
        "Time between polls (--poll.interval), in seconds: how far behind time() "
        "podresources_snapshot_timestamp_seconds falls between two polls.",
        (),
    )
    if snapshot.poll_interval_seconds is not None:
        interval.add((), snapshot.poll_interval_seconds)
    yield interval
    success = gauge(
        "podresources_collector_success",
        "1 when the collector's last run succeeded; an absent source counts as success "
        "unless the node advertises resources it serves.",
        ("collector",),
    )
    duration = gauge(
        "podresources_collector_duration_seconds",
        "How long the collector's last run took, in seconds.",
        ("collector",),
    )
    for run in snapshot.collectors:
        success.add((run.name,), 1 if run.success else 0)
        duration.add((run.name,), run.duration_seconds)
    yield success
    yield duration


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def render(
    snapshot: Snapshot, *, previous: Exposition | None = None, same_allocations: bool = False
) -> Exposition:
    """The /metrics page of ``snapshot``; CPU-bound, for a thread (``SnapshotStore``
    renders it when the snapshot is first scraped).

    ``previous`` (the last page rendered) only saves work: the result is the same without.
    ``same_allocations`` says ``snapshot`` was joined from the kubelet data, CPU map and
    DRA state ``previous`` was (only its readings are new), so its allocation families
    are taken as they were.
    """
    seen = previous.cache if previous is not None else RenderCache()
    # Identity first: a poll that only refreshed readings keeps each view, and the tuple
    # compares them by identity too, so thousands of unchanged devices cost microseconds.
    same_devices = seen.devices is snapshot.devices or seen.devices == snapshot.devices
    cache = RenderCache(devices=snapshot.devices)
    families: list[FamilyText] = []
    for family in (
        *_self_families(snapshot, cache=cache, previous=seen),
        *_inventory_families(snapshot, cache=cache, previous=seen, same_devices=same_devices),
        *_container_families(
            snapshot, cache=cache, previous=seen, same_allocations=same_allocations
        ),
        *pcie_path_families(snapshot),
        *_telemetry_families(snapshot, cache=cache, previous=seen, same_devices=same_devices),
        *process_families(snapshot),
    ):
        if isinstance(family, FamilyText):
            families.append(family)
        else:
            families.append(write_family(family, cache=cache.prefixes, previous=seen.prefixes))
    rendered = tuple(families)
    series = sum(f.samples for f in rendered)
    if previous is not None and previous.families == rendered:
        # Nothing changed: keep the encodings already made, and the objects scrapers hold.
        return Exposition(
            rendered, series, cache, previous._pages, previous._gzipped, previous._served
        )
    return Exposition(rendered, series, cache)
