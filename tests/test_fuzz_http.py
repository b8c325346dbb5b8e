"""HTTP input fuzzed with hypothesis, with and without basic auth: no 5xx, no traceback.

Raw bytes go to the real runner over loopback, so what aiohttp's parser refuses is
fuzzed too, not only what reaches the routes. The exporter runs in a thread with its
own event loop for the whole module; hypothesis drives plain blocking sockets.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlencode

import bcrypt
import pytest
import structlog
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import LogCapture

from exporter.app import Exporter, demo_collectors
from exporter.auth import PasswordChecker, access_middleware
from exporter.cli import parse_config
from exporter.sim.node import SimulatedNode
from exporter.sim.scenario import DemoScenario
from exporter.web import make_runner
from exporter.webconfig import LiveWebConfig

USER, PASSWORD = "prometheus", "s3cret"
# One worker of `make unit` runs them all: the demo's exporter, started once.
pytestmark = pytest.mark.xdist_group("fuzz_http")

GOOD_AUTH = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
ROUTES = (
    "/",
    "/metrics",
    "/healthz",
    "/readyz",
    "/debug/allocations",
    "/debug/allocations/ml-training/trainer-0",
)


# What the exporter logs through structlog, from every test here (the serving thread
# shares the process-wide configuration).
LOGS = LogCapture()


@pytest.fixture(autouse=True)
def _capture_structlog() -> None:
    # conftest resets structlog before each test; capture again after it.
    structlog.configure(processors=[LOGS])


@dataclass(frozen=True, slots=True)
class Served:
    port: int


@dataclass(frozen=True, slots=True)
class Servers:
    plain: Served
    authed: Served


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """The demo node's exporter on the real runner, in a thread with its own loop (one:
    grpc.aio keeps to one loop per process), served twice: without and with basic auth."""
    root = tmp_path_factory.mktemp("fuzz")
    ports: list[int] = []
    ready = threading.Event()
    loops: list[asyncio.AbstractEventLoop] = []
    stop = asyncio.Event()

    async def main() -> None:
        loops.append(asyncio.get_running_loop())
        node = SimulatedNode(DemoScenario.create(), root=root)
        await node.start()
        config = parse_config(
            [*node.exporter_flags(), "--poll.interval=1", "--kubelet.timeout=1"], {}
        )
        exporter = Exporter(config, collectors=demo_collectors(config, node))
        await exporter.poller.poll_once()
        # Keep polling, as the real process does: else /readyz rightly turns 503 once
        # the one snapshot is three intervals old, which a slow fuzz run outlasts.
        polling = asyncio.create_task(exporter.poller.run())
        hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
        web_config = root / "web-config.yml"
        web_config.write_text(f"basic_auth_users:\n  {USER}: '{hashed}'\n")
        checker = PasswordChecker()
        auth = access_middleware(
            web_config=LiveWebConfig(web_config), debug_users=None, checker=checker
        )
        runners = []
        for middlewares in ([], [auth]):
            runner = make_runner(exporter.create_app(middlewares=middlewares))
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            ports.append(site._server.sockets[0].getsockname()[1])
            runners.append(runner)
        ready.set()
        await stop.wait()
        polling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await polling
        for runner in runners:
            await runner.cleanup()
        checker.close()
        await exporter.close()
        await node.stop()

    # asyncio.run, as the exporter's own process: tasks still pending when main() ends
    # are cancelled and awaited, and the default executor shut down, before the loop
    # closes in its thread. run_until_complete() then close() left them to be destroyed
    # pending (gRPC's tasks of the calls a stopped SimKubelet had cut short, then).
    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(30), "exporter did not start"
    try:
        yield Servers(plain=Served(ports[0]), authed=Served(ports[1]))
    finally:
        loops[0].call_soon_threadsafe(stop.set)
        thread.join(30)
    assert not thread.is_alive(), "the exporter did not stop within 30 s"


@pytest.fixture
def plain(servers: Servers) -> Served:
    return servers.plain


@pytest.fixture
def authed(servers: Servers) -> Served:
    return servers.authed


def exchange(port: int, request: bytes, *, half_close: bool = False) -> bytes:
    """Send and read until the server closes: requests say ``Connection: close``; raw
    bytes are followed by a half-close, the only way to say "that was all"."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        if half_close:
            conn.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def status_of(response: bytes) -> int:
    """The status of the first answer; 0 when the server closed without one."""
    if not response:
        return 0
    line = response.split(b"\r\n", 1)[0].split()
    assert line[0].startswith(b"HTTP/1."), response[:200]
    return int(line[1])


header_text = st.text(
    alphabet=st.characters(codec="latin-1", exclude_characters="\r\n"), max_size=200
)
tokens = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=20)
path_text = st.one_of(
    st.sampled_from(ROUTES),
    st.builds(
        lambda route, tail: route + tail,
        st.sampled_from(ROUTES),
        st.text(alphabet=st.characters(codec="ascii", exclude_characters=" \r\n\x00"), max_size=80),
    ),
    st.text(alphabet=st.characters(codec="latin-1", exclude_characters=" \r\n"), max_size=300),
)
query_values = st.text(max_size=600).map(lambda s: s.encode("utf-8", "surrogatepass"))
queries = st.dictionaries(
    st.sampled_from(["namespace", "pod", "container", "resource", "device", "format", "x"]),
    st.one_of(st.sampled_from(["json", "text", "ml-training", ""]), st.text(max_size=40)),
    max_size=4,
)
headers = st.dictionaries(
    st.one_of(
        st.sampled_from(
            ["Accept", "Accept-Encoding", "Authorization", "Content-Length", "Connection"]
        ),
        tokens,
    ),
    st.one_of(
        header_text,
        st.sampled_from(
            [
                "gzip;q=0",
                "application/openmetrics-text;q=nan",
                "*/*;q=-1",
                GOOD_AUTH,
                "Basic !!!",
                "-1",
                "99999999999999999999",
            ]
        ),
    ),
    max_size=6,
)
BCRYPT_MAX_BYTES = 72  # bcrypt raises past it; the exporter must answer 401 all the same
authorizations = st.one_of(
    st.none(),
    st.just(GOOD_AUTH),
    header_text,
    st.builds(
        lambda user, password: "Basic " + base64.b64encode(user + b":" + password).decode(),
        st.one_of(st.just(USER.encode()), st.binary(max_size=20)),
        st.binary(max_size=2 * BCRYPT_MAX_BYTES),
    ),
    st.builds(lambda scheme, rest: f"{scheme} {rest}", tokens, header_text),
)
methods = st.one_of(st.sampled_from(["GET", "HEAD", "POST", "PUT", "OPTIONS", "TRACE"]), tokens)


