"""bench.py's fresh exporter process for the memory rows: ``python memory_worker.py ROOT
[--freeze]``. Its own file, importing what the exporter imports and nothing of bench.py:
bench.py's imports (statistics, multiprocessing) added ~0.8 MiB to the RSS it measured.

Prints RSS after the imports (flags parsed), once the exporter is built and after a
first poll (KiB, one JSON line); then polls whenever a line arrives on stdin and answers
with RSS, peak RSS and the poll's CPU seconds.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
from pathlib import Path

from exporter.app import Exporter
from exporter.cli import parse_config
from exporter.logs import configure_logging
from exporter.memory import tune_allocator, tune_gc


def status_kib(field: str, status: Path = Path("/proc/self/status")) -> int:
    for line in status.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def kubelet_socket(root: Path) -> str:
    return str(root / "kubelet.sock")


def main(root: str, *, freeze: bool) -> None:
    # As a deployed exporter logs (its churn polls write allocation_changed lines).
    devnull = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - open for good
    configure_logging(level="info", fmt="json", stream=devnull)
    tune_allocator()  # as exporter.app.run() does before anything else
    tune_gc()
    flags = ["--kubelet.socket", kubelet_socket(Path(root)), "--path.sysfs", f"{root}/sys"]
    flags += ["--path.procfs", f"{root}/proc", "--web.listen-address", "127.0.0.1:0"]
    config = parse_config(flags, {})  # imports the collector modules
    stages = [status_kib("VmRSS")]
    exporter = Exporter(config)  # the real collectors: NVML absent here
    stages.append(status_kib("VmRSS"))

    async def serve() -> None:
        # Each poll's page is rendered, as a scrape of every snapshot would have it.
        await exporter.store.exposition(await exporter.poller.poll_once())
        print(json.dumps([*stages, status_kib("VmRSS")]), flush=True)
        if freeze:
            gc.freeze()  # what start-up made is never collected again
        loop = asyncio.get_running_loop()
        while await loop.run_in_executor(None, sys.stdin.readline):
            started = time.process_time()
            await exporter.store.exposition(await exporter.poller.poll_once())
            spent = time.process_time() - started
            print(json.dumps([status_kib("VmRSS"), status_kib("VmHWM"), spent]), flush=True)
        await exporter.close()

    asyncio.run(serve())


if __name__ == "__main__":
    main(sys.argv[1], freeze="--freeze" in sys.argv[2:])
