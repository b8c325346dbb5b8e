"""The join: per-container views, per-node counts, telemetry attachment, change events."""

from __future__ import annotations

from exporter.join import diff_allocations, join_snapshot, telemetry_device_ids
from exporter.model import (
    AllocatableResources,
    CollectorRun,
    ContainerResources,
    ContainerView,
    DeviceGroup,
    DeviceIdentity,
    DeviceReading,
    KubeletStatus,
    MemoryBlock,
    MetricKind,
    MetricSpec,
    NodeCount,
    Owner,
    PciDevice,
    PodResources,
    Readings,
    Sample,
    Snapshot,
)
from exporter.sim.scenario import DemoScenario

STATUS = KubeletStatus(up=True, socket="/kubelet.sock", api=(("List", True),))
CPU_NUMA = {cpu: (0 if cpu < 8 else 1) for cpu in range(16)}
POWER = MetricSpec("podresources_gpu_power_watts", MetricKind.GAUGE, "power")


def _join(
    pods: tuple[PodResources, ...],
    allocatable: AllocatableResources,
    runs: tuple[CollectorRun, ...] = (),
) -> Snapshot:
    return join_snapshot(
        node="node-a",
        collected_at=1000.0,
        kubelet=STATUS,
        pods=pods,
        allocatable=allocatable,
        cpu_numa=CPU_NUMA,
        collector_runs=runs,
    )


def _container(snapshot: Snapshot, pod: str, container: str) -> ContainerView:
    return next(
        c
        for p in snapshot.pods
        if p.name == pod
        for c in p.containers
        if c.owner.container == container
    )


class TestNodeCounts:
    def test_replicas_count_as_units_and_zero_allocated_series_exist(self) -> None:
        """Each replica ID is one unit; every allocatable key has an allocated series."""
        allocatable = AllocatableResources(
            devices=(
                DeviceGroup("nvidia.com/gpu", ("GPU-a::0", "GPU-a::1", "GPU-a::2"), (0,)),
                DeviceGroup("nvidia.com/gpu", ("GPU-b",), (1,)),
            )
        )
        pods = (
            PodResources(
                "ns",
                "p",
                (
                    ContainerResources(
                        "c", devices=(DeviceGroup("nvidia.com/gpu", ("GPU-a::1",), (0,)),)
                    ),
                ),
            ),
        )
        snapshot = _join(pods, allocatable)
        assert snapshot.allocatable_devices == (
            NodeCount(("nvidia.com/gpu", "0"), 3),
            NodeCount(("nvidia.com/gpu", "1"), 1),
        )
        assert snapshot.allocated_devices == (
            NodeCount(("nvidia.com/gpu", "0"), 1),
            NodeCount(("nvidia.com/gpu", "1"), 0),
        )

    def test_multi_node_memory_block_counts_once(self) -> None:
        """A block over NUMA 0 and 1 is counted once under "0,1", not on each node."""
        allocatable = AllocatableResources(
            memory=(MemoryBlock("memory", 100, (0,)), MemoryBlock("memory", 100, (1,)))
        )
        pods = (
            PodResources(
                "ns", "p", (ContainerResources("c", memory=(MemoryBlock("memory", 30, (1, 0)),)),)
            ),
        )
        snapshot = _join(pods, allocatable)
        assert snapshot.allocated_memory == (
            NodeCount(("memory", "0"), 0),
            NodeCount(("memory", "0,1"), 30),
            NodeCount(("memory", "1"), 0),
        )

    def test_cpus_per_numa_node_include_pod_level_cpus(self) -> None:
        """Exclusive CPUs of containers and pod-level CPUs both count as allocated."""
        allocatable = AllocatableResources(cpu_ids=tuple(range(2, 16)))
        pods = (
            PodResources("ns", "p", (ContainerResources("c", cpu_ids=(2, 3, 9)),), cpu_ids=(4,)),
        )
        snapshot = _join(pods, allocatable)
        assert snapshot.allocatable_cpus == (NodeCount(("0",), 6), NodeCount(("1",), 8))
        assert snapshot.allocated_cpus == (NodeCount(("0",), 3), NodeCount(("1",), 1))


