"""Attribute GPU processes to the containers that hold each device. Pure, no I/O.

The ``gpu_processes`` collector lists processes per device under the device's
``gpu_uuid``/``mig_uuid`` key, each with its pod and container where /proc and the
pod-log tree said. Here every device the join knows (kubelet IDs, DRA devices, GPUs
only hardware reports) finds its processes through the same keys its telemetry came
by, and each process is one of:

- ``holder``: its container holds the device (any replica of a shared GPU);
- ``other_pod``: a container that does not hold it;
- ``host``: no pod at all;
- ``unknown_pod``: a pod's cgroup we could not name, or a pod with several holders of
  the device whose container we could not tell: shown, never counted as foreign, since
  it may well be a holder (a named pod that holds nothing here is ``other_pod``);
- ``mps_server``: the MPS server (``nvidia-cuda-mps-server``) whose clients -- listed
  too, under their own pods -- are the holders: sharing machinery, never foreign.

Per container the processes' memory and SM utilization are summed -- on a shared GPU
each holder finally gets its own share. ``foreign`` counts ``other_pod`` and ``host``
processes on a held device, and every process on a device no container holds as
``unallocated_device``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from exporter.model import (
    UNALLOCATED,
    DeviceHardware,
    DeviceProcesses,
    DeviceView,
    GpuDeviceProcesses,
    GpuProcessUse,
    HardwareKey,
    Owner,
    ProcessKind,
    Resolution,
    ViewedProcess,
)

__all__ = ["MPS_SERVER_COMM", "attribute_processes"]

# What /proc/<pid>/comm, which the collector reads, holds for nvidia-cuda-mps-server:
# the kernel keeps 15 bytes (TASK_COMM_LEN 16). nvidia-cuda-mps-control shares the
# prefix but makes no CUDA context, so NVML never lists it.
MPS_SERVER_COMM = "nvidia-cuda-mps-server"[:15]

OTHER_POD = "other_pod"
HOST = "host"
UNALLOCATED_DEVICE = "unallocated_device"


def _keys(view: DeviceView, hardware: Mapping[Resolution, DeviceHardware]) -> Iterator[HardwareKey]:
    # The reading carries every key of the device (a GKE "nvidia0" resolves to a minor
    # number; its reading also has the GPU UUID the processes are listed under).
    yield from view.resolution.keys
    found = hardware.get(view.resolution)
    if found is not None and found.reading is not None:
        yield from found.reading.keys


def _classify(listed: DeviceProcesses, holders: tuple[Owner, ...]) -> tuple[ViewedProcess, ...]:
    viewed = []
    for process in listed.processes:
        origin = process.origin
        if process.command == MPS_SERVER_COMM:
            named = Owner(origin.namespace, origin.pod, origin.container)
            owner = named if origin.namespace else UNALLOCATED
            viewed.append(ViewedProcess(process, ProcessKind.MPS_SERVER, owner))
            continue
        if origin.pod_uid is None:
            viewed.append(ViewedProcess(process, ProcessKind.HOST, UNALLOCATED))
            continue
        if not origin.namespace:
            viewed.append(ViewedProcess(process, ProcessKind.UNKNOWN_POD, UNALLOCATED))
            continue
        owner = Owner(origin.namespace, origin.pod, origin.container)
        if not origin.container:
            # The pod-log tree named the pod, not the container: the pod's one holder;
            # of a pod holding nothing here, another pod's (under its pod, no container).
            same_pod = [h for h in holders if (h.namespace, h.pod) == (owner.namespace, owner.pod)]
            if len(same_pod) == 1:
                owner = same_pod[0]
            elif same_pod:  # which of its holders, nobody can tell
                viewed.append(ViewedProcess(process, ProcessKind.UNKNOWN_POD, UNALLOCATED))
                continue
        kind = ProcessKind.HOLDER if owner in holders else ProcessKind.OTHER_POD
        viewed.append(ViewedProcess(process, kind, owner))
    return tuple(viewed)


def _sum_ratio(values: Iterable[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    # Rounded: a sum of percentages must not print as 0.35000000000000003.
    return round(sum(found), 6) if found else None


def _uses(
    viewed: tuple[ViewedProcess, ...],
    *,
    views: list[DeviceView],
    resource: str,
    device_id: str,
) -> tuple[GpuProcessUse, ...]:
    """Sums per container: a holder under its own view, anyone else under the device."""
    holder_view: dict[Owner, DeviceView] = {}
    for view in views:
        if view.owner.pod:
            holder_view.setdefault(view.owner, view)
    grouped: dict[tuple[Owner, str, str], list[ViewedProcess]] = {}
    for process in viewed:
        if process.kind in (ProcessKind.UNKNOWN_POD, ProcessKind.MPS_SERVER):
            continue
        own = holder_view.get(process.owner) if process.kind is ProcessKind.HOLDER else None
        where = (own.resource, own.device_id) if own else (resource, device_id)
        grouped.setdefault((process.owner, *where), []).append(process)
    uses = []
    for (owner, use_resource, use_device), processes in grouped.items():
        memory = [p.process.memory_used_bytes for p in processes]
        known_memory = [m for m in memory if m is not None]
        uses.append(
            GpuProcessUse(
                owner=owner,
                resource=use_resource,
                device_id=use_device,
                memory_used_bytes=sum(known_memory) if known_memory else None,
                sm_utilization_ratio=_sum_ratio(p.process.sm_utilization_ratio for p in processes),
            )
        )
    return tuple(uses)


def _device(listed: DeviceProcesses, views: list[DeviceView]) -> GpuDeviceProcesses:
    holders = tuple(dict.fromkeys(v.owner for v in views if v.owner.pod))
    primary = next((v for v in views if v.owner.pod), views[0] if views else None)
    if primary is None:  # a device neither the kubelet nor another collector names
        resource, device_id = "", listed.key.value
    else:
        resource, device_id = primary.resource, primary.resolution.physical_id
    viewed = _classify(listed, holders)
    foreign: tuple[tuple[str, int], ...]
    if holders:
        foreign = (
            (OTHER_POD, sum(1 for p in viewed if p.kind is ProcessKind.OTHER_POD)),
            (HOST, sum(1 for p in viewed if p.kind is ProcessKind.HOST)),
        )
    else:
        users = [p for p in viewed if p.kind is not ProcessKind.MPS_SERVER]
        foreign = ((UNALLOCATED_DEVICE, len(users)),)
    return GpuDeviceProcesses(
        resource=resource,
        device_id=device_id,
        views=tuple(dict.fromkeys((v.resource, v.device_id) for v in views)),
        holders=holders,
        processes=viewed,
        uses=_uses(viewed, views=views, resource=resource, device_id=device_id),
        foreign=foreign,
        utilization_supported=listed.utilization_supported,
    )


def attribute_processes(
    devices: Iterable[DeviceView],
    listed: Mapping[HardwareKey, DeviceProcesses],
    hardware: Mapping[Resolution, DeviceHardware],
) -> tuple[GpuDeviceProcesses, ...]:
    """Every listed device's processes, attributed to the views that name the device
    (by its resolution's keys, then its reading's, from ``hardware``: a snapshot's)."""
    views_by_key: dict[HardwareKey, list[DeviceView]] = {key: [] for key in listed}
    for view in devices:
        key = next((k for k in _keys(view, hardware) if k in listed), None)
        if key is not None:
            views_by_key[key].append(view)
    return tuple(_device(listed[key], views) for key, views in views_by_key.items())
