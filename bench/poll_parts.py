"""Where a poll's CPU goes, part by part: the breakdown behind bench.py's poll rows.

    .venv/bin/python bench/poll_parts.py [--pods 250] [--polls 40] [--issue-node]
                                         [--rdma-pools 8]

Builds bench.py's dense node (the same tree, simulated kubelet and exporter), warms it
up, then prints medians over ``--polls``: the whole poll (process CPU) beside its decode
floor; the join's worker-thread time inside those polls; every collector's ``collect()``
alone (thread time), and their sum, each also as on a node's sysfs (a fixture tree's kept
files are ``fstat()``ed before each read, sysfs's never); the collectors' whole run as the poll
makes it (one lane, one thread hop); and the kubelet's two calls, opening and closing
the channel as the poller does at the default interval, and on a channel kept open. The
parts are timed one after another, not inside the poll, so they do not add up to it
exactly: the poll also pays the hops between the loop and its threads, and runs colder
than a part repeated alone. So last, the same polls again, their CPU split by thread
(the kernel's per-thread ``schedstat``): what each thread spent inside the polls, and
what threads that ended before the last poll did (gRPC starts its threads again with
each channel); then the same split for polls after churn (one pod in ten replaced before
each, as bench.py's churn rows have it), with the thread time of their join and
allocation diff. Then the render of a poll's page, as the first scrape of each steady
and each churn poll pays it (process CPU, the store's thread hop included), and a cold
one (no page before it). ``--rdma-pools N`` has the kubelet offer N more resources of
1,000 numbered IDs (the k8s-rdma-shared-dev-plugin's shared pools): a node whose page
is mostly per-device inventory. Figures only, no pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from memory_worker import kubelet_socket

import bench


def _median_ms(values: list[float]) -> str:
    return bench._ms(bench._median(values))


async def _cpu_of(step: Callable[[], Awaitable[Any]], times: int) -> list[float]:
    """Process CPU seconds of each of ``times`` awaits of ``step()``."""
    spent = []
    for _ in range(times):
        started = time.process_time()
        await step()
        spent.append(time.process_time() - started)
    return spent


def _thread_cpu_of_collect(collector: Any, times: int) -> list[float]:
    spent = []
    for _ in range(times):
        started = time.thread_time()
        # Absent sources (DRM here) raise: what they cost still counts.
        with contextlib.suppress(Exception):
            collector.collect()
        spent.append(time.thread_time() - started)
    return spent


@contextlib.contextmanager
def _kept_files_unchecked(collectors: Any) -> Iterator[None]:
    """Kept files read as on a sysfs mount: a fixture tree's are fstat()ed before each
    read (a test may have replaced the file), which a node's sysfs never needs."""
    kept = [c._files for c in collectors if hasattr(c, "_files")]
    before = [files._check_replaced for files in kept]
    for files in kept:
        files._check_replaced = False
    try:
        yield
    finally:
        for files, check in zip(kept, before, strict=True):
            files._check_replaced = check


_THREAD_ROLES = {
    "MainThread": "MainThread (event loop, gRPC calls, publish)",
    "collector-lane": "collector-lane (collectors)",
    "asyncio": "asyncio (to_thread: join, decoding replies)",
}


