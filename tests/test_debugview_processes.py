"""/debug/allocations shows each device's processes while gpu_processes runs."""

from __future__ import annotations

from exporter.debugview import Filters, render_json
from exporter.join import join_fresh_pod, join_snapshot
from exporter.model import (
    AllocatableResources,
    ClaimDevice,
    CollectorRun,
    ContainerResources,
    DeviceGroup,
    DeviceProcesses,
    DraDevice,
    DraState,
    DynamicResource,
    GpuProcess,
    HardwareKey,
    KeyKind,
    KubeletStatus,
    PodResources,
    ProcessKind,
    ProcessOrigin,
    Readings,
    Snapshot,
)

HELD = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
FREE = "GPU-bbbbbbbb-1111-2222-3333-444444444444"
TRAINER = ProcessOrigin("u1", "c" * 64, "team-a", "trainer-0", "trainer")


NO_INVENTORY = AllocatableResources()
NO_DRA = DraState()


def _joined(
    *pods: PodResources,
    allocatable: AllocatableResources = NO_INVENTORY,
    readings: Readings | None = None,
    dra: DraState = NO_DRA,
) -> Snapshot:
    """Node "n" at t=100 with ``pods``, and the gpu_processes collector's ``readings``."""
    runs = () if readings is None else (CollectorRun("gpu_processes", True, 0.0, readings),)
    return join_snapshot(
        node="n",
        collected_at=100.0,
        kubelet=KubeletStatus(up=True, socket="s", api=()),
        pods=pods,
        allocatable=allocatable,
        cpu_numa={},
        collector_runs=runs,
        dra=dra,
    )


def snapshot(readings: Readings, *, holder: str = "trainer") -> Snapshot:
    """team-a/trainer-0's container ``holder`` ("": its shared pool) holds HELD."""
    gpus = DeviceGroup("nvidia.com/gpu", (HELD, FREE))
    pod = PodResources(
        "team-a",
        "trainer-0",
        (ContainerResources(holder, devices=(DeviceGroup("nvidia.com/gpu", (HELD,)),)),),
    )
    return _joined(pod, allocatable=AllocatableResources(devices=(gpus,)), readings=readings)


READINGS = Readings(
    gpu_processes=(
        DeviceProcesses(
            HardwareKey(KeyKind.GPU_UUID, HELD), (GpuProcess(100, TRAINER, 1024, 0.5),), True
        ),
        DeviceProcesses(
            HardwareKey(KeyKind.GPU_UUID, FREE), (GpuProcess(7001, ProcessOrigin(), None, None),)
        ),
    )
)


