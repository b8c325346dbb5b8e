"""``--web.config.file``: TLS and basic auth, in Prometheus exporter-toolkit's format.

Every key and value of exporter-toolkit's ``docs/web-configuration.md`` is read with its
meaning and its refusals: unknown keys and values, ``client_ca_file`` without a client
auth type that verifies, header values outside the allowed ones, hashes that are not
bcrypt. Each refusal is one line naming the file and the key.

Where Python's ``ssl`` module cannot do what Go's ``crypto/tls`` does, the key is refused
with the reason rather than silently weakened:

- ``client_auth_type: RequestClientCert`` / ``RequireAnyClientCert``: OpenSSL through
  Python verifies every client certificate it asks for; it cannot accept an unverified one.
- ``curve_preferences`` with more than one curve: Python 3.11's ``ssl`` sets one curve.

One more refusal than exporter-toolkit's: ``client_allowed_sans`` without a client auth
type that verifies, which exporter-toolkit accepts and then ignores (no certificate is
asked for). With ``VerifyClientCertIfGiven`` a client without a certificate is refused
where SANs are listed (``exporter.auth``), as exporter-toolkit's handshake does.

``RequireAndVerifyClientCert`` is enforced per request (``exporter.auth``), with the TLS
layer verifying any certificate that is offered: so the kubelet's probes, which carry no
client certificate, still reach ``/healthz`` and ``/readyz``.

The file is re-read when it changes and the certificate, key and client CA files when
they change (see ``LiveWebConfig``), so rotating any of them needs no restart; an edit
that does not load keeps the last good configuration and logs why.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import ssl
import tempfile
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from exporter.go_duration import MAX_DURATION_NS, parse_go_duration_ns

__all__ = [
    "HttpSettings",
    "LiveWebConfig",
    "RateLimit",
    "TlsSettings",
    "WebConfig",
    "WebConfigError",
    "build_ssl_context",
    "normal_san",
    "parse_web_config",
    "read_web_config",
]

log = structlog.get_logger(__name__)

_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit")
_TLS_KEYS = (
    "cert",
    "key",
    "client_ca",
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "client_allowed_sans",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
    "curve_preferences",
)
_HTTP_KEYS = ("http2", "headers")
_RATE_LIMIT_KEYS = ("interval", "burst")

# exporter-toolkit's names (Go's tls.VersionTLS1x).
TLS_VERSIONS: Mapping[str, ssl.TLSVersion] = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# The client auth types exporter-toolkit knows; the value says what the TLS layer does.
# "" is its default; RequireClientCert is its backward-compatible alias.
_VERIFIES = ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
_CANNOT = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
CLIENT_AUTH_TYPES = ("", "NoClientCert", *_CANNOT, *_VERIFIES)
# Go's tls.CipherSuites() names, as OpenSSL calls them. The TLS 1.3 suites are accepted
# and, as in Go, not configurable: they map to None.
CIPHER_SUITES: Mapping[str, str | None] = {
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
CURVES: Mapping[str, str] = {
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519": "X25519",
}
# exporter-toolkit's extraHTTPHeaders: the only headers it lets a config set, and the
# values allowed where the header is an enumeration (empty: any value).
HEADERS: Mapping[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}
# bcrypt in the variants both Go's x/crypto/bcrypt and pyca/bcrypt check; cost 4-31,
# in ASCII digits: Python's \d (and int()) would take Arabic-Indic ones, which bcrypt
# refuses at the first login ("Invalid salt").
_BCRYPT = re.compile(r"\$2[aby]\$(?P<cost>[0-9]{2})\$[./A-Za-z0-9]{53}")
# What an HTTP field value may not hold (RFC 9110 5.5): CTLs other than HTAB.
_HEADER_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class WebConfigError(Exception):
    """The web config file is unusable; the message is one line naming the file and key."""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """``tls_server_config``; file paths are already joined with the config's folder."""

    cert_file: Path | None = None
    key_file: Path | None = None
    cert: str | None = None
    key: str | None = None
    client_ca_file: Path | None = None
    client_ca: str | None = None
    client_auth_type: str = "NoClientCert"
    client_allowed_sans: tuple[str, ...] | None = None
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3
    openssl_ciphers: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True
    curve: str | None = None

    @property
    def files(self) -> tuple[Path, ...]:
        """The files this reads: a change to any of them is a rotation."""
        return tuple(p for p in (self.cert_file, self.key_file, self.client_ca_file) if p)

    @property
    def client_cert_required(self) -> bool:
        return self.client_auth_type == "RequireAndVerifyClientCert"


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """``http_server_config``: ``http2`` is read but aiohttp only speaks HTTP/1.1."""

    http2: bool = True
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class RateLimit:
    """``rate_limit``: one request per ``interval_s``, bursts of ``burst``."""

    interval_s: float
    burst: int


