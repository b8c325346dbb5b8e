"""The /debug/allocations views of a snapshot: filtered JSON and a text table. Pure.

``encode_json`` and ``encode_text`` give a view as bytes split where the age goes, so a
view is encoded once per snapshot and each request only splices in its own age.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.collectors.gpu_metrics import (
    GPU_DRAM_ACTIVE,
    GPU_MEMORY_TOTAL,
    GPU_MEMORY_USED,
    GPU_PIPE_ACTIVE,
    GPU_POWER,
    GPU_SM_ACTIVE,
    GPU_TEMPERATURE,
    GPU_UTILIZATION,
)
from exporter.devicematch import Match, device_match
from exporter.join import SHARED_POOL
from exporter.logs import escape_line
from exporter.model import (
    ClaimRef,
    ContainerView,
    DeviceGroup,
    DeviceHardware,
    DeviceReading,
    DeviceView,
    GpuDeviceProcesses,
    KeyKind,
    MemoryBlock,
    Owner,
    PodView,
    Snapshot,
    ViewedProcess,
    cpulist,
    numa_label,
)
from exporter.pci_address import parse_pci_address
from exporter.pcie_paths import GpuNicPath, gpu_nic_paths

__all__ = [
    "FILTER_KEYS",
    "MAX_CELL_CHARS",
    "EncodedView",
    "Filters",
    "encode_json",
    "encode_text",
    "render_json",
    "render_text",
]

FILTER_KEYS = ("namespace", "pod", "container", "resource", "device")

# A table cell longer than this is cut: one 4 KB device ID padded every row to 4 KB.
MAX_CELL_CHARS = 64
# Cut in the middle, keeping more of the end: what tells apart the pods of one workload
# (a ReplicaSet's hash and suffix, a StatefulSet's ordinal), a holder's container and a
# device's replica (::n) comes last.
_CUT_HEAD_CHARS = (MAX_CELL_CHARS - 1) // 2
_CUT_TAIL_CHARS = MAX_CELL_CHARS - 1 - _CUT_HEAD_CHARS
# Stands where the age goes while a view is encoded; NUL is escaped wherever it could
# come from data (JSON strings, table cells), so only the placeholder itself matches.
_AGE_MARK = "\x00age\x00"

JSON = dict[str, Any]
# (resource, device_id) of every view of a device -> its attributed processes.
_ProcessIndex = Mapping[tuple[str, str], GpuDeviceProcesses]


@dataclass(frozen=True, slots=True)
class Filters:
    """Exact-match filters, but ``device`` (``exporter.devicematch``); None matches all."""

    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    resource: str | None = None
    device: str | None = None
    # The spellings ``device`` is looked for in, made once: as asked, and a PCI address
    # as NVML or lspci -D in capitals write it (00000000:17:00.0) in the kernel's, which
    # every PCI key has.
    _asked: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        asked: tuple[str, ...] = () if self.device is None else (self.device,)
        kernel_spelling = parse_pci_address(self.device) if self.device is not None else None
        if kernel_spelling is not None and kernel_spelling != self.device:
            asked += (kernel_spelling,)
        object.__setattr__(self, "_asked", asked)

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> Filters:
        """The filters a query asks for; the shared pool by the name the table shows."""
        values = {key: query.get(key) for key in FILTER_KEYS}
        if values["container"] == POD_POOL:
            values["container"] = SHARED_POOL
        return cls(**values)

    def match(self, device: DeviceView, snapshot: Snapshot) -> Match | None:
        """What the device is of the one ``device`` asks for (``exporter.devicematch``);
        None where it is none of it, the resource filter leaves it out, or no device
        is asked for."""
        if self.device is None or (self.resource is not None and device.resource != self.resource):
            return None
        hardware = snapshot.hardware_of(device)
        found = (device_match(asked, device, hardware) for asked in self._asked)
        return next((match for match in found if match is not None), None)

    def keeps_device(self, device: DeviceView, snapshot: Snapshot) -> bool:
        """Whether the resource and device filters select the device."""
        if self.device is not None:
            return self.match(device, snapshot) is not None
        return self.resource is None or device.resource == self.resource

    def keeps_pod(self, pod: PodView) -> bool:
        return (self.namespace is None or pod.namespace == self.namespace) and (
            self.pod is None or pod.name == self.pod
        )

    def keeps_container(self, container: ContainerView, snapshot: Snapshot) -> bool:
        if self.container is not None and container.owner.container != self.container:
            return False
        if self.resource is None and self.device is None:
            return True
        return any(
            self.keeps_device(d, snapshot) for d in (*container.devices, *container.claim_devices)
        )


def rfc3339(unix_seconds: float) -> str:
    return (
        dt.datetime.fromtimestamp(unix_seconds, dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def _telemetry(reading: DeviceReading | None) -> JSON | None:
    if reading is None:
        return None
    figures: JSON = {}
    for sample in reading.samples:
        key = sample.spec.name
        if sample.spec.labels:
            pairs = ",".join(
                f'{name}="{value}"'
                for name, value in zip(sample.spec.labels, sample.label_values, strict=True)
            )
            key = f"{key}{{{pairs}}}"
        figures[key] = sample.value
    identity = {
        name: value
        for name, value in (
            ("uuid", reading.identity.uuid),
            ("pci_address", reading.identity.pci_address),
            ("model", reading.identity.model),
            ("vendor", reading.identity.vendor),
        )
        if value
    }
    return {"identity": identity, "figures": figures}


def _hardware(device: DeviceView, found: DeviceHardware) -> JSON:
    """How the device was resolved to hardware, and which key found its telemetry."""
    resolution = device.resolution
    return {
        "keys": [str(k) for k in resolution.keys],
        "source": resolution.source,
        "matched": found.reading.name if found.reading else None,
        "unresolved": resolution.unresolved,
    }


def _match(device: DeviceView | None, snapshot: Snapshot, filters: Filters) -> JSON:
    """In a ?device= view, what the device is of the one asked for (null: the holder's
    other devices); nothing in other views."""
    if filters.device is None:
        return {}
    found = None if device is None else filters.match(device, snapshot)
    return {"match": None if found is None else str(found)}


def _device(
    device: DeviceView, snapshot: Snapshot, processes: _ProcessIndex | None, *, filters: Filters
) -> JSON:
    hardware = snapshot.hardware_of(device)
    found: JSON = {
        "resource": device.resource,
        "device_id": device.device_id,
        "numa_nodes": list(device.numa_nodes),
        "sysfs_numa_node": hardware.pci.numa_node if hardware.pci else None,
        "hardware": _hardware(device, hardware),
        "telemetry": _telemetry(hardware.reading),
        **_match(device, snapshot, filters),
    }
    # Only for devices whose processes were listed: a NIC has none to speak of.
    listed = processes.get((device.resource, device.device_id)) if processes else None
    if listed is not None:
        found["processes"] = _processes(listed)
    return found


def _processes(device: GpuDeviceProcesses) -> list[JSON]:
    """Each process on the device: PID, owner ("host" for no pod), memory, utilization."""
    return [
        {
            "pid": viewed.process.pid,
            "owner": _process_owner(viewed),
            "kind": str(viewed.kind),
            "memory_used_bytes": viewed.process.memory_used_bytes,
            "sm_utilization_ratio": viewed.process.sm_utilization_ratio,
        }
        for viewed in device.processes
    ]


def _process_owner(viewed: ViewedProcess) -> str:
    owner = viewed.owner
    if owner.pod:
        return "/".join((owner.namespace, owner.pod, owner.container))
    origin = viewed.process.origin
    return "host" if origin.pod_uid is None else f"unknown pod {origin.pod_uid or '?'}"


def _process_index(snapshot: Snapshot) -> _ProcessIndex | None:
    if snapshot.gpu_processes is None:
        return None
    return {view: device for device in snapshot.gpu_processes for view in device.views}


def _claim_device_views(container: ContainerView) -> dict[tuple[ClaimRef, str, str], DeviceView]:
    # By the claim as the join names it: a DRA device's name is unique within its pool
    # only, and a shared device's shares differ by share ID, both in ClaimRef.
    return {
        (d.claim, d.resource, d.device_id): d
        for d in container.claim_devices
        if d.claim is not None
    }


def _memory(block: MemoryBlock) -> JSON:
    return {
        "memory_type": block.memory_type,
        "size_bytes": block.size_bytes,
        "numa_nodes": list(block.numa_nodes),
    }


def _container(
    container: ContainerView,
    snapshot: Snapshot,
    processes: _ProcessIndex | None,
    *,
    filters: Filters,
) -> JSON:
    claimed = _claim_device_views(container)
    return {
        "name": container.owner.container,
        "devices": [_device(d, snapshot, processes, filters=filters) for d in container.devices],
        "cpu_ids": list(container.cpu_ids),
        "memory": [_memory(b) for b in container.memory],
        "dynamic_resources": [
            {
                "claim_name": claim.claim_name,
                "claim_namespace": claim.claim_namespace,
                "devices": [
                    {
                        "driver": d.driver,
                        "pool": d.pool,
                        "device": d.device,
                        "share_id": d.share_id,
                        "cdi_devices": list(d.cdi_devices),
                        **_claim_device_detail(
                            claimed.get(
                                (
                                    ClaimRef(
                                        claim.claim_namespace, claim.claim_name, d.pool, d.share_id
                                    ),
                                    d.driver,
                                    d.device,
                                )
                            ),
                            snapshot,
                            processes,
                            filters=filters,
                        ),
                    }
                    for d in claim.devices
                ],
            }
            for claim in container.dynamic_resources
        ],
        "numa_nodes": list(container.numa_nodes),
        "numa_aligned": container.numa_aligned,
    }


def _claim_device_detail(
    view: DeviceView | None,
    snapshot: Snapshot,
    processes: _ProcessIndex | None,
    *,
    filters: Filters,
) -> JSON:
    if view is None:
        return _match(None, snapshot, filters)
    hardware = snapshot.hardware_of(view)
    detail: JSON = {
        "hardware": _hardware(view, hardware),
        "telemetry": _telemetry(hardware.reading),
        **_match(view, snapshot, filters),
    }
    listed = processes.get((view.resource, view.device_id)) if processes else None
    if listed is not None:
        detail["processes"] = _processes(listed)
    return detail


def _pod(
    pod: PodView, filters: Filters, snapshot: Snapshot, processes: _ProcessIndex | None
) -> JSON | None:
    containers = [
        _container(c, snapshot, processes, filters=filters)
        for c in pod.containers
        if filters.keeps_container(c, snapshot)
    ]
    if not containers:
        return None
    return {
        "namespace": pod.namespace,
        "name": pod.name,
        "cpu_ids": list(pod.cpu_ids),
        "memory": [_memory(b) for b in pod.memory],
        "containers": containers,
    }


def render_json(
    snapshot: Snapshot, *, filters: Filters, now: float, source: str = "snapshot"
) -> JSON:
    """The snapshot as on-call reads it, always with its age."""
    processes = _process_index(snapshot)
    pods = [
        p
        for p in (
            _pod(pod, filters, snapshot, processes)
            for pod in snapshot.pods
            if filters.keeps_pod(pod)
        )
        if p
    ]
    allocatable = snapshot.allocatable
    found = {
        "node": snapshot.node,
        "source": source,
        "collected_at": rfc3339(snapshot.collected_at) if snapshot.collected_at else None,
        "age_seconds": round(now - snapshot.collected_at, 3) if snapshot.collected_at else None,
        "status": _status(snapshot, source),
        **_telemetry_time(snapshot, source),
        "kubelet": {
            "up": snapshot.kubelet.up,
            "socket": snapshot.kubelet.socket,
            "api": dict(snapshot.kubelet.api),
            "last_error": snapshot.kubelet.last_error,
        },
        "allocatable": {
            **_allocatable_devices(snapshot, filters),
            "cpu_ids": list(allocatable.cpu_ids),
            "memory": [_memory(b) for b in allocatable.memory],
        },
        "collectors": [
            {
                "name": run.name,
                "success": run.success,
                "duration_seconds": round(run.duration_seconds, 6),
                "error": run.error,
                "unavailable": run.unavailable,
                "errors": dict(run.error_counts),
            }
            for run in snapshot.collectors
        ],
        "pods": pods,
    }
    found["gpu_nic_paths"] = [_nic_path(path) for path in _shown_nic_paths(snapshot, filters)]
    if snapshot.gpu_processes is not None:
        # Every device with processes, the unallocated ones no pod above shows included.
        found["gpu_processes"] = _gpu_processes(snapshot.gpu_processes, filters, snapshot)
    return found


def _allocatable_devices(snapshot: Snapshot, filters: Filters) -> JSON:
    """The allocatable devices a view carries: every one unfiltered; in a filtered view,
    those ``resource`` and ``device`` select (none with owner filters alone: 8 RDMA
    shared pools of 1,000 IDs made ?namespace= 1.1 MB of them), and how many it left
    out, so that a short list is not read as the node's."""
    every = [(g, d) for g in snapshot.allocatable.devices for d in g.device_ids]
    shown: list[tuple[DeviceGroup, str, JSON]] = []
    if filters == Filters():
        shown = [(g, d, {}) for g, d in every]
    elif filters.resource is not None or filters.device is not None:
        # The device filter needs each ID's view, for the hardware it resolved to.
        views = {(v.resource, v.device_id): v for v in snapshot.devices if v.allocatable}
        for g, d in every:
            view = views.get((g.resource, d))
            if view is not None and filters.keeps_device(view, snapshot):
                shown.append((g, d, _match(view, snapshot, filters)))
    return {
        "devices": [
            {"resource": g.resource, "device_id": d, "numa_nodes": list(g.numa_nodes), **found}
            for g, d, found in shown
        ],
        "devices_omitted": len(every) - len(shown),
    }


