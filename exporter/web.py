"""HTTP: /metrics, /debug/allocations, /healthz, /readyz and a landing page.

Handlers only read the published snapshot; the one exception,
``/debug/allocations/{namespace}/{pod}``, asks the kubelet's ``Get`` through the
rate-limited, coalescing look-up and falls back to the snapshot. Bad input gets a 4xx
with a one-line JSON error; an unexpected failure is logged and answered 500 with one
line, never a stack trace.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from exporter import __version__
from exporter.debugview import FILTER_KEYS, Filters, render_json, render_text
from exporter.exposition import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE
from exporter.join import join_fresh_pod
from exporter.kubelet.errors import KubeletError, PodNotFound
from exporter.lookup import CoalescingLookup, LookupRefused
from exporter.model import Snapshot
from exporter.store import Published, SnapshotStore

__all__ = ["STORE", "WebSettings", "create_app"]

log = structlog.get_logger(__name__)

MAX_QUERY_VALUE_LENGTH = 512
# Kubernetes object names: DNS-1123 subdomains (namespaces are labels, a subset).
_OBJECT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class WebSettings:
    poll_interval_s: float
    enable_debug: bool = True


STORE = web.AppKey("store", SnapshotStore)
SETTINGS = web.AppKey("settings", WebSettings)
LOOKUP = web.AppKey("lookup", CoalescingLookup)


class BadRequest(Exception):
    """Client error: answered 400 with this message."""


def _json_error(status: int, message: str) -> web.Response:
    return web.Response(
        status=status,
        text=json.dumps({"error": message}) + "\n",
        content_type="application/json",
    )


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except BadRequest as error:
        return _json_error(400, str(error))
    except web.HTTPException as error:
        if error.status < 400:
            raise
        return _json_error(error.status, error.reason)
    except Exception as error:
        log.exception("http_handler_failed", path=request.path)
        return _json_error(500, f"internal error: {type(error).__name__}")


def _published(request: web.Request) -> Published:
    published = request.app[STORE].current
    if published is None:
        raise web.HTTPServiceUnavailable(reason="no snapshot yet: the first poll is running")
    return published


def _current(request: web.Request) -> Snapshot:
    return _published(request).snapshot


async def metrics(request: web.Request) -> web.Response:
    exposition = _published(request).exposition
    openmetrics = "application/openmetrics-text" in request.headers.get("Accept", "")
    gzipped = "gzip" in request.headers.get("Accept-Encoding", "")
    # Encoded on the first ask for this format in this snapshot, then kept; only the
    # live process families are rendered per scrape.
    body = exposition.page(openmetrics=openmetrics, gzipped=gzipped)
    content_type = OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE
    headers = {"Content-Type": content_type, "Vary": "Accept, Accept-Encoding"}
    if gzipped:
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=body, headers=headers)


def _query(request: web.Request, allowed: tuple[str, ...]) -> dict[str, str]:
    values: dict[str, str] = {}
    for key, value in request.query.items():
        if key not in allowed:
            raise BadRequest(f"unknown query parameter {key!r}; known: {', '.join(allowed)}")
        if key in values:
            raise BadRequest(f"query parameter {key!r} given twice")
        if len(value) > MAX_QUERY_VALUE_LENGTH or not value.isprintable():
            raise BadRequest(f"query parameter {key!r}: not a printable value of sane length")
        values[key] = value
    output = values.get("format", "json")
    if output not in ("json", "text"):
        raise BadRequest(f"format must be json or text, not {output!r}")
    return values


def _respond(
    snapshot: Snapshot, *, filters: Filters, output: str, source: str = "snapshot"
) -> web.Response:
    now = time.time()
    if output == "text":
        return web.Response(text=render_text(snapshot, filters=filters, now=now))
    body = render_json(snapshot, filters=filters, now=now, source=source)
    return web.Response(text=json.dumps(body, indent=2) + "\n", content_type="application/json")


async def allocations(request: web.Request) -> web.Response:
    query = _query(request, (*FILTER_KEYS, "format"))
    return _respond(
        _current(request), filters=Filters.from_query(query), output=query.get("format", "json")
    )


async def pod_allocations(request: web.Request) -> web.Response:
    query = _query(request, ("format",))
    namespace, name = request.match_info["namespace"], request.match_info["pod"]
    for what, value in (("namespace", namespace), ("pod", name)):
        if not _OBJECT_NAME.match(value):
            raise BadRequest(f"{what} {value!r} is not a valid Kubernetes object name")
    snapshot = _current(request)
    filters = Filters(namespace=namespace, pod=name)
    output = query.get("format", "json")
    try:
        fresh = await request.app[LOOKUP].get(namespace=namespace, name=name)
    except PodNotFound as error:
        raise web.HTTPNotFound(reason=f"pod {namespace}/{name} not found: {error}") from error
    except (LookupRefused, KubeletError) as error:  # Get missing, disabled or failing
        source = f"snapshot ({error})"
    else:
        joined = join_fresh_pod(snapshot, fresh, collected_at=time.time())
        return _respond(joined, filters=filters, output=output, source="kubelet Get")
    if not any(filters.keeps_pod(p) for p in snapshot.pods):
        raise web.HTTPNotFound(reason=f"pod {namespace}/{name} not in the last snapshot")
    return _respond(snapshot, filters=filters, output=output, source=source)


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    published = request.app[STORE].current
    limit = 3 * request.app[SETTINGS].poll_interval_s
    if published is None:
        return web.Response(status=503, text="not ready: no snapshot yet\n")
    if published.snapshot.collected_at is None:
        return web.Response(status=503, text="not ready: no kubelet data yet\n")
    age = time.time() - published.snapshot.collected_at
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
    app = web.Application(middlewares=[_errors, *middlewares])
    app[STORE] = store
    app[SETTINGS] = settings
    app[LOOKUP] = lookup
    app.router.add_get("/", landing)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if settings.enable_debug:
        app.router.add_get("/debug/allocations", allocations)
        app.router.add_get("/debug/allocations/{namespace}/{pod}", pod_allocations)
    return app
