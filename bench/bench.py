"""Benchmark: poll time and /metrics latency on a dense simulated node.

    make bench            # or: .venv/bin/python bench/bench.py --pods 250 --cpus 256

A dense node (250 pods, 64 devices, 256 CPUs by default) is served by the simulated
kubelet over a real unix socket with a fixture sysfs/procfs tree and simulated GPUs.
Prints medians (and p90) of: one whole poll with every collector on, the same poll
with no collectors (kubelet + join + render only), and /metrics served over loopback
HTTP (plain and gzip). Figures only: no pass/fail, the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import aiohttp
import structlog
from aiohttp import web

from exporter.app import Exporter, demo_collectors
from exporter.cli import parse_config
from exporter.sim.node import SimulatedNode
from exporter.sim.scenario import DenseScenario


def _quantiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"median {statistics.median(ordered) * 1000:8.2f} ms   p90 {p90 * 1000:8.2f} ms"


async def _time(action: Callable[[], Awaitable[object]], *, runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        await action()
        samples.append(time.perf_counter() - start)
    return samples


async def main(*, pods: int, cpus: int, runs: int) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    node = SimulatedNode(DenseScenario.create(pod_count=pods, cpus=cpus))
    await node.start()
    try:
        await _measure(node, runs=runs)
    finally:
        await node.stop()


async def _measure(node: SimulatedNode, *, runs: int) -> None:
    base = [
        *node.exporter_flags(),
        "--web.listen-address",
        "127.0.0.1:0",
    ]
    full_config = parse_config(base, {})
    bare_config = parse_config(
        [*base, *(f"--no-collector.{n}" for n in full_config.collectors)], {}
    )
    full = Exporter(full_config, collectors=demo_collectors(full_config, node))
    bare = Exporter(bare_config, collectors=[])
    try:
        state = node.scenario.state_at(0)
        devices = sum(len(g.device_ids) for g in state.allocatable.devices)
        print(
            f"dense node: {len(state.pods)} pods, {devices} devices, "
            f"{len(state.allocatable.cpu_ids)} allocatable CPUs, {runs} runs each"
        )
        await full.poller.poll_once()  # warm-up: channel, NVML handles, imports
        await bare.poller.poll_once()
        print(
            f"poll, all collectors on : {_quantiles(await _time(full.poller.poll_once, runs=runs))}"
        )
        print(
            f"poll, no collectors     : {_quantiles(await _time(bare.poller.poll_once, runs=runs))}"
        )
        published = full.store.current
        assert published is not None
        exposition = published.exposition
        print(
            f"/metrics: {exposition.series} series, {len(exposition.text) / 1024:.0f} KiB plain, "
            f"{len(exposition.text_gzip) / 1024:.0f} KiB gzip"
        )

        runner = web.AppRunner(full.create_app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        url = f"http://127.0.0.1:{port}/metrics"
        async with aiohttp.ClientSession(auto_decompress=False) as session:

            async def scrape(encoding: str) -> None:
                async with session.get(url, headers={"Accept-Encoding": encoding}) as response:
                    await response.read()

            for encoding in ("identity", "gzip"):
                samples = await _time(lambda e=encoding: scrape(e), runs=runs * 5)
                print(f"GET /metrics ({encoding:8}): {_quantiles(samples)}")
            calls_before = dict(node.kubelet.calls)
            await asyncio.gather(*(scrape("gzip") for _ in range(200)))
            extra = sum(node.kubelet.calls.values()) - sum(calls_before.values())
            print(f"200 concurrent scrapes  : {extra} extra kubelet calls")
        await runner.cleanup()
        rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak RSS of this process (exporter + simulated node): {rss_mib:.0f} MiB")
    finally:
        await full.close()
        await bare.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=250)
    parser.add_argument("--cpus", type=int, default=256)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(pods=args.pods, cpus=args.cpus, runs=args.runs))
    sys.exit(0)