GET_SOURCE = "kubelet Get"  # a view of one pod Get has just answered for
# How the table names a pod's shared pool (the container ""), and ?container= asks for
# it: no container name can be it (names are DNS labels).
POD_POOL = "(pod pool)"


def _telemetry_time(snapshot: Snapshot, source: str) -> JSON:
    """In a view of a pod Get has just answered for, when its telemetry was read (the
    last poll's readings_at), and how much older than its allocation it is: age_seconds
    is the allocation's. Other views hold one poll's data: one age says it all."""
    read_at, collected_at = snapshot.readings_at, snapshot.collected_at
    if source != GET_SOURCE or read_at is None or not collected_at:
        return {}
    return {
        "telemetry_collected_at": rfc3339(read_at),
        "telemetry_older_by_seconds": round(collected_at - read_at, 3),
    }


def _status(snapshot: Snapshot, source: str) -> str:
    """One word for ``jq .status``: whether the pods shown are what the kubelet says now."""
    if not snapshot.collected_at:
        return "no kubelet data yet"  # allocatable and telemetry stand alone
    if source == GET_SOURCE:
        return "ok"  # Get just answered for this pod, whatever List does
    if not snapshot.kubelet.up:
        return "stale: kubelet down"  # the last good pods, with their age
    return "ok"