def build_request(
    method: str,
    path: str,
    query: dict[str, str],
    head: dict[str, str],
    authorization: str | None = None,
) -> bytes:
    target = path + ("?" + urlencode(query) if query else "")
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    if authorization is not None:
        lines.append(f"Authorization: {authorization}")
    lines += [f"{name}: {value}" for name, value in head.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")


FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def assert_clean(caplog: pytest.LogCaptureFixture, status: int) -> None:
    errors = [e for e in LOGS.entries if e.get("log_level") in ("error", "critical")]
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info]
    assert (True, [], []) == (status < 500, errors, tracebacks), status


def test_auth_is_really_on(plain: Served, authed: Served) -> None:
    """The fuzzed servers differ as meant: one asks for credentials, one does not."""
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    with_auth = request + f"Authorization: {GOOD_AUTH}\r\n".encode()
    assert (200, 401, 200) == (
        status_of(exchange(plain.port, request + b"\r\n")),
        status_of(exchange(authed.port, request + b"\r\n")),
        status_of(exchange(authed.port, with_auth + b"\r\n")),
    )


def test_a_failing_handler_would_be_seen(plain: Served) -> None:
    """The log capture works: a handler error logged by the exporter lands in LOGS."""
    structlog.get_logger("exporter.web").error("http_handler_failed", path="/probe")
    assert "http_handler_failed" in [e["event"] for e in LOGS.entries]
    LOGS.entries.clear()


@pytest.mark.parametrize("route", ROUTES)
def test_client_that_half_closes_is_no_error(
    plain: Served, caplog: pytest.LogCaptureFixture, route: str
) -> None:
    """A client that sends its request and half-closes: whatever aiohttp then does with
    the connection, nothing is logged as an error."""
    raw = exchange(plain.port, f"GET {route} HTTP/1.1\r\nHost: x\r\n\r\n".encode(), half_close=True)
    assert_clean(caplog, status_of(raw))


@pytest.mark.parametrize(
    ("method", "route"),
    [
        ("GET", "/metrics"),
        ("GET", "/debug/allocations"),
        ("GET", "/nowhere"),
        ("HEAD", "/metrics"),
        ("POST", "/metrics"),
    ],
)
def test_http_0_9_is_refused(plain: Served, authed: Served, method: str, route: str) -> None:
    """A request line without a version is HTTP/0.9, whose client reads a bare body: it
    gets a 400 before any page or credential check, not the page under a status line
    that client cannot read."""
    answers = [exchange(s.port, f"{method} {route}\r\n\r\n".encode()) for s in (plain, authed)]
    heads = [a.split(b"\r\n", 1)[0] for a in answers]
    error = b'{"error": "HTTP/0.9 is not served: send HTTP/1.0 or HTTP/1.1"}\n'
    bodies = [a.partition(b"\r\n\r\n")[2] for a in answers]
    assert [b"HTTP/0.9 400 Bad Request"] * 2 == heads
    assert [b"" if method == "HEAD" else error] * 2 == bodies


@pytest.mark.parametrize("auth", [False, True], ids=["no-auth", "basic-auth"])
class TestFuzzedHttp:
    @FUZZ
    @given(
        method=methods,
        path=path_text,
        query=queries,
        head=headers,
        authorization=authorizations,
    )
    def test_requests(
        self,
        auth: bool,
        plain: Served,
        authed: Served,
        caplog: pytest.LogCaptureFixture,
        method: str,
        path: str,
        query: dict[str, str],
        head: dict[str, str],
        authorization: str | None,
    ) -> None:
        """Any method, path, query, headers and credentials: never a 5xx, no traceback."""
        served = authed if auth else plain
        caplog.set_level(logging.WARNING)
        LOGS.entries.clear()  # what this example caused, not an earlier one
        request = build_request(method, path, query, head, authorization)
        status = status_of(exchange(served.port, request))
        assert_clean(caplog, status)

    @FUZZ
    @given(raw=st.binary(max_size=2000))
    def test_raw_bytes(
        self,
        auth: bool,
        plain: Served,
        authed: Served,
        caplog: pytest.LogCaptureFixture,
        raw: bytes,
    ) -> None:
        """Arbitrary bytes on the port: a 4xx or a closed connection, never a 5xx."""
        served = authed if auth else plain
        LOGS.entries.clear()
        status = status_of(exchange(served.port, raw, half_close=True))
        assert_clean(caplog, status)


def test_password_longer_than_bcrypt_takes_is_refused(authed: Served) -> None:
    """A 100-byte password is a wrong password: 401, not a 500."""
    credentials = base64.b64encode(USER.encode() + b":" + b"x" * 100).decode()
    request = build_request("GET", "/metrics", {}, {}, f"Basic {credentials}")
    assert 401 == status_of(exchange(authed.port, request))
