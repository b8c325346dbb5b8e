"""The HTTPS listener on real sockets: TLS served, plain HTTP answered 400 as Go does.

The TLS behaviour itself (versions, client certificates, rotation) is tested through
this site by test_webconfig.py and test_auth.py, whose harness serves with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import itertools
import json
import platform
import selectors
import socket
import ssl
import string
import struct
import time
import tracemalloc
import warnings
from asyncio import sslproto
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import web
from fdlimit import need_open_files
from pki import Pki, client_context, make_pki
from structlog.testing import capture_logs
from webserving import KernelWithoutIPv6, free_dual_stack_port, has_ipv6_loopback

from exporter import tlssite as tlssite_module
from exporter.config import ConfigError
from exporter.tlssite import _ACCEPT_AGAIN_S, _ACCEPT_RETRY_S, TlsSite, _Listeners, make_site
from exporter.web import make_runner
from exporter.webconfig import TlsSettings, build_ssl_context


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


@contextlib.asynccontextmanager
async def _site(
    pki: Pki,
    *,
    host: str | None = "127.0.0.1",
    port: int = 0,
    first_byte_timeout_s: float = 10.0,
    handshake_timeout_s: float = tlssite_module.HANDSHAKE_TIMEOUT_S,
) -> AsyncIterator[web.AppRunner]:
    app = web.Application()
    app.router.add_get("/metrics", _ok)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    tls = TlsSettings(cert_file=pki.cert("server"), key_file=pki.key("server"))
    context = build_ssl_context(tls, source=Path("web.yml"))
    site = TlsSite(
        runner,
        host,
        port,
        ssl_context=context,
        first_byte_timeout_s=first_byte_timeout_s,
        handshake_timeout_s=handshake_timeout_s,
    )
    try:
        await site.start()
        yield runner
    finally:
        await runner.cleanup()


def _port(runner: web.AppRunner) -> int:
    port: int = runner.addresses[0][1]
    return port


def _listeners(runner: web.AppRunner) -> _Listeners:
    """The accept loops of the runner's one TLS site."""
    (site,) = runner.sites
    return cast(_Listeners, site._server)


async def _until_no_connections(listeners: _Listeners) -> None:
    """Let the connection tasks finish (5 s at most): what a test then asserts is the
    set, not how long it took."""
    for _ in range(100):
        if not listeners._connections:
            return
        await asyncio.sleep(0.05)


@contextlib.contextmanager
def _loop_exceptions() -> Iterator[list[str]]:
    """What reaches the running loop's exception handler meanwhile: an unretrieved
    task exception is reported there when its task is collected."""
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    handler = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(context["message"]))
    try:
        yield reported
    finally:
        loop.set_exception_handler(handler)


async def _https_get(pki: Pki, port: int) -> int:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
        session.get(f"https://127.0.0.1:{port}/metrics", ssl=client_context(pki)) as response,
    ):
        await response.read()
        return response.status


async def _until_closed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    """What the server sends until it closes the connection (10 s at most)."""
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def _raw(port: int, sent: bytes) -> bytes:
    """What the server answers to ``sent`` before it closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(sent)
    await writer.drain()
    return await _until_closed(reader, writer)


async def test_plain_http_is_answered_400_and_https_still_served(pki: Pki) -> None:
    """curl http:// to the TLS port: a 400 naming the mistake, as Go's server answers,
    and the connection closed; the same port goes on serving HTTPS."""
    async with _site(pki) as runner:
        port = _port(runner)
        with capture_logs() as logs:
            answer = await _raw(port, b"GET /metrics HTTP/1.1\r\nHost: node:9410\r\n\r\n")
            await _raw(port, b"HEAD / HTTP/1.0\r\n\r\n")
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n")
        assert b"Connection: close" in head
        assert "serves HTTPS" in json.loads(body)["error"]
        # Once a minute at most: the second client is counted, not logged.
        warnings = [e for e in logs if e["event"] == "http_request_on_https_port"]
        assert [("warning", 0)] == [(e["log_level"], e["suppressed_since_last"]) for e in warnings]
        assert warnings[0]["peer"].startswith("127.0.0.1:")
        assert 200 == await _https_get(pki, port)


async def test_every_upper_case_letter_opens_a_method_answered_400(pki: Pki) -> None:
    """Any method, not only GET and HEAD (DELETE, OPTIONS, a WebDAV ACL): a request that
    opens with an upper-case ASCII letter is plain HTTP and answered 400."""
    async with _site(pki) as runner:
        port = _port(runner)
        firsts = {
            letter: (await _raw(port, f"{letter}X / HTTP/1.1\r\n\r\n".encode()))[:24]
            for letter in string.ascii_uppercase
        }
    assert {letter: b"HTTP/1.1 400 Bad Request" for letter in string.ascii_uppercase} == firsts


async def test_the_400_reaches_a_client_that_sent_a_large_body_first(pki: Pki) -> None:
    """The request's body is read (for 2 s at most) before the connection closes: a
    socket closed with data unread is reset, and the client loses the answer."""
    async with _site(pki) as runner:
        body = b"x" * (4 * 1024 * 1024)
        head = f"POST /metrics HTTP/1.1\r\nHost: n\r\nContent-Length: {len(body)}\r\n\r\n"
        answer = await _raw(_port(runner), head.encode() + body)
        assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")


async def test_the_400_ends_the_stream_without_waiting_for_the_client(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the answer the server half-closes: a client that reads until the end of
    the stream (and keeps its own side open) has it at once, not when the server stops
    lingering (made a minute here, so that only a missing half-close waits that long)."""
    monkeypatch.setattr(tlssite_module, "LINGERING_TIME_S", 60.0)
    async with _site(pki) as runner:
        reader, writer = await asyncio.open_connection("127.0.0.1", _port(runner))
        writer.write(b"GET /metrics HTTP/1.0\r\n\r\n")
        try:
            answer = await asyncio.wait_for(reader.read(), 30.0)
        finally:
            writer.close()
        assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")