def _gpu_processes(
    devices: tuple[GpuDeviceProcesses, ...], filters: Filters, snapshot: Snapshot
) -> list[JSON]:
    # The views ?device= selects, by the same rules as the pods' devices.
    selected = (
        frozenset(
            (d.resource, d.device_id) for d in snapshot.devices if filters.keeps_device(d, snapshot)
        )
        if filters.device is not None
        else frozenset()
    )
    return [
        {
            "resource": device.resource,
            "device_id": device.device_id,
            "holders": ["/".join((h.namespace, h.pod, h.container)) for h in device.holders],
            "foreign": dict(device.foreign),
            "processes": _processes(device),
        }
        for device in devices
        if device.processes and _keeps_processes(device, filters, selected)
    ]


def _keeps_processes(
    device: GpuDeviceProcesses, filters: Filters, selected: frozenset[tuple[str, str]]
) -> bool:
    """A device is kept when it matches the device filters (``selected``: the views
    ?device= selects) and, with owner filters, one of its holders or process owners
    matches them."""
    if filters.resource is not None and device.resource != filters.resource:
        return False
    if (
        filters.device is not None
        and filters.device != device.device_id
        and selected.isdisjoint(device.views)
    ):
        return False
    owners = [*device.holders]
    if filters.container != SHARED_POOL:
        # A process whose container could not be named has container "" too: only a
        # holder can be a pod's shared pool.
        owners += (p.owner for p in device.processes)
    return any(
        o.pod  # a host process has no owner
        and (filters.namespace is None or o.namespace == filters.namespace)
        and (filters.pod is None or o.pod == filters.pod)
        and (filters.container is None or o.container == filters.container)
        for o in owners
    ) or (filters.namespace is None and filters.pod is None and filters.container is None)


