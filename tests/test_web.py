"""HTTP edge behaviour on the real runner: bounds, negotiation, parser errors, timeouts."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import socket
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web, web_response
from aiohttp.web_protocol import RequestHandler
from fdlimit import need_open_files
from multidict import CIMultiDict
from structlog.testing import capture_logs

from exporter.app import Exporter, demo_collectors
from exporter.auth import response_headers
from exporter.cli import parse_config
from exporter.config import ConfigError
from exporter.debugview import Filters
from exporter.sim.node import SimulatedNode
from exporter.web import (
    WebSettings,
    _Runner,
    _send,
    create_app,
    make_runner,
    unsupported_aiohttp,
)


def config_for(node: SimulatedNode) -> Any:
    return parse_config(
        [*node.exporter_flags(), "--kubelet.timeout=1", "--poll.interval=1", "--node-name=n1"],
        {},
    )


@pytest.fixture
async def exporter(sim_node: SimulatedNode) -> AsyncIterator[Exporter]:
    config = config_for(sim_node)
    exporter = Exporter(config, collectors=demo_collectors(config, sim_node))
    await exporter.poller.poll_once()
    yield exporter
    await exporter.close()


@contextlib.asynccontextmanager
async def serving(app: web.Application, **runner_options: Any) -> AsyncIterator[int]:
    """``app`` on the real runner on a free loopback port; yields the port."""
    runner, port = await started(app, **runner_options)
    try:
        yield port
    finally:
        await runner.cleanup()


async def started(app: web.Application, **runner_options: Any) -> tuple[web.AppRunner, int]:
    """``app`` on the real runner on a free loopback port, for a test that stops it."""
    runner = make_runner(app, **runner_options)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert isinstance(server, asyncio.base_events.Server)
    return runner, int(server.sockets[0].getsockname()[1])


async def raw_exchange(port: int, request: bytes, *, read_timeout_s: float = 5.0) -> bytes:
    """Send bytes as they are; read until the server closes (or the timeout)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        chunks = []
        async with asyncio.timeout(read_timeout_s):
            while chunk := await reader.read(65536):
                chunks.append(chunk)
        return b"".join(chunks)
    finally:
        writer.close()


def split_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


