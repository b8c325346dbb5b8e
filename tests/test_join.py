"""The join: per-container views, per-node counts, telemetry attachment, change events."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.collectors.nvml import NvmlCollector
from exporter.join import container_cpu_seconds, diff_allocations, join_snapshot, judge_collectors
from exporter.model import (
    UNALLOCATED,
    AllocatableResources,
    ClaimDevice,
    CollectorRun,
    ContainerResources,
    ContainerView,
    CpuTimes,
    DeviceGroup,
    DeviceIdentity,
    DeviceReading,
    DraDevice,
    DraState,
    DynamicResource,
    HardwareKey,
    KeyKind,
    KubeletStatus,
    MemoryBlock,
    MetricKind,
    MetricSpec,
    NodeCount,
    Owner,
    PartKind,
    PciDevice,
    PodResources,
    Readings,
    Sample,
    Snapshot,
    WholeDevice,
)
from exporter.sim.scenario import DemoScenario

STATUS = KubeletStatus(up=True, socket="/kubelet.sock", api=(("List", True),))
CPU_NUMA = {cpu: (0 if cpu < 8 else 1) for cpu in range(16)}
POWER = MetricSpec("podresources_gpu_power_watts", MetricKind.GAUGE, "power")


def _join(
    pods: tuple[PodResources, ...],
    allocatable: AllocatableResources,
    runs: tuple[CollectorRun, ...] = (),
    dra: DraState = DraState(),  # noqa: B008 - frozen
) -> Snapshot:
    return join_snapshot(
        node="node-a",
        collected_at=1000.0,
        kubelet=STATUS,
        pods=pods,
        allocatable=allocatable,
        cpu_numa=CPU_NUMA,
        dra=dra,
        collector_runs=runs,
    )


def _gpu(uuid: str, *, minor: int, pci: str, power: float) -> DeviceReading:
    return DeviceReading(
        uuid,
        (
            HardwareKey(KeyKind.GPU_UUID, uuid),
            HardwareKey(KeyKind.NVIDIA_MINOR, str(minor)),
            HardwareKey(KeyKind.PCI, pci),
        ),
        DeviceIdentity(uuid=uuid, pci_address=pci, vendor="nvidia"),
        (Sample(POWER, power),),
        standalone=True,
    )


def _pod(name: str, container: ContainerResources) -> PodResources:
    return PodResources("ns", name, (container,))


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

    def test_one_device_id_under_two_resources_is_two_devices(self) -> None:
        """The RDMA shared device plugin gives every resource the IDs "0".."N-1" (one
        resource per rail): each (resource, ID) is its own device, on its own NUMA node,
        counted under its own resource, held or free on its own."""
        allocatable = AllocatableResources(
            devices=(
                DeviceGroup("rdma/rail_a", ("0", "1", "2"), (0,)),
                DeviceGroup("rdma/rail_b", ("0", "1", "2"), (1,)),
            )
        )
        both = (DeviceGroup("rdma/rail_a", ("0",), (0,)), DeviceGroup("rdma/rail_b", ("0",), (1,)))
        pods = (
            _pod("trainer", ContainerResources("main", devices=both)),
            _pod(
                "other", ContainerResources("main", devices=(DeviceGroup("rdma/rail_a", ("1",)),))
            ),
        )
        snapshot = _join(pods, allocatable)
        held = [
            (d.resource, d.device_id, d.numa_nodes)
            for d in _container(snapshot, "trainer", "main").devices
        ]
        free = sorted((d.resource, d.device_id) for d in snapshot.devices if d.owner == UNALLOCATED)
        assert (snapshot.allocatable_devices, snapshot.allocated_devices) == (
            (NodeCount(("rdma/rail_a", "0"), 3), NodeCount(("rdma/rail_b", "1"), 3)),
            (NodeCount(("rdma/rail_a", "0"), 2), NodeCount(("rdma/rail_b", "1"), 1)),
        )
        assert (held, free) == (
            [("rdma/rail_a", "0", (0,)), ("rdma/rail_b", "0", (1,))],
            [("rdma/rail_a", "2"), ("rdma/rail_b", "1"), ("rdma/rail_b", "2")],
        )

    def test_pod_level_memory_holds_its_containers_memory(self) -> None:
        """With pod-level resource managers (PodLevelResourceManagers, beta in 1.37) a
        pod's memory is its whole allocation and an exclusive container's is a part of
        it (reference/node/pod-level-resource-managers): counted once, the pod's."""
        allocatable = AllocatableResources(memory=(MemoryBlock("memory", 8 << 30, (0,)),))
        pod = PodResources(
            "ns",
            "p",
            (
                ContainerResources(
                    "main", cpu_ids=(2, 3), memory=(MemoryBlock("memory", 2 << 30, (0,)),)
                ),
                ContainerResources("sidecar"),
            ),
            cpu_ids=(2, 3, 4, 5),
            memory=(MemoryBlock("memory", 4 << 30, (0,)),),
        )
        snapshot = _join((pod,), allocatable)
        assert (snapshot.allocated_memory, snapshot.allocated_cpus) == (
            (NodeCount(("memory", "0"), 4 << 30),),
            (NodeCount(("0",), 4),),
        )

    def test_two_pods_of_one_name_add_their_memory(self) -> None:
        """A pod replaced while the old one still holds its blocks: two pods, two blocks,
        even of equal size (a set of blocks counted 8 + 8 GiB as 8)."""
        block = MemoryBlock("memory", 8 << 30, (0,))
        old = _pod("p", ContainerResources("c", cpu_ids=(2, 3), memory=(block,)))
        new = _pod("p", ContainerResources("c", cpu_ids=(4, 5), memory=(block,)))
        allocatable = AllocatableResources(memory=(MemoryBlock("memory", 32 << 30, (0,)),))
        for pods in ((old, new), (new, old)):
            snapshot = _join(pods, allocatable)
            assert snapshot.allocated_memory == (NodeCount(("memory", "0"), 16 << 30),)
        # Alike entries are two pods too: List makes one entry per pod object.
        alike = _pod("p", ContainerResources("c", memory=(block,)))
        assert _join((alike, alike), allocatable).allocated_memory == (
            NodeCount(("memory", "0"), 16 << 30),
        )
        # Pod-level blocks (pod-level resource managers) add up the same way.
        pod_level = PodResources("ns", "p", (ContainerResources("c"),), memory=(block,))
        assert _join((pod_level, pod_level), allocatable).allocated_memory == (
            NodeCount(("memory", "0"), 16 << 30),
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

    def test_a_cpu_listed_twice_as_allocatable_counts_once(self) -> None:
        """Each CPU ID once on both sides, as allocated CPUs and device IDs are: a reply
        naming one twice must not make free CPUs (allocatable - allocated) out of none."""
        pods = (_pod("p", ContainerResources("c", cpu_ids=(2, 3, 3))),)
        snapshot = _join(pods, AllocatableResources(cpu_ids=(2, 3, 3, 2)))
        assert snapshot.allocatable_cpus == (NodeCount(("0",), 2),)
        assert snapshot.allocated_cpus == (NodeCount(("0",), 2),)

    def test_a_numa_node_without_allocated_cpus_has_a_zero_series(self) -> None:
        """A node none of whose allocatable CPUs is held reads 0 allocated CPUs, not no
        series, so allocatable - allocated shows it all free instead of vanishing."""
        pods = (_pod("p", ContainerResources("c", cpu_ids=(1,))),)
        snapshot = _join(pods, AllocatableResources(cpu_ids=(1, 9)))
        assert snapshot.allocated_cpus == (NodeCount(("0",), 1), NodeCount(("1",), 0))


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

    @pytest.mark.parametrize(
        "numa_nodes", [(), (0, 1)], ids=["device-without-topology", "device-on-two-nodes"]
    )
    def test_devices_that_keep_a_container_aligned(self, numa_nodes: tuple[int, ...]) -> None:
        """A device of no known NUMA node, or one affine to the CPUs' node among others, is
        no false "not aligned" alarm for a container whose CPUs are all on node 0."""
        container = ContainerResources(
            "c", cpu_ids=(1, 2), devices=(DeviceGroup("r", ("d1",), numa_nodes),)
        )
        snapshot = _join((_pod("p", container),), AllocatableResources())
        assert _container(snapshot, "p", "c").numa_aligned is True

    def test_alignment_is_unknown_without_cpu_topology(self) -> None:
        """Where sysfs gave no CPU-to-node map, numa_aligned is left out rather than a
        container with a device on another node reported aligned."""
        container = ContainerResources(
            "c", cpu_ids=(1, 2), devices=(DeviceGroup("r", ("d1",), (1,)),)
        )
        snapshot = join_snapshot(
            node="node-a",
            collected_at=1000.0,
            kubelet=STATUS,
            pods=(_pod("p", container),),
            allocatable=AllocatableResources(),
            cpu_numa={},
        )
        assert _container(snapshot, "p", "c").numa_aligned is None

    def test_a_memory_only_container_has_its_memory_numa_nodes(self) -> None:
        """A container holding only memory-manager memory shows that memory's NUMA nodes
        (in /debug/allocations), not none."""
        memory = (MemoryBlock("memory", 10, (1, 0)), MemoryBlock("hugepages-1Gi", 20, (1,)))
        snapshot = _join(
            (_pod("p", ContainerResources("c", memory=memory)),), AllocatableResources()
        )
        assert _container(snapshot, "p", "c").numa_nodes == (0, 1)

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

        times = {cpu: CpuTimes(cpu, (("user", float(cpu)), ("idle", 1.0))) for cpu in (1, 2, 3)}
        run = CollectorRun("cpu", True, 0.0, Readings(cpu_times=times))
        pods = (
            PodResources(
                "ns",
                "p",
                (ContainerResources("c", cpu_ids=(1, 3)), ContainerResources("d", cpu_ids=(3, 4))),
            ),
        )
        snapshot = _join(pods, AllocatableResources(), (run,))

        def seconds(container: str) -> tuple[tuple[str, float], ...]:
            return container_cpu_seconds(_container(snapshot, "p", container), snapshot.cpu_times)

        assert seconds("c") == (("user", 4.0), ("idle", 2.0))
        assert seconds("d") == ()

    def test_cpu_seconds_leave_out_a_mode_one_cpu_lost(self) -> None:
        """A mode missing from one CPU's line (a garbage figure) is left out, not summed
        over the other CPUs alone: that drop would read as a counter reset."""
        times = {1: CpuTimes(1, (("user", 1.0), ("idle", 5.0))), 2: CpuTimes(2, (("user", 2.0),))}
        run = CollectorRun("cpu", True, 0.0, Readings(cpu_times=times))
        pods = (_pod("p", ContainerResources("c", cpu_ids=(1, 2))),)
        snapshot = _join(pods, AllocatableResources(), (run,))
        container = _container(snapshot, "p", "c")
        assert container_cpu_seconds(container, snapshot.cpu_times) == (("user", 3.0),)


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

    def test_one_pod_name_listed_twice_is_the_same_whatever_the_order(self) -> None:
        """The kubelet lists an old and a new pod of one name (a StatefulSet pod made
        again, a static pod replaced) in map order: what either holds is the name's,
        and the snapshot does not change with the order."""
        old = _pod("db-0", ContainerResources("c", (DeviceGroup("r", ("d1",), (0,)),), (1, 2)))
        new = _pod("db-0", ContainerResources("c", (DeviceGroup("r", ("d2",), (1,)),), (9,)))
        allocatable = AllocatableResources(
            devices=(DeviceGroup("r", ("d1",), (0,)), DeviceGroup("r", ("d2",), (1,)))
        )
        one, other = _join((old, new), allocatable), _join((new, old), allocatable)
        (container,) = one.pods[0].containers
        assert one == other
        assert ([d.device_id for d in container.devices], container.cpu_ids) == (
            ["d1", "d2"],
            (1, 2, 9),
        )

    def test_a_device_listed_by_two_pods_is_one_allocated_unit(self) -> None:
        """A finished pod's devices stay listed while the kubelet hands them on: counted
        once, as CPUs are, so allocated never passes allocatable."""
        held = ContainerResources("c", (DeviceGroup("r", ("d1",), (0,)),), (1,))
        allocatable = AllocatableResources(
            devices=(DeviceGroup("r", ("d1", "d2"), (0,)),), cpu_ids=(1, 2)
        )
        snapshot = _join((_pod("done", held), _pod("next", held)), allocatable)
        counts = [
            [(c.label_values, c.value) for c in counted]
            for counted in (snapshot.allocated_devices, snapshot.allocated_cpus)
        ]
        assert counts == [[(("r", "0"), 1)], [(("0",), 1)]]


class TestTelemetry:
    def test_replicas_share_the_physical_reading_and_pci(self) -> None:
        """A replica ID finds its GPU's reading; the PCI address from identity finds sysfs facts."""
        reading = _gpu("GPU-a", minor=0, pci="0000:17:00.0", power=100.0)
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
        read = [(d, snapshot.hardware_of(d)) for d in snapshot.devices]
        assert [(d.device_id, d.owner, h.reading, h.pci) for d, h in read] == [
            ("GPU-a::1", Owner("ns", "p", "c"), reading, pci),
            ("GPU-a::0", Owner("", "", ""), reading, pci),
        ]

    def test_devices_only_a_collector_knows_are_kept(self) -> None:
        """An NVML GPU no device plugin advertises shows up with an empty resource."""
        reading = _gpu("GPU-z", minor=3, pci="0000:18:00.0", power=5.0)
        snapshot = _join(
            (),
            AllocatableResources(),
            (CollectorRun("nvml", True, 0.0, Readings(devices=(reading,))),),
        )
        assert [(d.resource, d.device_id, d.allocatable) for d in snapshot.devices] == [
            ("", "GPU-z", False)
        ]

    def test_nics_no_allocation_names_are_not_shown(self) -> None:
        """A NIC reading (not standalone) appears only where an allocation names it."""
        nic = DeviceReading(
            "eth1",
            (HardwareKey(KeyKind.NETDEV, "eth1"), HardwareKey(KeyKind.PCI, "0000:af:00.1")),
            samples=(Sample(POWER, 1.0),),
        )
        runs = (CollectorRun("netdev", True, 0.0, Readings(devices=(nic,))),)
        assert _join((), AllocatableResources(), runs).devices == ()
        pods = (_pod("p", ContainerResources("c", devices=(DeviceGroup("r", ("0000:AF:00.1",)),))),)
        snapshot = _join(pods, AllocatableResources(), runs)
        (device,) = snapshot.devices
        assert (device.device_id, snapshot.hardware_of(device).reading) == ("0000:AF:00.1", nic)

    def test_readings_of_one_key_from_two_collectors_are_combined(self) -> None:
        """An RDMA NIC's netdev and InfiniBand readings both follow its PCI address."""
        key = HardwareKey(KeyKind.PCI, "0000:af:00.1")
        net = DeviceReading(
            "eth1", (HardwareKey(KeyKind.NETDEV, "eth1"), key), samples=(Sample(POWER, 1.0),)
        )
        ib = DeviceReading(
            "mlx5_0",
            (HardwareKey(KeyKind.RDMA, "mlx5_0"), key),
            DeviceIdentity(vendor="mellanox"),
            (Sample(POWER, 2.0),),
        )
        runs = (
            CollectorRun("netdev", True, 0.0, Readings(devices=(net,))),
            CollectorRun("infiniband", True, 0.0, Readings(devices=(ib,))),
        )
        pods = (_pod("p", ContainerResources("c", devices=(DeviceGroup("r", ("0000:af:00.1",)),))),)
        snapshot = _join(pods, AllocatableResources(), runs)
        (device,) = snapshot.devices
        reading = snapshot.hardware_of(device).reading
        assert reading is not None
        assert [s.value for s in reading.samples] == [1.0, 2.0]
        assert reading.identity.vendor == "mellanox"

    def test_gke_and_mig_ids_find_readings_through_keys(self) -> None:
        """nvidiaN finds the GPU by minor number; nothing of the GPU is shown twice."""
        gpu = _gpu("GPU-a", minor=2, pci="0000:17:00.0", power=10.0)
        runs = (CollectorRun("nvml", True, 0.0, Readings(devices=(gpu,))),)
        pods = (
            _pod(
                "p", ContainerResources("c", devices=(DeviceGroup("nvidia.com/gpu", ("nvidia2",)),))
            ),
        )
        snapshot = _join(pods, AllocatableResources(), runs)
        assert [(d.device_id, snapshot.hardware_of(d).reading) for d in snapshot.devices] == [
            ("nvidia2", gpu)
        ]


class TestDra:
    CLAIM = DynamicResource(
        "gpu-claim",
        "ns",
        (
            ClaimDevice(
                "gpu.nvidia.com",
                "node-a",
                "gpu-0",
                cdi_devices=("k8s.gpu.nvidia.com/device=gpu-0",),
            ),
        ),
    )

    def test_claim_device_finds_telemetry_through_dra_state(self) -> None:
        """A DRA device resolved by the driver's files gets its GPU's reading, labelled
        with the driver name and the DRA device name."""
        gpu = _gpu("GPU-a", minor=0, pci="0000:17:00.0", power=10.0)
        dra = DraState(
            devices=(
                DraDevice(
                    "gpu.nvidia.com",
                    "node-a",
                    "gpu-0",
                    (HardwareKey(KeyKind.GPU_UUID, "GPU-a"),),
                    "checkpoint",
                    "ns",
                    "gpu-claim",
                ),
            )
        )
        runs = (CollectorRun("nvml", True, 0.0, Readings(devices=(gpu,))),)
        pods = (_pod("p", ContainerResources("c", dynamic_resources=(self.CLAIM,))),)
        snapshot = _join(pods, AllocatableResources(), runs, dra)
        (device,) = snapshot.devices
        reading = snapshot.hardware_of(device).reading
        assert (device.resource, device.device_id, device.owner, reading) == (
            "gpu.nvidia.com",
            "gpu-0",
            Owner("ns", "p", "c"),
            gpu,
        )
        assert device.claim is not None
        assert (device.claim.claim_name, device.claim.pool) == ("gpu-claim", "node-a")
        assert _container(snapshot, "p", "c").claim_devices == (device,)

    def test_claim_device_takes_its_numa_node_from_sysfs(self) -> None:
        """The kubelet gives DRA devices no topology: the PCI function's node stands in,
        and counts in the container's NUMA alignment."""
        gpu = _gpu("GPU-a", minor=0, pci="0000:17:00.0", power=10.0)
        pci = PciDevice("0000:17:00.0", "0x10de", "0x2330", "0x030200", 1)
        runs = (
            CollectorRun("nvml", True, 0.0, Readings(devices=(gpu,))),
            CollectorRun("pci", True, 0.0, Readings(pci_devices=(pci,))),
        )
        container = ContainerResources("c", cpu_ids=(2, 3), dynamic_resources=(self.CLAIM,))
        snapshot = _join((_pod("p", container),), AllocatableResources(), runs)
        view = _container(snapshot, "p", "c")
        assert [d.numa_nodes for d in view.claim_devices] == [(1,)]
        assert (view.numa_nodes, view.numa_aligned) == ((0, 1), False)  # CPUs 2, 3: node 0

    def test_shared_device_has_one_view_per_owner(self) -> None:
        """Two pods sharing one DRA device (share_id) each own a view of it."""
        shared = DynamicResource(
            "shared",
            "ns",
            (ClaimDevice("gpu.nvidia.com", "node-a", "gpu-0", share_id="7"),),
        )
        pods = (
            _pod("a", ContainerResources("c", dynamic_resources=(shared,))),
            _pod("b", ContainerResources("c", dynamic_resources=(shared,))),
        )
        snapshot = _join(pods, AllocatableResources())
        assert [(d.owner.pod, d.device_id) for d in snapshot.devices] == [
            ("a", "gpu-0"),
            ("b", "gpu-0"),
        ]

    def test_a_claim_listed_twice_keeps_the_devices_its_repeat_adds(self) -> None:
        """The kubelet lists a claim once per reference (two requests of one claim): a
        device only the repeat lists stays the container's, not dropped with the repeat."""
        more = replace(
            self.CLAIM,
            devices=(*self.CLAIM.devices, ClaimDevice("gpu.nvidia.com", "node-a", "gpu-1")),
        )
        container = ContainerResources("c", dynamic_resources=(self.CLAIM, more))
        view = _container(_join((_pod("p", container),), AllocatableResources()), "p", "c")
        assert [d.device_id for d in view.claim_devices] == ["gpu-0", "gpu-1"]
        assert view.dynamic_resources == (more,)

    def test_devices_of_one_name_in_two_pools_each_get_their_own_reading(self) -> None:
        """A DRA device name is unique within its pool only: gpu-0 of pool a and gpu-0
        of pool b, resolved by one checkpoint to two GPUs, each show their own GPU."""
        gpus = {
            pool: _gpu(f"GPU-{pool}", minor=n, pci=f"0000:{17 + n}:00.0", power=10.0 * (n + 1))
            for n, pool in enumerate(("a", "b"))
        }
        dra = DraState(
            devices=tuple(
                DraDevice("gpu.nvidia.com", pool, "gpu-0", gpu.keys[:1], "checkpoint")
                for pool, gpu in gpus.items()
            )
        )
        claim = DynamicResource(
            "gpu-claim", "ns", tuple(ClaimDevice("gpu.nvidia.com", p, "gpu-0") for p in gpus)
        )
        runs = (CollectorRun("nvml", True, 0.0, Readings(devices=tuple(gpus.values()))),)
        pods = (_pod("p", ContainerResources("c", dynamic_resources=(claim,))),)
        snapshot = _join(pods, AllocatableResources(), runs, dra)
        found = {
            d.claim.pool: snapshot.hardware_of(d).reading
            for d in snapshot.devices
            if d.claim is not None
        }
        assert gpus == found


class TestJudgedCollectors:
    def test_absent_nvml_fails_on_a_node_with_nvidia_devices(self) -> None:
        """NVML absent is success on a CPU-only node, failure where NVIDIA devices are."""
        run = CollectorRun(
            "nvml",
            True,
            0.0,
            unavailable="libnvidia-ml.so.1 not found",
            serves=NvmlCollector.serves,
        )
        quiet = _join((), AllocatableResources(), (run,))
        assert [(r.success, r.error) for r in quiet.collectors] == [(True, None)]
        # NVIDIA's network operator names NICs under nvidia.com/ too: no NVML needed.
        nics = AllocatableResources(devices=(DeviceGroup("nvidia.com/hca", ("0000:4b:00.0",)),))
        assert [(r.success, r.error) for r in _join((), nics, (run,)).collectors] == [(True, None)]
        allocatable = AllocatableResources(devices=(DeviceGroup("nvidia.com/gpu", ("GPU-a",)),))
        judged = _join((), allocatable, (run,))
        assert [(r.success, r.error) for r in judged.collectors] == [
            (False, "libnvidia-ml.so.1 not found, but the node has nvidia.com/gpu")
        ]

    def test_absent_nvml_fails_on_a_node_with_nvidia_dra_claims(self) -> None:
        run = CollectorRun("nvml", True, 0.0, unavailable="no driver", serves=("gpu.nvidia.com",))
        pods = (_pod("p", ContainerResources("c", dynamic_resources=(TestDra.CLAIM,))),)
        (judged,) = _join(pods, AllocatableResources(), (run,)).collectors
        assert (judged.success, judged.error) == (
            False,
            "no driver, but the node has gpu.nvidia.com",
        )


class TestTopologyAfterKubeletRestart:
    def test_allocated_counts_take_the_allocatable_topology(self) -> None:
        """While plugins re-register, allocatable topology is empty but the container's is
        not: both counts use one topology per ID, so allocatable - allocated stays free."""
        allocatable = AllocatableResources(devices=(DeviceGroup("r", ("d1", "d2")),))
        pods = (_pod("p", ContainerResources("c", devices=(DeviceGroup("r", ("d1",), (1,)),))),)
        snapshot = _join(pods, allocatable)
        assert snapshot.allocatable_devices == (NodeCount(("r", ""), 2),)
        assert snapshot.allocated_devices == (NodeCount(("r", ""), 1),)


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
            ("a", (), ("r/d1",), (), (1,)),
            ("b", ("r/d1",), (), (1,), ()),
        ]
        assert diff_allocations(second, second) == ()

    def test_the_same_holdings_in_another_order_are_no_change(self) -> None:
        """A kubelet may list a container's devices and CPUs in another order from one
        reply to the next; only what changed hands is reported."""

        def pods(devices: tuple[str, ...], cpus: tuple[int, ...]) -> tuple[PodResources, ...]:
            container = ContainerResources("c", devices=(DeviceGroup("r", devices),), cpu_ids=cpus)
            return (PodResources("ns", "p", (container,)),)

        first = _join(pods(("d1", "d2"), (1, 2)), AllocatableResources())
        reordered = _join(pods(("d2", "d1"), (2, 1)), AllocatableResources())
        assert diff_allocations(first, reordered) == ()
        swapped = _join(pods(("d2", "d3"), (2, 1)), AllocatableResources())
        [change] = diff_allocations(reordered, swapped)
        assert (change.devices_added, change.devices_removed) == (("r/d3",), ("r/d1",))
        assert (change.cpus_added, change.cpus_removed) == ((), ())

    def test_dra_devices_gained_and_lost(self) -> None:
        """A container holding nothing but a DRA claim gains and loses its device as
        driver/device, as a device plugin's are logged, not silently."""
        bare = _join((_pod("p", ContainerResources("c")),), AllocatableResources())
        claimed = _join(
            (_pod("p", ContainerResources("c", dynamic_resources=(TestDra.CLAIM,))),),
            AllocatableResources(),
        )
        owner = Owner("ns", "p", "c")
        assert [
            (c.owner, c.devices_added, c.devices_removed) for c in diff_allocations(bare, claimed)
        ] == [(owner, ("gpu.nvidia.com/gpu-0",), ())]
        assert [
            (c.owner, c.devices_added, c.devices_removed) for c in diff_allocations(claimed, bare)
        ] == [(owner, (), ("gpu.nvidia.com/gpu-0",))]


