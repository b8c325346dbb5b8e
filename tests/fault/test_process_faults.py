"""The fault matrix, process side: signals, held connections, fd exhaustion, bursts.

Each case runs the real exporter process against the simulated node and asserts it
stays up (or exits cleanly when told), keeps answering within a bound, and says what
happened in one JSON log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from faultkit import ExporterProcess, rss_kib, start_exporter, wait_for
from fdlimit import need_open_files

from exporter.sim.node import SimulatedNode
from exporter.sim.scenario import DenseScenario
from exporter.web import SHUTDOWN_TIMEOUT_S

GRACE_S = 10.0  # the DaemonSet's terminationGracePeriodSeconds


@contextlib.asynccontextmanager
async def open_connections(
    port: int, count: int, *, send: bytes = b""
) -> AsyncIterator[list[asyncio.StreamWriter]]:
    writers = []
    try:
        for _ in range(count):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            if send:
                writer.write(send)
            writers.append(writer)
        yield writers
    finally:
        for writer in writers:
            writer.close()


class TestSignals:
    async def test_sigterm_under_load_exits_cleanly(self, running: Callable[..., Any]) -> None:
        """SIGTERM during 200 scrapes: exit 0 within the grace period, no 5xx, said in the log."""
        exporter: ExporterProcess = await running(ready_path="/readyz")
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            paths = ["/metrics", "/debug/allocations", "/debug/allocations?format=text"]
            requests = [
                asyncio.ensure_future(exporter.get(session, paths[i % 3])) for i in range(200)
            ]
            await asyncio.sleep(0.05)
            exporter.signal(signal.SIGTERM)
            answers = await asyncio.gather(*requests, return_exceptions=True)
            code = await exporter.wait_exit(within_s=GRACE_S)
        refused = [a for a in answers if isinstance(a, tuple) and not _answered_well(a)]
        # A request the listener refused once closed is fine; one dropped is not.
        dropped = [
            type(a).__name__
            for a in answers
            if isinstance(a, BaseException) and not isinstance(a, aiohttp.ClientConnectorError)
        ]
        assert (0, [], []) == (code, refused, dropped)
        assert ["SIGTERM"] == [e["signal"] for e in exporter.named("stopping")]
        assert 1 == len(exporter.named("stopped"))

    async def test_sigint_stops_as_sigterm_does(self, running: Callable[..., Any]) -> None:
        """Ctrl-C (SIGINT: `make demo` in a terminal) stops the exporter as SIGTERM does:
        exit 0, ``stopping`` naming it, JSON lines only (no KeyboardInterrupt traceback)."""
        exporter: ExporterProcess = await running()
        exporter.signal(signal.SIGINT)
        code = await exporter.wait_exit(within_s=GRACE_S)
        assert (0, ["SIGINT"], 1) == (
            code,
            [e["signal"] for e in exporter.named("stopping")],
            len(exporter.named("stopped")),
        )

    async def test_sighup_and_a_second_sigterm_are_harmless(
        self, running: Callable[..., Any]
    ) -> None:
        """SIGHUP is logged and ignored; a second SIGTERM while stopping changes nothing."""
        exporter: ExporterProcess = await running()
        exporter.signal(signal.SIGHUP)
        await wait_for(lambda: exporter.named("sighup_ignored"), within_s=5, what="SIGHUP logged")
        async with aiohttp.ClientSession() as session:
            assert 200 == (await exporter.get(session, "/healthz"))[0]
        # A client holding a body keeps the shutdown busy for a moment (LINGERING_TIME_S),
        # so the second SIGTERM surely lands while the exporter is stopping.
        held_body = b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nab"
        async with open_connections(exporter.port, 1, send=held_body):
            await asyncio.sleep(0.2)
            exporter.signal(signal.SIGTERM)
            await wait_for(lambda: exporter.named("stopping"), within_s=5, what="stopping")
            exporter.signal(signal.SIGTERM)
            assert 0 == await exporter.wait_exit(within_s=GRACE_S)
        assert (1, 1, 1) == (
            len(exporter.named("stopping")),
            len(exporter.named("stop_already_requested")),
            len(exporter.named("stopped")),
        )

    @pytest.mark.parametrize("late", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
    async def test_signals_after_stopped_cannot_kill_the_exit(
        self, running: Callable[..., Any], late: signal.Signals
    ) -> None:
        """SIGTERMs (or SIGHUPs) sent every few milliseconds from the ``stopped`` line to
        the end (a runtime and an operator both stopping it): the exit is still 0. The
        loop's clean-up used to put the default handlers back ~0.1 s before the process
        ended, SIGHUP's too (exit -1: killed by it)."""
        exporter: ExporterProcess = await running()
        exporter.signal(signal.SIGTERM)
        await wait_for(lambda: exporter.named("stopped"), within_s=GRACE_S, what="stopped")
        while exporter.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                exporter.signal(late)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(exporter.process.wait(), 0.002)
        assert 0 == exporter.process.returncode

    async def test_held_body_and_half_sent_head_cannot_delay_exit(
        self, running: Callable[..., Any]
    ) -> None:
        """Clients holding a request body or an unfinished head: exit within the grace period."""
        exporter: ExporterProcess = await running()
        held_body = b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\nab"
        async with (
            open_connections(exporter.port, 5, send=held_body),
            open_connections(exporter.port, 5, send=b"GET /metrics HTTP/1.1\r\nHo"),
        ):
            await asyncio.sleep(0.2)  # let the exporter take them in
            exporter.signal(signal.SIGTERM)
            assert 0 == await exporter.wait_exit(within_s=GRACE_S)

    async def test_a_client_that_stops_reading_cannot_hold_the_exit(
        self, running: Callable[..., Any]
    ) -> None:
        """A client that pipelines scrapes and never reads leaves a write stuck: SIGTERM
        still ends the process within SHUTDOWN_TIMEOUT_S (plus 2 s for the exit itself),
        not twice that, as aiohttp's two waits of its timeout would."""
        exporter: ExporterProcess = await running(ready_path="/readyz")
        stuck = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.setblocking(False)
        await asyncio.get_running_loop().sock_connect(stuck, ("127.0.0.1", exporter.port))
        _, writer = await asyncio.open_connection(sock=stuck)
        try:
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 50)
            await asyncio.sleep(1.0)  # the exporter fills the socket and waits on it
            exporter.signal(signal.SIGTERM)
            assert 0 == await exporter.wait_exit(within_s=SHUTDOWN_TIMEOUT_S + 2.0)
        finally:
            writer.close()


