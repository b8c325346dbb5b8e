"""Between polls 5 s or more apart no kubelet channel stays open (gRPC's threads idle);
the page says the interval."""

from __future__ import annotations

import grpc
import pytest

from exporter.collectors.runner import CollectorRunner
from exporter.exposition import render
from exporter.kubelet.client import KubeletClient
from exporter.poller import RELEASE_CHANNEL_MIN_INTERVAL_S, Poller
from exporter.sim.kubelet import V1_GET
from exporter.sim.node import SimulatedNode
from exporter.store import SnapshotStore


class CountingClient(KubeletClient):
    """The real client, counting the releases that closed a channel."""

    released = 0

    async def release_channel(self) -> None:
        had_channel = self._channel is not None
        await super().release_channel()
        self.released += had_channel and self._channel is None


def _poller(client: KubeletClient, *, interval_s: float) -> Poller:
    """A poller of the kubelet alone, no collectors."""
    return Poller(
        client=client,
        runner=CollectorRunner([], timeout_s=1.0),
        store=SnapshotStore(),
        node="demo-node",
        interval_s=interval_s,
    )


@pytest.mark.parametrize(
    ("interval_s", "released"),
    [(RELEASE_CHANNEL_MIN_INTERVAL_S, 3), (10.0, 3), (1.0, 0)],
)
async def test_polls_release_the_channel_from_5_s_apart(
    sim_node: SimulatedNode, interval_s: float, released: int
) -> None:
    """Each poll 5 s or more apart closes the channel it opened, and the next poll opens
    another and gets the same data; shorter intervals keep one channel (re-opening it
    would cost more than its idle threads do in between)."""
    client = CountingClient(
        socket_path=sim_node.socket_path, max_message_bytes=1 << 20, timeout_s=2.0
    )
    poller = _poller(client, interval_s=interval_s)
    try:
        pods = [len((await poller.poll_once()).snapshot.pods) for _ in range(3)]
    finally:
        await client.close()

    assert (client.released, pods[0] > 0, len(set(pods))) == (released, True, 1)


async def test_get_is_probed_again_after_the_kubelet_went_away_not_after_rate_limits(
    sim_node: SimulatedNode,
) -> None:
    """The Get probe (one call in 5 minutes) is made again at once after the kubelet
    could not be reached (a restart may be an upgrade), not after rate limiting: the
    kubelet's limit is shared by every client of the node, and it was exhausted."""
    client = KubeletClient(
        socket_path=sim_node.socket_path,
        max_message_bytes=1 << 20,
        timeout_s=2.0,
        backoff_initial_s=0.0,
        backoff_max_s=0.0,
    )
    poller = _poller(client, interval_s=1.0)
    kubelet = sim_node.kubelet
    try:
        await poller.poll_once()  # the first poll probes Get
        for _ in range(3):
            kubelet.force_code = grpc.StatusCode.RESOURCE_EXHAUSTED
            await poller.poll_once()
            kubelet.force_code = None
            await poller.poll_once()
        after_rate_limits = kubelet.calls[V1_GET]
        await kubelet.restart()
        kubelet.force_code = grpc.StatusCode.UNAVAILABLE
        await poller.poll_once()
        kubelet.force_code = None
        for _ in range(3):
            await poller.poll_once()
    finally:
        await client.close()

    assert (after_rate_limits, kubelet.calls[V1_GET]) == (1, 2)


async def test_the_page_says_the_poll_interval_its_data_may_lag_by(
    sim_node: SimulatedNode,
) -> None:
    """podresources_poll_interval_seconds is the poller's own interval: the stale-data
    alert waits 3 of them where that is longer than 2 minutes."""
    client = KubeletClient(
        socket_path=sim_node.socket_path, max_message_bytes=1 << 20, timeout_s=2.0
    )
    poller = _poller(client, interval_s=420.0)
    try:
        page = render((await poller.poll_once()).snapshot).page(openmetrics=False, gzipped=False)
    finally:
        await client.close()

    assert [b"podresources_poll_interval_seconds 420.0"] == [
        line for line in page.splitlines() if line.startswith(b"podresources_poll_interval")
    ]
