"""A poll whose kubelet replies say what the last ones said skips the join: byte-identical
replies skip conversion too; the same content in the kubelet's map order is converted
and found equal."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from manualclock import ManualClock
from structlog.testing import capture_logs

from exporter.app import Exporter, demo_collectors
from exporter.cli import parse_config
from exporter.collectors.base import Collector, CollectorError
from exporter.join import join_snapshot
from exporter.kubelet.stats import KubeletRequestStats
from exporter.model import Snapshot
from exporter.poller import Poller
from exporter.sim.kubelet import V1_GET_ALLOCATABLE, V1_LIST
from exporter.sim.node import SimulatedNode


def _failing_while(
    collectors: list[Collector], name: str, error: Exception, *, on: bool
) -> list[bool]:
    """Make the named collector raise ``error`` while the returned flag's [0] is True
    (set to ``on`` now); it collects as before otherwise."""
    collector = next(c for c in collectors if c.name == name)
    collect = collector.collect
    failing = [on]

    def collect_unless_failing() -> Any:
        if failing[0]:
            raise error
        return collect()

    collector.collect = collect_unless_failing  # type: ignore[method-assign]
    return failing


def _comparable(snapshot: Snapshot) -> Snapshot:
    """The snapshot without what the poller stamps on it (duration, interval, request
    counts, when the readings were taken, the data's monotonic time), for comparing with
    a join made by hand."""
    return replace(
        snapshot,
        poll_duration_seconds=0.0,
        poll_interval_seconds=None,
        kubelet_requests=KubeletRequestStats(),
        readings_at=None,
        collected_monotonic=None,
    )


class TestUnchangedReplies:
    @pytest.mark.parametrize("kubelet_order", [True, False], ids=["map-order", "byte-identical"])
    async def test_skip_the_join_and_still_refresh_timestamps_and_telemetry(
        self, sim_node: SimulatedNode, kubelet_order: bool
    ) -> None:
        """Same content: no join, no allocation log -- but the snapshot's time and every
        reading are this poll's, exactly as a full join would have them."""
        sim_node.kubelet.kubelet_order = kubelet_order
        clock = ManualClock(1_000.0)
        config = parse_config(
            [*sim_node.exporter_flags(), "--node-name", "demo-node", "--collector.gpu_processes"],
            {},
        )
        exporter = Exporter(config, collectors=demo_collectors(config, sim_node, clock=clock))
        poller = Poller(
            client=exporter.client,
            runner=exporter.runner,
            store=exporter.store,
            node="demo-node",
            interval_s=10.0,
            clock=clock,
        )
        try:
            first = (await poller.poll_once()).snapshot
            first_reply = exporter.client._pods_memo._raw  # what List answered, as bytes
            clock.now += 10.0
            with capture_logs() as logs:
                second = (await poller.poll_once()).snapshot
            # The case at hand: in map order the second reply is other bytes.
            assert (exporter.client._pods_memo._raw != first_reply) is kubelet_order
            pods = await exporter.client.list_pods()
            converted_once = pods is await exporter.client.list_pods()
            full = join_snapshot(
                node="demo-node",
                collected_at=second.collected_at,
                kubelet=second.kubelet,
                pods=pods,
                allocatable=await exporter.client.get_allocatable(),
                cpu_numa=dict(second.cpu_numa),
                dra=second.dra,
                collector_runs=second.collectors,
            )
        finally:
            await exporter.close()

        # Readings live beside the views: every pod's view is kept as it was, not re-joined.
        untouched = [a is b for a, b in zip(first.pods, second.pods, strict=True)]
        readings = [
            [s.hardware_of(d).reading for d in s.devices if s.hardware_of(d).reading]
            for s in (first, second)
        ]
        assert converted_once
        assert untouched
        assert all(untouched)
        assert [] == [e for e in logs if e["event"] == "allocation_changed"]
        assert 10.0 == (second.collected_at or 0) - (first.collected_at or 0)
        assert readings[0] != readings[1]
        assert second.gpu_processes  # re-attributed too: processes come and go
        assert _comparable(full) == _comparable(second)

    async def test_a_changed_reply_is_joined_again(self, sim_node: SimulatedNode) -> None:
        """A tick that changes the pods is converted and joined: its changes are logged."""
        config = parse_config(
            [*sim_node.exporter_flags(), "--node-name", "demo-node", "--collector.gpu_processes"],
            {},
        )
        exporter = Exporter(config, collectors=demo_collectors(config, sim_node))
        try:
            await exporter.poller.poll_once()
            for _ in range(3):  # the demo's batch pod goes away after CHURN_PERIOD_TICKS
                await sim_node.advance()
            with capture_logs() as logs:
                await exporter.poller.poll_once()
        finally:
            await exporter.close()
        assert [e for e in logs if e["event"] == "allocation_changed"]


class TestCpuNumaMap:
    async def test_a_changed_map_is_joined_again_and_an_unchanged_one_is_not(
        self, sim_node: SimulatedNode
    ) -> None:
        """CPUs moving to another NUMA node (the cpulists rewritten) reach the snapshot
        at the next poll; the poll after that, with nothing changed, keeps every view."""
        config = parse_config([*sim_node.exporter_flags(), "--node-name", "demo-node"], {})
        exporter = Exporter(config, collectors=demo_collectors(config, sim_node))
        nodes = sim_node.sysfs / "devices" / "system" / "node"
        try:
            before = (await exporter.poller.poll_once()).snapshot
            for name, cpus in (("node0", "0-15\n"), ("node1", "16-63\n")):
                staged = nodes / name / "cpulist.new"
                staged.write_text(cpus)
                staged.replace(nodes / name / "cpulist")  # as the fixtures write: atomically
            moved = (await exporter.poller.poll_once()).snapshot
            kept = (await exporter.poller.poll_once()).snapshot
        finally:
            await exporter.close()
        # hpc/solver-0 holds CPUs 14-17 and 42-45: two of them change node.
        assert [(("0", 4), ("1", 4)), (("0", 2), ("1", 6))] == [
            _cpus_by_numa(s, "solver-0") for s in (before, moved)
        ]
        assert (16, 1) in moved.cpu_numa
        assert moved.cpu_numa == kept.cpu_numa
        assert moved.pods
        assert all(a is b for a, b in zip(moved.pods, kept.pods, strict=True))


def _cpus_by_numa(snapshot: Snapshot, pod: str) -> tuple[tuple[str, int], ...]:
    (view,) = [p for p in snapshot.pods if p.name == pod]
    (container,) = view.containers
    return tuple(sorted(container.cpus_by_numa))


class TestLateReadings:
    async def test_a_dra_device_numa_node_found_a_poll_late_is_joined(
        self, sim_node: SimulatedNode
    ) -> None:
        """The pci collector fails on the first poll: the demo's DRA devices have no NUMA
        node. The next poll's replies are byte-identical, but their readings give the
        NUMA nodes: the poll joins again instead of only refreshing readings."""
        config = parse_config([*sim_node.exporter_flags(), "--node-name", "demo-node"], {})
        collectors = demo_collectors(config, sim_node)
        failing = _failing_while(collectors, "pci", CollectorError("sysfs busy"), on=True)
        exporter = Exporter(config, collectors=collectors)
        try:
            first = (await exporter.poller.poll_once()).snapshot
            failing[0] = False
            second = (await exporter.poller.poll_once()).snapshot
        finally:
            await exporter.close()

        def dra_numa(snapshot: Snapshot) -> list[tuple[int, ...]]:
            return [d.numa_nodes for d in snapshot.devices if d.claim is not None]

        assert dra_numa(first)
        assert all(nodes == () for nodes in dra_numa(first))
        assert any(nodes != () for nodes in dra_numa(second))

    async def test_a_poll_failing_after_its_join_is_not_taken_as_published(
        self, sim_node: SimulatedNode, monkeypatch: Any
    ) -> None:
        """The join's inputs are remembered before the snapshot is published: a poll that
        failed in between (here the allocation diff) published nothing, and the next
        polls must not refresh the old snapshot as if it were that join's."""
        import exporter.poller

        config = parse_config([*sim_node.exporter_flags(), "--node-name", "demo-node"], {})
        exporter_ = Exporter(config, collectors=demo_collectors(config, sim_node))
        real = exporter.poller.diff_allocations
        calls: list[int] = []

        def fails_once(*args: Any) -> Any:
            calls.append(1)
            if len(calls) == 1:  # the poll after the kubelet changed (the first is not diffed)
                raise RuntimeError("diff failed once")
            return real(*args)

        monkeypatch.setattr(exporter.poller, "diff_allocations", fails_once)
        try:
            await exporter_.poller.poll_once()
            for _ in range(3):
                await sim_node.advance()
            with pytest.raises(RuntimeError):
                await exporter_.poller.poll_once()
            published = (await exporter_.poller.poll_once()).snapshot
            listed = await exporter_.client.list_pods()
        finally:
            await exporter_.close()
        assert sorted((p.namespace, p.name) for p in published.pods) == sorted(
            (p.namespace, p.name) for p in listed
        )


class TestNodeStateKept:
    async def test_a_cpu_map_whose_source_went_missing_is_kept_from_the_last_read(
        self, sim_node: SimulatedNode
    ) -> None:
        """The topology collector finding no sysfs NUMA tree (unavailable, not failed) read
        nothing: the CPU-to-NUMA map of the last poll that read it stays."""
        from exporter.errors import CollectorUnavailable

        config = parse_config([*sim_node.exporter_flags(), "--node-name", "demo-node"], {})
        collectors = demo_collectors(config, sim_node)
        missing = _failing_while(
            collectors, "topology", CollectorUnavailable("no /sys/devices/system/node"), on=False
        )
        exporter = Exporter(config, collectors=collectors)
        try:
            first = (await exporter.poller.poll_once()).snapshot
            missing[0] = True
            second = (await exporter.poller.poll_once()).snapshot
        finally:
            await exporter.close()
        assert first.cpu_numa
        assert second.cpu_numa == first.cpu_numa


@pytest.mark.parametrize(
    "kubelet",
    ["no GetAllocatableResources", "GetAllocatableResources disabled", "v1alpha1 List only"],
)
async def test_an_unchanged_node_is_not_joined_again_whatever_the_kubelet_lacks(
    sim_node: SimulatedNode, kubelet: str
) -> None:
    """The poller skips the join (and keeps its views and allocations number)
    when the kubelet's replies are unchanged; on a kubelet without the inventory (its
    stand-in AllocatableResources() is a new object each poll) or answering through the
    v1alpha1 fallback (converted anew each poll, no memo) every poll is a full join."""
    knobs = sim_node.kubelet
    if kubelet == "no GetAllocatableResources":
        knobs.unimplemented.add(V1_GET_ALLOCATABLE)
    elif kubelet == "GetAllocatableResources disabled":
        knobs.disabled.add(V1_GET_ALLOCATABLE)
    else:
        knobs.unimplemented.add(V1_LIST)
    config = parse_config([*sim_node.exporter_flags(), "--node-name", "demo-node"], {})
    exporter = Exporter(config, collectors=demo_collectors(config, sim_node))
    try:
        first = await exporter.poller.poll_once()
        second = await exporter.poller.poll_once()
    finally:
        await exporter.close()
    assert first.snapshot.pods
    assert second.allocations == first.allocations
    assert all(a is b for a, b in zip(first.snapshot.pods, second.snapshot.pods, strict=True))