class TestProcesses:
    def test_per_device_and_unallocated(self) -> None:
        """The holder's device lists its process with owner; the free GPU's host process
        shows in gpu_processes, which no pod row would show."""
        found = render_json(snapshot(READINGS), filters=Filters(), now=101.0)
        device = found["pods"][0]["containers"][0]["devices"][0]
        assert [
            {
                "pid": 100,
                "owner": "team-a/trainer-0/trainer",
                "kind": "holder",
                "memory_used_bytes": 1024,
                "sm_utilization_ratio": 0.5,
            }
        ] == device["processes"]
        assert {
            "resource": "nvidia.com/gpu",
            "device_id": FREE,
            "holders": [],
            "foreign": {"unallocated_device": 1},
            "processes": [
                {
                    "pid": 7001,
                    "owner": "host",
                    "kind": "host",
                    "memory_used_bytes": None,
                    "sm_utilization_ratio": None,
                }
            ],
        } == found["gpu_processes"][1]

    def test_a_process_of_a_pod_not_known_is_named_by_its_uid(self) -> None:
        """A process in a pod's cgroup whose pod the snapshot lacks (started since the
        last List) is "unknown pod <uid>", not "host"."""
        stranger = ProcessOrigin("u9", "e" * 64)
        readings = Readings(
            gpu_processes=(
                DeviceProcesses(
                    HardwareKey(KeyKind.GPU_UUID, FREE), (GpuProcess(300, stranger, None, None),)
                ),
            )
        )
        found = render_json(snapshot(readings), filters=Filters(), now=101.0)
        assert ["unknown pod u9"] == [
            p["owner"] for d in found["gpu_processes"] for p in d["processes"]
        ]

    def test_each_kind_of_process_is_named_as_documented(self) -> None:
        """The kind of each process on the held GPU is the label /debug/allocations
        readers filter on: other_pod, unknown_pod and mps_server, word for word."""
        other = ProcessOrigin("u2", "d" * 64, "team-b", "web-0", "web")
        stranger = ProcessOrigin("u9", "e" * 64)
        mps = ProcessOrigin("u3", "f" * 64, "kube-system", "mps-0", "mps")
        held = HardwareKey(KeyKind.GPU_UUID, HELD)
        processes = (
            GpuProcess(200, other, 1, None),
            GpuProcess(300, stranger, 1, None),
            GpuProcess(400, mps, 1, None, command="nvidia-cuda-mps"),
        )
        found = render_json(
            snapshot(Readings(gpu_processes=(DeviceProcesses(held, processes),))),
            filters=Filters(),
            now=101.0,
        )
        assert [(200, "other_pod"), (300, "unknown_pod"), (400, "mps_server")] == [
            (p["pid"], p["kind"]) for d in found["gpu_processes"] for p in d["processes"]
        ]

    def test_a_device_without_processes_is_left_out(self) -> None:
        """gpu_processes lists the devices that run something: an idle GPU is not one."""
        readings = Readings(
            gpu_processes=(
                DeviceProcesses(
                    HardwareKey(KeyKind.GPU_UUID, HELD), (GpuProcess(100, TRAINER, 1024, 0.5),)
                ),
                DeviceProcesses(HardwareKey(KeyKind.GPU_UUID, FREE), ()),
            )
        )
        found = render_json(snapshot(readings), filters=Filters(), now=101.0)
        assert [HELD] == [d["device_id"] for d in found["gpu_processes"]]

    def test_device_filters_keep_only_the_devices_asked_for(self) -> None:
        """?resource= and ?device= select gpu_processes' devices too; ?pod= keeps only
        the devices that pod holds or runs on."""
        views = {
            str(filters): [
                d["device_id"]
                for d in render_json(snapshot(READINGS), filters=filters, now=101.0)[
                    "gpu_processes"
                ]
            ]
            for filters in (
                Filters(resource="example.com/other"),
                Filters(device=FREE),
                Filters(pod="nobody"),
            )
        }
        assert list(views.values()) == [[], [FREE], []]

    def test_absent_while_the_collector_is_off(self) -> None:
        """Without the collector, no process keys: nothing claims 'no processes'."""
        found = render_json(snapshot(Readings()), filters=Filters(), now=101.0)
        device = found["pods"][0]["containers"][0]["devices"][0]
        assert ("processes" in device, "gpu_processes" in found) == (False, False)

    def test_owner_filters_keep_the_pods_devices(self) -> None:
        """?pod= keeps the devices the pod holds or runs on, not the host's free GPU."""
        found = render_json(snapshot(READINGS), filters=Filters(pod="trainer-0"), now=101.0)
        assert [HELD] == [d["device_id"] for d in found["gpu_processes"]]

    def test_the_pool_filter_keeps_no_host_process(self) -> None:
        """?container= (a pod's shared pool, container "") does not match a host
        process, whose owner is empty too."""
        found = render_json(snapshot(READINGS), filters=Filters(container=""), now=101.0)
        assert ([], []) == (found["pods"], found["gpu_processes"])

    def test_the_pool_filter_keeps_no_process_of_an_unnamed_container(self) -> None:
        """A process of another pod whose container the pod-log tree could not name has
        container "" as well: not a shared pool, which only a holder can be."""
        unnamed = ProcessOrigin("u2", "d" * 64, "team-b", "etl-0", "")
        readings = Readings(
            gpu_processes=(
                DeviceProcesses(
                    HardwareKey(KeyKind.GPU_UUID, HELD),
                    (GpuProcess(100, TRAINER, 1024, None), GpuProcess(200, unnamed, 512, None)),
                ),
            )
        )
        found = render_json(snapshot(readings), filters=Filters(container=""), now=101.0)
        assert ([], []) == (found["pods"], found["gpu_processes"])

    def test_the_pool_filter_keeps_the_pools_gpu(self) -> None:
        """?container= asks for the pods' shared pools: a GPU the pool holds is kept
        with its processes, whose owner need not be the pool (its holder is)."""
        found = render_json(snapshot(READINGS, holder=""), filters=Filters(container=""), now=101.0)
        assert [(HELD, ["team-a/trainer-0/"], [100])] == [
            (d["device_id"], d["holders"], [p["pid"] for p in d["processes"]])
            for d in found["gpu_processes"]
        ]


