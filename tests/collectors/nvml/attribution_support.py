"""Which NVML reading a kubelet device ID gets, through the resolver and the real join."""

from __future__ import annotations

from exporter.join import join_snapshot
from exporter.model import (
    AllocatableResources,
    CollectorRun,
    ContainerResources,
    DeviceGroup,
    DeviceReading,
    KubeletStatus,
    PodResources,
    Readings,
)

__all__ = ["attributed", "attributed_names"]

KUBELET = KubeletStatus(up=True, socket="/var/lib/kubelet/pod-resources/kubelet.sock", api=())


def attributed(readings: Readings, *device_ids: str) -> dict[str, DeviceReading | None]:
    """The reading the join attaches to each device ID one container holds.

    Goes through ``join_snapshot``, so ``exporter.resolver`` turns each ID into hardware
    keys and the join looks them up among the collector's keys: the two must agree.
    """
    pod = PodResources(
        "default",
        "trainer",
        (ContainerResources("main", devices=(DeviceGroup("nvidia.com/gpu", device_ids),)),),
    )
    snapshot = join_snapshot(
        node="node-a",
        collected_at=0.0,
        kubelet=KUBELET,
        pods=(pod,),
        allocatable=AllocatableResources(),
        cpu_numa={},
        collector_runs=(CollectorRun("nvml", True, 0.0, readings),),
    )
    (pod_view,) = snapshot.pods
    (container,) = pod_view.containers
    return {device.device_id: snapshot.hardware_of(device).reading for device in container.devices}


def attributed_names(readings: Readings, *device_ids: str) -> dict[str, str | None]:
    """Like ``attributed``, by the reading's name (a GPU or MIG UUID); None: no telemetry."""
    return {
        device_id: None if reading is None else reading.name
        for device_id, reading in attributed(readings, *device_ids).items()
    }