def _thread_cpu() -> dict[int, tuple[str, int]]:
    """Each live thread of this process: its name and nanoseconds on a CPU so far."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    found = {}
    for entry in os.listdir("/proc/self/task"):
        tid = int(entry)
        try:
            with open(f"/proc/self/task/{entry}/schedstat", encoding="ascii") as file:
                ran = int(file.read().split()[0])
            with open(f"/proc/self/task/{entry}/comm", encoding="utf-8") as file:
                comm = file.read().strip()
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile, or no schedstat in this kernel
        found[tid] = (names.get(tid, comm), ran)
    return found


async def _print_by_thread(
    poller: Any, polls: int, *, title: str, before_each: Callable[[], None] = lambda: None
) -> None:
    """Mean CPU of ``polls`` back-to-back polls, by thread; names such as asyncio_0 merged.
    ``before_each`` runs before each poll, inside the figures (a churn tick: a message to
    the kubelet process, 0.04-0.05 ms of this process's CPU)."""
    before = _thread_cpu()
    if not before:
        print("  by thread: /proc/self/task/*/schedstat not readable here")
        return
    started = time.process_time()
    for _ in range(polls):
        before_each()
        await poller.poll_once()
    process_ns = int((time.process_time() - started) * 1e9)
    after = _thread_cpu()
    spent: Counter[str] = Counter()
    for tid, (name, ran) in after.items():
        spent[name.rstrip("0123456789").rstrip("_-")] += ran - before.get(tid, (name, 0))[1]
    # Threads that ended within the polls took their figures with them: the remainder.
    spent["threads that ended (gRPC's)"] = max(0, process_ns - sum(spent.values()))
    print(f"  by thread, {polls} {title} (mean ms a poll, of {process_ns / polls / 1e6:.2f})")
    for name, ran in spent.most_common():
        if ran / polls >= 5_000:  # 0.005 ms
            name = _THREAD_ROLES.get(name, name)
            print(f"      {name:<44} {ran / polls / 1e6:.2f} ms")


async def _main(pods: int, polls: int, *, issue_node: bool, rdma_pools: int) -> None:
    from exporter.memory import tune_allocator, tune_gc

    bench._log_as_deployed()
    tune_allocator()
    tune_gc()
    root = Path(tempfile.mkdtemp(prefix="prx-parts-"))
    bench._write_tree(root, issue_node=issue_node)
    kubelet = bench._Kubelet(kubelet_socket(root))
    try:
        exporter = await bench._warmed_exporter(
            root, kubelet, pods=pods, issue_node=issue_node, rdma_pools=rdma_pools
        )
        try:
            await _print_parts(exporter, pods, polls, issue_node=issue_node, rdma_pools=rdma_pools)
            await _print_churn(exporter.poller, kubelet, polls)
            await _print_renders(exporter, kubelet, polls)
        finally:
            await exporter.close()
    finally:
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def _joins_timed(poller: Any) -> Iterator[list[float]]:
    """The thread time of each join (and allocation diff) the poller makes meanwhile."""
    joins: list[float] = []
    join = poller._join

    def timed_join(*args: Any) -> Any:
        started = time.thread_time()
        try:
            return join(*args)
        finally:
            joins.append(time.thread_time() - started)

    poller._join = timed_join
    try:
        yield joins
    finally:
        poller._join = join


async def _print_parts(
    exporter: Any, pods: int, polls: int, *, issue_node: bool, rdma_pools: int
) -> None:
    poller = exporter.poller
    floor = bench._DecodeFloor(pods, issue_node=issue_node, rdma_pools=rdma_pools)
    whole, floors = [], []
    with _joins_timed(poller) as joins:
        for _ in range(polls):  # each poll beside its floor, as bench.py times them
            started = time.process_time()
            await poller.poll_once()
            whole.append(time.process_time() - started)
            floors.append(floor.seconds())
    node = "the issue's node" if issue_node else "the default dense node"
    if rdma_pools:
        node += f" and {rdma_pools} RDMA shared pools of {bench.RDMA_IDS_PER_POOL:,} IDs"
    print(f"{pods} pods on {node}, medians of {polls}")
    print(f"  poll, process CPU            {_median_ms(whole)}   floor {_median_ms(floors)}")
    print(f"  join (its worker thread)     {_median_ms(joins)}")
    runner = poller._runner
    collected = {c.name: _thread_cpu_of_collect(c, polls) for c in runner._collectors}
    print(f"  run_all (lane and hop)       {_median_ms(await _cpu_of(runner.run_all, polls))}")
    with _kept_files_unchecked(runner._collectors):
        unchecked = {c.name: _thread_cpu_of_collect(c, polls) for c in runner._collectors}
    total = sum(bench._median(v) for v in collected.values())
    print(f"  collect() alone, summed      {bench._ms(total)}")
    for name, spent in collected.items():
        print(f"      {name:<24} {_median_ms(spent)}   as on sysfs {_median_ms(unchecked[name])}")
    on_sysfs = sum(bench._median(v) for v in unchecked.values())
    print(f"  the same, as on sysfs        {bench._ms(on_sysfs)}  (kept files not fstat()ed)")
    client = poller._client

    async def reopened() -> None:
        await poller._poll_kubelet()
        await client.release_channel()

    print(f"  kubelet, channel reopened    {_median_ms(await _cpu_of(reopened, polls))}")
    kept = await _cpu_of(poller._poll_kubelet, polls)
    print(f"  kubelet, channel kept open   {_median_ms(kept)}")
    await client.release_channel()
    await _print_by_thread(poller, polls, title="polls again")


async def _print_churn(poller: Any, kubelet: Any, polls: int) -> None:
    """The same split for polls after churn, as bench.py's churn rows make them (one pod
    in ten replaced before each poll), and the thread time of their joins."""
    ticks = itertools.count(1)
    with _joins_timed(poller) as joins:
        await _print_by_thread(
            poller,
            polls,
            title="polls after churn",
            before_each=lambda: kubelet.ask("tick", next(ticks)),
        )
    print(f"  join and allocation diff after churn, its thread (median)  {_median_ms(joins)}")


async def _print_renders(exporter: Any, kubelet: Any, polls: int) -> None:
    """The render of each poll's page as its first scrape pays it, after steady polls
    and after churn ones, and a cold render of the last snapshot for scale."""
    from exporter.exposition import render

    ticks = itertools.count(10_000)  # past _print_churn's: each tick is a new churn
    spent: dict[str, list[float]] = {"steady": [], "churn": []}
    for kind, figures in spent.items():
        for _ in range(polls):
            if kind == "churn":
                kubelet.ask("tick", next(ticks))
            published = await exporter.poller.poll_once()
            started = time.process_time()
            page = await exporter.store.exposition(published)
            figures.append(time.process_time() - started)
    started = time.thread_time()
    render(published.snapshot)
    cold = time.thread_time() - started
    print(
        f"  render at a poll's first scrape ({page.series:,} series): steady "
        f"{_median_ms(spent['steady'])}, after churn {_median_ms(spent['churn'])}, "
        f"cold {bench._ms(cold)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pods", type=int, default=bench.SCRAPE_PODS)
    parser.add_argument("--polls", type=int, default=40)
    parser.add_argument("--issue-node", action="store_true", help="the node issue 11 set")
    parser.add_argument(
        "--rdma-pools",
        type=int,
        default=0,
        help=f"offer this many more resources of {bench.RDMA_IDS_PER_POOL:,} IDs",
    )
    args = parser.parse_args()
    asyncio.run(
        _main(args.pods, args.polls, issue_node=args.issue_node, rdma_pools=args.rdma_pools)
    )


if __name__ == "__main__":
    main()