# HELD time-sliced in two replicas, and bob's process on it.
SHARED = AllocatableResources(
    devices=(DeviceGroup("nvidia.com/gpu.shared", (f"{HELD}::0", f"{HELD}::1")),)
)
BOBS_PROCESS = Readings(
    gpu_processes=(
        DeviceProcesses(
            HardwareKey(KeyKind.GPU_UUID, HELD),
            (GpuProcess(200, ProcessOrigin("u2", "d" * 64, "nb", "bob", "c")),),
        ),
    )
)


def _replica_holder(pod: str, replica: int) -> PodResources:
    group = DeviceGroup("nvidia.com/gpu.shared", (f"{HELD}::{replica}",))
    return PodResources("nb", pod, (ContainerResources("c", devices=(group,)),))


def test_fresh_pod_keeps_the_nodewide_attribution() -> None:
    """A fresh look-up of one pod does not turn the other holder of a shared GPU foreign."""
    alice = _replica_holder("alice", 0)
    full = _joined(alice, _replica_holder("bob", 1), allocatable=SHARED, readings=BOBS_PROCESS)
    fresh = join_fresh_pod(full, alice, collected_at=101.0)
    assert fresh.gpu_processes is not None
    assert [ProcessKind.HOLDER] == [p.kind for p in fresh.gpu_processes[0].processes]


def test_a_shared_gpu_is_found_by_a_replicas_id() -> None:
    """?device= with a holder's replica ID ("GPU-x::1") keeps the physical GPU's
    processes, as it keeps the holder's row."""
    view = _joined(_replica_holder("bob", 1), allocatable=SHARED, readings=BOBS_PROCESS)
    found = render_json(view, filters=Filters(device=f"{HELD}::1"), now=101.0)
    assert [[200]] == [[p["pid"] for p in d["processes"]] for d in found["gpu_processes"]]


def test_a_claims_device_shows_its_hardware() -> None:
    """A DRA claim's device in JSON carries how it resolved and its telemetry."""
    claim = DynamicResource("gpus", "ml", (ClaimDevice("gpu.example.com", "node-1", "gpu-0"),))
    pod = PodResources("ml", "p", (ContainerResources("main", dynamic_resources=(claim,)),))
    dra = DraState(
        devices=(
            DraDevice(
                "gpu.example.com",
                "node-1",
                "gpu-0",
                keys=(HardwareKey(KeyKind.PCI, "0000:3b:00.0"),),
                source="checkpoint",
            ),
        )
    )
    view = _joined(pod, dra=dra)
    (device,) = render_json(view, filters=Filters(), now=101.0)["pods"][0]["containers"][0][
        "dynamic_resources"
    ][0]["devices"]
    assert (device["hardware"]["keys"], device["hardware"]["source"], device["telemetry"]) == (
        ["pci:0000:3b:00.0"],
        "checkpoint",
        None,
    )
