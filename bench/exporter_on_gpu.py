"""The whole exporter at its defaults on this machine's NVIDIA GPUs: its process CPU.

    .venv/bin/python bench/exporter_on_gpu.py [--seconds 60] [--warmup 15] [-- FLAG ...]

Needs an NVIDIA GPU (`make bench` measures simulated ones). A simulated kubelet, on a
unix socket of its own, lists every GPU as allocatable and one pod holding GPU 0; the
exporter polls it at its defaults (every collector on that is on by default; the FLAGs
after ``--`` are added, ``--collector.nvml.gpm-interval=0`` say). ``--warmup`` seconds
after the exporter is first ready (start-up and NVML's initialisation left out) it
reads the process's CPU time from /proc, again half-way and at the end of
``--seconds``, and at each prints what /metrics serves of GPU 0's energy and GPM
figures, and the exporter's own poll figures: the GPM families appear one
--collector.nvml.gpm-interval after start. Last, the CPU
spent over ``--seconds``, in millicores. The kernel counts CPU in ticks (10 ms at 100
Hz), so a minute or more gives a figure to a few tenths of a millicore.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pynvml

from exporter.model import AllocatableResources, ContainerResources, DeviceGroup, PodResources
from exporter.sim.kubelet import SimKubelet

# What is printed of each page: GPU 0's energy, a GPM ratio and the PCIe counters, and
# the poll's own figures.
SHOWN = re.compile(
    r"(podresources_gpu_(energy_joules_total|sm_active_ratio|pcie_(transmit|receive)_bytes_total)"
    r"\{[^}]*pod=\"trainer-0\"|podresources_poll_duration_seconds |"
    r"podresources_collector_duration_seconds\{collector=\"nvml\"\})"
)


# How long the exporter may take to publish its first poll: a bound for a broken start.
READY_TIMEOUT_S = 60.0


def _gpu_uuids() -> tuple[str, ...]:
    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        return tuple(
            pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)
        )
    finally:
        pynvml.nvmlShutdown()


def _cpu_seconds(pid: int) -> float:
    """User and system CPU of a process, from /proc/<pid>/stat (fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _page(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return str(reply.read().decode())
    except OSError:
        return None


async def _ready(url: str, exporter: asyncio.subprocess.Process) -> float:
    """When the exporter first answers /readyz (its first poll published): the warmup
    counts from there, so a start slowed by a busy machine does not use it up."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if exporter.returncode is not None:
            sys.exit(f"the exporter exited ({exporter.returncode}) before it was ready")
        if await asyncio.to_thread(_page, f"{url}/readyz") is not None:
            return time.monotonic()
        await asyncio.sleep(0.1)
    sys.exit(f"the exporter was not ready within {READY_TIMEOUT_S:g} s")


async def _measure(args: argparse.Namespace) -> None:
    gpus = _gpu_uuids()
    folder = Path(tempfile.mkdtemp(prefix="prx"))  # short: a socket path ends at 108 bytes
    held = DeviceGroup("nvidia.com/gpu", gpus[:1])
    pod = PodResources("ml", "trainer-0", (ContainerResources("main", devices=(held,)),))
    kubelet = SimKubelet(socket_path=str(folder / "kubelet.sock"))
    kubelet.set_state(
        pods=(pod,), allocatable=AllocatableResources(devices=(DeviceGroup(held.resource, gpus),))
    )
    await kubelet.start()
    url = f"http://127.0.0.1:{_free_port()}"
    argv = [
        *("--kubelet.socket", str(folder / "kubelet.sock")),
        *("--web.listen-address", url.removeprefix("http://")),
        *("--path.pod-logs", str(folder / "no-pod-logs")),
        *("--log.level", "warning"),
        *args.flags,
    ]
    exporter = await asyncio.create_subprocess_exec(sys.executable, "-m", "exporter", *argv)
    print(f"{len(gpus)} GPU(s), the pod holding {gpus[0]}; exporter {' '.join(argv)}", flush=True)
    try:
        started = await _ready(url, exporter)
        marks = []
        for at in (args.warmup, args.warmup + args.seconds / 2, args.warmup + args.seconds):
            await asyncio.sleep(max(0.0, started + at - time.monotonic()))
            if exporter.returncode is not None:
                sys.exit(f"the exporter exited ({exporter.returncode}) before {at:g} s")
            marks.append(_cpu_seconds(exporter.pid))
            page = await asyncio.to_thread(_page, f"{url}/metrics") or ""
            print(f"== at {at:g} s: process CPU {marks[-1]:.2f} s", flush=True)
            for line in page.splitlines():
                if SHOWN.match(line):
                    print(f"  {line}", flush=True)
        spent = marks[-1] - marks[0]
        print(
            f"CPU over {args.seconds:g} s: {spent * 1000:.0f} ms, "
            f"{spent / args.seconds * 1000:.2f} millicores",
            flush=True,
        )
    finally:
        exporter.terminate()
        await asyncio.wait_for(exporter.wait(), 30)
        await kubelet.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="the window measured")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds left out first")
    parser.add_argument("flags", nargs="*", help="more exporter flags, after --")
    asyncio.run(_measure(parser.parse_args()))


if __name__ == "__main__":
    main()