class TestRefreshReadings:
    def test_gpu_processes_are_attributed_again(self) -> None:
        """The skip path for byte-identical kubelet replies re-attaches readings; GPU
        processes change between such polls, so they must be attributed again too."""
        from exporter.join import refresh_readings
        from exporter.model import DeviceProcesses, GpuProcess, ProcessOrigin

        gpu = _gpu("GPU-a", minor=0, pci="0000:17:00.0", power=10.0)
        key = HardwareKey(KeyKind.GPU_UUID, "GPU-a")
        pods = (
            _pod(
                "p", ContainerResources("c", devices=(DeviceGroup("nvidia.com/gpu", ("GPU-a",)),))
            ),
        )

        def runs(*pids: int) -> tuple[CollectorRun, ...]:
            listed = DeviceProcesses(
                key, tuple(GpuProcess(pid, ProcessOrigin(), 1024) for pid in pids)
            )
            return (
                CollectorRun("nvml", True, 0.0, Readings(devices=(gpu,))),
                CollectorRun("gpu_processes", True, 0.0, Readings(gpu_processes=(listed,))),
            )

        first = _join(pods, AllocatableResources(), runs(7))
        refreshed = refresh_readings(
            first,
            collected_at=first.collected_at,
            kubelet=STATUS,
            collector_runs=runs(7, 8),
        )
        assert refreshed is not None
        assert (
            refreshed.gpu_processes == _join(pods, AllocatableResources(), runs(7, 8)).gpu_processes
        )
        assert refreshed.gpu_processes != first.gpu_processes

    def test_gpus_only_a_collector_knows_follow_the_readings(self) -> None:
        """A GPU no device plugin advertises is shown from its reading alone: on the
        skip path it goes when its reading goes (fallen off the bus) and comes when one
        comes, exactly as a full join has it."""
        from exporter.join import refresh_readings

        held = _gpu("GPU-a", minor=0, pci="0000:17:00.0", power=10.0)
        spare = _gpu("GPU-z", minor=1, pci="0000:18:00.0", power=20.0)
        pods = (
            _pod(
                "p", ContainerResources("c", devices=(DeviceGroup("nvidia.com/gpu", ("GPU-a",)),))
            ),
        )

        def runs(*gpus: DeviceReading) -> tuple[CollectorRun, ...]:
            return (CollectorRun("nvml", True, 0.0, Readings(devices=gpus)),)

        def shown(snapshot: Snapshot) -> list[str]:
            return sorted(d.device_id for d in snapshot.devices)

        both = _join(pods, AllocatableResources(), runs(held, spare))
        assert shown(both) == ["GPU-a", "GPU-z"]
        for before, now in (
            (both, runs(held)),
            (_join(pods, AllocatableResources(), runs(held)), runs(held, spare)),
        ):
            refreshed = refresh_readings(
                before, collected_at=before.collected_at, kubelet=STATUS, collector_runs=now
            )
            assert refreshed is not None
            assert shown(refreshed) == shown(_join(pods, AllocatableResources(), now))

    def test_cpu_times_and_node_samples_are_this_polls(self) -> None:
        """On the skip path the exclusive-CPU seconds and the node's samples are this
        poll's, as a full join has them, not frozen at the last join's."""
        from exporter.collectors.numa import NUMA_MEMORY_FREE
        from exporter.join import refresh_readings

        pods = (_pod("p", ContainerResources("c", cpu_ids=(1,))),)

        def runs(value: float) -> tuple[CollectorRun, ...]:
            return (
                CollectorRun(
                    "cpu", True, 0.0, Readings(cpu_times={1: CpuTimes(1, (("user", value),))})
                ),
                CollectorRun(
                    "numa",
                    True,
                    0.0,
                    Readings(node_samples=(Sample(NUMA_MEMORY_FREE, value, ("0",)),)),
                ),
            )

        first = _join(pods, AllocatableResources(cpu_ids=(1,)), runs(1.0))
        refreshed = refresh_readings(
            first, collected_at=first.collected_at, kubelet=STATUS, collector_runs=runs(2.0)
        )
        fresh = _join(pods, AllocatableResources(cpu_ids=(1,)), runs(2.0))
        assert refreshed is not None
        assert (refreshed.cpu_times, refreshed.node_samples) == (
            fresh.cpu_times,
            fresh.node_samples,
        )
        assert container_cpu_seconds(_container(refreshed, "p", "c"), refreshed.cpu_times) == (
            ("user", 2.0),
        )


