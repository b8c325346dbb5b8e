"""The /metrics page is rendered by the first scrape of a snapshot, not by the poll."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

import exporter.store
from exporter.app import Exporter, demo_collectors
from exporter.cli import parse_config
from exporter.exposition import Exposition, render
from exporter.model import DeviceGroup
from exporter.sim.dra import SimDraClaim
from exporter.sim.hardware import SimHardware
from exporter.sim.node import SimulatedNode
from exporter.sim.scenario import DemoScenario, KubeletState
from exporter.store import Published


class CountedRender:
    """The real render, counted; ``fail_next`` makes the next call raise ``error``
    first, ``failing`` every call while it is set, ``entered`` is set once a call has begun,
    ``held`` keeps each call waiting in its thread until it is set, and ``previous``
    is the page each call was given to chain to."""

    def __init__(self) -> None:
        self.calls = 0
        self.previous: list[Exposition | None] = []
        self.fail_next = False
        self.failing = False
        self.error: Exception = RuntimeError("render broke")
        self.entered = threading.Event()
        self.held = threading.Event()
        self.held.set()

    def __call__(self, *args: Any, **kwargs: Any) -> Exposition:
        self.calls += 1
        self.previous.append(kwargs.get("previous"))
        self.entered.set()
        self.held.wait(timeout=10)
        if self.fail_next or self.failing:
            self.fail_next = False
            raise self.error
        return render(*args, **kwargs)


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> CountedRender:
    counted = CountedRender()
    monkeypatch.setattr(exporter.store, "render", counted)
    return counted


@pytest.fixture
async def demo(sim_node: SimulatedNode) -> AsyncIterator[Exporter]:
    config = parse_config([*sim_node.exporter_flags(), "--node-name", "demo-node"], {})
    built = Exporter(config, collectors=demo_collectors(config, sim_node))
    yield built
    await built.close()


async def test_polls_render_nothing_and_concurrent_first_scrapes_render_once(
    demo: Exporter, renders: CountedRender
) -> None:
    for _ in range(3):
        published = await demo.poller.poll_once()
    assert 0 == renders.calls
    assert published.page is None

    pages = await asyncio.gather(*(demo.store.exposition(published) for _ in range(10)))

    assert 1 == renders.calls
    assert all(page is pages[0] for page in pages)
    assert pages[0] is await demo.store.exposition(published)
    assert 1 == renders.calls
    assert b"podresources_container_device_info{" in pages[0].text


async def test_a_render_after_unscraped_snapshots_is_what_a_fresh_render_makes(
    demo: Exporter, sim_node: SimulatedNode
) -> None:
    """The store chains each render to the last one rendered, not to the last poll: a
    snapshot whose allocations changed in an unscraped poll gets its new families."""
    scraped = await demo.poller.poll_once()
    first = await demo.store.exposition(scraped)
    for _ in range(3):  # the demo's batch pod goes away
        await sim_node.advance()
    changed = await demo.poller.poll_once()
    steady = await demo.poller.poll_once()  # the same replies as the unscraped poll

    page = await demo.store.exposition(steady)

    assert scraped.allocations != changed.allocations == steady.allocations
    fresh = render(steady.snapshot)
    assert fresh.families == page.families
    # What chaining to the last poll instead would have served: the old allocations.
    stale = render(steady.snapshot, previous=first, same_allocations=True)
    assert stale.families != fresh.families


async def _scrape_held_in_render(
    demo: Exporter, renders: CountedRender
) -> tuple[Published, asyncio.Future[Exposition]]:
    """A poll's snapshot, and its first scrape, held inside render() until
    ``renders.held`` is set."""
    published = await demo.poller.poll_once()
    renders.held.clear()
    scrape = asyncio.ensure_future(demo.store.exposition(published))
    assert await asyncio.to_thread(renders.entered.wait, 10)  # in render(), held there
    return published, scrape


async def test_a_scraper_that_goes_away_leaves_the_render_to_the_next(
    demo: Exporter, renders: CountedRender
) -> None:
    """The scraper is cancelled while the render runs in its thread: the render goes on
    and its page is the next scraper's (without the shield it would be cancelled too and
    rendered again)."""
    published, gone = await _scrape_held_in_render(demo, renders)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    renders.held.set()

    page = await demo.store.exposition(published)

    assert (1, True) == (renders.calls, page.series > 0)


async def test_a_cancelled_render_is_started_again_by_the_next_scrape(
    demo: Exporter, renders: CountedRender
) -> None:
    """A render task found cancelled (nothing here cancels it; a loop shutting down
    does) is no page and no error: the next caller renders anew, not raising the
    CancelledError of a render it never asked for."""
    published, gone = await _scrape_held_in_render(demo, renders)
    assert published.page is not None
    published.page.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    renders.held.set()

    page = await demo.store.exposition(published)

    assert (2, True) == (renders.calls, page.series > 0)


async def test_renders_of_two_snapshots_run_one_after_the_other(
    demo: Exporter, renders: CountedRender
) -> None:
    """Two snapshots scraped at once: the second render waits for the first, and is
    chained to its page as any render is to the last one made."""
    first = await demo.poller.poll_once()
    second = await demo.poller.poll_once()

    pages = await asyncio.gather(demo.store.exposition(first), demo.store.exposition(second))

    assert (2, None, True) == (
        len(renders.previous),
        renders.previous[0],
        renders.previous[1] is pages[0],
    )


async def test_a_snapshot_of_the_same_allocations_takes_the_container_lines_whole(
    demo: Exporter,
) -> None:
    """The store tells render when a snapshot was joined from the data the last page
    was (the same allocations number): its container lines are taken whole, the very
    table, not looked up again container by container."""
    first = await demo.poller.poll_once()
    second = await demo.poller.poll_once()
    page = await demo.store.exposition(first)

    again = await demo.store.exposition(second)

    assert (first.allocations, True) == (
        second.allocations,
        again.cache.containers is page.cache.containers,
    )


async def test_a_failed_first_render_is_tried_again_by_the_next_scrape(
    demo: Exporter, renders: CountedRender
) -> None:
    """With no page to fall back on, the error reaches the scraper (a 500)."""
    published = await demo.poller.poll_once()
    renders.fail_next = True
    with pytest.raises(RuntimeError, match="render broke"):
        await demo.store.exposition(published)

    page = await demo.store.exposition(published)

    assert 2 == renders.calls
    assert page.series > 0


async def test_a_failed_render_serves_the_last_page_and_the_next_poll_renders_anew(
    demo: Exporter, renders: CountedRender
) -> None:
    """Once a page exists, a snapshot whose render fails gets that page (its snapshot's
    timestamp shows its age), said once in the log; the next snapshot renders anew."""
    last = await demo.store.exposition(await demo.poller.poll_once())
    broken = await demo.poller.poll_once()
    renders.fail_next = True
    with capture_logs() as logs:
        served = [await demo.store.exposition(broken) for _ in range(3)]
    next_poll = await demo.poller.poll_once()
    fresh = await demo.store.exposition(next_poll)

    assert all(page is last for page in served)
    assert [("render_failed", broken.snapshot.collected_at)] == [
        (e["event"], e["collected_at"]) for e in logs if e["log_level"] == "error"
    ]
    assert 3 == renders.calls
    assert fresh is not last
    assert fresh.families == render(next_poll.snapshot).families


async def test_a_render_failing_with_any_error_serves_the_last_page(
    demo: Exporter, renders: CountedRender
) -> None:
    """Not only a RuntimeError: a render that raises whatever a bug raises (a name the
    writer refuses is a ValueError) gets the last page as well."""
    last = await demo.store.exposition(await demo.poller.poll_once())
    renders.fail_next = True
    renders.error = ValueError("family 'x:y': names outside the legacy character set")
    with capture_logs() as logs:
        served = await demo.store.exposition(await demo.poller.poll_once())

    assert (True, ["render_failed"]) == (
        served is last,
        [e["event"] for e in logs if e["log_level"] == "error"],
    )


async def test_a_render_that_keeps_failing_logs_its_traceback_once(
    demo: Exporter, renders: CountedRender
) -> None:
    """A bug that breaks every snapshot's render gives one traceback, then one line
    per snapshot naming the error; the first render that works again says so."""
    last = await demo.store.exposition(await demo.poller.poll_once())
    renders.failing = True
    with capture_logs() as logs:
        for _ in range(3):
            assert last is await demo.store.exposition(await demo.poller.poll_once())
        renders.failing = False
        await demo.store.exposition(await demo.poller.poll_once())

    seen = [
        (e["event"], e.get("exc_info"), e.get("error"), e.get("repeated"), e.get("after_error"))
        for e in logs
        if e["event"].startswith("render_")
    ]
    repeated = ("render_failed", None, "RuntimeError: render broke", True, None)
    assert [
        ("render_failed", True, None, None, None),
        repeated,
        repeated,
        ("render_recovered", None, None, None, "RuntimeError: render broke"),
    ] == seen


async def test_scrapes_get_500_while_the_render_fails_and_the_page_after(
    demo: Exporter, renders: CountedRender, aiohttp_client: Any
) -> None:
    """Through HTTP: concurrent first scrapes of a snapshot share one render; a render
    that raises answers 500 in one line, and the next scrape renders again."""
    await demo.poller.poll_once()
    client = await aiohttp_client(demo.create_app())
    renders.fail_next = True
    failed = await client.get("/metrics")
    failed_body = await failed.json()

    responses = await asyncio.gather(*(client.get("/metrics") for _ in range(5)))
    bodies = [await r.read() for r in responses]

    assert 500 == failed.status
    assert "internal error: RuntimeError" == failed_body["error"]
    assert [200] * 5 == [r.status for r in responses]
    assert all(b"podresources_container_device_info{" in body for body in bodies)
    assert 2 == renders.calls


async def test_a_recovery_is_logged_once(demo: Exporter, renders: CountedRender) -> None:
    """After a failed render, the first render that works says so; the ones after it
    have nothing to recover from."""
    await demo.store.exposition(await demo.poller.poll_once())
    renders.fail_next = True
    await demo.store.exposition(await demo.poller.poll_once())
    with capture_logs() as logs:
        for _ in range(3):
            await demo.store.exposition(await demo.poller.poll_once())
    assert ["render_recovered"] == [e["event"] for e in logs if e["event"].startswith("render_")]


async def test_a_poll_that_keeps_failing_logs_its_traceback_once(
    demo: Exporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug that breaks every poll gives one traceback, then one line per poll naming
    the error, and the last snapshot stays published; the first poll that works again
    says so."""
    poller = demo.poller
    await poller.poll_reporting_failure()
    published = demo.store.current

    def broken_join(*args: Any) -> Any:
        raise RuntimeError("join broke")

    with capture_logs() as logs:
        monkeypatch.setattr(poller, "_join", broken_join)
        for _ in range(3):
            await poller.poll_reporting_failure()
        kept = demo.store.current
        monkeypatch.undo()
        await poller.poll_reporting_failure()

    seen = [
        (e["event"], e.get("exc_info"), e.get("error"), e.get("repeated"), e.get("after_error"))
        for e in logs
        if e["event"].startswith("poll_")
    ]
    repeated = ("poll_failed", None, "RuntimeError: join broke", True, None)
    assert (
        published,
        [
            ("poll_failed", True, None, None, None),
            repeated,
            repeated,
            ("poll_recovered", None, None, None, "RuntimeError: join broke"),
        ],
    ) == (kept, seen)
    assert demo.store.current is not published