def _accept_always_failing(
    monkeypatch: pytest.MonkeyPatch, error: OSError, stop_after: int
) -> list[int]:
    """Every accept() of the loop raises ``error``; past ``stop_after`` tries one waits
    until the site is stopped, not to hang the test. The list's one item counts tries."""
    tries = [0]

    async def failing(sock: socket.socket) -> tuple[socket.socket, object]:
        tries[0] += 1
        if tries[0] > stop_after:
            await asyncio.Event().wait()
        raise OSError(error.errno, error.strerror)  # anew: one raised again keeps growing

    monkeypatch.setattr(asyncio.get_running_loop(), "sock_accept", failing)
    return tries


def _fail_accept_once(monkeypatch: pytest.MonkeyPatch, error: OSError) -> list[OSError]:
    """The loop's next accept() raises ``error``, later ones accept; the list of errors
    still to raise (empty once it was)."""
    loop = asyncio.get_running_loop()
    accept = loop.sock_accept
    failures = [error]

    async def failing_once(sock: socket.socket) -> tuple[socket.socket, object]:
        if failures:
            raise failures.pop()
        return await accept(sock)

    monkeypatch.setattr(loop, "sock_accept", failing_once)
    return failures


async def test_an_accept_error_costs_that_connection_only(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """accept() failing for one connection (EPROTO; a firewall's EPERM) is logged, and
    the listener goes on accepting, as asyncio's server does."""
    _fail_accept_once(monkeypatch, OSError(errno.EPROTO, "Protocol error"))
    with capture_logs() as logs:
        async with _site(pki) as runner:
            assert 200 == await _https_get(pki, _port(runner))
    assert [("accept_failed", "accepted again")] == [
        (e["event"], e["hint"]) for e in logs if e["event"] == "accept_failed"
    ]


async def test_out_of_descriptors_accepts_again_a_second_later(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """accept() failing with EMFILE fails again at once until a descriptor is freed:
    the listener waits a second between tries, as asyncio's server does, and says
    which limit to raise. Tries counted while the loop runs for a second: a few at
    most, where a loop that did not wait would spin (stopped after 20, not to hang the
    test), and one that waited 50 ms, as after other errors, would try ~20 times."""
    tries = _accept_always_failing(monkeypatch, OSError(errno.EMFILE, "Too many open files"), 20)
    with capture_logs() as logs:
        async with _site(pki):
            await asyncio.sleep(1.0)  # let the accept loop run; what counts is the tries
    assert tries[0] <= 3
    assert [(errno.EMFILE, "raise the open-files limit or find who holds the connections")] == [
        (e["errno"], e["hint"]) for e in logs if e["event"] == "accept_failed"
    ]


async def test_an_accept_error_that_repeats_is_tried_again_a_moment_later(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """accept() failing at once again with an error other than running out (EPROTO on
    every try): tried again a moment later (_ACCEPT_AGAIN_S); not after a second, as
    when out of descriptors, nor at once, which would take the loop (stopped after 200,
    not to hang the test). The waits asked for are checked, not timed."""
    tries = _accept_always_failing(monkeypatch, OSError(errno.EPROTO, "Protocol error"), 200)
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def recording_sleep(delay: float, result: Any = None) -> Any:
        waits.append(delay)
        return await real_sleep(delay, result)

    monkeypatch.setattr(tlssite_module.asyncio, "sleep", recording_sleep)
    async with _site(pki):
        for _ in range(1000):  # up to 10 s on a loaded machine; ~0.15 s on an idle one
            if tries[0] >= 3:
                break
            await real_sleep(0.01)
    assert (True, True, False) == (
        tries[0] >= 3,
        _ACCEPT_AGAIN_S in waits,
        _ACCEPT_RETRY_S in waits,
    )


async def test_a_client_gone_before_accept_is_not_logged(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ECONNABORTED: the client reset its connection while it waited in the backlog.
    Nothing failed on this side: accepted again without a word, as asyncio's server."""
    failures = _fail_accept_once(
        monkeypatch, ConnectionAbortedError(errno.ECONNABORTED, "Software caused connection abort")
    )
    with capture_logs() as logs:
        async with _site(pki) as runner:
            assert 200 == await _https_get(pki, _port(runner))
    assert ([], []) == (failures, [e for e in logs if e["event"] == "accept_failed"])


async def _port_checks(port: int, count: int) -> None:
    """``count`` clients that connect and close without a word, as a port check does."""
    for _ in range(count):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
        await writer.wait_closed()


async def test_finished_connections_are_forgotten(pki: Pki) -> None:
    """Each connection's task leaves the site's set once done: 50 port checks and an
    HTTPS client (accepted in turn, so all 51 were accepted) leave it empty, where
    kept tasks would grow with every connection for the life of the process."""
    async with _site(pki) as runner:
        port = _port(runner)
        await _port_checks(port, 50)
        assert 200 == await _https_get(pki, port)
        listeners = _listeners(runner)
        await _until_no_connections(listeners)
        assert 0 == len(listeners._connections)


async def test_port_checks_and_resets_leave_no_task_exception(pki: Pki) -> None:
    """A client that closes without a word (a port check) or resets the connection
    (SO_LINGER 0) ends its task quietly: nothing reaches the loop's exception handler,
    where an unretrieved task exception would be logged on every such client."""
    loop = asyncio.get_running_loop()
    with _loop_exceptions() as reported:
        async with _site(pki) as runner:
            port = _port(runner)
            await _port_checks(port, 3)
            for _ in range(3):
                with socket.socket() as client:
                    client.setblocking(False)
                    await loop.sock_connect(client, ("127.0.0.1", port))
                    await asyncio.sleep(0.05)  # accepted, waiting for its first byte
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await _until_no_connections(_listeners(runner))
            gc.collect()  # a failed task reports its exception when it is collected
    assert [] == reported


async def test_what_is_neither_tls_nor_http_goes_to_tls_and_fails_there(pki: Pki) -> None:
    """Bytes that open neither a TLS record nor an HTTP method are TLS's to refuse, as
    before: no 400, the connection closed."""
    async with _site(pki) as runner:
        port = _port(runner)
        answer = await _raw(port, b"\x00\x01\x02\x03" * 4)
        assert not answer.startswith(b"HTTP/")
        assert 200 == await _https_get(pki, port)


async def test_a_failed_handshake_is_a_debug_line_and_no_task_exception(pki: Pki) -> None:
    """TLS refusing what it was given is logged at debug only, as asyncio's own server
    does, naming the error; the connection's task ends without an exception for the
    loop's handler to report."""
    with _loop_exceptions() as reported:
        async with _site(pki) as runner:
            with capture_logs() as logs:
                await _raw(_port(runner), b"\x00\x01\x02\x03" * 4)
                await _until_no_connections(_listeners(runner))
            gc.collect()
    failed = [(e["log_level"], e["error"].split(":")[0]) for e in logs]
    assert ([("debug", "SSLError")], []) == (failed, reported)


async def test_a_plain_http_client_gone_before_its_answer_is_logged_without_a_peer(
    pki: Pki,
) -> None:
    """A client that sent its request and reset the connection while it waited to be
    accepted has no address left to name: the warning says so with an empty peer, and
    the connection's task ends quietly."""
    with _loop_exceptions() as reported:
        async with _site(pki) as runner:
            with capture_logs() as logs:
                # Blocking calls: the loop does not run, so all of it happens before accept().
                with socket.create_connection(("127.0.0.1", _port(runner))) as client:
                    client.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                for _ in range(100):
                    if logs:
                        break
                    await asyncio.sleep(0.05)
                await _until_no_connections(_listeners(runner))
            gc.collect()
    warnings_logged = [e["peer"] for e in logs if e["event"] == "http_request_on_https_port"]
    assert ([""], []) == (warnings_logged, reported)


async def test_connections_the_site_ends_are_closed_not_left_to_the_collector(
    pki: Pki,
) -> None:
    """A plain-HTTP client answered 400, a port check and a failed handshake each have
    their socket closed by the site: none is left for the garbage collector to close
    (and warn of), some time later."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        async with _site(pki) as runner:
            port = _port(runner)
            await _raw(port, b"GET /metrics HTTP/1.1\r\nHost: n\r\n\r\n")
            await _port_checks(port, 1)
            await _raw(port, b"\x00\x01\x02\x03" * 4)
            await _until_no_connections(_listeners(runner))
            gc.collect()
    assert [] == [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


async def test_a_client_that_says_nothing_is_closed_after_the_first_byte_timeout(
    pki: Pki,
) -> None:
    async with _site(pki, first_byte_timeout_s=0.2) as runner:
        port = _port(runner)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert b"" == await _until_closed(reader, writer)  # closed by the server
        # A port check (connect, close) costs nothing either.
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
        assert 200 == await _https_get(pki, port)


async def test_a_handshake_not_done_by_its_deadline_is_closed_and_freed(pki: Pki) -> None:
    """A client that sent its ClientHello but its last byte is closed once the
    handshake's time from the accept is up (20 s by default, as Go's server gives it
    ReadHeaderTimeout; asyncio's 60 s held its TLS state three times as long), and,
    with the cyclic collector off, leaves no TLS protocol behind."""
    hello = _client_hello()[:-1]
    gc.collect()
    gc.disable()
    try:
        async with _site(pki, handshake_timeout_s=0.2) as runner:
            listeners = _listeners(runner)
            reader, writer = await asyncio.open_connection("127.0.0.1", _port(runner))
            writer.write(hello)
            closed = await _until_closed(reader, writer)
            await _until_no_connections(listeners)
            left = [o for o in gc.get_objects() if isinstance(o, sslproto.SSLProtocol)]
            scraped = await _https_get(pki, _port(runner))
    finally:
        gc.enable()
    assert (b"", [], 200) == (closed, left, scraped)


async def test_by_default_a_client_has_seconds_to_say_its_first_byte(pki: Pki) -> None:
    """A client slow to send its first byte (a loaded scraper, a long path) is still
    served a second later by a site made with the defaults, as make_site makes it."""
    runner = web.AppRunner(web.Application())
    await runner.setup()
    tls = TlsSettings(cert_file=pki.cert("server"), key_file=pki.key("server"))
    try:
        await make_site(
            runner, "127.0.0.1", 0, ssl_context=build_ssl_context(tls, source=Path("web.yml"))
        ).start()
        reader, writer = await asyncio.open_connection("127.0.0.1", _port(runner))
        await asyncio.sleep(1.0)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: n\r\n\r\n")
        answer = await _until_closed(reader, writer)
    finally:
        await runner.cleanup()
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")


async def test_stopping_closes_the_listener_and_connections_not_yet_handed_over(
    pki: Pki,
) -> None:
    async with _site(pki, first_byte_timeout_s=60) as runner:
        port = _port(runner)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(0.1)  # accepted, waiting for its first byte
        await runner.cleanup()
        assert b"" == await _until_closed(reader, writer)
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)


async def test_stopped_listeners_say_they_serve_nothing(pki: Pki) -> None:
    """As asyncio's Server after close(): not serving, and no sockets to name (those
    closed would fail getsockname())."""
    async with _site(pki) as runner:
        listeners = _listeners(runner)
        serving = (listeners.is_serving(), len(listeners.sockets))
    assert ((True, 1), (False, ())) == (serving, (listeners.is_serving(), listeners.sockets))


async def test_a_descriptor_number_reused_after_close_keeps_its_reader(pki: Pki) -> None:
    """close() stops the accept loops and closes their sockets at once; the cancelled
    accepts remove their readers a loop step later, by descriptor number. A socket
    opened in between gets the same number (the kernel gives the lowest free one): its
    reader must survive, as asyncio's own Server removes the reader before closing."""
    loop = asyncio.get_running_loop()
    async with _site(pki) as runner:
        listeners = _listeners(runner)
        (listening,) = listeners.sockets
        number = listening.fileno()
        await asyncio.sleep(0.05)  # the accept loop waits in accept()
        listeners.close()
        ours, theirs = socket.socketpair()
        try:
            assert number in (ours.fileno(), theirs.fileno())
            reused = ours if ours.fileno() == number else theirs
            other = theirs if reused is ours else ours
            readable = asyncio.Event()
            loop.add_reader(reused.fileno(), readable.set)
            await asyncio.sleep(0.05)  # the cancelled accepts' callbacks run
            other.send(b"x")
            await asyncio.wait_for(readable.wait(), 5.0)
        finally:
            loop.remove_reader(number)
            ours.close()
            theirs.close()


async def test_a_wildcard_host_listens_on_both_families(pki: Pki) -> None:
    """None, as a wildcard listen address is bound: a socket per family, as asyncio's
    create_server makes them (the IPv6 one IPv6 only; port 0 picks one for each)."""
    if not socket.has_ipv6:
        pytest.skip("this Python has no IPv6")
    async with _site(pki, host=None) as runner:
        by_family = {len(address): address[1] for address in runner.addresses}  # 2: IPv4
        if set(by_family) != {2, 4}:
            pytest.skip(f"this machine gave no socket for one family: {runner.addresses}")
        assert 2 == len(runner.addresses)
        assert 200 == await _https_get(pki, by_family[2])


async def test_a_wildcard_host_binds_the_unspecified_addresses(pki: Pki) -> None:
    """None is every address of the machine, as asyncio's create_server binds it (0.0.0.0
    and ::), not the loopback addresses a lookup without AI_PASSIVE gives: other
    machines reach it."""
    plain = web.AppRunner(web.Application())
    await plain.setup()
    try:
        await web.TCPSite(plain, None, 0).start()
        plain_hosts = sorted(address[0] for address in plain.addresses)
    finally:
        await plain.cleanup()
    async with _site(pki, host=None) as runner:
        assert plain_hosts == sorted(address[0] for address in runner.addresses)
    assert "0.0.0.0" in plain_hosts


async def test_a_wildcard_host_on_a_fixed_port_listens_on_both_families(pki: Pki) -> None:
    """A wildcard host and a port given (the default :9410): IPv4 and IPv6 on that one
    port. The IPv6 socket is IPv6 only, else it would claim the IPv4 port as well and
    the second bind fail with 'address already in use'; port 0 cannot show it."""
    if not has_ipv6_loopback():
        pytest.skip("no IPv6 on this machine: ::1 cannot be bound")
    port = free_dual_stack_port()
    async with _site(pki, host=None, port=port) as runner:
        assert {(2, port), (4, port)} == {(len(a), a[1]) for a in runner.addresses}
        assert 200 == await _https_get(pki, port)


async def test_an_address_the_lookup_gives_twice_is_one_socket(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host that resolves to one address twice (a duplicated /etc/hosts line) gets
    one socket, as asyncio's create_server makes: not a second one, which on port 0
    would listen on a port of its own and on a fixed port fail as in use."""
    loop = asyncio.get_running_loop()
    lookup = loop.getaddrinfo

    async def twice(*args: Any, **kwargs: Any) -> list[Any]:
        found = await lookup(*args, **kwargs)
        return [*found, *found]

    monkeypatch.setattr(loop, "getaddrinfo", twice)
    async with _site(pki) as runner:
        assert 1 == len(runner.addresses)


async def test_a_wildcard_host_without_ipv6_in_the_kernel_listens_on_ipv4(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the kernel has no IPv6, a wildcard serves IPv4 alone, as asyncio's
    create_server (plain HTTP) does: the HTTPS site failed to start instead."""
    monkeypatch.setattr(socket, "socket", KernelWithoutIPv6)
    plain = web.AppRunner(web.Application())
    await plain.setup()
    try:
        await web.TCPSite(plain, None, 0).start()
        plain_families = [len(address) for address in plain.addresses]
    finally:
        await plain.cleanup()
    async with _site(pki, host=None) as runner:
        assert ([2], [2]) == (plain_families, [len(a) for a in runner.addresses])
        assert 200 == await _https_get(pki, _port(runner))


async def test_a_restart_binds_the_port_its_closed_connections_hold(pki: Pki) -> None:
    """A plain-HTTP client answered 400 is closed by the server first, which leaves
    that connection in TIME_WAIT on the port for a minute: a restart on the same port
    binds regardless (SO_REUSEADDR), as Go's and asyncio's listeners do."""
    port = free_dual_stack_port()
    async with _site(pki, port=port):
        answer = await _raw(port, b"GET /metrics HTTP/1.1\r\nHost: n\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    async with _site(pki, port=port):
        assert 200 == await _https_get(pki, port)


@pytest.mark.parametrize("host", [None, "127.0.0.1", "::1"])
async def test_the_site_is_named_as_aiohttp_names_an_https_site(pki: Pki, host: str | None) -> None:
    """The name run_app prints for a site: a wildcard as 0.0.0.0, IPv6 in brackets."""
    runner = web.AppRunner(web.Application())
    await runner.setup()
    tls = TlsSettings(cert_file=pki.cert("server"), key_file=pki.key("server"))
    context = build_ssl_context(tls, source=Path("web.yml"))
    try:
        expected = web.TCPSite(runner, host, 9410, ssl_context=context).name
        assert expected == TlsSite(runner, host, 9410, ssl_context=context).name
    finally:
        await runner.cleanup()


async def test_a_port_in_use_is_refused_with_the_address(pki: Pki) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        app = web.Application()
        runner = web.AppRunner(app)
        await runner.setup()
        tls = TlsSettings(cert_file=pki.cert("server"), key_file=pki.key("server"))
        context = build_ssl_context(tls, source=Path("web.yml"))
        try:
            with pytest.raises(OSError, match="address already in use") as raised:
                await TlsSite(runner, "127.0.0.1", port, ssl_context=context).start()
            assert f"('127.0.0.1', {port})" in str(raised.value)
        finally:
            await runner.cleanup()


async def test_a_port_in_use_leaves_no_socket_open(pki: Pki) -> None:
    """The sockets made before the bind failed are closed, not left to the garbage
    collector (which warns of each): a listener that retries its start leaks nothing."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        runner = web.AppRunner(web.Application())
        await runner.setup()
        tls = TlsSettings(cert_file=pki.cert("server"), key_file=pki.key("server"))
        context = build_ssl_context(tls, source=Path("web.yml"))
        site = TlsSite(runner, "127.0.0.1", taken.getsockname()[1], ssl_context=context)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ResourceWarning)
                with contextlib.suppress(OSError):
                    await site.start()
                gc.collect()
        finally:
            await runner.cleanup()
    assert [] == [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
async def test_a_burst_of_connections_waits_in_the_accept_queue(pki: Pki, tls: bool) -> None:
    """300 clients connecting while the loop is busy all complete their handshake: the
    listeners ask for the accept queue Go's do (net.core.somaxconn), where aiohttp's
    128 left the rest to retry their SYN a second later, or be reset at shutdown."""
    app = web.Application()
    runner = web.AppRunner(app)
    await runner.setup()
    tls_settings = TlsSettings(cert_file=pki.cert("server"), key_file=pki.key("server"))
    context = build_ssl_context(tls_settings, source=Path("web.yml")) if tls else None
    try:
        await make_site(runner, "127.0.0.1", 0, ssl_context=context).start()
        port = _port(runner)
        clients = [socket.socket() for _ in range(300)]
        try:
            for client in clients:
                client.setblocking(False)
                client.connect_ex(("127.0.0.1", port))
            # The loop does not run meanwhile: nothing is accepted, all wait queued.
            connected: set[socket.socket] = set()
            with selectors.DefaultSelector() as waiting:  # select() stops at fd 1024
                for client in clients:
                    waiting.register(client, selectors.EVENT_WRITE)
                deadline = time.monotonic() + 5
                while len(connected) < len(clients) and time.monotonic() < deadline:
                    for key, _ in waiting.select(0.05):
                        waiting.unregister(key.fileobj)
                        connected.add(cast(socket.socket, key.fileobj))
            errors = [c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) for c in connected]
            assert (len(clients), {0}) == (len(connected), set(errors))
        finally:
            for client in clients:
                client.close()
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def _stalled_handshakes(
    runner: web.AppRunner, count: int, *, settled_at: int
) -> AsyncIterator[None]:
    """``count`` clients that sent their ClientHello but its last byte while the loop
    was busy (blocking connects: the loop does not run meanwhile), held open until the
    site has at most ``settled_at`` connections (or 5 s passed)."""
    hello = _client_hello()[:-1]
    clients = [socket.socket() for _ in range(count)]
    try:
        for client in clients:
            client.connect(("127.0.0.1", _port(runner)))
            client.sendall(hello)
        listeners = _listeners(runner)
        for _ in range(100):  # until every connection was accepted and settled
            await asyncio.sleep(0.05)
            if len(listeners._connections) <= settled_at:
                break
        yield
    finally:
        for client in clients:
            client.close()


def _client_hello() -> bytes:
    """The first flight of a real TLS client: its ClientHello record."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="node")
    with contextlib.suppress(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


@contextlib.asynccontextmanager
async def _limited_site(
    pki: Pki, *, max_connections: int, max_handshakes: int = tlssite_module.MAX_HANDSHAKES
) -> AsyncIterator[web.AppRunner]:
    """A TLS site on the exporter's runner, which bounds the connections."""
    app = web.Application()
    app.router.add_get("/metrics", _ok)
    runner = make_runner(app, max_connections=max_connections)
    await runner.setup()
    tls = TlsSettings(cert_file=pki.cert("server"), key_file=pki.key("server"))
    context = build_ssl_context(tls, source=Path("web.yml"))
    try:
        site = TlsSite(
            runner,
            "127.0.0.1",
            0,
            ssl_context=context,
            first_byte_timeout_s=60,
            max_handshakes=max_handshakes,
        )
        await site.start()
        yield runner
    finally:
        await runner.cleanup()


async def _until_held(runner: web.AppRunner, count: int) -> None:
    """Until ``count`` connections wait before their handler (5 s at most)."""
    for _ in range(100):
        if len(getattr(runner.server, "_held", ())) >= count:
            return
        await asyncio.sleep(0.05)


async def _third_client_then_scrape(
    pki: Pki, runner: web.AppRunner, hello: bytes, *, places: int
) -> tuple[bytes, int]:
    """Three clients that send ``hello`` and then nothing, each counted before the next
    (at most ``places`` at once); then what the first read (b"" once closed) and a
    scrape's status."""
    port = _port(runner)
    stalled = []
    try:
        for count in (1, 2, 3):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(hello)
            stalled.append((reader, writer))
            await _until_held(runner, min(count, places))
        async with asyncio.timeout(5):
            first = await stalled[0][0].read()
        return first, await _https_get(pki, port)
    finally:
        for _, writer in stalled:
            writer.close()


class TestConnectionLimit:
    """A connection on the TLS port counts under max_connections from its accept."""

    @pytest.mark.parametrize("sent", [b"", b"ClientHello"], ids=["nothing", "hello"])
    async def test_connections_not_yet_through_their_handshake_count(
        self, pki: Pki, sent: bytes
    ) -> None:
        """Clients that said nothing yet, or sent all of their ClientHello but its last
        byte, fill the connections: the oldest is closed for a new one, and a scraper
        gets in. (Uncounted, 3,000 of them held 3,000 descriptors and ~0.9 GiB.)"""
        hello = _client_hello()[:-1] if sent else b""
        async with _limited_site(pki, max_connections=2) as runner:
            with capture_logs() as logs:
                first, scraped = await _third_client_then_scrape(pki, runner, hello, places=2)
        closed = [e["closed"] for e in logs if e["event"] == "http_connections_full"]
        assert (b"", 200, ["the longest in its TLS handshake"]) == (first, scraped, closed[:1])

    async def test_a_connection_through_its_handshake_is_counted_once(self, pki: Pki) -> None:
        """Handed to its handler, a TLS connection keeps the place it had since its
        accept: with room for one, scrapers one after the other close nothing."""
        async with _limited_site(pki, max_connections=1) as runner:
            with capture_logs() as logs:
                answers = [await _https_get(pki, _port(runner)) for _ in range(3)]
        assert ([200] * 3, []) == (
            answers,
            [e for e in logs if e["event"] == "http_connections_full"],
        )

    async def test_a_burst_past_the_limit_leaves_no_connection_uncounted(self, pki: Pki) -> None:
        """200 clients that sent their ClientHello but its last byte while the loop was
        busy, accepted in quick turns: those the limit closes are closed, none goes on
        to its handshake uncounted (wait_for, on Python 3.11, lost the close when the
        first byte was read in the same turn)."""
        need_open_files(1_000)
        async with (
            _limited_site(pki, max_connections=4) as runner,
            _stalled_handshakes(runner, 200, settled_at=4),
        ):
            left = len(_listeners(runner)._connections)
        assert left <= 4


async def test_a_backlog_of_connections_is_taken_a_few_a_loop_turn(pki: Pki) -> None:
    """200 connections waiting in the backlog (made while the loop did not run) are
    taken at most ACCEPTS_PER_TURN a loop turn: taken in one turn, the 3,000 of a
    burst each made its task before any could be closed, and what outlived them kept
    Python's arenas resident, round after round."""
    need_open_files(1_000)
    hello = _client_hello()[:-1]
    async with _limited_site(pki, max_connections=1024, max_handshakes=1024) as runner:
        listeners = _listeners(runner)
        clients = [socket.socket() for _ in range(200)]
        try:
            for client in clients:  # blocking: the loop does not run meanwhile
                client.connect(("127.0.0.1", _port(runner)))
                client.sendall(hello)
            seen = [len(listeners._connections)]
            for _ in range(100):  # one loop turn each
                await asyncio.sleep(0)
                seen.append(len(listeners._connections))
        finally:
            for client in clients:
                client.close()
    most_in_a_turn = max(after - before for before, after in itertools.pairwise(seen))
    assert (200, True) == (max(seen), most_in_a_turn <= tlssite_module.ACCEPTS_PER_TURN), seen


def _tls_clients(pki: Pki, port: int, count: int) -> list[ssl.SSLSocket]:
    """``count`` blocking TLS clients through their handshake, each having sent part of
    a request head: made in a thread, so that no asyncio TLS of theirs is counted."""
    context = client_context(pki)
    clients = []
    for _ in range(count):
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        client = context.wrap_socket(raw, server_hostname="localhost")
        client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        clients.append(client)
    return clients


async def test_a_tls_connection_holds_no_large_read_buffer(pki: Pki) -> None:
    """What a TLS connection holds while its client sends its head slowly is tens of
    KiB, as a plain one: asyncio's TLS gave each a 256 KiB read buffer, and 1,000 of
    them (the limit allows 1,024) took the exporter from 60 to 338 MiB, past the
    DaemonSet's 256 MiB. Python's own allocations are counted (tracemalloc), which
    that buffer is; OpenSSL's are not."""
    count = 50
    async with _limited_site(pki, max_connections=1024) as runner:
        tracemalloc.start()
        clients: list[ssl.SSLSocket] = []
        try:
            before = tracemalloc.get_traced_memory()[0]
            clients = await asyncio.to_thread(_tls_clients, pki, _port(runner), count)
            for _ in range(100):  # until the server has handed each to its handler
                if runner.server is not None and len(runner.server.connections) >= count:
                    break
                await asyncio.sleep(0.05)
            served = len(runner.server.connections) if runner.server is not None else 0
            held_per_connection = (tracemalloc.get_traced_memory()[0] - before) // count
        finally:
            tracemalloc.stop()
            for client in clients:
                client.close()
    assert (count, True) == (served, held_per_connection < 128 * 1024), held_per_connection


async def test_handshakes_cut_or_failed_leave_no_tls_state_behind(pki: Pki) -> None:
    """Connections whose handshake the limit cut (4 of 6) or the client ended (the
    other 2) leave no TLS protocol behind, with the cyclic collector off: each was
    held in a cycle through its error's traceback (~65 KiB with OpenSSL's state), and
    the collector, which runs rarely on a large heap, let 10 rounds of 3,000 take the
    exporter from 60 MiB to 0.97 GiB."""
    hello = _client_hello()[:-1]
    gc.collect()
    gc.disable()
    try:
        async with _limited_site(pki, max_connections=2) as runner:
            listeners = _listeners(runner)
            writers = []
            for count in range(1, 7):
                _, writer = await asyncio.open_connection("127.0.0.1", _port(runner))
                writer.write(hello)
                writers.append(writer)
                await _until_held(runner, min(count, 2))
            for writer in writers:
                writer.close()
            await _until_no_connections(listeners)
            left = [o for o in gc.get_objects() if isinstance(o, sslproto.SSLProtocol)]
    finally:
        gc.enable()
    assert (0, []) == (len(listeners._connections), left)


class _CountedSSLProtocol(tlssite_module._SmallBufferSSLProtocol):
    """The site's TLS protocol, counting how many exist at once (made, not yet freed)."""

    alive = 0
    most = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cls = _CountedSSLProtocol
        cls.alive += 1
        cls.most = max(cls.most, cls.alive)

    def __del__(self) -> None:
        _CountedSSLProtocol.alive -= 1


class TestHandshakeLimit:
    """At most max_handshakes connections hold TLS state before their handshake is done."""

    async def test_a_burst_accepted_at_once_holds_at_most_the_limit_of_tls_state(
        self, pki: Pki, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """200 clients that sent their ClientHello but its last byte while the loop was
        busy, accepted in quick turns: no more than 4 TLS protocols exist at any moment,
        and a scraper is served after. The connection limit's closing of the oldest
        came a loop turn late: 3,000 such clients made 3,000 (~250 MiB) at once."""
        need_open_files(1_000)
        monkeypatch.setattr(_CountedSSLProtocol, "alive", 0)
        monkeypatch.setattr(_CountedSSLProtocol, "most", 0)
        async with _limited_site(pki, max_connections=1024, max_handshakes=4) as runner:
            monkeypatch.setattr(tlssite_module, "_SmallBufferSSLProtocol", _CountedSSLProtocol)
            async with _stalled_handshakes(runner, 200, settled_at=4):
                scraped = await _https_get(pki, _port(runner))
        assert (200, True) == (scraped, _CountedSSLProtocol.most <= 4), _CountedSSLProtocol.most

    async def test_a_flood_of_unfinished_handshakes_cannot_keep_a_scraper_out(
        self, pki: Pki
    ) -> None:
        """With both places taken by clients that never finish their handshake, a third
        client and then a scraper each close the one in its handshake longest: the
        scraper is served, the first client closed, and it is said once."""
        hello = _client_hello()[:-1]
        async with _limited_site(pki, max_connections=1024, max_handshakes=2) as runner:
            with capture_logs() as logs:
                first, scraped = await _third_client_then_scrape(pki, runner, hello, places=3)
        full = [(e["log_level"], e["limit"]) for e in logs if e["event"] == "tls_handshakes_full"]
        assert (b"", 200, [("warning", 2)]) == (first, scraped, full)


async def test_the_heap_is_trimmed_once_a_burst_of_handshakes_is_over(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scrapes, a few handshakes at a time, trim nothing; 32 clients that stop in their
    handshake, once gone, trim the heap once: glibc kept what 128 such handshakes
    freed (11 MiB) resident after they ended, round after round."""
    trims: list[str] = []

    def trim() -> bool:
        trims.append("trim")
        return True

    monkeypatch.setattr(tlssite_module, "trim", trim)
    monkeypatch.setattr(tlssite_module, "TRIM_DELAY_S", 0.0)
    hello = _client_hello()[:-1]
    async with _limited_site(pki, max_connections=1024) as runner:
        listeners = _listeners(runner)
        for _ in range(3):
            assert 200 == await _https_get(pki, _port(runner))
        await _until_no_connections(listeners)
        after_scrapes = list(trims)
        writers = []
        for count in range(1, tlssite_module.TRIM_AFTER_HANDSHAKES + 1):
            _, writer = await asyncio.open_connection("127.0.0.1", _port(runner))
            writer.write(hello)
            writers.append(writer)
            await _until_held(runner, count)
        for writer in writers:
            writer.close()
        await _until_no_connections(listeners)
        for _ in range(100):  # the trim runs in a thread
            if trims:
                break
            await asyncio.sleep(0.05)
    assert ([], ["trim"]) == (after_scrapes, trims)


class TestReadBuffer:
    """The small TLS read buffer rests on asyncio's undocumented SSLProtocol.max_size."""

    async def test_this_python_reads_into_a_record_sized_buffer(self, pki: Pki) -> None:
        """On the installed Python, asyncio's TLS protocol has max_size, an int, and a
        connection's read buffer is that of the subclass: an upgrade that drops it fails
        here, not in production."""
        context = build_ssl_context(
            TlsSettings(cert_file=pki.cert("server"), key_file=pki.key("server")),
            source=Path("web.yml"),
        )
        found = (
            type(vars(sslproto.SSLProtocol).get("max_size")),
            tlssite_module.read_buffer_bytes(context),
        )
        assert (int, tlssite_module.TLS_READ_BYTES) == found

    async def test_a_python_that_ignores_max_size_is_refused_before_listening(
        self, pki: Pki, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """As a release whose TLS protocol no longer reads max_size: the site refuses to
        start, one line naming Python's release; it used to serve, each connection
        holding 256 KiB again."""

        def unbounded(self: sslproto.SSLProtocol, n: int) -> memoryview:
            return memoryview(bytearray(256 * 1024))

        monkeypatch.setattr(sslproto.SSLProtocol, "get_buffer", unbounded)
        with pytest.raises(ConfigError) as refused:
            async with _site(pki):
                pass
        said = f"Python {platform.python_version()} is not supported: asyncio's TLS protocol"
        assert str(refused.value).startswith(said)
