"""exporter.processes: GPU processes attributed to the containers holding each device."""

from __future__ import annotations

from collections.abc import Mapping

from exporter.model import (
    UNALLOCATED,
    DeviceHardware,
    DeviceProcesses,
    DeviceReading,
    DeviceView,
    GpuDeviceProcesses,
    GpuProcess,
    GpuProcessUse,
    HardwareKey,
    KeyKind,
    Owner,
    ProcessKind,
    ProcessOrigin,
    Resolution,
    ViewedProcess,
)
from exporter.processes import attribute_processes
from exporter.resolver import resolve_device_id

GPU = "GPU-8f3c0000-1111-2222-3333-444444444444"
KEY = HardwareKey(KeyKind.GPU_UUID, GPU)
GIB = 1024**3
ALICE = Owner("notebooks", "jupyter-alice", "notebook")
BOB = Owner("notebooks", "jupyter-bob", "notebook")
EVE = Owner("batch", "etl-0", "etl")


# The GPU's reading, with all its keys, as the join finds it for a view of the GPU.
READ = DeviceHardware(
    DeviceReading(GPU, (KEY, HardwareKey(KeyKind.NVIDIA_MINOR, "0")), standalone=True)
)


def view(resource: str, device_id: str, owner: Owner) -> DeviceView:
    """A device view resolved as the join resolves it."""
    return DeviceView(
        resource=resource,
        device_id=device_id,
        numa_nodes=(),
        owner=owner,
        allocatable=True,
        resolution=resolve_device_id(device_id),
    )


def attribute(
    views: tuple[DeviceView, ...], listed: Mapping[HardwareKey, DeviceProcesses]
) -> tuple[GpuDeviceProcesses, ...]:
    """``attribute_processes`` where every view whose resolution has keys found the GPU's
    reading."""
    hardware = {v.resolution: READ for v in views if v.resolution.keys}
    return attribute_processes(views, listed, hardware)


def origin(owner: Owner | None, *, uid: str = "u") -> ProcessOrigin:
    if owner is None:
        return ProcessOrigin()
    return ProcessOrigin(uid, "c" * 64, owner.namespace, owner.pod, owner.container)


def process(pid: int, owner: Owner | None, memory: int | None, ratio: float | None) -> GpuProcess:
    return GpuProcess(pid, origin(owner), memory, ratio)


SHARED = (
    view("nvidia.com/gpu.shared", f"{GPU}::0", ALICE),
    view("nvidia.com/gpu.shared", f"{GPU}::1", BOB),
    view("nvidia.com/gpu.shared", f"{GPU}::2", UNALLOCATED),
)
SHARED_VIEWS = tuple((v.resource, v.device_id) for v in SHARED)


