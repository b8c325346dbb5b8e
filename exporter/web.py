"""HTTP: /metrics, /debug/allocations, /healthz, /readyz and a landing page.

Handlers only read the published snapshot; the one exception,
``/debug/allocations/{namespace}/{pod}``, asks the kubelet's ``Get`` through the
rate-limited, coalescing look-up and falls back to the snapshot. Bad input gets a 4xx
with a one-line JSON error, whether the route or aiohttp's HTTP parser refused it; an
unexpected failure is logged and answered 500 with one line, never a stack trace.

``/debug/allocations`` costs bounded work and memory whatever the load: the unfiltered
views are encoded once per snapshot (off the event loop), filtered ones are rendered off
the loop a few at a time, bodies go out in chunks that wait for the client, and beyond
``DEBUG_MAX_IN_FLIGHT`` requests the answer is 503 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Protocol, runtime_checkable

import aiohttp
import structlog
from aiohttp import HttpVersion10, HttpVersion11, hdrs, web
from aiohttp.web_protocol import RequestHandler

from exporter import __version__
from exporter.config import ConfigError, join_host_port
from exporter.debugview import (
    FILTER_KEYS,
    GET_SOURCE,
    EncodedView,
    Filters,
    encode_json,
    encode_text,
)
from exporter.exposition import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE
from exporter.join import join_fresh_pod
from exporter.kubelet.errors import KubeletError, MethodUnavailable, PodNotFound
from exporter.logs import cut_line
from exporter.lookup import CoalescingLookup, LookupRefused
from exporter.model import Snapshot
from exporter.outage import Throttle
from exporter.store import Published, SnapshotStore

__all__ = [
    "CLIENT_ERROR_LOG_INTERVAL_S",
    "DEBUG_MAX_IN_FLIGHT",
    "KEEPALIVE_TIMEOUT_S",
    "LINGERING_TIME_S",
    "MAX_CONNECTIONS",
    "SERVER_HEADER",
    "SHUTDOWN_TIMEOUT_S",
    "STORE",
    "HeldConnection",
    "HoldsConnections",
    "WebSettings",
    "create_app",
    "make_runner",
    "peer_text",
    "unsupported_aiohttp",
]

log = structlog.get_logger(__name__)

MAX_QUERY_VALUE_LENGTH = 512
# What Kubernetes accepts: a pod name is a DNS-1123 subdomain, a namespace a DNS-1123
# label. Anything else cannot exist, and is refused before it costs a kubelet call.
_POD_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

# Connections: an idle keep-alive connection, or one that has not sent a whole request
# head since it opened or since its last answer, is closed after KEEPALIVE_TIMEOUT_S
# (Prometheus scrapes every 15-30 s and reconnects at no cost). No handler reads a body:
# what a client sends after its head is drained for at most LINGERING_TIME_S, then the
# connection closes. On SIGTERM, requests in flight get SHUTDOWN_TIMEOUT_S, well inside
# the DaemonSet's 10 s grace period: aiohttp waits its timeout twice (for handlers to
# finish, then for the ones it cancelled, such as a write to a client that stopped
# reading), so it is given half.
# The Server header, no versions for a scanner to match: set on each response, where
# aiohttp's default names Python's and aiohttp's releases.
SERVER_HEADER = "podresources-exporter"
KEEPALIVE_TIMEOUT_S = 20.0
LINGERING_TIME_S = 2.0
# At most one line a minute of each kind a client can cause at will: accept() failing
# (app.py's loop handler logs asyncio's own the same), plain HTTP on the HTTPS port and
# TLS on the plain one.
CLIENT_ERROR_LOG_INTERVAL_S = 60.0
# The first byte of a TLS connection: a handshake record (RFC 8446 5.1, ContentType 22).
_TLS_HANDSHAKE = 0x16
MAX_REQUEST_HEADERS = 32
MAX_HEADER_FIELD_BYTES = 8190
# Connections served at once. Each costs a descriptor and memory (about 21 KiB with an
# 8 KiB head on its way, measured; ~40 KiB over TLS, with tlssite's smaller buffer),
# for the 20 s a head may take: with no bound, one host opening connections faster
# than that (some 9,000 at once) outgrew the DaemonSet's 256 MiB, or took every
# descriptor the kubelet calls and sysfs reads need.
# Past this many, the connection that has waited longest without a request in progress
# (still sending its head, or idle between requests) is closed for the new one, so a
# flood of slow heads makes room for a scraper, which sends its request as it
# connects; where every one has a request in progress, the new one is closed. 1,024:
# twice a burst of 500 scrapes at once (tests/fault), about 21 MiB of heads at most.
MAX_CONNECTIONS = 1024
SHUTDOWN_TIMEOUT_S = 3.0
# On SIGTERM, after the listeners close: how long a connection already accepted has to
# send its first bytes before it is closed unanswered (Go's Shutdown gives 5 s). A
# scraper sends its request as it connects, so only a busy loop makes this wait.
FIRST_REQUEST_GRACE_S = 1.0
# How long one write of an answer (a whole small page, or one chunk) may wait for the
# client to take it: past it the connection is cut. A client that stops reading would
# otherwise hold its answer's memory and a /debug slot as long as it stays connected
# (nothing else times a request out once its head is read). Progress, not a total: a
# slow reader that keeps reading (a large /debug view through kubectl port-forward) is
# not cut, one that takes under a chunk in this time is.
SEND_STALL_S = 30.0

# /debug/allocations requests served at once, from handler entry to the last byte sent;
# more get 503. Filtered views rendered at once, in threads, and the bytes the views that
# requests hold may take while they are sent (an unfiltered view, shared by the requests
# of its snapshot, counts once; slow clients of older snapshots hold theirs too); a view
# that would pass that budget gets 503 too.
DEBUG_MAX_IN_FLIGHT = 64
DEBUG_MAX_RENDERS = 2
DEBUG_MAX_HELD_BYTES = 32 * 1024 * 1024
DEBUG_RETRY_AFTER_S = 1
_CHUNK_BYTES = 64 * 1024  # a slow client holds at most about this much unsent
# A /metrics page larger than this is written in chunks too: asyncio copies what the
# kernel does not take, so 30 clients that stopped reading a 6 MB page held 180 MB.
# Smaller pages (every gzipped one, most plain ones) go in one write, the fastest.
_WHOLE_BODY_MAX_BYTES = 256 * 1024

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class WebSettings:
    poll_interval_s: float
    enable_debug: bool = True
    debug_max_in_flight: int = DEBUG_MAX_IN_FLIGHT


class _DebugViews:
    """Per-snapshot encodings of /debug/allocations and the bound on requests in flight."""

    def __init__(self, *, max_in_flight: int, max_renders: int, max_held_bytes: int) -> None:
        self._max_in_flight = max_in_flight
        self._max_held_bytes = max_held_bytes
        self.in_flight = 0
        self.held_bytes = 0
        self._renders = asyncio.Semaphore(max_renders)
        self._holders: dict[int, int] = {}  # id() of each view held -> requests holding it

    def try_enter(self) -> bool:
        if self.in_flight >= self._max_in_flight:
            return False
        self.in_flight += 1
        return True

    def leave(self) -> None:
        self.in_flight -= 1

    @contextlib.asynccontextmanager
    async def view(
        self,
        snapshot: Snapshot,
        *,
        filters: Filters,
        output: str,
        source: str = "snapshot",
        shared: dict[str, Any] | None = None,
    ) -> AsyncIterator[EncodedView]:
        """The encoded view, held (and counted against the budget) while in the block.
        ``shared``: the snapshot's own store of its unfiltered encodings (on its
        ``Published``, so they go with it, however long ago the last request came)."""
        if shared is not None and filters == Filters() and source == "snapshot":
            view = await _full_view(snapshot, output, shared)
        else:
            async with self._renders:
                view = await asyncio.to_thread(_encode, snapshot, filters, output, source)
        with self._held(view):
            yield view

    @contextlib.contextmanager
    def _held(self, view: EncodedView) -> Iterator[None]:
        """Counts the view's bytes while any request holds it: a shared one once."""
        key = id(view)  # unique while held: the holders keep the view alive
        holders = self._holders.get(key, 0)
        if not holders:
            if self.held_bytes and self.held_bytes + view.size > self._max_held_bytes:
                raise _busy()
            self.held_bytes += view.size
        self._holders[key] = holders + 1
        try:
            yield
        finally:
            if self._holders[key] == 1:
                del self._holders[key]
                self.held_bytes -= view.size
            else:
                self._holders[key] -= 1