async def test_a_poll_failing_again_after_a_recovery_is_a_new_failure(
    demo: Exporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recovery is said once, and the same error after it is a new failure, with its
    traceback: not a repeat of the one before the recovery."""
    poller = demo.poller
    join = poller._join

    def broken_join(*args: Any) -> Any:
        raise RuntimeError("join broke")

    with capture_logs() as logs:
        for broken in (True, False, False, True, False):
            monkeypatch.setattr(poller, "_join", broken_join if broken else join)
            await poller.poll_reporting_failure()

    assert [
        ("poll_failed", True, None),
        ("poll_recovered", None, None),
        ("poll_failed", True, None),
        ("poll_recovered", None, None),
    ] == [
        (e["event"], e.get("exc_info"), e.get("repeated"))
        for e in logs
        if e["event"].startswith("poll_")
    ]


async def test_polling_goes_on_after_a_poll_that_raised(
    demo: Exporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run() outlives a poll that raises (a bug): the next poll runs and publishes."""
    poller = demo.poller
    join = poller._join
    joins = 0

    def join_broken_once(*args: Any) -> Any:
        nonlocal joins
        joins += 1
        if joins == 1:
            raise RuntimeError("join broke")
        return join(*args)

    monkeypatch.setattr(poller, "_join", join_broken_once)
    monkeypatch.setattr(poller, "_interval_s", 0.0)
    polling = asyncio.ensure_future(poller.run())
    try:
        for _ in range(1000):  # a bound, not a timing assertion
            if demo.store.current is not None or polling.done():
                break
            await asyncio.sleep(0.01)
        assert (False, True) == (polling.done(), demo.store.current is not None)
    finally:
        polling.cancel()
        with contextlib.suppress(asyncio.CancelledError, RuntimeError):  # RuntimeError: run() died
            await polling


_POOL_B = "rdma/hca_shared_devices_b"


@dataclass(frozen=True)
class _ChangingPools:
    """The demo node with two RDMA shared pools of 300 IDs; from tick 1 the pools'
    first ID is gone, one more is offered, and ID 5 of pool b sits on NUMA node 0."""

    demo: DemoScenario

    @property
    def hardware(self) -> SimHardware:
        return self.demo.hardware

    @property
    def dra_claims(self) -> tuple[SimDraClaim, ...]:
        return self.demo.dra_claims

    def state_at(self, tick: int) -> KubeletState:
        state = self.demo.state_at(tick)
        ids = range(1, 301) if tick else range(300)
        pools = tuple(
            DeviceGroup(pool, (str(n),), (0 if tick and (pool, n) == (_POOL_B, 5) else i,))
            for i, pool in enumerate(("rdma/hca_shared_devices_a", _POOL_B))
            for n in ids
        )
        allocatable = replace(state.allocatable, devices=(*state.allocatable.devices, *pools))
        return KubeletState(pods=state.pods, allocatable=allocatable)


async def test_a_render_after_an_unscraped_inventory_change_is_what_a_fresh_render_makes(
    short_tmp: Path,
) -> None:
    """The device families are chained to the last page rendered like the container
    ones: an inventory that changed in an unscraped poll is written as it is now, and
    polls with the same replies after it keep its lines, the very objects."""
    node = SimulatedNode(_ChangingPools(DemoScenario.create()), root=short_tmp)
    await node.start()
    config = parse_config([*node.exporter_flags(), "--node-name", "demo-node"], {})
    built = Exporter(config, collectors=demo_collectors(config, node))
    try:
        first = await built.store.exposition(await built.poller.poll_once())
        await node.advance()
        await built.poller.poll_once()  # the inventory changes here, unscraped
        steady = await built.poller.poll_once()
        page = await built.store.exposition(steady)
        again = await built.store.exposition(await built.poller.poll_once())
    finally:
        await built.close()
        await node.stop()

    assert render(steady.snapshot).families == page.families
    info = [
        next(f for f in p.families if f.name == "podresources_device_info")
        for p in (first, page, again)
    ]
    assert (False, True) == (info[0] == info[1], info[1] is info[2])
    assert b'device_id="5",model="",numa_node="0",pci_address="",resource="' + _POOL_B.encode() in (
        page.static(openmetrics=False)
    )
