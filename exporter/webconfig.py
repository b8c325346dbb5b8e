"""``--web.config.file``: TLS and basic auth, in the Prometheus exporter-toolkit format.

    tls_server_config:
      cert_file: /etc/tls/tls.crt
      key_file: /etc/tls/tls.key
      client_ca_file: /etc/tls/ca.crt          # optional
      client_auth_type: RequireAndVerifyClientCert  # optional
      min_version: TLS12                        # optional, TLS12 or TLS13
    basic_auth_users:
      prometheus: $2y$10$...                    # bcrypt hash

Unknown keys are refused so a typo cannot silently disable authentication.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml
from aiohttp import web

__all__ = ["WebConfig", "WebConfigError", "basic_auth_middleware", "load_web_config"]

_TOP_KEYS = {"tls_server_config", "basic_auth_users", "http_server_config"}
_TLS_KEYS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version"}
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_TLS_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}


class WebConfigError(Exception):
    """The web config file is unusable; the message is one line naming the file."""


@dataclass(frozen=True, slots=True)
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    users: Mapping[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash


def _mapping(value: Any, where: str, path: Path) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WebConfigError(f"{path}: {where} must be a mapping")
    return value


def _ssl_context(tls: Mapping[str, Any], path: Path) -> ssl.SSLContext:
    unknown = set(tls) - _TLS_KEYS
    if unknown:
        raise WebConfigError(
            f"{path}: unknown tls_server_config keys: {', '.join(sorted(unknown))}"
        )
    base = path.parent
    cert, key = tls.get("cert_file"), tls.get("key_file")
    if not cert or not key:
        raise WebConfigError(f"{path}: tls_server_config needs cert_file and key_file")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = _TLS_VERSIONS.get(
        str(tls.get("min_version", "TLS12")), ssl.TLSVersion.TLSv1_2
    )
    try:
        context.load_cert_chain(base / str(cert), base / str(key))
        if tls.get("client_ca_file"):
            context.load_verify_locations(base / str(tls["client_ca_file"]))
    except (OSError, ssl.SSLError) as error:
        raise WebConfigError(f"{path}: cannot load TLS files: {error}") from error
    auth = str(tls.get("client_auth_type", "NoClientCert"))
    if auth not in _CLIENT_AUTH:
        raise WebConfigError(
            f"{path}: client_auth_type {auth!r} is not one of {', '.join(_CLIENT_AUTH)}"
        )
    context.verify_mode = _CLIENT_AUTH[auth]
    return context


def load_web_config(path: Path) -> WebConfig:
    """Parse and check the file; WebConfigError with one line on any problem."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise WebConfigError(f"{path}: {str(error).splitlines()[0]}") from error
    top = _mapping(document, "the document", path)
    unknown = set(top) - _TOP_KEYS
    if unknown:
        raise WebConfigError(f"{path}: unknown keys: {', '.join(sorted(unknown))}")
    tls = _mapping(top.get("tls_server_config"), "tls_server_config", path)
    users: dict[str, bytes] = {}
    for user, hashed in _mapping(top.get("basic_auth_users"), "basic_auth_users", path).items():
        if not isinstance(hashed, str) or not hashed.startswith("$2"):
            raise WebConfigError(f"{path}: basic_auth_users.{user} is not a bcrypt hash")
        users[str(user)] = hashed.encode()
    return WebConfig(ssl_context=_ssl_context(tls, path) if tls else None, users=users)


def basic_auth_middleware(users: Mapping[str, bytes]) -> Any:
    """Require one of ``users``; good credentials are remembered (bcrypt is slow by design)."""
    verified: set[bytes] = set()

    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        header = request.headers.get("Authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                user, password = "", ""
            hashed = users.get(user)
            if hashed is not None:
                key = hashlib.sha256(
                    b"\0".join((user.encode(), password.encode(), hashed))
                ).digest()
                if key in verified or await asyncio.to_thread(
                    bcrypt.checkpw, password.encode(), hashed
                ):
                    verified.add(key)
                    response: web.StreamResponse = await handler(request)
                    return response
        return web.Response(
            status=401,
            text='{"error": "authentication required"}\n',
            content_type="application/json",
            headers={"WWW-Authenticate": 'Basic realm="podresources-exporter"'},
        )

    return middleware
