"""join_snapshot with a JoinCache: pods reported again unchanged are not joined again."""

from __future__ import annotations

from dataclasses import replace

from exporter.collectors.gpu_metrics import GPU_UTILIZATION
from exporter.join import JoinCache, diff_allocations, join_snapshot, refresh_readings
from exporter.kubelet.convert import list_response_to_proto, pods_from_list_response_reusing
from exporter.model import (
    AllocatableResources,
    ClaimDevice,
    CollectorRun,
    ContainerResources,
    CpuTimes,
    DeviceGroup,
    DeviceReading,
    DraDevice,
    DraState,
    DynamicResource,
    HardwareKey,
    KeyKind,
    KubeletStatus,
    NodeCount,
    PciDevice,
    PodResources,
    Readings,
    Sample,
    Snapshot,
)
from exporter.sim.scenario import DenseScenario

SCENARIO = DenseScenario.create(pod_count=80, cpus=16)  # pods past 64 hold no device
CPU_NUMA = {cpu: cpu // 8 for cpu in range(16)}
ALLOCATABLE = SCENARIO.allocatable()
KUBELET = KubeletStatus(up=True, socket="/s", api=())


def _runs(value: float) -> tuple[CollectorRun, ...]:
    """Readings that differ with ``value``: GPU utilization and CPU time."""
    gpus = tuple(
        DeviceReading(
            name=gpu.uuid,
            keys=(HardwareKey(KeyKind.GPU_UUID, gpu.uuid),),
            samples=(Sample(GPU_UTILIZATION, value),),
            standalone=True,
        )
        for gpu in SCENARIO.hardware.gpus
    )
    cpus = {cpu: CpuTimes(cpu, (("user", value * cpu),)) for cpu in range(16)}
    return (CollectorRun("test", True, 0.0, Readings(devices=gpus, cpu_times=cpus)),)


def _join(
    pods: tuple[PodResources, ...],
    value: float,
    cache: JoinCache | None,
    *,
    allocatable: AllocatableResources = ALLOCATABLE,
    cpu_numa: dict[int, int] = CPU_NUMA,
) -> Snapshot:
    return join_snapshot(
        node="n",
        collected_at=value,
        kubelet=KUBELET,
        pods=pods,
        allocatable=allocatable,
        cpu_numa=cpu_numa,
        collector_runs=_runs(value),
        cache=cache,
    )


class TestJoinCache:
    def test_churn_with_a_cache_joins_what_a_join_from_scratch_joins(self) -> None:
        """One pod in ten replaced and every reading changed: the same snapshot as without
        the cache, and the pods that hold nothing with readings are the last poll's views."""
        before, known = pods_from_list_response_reusing(
            list_response_to_proto(SCENARIO.state_at(0).pods), {}
        )
        after, _ = pods_from_list_response_reusing(
            list_response_to_proto(SCENARIO.state_at(1).pods), known
        )
        cache = JoinCache()
        first = _join(before, 1.0, cache)
        cached = _join(after, 2.0, cache)

        reused = [any(view is old for old in first.pods) for view in cached.pods]
        assert _join(after, 2.0, None) == cached
        assert any(reused)
        assert not all(reused)

    def test_duplicates_are_dropped_the_same_with_a_cache(self) -> None:
        """A reply listing a pod, a container and a device ID twice (kubelet restarts do)
        gives one series each on the first join and on every cached join after it."""
        pod = next(p for p in SCENARIO.state_at(0).pods if p.containers[0].devices)
        container = pod.containers[0]
        group = container.devices[0]
        doubled = replace(
            pod,
            containers=(
                replace(container, devices=(replace(group, device_ids=group.device_ids * 2),)),
                container,
            ),
        )
        pods = (doubled, doubled, replace(doubled, containers=(container,)))
        cache = JoinCache()
        cold = _join(pods, 1.0, None)
        assert _join(pods, 1.0, cache) == cold
        assert _join(pods, 1.0, cache) == cold
        assert [len(p.containers) for p in cold.pods] == [1]
        held = [d.device_id for d in cold.pods[0].containers[0].devices]
        assert held == list(group.device_ids)

    def test_allocatable_totals_follow_a_new_allocatable_or_cpu_map(self) -> None:
        """The node's allocatable totals are kept with the views: a new allocatable reply
        or CPU map counts them again, as a join from scratch does."""
        pods = SCENARIO.state_at(0).pods
        fewer = replace(
            ALLOCATABLE, devices=ALLOCATABLE.devices[1:], cpu_ids=ALLOCATABLE.cpu_ids[2:]
        )
        one_node = dict.fromkeys(range(16), 0)
        cache = JoinCache()
        _join(pods, 1.0, cache)
        first = _join(pods, 1.0, None)
        for allocatable, cpu_numa in ((fewer, CPU_NUMA), (fewer, one_node)):
            cached = _join(pods, 1.0, cache, allocatable=allocatable, cpu_numa=cpu_numa)
            assert cached == _join(pods, 1.0, None, allocatable=allocatable, cpu_numa=cpu_numa)
        assert cached.allocatable_devices != first.allocatable_devices
        assert cached.allocatable_cpus == (NodeCount(("0",), len(fewer.cpu_ids)),)

    def test_devices_nobody_holds_keep_their_views_while_the_inventory_is_the_same(
        self,
    ) -> None:
        """A join after churn takes the views of the devices no container holds as the
        last join made them, the very objects (neither the join nor the render looks
        into them again), and is the join from scratch; another inventory (a device
        gone, one on another NUMA node) makes them anew, as a join from scratch does."""
        pooled = replace(
            ALLOCATABLE,
            devices=(
                *ALLOCATABLE.devices,
                *(DeviceGroup("rdma/shared_a", (str(n),), (n % 2,)) for n in range(100)),
            ),
        )
        before, known = pods_from_list_response_reusing(
            list_response_to_proto(SCENARIO.state_at(0).pods), {}
        )
        after, _ = pods_from_list_response_reusing(
            list_response_to_proto(SCENARIO.state_at(1).pods), known
        )
        cache = JoinCache()
        first = _join(before, 1.0, cache, allocatable=pooled)

        cached = _join(after, 2.0, cache, allocatable=pooled)

        free = [d for d in first.devices if d.allocatable and not d.owner.pod]
        assert (100, True) == (
            len(free),
            all(any(d is view for view in cached.devices) for d in free),
        )
        assert _join(after, 2.0, None, allocatable=pooled) == cached
        moved = replace(
            pooled,
            devices=(
                *pooled.devices[:-2],
                DeviceGroup("rdma/shared_a", ("98",), (1,)),  # was on 0; 99 is gone
            ),
        )
        changed = _join(after, 2.0, cache, allocatable=moved)
        assert _join(after, 2.0, None, allocatable=moved) == changed
        assert [("98", (1,))] == [
            (d.device_id, d.numa_nodes) for d in changed.devices if d.device_id in ("98", "99")
        ]

    def test_churn_diff_over_cached_joins_is_the_diff_over_joins_from_scratch(self) -> None:
        """diff_allocations looks only into pod views the join did not keep: the changes
        it finds between cached joins are those between joins from scratch."""
        before, known = pods_from_list_response_reusing(
            list_response_to_proto(SCENARIO.state_at(0).pods), {}
        )
        after, _ = pods_from_list_response_reusing(
            list_response_to_proto(SCENARIO.state_at(1).pods), known
        )
        cache = JoinCache()
        cached = diff_allocations(_join(before, 1.0, cache), _join(after, 2.0, cache))
        cold = diff_allocations(_join(before, 1.0, None), _join(after, 2.0, None))
        assert cached == cold
        assert cold  # the scenario moves devices between its two states


class TestDraNumaFromReadings:
    """A DRA device's NUMA node comes from this poll's readings (its PCI function, found
    through the checkpoint or NVML), not from the kubelet: a view made while a collector
    failed must not keep it missing while the pod stays the same."""

    DRA = DraState(
        devices=(
            DraDevice(
                "gpu.nvidia.com",
                "node-a",
                "gpu-0",
                (HardwareKey(KeyKind.PCI, "0000:af:00.0"),),
                "checkpoint",
            ),
        )
    )
    CLAIM = DynamicResource("claim", "ns", (ClaimDevice("gpu.nvidia.com", "node-a", "gpu-0"),))
    POD = PodResources(
        "ns", "p", (ContainerResources("c", cpu_ids=(0, 1), dynamic_resources=(CLAIM,)),)
    )
    PCI_READ = (
        CollectorRun(
            "pci",
            True,
            0.0,
            Readings(pci_devices=(PciDevice("0000:af:00.0", "0x10de", "0x2330", "0x030200", 1),)),
        ),
    )
    PCI_FAILED = (CollectorRun("pci", False, 0.0, Readings(), error="timeout"),)
    ALLOCATABLE = AllocatableResources(cpu_ids=tuple(range(16)))

    def _join(self, runs: tuple[CollectorRun, ...], cache: JoinCache | None = None) -> Snapshot:
        return join_snapshot(
            node="n",
            collected_at=1.0,
            kubelet=KUBELET,
            pods=(self.POD,),
            allocatable=self.ALLOCATABLE,
            cpu_numa=CPU_NUMA,
            dra=self.DRA,
            collector_runs=runs,
            cache=cache,
        )

    def test_a_cached_view_follows_the_numa_node_found_later(self) -> None:
        cache = JoinCache()
        first = self._join(self.PCI_FAILED, cache)
        assert first.pods[0].containers[0].claim_devices[0].numa_nodes == ()
        cached = self._join(self.PCI_READ, cache)
        fresh = self._join(self.PCI_READ)
        assert cached.pods == fresh.pods
        assert fresh.pods[0].containers[0].numa_aligned is False  # GPU on 1, CPUs on 0
        again = self._join(self.PCI_READ, cache)  # and kept from then on
        assert again.pods[0] is cached.pods[0]

    def test_a_view_kept_over_failed_polls_follows_the_numa_node_found_later(self) -> None:
        """A view kept from the cache through a second failed poll still gets its DRA
        device's NUMA node (and alignment) once the PCI collector reads again."""
        cache = JoinCache()
        first = self._join(self.PCI_FAILED, cache)
        kept = self._join(self.PCI_FAILED, cache)
        assert kept.pods[0] is first.pods[0]
        late = self._join(self.PCI_READ, cache)
        assert late.pods == self._join(self.PCI_READ).pods
        assert late.pods[0].containers[0].claim_devices[0].numa_nodes == (1,)

    def test_refreshing_readings_asks_for_a_join_when_it_changes(self) -> None:
        first = self._join(self.PCI_FAILED)
        assert (
            refresh_readings(first, collected_at=2.0, kubelet=KUBELET, collector_runs=self.PCI_READ)
            is None
        )
        read = self._join(self.PCI_READ)
        kept = refresh_readings(
            read, collected_at=2.0, kubelet=KUBELET, collector_runs=self.PCI_READ
        )
        assert kept is not None
        assert kept.pods is read.pods