def _device(snapshot: Snapshot, device_id: str) -> DeviceReading | None:
    """The reading attached to a device the kubelet listed, by its device ID."""
    view = next(d for d in snapshot.devices if d.device_id == device_id)
    return snapshot.hardware[view.resolution].reading


COUNT = MetricSpec("podresources_test_total", MetricKind.COUNTER, "a count")


class TestJoinRules:
    """Rules a mutation review of join.py found no test holding (2026-11-26)."""

    def test_an_rdma_named_device_takes_its_infiniband_reading(self) -> None:
        """A device ID such as mlx5_0 may be a netdev or an RDMA device: with only the
        RDMA reading there, that is the device's (every key is tried, not the first)."""
        rdma = DeviceReading(
            "mlx5_0", (HardwareKey(KeyKind.RDMA, "mlx5_0"),), samples=(Sample(COUNT, 5.0),)
        )
        pod = _pod("p", ContainerResources("c", devices=(DeviceGroup("rdma/hca", ("mlx5_0",)),)))
        runs = (CollectorRun("infiniband", True, 0.0, Readings(devices=(rdma,))),)
        reading = _device(_join((pod,), AllocatableResources(), runs), "mlx5_0")
        assert rdma == reading

    def test_a_checkpoint_entry_naming_its_claim_serves_that_claim(self) -> None:
        """A driver file's entry for claim ns/claim resolves the device of that claim."""
        keys = (HardwareKey(KeyKind.MIG_UUID, "MIG-x"),)
        name = "gpu-0-mig-1g10gb-19-0"
        entry = DraDevice("gpu.nvidia.com", "p", name, keys, "checkpoint", "ns", "claim")
        claim = DynamicResource("claim", "ns", (ClaimDevice("gpu.nvidia.com", "p", name),))
        pod = _pod("p", ContainerResources("c", dynamic_resources=(claim,)))
        mig = DeviceReading("MIG-x", keys, samples=(Sample(COUNT, 7.0),), standalone=True)
        runs = (CollectorRun("nvml", True, 0.0, Readings(devices=(mig,))),)
        snapshot = _join((pod,), AllocatableResources(), runs, DraState(devices=(entry,)))
        device = _container(snapshot, "p", "c").claim_devices[0]
        assert (keys, mig) == (device.resolution.keys, snapshot.hardware[device.resolution].reading)

    def test_the_containers_own_numa_node_wins_over_allocatable(self) -> None:
        """A device's NUMA node is what the container's listing says, not what the
        allocatable listing said (the plugin may re-register with another)."""
        gpu = DeviceGroup("nvidia.com/gpu", ("GPU-a",), (0,))
        pod = _pod("p", ContainerResources("c", cpu_ids=(1,), devices=(gpu,)))
        allocatable = AllocatableResources(devices=(replace(gpu, numa_nodes=(1,)),))
        container = _container(_join((pod,), allocatable), "p", "c")
        assert ((0,), True) == (container.devices[0].numa_nodes, container.numa_aligned)

    def test_memory_nodes_are_the_containers_too(self) -> None:
        """Exclusive CPUs on node 0 with memory on node 1: the container spans both,
        and is not aligned."""
        memory = (MemoryBlock("memory", 1 << 30, (1,)),)
        pod = _pod("p", ContainerResources("c", cpu_ids=(1,), memory=memory))
        container = _container(_join((pod,), AllocatableResources()), "p", "c")
        assert ((0, 1), False) == (container.numa_nodes, container.numa_aligned)

    def test_a_key_listed_twice_gives_one_reading_sample(self) -> None:
        """A reading that names one key twice is one device: its samples once."""
        key = HardwareKey(KeyKind.GPU_UUID, "GPU-a")
        reading = DeviceReading("GPU-a", (key, key), samples=(Sample(COUNT, 1.0),), standalone=True)
        pod = _pod(
            "p", ContainerResources("c", devices=(DeviceGroup("nvidia.com/gpu", ("GPU-a",)),))
        )
        runs = (CollectorRun("nvml", True, 0.0, Readings(devices=(reading,))),)
        attached = _device(_join((pod,), AllocatableResources(), runs), "GPU-a")
        assert attached is not None
        assert (Sample(COUNT, 1.0),) == attached.samples

    @pytest.mark.parametrize(
        "advertised",
        [
            "nvidia.com/gpu",
            "nvidia.com/gpu.shared",  # time-slicing renamed
            "nvidia.com/pgpu",  # passthrough (KubeVirt)
            "gpu.nvidia.com",  # the NVIDIA DRA driver
        ],
    )
    def test_every_nvidia_gpu_name_means_nvml_should_be_there(self, advertised: str) -> None:
        """NVML absent on a node with NVIDIA GPUs under any of the names the NVIDIA stack
        gives them: the nvml collector, as it declares what it serves, has failed."""
        nvml = CollectorRun("nvml", True, 0.0, unavailable="no driver", serves=NvmlCollector.serves)
        (judged,) = judge_collectors((nvml,), advertised=(advertised,))
        assert (False, f"no driver, but the node has {advertised}") == (
            judged.success,
            judged.error,
        )

    def test_a_mig_resource_name_means_nvml_should_be_there(self) -> None:
        """NVML absent on a node advertising nvidia.com/mig-1g.10gb (the mixed strategy's
        names, matched by prefix): the nvml collector has failed, naming the resource."""
        nvml = CollectorRun(
            "nvml", True, 0.0, unavailable="libnvidia-ml.so not found", serves=NvmlCollector.serves
        )
        (judged,) = judge_collectors((nvml,), advertised=("nvidia.com/mig-1g.10gb",))
        assert (False, "libnvidia-ml.so not found, but the node has nvidia.com/mig-1g.10gb") == (
            judged.success,
            judged.error,
        )


