"""Benchmark: what a poll, a scrape and the process cost, each beside its floor.

    make bench            # or: .venv/bin/python bench/bench.py [--runs 5]

Prints ONE table. Every figure is the median of ``--runs`` runs and stands beside a
floor measured in the same run, on the same machine, at the same moment:

- poll CPU (process CPU of the exporter's process per poll, all collectors on, the
  simulated GPUs standing in for NVML) at 10 to 1,000 pods, steady (nothing changes) and
  under churn (10% of pods replaced every poll), and beside it the CPU of rendering that
  poll's page, which the first scrape of a snapshot pays (a snapshot nobody scrapes is
  never rendered); floor: decoding the same ``List`` and ``GetAllocatableResources``
  replies with protobuf and reading every field once, timed right after each poll.
- idle CPU per second between polls (channel, worker threads); floor: this process
  before the exporter exists.
- /metrics p50/p99 under 10 concurrent scrapers, OpenMetrics and text, plain and gzip,
  and the first scrape after a poll (the one that pays for the render and the encoding:
  the page itself is served as the other rows serve it); floor: a bare
  aiohttp handler serving the same bytes.
- kubelet calls per 1,000 scrapes (floor 0).
- peak RSS and RSS slope of a fresh exporter process over 180 polls of churn (30 min at
  the default interval), with the real collectors, unavailable ones included (NVML
  without a driver: the old leak's case), with and without ``gc.freeze()``; floor: a
  process that has only imported the same modules.
- peak RSS of a fresh exporter process (``python -m exporter``) through start-up, its
  first poll of a kubelet ``List`` reply of N MiB and one scrape as Prometheus makes it
  (OpenMetrics, gzip) (``REPLIES``: padding pods of 500 device IDs of B bytes, each ID
  a series to join and render, so the shorter the IDs the more series per MiB), and its
  RSS once settled; floor: the same process with no reply to speak of.

The simulated kubelet and the scrapers run in their own processes, so their CPU is not
counted. Figures only, no pass/fail: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import structlog
from memory_worker import kubelet_socket, status_kib

MEMORY_WORKER = Path(__file__).with_name("memory_worker.py")
POD_COUNTS = (10, 100, 250, 500, 1000)
SCRAPE_PODS = 250
MEMORY_PODS = 250
CPUS = 256
# The node issue 11 measured and set its targets on: 250 pods of 3 containers (750), 96
# devices (8 GPUs and 88 VFs: the issue names the count, not the mix), 256 CPUs over 8
# NUMA nodes. The other rows' node has 2 containers a pod, 64 devices and 2 NUMA nodes.
ISSUE_NODE = {"numa_nodes": 8, "vfs": 88}
ISSUE_NODE_SIDECARS = 2
RDMA_IDS_PER_POOL = 1000
POLLS_PER_RUN = 8
MEMORY_POLLS = 180  # 30 minutes at the default 10 s interval
SCRAPERS = 10
SCRAPES_PER_RUN = 400
# A run's scrapes of ours and of the bare handler alternate in chunks, ours-bare-bare-ours,
# so a machine that slows down mid-run slows both alike (400 of one, then 400 of the
# other, gave p50 ratios from 0.7x to 1.5x between identical runs).
SCRAPE_CHUNK = 100
IDLE_S = 3.0
DEFAULT_INTERVAL_S = 10.0
# (MiB of device IDs, ID bytes) of the large List replies: 40 bytes is a GPU UUID, the
# shortest ID that comes by the thousand (time-slicing replicas, vGPU units). 0.9 MiB of
# IDs is a reply just under 1 MiB; a run whose reply is over the default
# --kubelet.max-message-bytes raises the flag to fit.
REPLIES = ((0.9, 40), (0.9, 200), (4, 40), (15, 200))
VARIANTS = (
    ("OpenMetrics", "application/openmetrics-text; version=1.0.0", "identity"),
    ("OpenMetrics gzip", "application/openmetrics-text; version=1.0.0", "gzip"),
    ("text", "text/plain", "identity"),
    ("text gzip", "text/plain", "gzip"),
)


def _quiet() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))


def _log_as_deployed() -> None:
    """The exporter's logging at its defaults (JSON lines at info) into /dev/null: a
    churn poll's ``allocation_changed`` lines are part of what a node pays for it."""
    from exporter.logs import configure_logging

    devnull = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - open for good
    configure_logging(level="info", fmt="json", stream=devnull)