class TestContainers:
    def test_demo_alignment(self) -> None:
        """The demo's misplaced inference server is not aligned; the trainer is."""
        scenario = DemoScenario.create()
        state = scenario.state_at(0)
        snapshot = join_snapshot(
            node="demo",
            collected_at=0.0,
            kubelet=STATUS,
            pods=state.pods,
            allocatable=state.allocatable,
            cpu_numa={c: n.id for n in scenario.hardware.numa_nodes for c in n.cpus},
        )
        aligned = {
            (c.owner.pod, c.owner.container): c.numa_aligned
            for p in snapshot.pods
            for c in p.containers
        }
        assert aligned[("trainer-0", "trainer")] is True
        assert aligned[("llm-server-7d9f8", "server")] is False
        assert aligned[("solver-0", "solver")] is True  # CPUs on both nodes cover the 0,1 block
        assert aligned[("jupyter-alice", "notebook")] is None  # no exclusive CPUs
        assert aligned[("trainer-0", "log-shipper")] is None
        server = _container(snapshot, "llm-server-7d9f8", "server")
        assert server.numa_nodes == (0, 1)
        assert server.cpus_by_numa == (("0", 4),)

    def test_memory_spread_beyond_cpu_nodes_is_not_aligned(self) -> None:
        """Memory on a node without the container's CPUs breaks alignment."""
        pods = (
            PodResources(
                "ns",
                "p",
                (
                    ContainerResources(
                        "c", cpu_ids=(1, 2), memory=(MemoryBlock("memory", 10, (0, 1)),)
                    ),
                ),
            ),
        )
        assert _container(_join(pods, AllocatableResources()), "p", "c").numa_aligned is False

    def test_device_topology_falls_back_to_allocatable(self) -> None:
        """A container device group without topology takes the allocatable topology."""
        allocatable = AllocatableResources(devices=(DeviceGroup("r", ("d1",), (1,)),))
        pods = (
            PodResources(
                "ns", "p", (ContainerResources("c", devices=(DeviceGroup("r", ("d1",)),)),)
            ),
        )
        device = _container(_join(pods, allocatable), "p", "c").devices[0]
        assert (device.numa_nodes, device.allocatable) == ((1,), True)

    def test_cpu_seconds_sum_over_exclusive_cpus(self) -> None:
        """CPU times are summed over the container's CPUs, and absent when one is missing."""
        from exporter.model import CpuTimes

        times = tuple(CpuTimes(cpu, (("user", float(cpu)), ("idle", 1.0))) for cpu in (1, 2, 3))
        run = CollectorRun("cpu", True, 0.0, Readings(cpu_times=times))
        pods = (
            PodResources(
                "ns",
                "p",
                (ContainerResources("c", cpu_ids=(1, 3)), ContainerResources("d", cpu_ids=(3, 4))),
            ),
        )
        snapshot = _join(pods, AllocatableResources(), (run,))
        assert _container(snapshot, "p", "c").cpu_seconds_by_mode == (("user", 4.0), ("idle", 2.0))
        assert _container(snapshot, "p", "d").cpu_seconds_by_mode == ()


class TestBadKubeletData:
    def test_duplicates_are_dropped(self) -> None:
        """A pod, container or device ID listed twice is kept once: no duplicate series."""
        group = DeviceGroup("r", ("d1", "d1", "d2"), (0,))
        container = ContainerResources("c", devices=(group, DeviceGroup("r", ("d2",), (0,))))
        pod = PodResources("ns", "p", (container, ContainerResources("c", cpu_ids=(1,))))
        snapshot = _join((pod, pod), AllocatableResources())
        assert [(p.name, [c.owner.container for c in p.containers]) for p in snapshot.pods] == [
            ("p", ["c"])
        ]
        assert [d.device_id for d in snapshot.pods[0].containers[0].devices] == ["d1", "d2"]


class TestTelemetry:
    def test_replicas_share_the_physical_reading_and_pci(self) -> None:
        """A replica ID finds its GPU's reading; the PCI address from identity finds sysfs facts."""
        reading = DeviceReading(
            "GPU-a",
            DeviceIdentity(uuid="GPU-a", pci_address="0000:17:00.0"),
            (Sample(POWER, 100.0),),
        )
        pci = PciDevice("0000:17:00.0", "0x10de", "0x2330", "0x030200", 1)
        runs = (
            CollectorRun("nvml", True, 0.0, Readings(devices=(reading,))),
            CollectorRun("pci", True, 0.0, Readings(pci_devices=(pci,))),
        )
        allocatable = AllocatableResources(
            devices=(DeviceGroup("nvidia.com/gpu", ("GPU-a::0", "GPU-a::1"), (0,)),)
        )
        pods = (
            PodResources(
                "ns",
                "p",
                (
                    ContainerResources(
                        "c", devices=(DeviceGroup("nvidia.com/gpu", ("GPU-a::1",), (0,)),)
                    ),
                ),
            ),
        )
        snapshot = _join(pods, allocatable, runs)
        assert [(d.device_id, d.owner, d.reading, d.pci) for d in snapshot.devices] == [
            ("GPU-a::1", Owner("ns", "p", "c"), reading, pci),
            ("GPU-a::0", Owner("", "", ""), reading, pci),
        ]

    def test_devices_only_a_collector_knows_are_kept(self) -> None:
        """An NVML GPU no device plugin advertises shows up with an empty resource."""
        reading = DeviceReading("GPU-z", DeviceIdentity(uuid="GPU-z"), (Sample(POWER, 5.0),))
        snapshot = _join(
            (),
            AllocatableResources(),
            (CollectorRun("nvml", True, 0.0, Readings(devices=(reading,))),),
        )
        assert [(d.resource, d.device_id, d.allocatable) for d in snapshot.devices] == [
            ("", "GPU-z", False)
        ]

    def test_collectors_get_base_ids(self) -> None:
        """Collectors are asked about physical device IDs, replica suffixes stripped."""
        allocatable = AllocatableResources(
            devices=(DeviceGroup("r", ("GPU-a::0", "GPU-a::1", "0000:af:00.1")),)
        )
        assert telemetry_device_ids((), allocatable) == frozenset({"GPU-a", "0000:af:00.1"})


class TestAllocationChanges:
    def test_gained_and_lost(self) -> None:
        """A new pod gains its devices and CPUs; a gone pod loses them."""

        def pods(name: str, device: str) -> tuple[PodResources, ...]:
            return (
                PodResources(
                    "ns",
                    name,
                    (
                        ContainerResources(
                            "c", devices=(DeviceGroup("r", (device,)),), cpu_ids=(1,)
                        ),
                    ),
                ),
            )

        first = _join(pods("a", "d1"), AllocatableResources())
        second = _join(pods("b", "d1"), AllocatableResources())
        changes = diff_allocations(first, second)
        assert [
            (c.owner.pod, c.devices_added, c.devices_removed, c.cpus_added, c.cpus_removed)
            for c in changes
        ] == [
            ("a", (), ("d1",), (), (1,)),
            ("b", ("d1",), (), (1,), ()),
        ]
        assert diff_allocations(second, second) == ()