MIG_M = "MIG-00000201-5e1f-4c2a-9d3b-000000000201"


class TestPciFunctionFigures:
    """A PCI function's own figures (its PCIe link, from the pci collector) join its
    device's reading: whatever key found the reading, through the PCI address."""

    LINK = MetricSpec("podresources_pcie_link_width", MetricKind.GAUGE, "lanes")
    MOST = MetricSpec("podresources_pcie_link_max_width", MetricKind.GAUGE, "lanes at most")

    def _pci(self, address: str) -> PciDevice:
        samples = (Sample(self.LINK, 8.0), Sample(self.MOST, 16.0))
        return PciDevice(address, "0x10de", "0x2330", "0x030200", 0, samples=samples)

    def _holding(self, resource: str, device_id: str) -> tuple[PodResources, ...]:
        """One pod whose one container holds ``device_id`` of ``resource``."""
        group = DeviceGroup(resource, (device_id,), (0,))
        return (_pod("p", ContainerResources("c", devices=(group,))),)

    def test_a_gpu_found_by_its_uuid_gets_its_functions_link(self) -> None:
        reading = _gpu("GPU-a", minor=0, pci="0000:17:00.0", power=100.0)
        runs = (
            CollectorRun("nvml", True, 0.0, Readings(devices=(reading,))),
            CollectorRun("pci", True, 0.0, Readings(pci_devices=(self._pci("0000:17:00.0"),))),
        )
        pods = self._holding("nvidia.com/gpu", "GPU-a")

        joined = _device(_join(pods, AllocatableResources(), runs), "GPU-a")

        assert joined is not None
        assert [(s.spec.name, s.value) for s in joined.samples] == [
            ("podresources_gpu_power_watts", 100.0),
            ("podresources_pcie_link_width", 8.0),
            ("podresources_pcie_link_max_width", 16.0),
        ]
        assert (joined.name, joined.keys, joined.identity) == (
            reading.name,
            reading.keys,
            reading.identity,
        )

    def test_a_device_no_collector_reads_gets_a_reading_of_its_link_alone(self) -> None:
        """A NIC handed out by its PCI address, with no netdev or RDMA reading."""
        pci = self._pci("0000:4b:00.0")
        runs = (CollectorRun("pci", True, 0.0, Readings(pci_devices=(pci,))),)
        pods = self._holding("example.com/nic", "0000:4b:00.0")

        joined = _device(_join(pods, AllocatableResources(), runs), "0000:4b:00.0")

        assert joined == DeviceReading(
            "0000:4b:00.0", (HardwareKey(KeyKind.PCI, "0000:4b:00.0"),), samples=pci.samples
        )

    def test_a_mig_device_leaves_the_link_to_its_gpu(self) -> None:
        """One link, one series: the MIG slice (its reading names the parent's PCI
        address) carries none; the GPU, shown under its own name, carries it."""
        parent = _gpu("GPU-p", minor=0, pci="0000:17:00.0", power=100.0)
        mig = DeviceReading(
            MIG_M,
            (HardwareKey(KeyKind.MIG_UUID, MIG_M),),
            DeviceIdentity(uuid=MIG_M, pci_address="0000:17:00.0", vendor="nvidia"),
            (Sample(POWER, 10.0),),
        )
        runs = (
            CollectorRun("nvml", True, 0.0, Readings(devices=(parent, mig))),
            CollectorRun("pci", True, 0.0, Readings(pci_devices=(self._pci("0000:17:00.0"),))),
        )
        pods = self._holding("nvidia.com/mig-1g.10gb", MIG_M)

        snapshot = _join(pods, AllocatableResources(), runs)

        assert _device(snapshot, MIG_M) == mig
        gpu = _device(snapshot, "GPU-p")
        assert gpu is not None
        assert [s.spec.name for s in gpu.samples] == [
            "podresources_gpu_power_watts",
            "podresources_pcie_link_width",
            "podresources_pcie_link_max_width",
        ]

    def test_a_function_without_a_link_adds_no_reading(self) -> None:
        """A NIC handed out by its PCI address whose function has no link figures (a VF,
        conventional PCI): its hardware is the function alone, no empty reading."""
        pci = PciDevice("0000:4b:00.2", "0x15b3", "0x101e", "0x020000", 0)
        runs = (CollectorRun("pci", True, 0.0, Readings(pci_devices=(pci,))),)
        pods = self._holding("example.com/vf", "0000:4b:00.2")

        snapshot = _join(pods, AllocatableResources(), runs)

        view = next(d for d in snapshot.devices if d.device_id == "0000:4b:00.2")
        assert snapshot.hardware[view.resolution].reading is None
        assert snapshot.hardware[view.resolution].pci == pci