@dataclass(frozen=True, slots=True)
class WebConfig:
    tls: TlsSettings | None = None
    http: HttpSettings = HttpSettings()
    users: Mapping[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash
    rate_limit: RateLimit | None = None


class _Reader:
    """Type-checked access to one YAML mapping; errors name the file and the key path."""

    def __init__(self, value: Any, *, where: str, source: str) -> None:
        self.where, self.source = where, source
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise self.error(where or "the file", "must be a mapping")
        self.value: dict[Any, Any] = value

    def error(self, key: str, message: str) -> WebConfigError:
        return WebConfigError(f"{self.source}: {key}: {message}")

    def key(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def refuse_unknown(self, known: tuple[str, ...]) -> None:
        unknown = sorted(str(k) for k in self.value if k not in known)
        if unknown:
            where = self.where or "the document"
            raise self.error(
                self.key(unknown[0]), f"unknown key in {where}; known: {', '.join(known)}"
            )

    def get(self, name: str, kind: type, default: Any = None) -> Any:
        value = self.value.get(name)
        if value is None:
            return default
        if kind is str and isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.error(self.key(name), f"expected {kind.__name__}, got {_shown(value)}")
        return value

    def strings(self, name: str) -> tuple[str, ...] | None:
        value = self.value.get(name)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(self.key(name), "expected a list of strings")
        return tuple(value)

    def choice(self, name: str, choices: Mapping[str, Any], default: Any) -> Any:
        value = self.get(name, str)
        if value is None:
            return default
        if value not in choices:
            raise self.error(
                self.key(name), f"unknown value {value!r}; known: {', '.join(choices)}"
            )
        return choices[value]


def _shown(value: Any) -> str:
    """A value of the wrong type, for a refusal: a scalar as written (cut), a list or
    mapping by its type alone. A password hash or inline key written as a YAML list
    or mapping must not be echoed into the log."""
    if isinstance(value, list | dict):
        return f"a {'list' if isinstance(value, list) else 'mapping'} of {len(value)}"
    return f"{value!r:.60}"


def _path(reader: _Reader, name: str, base: Path) -> Path | None:
    value = reader.get(name, str)
    return base / value if value else None


def _parse_tls(reader: _Reader, base: Path) -> TlsSettings | None:
    """None where nothing that enables TLS is set (plain HTTP, as in exporter-toolkit);
    every value is checked either way, as Go's strict unmarshalling does."""
    reader.refuse_unknown(_TLS_KEYS)
    cert_file, key_file = _path(reader, "cert_file", base), _path(reader, "key_file", base)
    cert, key = reader.get("cert", str), reader.get("key", str)
    client_ca_file, client_ca = _path(reader, "client_ca_file", base), reader.get("client_ca", str)
    auth = reader.get("client_auth_type", str, "")
    if auth not in CLIENT_AUTH_TYPES:
        raise reader.error(
            reader.key("client_auth_type"),
            f"unknown value {auth!r}; known: {', '.join(filter(None, CLIENT_AUTH_TYPES))}",
        )
    minimum = reader.choice("min_version", TLS_VERSIONS, ssl.TLSVersion.TLSv1_2)
    maximum = reader.choice("max_version", TLS_VERSIONS, ssl.TLSVersion.TLSv1_3)
    ciphers: list[str] = []
    listed = reader.strings("cipher_suites") or ()
    for name in listed:
        if name not in CIPHER_SUITES:
            raise reader.error(reader.key("cipher_suites"), f"unknown cipher: {name}")
        if (openssl_name := CIPHER_SUITES[name]) is not None:
            ciphers.append(openssl_name)
    if listed and not ciphers:
        # TLS 1.3 suites only: Go enables no TLS 1.0-1.2 suite then, so those handshakes
        # fail; here TLS 1.2 would fall back to OpenSSL's defaults. TLS 1.3 only, as there.
        if maximum < ssl.TLSVersion.TLSv1_3:
            raise reader.error(
                reader.key("cipher_suites"),
                "lists TLS 1.3 suites only, which max_version leaves no handshake to use",
            )
        minimum = max(minimum, ssl.TLSVersion.TLSv1_3)
    curves = reader.strings("curve_preferences") or ()
    for name in curves:
        if name not in CURVES:
            raise reader.error(reader.key("curve_preferences"), f"unknown curve: {name}")
    sans = reader.strings("client_allowed_sans")
    if sans is not None and auth not in _VERIFIES:
        # exporter-toolkit lets this load and then never asks for a certificate: the
        # list that was meant to restrict clients restricts nothing. Refused here.
        raise reader.error(
            reader.key("client_allowed_sans"),
            "checks the SANs of a verified client certificate, but none is asked for: "
            f"set client_auth_type to one of {', '.join(_VERIFIES)}",
        )
    prefer_server = reader.get("prefer_server_cipher_suites", bool, True)
    if not any((cert_file, key_file, cert, key, client_ca_file, client_ca, auth)):
        return None
    for file_key, text_key, file_value, text_value in (
        ("cert_file", "cert", cert_file, cert),
        ("key_file", "key", key_file, key),
    ):
        if file_value is None and not text_value:
            raise reader.error(reader.key(file_key), f"missing one of {text_key} or {file_key}")
        if file_value is not None and text_value:
            raise reader.error(reader.key(text_key), f"give {text_key} or {file_key}, not both")
    if auth in _CANNOT:
        raise reader.error(
            reader.key("client_auth_type"),
            f"{auth} accepts client certificates without verifying them, which Python's ssl "
            "cannot do; use VerifyClientCertIfGiven or RequireAndVerifyClientCert",
        )
    if (client_ca_file or client_ca) and auth not in _VERIFIES:
        raise reader.error(
            reader.key("client_auth_type"),
            "client CA's have been configured without a client auth policy that verifies "
            f"(set one of {', '.join(_VERIFIES)})",
        )
    if minimum > maximum:
        raise reader.error(reader.key("min_version"), "is above max_version")
    if len(curves) > 1:
        raise reader.error(
            reader.key("curve_preferences"),
            "Python's ssl can restrict the handshake to one curve only; list one",
        )
    return TlsSettings(
        cert_file=cert_file,
        key_file=key_file,
        cert=cert,
        key=key,
        client_ca_file=client_ca_file,
        client_ca=client_ca,
        client_auth_type=auth or "NoClientCert",
        client_allowed_sans=None if sans is None else tuple(normal_san(s) for s in sans),
        min_version=minimum,
        max_version=maximum,
        openssl_ciphers=tuple(ciphers),
        prefer_server_cipher_suites=prefer_server,
        curve=CURVES[curves[0]] if curves else None,
    )


def normal_san(value: str) -> str:
    """IP addresses compared in one spelling (Go prints them compressed, OpenSSL does not)."""
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        return value


def _parse_http(reader: _Reader) -> HttpSettings:
    reader.refuse_unknown(_HTTP_KEYS)
    headers = _Reader(
        reader.value.get("headers"), where=reader.key("headers"), source=reader.source
    )
    pairs: list[tuple[str, str]] = []
    for name, value in headers.value.items():
        allowed = HEADERS.get(str(name))
        if allowed is None:
            raise headers.error(headers.key(str(name)), "HTTP header can not be configured")
        value = headers.get(str(name), str, "")
        if allowed and value not in allowed:
            raise headers.error(
                headers.key(str(name)), f"invalid value {value!r}; expected one of {allowed}"
            )
        if _HEADER_CONTROL.search(value):
            # aiohttp refuses to send such a value: every answer, the probes' too, failed.
            raise headers.error(headers.key(str(name)), "control characters in a header value")
        if value:  # blank means unset
            pairs.append((str(name), value))
    return HttpSettings(http2=reader.get("http2", bool, True), headers=tuple(pairs))


def _parse_rate_limit(reader: _Reader) -> RateLimit | None:
    reader.refuse_unknown(_RATE_LIMIT_KEYS)
    raw = reader.value.get("interval", 0)
    if isinstance(raw, int) and not isinstance(raw, bool):
        if abs(raw) > MAX_DURATION_NS:
            raise reader.error(
                reader.key("interval"), "out of range: a Go duration is at most 2**63-1 ns"
            )
        # yaml.v2 sets a time.Duration from a bare integer as it is: nanoseconds.
        interval_s = raw * 1e-9
    elif isinstance(raw, str):
        try:
            # Exactly what Go takes: YAML has already dropped a plain scalar's blanks,
            # and Go's time.ParseDuration refuses those left inside quotes.
            interval_s = parse_go_duration_ns(raw) / 1e9
        except ValueError as error:
            raise reader.error(reader.key("interval"), str(error)) from None
    else:
        raise reader.error(reader.key("interval"), f"expected a duration, got {raw!r:.60}")
    burst = reader.get("burst", int, 0)
    if interval_s < 0:
        # Go's rate.Every makes a negative interval unlimited, as 0: refused here, so a
        # limit asked for is not dropped with no word (the file would read as empty).
        raise reader.error(
            reader.key("interval"), f"must not be negative (0 turns the limit off), got {raw!r:.60}"
        )
    if interval_s == 0:
        return None  # 0 disables the limiter
    if burst < 1:
        # Go's rate.Limiter with a burst of 0 admits no request at all: every scrape 429.
        raise reader.error(reader.key("burst"), f"must be at least 1 with an interval, got {burst}")
    return RateLimit(interval_s=interval_s, burst=burst)


def bcrypt_cost(hashed: str) -> int | None:
    """The cost of a well-formed bcrypt hash that both Go and pyca/bcrypt accept, else None."""
    match = _BCRYPT.fullmatch(hashed)  # "$" would pass a final newline
    if match is None or not 4 <= int(match["cost"]) <= 31:
        return None
    return int(match["cost"])


def parse_users(value: Any, *, where: str, source: str) -> dict[str, bytes]:
    """``basic_auth_users``: every hash checked now, so a bad one cannot fail a login later."""
    reader = _Reader(value, where=where, source=source)
    users: dict[str, bytes] = {}
    for user, hashed in reader.value.items():
        if not isinstance(hashed, str) or bcrypt_cost(hashed) is None:
            raise reader.error(
                reader.key(str(user)),
                "not a bcrypt hash ($2a$, $2b$ or $2y$, cost 4-31, 60 characters)",
            )
        users[str(user)] = hashed.encode()
    return users


def parse_web_config(text: str, *, path: Path, keys: tuple[str, ...] = _TOP_KEYS) -> WebConfig:
    """The file's text, checked; WebConfigError with one line on any problem.

    ``keys`` narrows the top-level keys: ``("basic_auth_users",)`` for a users-only file.
    """
    import yaml  # here: PyYAML costs ~0.9 MiB of RSS, and most nodes have no web config

    class TextKeyLoader(yaml.SafeLoader):
        """Mapping keys as written, as exporter-toolkit's Go YAML gives its map[string]
        keys: users named 007, on or null keep those names (not 7, True, None)."""

        def compose_mapping_node(self, anchor: Any) -> Any:
            # Each key as written, once: tagged text, and refused when it repeats.
            # PyYAML keeps the last of two equal keys: a second, empty basic_auth_users
            # or tls_server_config would switch auth or TLS off unseen. exporter-
            # toolkit's strict Go YAML refuses duplicates. Checked as written, before
            # merge keys (<<) copy pairs in, where overriding a merged key is the point.
            node = super().compose_mapping_node(anchor)
            seen: set[str] = set()
            for key, _ in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    if key.value in seen:
                        raise yaml.composer.ComposerError(
                            None, None, f"{key.value!r} appears twice", key.start_mark
                        )
                    seen.add(key.value)
                    key.tag = "tag:yaml.org,2002:str"
            return node

    try:
        document = yaml.load(text, Loader=TextKeyLoader)  # a SafeLoader: no tags run code
    except yaml.YAMLError as error:
        raise WebConfigError(f"{path}: {_yaml_problem(error)}") from None
    top = _Reader(document, where="", source=str(path))
    top.refuse_unknown(keys)
    source = str(path)
    tls = _parse_tls(
        _Reader(top.value.get("tls_server_config"), where="tls_server_config", source=source),
        path.parent,
    )
    http = _parse_http(
        _Reader(top.value.get("http_server_config"), where="http_server_config", source=source)
    )
    rate_limit = _parse_rate_limit(
        _Reader(top.value.get("rate_limit"), where="rate_limit", source=source)
    )
    users = parse_users(top.value.get("basic_auth_users"), where="basic_auth_users", source=source)
    return WebConfig(tls=tls, http=http, users=users, rate_limit=rate_limit)


def _yaml_problem(error: Exception) -> str:
    """What is wrong and where, without the text around it: PyYAML quotes the line,
    which in this file may hold a password or a key."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None)
    if mark is None or problem is None:
        return f"not YAML ({type(error).__name__})"
    context = getattr(error, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}"
    return f"{where}: {context + ': ' if context else ''}{problem}"


def read_web_config(path: Path, *, keys: tuple[str, ...] = _TOP_KEYS) -> WebConfig:
    """Read and parse ``path``; with TLS on, its files are loaded once to check them."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise WebConfigError(f"{path}: cannot read: {error}") from None
    try:
        config = parse_web_config(text, path=path, keys=keys)
        if config.tls is not None:
            build_ssl_context(config.tls, source=path)
    except (ValueError, OverflowError, RecursionError) as error:
        # What the checks above missed (a NUL in a path, a lone surrogate in inline PEM,
        # nesting deeper than the parser's stack): a refusal, not a traceback at start-up
        # or, on a reload, an exception out of every answer, the probes' included.
        reason = " ".join(str(error).split())[:120]  # one line, as every refusal here
        raise WebConfigError(f"{path}: unusable: {type(error).__name__}: {reason}") from None
    return config


def _load_pair(context: ssl.SSLContext, tls: TlsSettings, source: Path) -> None:
    keys = "cert_file/key_file" if tls.cert_file and tls.key_file else "cert/key"
    # Inline PEM goes through a private temporary file: OpenSSL loads keys from files only.
    with _scratch_dir(tls, source, keys) as scratch:
        cert_path, key_path = tls.cert_file, tls.key_file
        try:
            if cert_path is None:
                cert_path = Path(scratch, "cert.pem")
                cert_path.write_text(tls.cert or "")
            if key_path is None:
                key_path = Path(scratch, "key.pem")
                with os.fdopen(os.open(key_path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as out:
                    out.write(tls.key or "")
        except OSError as error:  # a full or read-only temporary directory
            raise WebConfigError(
                f"{source}: tls_server_config.{keys}: cannot write the inline PEM to a "
                f"temporary file: {error}"
            ) from None
        try:
            context.load_cert_chain(cert_path, key_path, password=_no_passphrase)
        except _EncryptedKey:
            raise WebConfigError(
                f"{source}: tls_server_config.{keys}: the private key is encrypted; "
                "give it unencrypted, as exporter-toolkit reads it"
            ) from None
        except (OSError, ssl.SSLError) as error:
            where = f" ({tls.cert_file}, {tls.key_file})" if keys == "cert_file/key_file" else ""
            raise WebConfigError(
                f"{source}: tls_server_config.{keys}{where}: {_reason(error)}"
            ) from None


def _scratch_dir(
    tls: TlsSettings, source: Path, keys: str
) -> contextlib.AbstractContextManager[str]:
    """A private temporary folder for inline PEM; none needed (and none made) for files.
    Without a writable one (a read-only root and no emptyDir at /tmp) the refusal says
    so, where tempfile would raise at start-up or, on a reload, out of every answer."""
    if tls.cert_file is not None and tls.key_file is not None:
        return contextlib.nullcontext("")
    try:
        return tempfile.TemporaryDirectory(prefix="webconfig-")
    except OSError as error:
        raise WebConfigError(
            f"{source}: tls_server_config.{keys}: inline PEM needs a writable temporary "
            f"directory (TMPDIR, else /tmp): {error}"
        ) from None


class _EncryptedKey(Exception):
    pass


def _no_passphrase() -> bytes:
    """Asked for only by an encrypted key: without it OpenSSL prompts on the terminal (or
    reads stdin), blocking the event loop on a reload."""
    raise _EncryptedKey


# OpenSSL's words for the failures a person makes with certificate files, said plainly;
# the code is kept for a search.
_SSL_REASONS = {
    "KEY_VALUES_MISMATCH": "the private key is not the certificate's",
}


def _reason(
    error: OSError | ssl.SSLError, *, pem: str = "a PEM certificate and private key"
) -> str:
    """What went wrong, in words; ``pem``: what the file should have held."""
    if isinstance(error, ssl.SSLError):
        # Not every SSLError carries OpenSSL's fields: set_ciphers raises one with only a
        # message ("No cipher can be selected."), which has no ``reason`` at all.
        reason = getattr(error, "reason", None)
        if reason is None and "PEM lib" in str(error):
            # What a file that holds no PEM certificate or key at all gives.
            return f"not {pem} (OpenSSL: PEM lib)"
        plain = _SSL_REASONS.get(reason or "")
        if plain is not None:
            return f"{plain} (OpenSSL: {reason})"
        return reason or str(error)
    return error.strerror or str(error)


def build_ssl_context(tls: TlsSettings, *, source: Path) -> ssl.SSLContext:
    """A server context from the settings, reading the files now."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with warnings.catch_warnings():  # TLS 1.0/1.1 are deprecated, and allowed if asked for
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = tls.min_version
        context.maximum_version = tls.max_version
    if tls.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    if tls.openssl_ciphers:
        try:
            context.set_ciphers(":".join(tls.openssl_ciphers))
        except ssl.SSLError as error:
            raise WebConfigError(
                f"{source}: tls_server_config.cipher_suites: none of them is available in "
                f"this OpenSSL ({_reason(error)})"
            ) from None
    if tls.curve is not None:
        context.set_ecdh_curve(tls.curve)
    _load_pair(context, tls, source)
    if tls.client_auth_type in _VERIFIES:
        # Verify any certificate offered; RequireAndVerifyClientCert's "required" is checked
        # per request so that the probes, which have none, are let through.
        context.verify_mode = ssl.CERT_OPTIONAL
        try:
            if tls.client_ca_file is not None:
                context.load_verify_locations(cafile=tls.client_ca_file)
            elif tls.client_ca:
                context.load_verify_locations(cadata=tls.client_ca)
            else:
                context.load_default_certs(ssl.Purpose.CLIENT_AUTH)  # Go: the host's roots
        except (OSError, ssl.SSLError) as error:
            where = (
                "client_ca"
                if tls.client_ca_file is None
                else f"client_ca_file ({tls.client_ca_file})"
            )
            reason = _reason(error, pem="PEM certificates")
            raise WebConfigError(f"{source}: tls_server_config.{where}: {reason}") from None
    return context


def _signature(paths: tuple[Path, ...]) -> tuple[object, ...]:
    """What changes when a file is replaced: a rename (Kubernetes secret), a write."""
    parts: list[object] = []
    for path in paths:
        try:
            stat = path.stat()
        except OSError as error:
            parts.append((str(path), error.errno))
            continue
        parts.append((str(path), stat.st_ino, stat.st_dev, stat.st_mtime_ns, stat.st_size))
    return tuple(parts)


class _ReloadingContext(ssl.SSLContext):
    """The listener's context: each connection is wrapped by the current context."""

    current: Callable[[], ssl.SSLContext]

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        # asyncio creates each connection's SSLObject here: every setting of the current
        # config (certificate, CA, versions, ciphers, client auth) applies to it.
        return self.current().wrap_bio(
            incoming,
            outgoing,
            server_side=server_side,
            server_hostname=server_hostname,
            session=session,
        )


class LiveWebConfig:
    """A web config file kept current: re-read when it or its TLS files change.

    ``current()`` costs a few ``stat`` calls; it is called per request and per TLS
    connection, as exporter-toolkit re-reads per request and per handshake. An edit that
    does not load keeps the last good config and is logged once; the files it names are
    watched with the others, so one that comes later is a change. Switching TLS on or off
    needs a restart (the listener is either TLS or not), so such an edit is refused too;
    so is one that removes every user (exporter-toolkit would serve everyone from then on,
    silently).
    """

    def __init__(self, path: Path, *, users_only: bool = False) -> None:
        self.path = path
        self._users_only = users_only
        self._keys = ("basic_auth_users",) if users_only else _TOP_KEYS
        self._config = self._read()
        if self._config == WebConfig():  # a users-only file with no users is refused above
            # exporter-toolkit takes an empty file as no file. Said aloud here: a Secret
            # mounted without its key, or a template that rendered nothing, would
            # otherwise serve plain HTTP to anyone with nothing in the logs but tls=false.
            log.warning(
                "web_config_empty",
                path=str(path),
                hint="no TLS, no basic auth, no headers: served as without --web.config.file",
            )
        self._context = self._build(self._config)
        # The files named by an edit that failed: watched too until one loads, so that
        # the certificate it waits for, arriving later, is picked up.
        self._pending: tuple[Path, ...] = ()
        self._seen = self._signature_of(self._config)
        self._failed: tuple[object, ...] | None = None

    def _read(self) -> WebConfig:
        config = read_web_config(self.path, keys=self._keys)
        if self._users_only and not config.users:
            # Users that replace the web config's for /debug: none would mean no check
            # at all, /debug open while /metrics is locked (an empty Secret, a template).
            raise WebConfigError(
                f"{self.path}: basic_auth_users: no users; name at least one, or /debug "
                "would be open to anyone"
            )
        costs = sorted({bcrypt_cost(hashed.decode()) or 0 for hashed in config.users.values()})
        if len(costs) > 1:
            # An unknown user is checked at the highest cost; a user whose hash is cheaper
            # answers sooner, which tells user names apart.
            log.warning("basic_auth_mixed_costs", path=str(self.path), costs=costs)
        return config

    def _signature_of(self, config: WebConfig) -> tuple[object, ...]:
        files = config.tls.files if config.tls else ()
        return _signature((self.path, *files, *self._pending))

    def _files_named(self) -> tuple[Path, ...]:
        """The TLS files the file names now, whether or not they load; none where it
        does not parse."""
        try:
            text = self.path.read_text(encoding="utf-8")
            tls = parse_web_config(text, path=self.path, keys=self._keys).tls
        except (OSError, UnicodeDecodeError, WebConfigError, ValueError, RecursionError):
            return ()
        return tls.files if tls is not None else ()

    def _build(self, config: WebConfig) -> ssl.SSLContext | None:
        if config.tls is None:
            return None
        return build_ssl_context(config.tls, source=self.path)

    def current(self) -> WebConfig:
        self._refresh()
        return self._config

    def _refresh(self) -> None:
        seen = self._signature_of(self._config)
        if seen == self._seen:
            return
        if seen == self._failed:
            return  # already logged; keep serving the last good config
        # Stat what the edit names before reading it: a certificate that is missing now
        # (a ConfigMap updated before the Secret beside it) changes this signature when
        # it comes, and the edit is read again then.
        self._pending = self._files_named()
        seen = self._signature_of(self._config)
        try:
            config = self._read()
            if (config.tls is None) != (self._config.tls is None):
                raise WebConfigError(
                    f"{self.path}: tls_server_config: turning TLS on or off needs a restart"
                )
            if self._config.users and not config.users:
                # An emptied file (a Secret's key dropped, a template gone wrong) would
                # open /metrics to anyone without a word: that takes a restart too.
                raise WebConfigError(
                    f"{self.path}: basic_auth_users: turning basic auth off needs a restart"
                )
            context = self._build(config)
        except WebConfigError as error:
            self._failed = seen
            log.error("web_config_reload_failed", error=str(error), kept="last good config")
            return
        self._config, self._context, self._pending = config, context, ()
        self._seen, self._failed = self._signature_of(config), None
        log.info("web_config_reloaded", path=str(self.path), tls=config.tls is not None)

    def ssl_context(self) -> ssl.SSLContext | None:
        """For the listener: None without TLS, else a context that follows the file."""
        if self._context is None:
            return None
        listener = _ReloadingContext(ssl.PROTOCOL_TLS_SERVER)

        def current() -> ssl.SSLContext:
            self._refresh()
            assert self._context is not None  # TLS cannot be switched off by a reload
            return self._context

        listener.current = current
        return listener
