"""After a large kubelet reply goes away, the poller hands the freed heap back to the OS."""

from __future__ import annotations

import pytest

import exporter.poller
from exporter.collectors.runner import CollectorRunner
from exporter.kubelet.client import KubeletClient
from exporter.poller import LARGE_REPLY_BYTES, TRIM_POLLS, Poller
from exporter.sim.node import SimulatedNode
from exporter.store import SnapshotStore


async def test_the_polls_after_a_large_reply_trim_the_heap_and_then_stop(
    sim_node: SimulatedNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No trim while replies are small or large; once a large one is followed by a small
    one, each of the next TRIM_POLLS polls trims, then none does."""
    trims: list[int] = []
    polls = 0
    monkeypatch.setattr(exporter.poller, "trim", lambda: trims.append(polls) or True)
    client = KubeletClient(socket_path=sim_node.socket_path, max_message_bytes=4 << 20, timeout_s=5)
    poller = Poller(
        client=client,
        runner=CollectorRunner([], timeout_s=1.0),
        store=SnapshotStore(),
        node="demo-node",
        interval_s=10.0,
    )
    try:
        for padding in (0, 0, LARGE_REPLY_BYTES, LARGE_REPLY_BYTES, *[0] * (TRIM_POLLS + 3)):
            sim_node.kubelet.padding_bytes = padding
            polls += 1
            await poller.poll_once()
    finally:
        await client.close()

    assert list(range(5, 5 + TRIM_POLLS)) == trims


async def test_a_large_reply_kept_through_refused_ones_is_trimmed_once_let_go(
    sim_node: SimulatedNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large reply, then replies over --kubelet.max-message-bytes (refused: the large
    data stays served, as the last good), then small ones: the heap is trimmed on the
    TRIM_POLLS polls after the small reply replaced the large data, not while it was
    held. Trimming only during the refusals, as it once did, kept ~100 MiB resident."""
    trims: list[int] = []
    polls = 0
    monkeypatch.setattr(exporter.poller, "trim", lambda: trims.append(polls) or True)
    limit = 4 << 20
    client = KubeletClient(socket_path=sim_node.socket_path, max_message_bytes=limit, timeout_s=5)
    poller = Poller(
        client=client,
        runner=CollectorRunner([], timeout_s=1.0),
        store=SnapshotStore(),
        node="demo-node",
        interval_s=10.0,
    )
    refused = TRIM_POLLS + 2
    try:
        for padding in (0, LARGE_REPLY_BYTES, *[limit + 1] * refused, *[0] * (TRIM_POLLS + 2)):
            sim_node.kubelet.padding_bytes = padding
            polls += 1
            published = await poller.poll_once()
            assert published.snapshot.kubelet.up == (padding <= limit)
    finally:
        await client.close()

    first_small = 2 + refused + 1
    assert list(range(first_small, first_small + TRIM_POLLS)) == trims
