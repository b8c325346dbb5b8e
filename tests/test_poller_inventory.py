"""What a poll publishes of the kubelet's inventory (GetAllocatableResources) when that
call fails, is missing or never answered, and what it says of the kubelet meanwhile."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from manualclock import ManualClock
from structlog.testing import capture_logs

from exporter.collectors.runner import CollectorRunner
from exporter.kubelet.client import KubeletClient
from exporter.model import AllocatableResources
from exporter.poller import Poller
from exporter.sim.kubelet import V1_GET_ALLOCATABLE, V1_LIST
from exporter.sim.node import SimulatedNode
from exporter.store import SnapshotStore


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000.0)


@pytest.fixture
def monotonic() -> ManualClock:
    return ManualClock(500.0)


@pytest.fixture
async def poller(
    sim_node: SimulatedNode, clock: ManualClock, monotonic: ManualClock
) -> AsyncIterator[Poller]:
    client = KubeletClient(
        socket_path=sim_node.socket_path, max_message_bytes=1 << 20, timeout_s=2.0
    )
    yield Poller(
        client=client,
        runner=CollectorRunner([], timeout_s=1.0),
        store=SnapshotStore(),
        node="demo-node",
        interval_s=1.0,
        clock=clock,
        monotonic=monotonic,
    )
    await client.close()


class TestInventory:
    async def test_an_inventory_failing_is_kept_from_the_last_poll_and_said(
        self, sim_node: SimulatedNode, poller: Poller
    ) -> None:
        """GetAllocatableResources failing beside a List that answers: this poll's pods,
        the last inventory, kubelet up, and last_error saying why until it answers."""
        first = (await poller.poll_once()).snapshot
        sim_node.kubelet.undecodable = {V1_GET_ALLOCATABLE}
        failing = (await poller.poll_once()).snapshot
        sim_node.kubelet.undecodable = set()
        back = (await poller.poll_once()).snapshot
        assert first.allocatable.devices
        assert (failing.allocatable, failing.allocatable_known, failing.kubelet.up) == (
            first.allocatable,
            True,
            True,
        )
        assert (failing.kubelet.last_error or "").startswith("GetAllocatableResources: ")
        assert back.kubelet.last_error is None

    async def test_an_inventory_that_never_answered_is_unknown(
        self, sim_node: SimulatedNode, poller: Poller
    ) -> None:
        """Failing from the first poll on: no inventory, and known to be none (no held
        device is "no longer offered" for its absence)."""
        sim_node.kubelet.undecodable = {V1_GET_ALLOCATABLE}
        snapshot = (await poller.poll_once()).snapshot
        assert snapshot.pods
        assert (snapshot.allocatable, snapshot.allocatable_known, snapshot.kubelet.up) == (
            AllocatableResources(),
            False,
            True,
        )

    async def test_an_inventory_gone_missing_is_dropped(
        self, sim_node: SimulatedNode, poller: Poller
    ) -> None:
        """A kubelet restarted with GetAllocatableResources disabled has no inventory:
        the last one is not served as if it still held, and that is no error."""
        first = (await poller.poll_once()).snapshot
        sim_node.kubelet.disabled = {V1_GET_ALLOCATABLE}
        snapshot = (await poller.poll_once()).snapshot
        assert first.allocatable.devices
        assert (snapshot.allocatable, snapshot.allocatable_known) == (AllocatableResources(), False)
        assert (snapshot.kubelet.up, snapshot.kubelet.last_error) == (True, None)

    async def test_list_failing_is_the_error_said_whatever_else_fails(
        self, sim_node: SimulatedNode, poller: Poller
    ) -> None:
        """Both calls failing: last_error is List's, the one that took kubelet_up down."""
        await poller.poll_once()
        sim_node.kubelet.undecodable = {V1_LIST, V1_GET_ALLOCATABLE}
        snapshot = (await poller.poll_once()).snapshot
        assert snapshot.kubelet.up is False
        assert (snapshot.kubelet.last_error or "").startswith("List: ")


class TestOutageLog:
    async def test_the_failure_says_how_old_the_data_served_is(
        self, sim_node: SimulatedNode, poller: Poller, clock: ManualClock, monotonic: ManualClock
    ) -> None:
        """kubelet_failed gives the age of the data still served, in seconds."""
        await poller.poll_once()
        clock.now += 12.5
        monotonic.now += 12.5
        sim_node.kubelet.undecodable = {V1_LIST}
        with capture_logs() as logs:
            await poller.poll_once()
        (failed,) = [e for e in logs if e["event"] == "kubelet_failed"]
        assert (failed["serving_snapshot_age_seconds"], failed["kubelet_up"]) == (12.5, False)

    async def test_the_age_said_is_not_moved_by_a_wall_clock_step(
        self, sim_node: SimulatedNode, poller: Poller, clock: ManualClock, monotonic: ManualClock
    ) -> None:
        """12.5 s after the last good List, with NTP having stepped the wall clock back an
        hour meanwhile: the data served is 12.5 s old, not -3587.5."""
        await poller.poll_once()
        monotonic.now += 12.5
        clock.now += 12.5 - 3600
        sim_node.kubelet.undecodable = {V1_LIST}
        with capture_logs() as logs:
            await poller.poll_once()
        (failed,) = [e for e in logs if e["event"] == "kubelet_failed"]
        assert failed["serving_snapshot_age_seconds"] == 12.5

    async def test_a_kubelet_that_never_answered_serves_data_of_no_age(
        self, sim_node: SimulatedNode, poller: Poller
    ) -> None:
        """List failing from the first poll on: no kubelet data is served, so the failure
        gives it no age, and the snapshot holds no time to take one from (/readyz says
        'no kubelet data yet', not that data is as old as the node's uptime)."""
        sim_node.kubelet.undecodable = {V1_LIST}
        with capture_logs() as logs:
            snapshot = (await poller.poll_once()).snapshot
        (failed,) = [e for e in logs if e["event"] == "kubelet_failed"]
        assert (None, None, None) == (
            failed.get("serving_snapshot_age_seconds", "absent"),
            snapshot.collected_at,
            snapshot.collected_monotonic,
        )