async def _full_view(snapshot: Snapshot, output: str, shared: dict[str, Any]) -> EncodedView:
    pending: asyncio.Future[EncodedView] | None = shared.get(output)
    if pending is None:
        # One encoding per snapshot and format, shared by every request that wants it.
        pending = asyncio.ensure_future(
            asyncio.to_thread(_encode, snapshot, Filters(), output, "snapshot")
        )
        shared[output] = pending

        def forget_failed(done: asyncio.Future[EncodedView]) -> None:
            # A failed encoding is not kept: the next request tries again.
            if (done.cancelled() or done.exception() is not None) and shared.get(output) is done:
                del shared[output]

        pending.add_done_callback(forget_failed)
    return await asyncio.shield(pending)


def _encode(snapshot: Snapshot, filters: Filters, output: str, source: str) -> EncodedView:
    if output == "text":
        return encode_text(snapshot, filters=filters, source=source)
    return encode_json(snapshot, filters=filters, source=source)


STORE = web.AppKey("store", SnapshotStore)
DEBUG_VIEWS = web.AppKey("debug_views", _DebugViews)
SETTINGS = web.AppKey("settings", WebSettings)
LOOKUP = web.AppKey("lookup", CoalescingLookup)


class ErrorAnswer(Exception):
    """Answered ``status`` (400, bad input, unless told) with this message as one line
    of JSON. The message may hold anything the request or the kubelet said, which an
    HTTP reason line (``web.HTTPException(reason=...)``) may not: a newline raises."""

    def __init__(self, message: str, *, status: int = 400, retry_after_s: int | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


def _json_error(
    status: int, message: str, *, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        status=status,
        text=json.dumps({"error": message}) + "\n",
        content_type="application/json",
        headers=headers,
    )


@contextlib.asynccontextmanager
async def _taken_in_time(request: web.Request) -> AsyncIterator[None]:
    """Writes inside must be taken by the client within SEND_STALL_S, or the connection
    is cut (aiohttp would wait on a client that stopped reading forever)."""
    try:
        async with asyncio.timeout(SEND_STALL_S):
            yield
    except TimeoutError:
        log.debug("http_answer_timed_out", path=request.path)
        if request.transport is not None:
            request.transport.abort()
        raise ConnectionResetError("answer not taken in time") from None


@web.middleware
async def _sent_in_time(request: web.Request, handler: Handler) -> web.StreamResponse:
    """An answer the handler returned unsent is sent here, in one write that must be
    taken in time; aiohttp then finds it sent and adds nothing. (Chunked answers are
    timed chunk by chunk in ``_send``.)"""
    response = await handler(request)
    if not response.prepared:
        async with _taken_in_time(request):
            await response.prepare(request)
            await response.write_eof()
    return response


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.version < HttpVersion10:
        # "GET /metrics" with no version: HTTP/0.9, whose answer is the bare body, no
        # status or headers. aiohttp would serve the page under an "HTTP/0.9 200" line
        # no such client reads; Go's servers refuse the request, and so does this (the
        # 400 still goes out under aiohttp's "HTTP/0.9" status line).
        return _json_error(400, "HTTP/0.9 is not served: send HTTP/1.0 or HTTP/1.1")
    try:
        return await handler(request)
    except ErrorAnswer as error:
        retry = {} if error.retry_after_s is None else {"Retry-After": str(error.retry_after_s)}
        return _json_error(error.status, str(error), headers=retry)
    except ConnectionResetError:
        # The client went (reset, or half-closed so aiohttp closed): nothing to answer,
        # nothing broken on our side.
        log.debug("http_client_gone", path=request.path)
        raise
    except web.HTTPException as error:
        if error.status < 400:
            raise
        # 405 says what is allowed; 503 says when to come back.
        kept = {k: v for k, v in error.headers.items() if k in ("Allow", "Retry-After")}
        return _json_error(error.status, error.reason, headers=kept)
    except Exception as error:
        log.exception("http_handler_failed", path=request.path)
        return _json_error(500, f"internal error: {type(error).__name__}")


async def _expect(request: web.Request) -> web.StreamResponse | None:
    """``Expect``, as aiohttp's default handler answers it (100 Continue, on HTTP/1.1),
    but an expectation it cannot meet gets a JSON 417 like every other refusal: the
    default's plain-text one comes before the middlewares, which cannot restyle it."""
    expect = request.headers.get("Expect", "")
    if request.version != HttpVersion11:
        return None
    if expect.lower() == "100-continue":
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the body proper has not begun
        return None
    return _json_error(417, f"unknown Expect: {_cut(expect)}")


def _published(request: web.Request) -> Published:
    published = request.app[STORE].current
    if published is None:
        raise web.HTTPServiceUnavailable(reason="no snapshot yet: the first poll is running")
    return published


def _current(request: web.Request) -> Snapshot:
    return _published(request).snapshot


def _media_ranges(header: str) -> list[tuple[str, dict[str, str], float]]:
    """``Accept``-style header -> [(lower-cased value, other parameters, q)]; an
    unparsable q counts as 0."""
    found = []
    for item in header.split(","):
        value, *params = (part.strip() for part in item.split(";"))
        if not value:
            continue
        q = 1.0
        named: dict[str, str] = {}
        for param in params:
            name, _, text = param.partition("=")
            name = name.strip().lower()
            if name != "q":
                named[name] = text.strip().strip('"')
                continue
            try:
                q = float(text)
            except ValueError:
                q = 0.0
            if not 0.0 <= q <= 1.0:  # nan and out-of-range values say nothing usable
                q = 0.0
        found.append((value.lower(), named, q))
    return found


def _qualities(ranges: list[tuple[str, dict[str, str], float]]) -> dict[str, float]:
    """Parsed ``Accept``-style ranges -> {lower-cased value: its highest q}."""
    found: dict[str, float] = {}
    for value, _, q in ranges:
        found[value] = max(q, found.get(value, 0.0))
    return found


# The OpenMetrics versions the page is (its 1.0.0 text is valid 0.0.1), newest first; an
# entry without a version asks for 0.0.1, as prometheus/common's negotiation reads it.
_OPENMETRICS = "application/openmetrics-text"
_OPENMETRICS_VERSIONS = ("1.0.0", "0.0.1")
_OPENMETRICS_0_0_1 = "application/openmetrics-text; version=0.0.1; charset=utf-8"
# The name escaping a 1.0.0 answer must name (prometheus/docs content_negotiation.md);
# every name here is a legacy one, which each scheme leaves as it is, so the one asked
# for is named, and underscores (prometheus/common's default) where none or another was.
_ESCAPING_SCHEMES = ("allow-utf-8", "underscores", "dots", "values")


def _openmetrics_type(accept: str) -> str | None:
    """The Content-Type of the OpenMetrics page to answer with, None for text: an entry
    for a version the page is, with q > 0 and preferred at least as much as text, whose
    quality is the most specific range that covers it (RFC 9110 12.5.1); the newer
    version where two are equally preferred."""
    best: tuple[float, int, str, str] | None = None  # q, newness, version, escaping
    ranges = _media_ranges(accept)
    for value, params, q in ranges:
        version = params.get("version", "0.0.1")
        if value != _OPENMETRICS or q <= 0 or version not in _OPENMETRICS_VERSIONS:
            continue
        newness = -_OPENMETRICS_VERSIONS.index(version)
        if best is None or (q, newness) > best[:2]:
            best = (q, newness, version, params.get("escaping", "").lower())
    qualities = _qualities(ranges)
    text = next((qualities[r] for r in ("text/plain", "text/*", "*/*") if r in qualities), 0.0)
    if best is None or best[0] < text:
        return None
    _, _, version, escaping = best
    if version == "0.0.1":
        return _OPENMETRICS_0_0_1
    scheme = escaping if escaping in _ESCAPING_SCHEMES else "underscores"
    return f"{OPENMETRICS_CONTENT_TYPE}; escaping={scheme}"


def _wants_gzip(accept_encoding: str) -> bool:
    qualities = _qualities(_media_ranges(accept_encoding))
    if "gzip" not in qualities and "x-gzip" in qualities:  # its old name (RFC 9110 8.4.1.3)
        qualities["gzip"] = qualities["x-gzip"]
    return qualities.get("gzip", qualities.get("*", 0.0)) > 0


async def metrics(request: web.Request) -> web.StreamResponse:
    # Rendered by the first scrape of this snapshot (in a thread), then kept. Nothing
    # may be awaited between reading the published snapshot and asking for its render:
    # renders run in publish order, which the cpu collector's floors rely on (a page
    # rendered after a newer one would be floored on the newer poll's figures).
    exposition = await request.app[STORE].exposition(_published(request))
    # A header sent on several lines is one comma-separated list (RFC 9110 5.3).
    openmetrics_type = _openmetrics_type(",".join(request.headers.getall("Accept", ())))
    openmetrics = openmetrics_type is not None
    gzipped = _wants_gzip(",".join(request.headers.getall("Accept-Encoding", ())))
    # Encoded on the first ask for this format in this snapshot, then kept; only the
    # live process families are rendered per scrape.
    body = exposition.page(openmetrics=openmetrics, gzipped=gzipped)
    content_type = openmetrics_type or TEXT_CONTENT_TYPE
    headers = {"Content-Type": content_type, "Vary": "Accept, Accept-Encoding"}
    if gzipped:
        headers["Content-Encoding"] = "gzip"
    if len(body) > _WHOLE_BODY_MAX_BYTES:
        return await _send(request, (body,), headers=headers)
    return web.Response(body=body, headers=headers)


# The most of a client's own words an error quotes back.
MAX_QUOTED = 64
# A "%" not followed by two hex digits: aiohttp keeps it as it is, Go refuses the query.
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _cut(text: str) -> str:
    """``text`` quoted for an error message, cut to MAX_QUOTED characters."""
    return cut_line(text, MAX_QUOTED, quoted=True)


def _query(
    request: web.Request, allowed: tuple[str, ...], *, may_be_empty: tuple[str, ...] = ()
) -> dict[str, str]:
    _, _, raw_query = request.raw_path.partition("?")  # as sent: yarl re-escapes a lone "%"
    if _BAD_ESCAPE.search(raw_query):
        raise ErrorAnswer("query string: a '%' not followed by two hex digits")
    values: dict[str, str] = {}
    for key, value in request.query.items():
        if key not in allowed:
            raise ErrorAnswer(f"unknown query parameter {_cut(key)}; known: {', '.join(allowed)}")
        if key in values:
            raise ErrorAnswer(f"query parameter {key!r} given twice")
        if len(value) > MAX_QUERY_VALUE_LENGTH or not value.isprintable():
            raise ErrorAnswer(f"query parameter {key!r}: not a printable value of sane length")
        if not value and key not in may_be_empty:
            raise ErrorAnswer(f"query parameter {key!r} is empty")
        if "\ufffd" in value:  # how aiohttp decodes percent-escapes that are not UTF-8
            raise ErrorAnswer(f"query parameter {key!r}: not UTF-8")
        values[key] = value
    output = values.get("format", "json")
    if output not in ("json", "text"):
        raise ErrorAnswer(f"format must be json or text, not {output!r}")
    return values


async def _respond(
    request: web.Request,
    snapshot: Snapshot,
    *,
    filters: Filters,
    output: str,
    source: str = "snapshot",
    shared: dict[str, Any] | None = None,
) -> web.StreamResponse:
    async with request.app[DEBUG_VIEWS].view(
        snapshot, filters=filters, output=output, source=source, shared=shared
    ) as view:
        content_type = "text/plain" if output == "text" else "application/json"
        return await _send(
            request,
            view.parts(_data_age_s(snapshot) or 0.0),  # no data, no age to splice in
            headers={"Content-Type": f"{content_type}; charset=utf-8"},
        )


async def _send(
    request: web.Request, parts: tuple[bytes, ...], *, headers: dict[str, str]
) -> web.StreamResponse:
    response = web.StreamResponse(headers=headers)
    response.content_length = sum(len(p) for p in parts)
    await response.prepare(request)
    # A HEAD answer ends with its headers: aiohttp sends what a StreamResponse writes
    # even then, and a client reading the next answer on the connection would read it.
    for part in parts if request.method != "HEAD" else ():
        # Chunks: each write waits until the client has taken the one before, so a slow
        # reader holds one chunk, not a copy of the whole body.
        data = memoryview(part)
        for offset in range(0, len(data), _CHUNK_BYTES):
            async with _taken_in_time(request):
                await response.write(data[offset : offset + _CHUNK_BYTES])
    async with _taken_in_time(request):
        await response.write_eof()
    return response


def _busy() -> web.HTTPServiceUnavailable:
    return web.HTTPServiceUnavailable(
        reason="too many /debug/allocations requests at once; retry shortly",
        headers={"Retry-After": str(DEBUG_RETRY_AFTER_S)},
    )


def _debug_bounded(handler: Handler) -> Handler:
    """At most DEBUG_MAX_IN_FLIGHT at once; beyond, 503 with Retry-After, at no cost."""

    async def bounded(request: web.Request) -> web.StreamResponse:
        views = request.app[DEBUG_VIEWS]
        if not views.try_enter():
            raise _busy()
        try:
            return await handler(request)
        finally:
            views.leave()

    return bounded


async def allocations(request: web.Request) -> web.StreamResponse:
    # container= is a pod's shared pool, by the name JSON shows it under.
    query = _query(request, (*FILTER_KEYS, "format"), may_be_empty=("container",))
    published = _published(request)
    return await _respond(
        request,
        published.snapshot,
        filters=Filters.from_query(query),
        output=query.get("format", "json"),
        shared=published.debug_views,
    )


async def pod_allocations(request: web.Request) -> web.StreamResponse:
    query = _query(request, ("format",))
    namespace, name = request.match_info["namespace"], request.match_info["pod"]
    # fullmatch: "$" would also match before a final newline ("%0A").
    if not _NAMESPACE.fullmatch(namespace):
        raise ErrorAnswer(f"namespace {_cut(namespace)} is not a valid Kubernetes namespace name")
    if not _POD_NAME.fullmatch(name):
        raise ErrorAnswer(f"pod {_cut(name)} is not a valid Kubernetes pod name")
    snapshot = _current(request)
    filters = Filters(namespace=namespace, pod=name)
    output = query.get("format", "json")
    try:
        fresh = await request.app[LOOKUP].get(namespace=namespace, name=name)
    except PodNotFound as error:
        raise ErrorAnswer(f"pod {namespace}/{name} not found: {error}", status=404) from error
    except (LookupRefused, KubeletError) as error:  # Get missing, disabled or failing
        unanswered = error
    else:
        joined = join_fresh_pod(snapshot, fresh, collected_at=time.time())
        return await _respond(request, joined, filters=filters, output=output, source=GET_SOURCE)
    if not any(filters.keeps_pod(p) for p in snapshot.pods):
        if isinstance(unanswered, MethodUnavailable):  # the snapshot is all there is
            raise ErrorAnswer(f"pod {namespace}/{name} not in the last snapshot", status=404)
        # Held back or failing: the pod may be newer than the snapshot. Not a "no".
        raise ErrorAnswer(
            f"pod {namespace}/{name} not in the last snapshot, and the kubelet gave no "
            f"answer ({unanswered}); retry shortly",
            status=503,
            retry_after_s=DEBUG_RETRY_AFTER_S,
        )
    source = f"snapshot ({unanswered})"
    return await _respond(request, snapshot, filters=filters, output=output, source=source)


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


def _data_age_s(snapshot: Snapshot) -> float | None:
    """How old the snapshot's kubelet data is, None without any: on the monotonic clock
    where the poller noted it, so NTP stepping the wall clock neither flips /readyz to
    503 (forward) nor keeps stale data ready (back)."""
    if snapshot.collected_monotonic is not None:
        return time.monotonic() - snapshot.collected_monotonic
    return None if snapshot.collected_at is None else time.time() - snapshot.collected_at


async def readyz(request: web.Request) -> web.Response:
    published = request.app[STORE].current
    limit = 3 * request.app[SETTINGS].poll_interval_s
    if published is None:
        return web.Response(status=503, text="not ready: no snapshot yet\n")
    age = _data_age_s(published.snapshot)
    if age is None:
        return web.Response(status=503, text="not ready: no kubelet data yet\n")
    if age > limit:
        return web.Response(status=503, text=f"not ready: kubelet data is {age:.0f}s old\n")
    return web.Response(text="ok\n")


_LANDING = """<!doctype html>
<html><head><title>podresources-exporter</title></head>
<body>
<h1>podresources-exporter {version}</h1>
<p>Kubelet PodResources allocations joined with hardware telemetry.</p>
<ul>
<li><a href="metrics">/metrics</a>: Prometheus metrics</li>
{debug}<li><a href="healthz">/healthz</a>: process alive</li>
<li><a href="readyz">/readyz</a>: kubelet data fresh</li>
</ul>
</body></html>
"""

_DEBUG_LINKS = (
    '<li><a href="debug/allocations">/debug/allocations</a>: who holds what (JSON; '
    '<a href="debug/allocations?format=text">as a table</a>)</li>\n'
)


async def landing(request: web.Request) -> web.Response:
    debug = _DEBUG_LINKS if request.app[SETTINGS].enable_debug else ""
    return web.Response(
        text=_LANDING.format(version=__version__, debug=debug), content_type="text/html"
    )


def create_app(
    *,
    store: SnapshotStore,
    settings: WebSettings,
    lookup: CoalescingLookup,
    middlewares: tuple[Any, ...] = (),
) -> web.Application:
    """The aiohttp application; the caller runs it (and owns the poller)."""
    app = web.Application(middlewares=[_sent_in_time, _errors, *middlewares])
    app[STORE] = store
    app[SETTINGS] = settings
    app[LOOKUP] = lookup
    app[DEBUG_VIEWS] = _DebugViews(
        max_in_flight=settings.debug_max_in_flight,
        max_renders=DEBUG_MAX_RENDERS,
        max_held_bytes=DEBUG_MAX_HELD_BYTES,
    )
    routes: list[tuple[str, Handler]] = [
        ("/", landing),
        ("/metrics", metrics),
        ("/healthz", healthz),
        ("/readyz", readyz),
    ]
    if settings.enable_debug:
        routes.append(("/debug/allocations", _debug_bounded(allocations)))
        routes.append(("/debug/allocations/{namespace}/{pod}", _debug_bounded(pod_allocations)))
    for path, handler in routes:
        app.router.add_get(path, handler, expect_handler=_expect)
        app.router.add_route("*", path, _method_not_allowed, expect_handler=_expect)
    # What no route serves is refused by a route too: aiohttp's own 404 and 405 answer an
    # Expect with the plain-text 417, the whole header quoted back.
    app.router.add_route("*", "/{path:.*}", _not_found, expect_handler=_expect)
    return app


async def _method_not_allowed(request: web.Request) -> web.StreamResponse:
    raise web.HTTPMethodNotAllowed(request.method, ("GET", "HEAD"))


async def _not_found(request: web.Request) -> web.StreamResponse:
    raise web.HTTPNotFound()


class _JsonErrorRequestHandler(RequestHandler):
    """aiohttp's connection handler, but a request its parser refuses gets one line of
    JSON and one log line, not a text page echoing the request and a traceback; and
    one that stops reading a connection while a request of it waits parsed, as Go's
    server reads the next request only once it answered the last (aiohttp read on until
    32 waited: a client pipelining requests it never reads the answers of held 32 heads
    of up to a megabyte each). What one read brought is still parsed: at most 32 small
    heads, or one large one.

    Slotted as aiohttp's: an attribute of aiohttp's that a release renames is refused
    here, not quietly made anew on the instance with nothing reading it."""

    __slots__ = ("_tls_on_plain_port", "heard_from")

    def __init__(self, *args: Any, tls_on_plain_port: Throttle, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._max_msg_queue_size = 1
        self._msg_queue_resume_size = 0
        self._tls_on_plain_port = tls_on_plain_port
        self.heard_from = False  # any bytes yet: a request on its way (_Runner.cleanup)

    async def start(self) -> None:
        # A connection closed as it came (past max_connections) is lost before this task
        # first runs, a loop turn after it was made on Python 3.11: aiohttp's start()
        # then failed an assert, "Task exception was never retrieved", an
        # event_loop_error line for each connection refused.
        if self._manager is None:
            return
        await super().start()

    def data_received(self, data: bytes) -> None:
        if not self.heard_from and data[:1] == bytes([_TLS_HANDSHAKE]):
            # A client that speaks TLS here (a scrape job left at scheme https) gets its
            # 400 as any unparsable request; say why, once a minute.
            self._tls_on_plain_port.warning(
                peer=peer_text(self.transport and self.transport.get_extra_info("peername")),
                hint="the client spoke TLS to the plain HTTP port: scrape it with scheme http"
                " or give the exporter tls_server_config",
            )
        self.heard_from = True
        super().data_received(data)

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:  # as aiohttp: an answer is already on its way
            raise ConnectionError("response already sent, cannot send the error")
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = ""
        what = type(exc).__name__ if exc is not None else "error"
        if isinstance(exc, ConnectionResetError):
            log.debug("http_client_gone", status=status, error=what)
        elif status >= 500:
            log.error("http_connection_failed", status=status, error=what)
        else:
            log.debug("http_request_unparsable", status=status, error=what)
        response = _json_error(status, f"{reason}: {what}" if reason else what)
        response.headers[hdrs.SERVER] = SERVER_HEADER  # made before any app hook runs
        response.force_close()
        return response


class HeldConnection:
    """A connection a site accepted and has not handed to a handler yet (on the TLS port:
    until its handshake is done), counted under max_connections all the same."""

    __slots__ = ("arrival", "close", "protocol")

    def __init__(self, arrival: int, close: Callable[[], None]) -> None:
        self.arrival = arrival  # the order connections came in, handled ones included
        self.close = close  # ends it, should the limit need its place
        self.protocol: object | None = None  # the handler it goes to, once made


@runtime_checkable
class HoldsConnections(Protocol):
    """A server whose connection limit also counts the connections a site holds."""

    def hold(self, close: Callable[[], None]) -> HeldConnection: ...

    def handing_over(self, held: HeldConnection, protocol: object) -> None: ...

    def release(self, held: HeldConnection) -> None: ...


class _JsonErrorServer(web.Server):
    def __init__(
        self,
        *args: Any,
        handler_options: dict[str, Any],
        max_connections: int = MAX_CONNECTIONS,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._handler_options = handler_options
        self._max_connections = max_connections
        self._tls_on_plain_port = Throttle(
            "tls_request_on_http_port", interval_s=CLIENT_ERROR_LOG_INTERVAL_S
        )
        self._full = Throttle("http_connections_full", interval_s=CLIENT_ERROR_LOG_INTERVAL_S)
        self._arrivals = itertools.count()
        self._arrived: dict[RequestHandler, int] = {}
        self._held: dict[HeldConnection, None] = {}  # in the order they came
        self._handing: dict[object, HeldConnection] = {}  # protocol -> its held connection

    def hold(self, close: Callable[[], None]) -> HeldConnection:
        """Count a connection a site holds before it has a handler; ``close`` ends it."""
        held = HeldConnection(next(self._arrivals), close)
        self._held[held] = None
        self._make_room(held)
        return held

    def handing_over(self, held: HeldConnection, protocol: object) -> None:
        """``protocol`` will serve ``held``: its connection_made takes over the count."""
        held.protocol = protocol
        self._handing[protocol] = held

    def release(self, held: HeldConnection) -> None:
        """The site is done with ``held``: handed over, closed, or failed."""
        self._held.pop(held, None)
        if held.protocol is not None:
            self._handing.pop(held.protocol, None)

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        held = self._handing.pop(handler, None)
        if held is not None:  # counted since its accept: in its place, not a new one
            self._held.pop(held, None)
            self._arrived[handler] = held.arrival
            return
        self._arrived[handler] = next(self._arrivals)
        self._make_room(handler)

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        super().connection_lost(handler, exc)
        self._arrived.pop(handler, None)

    def _make_room(self, new: RequestHandler | HeldConnection) -> None:
        if len(self._connections) + len(self._held) <= self._max_connections:
            return
        # Those closed already stay listed until their handler ends: not counted.
        live = [h for h in self._connections if h.transport is not None]
        if len(live) + len(self._held) <= self._max_connections:
            return
        # The one that came first of those without a request in progress: still before
        # or in its TLS handshake, sending its head, or idle between requests.
        waiting: list[tuple[int, RequestHandler | HeldConnection]] = [
            (h.arrival, h) for h in self._held if h is not new
        ]
        waiting += [
            (self._arrived.get(h, -1), h)
            for h in live
            if h is not new and not h._request_in_progress and not h._messages
        ]
        victim = min(waiting, key=lambda found: found[0])[1] if waiting else new
        self._full.warning(
            limit=self._max_connections,
            closed="the new connection"
            if victim is new
            else "the longest in its TLS handshake"
            if isinstance(victim, HeldConnection)
            else "the longest idle",
            hint="a client holds many connections open: ss -tnp on the node",
        )
        if isinstance(victim, HeldConnection):
            self.release(victim)  # its place is free now, not when its task ends
            victim.close()
        else:
            victim.force_close()

    def __call__(self) -> RequestHandler:
        loop = asyncio.get_running_loop()
        return _JsonErrorRequestHandler(
            self,
            loop=loop,
            tls_on_plain_port=self._tls_on_plain_port,
            **self._handler_options,
        )


def peer_text(address: object) -> str:
    """A client's address (a socket's getpeername(), a transport's peername) as
    host:port; empty where there is none."""
    if not isinstance(address, tuple) or len(address) < 2:
        return ""
    return join_host_port(str(address[0]), int(address[1]))


# What the server and its connections read or set of aiohttp's that aiohttp does not
# document, each as aiohttp's own handler (or server) has it: a release that renames one
# would take a bound away unnoticed (reading a renamed queue size goes on unbounded) or
# fail only once the connection limit is reached.
_HANDLER_INTERNALS: dict[str, type] = {
    "_max_msg_queue_size": int,  # set: reading stops once a request waits parsed
    "_msg_queue_resume_size": int,  # set: and resumes once none waits
    "_request_in_progress": bool,  # read: the connection limit closes an idle one,
    "_messages": deque,  # read: ... with no request waiting parsed
    "_manager": web.Server,  # read: a connection lost before its handler began (start)
}
_SERVER_INTERNALS: dict[str, type] = {"_connections": dict}  # read: the connection count


def unsupported_aiohttp(server: web.Server | None) -> str | None:
    """What the installed aiohttp lacks that the runner's ``server`` relies on; None
    when nothing. Run in the event loop, once ``server`` is made."""
    if not isinstance(server, _JsonErrorServer):
        return "AppRunner no longer makes its server through _make_server"
    if not callable(getattr(RequestHandler, "handle_error", None)):
        return "RequestHandler has no handle_error"
    plain = RequestHandler(server, loop=asyncio.get_running_loop())  # never connected
    owners: tuple[tuple[object, dict[str, type]], ...] = (
        (server, _SERVER_INTERNALS),
        (plain, _HANDLER_INTERNALS),
    )
    for owner, internals in owners:
        for name, kind in internals.items():
            if not isinstance(getattr(owner, name, None), kind):
                return f"{type(owner).__name__}.{name} is no longer a {kind.__name__}"
    try:
        server()  # a connection's handler, with the runner's options
    except (AttributeError, TypeError) as error:
        return f"a connection's handler cannot be made: {error}"
    return None


class _Runner(web.AppRunner):
    """AppRunner whose connections answer parser errors in JSON, with our timeouts, and
    whose shutdown answers the requests already on their way."""

    def __init__(
        self, app: web.Application, *, handler_options: dict[str, Any], max_connections: int
    ) -> None:
        super().__init__(app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S / 2)
        self._handler_options = handler_options
        self._max_connections = max_connections

    async def setup(self) -> None:
        """As aiohttp's; then, before anything listens, an aiohttp release without what
        the server relies on (``unsupported_aiohttp``) is refused with ConfigError, one
        line naming the release, where it would have served without the bounds."""
        await super().setup()
        problem = unsupported_aiohttp(self.server)
        if problem is not None:
            await self.cleanup()
            raise ConfigError(
                f"aiohttp {aiohttp.__version__} is not supported: {problem}; install a"
                " release of the range pyproject.toml names that this exporter was tested with"
            )

    async def cleanup(self) -> None:
        """Close the listeners, give connections already accepted that have sent nothing
        yet FIRST_REQUEST_GRACE_S to send their request, then shut down as aiohttp does.
        aiohttp closes every connection without a request in progress at once: one whose
        request was still in the kernel's buffer (the loop busy a moment, as under a
        burst of scrapes) was closed unanswered."""
        for site in self.sites:
            await site.stop()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FIRST_REQUEST_GRACE_S
        while any(
            isinstance(c, _JsonErrorRequestHandler) and not c.heard_from
            for c in (self.server.connections if self.server else ())
        ):
            if loop.time() >= deadline:
                break
            await asyncio.sleep(0.01)
        await super().cleanup()

    async def _make_server(self) -> web.Server:
        made = await super()._make_server()  # runs the app's start-up and freezes it
        return _JsonErrorServer(
            made.request_handler,
            request_factory=made.request_factory,
            handler_cancellation=made.handler_cancellation,
            handler_options=self._handler_options,
            max_connections=self._max_connections,
        )


def make_runner(
    app: web.Application,
    *,
    keepalive_timeout_s: float = KEEPALIVE_TIMEOUT_S,
    lingering_time_s: float = LINGERING_TIME_S,
    max_connections: int = MAX_CONNECTIONS,
) -> web.AppRunner:
    """The runner to serve ``app`` with: connection timeouts and limit, JSON parser errors."""
    return _Runner(
        app,
        max_connections=max_connections,
        handler_options={
            "keepalive_timeout": keepalive_timeout_s,
            "lingering_time": lingering_time_s,
            "access_log": None,
            # A request head of at most 32 lines of 8 KiB (aiohttp allows 128): scrapers
            # and curl send under ten short ones, and heads are read before any auth.
            "max_headers": MAX_REQUEST_HEADERS,
            "max_field_size": MAX_HEADER_FIELD_BYTES,
            "max_line_size": MAX_HEADER_FIELD_BYTES,
        },
    )
