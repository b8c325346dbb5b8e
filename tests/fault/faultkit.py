"""The fault matrix's tools: a real exporter process beside the simulated node.

Imported by the fault tests; the ``running`` fixture in conftest.py starts them.

The exporter runs as ``python -m exporter`` on a free loopback port, pointed at a
simulated kubelet served by the test's own event loop on a real unix socket. Its
stderr is kept: every line must be one JSON object (no traceback, ever).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
from freshprocess import with_repo_path

from exporter.sim.node import SimulatedNode

START_TIMEOUT_S = 30.0
ANSWER_TIMEOUT_S = 5.0  # "keeps answering within a bound": generous, never a target


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def rss_kib(pid: int) -> int:
    """Resident set size of a process, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def peak_rss_kib(pid: int) -> int:
    """The highest resident set size a process has had (VmHWM), from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for pid {pid}")


async def wait_for(check: Callable[[], Any], *, within_s: float, what: str) -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy; bounded."""
    deadline = time.monotonic() + within_s
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s:g} s: {what}")
        await asyncio.sleep(0.05)


class ExporterProcess:
    """One ``python -m exporter`` process and what it said."""

    def __init__(self, process: asyncio.subprocess.Process, *, port: int, log_path: Path) -> None:
        self.process = process
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.process.pid

    def events(self) -> list[dict[str, Any]]:
        """Every stderr line, parsed: a line that is not one JSON object fails the test."""
        lines = self.log_path.read_text(errors="replace").splitlines()
        parsed = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                raise AssertionError(f"log line is not JSON: {line[:300]!r}") from None
            assert isinstance(event, dict), line
            parsed.append(event)
        return parsed

    def named(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events() if e.get("event") == event]

    async def get(
        self, session: aiohttp.ClientSession, path: str, **kwargs: Any
    ) -> tuple[int, bytes, dict[str, str]]:
        timeout = aiohttp.ClientTimeout(total=ANSWER_TIMEOUT_S)
        async with session.get(self.url + path, timeout=timeout, **kwargs) as response:
            return response.status, await response.read(), dict(response.headers)

    async def wait_exit(self, *, within_s: float) -> int:
        try:
            async with asyncio.timeout(within_s):
                return await self.process.wait()
        except TimeoutError:
            raise AssertionError(f"exporter still running after {within_s:g} s") from None

    def signal(self, signum: int) -> None:
        """Send ``signum``; ProcessLookupError once the process is gone.

        Not ``Process.send_signal``: it goes through ``Popen.poll()``, whose
        ``waitpid(WNOHANG)`` can reap a child that has just exited before asyncio's child
        watcher does, and the watcher then reports 255 for an exit that was 0."""
        os.kill(self.pid, signum)


def _flags(node: SimulatedNode | None) -> Sequence[str]:
    if node is None:
        raise ValueError("start_exporter needs a node or its flags")
    return node.exporter_flags()


async def start_exporter(
    node: SimulatedNode | None,
    log_dir: Path,
    *extra: str,
    flags: Sequence[str] | None = None,
    wrapper: Sequence[str] = (),
    ready_path: str = "/healthz",
) -> ExporterProcess:
    port = free_port()
    log_path = log_dir / f"exporter-{port}.log"
    argv = [
        *wrapper,
        sys.executable,
        "-m",
        "exporter",
        *(_flags(node) if flags is None else flags),
        "--web.listen-address",
        f"127.0.0.1:{port}",
        "--poll.interval",
        "1",
        "--kubelet.timeout",
        "1",
        "--node-name",
        "fault-node",
        *extra,
    ]
    env = with_repo_path({**os.environ, "GRPC_VERBOSITY": "ERROR"})
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=log, stderr=asyncio.subprocess.STDOUT, env=env
        )
    exporter = ExporterProcess(process, port=port, log_path=log_path)

    async def ready() -> bool:
        if process.returncode is not None:
            raise AssertionError(f"exporter exited {process.returncode}: {log_path.read_text()}")
        try:
            async with aiohttp.ClientSession() as session:
                status, _, _ = await exporter.get(session, ready_path)
                return status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    await wait_for(ready, within_s=START_TIMEOUT_S, what="exporter answering")
    return exporter