_NAMED_KEYS = (KeyKind.NETDEV, KeyKind.RDMA)


def _hardware_cell(device: DeviceView | None, snapshot: Snapshot) -> str:
    """What the device resolved to: the telemetry's device, else the first key, else why not."""
    if device is None:
        return "-"
    reading = snapshot.hardware_of(device).reading
    if reading is not None:
        # A NIC's netdev and RDMA device are one reading: name both, as alerts name either.
        names = (k.value for k in reading.keys if k.kind in _NAMED_KEYS)
        return ", ".join(dict.fromkeys((reading.name, *names)))
    if device.resolution.unresolved:
        return f"unresolved: {device.resolution.unresolved}"
    if device.resolution.keys:
        return f"{device.resolution.keys[0]} (no telemetry)"
    return "-"


def _cell(text: str) -> str:
    """Control characters escaped (a newline in an ID cannot inject a row), length capped
    by cutting out the middle."""
    text = escape_line(text)
    if len(text) <= MAX_CELL_CHARS:
        return text
    return text[:_CUT_HEAD_CHARS] + "…" + text[-_CUT_TAIL_CHARS:]


def _text_age(snapshot: Snapshot, now: float) -> str:
    return (
        f"{now - snapshot.collected_at:.1f}s"
        if snapshot.collected_at
        else "none: no kubelet data yet"
    )