class TestWholeDevices:
    def test_a_mig_device_knows_its_gpu_which_stays_a_device_of_its_own(self) -> None:
        """A held MIG device's hardware names its GPU by every key the GPU's reading has
        (its PCI address, which on-call may be given), and the GPU, which no kubelet ID
        names, is still shown unallocated."""
        gpu = _gpu("GPU-a", minor=2, pci="0000:b1:00.0", power=90.0)
        mig = DeviceReading(
            "MIG-a",
            (HardwareKey(KeyKind.MIG_UUID, "MIG-a"), HardwareKey(KeyKind.MIG_PATH, "GPU-a/1/0")),
            standalone=True,
        )
        runs = (CollectorRun("nvml", True, 0.0, Readings(devices=(gpu, mig))),)
        held = ContainerResources("c", devices=(DeviceGroup("nvidia.com/mig", ("MIG-a",)),))
        snapshot = _join((_pod("p", held),), AllocatableResources(), runs)
        wholes = [(d.device_id, d.owner, snapshot.hardware_of(d).whole) for d in snapshot.devices]
        assert [
            ("MIG-a", Owner("ns", "p", "c"), WholeDevice(PartKind.MIG_SLICE, gpu.keys)),
            ("GPU-a", UNALLOCATED, None),
        ] == wholes

    def test_a_vf_knows_its_pf_without_a_reading_of_the_pf(self) -> None:
        """Where no collector read the PF, its VF still names it by its PCI address."""
        vf = DeviceReading(
            "ens1f0v1",
            (
                HardwareKey(KeyKind.NETDEV, "ens1f0v1"),
                HardwareKey(KeyKind.PCI, "0000:4b:00.3"),
                HardwareKey(KeyKind.SRIOV_VF, "0000:4b:00.0/1"),
            ),
        )
        runs = (CollectorRun("netdev", True, 0.0, Readings(devices=(vf,))),)
        held = ContainerResources("c", devices=(DeviceGroup("example.com/vf", ("0000:4b:00.3",)),))
        snapshot = _join((_pod("p", held),), AllocatableResources(), runs)
        assert (
            WholeDevice(PartKind.SRIOV_VF, (HardwareKey(KeyKind.PCI, "0000:4b:00.0"),))
            == snapshot.hardware_of(snapshot.devices[0]).whole
        )


