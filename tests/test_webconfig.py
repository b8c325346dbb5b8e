"""--web.config.file: basic auth and TLS in the exporter-toolkit format."""

from __future__ import annotations

import base64
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from aiohttp import web

from exporter.webconfig import WebConfigError, basic_auth_middleware, load_web_config


def _auth(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture
def certificate(tmp_path: Path) -> Path:
    """A self-signed certificate for 127.0.0.1: tls.crt and tls.key in tmp_path."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not found to make a test certificate")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(tmp_path / "tls.key"),
            "-out",
            str(tmp_path / "tls.crt"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return tmp_path / "tls.crt"


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def test_basic_auth(aiohttp_client: Any, tmp_path: Path) -> None:
    """Right credentials pass; wrong or missing ones get 401 with a challenge."""
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    path = tmp_path / "web.yml"
    path.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    config = load_web_config(path)
    app = web.Application(middlewares=[basic_auth_middleware(config.users)])
    app.router.add_get("/metrics", _ok)
    client = await aiohttp_client(app)
    assert (await client.get("/metrics", headers=_auth("prometheus", "s3cret"))).status == 200
    assert (await client.get("/metrics", headers=_auth("prometheus", "s3cret"))).status == 200
    wrong = await client.get("/metrics", headers=_auth("prometheus", "nope"))
    assert wrong.status == 401
    missing = await client.get("/metrics")
    assert (missing.status, missing.headers["WWW-Authenticate"]) == (
        401,
        'Basic realm="podresources-exporter"',
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("basic_auth_users:\n  a: plain\n", "not a bcrypt hash"),
        ("basic_auth_user:\n  a: b\n", "unknown keys: basic_auth_user"),
        ("tls_server_config:\n  cert_file: x.crt\n", "needs cert_file and key_file"),
        ("tls_server_config:\n  cert_file: x.crt\n  key_file: x.key\n", "cannot load TLS files"),
        ("[unclosed", "web.yml"),
    ],
)
def test_bad_files_give_one_line(tmp_path: Path, text: str, message: str) -> None:
    """A bad file is refused with one line naming it: a typo must not disable auth."""
    path = tmp_path / "web.yml"
    path.write_text(text)
    with pytest.raises(WebConfigError, match=message) as caught:
        load_web_config(path)
    assert "\n" not in str(caught.value)


def test_tls_context_loads_certificate(tmp_path: Path, certificate: Path) -> None:
    """cert_file and key_file, relative to the config file, give a server TLS context."""
    path = tmp_path / "web.yml"
    path.write_text(
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n  min_version: TLS13\n"
    )
    context = load_web_config(path).ssl_context
    assert context is not None
    assert (context.minimum_version, context.verify_mode) == (ssl.TLSVersion.TLSv1_3, ssl.CERT_NONE)


async def test_served_over_tls_with_basic_auth(tmp_path: Path, certificate: Path) -> None:
    """The real serve(): HTTPS with the configured certificate, 401 without credentials."""
    import asyncio
    import socket

    import aiohttp

    from exporter.app import serve
    from exporter.cli import parse_config

    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    web_config = tmp_path / "web.yml"
    web_config.write_text(
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = parse_config(
        [
            "--demo",
            "--poll.interval",
            "1",
            "--web.listen-address",
            f"127.0.0.1:{port}",
            "--web.config.file",
            str(web_config),
        ],
        {},
    )
    stop = asyncio.Event()
    server = asyncio.create_task(serve(config, stop=stop))
    client_tls = ssl.create_default_context(cafile=str(certificate))
    url = f"https://127.0.0.1:{port}/metrics"
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(100):
                try:
                    async with session.get(
                        url, ssl=client_tls, headers=_auth("prometheus", "s3cret")
                    ) as r:
                        if r.status == 200:
                            body = await r.text()
                            break
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.1)
            else:
                pytest.fail("the exporter never served /metrics over TLS")
            assert "podresources_kubelet_up 1.0" in body
            async with session.get(url, ssl=client_tls) as anonymous:
                assert anonymous.status == 401
    finally:
        stop.set()
        await asyncio.wait_for(server, timeout=10)
