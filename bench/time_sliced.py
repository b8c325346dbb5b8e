"""What time-sliced GPUs cost in memory: each held replica carries its GPU's telemetry
once per holder, so the holders, not the kubelet reply's bytes, set the series.

For 1 and for 48 replicas of each of ``dense_hardware``'s 8 GPUs, every replica held by
a container of its own, a fresh process starts the simulated node and the exporter,
polls three times and renders the page as a scrape does; it prints the series on the
page, the page's bytes and the process's peak RSS (the simulated kubelet included, in
both runs alike). README's "Large kubelet replies" quotes it.

    .venv/bin/python bench/time_sliced.py
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from memory_worker import status_kib

from exporter.app import Exporter, demo_collectors
from exporter.cli import parse_config
from exporter.model import AllocatableResources, ContainerResources, DeviceGroup, PodResources
from exporter.sim.hardware import SimHardware
from exporter.sim.node import SimulatedNode
from exporter.sim.scenario import KubeletState, dense_hardware

REPLICAS = (1, 48)
POLLS = 3


@dataclass(frozen=True)
class _TimeSliced:
    """``replicas`` replicas of every GPU (``GPU-<uuid>::<n>``), each held by its own pod."""

    hardware: SimHardware
    replicas: int

    def state_at(self, tick: int) -> KubeletState:
        devices = tuple(
            DeviceGroup("nvidia.com/gpu", (f"{gpu.uuid}::{n}",), (gpu.numa_node,))
            for gpu in self.hardware.gpus
            for n in range(self.replicas)
        )
        pods = tuple(
            PodResources(f"team-{k % 8}", f"notebook-{k}", (ContainerResources("main", (d,)),))
            for k, d in enumerate(devices)
        )
        return KubeletState(pods, AllocatableResources(devices=devices))


async def _measure(replicas: int) -> dict[str, int]:
    scenario = _TimeSliced(dense_hardware(cpus=64, vfs=0, hcas=0), replicas)
    node = SimulatedNode(scenario, root=Path(tempfile.mkdtemp(prefix="prx-sliced-")))
    await node.start()
    flags = [*node.exporter_flags(), "--collector.nvml.gpm-interval", "0"]
    config = parse_config(flags, {})
    exporter = Exporter(config, collectors=demo_collectors(config, node))
    try:
        for _ in range(POLLS):
            published = await exporter.poller.poll_once()
            await node.advance()
        page = (await exporter.store.exposition(published)).page(openmetrics=True, gzipped=False)
    finally:
        await exporter.close()
        await node.stop()
    series = sum(1 for line in page.splitlines() if line and not line.startswith(b"#"))
    return {"replicas": replicas, "series": series, "page_bytes": len(page)}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--replicas":
        row = asyncio.run(_measure(int(sys.argv[2])))
        print(json.dumps({**row, "peak_kib": status_kib("VmHWM")}))
        return
    rows = []
    for replicas in REPLICAS:
        done = subprocess.run(
            [sys.executable, __file__, "--replicas", str(replicas)],
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    for row in rows:
        print(
            f"{row['replicas']:>2} replicas a GPU, {8 * row['replicas']} holders: "
            f"{row['series']:,} series, page {row['page_bytes'] / 1e6:.1f} MB, "
            f"peak RSS {row['peak_kib'] / 1024:.0f} MiB"
        )
    first, last = rows[0], rows[-1]
    added = (last["peak_kib"] - first["peak_kib"]) / 1024
    per_series = (last["peak_kib"] - first["peak_kib"]) / (last["series"] - first["series"])
    print(f"difference: {added:.0f} MiB, {per_series:.1f} KiB a series")


if __name__ == "__main__":
    main()