def render_text(
    snapshot: Snapshot, *, filters: Filters, now: float, source: str = "snapshot"
) -> str:
    """One line per container device (or per container when it holds none)."""
    return _render_text(snapshot, filters=filters, age=_text_age(snapshot, now), source=source)


def _shown_containers(
    snapshot: Snapshot, filters: Filters
) -> Iterator[tuple[PodView, ContainerView]]:
    """The containers the filters keep, with their pods, in the snapshot's order."""
    for pod in snapshot.pods:
        if filters.keeps_pod(pod):
            for container in pod.containers:
                if filters.keeps_container(container, snapshot):
                    yield pod, container


def _render_text(snapshot: Snapshot, *, filters: Filters, age: str, source: str) -> str:
    # MATCH only where ?device= asks: what each device is of the one asked for.
    matching = filters.device is not None
    rows: list[tuple[str, ...]] = [
        (
            "NAMESPACE",
            "POD",
            "CONTAINER",
            "RESOURCE",
            "DEVICE",
            *(("MATCH",) if matching else ()),
            "NUMA",
            "CPUS",
            "ALIGNED",
            "HARDWARE",
        )
    ]
    for pod, container in _shown_containers(snapshot, filters):
        aligned = {None: "-", True: "yes", False: "NO"}[container.numa_aligned]
        cpus = cpulist(container.cpu_ids) or "-"
        devices = (*container.devices, *container.claim_devices) or (None,)
        for device in devices:
            found = filters.match(device, snapshot) if device else None
            rows.append(
                (
                    pod.namespace,
                    pod.name,
                    # A pod's shared pool under pod-level resources: no container's.
                    container.owner.container or POD_POOL,
                    device.resource if device else "-",
                    device.device_id if device else "-",
                    *((str(found or "-"),) if matching else ()),
                    (numa_label(device.numa_nodes) or "?") if device else "-",
                    cpus,
                    aligned,
                    _hardware_cell(device, snapshot),
                )
            )
    lines = _aligned(rows)
    kubelet = "up" if snapshot.kubelet.up else f"DOWN ({snapshot.kubelet.last_error})"
    node, kubelet = escape_line(snapshot.node), escape_line(kubelet)
    telemetry = _telemetry_time(snapshot, source).get("telemetry_older_by_seconds")
    if telemetry is not None:
        age = f"{age} (hardware figures {telemetry:.1f}s older: the last poll's)"
    text = f"# node {node}, data age {age}, kubelet {kubelet}\n" + "\n".join(lines) + "\n"
    text += _gpu_table(snapshot, filters)
    text += _nic_path_table(snapshot, filters)
    if snapshot.gpu_processes is not None:
        text += _process_table(snapshot.gpu_processes, filters, snapshot)
    return text


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows of cells (made safe, capped) as lines of left-aligned columns."""
    rows = [tuple(_cell(cell) for cell in row) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


# The GPU table's ratio columns: family, its own labels.
_GPU_RATIOS = (
    ("UTIL", GPU_UTILIZATION, ()),
    ("SM", GPU_SM_ACTIVE, ()),
    ("TENSOR", GPU_PIPE_ACTIVE, ("tensor",)),
    ("DRAM", GPU_DRAM_ACTIVE, ()),
)
_GIB = 1024**3


def _gpu_table(snapshot: Snapshot, filters: Filters) -> str:
    """One line per GPU (or MIG device) the shown containers hold and holder: how busy,
    how full, how hot; "-" where its telemetry has no such figure. A holder a line, not
    a list in one cell: a time-sliced GPU's many would be cut at the cell cap."""
    holders: dict[str, dict[str, None]] = {}  # device -> its holders, in order, once each
    readings: dict[str, DeviceReading] = {}
    for _, container in _shown_containers(snapshot, filters):
        for device in (*container.devices, *container.claim_devices):
            reading = snapshot.hardware_of(device).reading
            if reading is None or not any(
                s.spec.name.startswith("podresources_gpu_") for s in reading.samples
            ):
                continue
            readings[reading.name] = reading
            holder = _holder(container.owner)
            holders.setdefault(reading.name, {})[holder] = None
    if not readings:
        return ""
    header = ("DEVICE", *(name for name, _, _ in _GPU_RATIOS), "MEMORY_GIB", "TEMP_C", "POWER_W")
    rows: list[tuple[str, ...]] = [(*header, "HOLDER")]
    for name in sorted(readings):
        figures = {(s.spec, s.label_values): s.value for s in readings[name].samples}
        ratios = (figures.get((spec, labels)) for _, spec, labels in _GPU_RATIOS)
        used = figures.get((GPU_MEMORY_USED, ()))
        total = figures.get((GPU_MEMORY_TOTAL, ()))
        temperature = figures.get((GPU_TEMPERATURE, ()))
        power = figures.get((GPU_POWER, ()))
        cells = (
            name,
            *("-" if ratio is None else f"{ratio:.0%}" for ratio in ratios),
            "-" if used is None or total is None else f"{used / _GIB:.1f}/{total / _GIB:.1f}",
            "-" if temperature is None else f"{temperature:.0f}",
            "-" if power is None else f"{power:.0f}",
        )
        rows += [(*cells, holder) for holder in holders[name]]
    return "# GPUs held\n" + "\n".join(_aligned(rows)) + "\n"