class TestSharedGpu:
    def test_each_holder_gets_its_own_share(self) -> None:
        """Two replica holders: each container's processes summed under its own replica ID."""
        listed = DeviceProcesses(
            KEY,
            (
                process(10, ALICE, 8 * GIB, 0.25),
                process(11, ALICE, 4 * GIB, 0.1),
                process(20, BOB, 6 * GIB, 0.15),
            ),
            utilization_supported=True,
        )
        expected = GpuDeviceProcesses(
            resource="nvidia.com/gpu.shared",
            device_id=GPU,
            views=SHARED_VIEWS,
            holders=(ALICE, BOB),
            processes=(
                ViewedProcess(listed.processes[0], ProcessKind.HOLDER, ALICE),
                ViewedProcess(listed.processes[1], ProcessKind.HOLDER, ALICE),
                ViewedProcess(listed.processes[2], ProcessKind.HOLDER, BOB),
            ),
            uses=(
                GpuProcessUse(ALICE, "nvidia.com/gpu.shared", f"{GPU}::0", 12 * GIB, 0.35),
                GpuProcessUse(BOB, "nvidia.com/gpu.shared", f"{GPU}::1", 6 * GIB, 0.15),
            ),
            foreign=(("other_pod", 0), ("host", 0)),
            utilization_supported=True,
        )
        assert (expected,) == attribute(SHARED, {KEY: listed})

    def test_other_pod_and_host_are_foreign(self) -> None:
        """A container not holding the device and a host process count as foreign, and
        their use shows under the physical device with their own (or empty) owner."""
        listed = DeviceProcesses(
            KEY, (process(30, EVE, GIB, None), process(40, None, 2 * GIB, None)), False
        )
        (found,) = attribute(SHARED, {KEY: listed})
        assert (
            (("other_pod", 1), ("host", 1)),
            (
                GpuProcessUse(EVE, "nvidia.com/gpu.shared", GPU, GIB, None),
                GpuProcessUse(UNALLOCATED, "nvidia.com/gpu.shared", GPU, 2 * GIB, None),
            ),
        ) == (found.foreign, found.uses)

    def test_unnamed_container_goes_to_the_pods_holder(self) -> None:
        """The pod-log tree named the pod only: its one holding container gets the process."""
        unnamed = GpuProcess(10, ProcessOrigin("u", "c" * 64, ALICE.namespace, ALICE.pod, ""))
        listed = DeviceProcesses(KEY, (unnamed,), False)
        (found,) = attribute(SHARED, {KEY: listed})
        assert (ViewedProcess(unnamed, ProcessKind.HOLDER, ALICE),) == found.processes

    def test_unnamed_container_of_a_pod_holding_nothing_here_is_foreign(self) -> None:
        """The pod-log tree named the pod only, and that pod holds nothing on the device:
        another pod's process, counted foreign under the pod (no container name)."""
        etl = Owner("batch", "etl-0", "")
        unnamed = GpuProcess(30, ProcessOrigin("u2", "d" * 64, etl.namespace, etl.pod, ""), GIB)
        (found,) = attribute(SHARED, {KEY: DeviceProcesses(KEY, (unnamed,), False)})
        assert (
            (("other_pod", 1), ("host", 0)),
            (ViewedProcess(unnamed, ProcessKind.OTHER_POD, etl),),
        ) == (found.foreign, found.processes)

    def test_unnamed_container_of_a_pod_with_two_holders_is_unknown(self) -> None:
        """The pod holds the device in two containers: which one ran it, nobody can tell."""
        second = Owner(ALICE.namespace, ALICE.pod, "sidecar")
        views = (*SHARED, view("nvidia.com/gpu.shared", f"{GPU}::3", second))
        unnamed = GpuProcess(10, ProcessOrigin("u", "c" * 64, ALICE.namespace, ALICE.pod, ""))
        (found,) = attribute(views, {KEY: DeviceProcesses(KEY, (unnamed,), False)})
        assert ((("other_pod", 0), ("host", 0)), ProcessKind.UNKNOWN_POD) == (
            found.foreign,
            found.processes[0].kind,
        )

    def test_mps_server_is_machinery_not_foreign(self) -> None:
        """The MPS server (in the device plugin's pod) runs the holders' clients: known by
        the 15 bytes of its name the kernel keeps in comm, "nvidia-cuda-mps", it is shown
        as mps_server, neither foreign nor summed into anyone's use."""
        daemon = Owner("kube-system", "nvidia-device-plugin-mps-control-daemon", "mps")
        server = GpuProcess(9, origin(daemon), GIB, None, "nvidia-cuda-mps")
        client = process(10, ALICE, 2 * GIB, None)
        listed = DeviceProcesses(KEY, (server, client), False)
        (found,) = attribute(SHARED, {KEY: listed})
        assert (
            (("other_pod", 0), ("host", 0)),
            (GpuProcessUse(ALICE, "nvidia.com/gpu.shared", f"{GPU}::0", 2 * GIB, None),),
            ViewedProcess(server, ProcessKind.MPS_SERVER, daemon),
        ) == (found.foreign, found.uses, found.processes[0])

    def test_unknown_pod_is_never_foreign(self) -> None:
        """A pod's process we could not name may be the holder's: shown, not counted."""
        unknown = GpuProcess(50, ProcessOrigin(pod_uid=""), GIB, None)
        (found,) = attribute(SHARED, {KEY: DeviceProcesses(KEY, (unknown,), False)})
        assert ((("other_pod", 0), ("host", 0)), (), ProcessKind.UNKNOWN_POD) == (
            found.foreign,
            found.uses,
            found.processes[0].kind,
        )


