"""After a large kubelet reply goes away, the poller hands the freed heap back to the OS."""

from __future__ import annotations

from collections.abc import Container, Sequence

import pytest

import exporter.poller
from exporter.collectors.runner import CollectorRunner
from exporter.kubelet.client import KubeletClient
from exporter.poller import LARGE_REPLY_BYTES, TRIM_POLLS, Poller
from exporter.sim.node import SimulatedNode
from exporter.store import SnapshotStore

LIMIT = 4 << 20  # --kubelet.max-message-bytes: a List padded past it is refused


async def _trimming_polls(
    sim_node: SimulatedNode,
    monkeypatch: pytest.MonkeyPatch,
    paddings: Sequence[int],
    *,
    scraped: Container[int] = (),
) -> list[int]:
    """One poll per padding of the List reply, numbered from 1: the polls that trimmed.
    A poll whose reply is over LIMIT must find the kubelet down (refused), any other up.
    After the polls in ``scraped`` the page is rendered, as a scrape renders it."""
    trims: list[int] = []
    polls = 0

    def trim() -> bool:
        trims.append(polls)
        return True

    monkeypatch.setattr(exporter.poller, "trim", trim)
    client = KubeletClient(socket_path=sim_node.socket_path, max_message_bytes=LIMIT, timeout_s=5)
    store = SnapshotStore()
    poller = Poller(
        client=client,
        runner=CollectorRunner([], timeout_s=1.0),
        store=store,
        node="demo-node",
        interval_s=10.0,
    )
    try:
        for padding in paddings:
            sim_node.kubelet.padding_bytes = padding
            polls += 1
            published = await poller.poll_once()
            assert published.snapshot.kubelet.up == (padding <= LIMIT)
            if polls in scraped:
                await store.exposition(published)
    finally:
        await client.close()
    return trims


async def test_the_polls_after_a_large_reply_trim_the_heap_and_then_stop(
    sim_node: SimulatedNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No trim while replies are small or large; once a large one is followed by a small
    one, each of the next TRIM_POLLS polls trims, then none does."""
    large = LARGE_REPLY_BYTES
    paddings = (0, 0, large, large, *[0] * (TRIM_POLLS + 3))
    trims = await _trimming_polls(sim_node, monkeypatch, paddings)
    assert list(range(5, 5 + TRIM_POLLS)) == trims


async def test_a_large_reply_kept_through_refused_ones_is_trimmed_once_let_go(
    sim_node: SimulatedNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large reply, then replies over --kubelet.max-message-bytes (refused: the large
    data stays served, as the last good), then small ones: the heap is trimmed on the
    TRIM_POLLS polls after the small reply replaced the large data, not while it was
    held. Trimming only during the refusals, as it once did, kept ~100 MiB resident."""
    refused = TRIM_POLLS + 2
    paddings = (0, LARGE_REPLY_BYTES, *[LIMIT + 1] * refused, *[0] * (TRIM_POLLS + 2))
    trims = await _trimming_polls(sim_node, monkeypatch, paddings)
    first_small = 2 + refused + 1
    assert list(range(first_small, first_small + TRIM_POLLS)) == trims


async def test_trims_after_the_first_wait_for_the_large_datas_page_to_be_let_go(
    sim_node: SimulatedNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page rendered from the large data is freed when a scrape renders a newer one,
    however many polls later: one trim when the small reply arrives, the others from
    the poll after that scrape. Counting them from the small reply alone, as before,
    spent them while a slow scrape still held the page (a fault test kept +113 MiB)."""
    paddings = (0, LARGE_REPLY_BYTES, *[0] * (TRIM_POLLS + 6))
    trims = await _trimming_polls(sim_node, monkeypatch, paddings, scraped={2, 8})
    assert [3, *range(9, 9 + TRIM_POLLS - 1)] == trims


async def test_large_replies_again_stop_the_trims_until_let_go_again(
    sim_node: SimulatedNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large data let go, then large replies again: the trims stop while they come (the
    heap is in use), and the next small reply starts them over."""
    large = LARGE_REPLY_BYTES
    paddings = (0, large, 0, large, large, large, *[0] * (TRIM_POLLS + 1))
    trims = await _trimming_polls(sim_node, monkeypatch, paddings)
    assert [3, *range(7, 7 + TRIM_POLLS)] == trims
