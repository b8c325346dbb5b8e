"""A real aiohttp listener on loopback behind the exporter's access middleware."""

from __future__ import annotations

import base64
import contextlib
import errno
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from exporter.auth import (
    PasswordChecker,
    access_middleware,
    response_headers,
)
from exporter.tlssite import make_site
from exporter.webconfig import LiveWebConfig

__all__ = [
    "KernelWithoutIPv6",
    "Served",
    "basic",
    "free_dual_stack_port",
    "free_port",
    "has_ipv6_loopback",
    "served",
]


def basic(user: str | bytes, password: str | bytes) -> dict[str, str]:
    """An Authorization header; bytes go on the wire as they are."""
    raw_user = user.encode() if isinstance(user, str) else user
    raw_password = password.encode() if isinstance(password, str) else password
    token = base64.b64encode(raw_user + b":" + raw_password).decode()
    return {"Authorization": f"Basic {token}"}


def free_port() -> int:
    """A loopback port nothing listens on now (for servers that take a fixed address)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def has_ipv6_loopback() -> bool:
    """Whether an IPv6 socket can bind ::1 (containers often run without IPv6)."""
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def free_dual_stack_port() -> int:
    """A port no socket holds on either family's wildcard, a closed connection's
    TIME_WAIT included (probed without SO_REUSEADDR): for listeners of both families on
    one fixed port."""
    for _ in range(20):
        with socket.socket() as v4:
            v4.bind(("0.0.0.0", 0))
            port: int = v4.getsockname()[1]
        if not has_ipv6_loopback():
            return port
        try:
            with socket.socket(socket.AF_INET6) as v6:
                v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                v6.bind(("::", port))
        except OSError:
            continue
        return port
    raise AssertionError("no port free on both families")


@dataclass(frozen=True, slots=True)
class Served:
    port: int
    tls: bool

    def url(self, path: str) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}{path}"


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


@contextlib.asynccontextmanager
async def served(
    web_config: LiveWebConfig | None,
    *,
    debug_users: LiveWebConfig | None = None,
    checker: PasswordChecker | None = None,
) -> AsyncIterator[Served]:
    """/metrics, /healthz, /readyz and /debug/allocations (also per pod) answering "ok",
    behind the auth."""
    owned = checker is None
    checker = checker or PasswordChecker()
    app = web.Application(
        middlewares=[
            access_middleware(web_config=web_config, debug_users=debug_users, checker=checker)
        ]
    )
    app.on_response_prepare.append(response_headers(web_config))
    for path in (
        "/metrics",
        "/healthz",
        "/readyz",
        "/debug/allocations",
        "/debug/allocations/{namespace}/{pod}",
    ):
        app.router.add_get(path, _ok)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    ssl_context = web_config.ssl_context() if web_config is not None else None
    site = make_site(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield Served(port=port, tls=ssl_context is not None)
    finally:
        await runner.cleanup()
        if owned:
            checker.close()


class KernelWithoutIPv6(socket.socket):
    """A socket as a kernel booted with ipv6.disable=1 makes them: none for IPv6. Set
    as ``socket.socket`` (monkeypatch) to serve as on such a node."""

    def __init__(self, family: int = -1, *args: Any, **kwargs: Any) -> None:
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        super().__init__(family, *args, **kwargs)
