"""The listeners: plain HTTP as aiohttp's TCPSite serves it; HTTPS that answers plain
HTTP 400; both with the accept queue Go's listeners ask for.

A client that speaks plain HTTP to the TLS port (a scrape config left at ``scheme:
http``, ``curl http://``) fails aiohttp's handshake and is closed with nothing said,
and asyncio logs nothing: Prometheus shows an EOF, curl "Empty reply from server". Go's
net/http, which exporter-toolkit serves with, answers "400 Bad Request ... Client sent
an HTTP request to an HTTPS server". So the HTTPS site accepts each connection itself and
looks at the first byte the client sends without taking it: 0x16 opens a TLS handshake
record and the connection goes on to TLS (asyncio's TLS protocol with a smaller read
buffer, over ``loop.connect_accepted_socket``; the same SSL context as before); an
upper-case ASCII letter starts an HTTP method, and the client is told, in the
exporter's JSON error shape, and logged at most once a minute; anything else goes to
TLS as well, which refuses it as it did.

Where the runner's server bounds its connections (``HoldsConnections``), a connection
counts under that bound from its accept: before its first byte and in its handshake
too, where aiohttp would count it only once the handshake is done. Fewer may be past
their first byte and in their handshake at once (``MAX_HANDSHAKES``): past it, the one
there longest is closed for the new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import platform
import socket
import ssl
import traceback
from asyncio import sslproto
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import structlog
from aiohttp import web

from exporter.config import ConfigError, join_host_port
from exporter.memory import trim
from exporter.outage import Throttle
from exporter.web import (
    CLIENT_ERROR_LOG_INTERVAL_S,
    KEEPALIVE_TIMEOUT_S,
    LINGERING_TIME_S,
    HeldConnection,
    HoldsConnections,
    peer_text,
)

__all__ = [
    "BACKLOG",
    "FIRST_BYTE_TIMEOUT_S",
    "HANDSHAKE_TIMEOUT_S",
    "MAX_HANDSHAKES",
    "TLS_READ_BYTES",
    "TlsSite",
    "make_site",
    "read_buffer_bytes",
]

log = structlog.get_logger(__name__)

# A TLS client sends its ClientHello as soon as it connects; one that has sent nothing
# by then is closed. Its handshake must be done within HANDSHAKE_TIMEOUT_S of its
# accept, as Go's server gives it ReadHeaderTimeout (net/http tlsHandshakeTimeout), and
# as a plain connection has to send its head: asyncio's 60 s, counted from the first
# byte, kept each unfinished handshake's TLS state three times as long.
FIRST_BYTE_TIMEOUT_S = 10.0
HANDSHAKE_TIMEOUT_S = KEEPALIVE_TIMEOUT_S
TLS_READ_BYTES = 16 * 1024  # a TLS record's data at most (RFC 8446 5.1)
# Connections past their first byte and in their TLS handshake at once. Each holds
# asyncio's TLS protocol and OpenSSL's handshake state until its handshake ends: ~65 KiB
# (a whole ClientHello, then silence) to ~95 KiB (all of it but its last byte), measured.
# Under the connection limit alone, whose closing of the oldest takes effect a loop turn
# later, a burst of 3,000 such clients accepted in one turn held 3,000 at once (~250 MiB,
# past the DaemonSet's limit). A handshake takes a round trip or two: a node's few
# scrapers never come near this many at once.
MAX_HANDSHAKES = 128
# Once this many were in their handshake at once (~3 MiB of TLS state), the heap is
# trimmed (glibc malloc_trim, in a thread) when none has been for TRIM_DELAY_S: glibc
# kept what a burst's handshakes freed resident (11 MiB after 128 of them), and the
# connections still queued when a flood's clients leave each go through a handshake of
# their own, one at a time. A node's scrapers, a few handshakes at once, cause none.
TRIM_AFTER_HANDSHAKES = 32
TRIM_DELAY_S = 1.0
_HTTP_METHOD_FIRST = frozenset(range(ord("A"), ord("Z") + 1))
# asyncio's own server waits this long when accept() fails for want of descriptors;
# after another error, a moment, so that one that repeats cannot spin the loop.
_ACCEPT_RETRY_S = 1.0
_ACCEPT_AGAIN_S = 0.05
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# Connections taken from the backlog in one loop turn, at most. Taken all at once (a
# burst of 3,000, as sock_accept does not yield while accept() succeeds), each made its
# task and frames before the limits could close any, and the few objects that outlived
# them kept Python's arenas resident: +24 MiB over 12 rounds of bench/tls_flood.py.
ACCEPTS_PER_TURN = 16
_DRAIN_BYTES = 64 * 1024


def _plain_http_answer() -> bytes:
    body = (
        json.dumps({"error": "Bad Request: this port serves HTTPS; the client sent plain HTTP"})
        + "\n"
    ).encode()
    head = (
        "HTTP/1.1 400 Bad Request\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    return head + body


_PLAIN_HTTP_ANSWER = _plain_http_answer()


# The accept queue Go's listeners ask for (the kernel caps it at net.core.somaxconn):
# aiohttp's 128 overflows under a burst of connections (many scrapers, a restart's
# reconnects), and a client whose handshake the full queue dropped waits a second for
# its SYN's retry, or is reset when the listener closes.
BACKLOG = socket.SOMAXCONN


def make_site(
    runner: web.BaseRunner, host: str | None, port: int, *, ssl_context: ssl.SSLContext | None
) -> web.BaseSite:
    """The site for one listen address: plain HTTP, or HTTPS that answers plain HTTP."""
    if ssl_context is None:
        return web.TCPSite(runner, host, port, backlog=BACKLOG)
    return TlsSite(runner, host, port, ssl_context=ssl_context)


class TlsSite(web.BaseSite):
    """An HTTPS site on ``host`` (None: every address of both families) and ``port``."""

    __slots__ = (
        "_first_byte_timeout_s",
        "_handshake_timeout_s",
        "_host",
        "_max_handshakes",
        "_port",
    )

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str | None,
        port: int,
        *,
        ssl_context: ssl.SSLContext,
        first_byte_timeout_s: float = FIRST_BYTE_TIMEOUT_S,
        handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
        max_handshakes: int = MAX_HANDSHAKES,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=BACKLOG)
        self._host = host
        self._port = port
        self._first_byte_timeout_s = first_byte_timeout_s
        self._handshake_timeout_s = handshake_timeout_s
        self._max_handshakes = max_handshakes

    @property
    def name(self) -> str:
        return f"https://{join_host_port(self._host or '0.0.0.0', self._port)}"

    async def start(self) -> None:
        """Listen; ConfigError, before anything listens, where this Python's asyncio
        would give each TLS connection a larger read buffer than TLS_READ_BYTES."""
        assert self._ssl_context is not None
        held = read_buffer_bytes(self._ssl_context)
        if held > TLS_READ_BYTES:
            raise ConfigError(
                f"Python {platform.python_version()} is not supported: asyncio's TLS"
                f" protocol reads into {held} bytes, not SSLProtocol.max_size"
                f" ({TLS_READ_BYTES}), on each TLS connection"
            )
        await super().start()
        loop = asyncio.get_running_loop()
        sockets = await _listen(loop, self._host, self._port, backlog=self._backlog)
        server = self._runner.server
        assert server is not None
        self._server = _Listeners(
            loop,
            sockets,
            _Handover(
                loop,
                protocol_factory=server,
                ssl_context=self._ssl_context,
                first_byte_timeout_s=self._first_byte_timeout_s,
                handshake_timeout_s=self._handshake_timeout_s,
                handshakes=_Handshakes(self._max_handshakes),
            ),
        )


async def _listen(
    loop: asyncio.AbstractEventLoop, host: str | None, port: int, *, backlog: int
) -> list[socket.socket]:
    """Listening sockets as ``loop.create_server`` makes them: one per address the host
    resolves to (both families for None), SO_REUSEADDR, IPv6 sockets IPv6 only, none
    for a family the kernel lacks (IPv6 on a node booted with ``ipv6.disable=1``)."""
    infos = await loop.getaddrinfo(
        host, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:
                continue  # as create_server: the wildcard's other family still serves
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as error:
                raise OSError(
                    error.errno,
                    f"error while attempting to bind on address {address!r}: "
                    f"{(error.strerror or str(error)).lower()}",
                ) from None
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class _Handover:
    """What happens to each accepted connection: TLS, or the plain-HTTP answer."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        ssl_context: ssl.SSLContext,
        first_byte_timeout_s: float,
        handshake_timeout_s: float,
        handshakes: _Handshakes,
    ) -> None:
        self._loop = loop
        self._protocol_factory = protocol_factory
        self._handshakes = handshakes
        self._limit = protocol_factory if isinstance(protocol_factory, HoldsConnections) else None
        self._ssl_context = ssl_context
        self._first_byte_timeout_s = first_byte_timeout_s
        self._handshake_timeout_s = handshake_timeout_s
        self._plain_http = Throttle(
            "http_request_on_https_port", interval_s=CLIENT_ERROR_LOG_INTERVAL_S
        )

    async def __call__(self, conn: socket.socket) -> None:
        """Serve one accepted connection; never raises but for cancellation (the limit
        needing its place is one)."""
        task = asyncio.current_task()
        assert task is not None
        held = self._limit.hold(task.cancel) if self._limit is not None else None
        try:
            served = await self._serve(conn, held)
        except BaseException as error:
            conn.close()  # a transport that took it closed it already: a no-op then
            _forget_frames(error)
            raise
        finally:
            if held is not None and self._limit is not None:
                self._limit.release(held)
        if not served:
            conn.close()

    async def _serve(self, conn: socket.socket, held: HeldConnection | None) -> bool:
        """True once a TLS transport owns the connection."""
        deadline = self._loop.time() + self._handshake_timeout_s
        try:
            # asyncio.timeout, not wait_for: on Python 3.11, wait_for returns the peek's
            # result when it came in the same turn as a cancel, and the cancel (the
            # connection limit closing this one) is lost.
            async with asyncio.timeout(self._first_byte_timeout_s):
                first = await self._peek(conn)
        except (TimeoutError, OSError):
            return False  # said nothing in time, or gone
        if not first:
            return False  # closed without a word (a port check)
        if first[0] in _HTTP_METHOD_FIRST:
            await self._answer_plain_http(conn)
            return False

        task = asyncio.current_task()
        assert task is not None
        try:
            async with asyncio.timeout_at(deadline), self._handshakes.place(task.cancel):
                app_protocol = self._protocol_factory()
                if held is not None and self._limit is not None:
                    self._limit.handing_over(held, app_protocol)
                await self._handshake(conn, app_protocol)
        except (OSError, TimeoutError) as error:  # ssl.SSLError is an OSError
            # A failed handshake: asyncio's own server logs these only in debug mode.
            log.debug("tls_handshake_failed", error=f"{type(error).__name__}: {error}")
            _forget_frames(error)
            return False
        return True

    async def _handshake(self, conn: socket.socket, app_protocol: asyncio.BaseProtocol) -> None:
        """What connect_accepted_socket(ssl=...) does, with the smaller read buffer."""
        handshake: asyncio.Future[None] = self._loop.create_future()
        tls = _SmallBufferSSLProtocol(
            self._loop,
            app_protocol,
            self._ssl_context,
            handshake,
            server_side=True,
            # typeshed says int; asyncio takes any positive number of seconds.
            # Never reached first: the deadline from the accept ends the handshake.
            ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S,  # type: ignore[arg-type]
        )
        transport, _ = await self._loop.connect_accepted_socket(lambda: tls, conn)
        try:
            await handshake
        except BaseException:
            transport.abort()  # closed already after a failed handshake: a no-op
            raise

    async def _peek(self, conn: socket.socket) -> bytes:
        """The first byte the client sent, left in the socket for TLS to read."""
        fd = conn.fileno()
        while True:
            try:
                return conn.recv(1, socket.MSG_PEEK)
            except (BlockingIOError, InterruptedError):
                pass
            readable = self._loop.create_future()
            self._loop.add_reader(fd, _settle, readable)
            try:
                await readable
            finally:
                self._loop.remove_reader(fd)

    async def _answer_plain_http(self, conn: socket.socket) -> None:
        peer = _peer(conn)
        self._plain_http.warning(
            peer=peer,
            hint="the client spoke plain HTTP to the HTTPS port: scrape it with scheme https",
        )
        with contextlib.suppress(OSError, TimeoutError):
            await asyncio.wait_for(
                self._loop.sock_sendall(conn, _PLAIN_HTTP_ANSWER), self._first_byte_timeout_s
            )
            conn.shutdown(socket.SHUT_WR)
            await self._drain(conn)

    async def _drain(self, conn: socket.socket) -> None:
        """Read what the client still sends (a request body), until it closes or for
        LINGERING_TIME_S, as aiohttp lingers: closing a socket with data unread makes
        the kernel reset the connection, and the client may lose the answer to it."""
        deadline = self._loop.time() + LINGERING_TIME_S
        while (left := deadline - self._loop.time()) > 0:
            if not await asyncio.wait_for(self._loop.sock_recv(conn, _DRAIN_BYTES), left):
                return


