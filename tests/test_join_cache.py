"""join_snapshot with a JoinCache: pods reported again unchanged are not joined again."""

from __future__ import annotations

from dataclasses import replace

from exporter.collectors.gpu_metrics import GPU_UTILIZATION
from exporter.join import JoinCache, diff_allocations, join_snapshot
from exporter.kubelet.convert import list_response_to_proto, pods_from_list_response_reusing
from exporter.model import (
    AllocatableResources,
    CollectorRun,
    CpuTimes,
    DeviceReading,
    HardwareKey,
    KeyKind,
    KubeletStatus,
    NodeCount,
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