class TestGkeMigTimeSharing:
    def test_holders_of_one_partition_share_it(self) -> None:
        """GKE time-sharing on MIG: two pods holding shares of GPU instance 1 are both
        holders of its processes, each summed under its own share; nobody is foreign."""
        mig = "MIG-11111111-aaaa-bbbb-cccc-dddddddddddd"
        mig_key = HardwareKey(KeyKind.MIG_UUID, mig)
        reading = DeviceReading(
            mig, (mig_key, HardwareKey(KeyKind.NVIDIA_MINOR_GI, "0/1")), standalone=True
        )
        views = (
            view("nvidia.com/gpu", "nvidia0/gi1/vgpu0", ALICE),
            view("nvidia.com/gpu", "nvidia0/gi1/vgpu1", BOB),
        )
        hardware = {v.resolution: DeviceHardware(reading) for v in views}
        listed = DeviceProcesses(
            mig_key, (process(10, ALICE, GIB, None), process(20, BOB, 2 * GIB, None)), False
        )
        (found,) = attribute_processes(views, {mig_key: listed}, hardware)
        assert (
            "nvidia0/gi1",
            (("other_pod", 0), ("host", 0)),
            (
                GpuProcessUse(ALICE, "nvidia.com/gpu", "nvidia0/gi1/vgpu0", GIB, None),
                GpuProcessUse(BOB, "nvidia.com/gpu", "nvidia0/gi1/vgpu1", 2 * GIB, None),
            ),
        ) == (found.device_id, found.foreign, found.uses)


class TestUnallocatedDevice:
    def test_every_process_counts(self) -> None:
        """No container holds the GPU: each process, host or pod, is unallocated_device."""
        free = (view("nvidia.com/gpu", GPU, UNALLOCATED),)
        listed = DeviceProcesses(
            KEY,
            (
                process(7001, None, 8 * GIB, 0.3),
                GpuProcess(7002, ProcessOrigin(pod_uid=""), GIB, 0.0),
            ),
            True,
        )
        (found,) = attribute(free, {KEY: listed})
        assert (
            (("unallocated_device", 2),),
            (GpuProcessUse(UNALLOCATED, "nvidia.com/gpu", GPU, 8 * GIB, 0.3),),
        ) == (found.foreign, found.uses)

    def test_device_nothing_else_names(self) -> None:
        """Processes of a device no view names are still reported, under its key."""
        listed = DeviceProcesses(KEY, (process(1, None, None, None),), False)
        (found,) = attribute((), {KEY: listed})
        assert ("", GPU, (("unallocated_device", 1),)) == (
            found.resource,
            found.device_id,
            found.foreign,
        )


class TestKeys:
    def test_gke_minor_id_finds_processes_through_its_reading(self) -> None:
        """``nvidia0`` resolves to a minor number; its reading carries the GPU UUID."""
        gke = (view("nvidia.com/gpu", "nvidia0", ALICE),)
        listed = DeviceProcesses(KEY, (process(10, ALICE, GIB, None),), False)
        (found,) = attribute(gke, {KEY: listed})
        assert (GpuProcessUse(ALICE, "nvidia.com/gpu", "nvidia0", GIB, None),) == found.uses

    def test_no_keys_no_processes(self) -> None:
        """An opaque device ID without telemetry is not matched to any process list."""
        opaque = DeviceView("example.com/thing", "x", (), ALICE, True, Resolution("x"))
        listed = DeviceProcesses(KEY, (process(10, ALICE, GIB, None),), False)
        (found,) = attribute((opaque,), {KEY: listed})
        assert ((), "") == (found.holders, found.resource)