def test_one_device_is_one_resolution_object() -> None:
    """Within a snapshot, the views of one device share one Resolution object: one ID
    in two RDMA shared pools (free and held), the replicas of a time-sliced GPU. The
    join's and the render's dicts keyed by it then find it by identity, never comparing
    field by field. Another device has another."""
    gpu = "GPU-8f3c1a2b-0000-1111-2222-333344445555"
    pools = ("rdma/hca_shared_devices_a", "rdma/hca_shared_devices_b")
    allocatable = AllocatableResources(
        devices=(
            *(DeviceGroup(pool, ("17", "18"), (0,)) for pool in pools),
            DeviceGroup("nvidia.com/gpu", (f"{gpu}::0", f"{gpu}::1", f"{gpu}::2"), (0,)),
        )
    )
    holder = ContainerResources(
        "main",
        devices=(
            DeviceGroup(pools[0], ("17",), (0,)),
            DeviceGroup("nvidia.com/gpu", (f"{gpu}::1",), (0,)),
        ),
    )
    snapshot = _join((_pod("p", holder),), allocatable)
    by_id: dict[str, list[object]] = {}
    for device in snapshot.devices:
        by_id.setdefault(device.resolution.physical_id, []).append(device.resolution)

    assert {name: len(found) for name, found in by_id.items()} == {"17": 2, "18": 2, gpu: 3}
    assert all(r is found[0] for found in by_id.values() for r in found)
    assert by_id["17"][0] != by_id["18"][0]