class _Handshakes:
    """At most ``limit`` connections in their TLS handshake, or about to begin it, at
    once: past it, the one there longest is closed for the new one (a flood of
    handshakes never finished cannot keep a scraper out). The new one begins once a
    place is free, that is once the TLS state of the one closed is gone: closing takes
    effect a loop turn later, and without the wait the connections accepted in one turn
    would all hold TLS state before any was closed."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._places = asyncio.Semaphore(limit)
        # The way to close each connection counted here, in the order they came; one
        # closed is taken out at once, though its place is free only when it has ended.
        self._counted: dict[object, Callable[[], object]] = {}
        self._full = Throttle("tls_handshakes_full", interval_s=CLIENT_ERROR_LOG_INTERVAL_S)
        self._most = 0  # counted at once, at most, since the heap was last trimmed
        self._trim_due: asyncio.TimerHandle | None = None

    @contextlib.asynccontextmanager
    async def place(self, close: Callable[[], object]) -> AsyncIterator[None]:
        """Held for a handshake; ``close`` ends it, should a newer one need its place."""
        if len(self._counted) >= self._limit:
            self._full.warning(
                limit=self._limit,
                hint="a client holds many TLS handshakes open: ss -tnp on the node",
            )
            oldest = next(iter(self._counted))
            self._counted.pop(oldest)()
        token = object()
        self._counted[token] = close
        self._most = max(self._most, len(self._counted))
        try:
            async with self._places:
                yield
        finally:
            self._counted.pop(token, None)
            if not self._counted and self._most >= TRIM_AFTER_HANDSHAKES and not self._trim_due:
                loop = asyncio.get_running_loop()
                self._trim_due = loop.call_later(TRIM_DELAY_S, self._trim)

    def _trim(self) -> None:
        """Trim the heap in a thread if no handshake is under way; else the last of
        those to end asks again."""
        self._trim_due = None
        if self._counted:
            return
        self._most = 0
        asyncio.get_running_loop().run_in_executor(None, trim)


class _SmallBufferSSLProtocol(sslproto.SSLProtocol):
    """asyncio's TLS protocol, reading at most a TLS record's worth at a time. Its own
    buffer, 256 KiB, is allocated for every connection as its handshake begins: 1,000
    TLS connections sending their heads slowly held ~280 MiB, past the DaemonSet's
    256 MiB limit and well inside the 1,024 connections the limit allows (a plain one
    costs ~21 KiB). A record holds at most 16 KiB of data, and a request head less."""

    max_size = TLS_READ_BYTES


def read_buffer_bytes(ssl_context: ssl.SSLContext) -> int:
    """The read buffer a TLS connection gets from this Python's asyncio, as the
    transport asks for it (``get_buffer``, any size), of a protocol never connected.
    ``max_size`` is undocumented: a release that stopped reading it would hand every
    connection 256 KiB again, with nothing else to show."""
    loop = asyncio.get_running_loop()
    probe = _SmallBufferSSLProtocol(
        loop, asyncio.Protocol(), ssl_context, loop.create_future(), server_side=True
    )
    try:
        return len(probe.get_buffer(-1))
    finally:
        # As a connection ends: its app-side transport closed (else it warns when
        # collected) and the cycle between the two broken, so that nothing waits for
        # the cyclic collector.
        probe.connection_lost(None)


def _forget_frames(error: BaseException) -> None:
    """Clear the locals of the finished frames ``error`` passed through. A failed or
    cancelled handshake's error is held by its future (or the task), which those locals
    hold: a cycle that kept each such connection, its TLS state (~65 KiB, mostly
    OpenSSL's) with it, until the cyclic collector ran. It runs rarely on a large heap:
    10 rounds of 3,000 unfinished handshakes took the exporter from 60 MiB to 0.97 GiB."""
    traceback.clear_frames(error.__traceback__)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _peer(conn: socket.socket) -> str:
    try:
        return peer_text(conn.getpeername())
    except OSError:
        return ""


class _Listeners(asyncio.AbstractServer):
    """Accept loops on listening sockets, each connection given to ``handover``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sockets: Iterable[socket.socket],
        handover: Callable[[socket.socket], Any],
    ) -> None:
        self._loop = loop
        self._sockets = list(sockets)
        self._handover = handover
        self._accept_failed = Throttle("accept_failed", interval_s=CLIENT_ERROR_LOG_INTERVAL_S)
        self._connections: set[asyncio.Task[None]] = set()
        self._accepting = [loop.create_task(self._accept_forever(s)) for s in self._sockets]

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._sockets)

    def close(self) -> None:
        """Stop accepting and drop connections not yet handed to TLS; those that were
        are the aiohttp server's, which its runner shuts down."""
        for task in (*self._accepting, *self._connections):
            task.cancel()
        for sock in self._sockets:
            # As asyncio's Server: the reader goes before the socket. Left to the
            # cancelled accept, it would outlive the descriptor, and the next socket given
            # that number would find its own reader taken for the stale one, never polled.
            self._loop.remove_reader(sock.fileno())
            sock.close()
        self._sockets = []

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return bool(self._sockets)

    async def start_serving(self) -> None:
        return None  # serving since it was made

    async def serve_forever(self) -> None:
        await asyncio.gather(*self._accepting, return_exceptions=True)

    async def wait_closed(self) -> None:
        await asyncio.gather(*self._accepting, *self._connections, return_exceptions=True)

    async def _accept_forever(self, listener: socket.socket) -> None:
        accepted = 0
        while True:
            try:
                conn, _ = await self._loop.sock_accept(listener)
            except (ConnectionAbortedError, InterruptedError):
                continue  # the client left before accept(): as asyncio's server
            except OSError as error:
                # As asyncio's server: logged and accepted again (EPROTO, a firewall's
                # EPERM: that connection's trouble); out of descriptors or memory, after
                # a second, in which connections wait in the backlog.
                exhausted = error.errno in _OUT_OF_RESOURCES
                self._accept_failed.warning(
                    error=error.strerror or str(error),
                    errno=error.errno,
                    hint="raise the open-files limit or find who holds the connections"
                    if exhausted
                    else "accepted again",
                )
                await asyncio.sleep(_ACCEPT_RETRY_S if exhausted else _ACCEPT_AGAIN_S)
                continue
            conn.setblocking(False)
            task = self._loop.create_task(self._handover(conn))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)
            accepted += 1
            if accepted % ACCEPTS_PER_TURN == 0:
                await asyncio.sleep(0)  # the connections' first steps, and closings, first
