"""Which NVML reading a kubelet device ID or DRA device gets, through the resolver and
the real join."""

from __future__ import annotations

from exporter.join import join_snapshot
from exporter.model import (
    AllocatableResources,
    ClaimDevice,
    CollectorRun,
    ContainerResources,
    DeviceGroup,
    DeviceReading,
    DynamicResource,
    KubeletStatus,
    PodResources,
    Readings,
)

__all__ = ["attributed", "attributed_names", "claimed_names"]

KUBELET = KubeletStatus(up=True, socket="/var/lib/kubelet/pod-resources/kubelet.sock", api=())


def attributed(readings: Readings, *device_ids: str) -> dict[str, DeviceReading | None]:
    """The reading the join attaches to each device ID one container holds.

    Goes through ``join_snapshot``, so ``exporter.resolver`` turns each ID into hardware
    keys and the join looks them up among the collector's keys: the two must agree.
    """
    container = ContainerResources("main", devices=(DeviceGroup("nvidia.com/gpu", device_ids),))
    return _joined(readings, container)


def claimed_names(readings: Readings, *device_names: str) -> dict[str, str | None]:
    """Like ``attributed_names`` for the devices of one ``gpu.nvidia.com`` DRA claim, with
    no driver file (checkpoint, CDI spec) to say which hardware: names alone."""
    claim = DynamicResource(
        "gpus",
        "default",
        tuple(ClaimDevice("gpu.nvidia.com", "node-a", name) for name in device_names),
    )
    found = _joined(readings, ContainerResources("main", dynamic_resources=(claim,)))
    return {name: None if reading is None else reading.name for name, reading in found.items()}


def _joined(readings: Readings, container: ContainerResources) -> dict[str, DeviceReading | None]:
    pod = PodResources("default", "trainer", (container,))
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
    (view,) = pod_view.containers
    return {
        device.device_id: snapshot.hardware_of(device).reading
        for device in (*view.devices, *view.claim_devices)
    }


def attributed_names(readings: Readings, *device_ids: str) -> dict[str, str | None]:
    """Like ``attributed``, by the reading's name (a GPU or MIG UUID); None: no telemetry."""
    return {
        device_id: None if reading is None else reading.name
        for device_id, reading in attributed(readings, *device_ids).items()
    }