def _holder(owner: Owner) -> str:
    """namespace/pod/container, a pod's shared pool named as the table names it."""
    return "/".join((owner.namespace, owner.pod, owner.container or POD_POOL))


def _shown_nic_paths(snapshot: Snapshot, filters: Filters) -> list[GpuNicPath]:
    shown = {container.owner for _, container in _shown_containers(snapshot, filters)}
    return [path for path in gpu_nic_paths(snapshot) if path.owner in shown]


def _nic_path(path: GpuNicPath) -> JSON:
    return {
        "namespace": path.owner.namespace,
        "pod": path.owner.pod,
        "container": path.owner.container,
        "resource": path.resource,
        "device_id": path.device_id,
        "nic_resource": path.nic_resource,
        "nic_device_id": path.nic_device_id,
        "level": path.level.name,
        "node_nearest_level": path.best_level.name if path.best_level else None,
    }


def _nic_path_table(snapshot: Snapshot, filters: Filters) -> str:
    """One line per GPU the shown containers hold and NIC resource they hold with it:
    the nearest of their NICs on the PCIe tree, and the node's nearest of that resource;
    "!" marks a GPU that lost GPUDirect RDMA to placement (PodresourcesGPUNICNotAligned)."""
    paths = _shown_nic_paths(snapshot, filters)
    if not paths:
        return ""
    rows: list[tuple[str, ...]] = [
        ("GPU", "NIC_RESOURCE", "NIC", "LEVEL", "NODE_NEAREST", "HOLDER")
    ]
    for path in paths:
        rows.append(
            (
                path.device_id,
                path.nic_resource,
                path.nic_device_id,
                path.level.name + (" !" if path.placement_cost_gpudirect else ""),
                path.best_level.name if path.best_level else "-",
                _holder(path.owner),
            )
        )
    return "# GPU to NIC PCIe paths\n" + "\n".join(_aligned(rows)) + "\n"