class TestParserErrors:
    @pytest.mark.parametrize(
        "request_bytes",
        [
            b"GARBAGE\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
            b"GET /metrics HTTP/9.9\r\n\r\n",
            b"GET /" + b"a" * 10000 + b" HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS client hello
            # Heads are read before any auth: at most 32 lines of at most 8 KiB.
            b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
            + b"".join(b"X-%d: v\r\n" % n for n in range(32))
            + b"\r\n",
        ],
    )
    async def test_answered_with_one_line_of_json(
        self, exporter: Exporter, request_bytes: bytes, caplog: pytest.LogCaptureFixture
    ) -> None:
        """What aiohttp's parser refuses is a 4xx with one JSON line, and no traceback logged."""
        async with serving(exporter.create_app()) as port:
            raw = await raw_exchange(port, request_bytes)
        status, headers, body = split_response(raw)
        assert (True, "application/json; charset=utf-8", 1) == (
            400 <= status < 500,
            headers["content-type"],
            body.count(b"\n"),
        )
        assert set(json.loads(body)) == {"error"}
        assert [] == [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]

    async def test_the_answer_does_not_quote_the_request(
        self, exporter: Exporter, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The error names the kind of failure only: never the bytes the client sent (a
        malformed line may hold a credential), in the answer or in the log."""
        secret = b"c2VjcmV0LXRva2Vu"
        requests = (
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization Basic " + secret + b"\r\n\r\n",
            b"GET /metrics?" + secret + b"\x01 HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-" + secret + b": " + b"v" * 9000 + b"\r\n\r\n",
        )
        with capture_logs() as logs:
            async with serving(exporter.create_app()) as port:
                answers = [split_response(await raw_exchange(port, r)) for r in requests]
        assert [400] * len(requests) == [status for status, _, _ in answers]
        assert [] == [body for _, _, body in answers if secret in body]
        assert secret.decode() not in repr(logs) + caplog.text


class TestExpect:
    async def test_an_expectation_not_met_is_a_json_417(self, exporter: Exporter) -> None:
        """aiohttp refuses any Expect but 100-continue before the middlewares, in plain
        text; the exporter's own handler refuses it as every other bad input."""
        sent = b"GET /metrics HTTP/1.1\r\nHost: x\r\nExpect: bogus\r\nConnection: close\r\n\r\n"
        async with serving(exporter.create_app()) as port:
            status, headers, body = split_response(await raw_exchange(port, sent))
        assert (417, "application/json; charset=utf-8") == (status, headers["content-type"])
        assert {"error": "unknown Expect: 'bogus'"} == json.loads(body)

    # An expectation's token is case-insensitive (RFC 9110 10.1.1).
    @pytest.mark.parametrize("token", [b"100-continue", b"100-Continue"])
    async def test_100_continue_is_still_met(self, exporter: Exporter, token: bytes) -> None:
        sent = (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: %s\r\nConnection: close\r\n\r\n" % token
        )
        async with serving(exporter.create_app()) as port:
            raw = await raw_exchange(port, sent)
        first, _, rest = raw.partition(b"\r\n\r\n")
        assert (b"HTTP/1.1 100 Continue", 200) == (first, split_response(rest)[0])

    @pytest.mark.parametrize("version", [b"HTTP/1.0", b"HTTP/2.0"])
    @pytest.mark.parametrize("expect", [b"100-continue", b"bogus"])
    async def test_expect_outside_http_1_1_is_ignored(
        self, exporter: Exporter, version: bytes, expect: bytes
    ) -> None:
        """As aiohttp's own handler: only an HTTP/1.1 request has expectations. An HTTP/1.0
        client cannot read an interim 100 (RFC 9110: a server MUST ignore its
        100-continue); aiohttp parses an "HTTP/2.0" request line as a request too."""
        sent = b"GET /healthz " + version + b"\r\nHost: x\r\nExpect: " + expect + b"\r\n\r\n"
        async with serving(exporter.create_app()) as port:
            raw = await raw_exchange(port, sent)
        assert (200, False) == (split_response(raw)[0], b" 100 " in raw)

    async def test_a_long_expectation_is_quoted_cut(self, exporter: Exporter) -> None:
        """The header may be 8 KiB: the 417 quotes 64 characters of it, as other errors do."""
        sent = (
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nExpect: "
            + b"e" * 1000
            + b"\r\nConnection: close\r\n\r\n"
        )
        async with serving(exporter.create_app()) as port:
            status, _, body = split_response(await raw_exchange(port, sent))
        expected = f"unknown Expect: '{'e' * 64}'... ({1000 - 64} more characters)"
        assert (417, {"error": expected}) == (status, json.loads(body))

    @pytest.mark.parametrize(
        "head",
        [
            b"GET /no-such-page HTTP/1.1",
            b"POST /metrics HTTP/1.1",
            b"PUT /debug/allocations HTTP/1.1",
        ],
    )
    async def test_a_path_or_method_no_route_serves_refuses_in_json_too(
        self, exporter: Exporter, head: bytes
    ) -> None:
        """aiohttp's own 404 and 405 answer an unmet Expect before any route, in plain
        text quoting the whole header: those are routes of the exporter's now."""
        sent = head + b"\r\nHost: x\r\nExpect: " + b"b" * 200 + b"\r\nConnection: close\r\n\r\n"
        async with serving(exporter.create_app()) as port:
            status, headers, body = split_response(await raw_exchange(port, sent))
        assert (417, "application/json; charset=utf-8") == (status, headers["content-type"])
        assert json.loads(body)["error"].endswith("(136 more characters)")

    @pytest.mark.parametrize(
        ("head", "status", "allow"),
        [
            (b"GET /no-such-page HTTP/1.1", 404, None),
            (b"GET /debug/allocations/ns/pod/more HTTP/1.1", 404, None),
            (b"POST /metrics HTTP/1.1", 405, "GET,HEAD"),
            (b"DELETE /debug/allocations/ns/pod HTTP/1.1", 405, "GET,HEAD"),
        ],
    )
    async def test_with_no_expectation_404_and_405_are_as_before(
        self, exporter: Exporter, head: bytes, status: int, allow: str | None
    ) -> None:
        """The routes that refuse what no other route serves answer as aiohttp's did."""
        sent = head + b"\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        async with serving(exporter.create_app()) as port:
            answer_status, headers, body = split_response(await raw_exchange(port, sent))
        reason = "Not Found" if status == 404 else "Method Not Allowed"
        assert (status, allow, {"error": reason}) == (
            answer_status,
            headers.get("allow"),
            json.loads(body),
        )


class TestQuotedInput:
    async def test_a_long_unknown_parameter_is_quoted_cut(self, exporter: Exporter) -> None:
        """Values are refused past 512 characters; a name is quoted back at most 64."""
        await exporter.poller.poll_once()
        key = "k" * 8000
        sent = f"GET /debug/allocations?{key}=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        async with serving(exporter.create_app()) as port:
            status, _, body = split_response(await raw_exchange(port, sent.encode()))
        error = json.loads(body)["error"]
        assert (400, True) == (status, error.startswith(f"unknown query parameter '{'k' * 64}'"))
        assert f"({8000 - 64} more characters)" in error
        assert len(body) < 300

    async def test_a_name_of_exactly_the_limit_is_quoted_whole(self, exporter: Exporter) -> None:
        """64 characters are quoted as they are, with no count of nothing left out."""
        key = "k" * 64
        sent = f"GET /debug/allocations?{key}=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        async with serving(exporter.create_app()) as port:
            _, _, body = split_response(await raw_exchange(port, sent.encode()))
        assert json.loads(body)["error"].startswith(f"unknown query parameter '{key}'; known: ")

    @pytest.mark.parametrize(
        ("path", "message"),
        [
            (f"/debug/allocations/{'N' * 1000}/pod", f"namespace '{'N' * 64}'... (936 more"),
            (f"/debug/allocations/ns/{'P' * 1000}", f"pod '{'P' * 64}'... (936 more"),
        ],
    )
    async def test_long_names_in_the_path_are_quoted_cut(
        self, exporter: Exporter, path: str, message: str
    ) -> None:
        """A name Kubernetes could not have is refused quoting at most 64 characters."""
        sent = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        async with serving(exporter.create_app()) as port:
            status, _, body = split_response(await raw_exchange(port, sent.encode()))
        assert (400, True) == (status, json.loads(body)["error"].startswith(message))


class TestPercentEscapes:
    """A "%" in a query not followed by two hex digits is refused, as Go refuses the query;
    what the client escaped properly is not."""

    @staticmethod
    async def _get(exporter: Exporter, target: str) -> tuple[int, str]:
        sent = f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        async with serving(exporter.create_app()) as port:
            status, _, body = split_response(await raw_exchange(port, sent.encode()))
        return status, json.loads(body).get("error", "") if status != 200 else ""

    @pytest.mark.parametrize(
        "target",
        [
            "/debug/allocations?namespace=%fz",  # one hex digit, then not
            "/debug/allocations?namespace=%zz?",  # a "?" in the query hides nothing before it
        ],
    )
    async def test_a_bad_escape_is_refused(self, exporter: Exporter, target: str) -> None:
        assert (400, "query string: a '%' not followed by two hex digits") == await self._get(
            exporter, target
        )

    @pytest.mark.parametrize(
        "target",
        [
            "/debug/allocations?namespace=kube%2Dsystem",  # upper-case hex digits
            "/debug/allocations?namespace=kube%2dsystem",
            "/debug/allocations?namespace=%25zz",  # an escaped "%": the filter '%zz'
        ],
    )
    async def test_a_proper_escape_is_taken(self, exporter: Exporter, target: str) -> None:
        assert (200, "") == await self._get(exporter, target)

    async def test_a_bad_escape_in_a_path_name_is_told_as_the_name(
        self, exporter: Exporter
    ) -> None:
        """Only the query is checked for escapes: a pod name holding one is refused as a
        name Kubernetes could not have, not as a query the request does not have."""
        status, error = await self._get(exporter, "/debug/allocations/ns/pod%zz")
        assert (400, "pod 'pod%zz' is not a valid Kubernetes pod name") == (status, error)


class TestAnswerDeadline:
    @staticmethod
    def _with_big_answers(app: web.Application) -> web.Application:
        @web.middleware
        async def big(request: web.Request, handler: Any) -> web.StreamResponse:
            body = b"x" * (8 * 1024 * 1024)
            if request.path == "/big":  # one write, as a small /metrics page goes
                return web.Response(body=body)
            if request.path == "/big-chunked":  # chunk by chunk, as /debug views go
                return await _send(request, (body,), headers={"Content-Type": "text/plain"})
            return await handler(request)

        app.middlewares.append(big)
        return app

    async def test_a_client_that_stops_reading_is_cut(
        self, exporter: Exporter, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """An answer the client stops taking: the connection is cut once a write waited
        SEND_STALL_S (it held the answer's memory, and a /debug slot, for as long as it
        stayed connected), quietly, and the server goes on answering others."""
        monkeypatch.setattr("exporter.web.SEND_STALL_S", 0.5)
        taken = {}
        async with serving(self._with_big_answers(exporter.create_app())) as port:
            for path in ("/big", "/big-chunked"):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                await asyncio.sleep(2.0)  # read nothing while the stall timeout passes
                taken[path] = 0
                with contextlib.suppress(ConnectionError):
                    async with asyncio.timeout(10):
                        while chunk := await reader.read(1 << 20):
                            taken[path] += len(chunk)
                writer.close()
            status, _, _ = split_response(
                await raw_exchange(port, b"GET /healthz HTTP/1.0\r\n\r\n")
            )
        assert all(n < 8 * 1024 * 1024 for n in taken.values()), taken  # cut, not finished
        assert status == 200
        assert [] == [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]

    async def test_a_slow_reader_that_keeps_reading_gets_everything(
        self, exporter: Exporter, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A reader taking a chunked answer slowly but steadily (a large /debug view
        through kubectl port-forward) gets all of it, however long it takes in total."""
        monkeypatch.setattr("exporter.web.SEND_STALL_S", 1.0)
        async with serving(self._with_big_answers(exporter.create_app())) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 16)
            writer.write(b"GET /big-chunked HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            started, raw = time.monotonic(), b""
            while chunk := await reader.read(256 * 1024):
                raw += chunk
                await asyncio.sleep(0.05)  # ~5 MiB/s: the 8 MiB take ~1.6 s, past the 1 s
            writer.close()
        assert time.monotonic() - started > 1.0
        assert len(split_response(raw)[2]) == 8 * 1024 * 1024


class TestStalledScrapers:
    async def test_a_big_page_is_not_copied_for_clients_that_stopped_reading(
        self, sim_node: SimulatedNode
    ) -> None:
        """Ten scrapers that stop reading a multi-megabyte page: asyncio copied what the
        kernel did not take for each (~6 MB a client: 30 of them passed the DaemonSet's
        memory limit); written in chunks, each holds about one."""
        sim_node.kubelet.padding_id_bytes = 40
        sim_node.kubelet.padding_bytes = 512 * 1024
        config = config_for(sim_node)
        exporter = Exporter(config, collectors=demo_collectors(config, sim_node))
        try:
            await exporter.poller.poll_once()
            runner, port = await started(exporter.create_app())
            stalled = []
            try:
                for _ in range(10):
                    sock = socket.socket()
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    sock.connect(("127.0.0.1", port))
                    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                    stalled.append(sock)
                await asyncio.sleep(1.0)
                published = exporter.store.current
                assert published is not None
                exposition = await exporter.store.exposition(published)
                page = len(exposition.page(openmetrics=False, gzipped=False))
                assert runner.server is not None
                unsent = [
                    c.transport.get_write_buffer_size()
                    for c in runner.server.connections
                    if c.transport
                ]
            finally:
                for sock in stalled:
                    sock.close()
                await runner.cleanup()
        finally:
            await exporter.close()
        assert page > 2 * 1024 * 1024
        assert len(unsent) == 10
        assert max(unsent) <= 256 * 1024, unsent


class TestWrongScheme:
    async def test_tls_on_the_plain_port_is_answered_and_said_once_a_minute(
        self, exporter: Exporter
    ) -> None:
        """A TLS client hello on the plain HTTP port (a scrape job left at scheme https)
        gets its 400 as any unparsable request, and a warning naming the client says why,
        as plain HTTP on the TLS port does: at most once a minute, the rest counted."""
        hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"
        with capture_logs() as logs:
            async with serving(exporter.create_app()) as port:
                answers = [await raw_exchange(port, hello) for _ in range(3)]
                plain = await raw_exchange(port, b"GARBAGE\r\n\r\n")
        said = [e for e in logs if e["event"] == "tls_request_on_http_port"]
        assert [400, 400, 400, 400] == [split_response(a)[0] for a in (*answers, plain)]
        assert [("warning", 0)] == [(e["log_level"], e["suppressed_since_last"]) for e in said]
        assert said[0]["peer"].startswith("127.0.0.1:")
        assert "scheme http" in said[0]["hint"]


class TestShutdown:
    async def test_a_request_on_its_way_at_shutdown_is_answered(self, exporter: Exporter) -> None:
        """A connection accepted before the listener closed, whose request was not read
        yet (a busy loop, or a client a moment behind), is answered, not closed silently:
        aiohttp closes every connection without a request at once, which dropped scrapes
        under SIGTERM. Here the request goes out only once the shutdown has begun."""
        runner, port = await started(exporter.create_app())
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            assert runner.server is not None
            for _ in range(200):  # until the server has accepted it
                if runner.server.connections:
                    break
                await asyncio.sleep(0.01)
            stopping = asyncio.create_task(runner.cleanup())
            await asyncio.sleep(0.2)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            async with asyncio.timeout(10):
                answer = await reader.read()
                await stopping
        finally:
            writer.close()
        assert 200 == split_response(answer)[0]

    async def test_a_connection_that_sends_nothing_does_not_hold_the_shutdown(
        self, exporter: Exporter
    ) -> None:
        """A connection that never sends a request is closed once the wait for first
        requests is over: the shutdown ends, and the connection with it."""
        runner, port = await started(exporter.create_app())
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            async with asyncio.timeout(10):
                await runner.cleanup()
                assert b"" == await reader.read()
        finally:
            writer.close()


class TestPipelining:
    async def test_requests_are_not_parsed_far_ahead_of_the_one_being_answered(
        self, exporter: Exporter
    ) -> None:
        """A client pipelining requests behind one that is slow to answer: aiohttp parsed
        up to 32 heads ahead (of up to a megabyte each, before any auth); now reading
        stops once one waits parsed (what the last read brought may add one more)."""
        release = asyncio.Event()
        answering: list[Any] = []
        app = exporter.create_app()

        @web.middleware
        async def hold_the_first(request: web.Request, handler: Any) -> web.StreamResponse:
            if not answering:
                answering.append(request.protocol)
                await release.wait()
            return await handler(request)

        app.middlewares.insert(0, hold_the_first)
        pad = b"".join(b"X-Pad-%d: %s\r\n" % (n, b"v" * 8000) for n in range(30))
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + pad + b"\r\n"  # 240 KB
        async with serving(app) as port:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(head * 40)
                await asyncio.sleep(0.5)
                queued = len(answering[0]._messages)
            finally:
                release.set()
                writer.close()
        assert queued <= 2


OM_1_0_0 = "application/openmetrics-text; version=1.0.0; charset=utf-8"
OM_0_0_1 = "application/openmetrics-text; version=0.0.1; charset=utf-8"
TEXT_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"


class TestHandlerFailures:
    async def test_a_failure_is_a_500_naming_only_its_type(
        self, exporter: Exporter, aiohttp_client: Any
    ) -> None:
        """An unexpected exception is answered 500 with one JSON line naming its type; its
        message, which may quote a request or a secret, goes to the log only."""

        @web.middleware
        async def failing(request: web.Request, handler: Any) -> web.StreamResponse:
            raise RuntimeError("token=hunter2")

        client = await aiohttp_client(exporter.create_app(middlewares=[failing]))
        with capture_logs() as logs:
            response = await client.get("/metrics")
            body = await response.text()
        assert (500, '{"error": "internal error: RuntimeError"}\n') == (response.status, body)
        assert ["http_handler_failed"] == [e["event"] for e in logs]


class TestMethodsAndNegotiation:
    async def test_405_says_what_is_allowed(self, exporter: Exporter, aiohttp_client: Any) -> None:
        """POST /metrics: 405 with Allow and a JSON error."""
        client = await aiohttp_client(exporter.create_app())
        response = await client.post("/metrics", data=b"x")
        body = await response.json()
        allow = response.headers.get("Allow", "")
        assert (405, {"GET", "HEAD"}) == (response.status, set(allow.replace(" ", "").split(",")))
        assert set(body) == {"error"}

    @pytest.mark.parametrize(
        ("accept", "encoding", "expected_type", "gzipped"),
        [
            ("", "gzip", "text/plain", True),
            ("", "gzip;q=0", "text/plain", False),
            ("", "gzip;q=0, *;q=1", "text/plain", False),
            ("", "*", "text/plain", True),
            ("", "identity, gzip;q=0.5", "text/plain", True),
            ("", "x-gzip", "text/plain", True),
            ("", "x-gzip;q=0", "text/plain", False),
            ("application/openmetrics-text;version=1.0.0", "", "application/openmetrics", False),
            ("application/openmetrics-text;q=0", "", "text/plain", False),
            ("application/openmetrics-text;q=0.2,text/plain;q=0.9", "", "text/plain", False),
            ("application/openmetrics-text;q=nan", "", "text/plain", False),
            # Ranges count for text/plain where it is not named: the most specific wins.
            ("text/*, application/openmetrics-text;q=0.1", "", "text/plain", False),
            ("*/*, application/openmetrics-text;q=0.1", "", "text/plain", False),
            ("*/*;q=0.1, application/openmetrics-text;q=0.5", "", "application/openmetrics", False),
            # A q outside 0-1, or one that is no number, says nothing: not "most wanted".
            ("application/openmetrics-text;q=2,text/plain;q=0.5", "", "text/plain", False),
            ("application/openmetrics-text;q=high", "", "text/plain", False),
            # Media types and parameter names have no case (RFC 9110 8.3.1, 12.4.2).
            ("Application/OpenMetrics-Text;version=1.0.0", "", "application/openmetrics", False),
            ("application/openmetrics-text;Q=0", "", "text/plain", False),
            ("", "GZIP", "text/plain", True),
            # A range named twice counts at its highest q, wherever that stands.
            (
                "text/plain;q=0.9, application/openmetrics-text;q=0.5, text/plain;q=0.1",
                "",
                "text/plain",
                False,
            ),
            ("", "gzip;q=0.5, gzip;q=0", "text/plain", True),
            (
                "text/plain;q=0.2, text/*, application/openmetrics-text;q=0.5",
                "",
                "application/openmetrics",
                False,
            ),
            # Prometheus 2.x's default scrape Accept.
            (
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                "gzip",
                "application/openmetrics",
                True,
            ),
        ],
    )
    async def test_q_values_are_honoured(
        self,
        exporter: Exporter,
        aiohttp_client: Any,
        accept: str,
        encoding: str,
        expected_type: str,
        gzipped: bool,
    ) -> None:
        """q=0 refuses a format or an encoding; the higher q wins between text and OpenMetrics."""
        client = await aiohttp_client(exporter.create_app(), auto_decompress=False)
        response = await client.get(
            "/metrics", headers={"Accept": accept, "Accept-Encoding": encoding}
        )
        assert (200, True, gzipped) == (
            response.status,
            response.headers["Content-Type"].startswith(expected_type),
            response.headers.get("Content-Encoding") == "gzip",
        )

    @pytest.mark.parametrize(
        "accept",
        [
            "",
            "text/plain;version=0.0.4",
            # Prometheus 3.x with scrape_protocols: [PrometheusText1.0.0, PrometheusText0.0.4]
            "text/plain;version=1.0.0;escaping=allow-utf-8,text/plain;version=0.0.4;q=0.9",
        ],
    )
    async def test_text_is_version_0_0_4_whatever_version_was_asked(
        self, exporter: Exporter, aiohttp_client: Any, accept: str
    ) -> None:
        """Every name is a legacy one, so the page is text 0.0.4 and says so: older
        parsers take another version of text/plain for an unknown format."""
        from prometheus_client.parser import text_string_to_metric_families

        client = await aiohttp_client(exporter.create_app())
        response = await client.get("/metrics", headers={"Accept": accept})
        families = list(text_string_to_metric_families(await response.text()))
        assert (200, "text/plain; version=0.0.4; charset=utf-8") == (
            response.status,
            response.headers["Content-Type"],
        )
        assert "podresources_exporter_build_info" in {f.name for f in families}

    @pytest.mark.parametrize(
        ("accept", "content_type"),
        [
            # Prometheus 3.x's default: 1.0.0 names the escaping asked for.
            (
                "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
                "application/openmetrics-text;version=0.0.1;q=0.5,"
                "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
                "text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
                f"{OM_1_0_0}; escaping=allow-utf-8",
            ),
            # Prometheus 2.x's default names none: prometheus/common's default scheme.
            (
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                f"{OM_1_0_0}; escaping=underscores",
            ),
            (
                "application/openmetrics-text;version=1.0.0;escaping=bogus",
                f"{OM_1_0_0}; escaping=underscores",
            ),
            # scrape_protocols: [OpenMetricsText0.0.1]; no version means 0.0.1 upstream.
            ("application/openmetrics-text;version=0.0.1;q=0.6,*/*;q=0.5", OM_0_0_1),
            ("application/openmetrics-text", OM_0_0_1),
            # 1.0.0 refused, 0.0.1 accepted: the accepted one.
            (
                "application/openmetrics-text;version=1.0.0;q=0,"
                "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;q=0.4",
                OM_0_0_1,
            ),
            # A version this page is not: text, which */* accepts.
            ("application/openmetrics-text;version=2.0.0;q=0.6,*/*;q=0.5", TEXT_0_0_4),
            # Equally preferred: the newer version, and OpenMetrics over text.
            (
                "application/openmetrics-text;version=0.0.1,application/openmetrics-text;"
                "version=1.0.0",
                f"{OM_1_0_0}; escaping=underscores",
            ),
            ("text/plain,application/openmetrics-text;version=0.0.1", OM_0_0_1),
        ],
    )
    async def test_the_content_type_names_a_version_and_escaping_that_were_asked_for(
        self, exporter: Exporter, aiohttp_client: Any, accept: str, content_type: str
    ) -> None:
        """The answer is one of the formats the scraper accepted, labelled as the content
        negotiation rules say (prometheus/docs content_negotiation.md): an OpenMetrics
        1.0.0 answer names its escaping scheme; the page is OpenMetrics 0.0.1 as well as
        1.0.0, and is served as whichever was preferred."""
        client = await aiohttp_client(exporter.create_app())
        response = await client.get("/metrics", headers={"Accept": accept})
        body = await response.text()
        assert (200, content_type) == (response.status, response.headers["Content-Type"])
        assert body.endswith("# EOF\n") == content_type.startswith("application/openmetrics")

    async def test_the_page_varies_with_accept_and_accept_encoding(
        self, exporter: Exporter, aiohttp_client: Any
    ) -> None:
        """Vary names both headers the page is negotiated on: a cache in between must not
        answer a text scraper with OpenMetrics, or a client without gzip with gzip."""
        client = await aiohttp_client(exporter.create_app(), auto_decompress=False)
        varies = []
        for encoding in ("", "gzip"):
            response = await client.get("/metrics", headers={"Accept-Encoding": encoding})
            assert 200 == response.status
            varies.append({v.strip().lower() for v in response.headers.get("Vary", "").split(",")})
        assert [{"accept", "accept-encoding"}] * 2 == varies

    @pytest.mark.parametrize(
        "path",
        [
            "/metrics",
            "/debug/allocations",
            "/debug/allocations?format=text",
            "/debug/allocations/ml-training/trainer-0",
        ],
    )
    async def test_head_ends_with_its_headers(
        self, exporter: Exporter, aiohttp_client: Any, path: str
    ) -> None:
        """HEAD answers GET's status and length, and no body: a request that follows on
        the same kept-alive connection reads its own answer, not the rest of HEAD's."""
        client = await aiohttp_client(exporter.create_app())
        head = await client.head(path)
        head_body = await head.read()
        following = await client.get("/healthz")

        assert (200, True, b"") == (head.status, int(head.headers["Content-Length"]) > 0, head_body)
        assert (200, "ok\n") == (following.status, await following.text())

    async def test_a_header_on_several_lines_is_one_list(
        self, exporter: Exporter, aiohttp_client: Any
    ) -> None:
        """Accept and Accept-Encoding sent twice are read as one list each, not the first."""
        client = await aiohttp_client(exporter.create_app(), auto_decompress=False)
        headers = CIMultiDict(
            [
                ("Accept", "text/plain;q=0.5"),
                ("Accept", "application/openmetrics-text"),
                ("Accept-Encoding", "br"),
                ("Accept-Encoding", "gzip"),
            ]
        )
        response = await client.get("/metrics", headers=headers)

        assert (200, True, "gzip") == (
            response.status,
            response.headers["Content-Type"].startswith("application/openmetrics-text"),
            response.headers.get("Content-Encoding"),
        )


class TestDebugBound:
    async def test_beyond_the_bound_503_with_retry_after(
        self, exporter: Exporter, sim_node: SimulatedNode, aiohttp_client: Any
    ) -> None:
        """Requests past the bound get 503 + Retry-After at once; others still answer."""
        app = create_app(
            store=exporter.store,
            settings=WebSettings(poll_interval_s=1, debug_max_in_flight=2),
            lookup=exporter.lookup,
        )
        client = await aiohttp_client(app)
        sim_node.kubelet.hang = True  # two fresh look-ups hold both places
        held = [
            asyncio.ensure_future(client.get(f"/debug/allocations/ml-training/trainer-{i}"))
            for i in range(2)
        ]
        for _ in range(250):
            if sim_node.kubelet.calls["v1.Get"] >= 2:
                break
            await asyncio.sleep(0.02)
        refused = await client.get("/debug/allocations")
        metrics = await client.get("/metrics")
        sim_node.kubelet.hang = False
        statuses = [r.status for r in await asyncio.gather(*held)]
        assert (503, "1", {"error"}) == (
            refused.status,
            refused.headers.get("Retry-After"),
            set(await refused.json()),
        )
        assert (200, [200, 404]) == (metrics.status, sorted(statuses))
        after = await client.get("/debug/allocations")
        assert 200 == after.status

    async def test_one_encoding_per_snapshot(self, exporter: Exporter, aiohttp_client: Any) -> None:
        """Concurrent unfiltered requests share one encoding; the next poll makes a new one."""
        client = await aiohttp_client(exporter.create_app())
        bodies = await asyncio.gather(*(client.get("/debug/allocations") for _ in range(20)))
        first = {json.dumps(json.loads(await r.read()) | {"age_seconds": 0}) for r in bodies}
        await exporter.poller.poll_once()
        later = json.loads(await (await client.get("/debug/allocations")).read())
        assert 1 == len(first)
        assert json.loads(next(iter(first)))["collected_at"] != later["collected_at"]


class TestHeldViews:
    """What the views requests hold may take: an unfiltered view shared by the requests
    of its snapshot counts once; one of each snapshot slow clients still hold counts
    (it was free, so 64 slow clients of 64 polls held 64 full views uncounted)."""

    async def test_shared_views_count_once_and_each_snapshot_counts(
        self, exporter: Exporter
    ) -> None:
        from exporter.web import _DebugViews

        await exporter.poller.poll_once()
        first = exporter.store.current
        assert first is not None
        await exporter.poller.poll_once()  # a newer snapshot, its own encodings
        second = exporter.store.current
        assert second is not None
        assert second is not first
        probe = _DebugViews(max_in_flight=64, max_renders=2, max_held_bytes=1 << 30)
        async with probe.view(
            first.snapshot, filters=Filters(), output="json", shared=first.debug_views
        ) as view:
            size = view.size
        views = _DebugViews(max_in_flight=64, max_renders=2, max_held_bytes=size + size // 2)
        full = {"filters": Filters(), "output": "json"}
        async with views.view(first.snapshot, **full, shared=first.debug_views):
            async with views.view(first.snapshot, **full, shared=first.debug_views):
                assert views.held_bytes == size  # one view, two holders
            with pytest.raises(web.HTTPServiceUnavailable):
                async with views.view(second.snapshot, **full, shared=second.debug_views):
                    pass
        assert views.held_bytes == 0


class TestServerHeader:
    async def test_no_versions_whatever_aiohttp_defaults_to(
        self, exporter: Exporter, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Server names the exporter without versions on the app's answers and on the
        parser's 400, whatever aiohttp's own default: it was replaced by assigning
        aiohttp's module global web_response.SERVER_SOFTWARE, which a release reading
        its default elsewhere would leave naming Python's and aiohttp's, unnoticed."""
        monkeypatch.setattr(web_response, "SERVER_SOFTWARE", "Python/3.11 aiohttp/9.9.9")
        app = exporter.create_app()
        app.on_response_prepare.append(response_headers(None))  # as the exporter serves
        requests = [
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            b"GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            b"GARBAGE\r\n\r\n",
        ]
        async with serving(app) as port:
            answers = [split_response(await raw_exchange(port, r)) for r in requests]
        assert [
            (200, "podresources-exporter"),
            (404, "podresources-exporter"),
            (400, "podresources-exporter"),
        ] == [(status, headers.get("server")) for status, headers, _ in answers]


class TestAiohttpInternals:
    """The server leans on aiohttp attributes aiohttp does not document; a release
    without them is refused at start-up, not served without the bounds they give."""

    async def test_the_installed_release_has_them(self) -> None:
        """aiohttp's own handler and the runner's server have each, of its type: an
        upgrade that renames one fails here, not in production."""
        runner = make_runner(web.Application())
        await runner.setup()
        try:
            plain = RequestHandler(runner.server, loop=asyncio.get_running_loop())
            found = {
                "_max_msg_queue_size": type(plain._max_msg_queue_size),
                "_msg_queue_resume_size": type(plain._msg_queue_resume_size),
                "_request_in_progress": type(plain._request_in_progress),
                "_messages": type(plain._messages),
                "_manager": isinstance(plain._manager, web.Server),
                "_connections": type(runner.server._connections),  # type: ignore[union-attr]
                "problem": unsupported_aiohttp(runner.server),
            }
        finally:
            await runner.cleanup()
        assert {
            "_max_msg_queue_size": int,
            "_msg_queue_resume_size": int,
            "_request_in_progress": bool,
            "_messages": deque,
            "_manager": True,
            "_connections": dict,
            "problem": None,
        } == found

    @pytest.mark.parametrize(
        "name",
        [
            "_max_msg_queue_size",
            "_msg_queue_resume_size",
            "_request_in_progress",
            "_messages",
            "_manager",
        ],
    )
    async def test_a_release_without_one_is_refused_at_setup(
        self, monkeypatch: pytest.MonkeyPatch, name: str
    ) -> None:
        """As a release that renamed it: the set-up fails with one line naming aiohttp's
        release and the attribute; it used to serve, the bound gone or the connection
        limit failing once reached."""
        made = RequestHandler.__init__

        def renamed(self: RequestHandler, *args: Any, **kwargs: Any) -> None:
            made(self, *args, **kwargs)
            delattr(self, name)

        monkeypatch.setattr(RequestHandler, "__init__", renamed)
        runner = make_runner(web.Application())
        with pytest.raises(ConfigError) as refused:
            await runner.setup()
        said = f"aiohttp {aiohttp.__version__} is not supported: RequestHandler.{name} "
        assert str(refused.value).startswith(said)
        assert runner.server is None  # cleaned up: nothing left running

    async def test_a_runner_that_does_not_ask_for_the_server_is_refused(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """aiohttp's AppRunner makes its server through the undocumented _make_server: a
        release that stops would serve aiohttp's plain server, without the JSON errors,
        timeouts and limits. The set-up refuses instead."""
        monkeypatch.delattr(_Runner, "_make_server")
        runner = make_runner(web.Application())
        with pytest.raises(ConfigError, match="no longer makes its server through _make_server"):
            await runner.setup()


HOLD = b"GET /hold HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def _holding_app() -> tuple[web.Application, asyncio.Event, asyncio.Event]:
    """An app whose /hold answers once ``release`` is set, setting ``entered`` as it
    starts: a connection in the middle of a request for as long as the test wants."""
    entered, release = asyncio.Event(), asyncio.Event()

    async def hold(request: web.Request) -> web.Response:
        entered.set()
        await release.wait()
        return web.Response(text="held\n")

    app = web.Application()
    app.router.add_get("/hold", hold)
    return app, entered, release


class TestConnectionLimit:
    """Past max_connections, the one waiting longest without a request in progress goes."""

    HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"

    async def test_a_scraper_gets_the_place_of_the_oldest_slow_head(
        self, exporter: Exporter
    ) -> None:
        """Two clients sending their heads slowly fill the connections: a third, sending
        its request at once, is answered, the oldest slow one is closed and the other
        still served. (Without the limit, thousands of slow heads outgrew the memory.)"""
        async with serving(exporter.create_app(), max_connections=2) as port:
            slow = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
            for _, writer in slow:
                writer.write(self.HEALTHZ[:20])
                await writer.drain()
            scraper = await raw_exchange(port, self.HEALTHZ)
            ends = []
            for reader, writer in slow:
                writer.write(self.HEALTHZ[20:])
                async with asyncio.timeout(5):
                    ends.append(await reader.read())
                writer.close()
        assert (200, b"", 200) == (
            split_response(scraper)[0],
            ends[0],
            split_response(ends[1])[0],
        )

    async def test_where_every_one_is_busy_the_new_one_is_closed(self) -> None:
        """With every connection in the middle of a request, the new one is closed,
        and the request in progress is answered all the same."""
        app, entered, release = _holding_app()

        async def healthz(request: web.Request) -> web.Response:
            return web.Response(text="ok\n")

        app.router.add_get("/healthz", healthz)
        async with serving(app, max_connections=1) as port:
            busy = asyncio.ensure_future(raw_exchange(port, HOLD))
            await entered.wait()
            refused = await raw_exchange(port, self.HEALTHZ)
            release.set()
            held = await busy
        assert (b"", 200) == (refused, split_response(held)[0])

    async def test_the_new_connection_closed_leaves_no_failed_task(self) -> None:
        """The handler of a connection closed as it came still runs once, and ends
        cleanly: closed before its first step, it failed an assert, and asyncio reported
        "Task exception was never retrieved", an event_loop_error line per connection
        refused, in the very storm the once-a-minute http_connections_full is for."""
        app, entered, release = _holding_app()
        loop = asyncio.get_running_loop()
        reported: list[str] = []
        loop.set_exception_handler(lambda _, context: reported.append(context["message"]))
        try:
            async with serving(app, max_connections=1) as port:
                busy = asyncio.ensure_future(raw_exchange(port, HOLD))
                await entered.wait()
                refused = [await raw_exchange(port, self.HEALTHZ) for _ in range(3)]
                release.set()
                await busy
            gc.collect()  # a failed task is reported when it is freed
            await asyncio.sleep(0)
        finally:
            loop.set_exception_handler(None)
        assert ([b""] * 3, []) == (refused, reported)

    async def test_a_client_gone_mid_request_leaves_its_place(self) -> None:
        """A connection whose client left while its request is still being answered
        stays listed until the handler ends, but holds no place: a new one is served."""
        entered, gone, release = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def hold(request: web.Request) -> web.Response:
            entered.set()
            for _ in range(500):  # the client's close reaches here in a few loop turns
                if request.transport is None:
                    break
                await asyncio.sleep(0.01)
            gone.set()
            await release.wait()
            return web.Response(text="held\n")

        async def healthz(request: web.Request) -> web.Response:
            return web.Response(text="ok\n")

        app = web.Application()
        app.router.add_get("/hold", hold)
        app.router.add_get("/healthz", healthz)
        async with serving(app, max_connections=1) as port:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
            await entered.wait()
            writer.close()
            await gone.wait()
            answer = await raw_exchange(port, self.HEALTHZ)
            release.set()
        assert 200 == split_response(answer)[0]


class TestConnectionTimeouts:
    async def test_idle_connection_is_closed(self, exporter: Exporter) -> None:
        """A connection that sends nothing is closed after the keep-alive timeout."""
        async with serving(exporter.create_app(), keepalive_timeout_s=0.3) as port:
            assert b"" == await raw_exchange(port, b"", read_timeout_s=5)

    async def test_2000_idle_connections_are_all_closed(self, exporter: Exporter) -> None:
        """2,000 connections that send nothing are all closed by the server, while it answers."""
        need_open_files(4_500)  # both ends of each connection are in this process
        async with serving(exporter.create_app(), keepalive_timeout_s=1.0) as port:
            opened = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2000)]
            try:
                answer = await raw_exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                async with asyncio.timeout(30):
                    ends = await asyncio.gather(*(reader.read(1) for reader, _ in opened))
            finally:
                for _, writer in opened:
                    writer.close()
        assert (200, {b""}) == (split_response(answer)[0], set(ends))

    async def test_half_sent_head_is_closed(self, exporter: Exporter) -> None:
        """A request head that never ends does not hold the connection."""
        async with serving(exporter.create_app(), keepalive_timeout_s=0.3) as port:
            raw = await raw_exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow:")
        assert b"" == raw

    async def test_keep_alive_connection_is_closed_after_its_answer(
        self, exporter: Exporter
    ) -> None:
        """After an answer, an idle keep-alive connection is closed too."""
        async with serving(exporter.create_app(), keepalive_timeout_s=0.3) as port:
            raw = await raw_exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert 200 == split_response(raw)[0]

    async def test_held_body_is_given_up(self, exporter: Exporter) -> None:
        """A body announced and never sent: answered, then the connection is dropped."""
        request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc"
        async with serving(
            exporter.create_app(), keepalive_timeout_s=30, lingering_time_s=0.3
        ) as port:
            raw = await raw_exchange(port, request)
        assert 200 == split_response(raw)[0]
