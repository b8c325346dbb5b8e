"""Snapshot -> the per-process GPU families (``gpu_processes`` collector). Pure.

Kept apart from ``exporter.exposition`` so that its writer can change without this:
``process_families`` yields ``Rows`` families as the other generators do.
Nothing is yielded while the collector is off, so a node without it shows no empty
families; with it on, each figure is a sum over the processes alive at this poll, so
a process that ended takes its series with it.
"""

from __future__ import annotations

from collections.abc import Iterator

from exporter.metricwriter import Rows, gauge
from exporter.model import DEVICE_LABELS, Snapshot

__all__ = ["process_families"]


def process_families(snapshot: Snapshot) -> Iterator[Rows]:
    """GPU memory and SM utilization of each container's processes, and foreign counts."""
    if snapshot.gpu_processes is None:
        return
    memory = gauge(
        "podresources_gpu_process_memory_used_bytes",
        "GPU memory used by the container's processes on the device, in bytes. A holder's "
        "use is under its own device ID; another pod's, with that pod's owner labels, and "
        "the host's, with empty owner labels, under the physical device.",
        DEVICE_LABELS,
    )
    utilization = gauge(
        "podresources_gpu_process_sm_utilization_ratio",
        "SM utilization of the container's processes on the device since the previous poll "
        "(0-1), summed; absent where the device gives no per-process samples (MIG).",
        DEVICE_LABELS,
    )
    foreign = gauge(
        "podresources_gpu_foreign_processes",
        "Processes on a device that its holders do not own: of another pod (other_pod), of "
        "no pod (host), or any process on a device no container holds (unallocated_device).",
        ("resource", "device_id", "kind"),
    )
    for device in snapshot.gpu_processes:
        for use in device.uses:
            values = (
                use.owner.namespace,
                use.owner.pod,
                use.owner.container,
                use.resource,
                use.device_id,
            )
            if use.memory_used_bytes is not None:
                memory.add(values, use.memory_used_bytes)
            if use.sm_utilization_ratio is not None:
                utilization.add(values, use.sm_utilization_ratio)
        for kind, count in device.foreign:
            foreign.add((device.resource, device.device_id, kind), count)
    yield from (memory, utilization, foreign)