class TestConnections:
    async def test_2000_idle_connections(self, running: Callable[..., Any]) -> None:
        """2,000 idle connections: both endpoints answer, memory returns once they go."""
        need_open_files(2_500)  # the clients here; the exporter, started now, inherits it
        exporter: ExporterProcess = await running(ready_path="/readyz")
        async with aiohttp.ClientSession() as session:
            for path in ("/metrics", "/debug/allocations"):
                await exporter.get(session, path)
            before = rss_kib(exporter.pid)
            async with open_connections(exporter.port, 2000):
                answers = [
                    (await exporter.get(session, path))[0]
                    for path in ("/metrics", "/debug/allocations", "/healthz")
                ]
                during = rss_kib(exporter.pid)
            await asyncio.sleep(0.5)  # the exporter sees them close
            await exporter.get(session, "/healthz")
            after = rss_kib(exporter.pid)
        assert [200, 200, 200] == answers
        assert after - before < 32 * 1024, (before, during, after)

    async def test_fd_exhaustion_logged_once_per_interval(
        self, running: Callable[..., Any]
    ) -> None:
        """Out of file descriptors, every accept fails: one log line says so, not one each."""
        exporter: ExporterProcess = await running()
        in_use = len(await asyncio.to_thread(os.listdir, f"/proc/{exporter.pid}/fd"))
        _, hard = resource.prlimit(exporter.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(exporter.pid, resource.RLIMIT_NOFILE, (in_use + 3, hard))
        async with open_connections(exporter.port, 40):
            await wait_for(
                lambda: exporter.named("accept_failed"), within_s=10, what="accept_failed"
            )
            await asyncio.sleep(2.5)  # asyncio retries accept() every second meanwhile
        resource.prlimit(exporter.pid, resource.RLIMIT_NOFILE, (4096, hard))
        async with aiohttp.ClientSession() as session:
            status = await wait_for(
                lambda: _status(exporter, session, "/healthz"), within_s=10, what="healthz back"
            )
        failed = exporter.named("accept_failed")
        assert (200, 1, "warning") == (status, len(failed), failed[0]["level"])
        assert "Too many open files" in failed[0]["error"]


def _answered_well(answer: tuple[int, bytes, dict[str, str]]) -> bool:
    """200, or the /debug bound's 503 that says when to come back."""
    status, _, headers = answer
    return status == 200 or (status == 503 and "Retry-After" in headers)


async def _status(exporter: ExporterProcess, session: aiohttp.ClientSession, path: str) -> int:
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        return (await exporter.get(session, path))[0]
    return 0


@pytest.fixture
async def dense_node(short_tmp: Path) -> AsyncIterator[SimulatedNode]:
    node = SimulatedNode(DenseScenario.create(pod_count=250, cpus=64), root=short_tmp)
    await node.start()
    yield node
    await node.stop()


class TestBursts:
    ENDPOINTS = (
        "/metrics",
        "/debug/allocations",
        "/debug/allocations?format=text",
        "/debug/allocations?namespace=team-3",
        "/debug/allocations/team-1/worker-1-0",
        "/healthz",
        "/readyz",
        "/",
    )

    async def test_500_concurrent_requests_per_endpoint(
        self, dense_node: SimulatedNode, tmp_path: Path
    ) -> None:
        """500 at once on each endpoint of a 250-pod node: no 5xx but a bounded 503 with
        Retry-After, /healthz answers meanwhile, and memory returns to its level."""
        exporter = await start_exporter(dense_node, tmp_path, ready_path="/readyz")
        try:
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=connector) as session:
                for path in self.ENDPOINTS:  # warm: the per-snapshot encodings exist
                    await exporter.get(session, path)
                before = rss_kib(exporter.pid)
                outcomes: dict[str, set[int]] = {}
                for path in self.ENDPOINTS:
                    burst = [asyncio.ensure_future(exporter.get(session, path)) for _ in range(500)]
                    async with aiohttp.ClientSession() as side:
                        health = await exporter.get(side, "/healthz")
                    answers = await asyncio.gather(*burst)
                    assert all(_answered_well(a) for a in answers), path
                    outcomes[path] = {a[0] for a in answers} | {health[0] + 1000}
                await asyncio.sleep(2.5)  # a couple of polls: old encodings dropped
                after = rss_kib(exporter.pid)
        finally:
            exporter.signal(signal.SIGTERM)
            code = await exporter.wait_exit(within_s=GRACE_S)
        assert all(1200 in statuses for statuses in outcomes.values()), outcomes
        assert 0 == code
        assert after - before < 48 * 1024, (before, after)