# --- the simulated kubelet, in its own process --------------------------------------------


def _kubelet_main(conn: Connection, socket_path: str) -> None:
    _quiet()
    asyncio.run(_serve_kubelet(conn, socket_path))


def _hardware(*, issue_node: bool = False) -> Any:
    from exporter.sim.scenario import dense_hardware

    return dense_hardware(cpus=CPUS, **(ISSUE_NODE if issue_node else {}))


def _scenario(pods: int, *, issue_node: bool = False, rdma_pools: int = 0) -> Any:
    from exporter.sim.scenario import DenseScenario

    sidecars = ISSUE_NODE_SIDECARS if issue_node else 1
    dense = DenseScenario(_hardware(issue_node=issue_node), pods, sidecars=sidecars)
    return _RdmaPools(dense, rdma_pools) if rdma_pools else dense


@dataclass(frozen=True)
class _RdmaPools:
    """``scenario``'s node offering ``pools`` more resources of RDMA_IDS_PER_POOL IDs
    each, none held: the k8s-rdma-shared-dev-plugin's pools, which number their IDs
    "0".."N-1", each one a podresources_device_info series (poll_parts --rdma-pools)."""

    scenario: Any
    pools: int

    @property
    def hardware(self) -> Any:
        return self.scenario.hardware

    def state_at(self, tick: int) -> Any:
        from exporter.model import DeviceGroup

        state = self.scenario.state_at(tick)
        groups = tuple(
            # Half the pools on NUMA node 0, half on 1, as one HCA's pools sit by it.
            DeviceGroup(f"rdma/hca_shared_devices_{pool}", (str(n),), (pool * 2 // self.pools,))
            for pool in range(self.pools)
            for n in range(RDMA_IDS_PER_POOL)
        )
        devices = (*state.allocatable.devices, *groups)
        return replace(state, allocatable=replace(state.allocatable, devices=devices))


async def _serve_kubelet(conn: Connection, socket_path: str) -> None:
    from exporter.kubelet.convert import list_response_to_proto
    from exporter.sim.kubelet import SimKubelet

    sim = SimKubelet(socket_path=socket_path)
    await sim.start()
    scenario = _scenario(1)
    issue_node = False
    rdma_pools = 0
    loop = asyncio.get_running_loop()
    while True:
        command, value = await loop.run_in_executor(None, conn.recv)
        if command == "issue_node":  # the next "pods" are on the issue's node (1) or not
            issue_node = bool(value)
            conn.send(None)
            continue
        if command == "rdma_pools":  # ... and offer this many RDMA shared pools
            rdma_pools = value
            conn.send(None)
            continue
        if command == "pods":
            scenario = _scenario(value, issue_node=issue_node, rdma_pools=rdma_pools)
            value = 0
        if command in ("pods", "tick"):
            state = scenario.state_at(value)
            sim.set_state(pods=state.pods, allocatable=state.allocatable)
            conn.send(None)
        elif command == "calls":
            conn.send(sum(sim.calls.values()))
        elif command == "padding":  # List replies grow by this many bytes
            sim.padding_bytes = value
            conn.send(None)
        elif command == "padding_id_bytes":  # ... in device IDs this long
            sim.padding_id_bytes = value
            conn.send(None)
        elif command == "list_bytes":  # the size of the List reply now
            conn.send(list_response_to_proto(sim.listed_pods()).ByteSize())
        else:
            break
    await sim.stop()


class _Kubelet:
    def __init__(self, socket_path: str) -> None:
        self._conn, child = multiprocessing.Pipe()
        self._process = multiprocessing.Process(
            target=_kubelet_main, args=(child, socket_path), daemon=True
        )
        self._process.start()
        while not os.path.exists(socket_path):
            time.sleep(0.05)

    def ask(self, command: str, value: int = 0) -> Any:
        self._conn.send((command, value))
        return self._conn.recv()

    def stop(self) -> None:
        self._conn.send(("stop", 0))
        self._process.join(timeout=10)


# --- scrapers, in their own process --------------------------------------------------------


def _scraper_main(conn: Connection) -> None:
    asyncio.run(_scrape_forever(conn))


async def _scrape_forever(conn: Connection) -> None:
    import aiohttp

    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        while True:
            job = await loop.run_in_executor(None, conn.recv)
            if job is None:
                return
            url, accept, encoding, concurrency, total = job
            headers = {"Accept": accept, "Accept-Encoding": encoding}
            latencies: list[float] = []
            await asyncio.gather(
                *(
                    _scrape(session, url, headers, count=total // concurrency, into=latencies)
                    for _ in range(concurrency)
                )
            )
            conn.send(latencies)


async def _scrape(
    session: Any, url: str, headers: dict[str, str], *, count: int, into: list[float]
) -> None:
    for _ in range(count):
        started = time.perf_counter()
        async with session.get(url, headers=headers) as response:
            await response.read()
        into.append(time.perf_counter() - started)


class _Scrapers:
    def __init__(self) -> None:
        self._conn, child = multiprocessing.Pipe()
        self._process = multiprocessing.Process(target=_scraper_main, args=(child,), daemon=True)
        self._process.start()

    def run(
        self, url: str, *, accept: str, encoding: str, concurrency: int, total: int
    ) -> list[float]:
        self._conn.send((url, accept, encoding, concurrency, total))
        latencies: list[float] = self._conn.recv()
        return latencies

    def stop(self) -> None:
        self._conn.send(None)
        self._process.join(timeout=10)


# --- the table -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    figure: str
    value: str
    floor: str
    ratio: str
    target: str


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def _ratio(value: float, floor: float) -> str:
    return f"{value / floor:.1f}x" if floor > 0 else "-"


def _print_table(rows: list[Row], *, header: str) -> None:
    print(header)
    columns = ("figure", "value", "floor", "ratio", "target")
    cells = [columns, *((r.figure, r.value, r.floor, r.ratio, r.target) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    for index, cell in enumerate(cells):
        print("| " + " | ".join(v.ljust(w) for v, w in zip(cell, widths, strict=True)) + " |")
        if index == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


# --- the floor of a poll -------------------------------------------------------------------


class _DecodeFloor:
    """Decoding the kubelet's replies for ``pods`` and reading every field once: the
    floor of a poll. Timed once after each poll, so a poll and its floor share the
    machine's moment (a neighbour on this shared machine can double both)."""

    def __init__(self, pods: int, *, issue_node: bool = False, rdma_pools: int = 0) -> None:
        from exporter.kubelet.convert import allocatable_to_proto, list_response_to_proto

        state = _scenario(pods, issue_node=issue_node, rdma_pools=rdma_pools).state_at(0)
        self._listed = list_response_to_proto(state.pods).SerializeToString()
        self._allocatable = allocatable_to_proto(state.allocatable).SerializeToString()

    def seconds(self) -> float:
        """Seconds of CPU one decode takes, every field read once (into ``_``): with upb,
        parsing makes no Python objects, so a field left unread would cost the floor
        nothing of what the exporter, which reads them all, pays."""
        from exporter.kubelet.api.v1 import api_pb2 as v1

        def devices(groups: Any) -> None:
            for group in groups:
                _ = group.resource_name, list(group.device_ids)
                _ = [node.ID for node in group.topology.nodes]

        def memory(blocks: Any) -> None:
            for block in blocks:
                _ = block.memory_type, block.size, [node.ID for node in block.topology.nodes]

        started = time.process_time()
        reply = v1.ListPodResourcesResponse.FromString(self._listed)
        for pod in reply.pod_resources:
            _ = pod.name, pod.namespace, list(pod.cpu_ids)
            memory(pod.memory)
            for container in pod.containers:
                _ = container.name, list(container.cpu_ids)
                devices(container.devices)
                memory(container.memory)
                for claim in container.dynamic_resources:
                    _ = claim.claim_name, claim.claim_namespace
                    for got in claim.claim_resources:
                        _ = got.driver_name, got.pool_name, got.device_name, got.share_id
                        _ = [cdi.name for cdi in got.cdi_devices]
        inventory = v1.AllocatableResourcesResponse.FromString(self._allocatable)
        devices(inventory.devices)
        _ = list(inventory.cpu_ids)
        memory(inventory.memory)
        return time.process_time() - started


# --- the exporter under test, in this process ----------------------------------------------


def _exporter(
    root: Path, socket_path: str, *, collectors: bool = True, issue_node: bool = False
) -> Any:
    from exporter.app import Exporter
    from exporter.cli import parse_config
    from exporter.collectors import build_collectors
    from exporter.collectors.base import CollectorContext
    from exporter.collectors.nvml import NvmlCollector
    from exporter.sim.gpus import SimulatedNvmlSource

    flags = ["--kubelet.socket", socket_path, "--path.sysfs", str(root / "sys")]
    flags += ["--path.procfs", str(root / "proc"), "--web.listen-address", "127.0.0.1:0"]
    config = parse_config(flags, {})
    if not collectors:
        return Exporter(config, collectors=[])
    context = CollectorContext(sysfs=config.sysfs, procfs=config.procfs)
    built = build_collectors([n for n in config.collectors if n != "nvml"], context)
    source = SimulatedNvmlSource(_hardware(issue_node=issue_node), clock=time.monotonic)
    # The polls here come back to back; the collector's clock steps 10 s a call (one a
    # poll once NVML is up), so its energy and GPM intervals act as at the default
    # --poll.interval: a GPM measurement and an energy read every third poll.
    ticks = itertools.count(step=DEFAULT_INTERVAL_S)
    built.insert(0, NvmlCollector(context, source=source, clock=lambda: float(next(ticks))))
    return Exporter(config, collectors=built)


def _write_tree(root: Path, *, issue_node: bool = False) -> None:
    """The dense node's sysfs/procfs tree under ``root``, the issue's under ``root / "issue"``."""
    from exporter.sim.fixtures import write_tree

    tree = root / "issue" if issue_node else root
    hardware = _hardware(issue_node=issue_node)
    write_tree(sysfs=tree / "sys", procfs_root=tree / "proc", hardware=hardware, tick=0)


async def _warmed_exporter(
    root: Path,
    kubelet: _Kubelet,
    *,
    pods: int,
    collectors: bool = True,
    issue_node: bool = False,
    rdma_pools: int = 0,
) -> Any:
    """An exporter reading ``_write_tree``'s tree, its kubelet listing ``pods`` pods (and
    offering ``rdma_pools`` RDMA shared pools), after three polls and renders (channel,
    caches, first join, first render). Closed by the caller."""
    kubelet.ask("issue_node", int(issue_node))
    kubelet.ask("rdma_pools", rdma_pools)
    kubelet.ask("pods", pods)
    kubelet.ask("tick", 0)
    tree = root / "issue" if issue_node else root
    exporter = _exporter(tree, kubelet_socket(root), collectors=collectors, issue_node=issue_node)
    try:
        for _ in range(3):
            await exporter.store.exposition(await exporter.poller.poll_once())
    except BaseException:
        await exporter.close()
        raise
    return exporter


async def _poll_cpu(
    exporter: Any, kubelet: _Kubelet, floor: _DecodeFloor, *, churn: bool, tick: int
) -> tuple[list[float], list[float], list[float]]:
    """CPU seconds of this process for each of POLLS_PER_RUN polls, for the render of
    each poll's page as its first scrape makes it, and of the floor decoded after each."""
    polls, renders, floors = [], [], []
    for _ in range(POLLS_PER_RUN):
        if churn:
            tick += 1
            kubelet.ask("tick", tick)
        started = time.process_time()
        published = await exporter.poller.poll_once()
        polls.append(time.process_time() - started)
        started = time.process_time()
        await exporter.store.exposition(published)
        renders.append(time.process_time() - started)
        floors.append(floor.seconds())
    return polls, renders, floors


@dataclass(frozen=True)
class _PollFigures:
    poll: float  # seconds of CPU, median over runs of each run's mean
    render: float  # the same for the render at the first scrape of each poll
    floor: float

    def value(self, *, millicores: bool) -> str:
        text = f"{_ms(self.poll)} + {_ms(self.render)} render"
        if millicores:  # every snapshot scraped: the most a node pays at the interval
            text += f" ({(self.poll + self.render) / DEFAULT_INTERVAL_S * 1000:.1f} mcore @10s)"
        return text

    def ratios(self) -> str:
        return f"{_ratio(self.poll, self.floor)} / {_ratio(self.poll + self.render, self.floor)}"


async def _poll_rows(
    root: Path,
    kubelet: _Kubelet,
    *,
    pods: int,
    runs: int,
    collectors: bool,
    issue_node: bool = False,
) -> tuple[list[Row], float]:
    """The steady and churn rows, and a steady poll's median CPU seconds with its render.
    On the issue's node, the hardware tree is ``root / "issue"``."""
    exporter = await _warmed_exporter(
        root, kubelet, pods=pods, collectors=collectors, issue_node=issue_node
    )
    try:
        decode = _DecodeFloor(pods, issue_node=issue_node)
        steady: tuple[list[float], list[float]] = ([], [])
        churn: tuple[list[float], list[float]] = ([], [])
        floor: list[float] = []
        # Steady polls stay at the tick the last churn poll left: each churn poll then
        # replaces one pod in ten of what the exporter last saw, the first one included.
        tick = 0
        for _ in range(runs):
            for kind, figures in ((False, steady), (True, churn)):
                polls, renders, floors = await _poll_cpu(
                    exporter, kubelet, decode, churn=kind, tick=tick
                )
                figures[0].append(statistics.fmean(polls))  # the mean: what a node pays
                figures[1].append(statistics.fmean(renders))
                floor.append(statistics.fmean(floors))
            tick += POLLS_PER_RUN
    finally:
        await exporter.close()
    f = _median(floor)
    s = _PollFigures(_median(steady[0]), _median(steady[1]), f)
    c = _PollFigures(_median(churn[0]), _median(churn[1]), f)
    which = "" if collectors else ", collectors off"
    if issue_node:
        which += ", the issue's node"
    rows = [
        Row(
            f"poll CPU + first scrape's render, {pods} pods, steady{which}",
            s.value(millicores=True),
            _ms(f),
            s.ratios(),
            "<= 3x, < 5 mcore" if pods == SCRAPE_PODS and collectors else "linear",
        ),
        Row(
            f"poll CPU + first scrape's render, {pods} pods, 10% churn{which}",
            c.value(millicores=False),
            _ms(f),
            c.ratios(),
            "<= 6x" if pods == SCRAPE_PODS and collectors else "linear",
        ),
    ]
    return rows, s.poll + s.render


async def _measure_polls(root: Path, kubelet: _Kubelet, *, runs: int) -> tuple[list[Row], float]:
    """The poll rows, and the steady poll's CPU seconds with its render at SCRAPE_PODS,
    collectors on."""
    rows: list[Row] = []
    steady = 0.0
    for pods in POD_COUNTS:
        found, median = await _poll_rows(root, kubelet, pods=pods, runs=runs, collectors=True)
        rows += found
        if pods == SCRAPE_PODS:
            steady = median
    # The exporter's own share (kubelet, join, render), without the sysfs/NVML readers.
    for pods in (SCRAPE_PODS, POD_COUNTS[-1]):
        rows += (await _poll_rows(root, kubelet, pods=pods, runs=runs, collectors=False))[0]
    # The targets' own node (ISSUE_NODE): more kubelet data and more NICs than the above.
    found, _ = await _poll_rows(
        root, kubelet, pods=SCRAPE_PODS, runs=runs, collectors=True, issue_node=True
    )
    rows += found
    kubelet.ask("issue_node", 0)
    return rows, steady


def _interval_row(steady_poll_s: float, idle_per_s: float) -> Row:
    """What a node pays at the default interval: one steady poll, its page rendered (every
    snapshot scraped), and the idle between."""
    per_interval = steady_poll_s + idle_per_s * DEFAULT_INTERVAL_S
    return Row(
        f"CPU at the default 10 s interval, {SCRAPE_PODS} pods steady (poll, render, idle)",
        f"{per_interval / DEFAULT_INTERVAL_S * 1000:.1f} mcore",
        "-",
        "-",
        "reported",
    )


async def _idle_cpu_per_s(seconds: float) -> float:
    started = time.process_time()
    await asyncio.sleep(seconds)
    return (time.process_time() - started) / seconds


async def _measure_scrapes(
    root: Path, kubelet: _Kubelet, *, runs: int, idle_floor: float, steady_poll_s: float
) -> list[Row]:
    """The idle rows (``steady_poll_s``: the 250-pod steady poll's CPU with its render)
    and scrape rows."""
    from aiohttp import web

    kubelet.ask("pods", SCRAPE_PODS)
    exporter = _exporter(root, kubelet_socket(root))
    scrapers = _Scrapers()
    rows: list[Row] = []
    runners: list[web.AppRunner] = []

    async def listen(app: web.Application) -> str:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}/metrics"

    try:
        for _ in range(3):
            await exporter.poller.poll_once()
        idle = [await _idle_cpu_per_s(IDLE_S / runs) for _ in range(runs)]
        rows.append(
            Row(
                "idle CPU between polls",
                f"{_median(idle) * 1000:.2f} mcore",
                f"{idle_floor * 1000:.2f} mcore",
                "-",
                "reported",
            )
        )
        rows.append(_interval_row(steady_poll_s, _median(idle)))
        published = exporter.store.current
        assert published is not None
        exposition = await exporter.store.exposition(published)
        pages = {
            (accept, encoding): exposition.page(
                openmetrics="openmetrics" in accept, gzipped=encoding == "gzip"
            )
            for _, accept, encoding in VARIANTS
        }

        async def bare(request: web.Request) -> web.Response:
            accept = request.headers.get("Accept", "")
            encoding = request.headers.get("Accept-Encoding", "identity")
            body = pages[(accept, encoding)]
            headers = {"Content-Encoding": "gzip"} if encoding == "gzip" else {}
            return web.Response(body=body, headers=headers)

        bare_app = web.Application()
        bare_app.router.add_get("/metrics", bare)
        ours_url = await listen(exporter.create_app())
        bare_url = await listen(bare_app)
        loop = asyncio.get_running_loop()

        async def scrape(
            url: str, accept: str, encoding: str, *, concurrency: int, total: int
        ) -> list[float]:
            return await loop.run_in_executor(
                None,
                lambda: scrapers.run(
                    url, accept=accept, encoding=encoding, concurrency=concurrency, total=total
                ),
            )

        for name, accept, encoding in VARIANTS:
            ours50, ours99, bare50, bare99 = [], [], [], []
            for _ in range(runs):
                ours: list[float] = []
                floor: list[float] = []
                for chunk in range(SCRAPES_PER_RUN // SCRAPE_CHUNK):
                    order = (ours_url, bare_url) if chunk % 2 == 0 else (bare_url, ours_url)
                    for url in order:
                        (ours if url == ours_url else floor).extend(
                            await scrape(
                                url, accept, encoding, concurrency=SCRAPERS, total=SCRAPE_CHUNK
                            )
                        )
                ours50.append(_p(ours, 0.5))
                ours99.append(_p(ours, 0.99))
                bare50.append(_p(floor, 0.5))
                bare99.append(_p(floor, 0.99))
            rows.append(
                Row(
                    f"/metrics {name}, 10 scrapers, p50 / p99",
                    f"{_ms(_median(ours50))} / {_ms(_median(ours99))}",
                    f"{_ms(_median(bare50))} / {_ms(_median(bare99))}",
                    f"{_ratio(_median(ours50), _median(bare50))} / "
                    f"{_ratio(_median(ours99), _median(bare99))}",
                    "p99 <= 1.3x",
                )
            )
        for name, accept, encoding in VARIANTS:
            first, floor_first = [], []
            for _ in range(runs * 2):
                await exporter.poller.poll_once()
                first += await scrape(ours_url, accept, encoding, concurrency=1, total=1)
                floor_first += await scrape(bare_url, accept, encoding, concurrency=1, total=1)
            rows.append(
                Row(
                    f"/metrics {name}, first scrape after a poll",
                    _ms(_median(first)),
                    _ms(_median(floor_first)),
                    _ratio(_median(first), _median(floor_first)),
                    "reported",
                )
            )
        before = kubelet.ask("calls")
        await scrape(ours_url, VARIANTS[1][1], "gzip", concurrency=SCRAPERS, total=1000)
        calls = kubelet.ask("calls") - before
        rows.append(Row("kubelet calls per 1,000 scrapes", str(calls), "0", "-", "0"))
    finally:
        for runner in runners:
            await runner.cleanup()
        scrapers.stop()
        await exporter.close()
    return rows


# --- memory: a fresh exporter process ------------------------------------------------------


def _imports_rss_kib() -> int:
    code = (  # what memory_worker imports, with the collector modules the flags name
        "import exporter.app, exporter.cli, exporter.memory\n"
        "exporter.collectors.registrations()\n"
        "from pathlib import Path\n"
        "print([l.split()[1] for l in Path('/proc/self/status').read_text().splitlines()"
        " if l.startswith('VmRSS:')][0])"
    )
    return int(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
    )


@dataclass(frozen=True, slots=True)
class _MemoryRun:
    peak_kib: int
    slope_kib_per_poll: float  # over the second half
    poll_cpu_s: float  # median
    stages_kib: tuple[int, ...]  # imports, exporter built, first poll, last poll


def _memory_run(root: Path, kubelet: _Kubelet, *, freeze: bool) -> _MemoryRun:
    kubelet.ask("pods", MEMORY_PODS)
    worker = subprocess.Popen(
        [sys.executable, str(MEMORY_WORKER), str(root), *(["--freeze"] if freeze else [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdin is not None
    assert worker.stdout is not None
    stages: list[int] = json.loads(worker.stdout.readline())
    rss: list[int] = []
    cpu: list[float] = []
    peak = 0
    for tick in range(1, MEMORY_POLLS + 1):
        kubelet.ask("tick", tick)
        worker.stdin.write("\n")
        worker.stdin.flush()
        now, peak, spent = json.loads(worker.stdout.readline())
        rss.append(now)
        cpu.append(spent)
    worker.stdin.close()
    worker.wait(timeout=30)
    half = rss[len(rss) // 2 :]
    xs = list(range(len(half)))
    slope = statistics.linear_regression(xs, half).slope
    return _MemoryRun(peak, slope, _median(cpu), (*stages, rss[-1]))


def _measure_memory(root: Path, kubelet: _Kubelet) -> list[Row]:
    """Memory rows; further RSS figures (a reply of N MiB) belong here, one row each."""
    floor = _imports_rss_kib()
    rows = []
    for freeze in (False, True):
        run = _memory_run(root, kubelet, freeze=freeze)
        per_day = run.slope_kib_per_poll * 86400 / DEFAULT_INTERVAL_S / 1024
        label = "gc.freeze()" if freeze else "no gc.freeze()"
        rows.append(
            Row(
                f"peak RSS, {MEMORY_PODS} pods, 180 churn polls, {label}",
                f"{run.peak_kib / 1024:.1f} MiB",
                f"{floor / 1024:.1f} MiB",
                _ratio(run.peak_kib, floor),
                "< 64 MiB",
            )
        )
        if not freeze:
            rows.append(
                Row(
                    "RSS: imported / exporter built / 1st poll / 180th poll",
                    " / ".join(f"{kib / 1024:.1f}" for kib in run.stages_kib) + " MiB",
                    f"{floor / 1024:.1f} MiB",
                    "-",
                    "reported",
                )
            )
        rows.append(
            Row(
                f"RSS slope over the 2nd half, {label}",
                f"{run.slope_kib_per_poll:+.1f} KiB/poll ({per_day:+.1f} MiB/day)",
                "0",
                "-",
                "flat",
            )
        )
        rows.append(
            Row(
                f"poll CPU + render, real collectors, churn, {label}",
                _ms(run.poll_cpu_s),
                "-",
                "-",
                "reported",
            )
        )
    return rows


async def _large_reply_run(root: Path, *, max_message_bytes: int) -> tuple[int, int, float, float]:
    """(peak RSS KiB through the first poll and one scrape, settled RSS KiB, seconds to
    the first poll's snapshot, seconds of the first scrape: it renders the page) of a
    fresh exporter process against the kubelet as it now answers."""
    import aiohttp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    flags = ["--kubelet.socket", kubelet_socket(root), "--path.sysfs", f"{root}/sys"]
    flags += ["--path.procfs", f"{root}/proc", "--web.listen-address", f"127.0.0.1:{port}"]
    flags += ["--poll.interval=300", "--kubelet.timeout=60", "--log.level=error"]  # one poll
    flags += [f"--kubelet.max-message-bytes={max_message_bytes}"]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "exporter",
        *flags,
        env=dict(os.environ, GRPC_VERBOSITY="ERROR"),
        stderr=asyncio.subprocess.DEVNULL,
    )
    started = time.monotonic()
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            while True:  # /readyz answers 200 once the first poll has published
                await asyncio.sleep(0.2)
                try:
                    async with session.get(f"{url}/readyz") as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
            took = time.monotonic() - started
            _, accept, encoding = VARIANTS[1]  # what Prometheus asks for
            headers = {"Accept": accept, "Accept-Encoding": encoding}
            scrape_started = time.monotonic()
            async with session.get(f"{url}/metrics", headers=headers) as response:
                await response.read()
            scrape = time.monotonic() - scrape_started
        status = Path(f"/proc/{process.pid}/status")
        peak = status_kib("VmHWM", status)
        await asyncio.sleep(2)
        return peak, status_kib("VmRSS", status), took, scrape
    finally:
        os.kill(process.pid, signal.SIGTERM)  # not send_signal: its poll() can reap first
        await process.wait()


async def _measure_large_replies(root: Path, kubelet: _Kubelet) -> list[Row]:
    """One row per reply: peak and settled RSS of a fresh process, its first poll and
    first scrape."""
    from exporter.config import DEFAULT_MAX_MESSAGE_BYTES

    kubelet.ask("pods", 1)
    floor, *_ = await _large_reply_run(root, max_message_bytes=DEFAULT_MAX_MESSAGE_BYTES)
    rows = []
    for mib, id_bytes in REPLIES:
        kubelet.ask("padding_id_bytes", id_bytes)
        kubelet.ask("padding", int(mib * 1024 * 1024))
        size = kubelet.ask("list_bytes")
        default = size <= DEFAULT_MAX_MESSAGE_BYTES
        limit = DEFAULT_MAX_MESSAGE_BYTES if default else size + 4096
        peak, settled, took, scrape = await _large_reply_run(root, max_message_bytes=limit)
        rows.append(
            Row(
                f"peak RSS, first poll + scrape, {size / 2**20:.2f} MiB List reply of "
                f"{id_bytes}-byte IDs (settled, poll, scrape)",
                f"{peak / 1024:.0f} MiB ({settled / 1024:.0f} MiB, {took:.1f} s, {scrape:.1f} s)",
                f"{floor / 1024:.0f} MiB",
                _ratio(peak, floor),
                "< 256 MiB" if default else "over the default limit",
            )
        )
    kubelet.ask("padding", 0)
    return rows


# --- main ----------------------------------------------------------------------------------


def _machine() -> str:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    load = os.getloadavg()
    return (
        f"{os.cpu_count()} CPUs ({model}), Python {sys.version.split()[0]}, "
        f"load average before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


def _own_peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _main(*, runs: int) -> None:
    from exporter.memory import tune_allocator, tune_gc

    _log_as_deployed()
    # The poll and scrape rows measure an exporter in this process: tune it as run()
    # tunes the exporter's (the kubelet and scraper processes, whose CPU is not
    # counted, inherit it).
    tune_allocator()
    tune_gc()
    machine = _machine()
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="prx-bench-"))
    idle_floor = await _idle_cpu_per_s(1.0)
    _write_tree(root)
    _write_tree(root, issue_node=True)
    kubelet = _Kubelet(kubelet_socket(root))
    try:
        rows, steady_poll_s = await _measure_polls(root, kubelet, runs=runs)
        rows += await _measure_scrapes(
            root, kubelet, runs=runs, idle_floor=idle_floor, steady_poll_s=steady_poll_s
        )
        rows += _measure_memory(root, kubelet)
        rows += await _measure_large_replies(root, kubelet)
    finally:
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)
    _print_table(
        rows,
        header=(
            f"podresources-exporter bench: medians of {runs} runs; {machine}; "
            f"took {time.monotonic() - started:.0f} s; "
            f"peak RSS of the bench process {_own_peak_mib():.0f} MiB"
        ),
    )


def main(argv: list[str] | None = None, *, run: Callable[..., Any] = asyncio.run) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    run(_main(runs=args.runs))


if __name__ == "__main__":
    main()