class TestSums:
    def test_ratios_sum_without_float_noise(self) -> None:
        """0.1 + 0.2 of one holder is 0.3 on the page, not 0.30000000000000004."""
        listed = DeviceProcesses(
            KEY, (process(10, ALICE, GIB, 0.1), process(11, ALICE, GIB, 0.2)), True
        )
        (found,) = attribute(SHARED, {KEY: listed})
        assert (GpuProcessUse(ALICE, "nvidia.com/gpu.shared", f"{GPU}::0", 2 * GIB, 0.3),) == (
            found.uses
        )

    def test_unknown_memory_stays_unknown(self) -> None:
        """NVML gave no memory figure for any of the container's processes: the use says
        none, not 0 bytes; and a device without utilization samples says so."""
        listed = DeviceProcesses(
            KEY, (process(10, ALICE, None, None), process(11, ALICE, None, None)), False
        )
        (found,) = attribute(SHARED, {KEY: listed})
        assert (
            (GpuProcessUse(ALICE, "nvidia.com/gpu.shared", f"{GPU}::0", None, None),),
            False,
        ) == (found.uses, found.utilization_supported)

    def test_a_container_holding_two_replicas_is_one_holder_summed_under_the_first(
        self,
    ) -> None:
        """One container holding replicas ::0 and ::1 of a shared GPU is one holder, its
        processes summed once, under the first replica the kubelet named."""
        views = (
            view("nvidia.com/gpu.shared", f"{GPU}::0", ALICE),
            view("nvidia.com/gpu.shared", f"{GPU}::1", ALICE),
        )
        listed = DeviceProcesses(KEY, (process(10, ALICE, GIB, None),), False)
        (found,) = attribute(views, {KEY: listed})
        assert (
            (ALICE,),
            (GpuProcessUse(ALICE, "nvidia.com/gpu.shared", f"{GPU}::0", GIB, None),),
        ) == (found.holders, found.uses)

    def test_one_device_id_held_by_two_containers_is_one_view(self) -> None:
        """A restartable init container and the main container of a pod both report the
        GPU: two holders, one (resource, device ID) view."""
        sidecar = Owner(ALICE.namespace, ALICE.pod, "sidecar")
        views = (view("nvidia.com/gpu", GPU, ALICE), view("nvidia.com/gpu", GPU, sidecar))
        listed = DeviceProcesses(KEY, (process(10, sidecar, GIB, None),), False)
        (found,) = attribute(views, {KEY: listed})
        assert ((("nvidia.com/gpu", GPU),), (ALICE, sidecar)) == (found.views, found.holders)

    def test_the_device_is_named_by_a_held_view(self) -> None:
        """A free replica listed before a held one: the device is reported under the
        held view's resource, not the free one's."""
        views = (
            view("nvidia.com/gpu.free", f"{GPU}::0", UNALLOCATED),
            view("nvidia.com/gpu.shared", f"{GPU}::1", ALICE),
        )
        listed = DeviceProcesses(KEY, (process(10, EVE, GIB, None),), False)
        (found,) = attribute(views, {KEY: listed})
        assert ("nvidia.com/gpu.shared", GPU) == (found.resource, found.device_id)


class TestNamespaces:
    def test_a_pod_of_the_same_name_in_another_namespace_is_not_the_holder(self) -> None:
        """The pod-log tree named pod ``jupyter-alice`` of namespace ``staging`` only:
        ALICE's namesake in another namespace is another pod, foreign."""
        namesake = Owner("staging", ALICE.pod, "")
        unnamed = GpuProcess(
            30, ProcessOrigin("u3", "e" * 64, namesake.namespace, namesake.pod, ""), GIB
        )
        (found,) = attribute(SHARED, {KEY: DeviceProcesses(KEY, (unnamed,), False)})
        assert (
            (("other_pod", 1), ("host", 0)),
            (ViewedProcess(unnamed, ProcessKind.OTHER_POD, namesake),),
        ) == (found.foreign, found.processes)


class TestMpsOnAFreeDevice:
    def test_the_mps_server_alone_is_not_unallocated_use(self) -> None:
        """No container holds the GPU and only the MPS server runs on it: sharing
        machinery, no unallocated process."""
        daemon = Owner("kube-system", "nvidia-device-plugin-mps-control-daemon", "mps")
        server = GpuProcess(9, origin(daemon), GIB, None, "nvidia-cuda-mps")
        free = (view("nvidia.com/gpu", GPU, UNALLOCATED),)
        (found,) = attribute(free, {KEY: DeviceProcesses(KEY, (server,), False)})
        assert (("unallocated_device", 0),) == found.foreign
