"""The shipped probes against the real exporter with TLS and basic auth switched on.

The probes and the arguments come from the rendered web-config overlay, not from this
file: a probe path, port or scheme changed in the manifests is what gets tested.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import bcrypt
import pytest
import yaml
from pki import make_pki
from webserving import free_port

from exporter.app import serve
from exporter.cli import parse_config

REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "manifests" / "overlays" / "web-config"
SECRET_MOUNT = "/etc/podresources-exporter/web"


def _container(kubectl: str) -> dict[str, Any]:
    rendered = subprocess.run(
        [kubectl, "kustomize", str(OVERLAY)], capture_output=True, text=True, check=True
    ).stdout
    (daemonset,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "DaemonSet"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    return dict(container)


def _local_args(args: list[str], *, secret: Path, port: int) -> list[str]:
    """The manifest's arguments on this machine: the Secret's folder, a loopback port, and
    --demo in place of the node's kubelet and sysfs."""
    local = []
    for arg in args:
        if arg.startswith("--web.listen-address="):
            arg = f"--web.listen-address=127.0.0.1:{port}"
        local.append(arg.replace(SECRET_MOUNT, str(secret)))
    return [*local, "--demo", "--poll.interval", "1"]


async def _probe(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> int:
    """As the kubelet probes: no credentials, no client certificate, no verification."""
    try:
        async with session.get(url, ssl=False, headers=headers, allow_redirects=False) as r:
            return r.status
    except aiohttp.ClientConnectionError:
        return 0


async def test_manifest_probes_pass_with_tls_and_basic_auth(kubectl: str, tmp_path: Path) -> None:
    """With the web-config overlay's TLS and basic auth on, its liveness and readiness
    probes succeed as the kubelet sends them, while /metrics refuses the same request."""
    container = _container(kubectl)
    pki = make_pki(tmp_path / "pki")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "tls.crt").write_bytes(pki.cert("server").read_bytes())
    (secret / "tls.key").write_bytes(pki.key("server").read_bytes())
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    (secret / "web.yml").write_text(
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
    )
    port = free_port()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    probes = {kind: container[kind]["httpGet"] for kind in ("livenessProbe", "readinessProbe")}
    assert {"HTTPS"} == {p.get("scheme", "HTTP") for p in probes.values()}

    config = parse_config(_local_args(container["args"], secret=secret, port=port), {})
    stop = asyncio.Event()
    server = asyncio.create_task(serve(config, stop=stop))
    results: dict[str, int] = {}
    try:
        async with aiohttp.ClientSession() as session:
            for kind, get in probes.items():
                assert ports[get["port"]] == 9410  # the named port is the one listened on
                url = f"{get['scheme'].lower()}://127.0.0.1:{port}{get['path']}"
                headers = {h["name"]: h["value"] for h in get.get("httpHeaders", ())}
                for _ in range(300):  # until the first poll; the kubelet retries likewise
                    results[kind] = await _probe(session, url, headers)
                    if results[kind] == 200:
                        break
                    await asyncio.sleep(0.1)
            metrics = await _probe(session, f"https://127.0.0.1:{port}/metrics", {})
    finally:
        stop.set()
        await asyncio.wait_for(server, timeout=30)
    assert {"livenessProbe": 200, "readinessProbe": 200} == results
    assert 401 == metrics


@pytest.mark.parametrize("overlay", ["manifests", "manifests/overlays/web-config"])
def test_probe_paths_are_the_open_ones(kubectl: str, overlay: str) -> None:
    """Every probe of every variant targets a path the auth middleware leaves open."""
    from exporter.auth import OPEN_PATHS

    rendered = subprocess.run(
        [kubectl, "kustomize", str(REPO / overlay)], capture_output=True, text=True, check=True
    ).stdout
    (daemonset,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "DaemonSet"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    paths = {container[k]["httpGet"]["path"] for k in ("livenessProbe", "readinessProbe")}
    assert paths <= OPEN_PATHS