def _process_table(
    devices: tuple[GpuDeviceProcesses, ...], filters: Filters, snapshot: Snapshot
) -> str:
    """One line per GPU process: which device, whose, how much."""
    rows: list[tuple[str, ...]] = [("DEVICE", "PID", "OWNER", "KIND", "MEMORY_MIB", "SM")]
    for entry in _gpu_processes(devices, filters, snapshot):
        for p in entry["processes"]:
            memory = p["memory_used_bytes"]
            ratio = p["sm_utilization_ratio"]
            rows.append(
                (
                    entry["device_id"],
                    str(p["pid"]),
                    p["owner"],
                    p["kind"],
                    "-" if memory is None else str(memory // (1024 * 1024)),
                    "-" if ratio is None else f"{ratio:.2f}",
                )
            )
    return "# GPU processes\n" + "\n".join(_aligned(rows)) + "\n"


@dataclass(frozen=True, slots=True)
class EncodedView:
    """A view as UTF-8 bytes, cut where the age goes: ``head + age + tail``."""

    head: bytes
    tail: bytes
    text_age: bool  # the table's "3.6s", else JSON's 3.612

    def parts(self, age_s: float) -> tuple[bytes, bytes, bytes]:
        """The body with the kubelet data's age, ``age_s``, spliced in."""
        if not self.tail:
            return self.head, b"", b""
        text = f"{age_s:.1f}s" if self.text_age else repr(round(age_s, 3))
        return self.head, text.encode(), self.tail

    @property
    def size(self) -> int:
        """Bytes in the body, give or take the age's few digits."""
        return len(self.head) + len(self.tail)


def _split(text: str, mark: str, *, text_age: bool) -> EncodedView:
    head, found, tail = text.partition(mark)
    if not found:  # no age to splice in: the snapshot has no kubelet data yet
        return EncodedView(text.encode(), b"", text_age)
    return EncodedView(head.encode(), tail.encode(), text_age)


def encode_json(snapshot: Snapshot, *, filters: Filters, source: str = "snapshot") -> EncodedView:
    """render_json as indented JSON bytes, with the age left to splice in."""
    body = render_json(snapshot, filters=filters, now=0.0, source=source)
    if body["age_seconds"] is not None:
        body["age_seconds"] = _AGE_MARK
    mark = json.dumps(_AGE_MARK)
    text = json.dumps(body, indent=2) + "\n"
    return _split(text, mark, text_age=False)


def encode_text(snapshot: Snapshot, *, filters: Filters, source: str = "snapshot") -> EncodedView:
    """render_text as bytes, with the age left to splice in."""
    age = _AGE_MARK if snapshot.collected_at else _text_age(snapshot, 0.0)
    text = _render_text(snapshot, filters=filters, age=age, source=source)
    return _split(text, _AGE_MARK, text_age=True)
