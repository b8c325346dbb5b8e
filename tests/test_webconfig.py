"""--web.config.file: every exporter-toolkit key, its refusals, and reloads, on real TLS."""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp
import bcrypt
import pytest
from pki import Pki, client_context, issue, make_pki
from structlog.testing import capture_logs
from webserving import basic, served

from exporter.webconfig import (
    CIPHER_SUITES,
    HttpSettings,
    LiveWebConfig,
    RateLimit,
    TlsSettings,
    WebConfig,
    WebConfigError,
    build_ssl_context,
    parse_web_config,
    read_web_config,
)

# Salted alike in every process: the hash is in test IDs, which pytest-xdist's workers
# must collect identically.
HASH = bcrypt.hashpw(b"s3cret", b"$2b$04$B.Na5kPESyQruLc7GIuuD.").decode()
# Cost 05 in Arabic-Indic digits: Python's \d and int() take them; Go's bcrypt and
# pyca/bcrypt do not (checkpw: "Invalid salt").
NON_ASCII_COST = HASH.replace("$04$", "$\u0660\u0665$")
TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def folder(tmp_path: Path, pki: Pki) -> Path:
    """A config folder holding copies of the server's and the CA's files."""
    for name in ("server.crt", "server.key", "ca.crt"):
        shutil.copy(pki.folder / name, tmp_path / name)
    return tmp_path


def _parse(text: str) -> WebConfig:
    return parse_web_config(text, path=Path("/etc/web/web.yml"))


class TestKeys:
    def test_every_key(self) -> None:
        """Every documented key is read, with file paths relative to the config's folder."""
        text = f"""
tls_server_config:
  cert_file: tls.crt
  key_file: tls.key
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: ca.crt
  client_allowed_sans: [prometheus.monitoring.svc, "2001:DB8:0:0:0:0:0:1"]
  min_version: TLS12
  max_version: TLS13
  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]
  prefer_server_cipher_suites: false
  curve_preferences: [CurveP384]
http_server_config:
  http2: false
  headers:
    Content-Security-Policy: default-src 'none'
    X-Frame-Options: deny
    X-Content-Type-Options: nosniff
    X-XSS-Protection: "0"
    Strict-Transport-Security: max-age=31536000
    Content-Security-Policy-Report-Only-Not: ""
rate_limit:
  interval: 1m30s
  burst: 20
basic_auth_users:
  alice: {HASH}
"""
        with pytest.raises(WebConfigError, match="Content-Security-Policy-Report-Only-Not"):
            _parse(text)
        config = _parse(text.replace('    Content-Security-Policy-Report-Only-Not: ""\n', ""))
        expected = WebConfig(
            tls=TlsSettings(
                cert_file=Path("/etc/web/tls.crt"),
                key_file=Path("/etc/web/tls.key"),
                client_auth_type="RequireAndVerifyClientCert",
                client_ca_file=Path("/etc/web/ca.crt"),
                client_allowed_sans=("prometheus.monitoring.svc", "2001:db8::1"),
                min_version=ssl.TLSVersion.TLSv1_2,
                max_version=ssl.TLSVersion.TLSv1_3,
                openssl_ciphers=("ECDHE-ECDSA-AES128-GCM-SHA256",),
                prefer_server_cipher_suites=False,
                curve="secp384r1",
            ),
            http=HttpSettings(
                http2=False,
                headers=(
                    ("Content-Security-Policy", "default-src 'none'"),
                    ("X-Frame-Options", "deny"),
                    ("X-Content-Type-Options", "nosniff"),
                    ("X-XSS-Protection", "0"),
                    ("Strict-Transport-Security", "max-age=31536000"),
                ),
            ),
            rate_limit=RateLimit(interval_s=90.0, burst=20),
            users={"alice": HASH.encode()},
        )
        assert expected == config

    @pytest.mark.parametrize(
        ("name", "version"),
        [
            ("TLS10", ssl.TLSVersion.TLSv1),
            ("TLS11", ssl.TLSVersion.TLSv1_1),
            ("TLS12", ssl.TLSVersion.TLSv1_2),
            ("TLS13", ssl.TLSVersion.TLSv1_3),
        ],
    )
    def test_tls_version_names(self, name: str, version: ssl.TLSVersion) -> None:
        """exporter-toolkit's four version names, for both bounds."""
        config = _parse(f"{TLS}  min_version: {name}\n  max_version: {name}\n")
        assert config.tls is not None
        assert (version, version) == (config.tls.min_version, config.tls.max_version)

    def test_defaults(self) -> None:
        """No TLS keys: plain HTTP; TLS keys alone: TLS 1.2-1.3, no client certificates."""
        assert WebConfig() == _parse("")
        assert WebConfig() == _parse("tls_server_config: {}\nhttp_server_config:\n")
        assert (
            TlsSettings(cert_file=Path("/etc/web/server.crt"), key_file=Path("/etc/web/server.key"))
            == _parse(TLS).tls
        )

    def test_user_names_stay_as_written(self) -> None:
        """As exporter-toolkit reads them: users 007, on, yes and null are those names
        (YAML 1.1 made them 7, True, True and None: they could never log in, and on and
        yes overwrote each other)."""
        names = ("007", "on", "yes", "null", "1e3")
        config = _parse("basic_auth_users:\n" + "".join(f"  {n}: {HASH}\n" for n in names))
        assert sorted(config.users) == sorted(names)

    def test_blank_header_is_unset(self) -> None:
        """A blank header value means the header is not sent."""
        config = _parse('http_server_config:\n  headers:\n    X-XSS-Protection: ""\n')
        assert () == config.http.headers

    def test_rate_limit_zero_interval_disables(self) -> None:
        """interval 0 (or a bare 0) turns the limiter off."""
        assert _parse("rate_limit:\n  interval: 0s\n  burst: 5\n").rate_limit is None
        assert _parse("rate_limit:\n  interval: 0\n").rate_limit is None
        assert (
            RateLimit(interval_s=1.0, burst=2)
            == _parse("rate_limit:\n  interval: 1000000000\n  burst: 2\n").rate_limit
        )

    @pytest.mark.parametrize(
        ("text", "seconds"),
        [
            ("1s", 1.0),
            ("1m30s", 90.0),
            ("250ms", 0.25),
            ("1.5h", 5400.0),
            ('"1h"', 3600.0),
            ("1μs", 1e-6),  # U+03BC, which Go takes beside U+00B5
            ("9223372036854775807ns", (2**63 - 1) / 1e9),  # Go's longest: floats refused it
        ],
    )
    def test_go_durations(self, text: str, seconds: float) -> None:
        """interval is a time.Duration of exporter-toolkit: Go's time.ParseDuration."""
        config = _parse(f"rate_limit:\n  interval: {text}\n  burst: 1\n")
        assert RateLimit(interval_s=seconds, burst=1) == config.rate_limit


REFUSALS = [
    ("unknown: 1\n", "web.yml: unknown: unknown key in the document"),
    (f"{TLS}  min_versions: TLS12\n", "tls_server_config.min_versions: unknown key"),
    ("http_server_config:\n  http3: true\n", "http_server_config.http3: unknown key"),
    ("rate_limit:\n  every: 1s\n", "rate_limit.every: unknown key"),
    (f"{TLS}  min_version: tls13\n", "min_version: unknown value 'tls13'"),
    (f"{TLS}  min_version: TLS1.3\n", "min_version: unknown value 'TLS1.3'"),
    (f"{TLS}  max_version: TLS14\n", "max_version: unknown value 'TLS14'"),
    (f"{TLS}  min_version: TLS13\n  max_version: TLS12\n", "min_version: is above max_version"),
    (f"{TLS}  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n", "unknown cipher: TLS_RSA_WITH_RC4"),
    (f"{TLS}  cipher_suites: TLS_AES_128_GCM_SHA256\n", "cipher_suites: expected a list"),
    (f"{TLS}  curve_preferences: [P256]\n", "curve_preferences: unknown curve: P256"),
    (f"{TLS}  curve_preferences: [X25519, CurveP256]\n", "curve_preferences: Python's ssl"),
    (f"{TLS}  client_auth_type: RequireCert\n", "client_auth_type: unknown value"),
    (f"{TLS}  client_auth_type: RequestClientCert\n", "without verifying them"),
    (f"{TLS}  client_auth_type: RequireAnyClientCert\n", "without verifying them"),
    (f"{TLS}  client_ca_file: ca.crt\n", "client CA's have been configured without"),
    # exporter-toolkit loads these and asks for no certificate: the list restricts nothing.
    (f"{TLS}  client_allowed_sans: [prometheus]\n", "client_allowed_sans: checks the SANs"),
    (
        f"{TLS}  client_auth_type: NoClientCert\n  client_allowed_sans: [prometheus]\n",
        "set client_auth_type to one of VerifyClientCertIfGiven, RequireAndVerifyClientCert",
    ),
    (
        f"{TLS}  client_ca_file: ca.crt\n  client_auth_type: NoClientCert\n",
        "client CA's have been configured without",
    ),
    ("tls_server_config:\n  cert_file: server.crt\n", "key_file: missing one of key or key_file"),
    ("tls_server_config:\n  key_file: server.key\n", "cert_file: missing one of cert or cert_"),
    (f"{TLS}  cert: x\n", "tls_server_config.cert: give cert or cert_file, not both"),
    (f"{TLS}  prefer_server_cipher_suites: maybe\n", "prefer_server_cipher_suites: expected bool"),
    ("http_server_config:\n  headers:\n    Server: x\n", "headers.Server: HTTP header can not"),
    ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n", "X-Frame-Options: invalid"),
    (
        "http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n",
        "X-Content-Type-Options: invalid",
    ),
    ("http_server_config:\n  http2: yes please\n", "http_server_config.http2: expected bool"),
    ("rate_limit:\n  interval: soon\n", "rate_limit.interval: invalid duration 'soon'"),
    ("rate_limit:\n  interval: 1s\n  burst: many\n", "rate_limit.burst: expected int"),
    ("basic_auth_users:\n  a: plain\n", "basic_auth_users.a: not a bcrypt hash"),
    (f"basic_auth_users:\n  a: '{HASH[:-1]}'\n", "basic_auth_users.a: not a bcrypt hash"),
    (f"basic_auth_users:\n  a: '{HASH.replace('$04$', '$99$')}'\n", "a: not a bcrypt hash"),
    (f"basic_auth_users:\n  a: '{HASH.replace('$2b$', '$2x$')}'\n", "a: not a bcrypt hash"),
    (f"basic_auth_users:\n  a: '{NON_ASCII_COST}'\n", "basic_auth_users.a: not a bcrypt hash"),
    ("basic_auth_users:\n  a: 12\n", "basic_auth_users.a: not a bcrypt hash"),
    ("basic_auth_users: [a, b]\n", "basic_auth_users: must be a mapping"),
    ("- a\n", "web.yml: the file: must be a mapping"),
    # A burst of 0 admits nothing (Go's rate.Limiter): every scrape would be 429.
    ("rate_limit:\n  interval: 1s\n", "rate_limit.burst: must be at least 1 with an interval"),
    ("rate_limit:\n  interval: 1s\n  burst: -1\n", "rate_limit.burst: must be at least 1"),
    ("rate_limit:\n  interval: -1s\n  burst: 0\n", "rate_limit.interval: must not be negative"),
    ("rate_limit:\n  interval: -5\n  burst: 3\n", "rate_limit.interval: must not be negative"),
    # PyYAML keeps the last of two equal keys; exporter-toolkit's strict YAML refuses them.
    (f"{TLS}tls_server_config: {{}}\n", "line 4, column 1: 'tls_server_config' appears twice"),
    ("basic_auth_users:\n  a: x\nbasic_auth_users:\n", "'basic_auth_users' appears twice"),
    (f"basic_auth_users:\n  a: '{HASH}'\n  a: '{HASH}'\n", "line 3, column 3: 'a' appears twice"),
    (f"{TLS}  key_file: other.key\n", "'key_file' appears twice"),
    ("[unclosed", "web.yml: line 1, column 10: while parsing a flow sequence: expected"),
    # client_auth_type turns TLS on as in exporter-toolkit: alone it is not plain HTTP
    # (where no certificate would be asked for), it is TLS without a certificate.
    (
        "tls_server_config:\n  client_auth_type: RequireAndVerifyClientCert\n",
        "cert_file: missing one of cert or cert_file",
    ),
    (f"{TLS}  client_ca: x\n", "client CA's have been configured without"),
    (f"{TLS}  client_allowed_sans: []\n", "client_allowed_sans: checks the SANs"),
    ("rate_limit:\n  interval: 1s x 2s\n  burst: 1\n", "rate_limit.interval: invalid duration"),
    ("rate_limit:\n  interval: 1s\n  burst: true\n", "rate_limit.burst: expected int"),
    # aiohttp refuses to send such a value: every answer would fail, the probes' too.
    (
        'http_server_config:\n  headers:\n    X-XSS-Protection: "1\\r\\nSet-Cookie: a=b"\n',
        "headers.X-XSS-Protection: control characters",
    ),
    # Past Go's time.Duration (int64 nanoseconds): Go refuses these too.
    ("rate_limit:\n  interval: 3000000h\n  burst: 1\n", "rate_limit.interval: invalid duration"),
    (f"rate_limit:\n  interval: 1{'0' * 400}\n  burst: 1\n", "rate_limit.interval: out of range"),
    # Go's time.ParseDuration refuses what Python's \d, float() and str.strip() took.
    ("rate_limit:\n  interval: \u0661s\n  burst: 1\n", "rate_limit.interval: invalid duration"),
    ("rate_limit:\n  interval: --1s\n  burst: 1\n", "rate_limit.interval: invalid duration"),
    ('rate_limit:\n  interval: " 1s"\n  burst: 1\n', "rate_limit.interval: invalid duration"),
    ("rate_limit:\n  interval: 1d\n  burst: 1\n", "interval: invalid duration '1d': unknown unit"),
    # "$" matches before a final newline, which a block scalar (|) leaves: no password
    # could ever match that hash.
    (f"basic_auth_users:\n  a: |\n    {HASH}\n", "basic_auth_users.a: not a bcrypt hash"),
]


@pytest.mark.parametrize(
    ("text", "users"),
    [
        # A merged key overridden: what merge keys are for.
        (
            f"basic_auth_users:\n  <<: {{alice: '{HASH}', bob: '{HASH}'}}\n  alice: '{HASH}'\n",
            ["alice", "bob"],
        ),
        # Two merge keys in one mapping, each a map merged in: "<<" is no name.
        (
            f"basic_auth_users:\n  <<: {{alice: '{HASH}'}}\n  <<: {{bob: '{HASH}'}}\n",
            ["alice", "bob"],
        ),
        # The same name at two levels.
        (f"basic_auth_users:\n  basic_auth_users: '{HASH}'\n", ["basic_auth_users"]),
        # An anchor with merges of its own, defined in a merge and used again.
        (
            f"basic_auth_users:\n  <<: &users\n    <<: {{alice: '{HASH}'}}\n    alice: '{HASH}'\n"
            f"rate_limit:\n  interval: 1s\n  burst: 1\nhttp_server_config:\n  headers: {{}}\n",
            ["alice"],
        ),
        # Keys equal only as numbers are two names, as Go's map[string] has them.
        (f"basic_auth_users:\n  1: '{HASH}'\n  '01': '{HASH}'\n", ["01", "1"]),
    ],
    ids=["merge-override", "two-merge-keys", "same-name-nested", "anchor-in-merge", "1-and-01"],
)
def test_equal_keys_that_are_not_duplicates_are_accepted(text: str, users: list[str]) -> None:
    """Only a key given twice in one mapping, as written, is refused."""
    assert users == sorted(_parse(text).users)


def test_an_anchor_merged_in_and_used_again_is_no_duplicate() -> None:
    """PyYAML rewrites a merge source in place: an anchor with a merge of its own,
    defined in a merge and aliased later, holds its merged key twice by then. Keys are
    checked as written, so the file is judged on its keys (unknown here), not refused
    for a duplicate it does not have."""
    with pytest.raises(WebConfigError, match="a: unknown key"):
        _parse("a:\n  <<: &h\n    <<: {k: 1}\n    k: 2\nb: *h\n")


@pytest.mark.usefixtures("tempfile_in_memory")  # serve() runs --demo: its node's tree
class TestRefusals:
    def test_a_yaml_error_does_not_quote_the_file(self) -> None:
        """PyYAML's message quotes the broken line, which here may be a password: the
        refusal says what and where only."""
        with pytest.raises(WebConfigError) as caught:
            _parse("basic_auth_users:\n  bob: [SuperSecretPlain123\n")
        assert "SuperSecret" not in str(caught.value)
        assert "line 3, column 1: while parsing a flow sequence" in str(caught.value)

    def test_a_list_or_mapping_of_the_wrong_type_is_not_quoted(self) -> None:
        """An inline key (or any text) written as a YAML list or mapping: the refusal
        gives its type, not its first characters, which may be a secret's."""
        for value in ("[SuperSecretKeyLine]", "{SuperSecretKeyLine: x}"):
            with pytest.raises(WebConfigError) as caught:
                _parse(f"tls_server_config:\n  cert: x\n  key: {value}\n")
            assert "SuperSecret" not in str(caught.value)
            assert "tls_server_config.key: expected str, got a " in str(caught.value)
        with pytest.raises(WebConfigError, match="expected bool, got 'maybe'"):
            _parse(f"{TLS}  prefer_server_cipher_suites: maybe\n")

    @pytest.mark.parametrize(("text", "message"), REFUSALS)
    def test_refused_with_one_line_naming_the_key(self, text: str, message: str) -> None:
        """A bad file is refused with one line naming the file and key: a typo cannot
        silently weaken TLS or disable authentication."""
        with pytest.raises(WebConfigError) as caught:
            _parse(text)
        assert message in str(caught.value)
        assert "\n" not in str(caught.value)

    def test_unreadable_tls_files_are_named(self, folder: Path) -> None:
        """A certificate that does not load names the key and both files."""
        path = folder / "web.yml"
        path.write_text("tls_server_config:\n  cert_file: missing.crt\n  key_file: server.key\n")
        with pytest.raises(WebConfigError) as caught:
            read_web_config(path)
        assert f"tls_server_config.cert_file/key_file ({folder / 'missing.crt'}" in str(
            caught.value
        )
        (folder / "bad-ca.crt").write_text("not a certificate\n")
        path.write_text(
            f"{TLS}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: bad-ca.crt\n"
        )
        with pytest.raises(WebConfigError, match=r"client_ca_file \(.*bad-ca.crt\)"):
            read_web_config(path)
        # An inline CA that does not load is named as the key it came from.
        path.write_text(f"{TLS}  client_auth_type: VerifyClientCertIfGiven\n  client_ca: x\n")
        with pytest.raises(WebConfigError, match=r"tls_server_config\.client_ca: "):
            read_web_config(path)

    def test_inline_pem_without_a_writable_temporary_directory_is_refused(
        self, folder: Path, pki: Pki, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Inline PEM goes through a temporary file: under a read-only root with no
        emptyDir at /tmp that is a one-line refusal, not a traceback at start-up (or out
        of every answer on a reload). Certificate files need no temporary folder."""
        monkeypatch.setattr(tempfile, "tempdir", str(folder / "no-such-folder"))
        path = folder / "web.yml"
        path.write_text(TLS)
        assert read_web_config(path).tls is not None
        pem = "".join(f"    {line}\n" for line in pki.cert("server").read_text().splitlines())
        key = "".join(f"    {line}\n" for line in pki.key("server").read_text().splitlines())
        path.write_text(f"tls_server_config:\n  cert: |\n{pem}  key: |\n{key}")
        with pytest.raises(WebConfigError) as caught:
            read_web_config(path)
        assert "tls_server_config.cert/key: inline PEM needs a writable temporary" in str(
            caught.value
        )
        assert "\n" not in str(caught.value)

    def test_inline_pem_that_cannot_be_written_is_refused(
        self, folder: Path, pki: Pki, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A temporary folder that is full (ENOSPC) refuses the file in one line, as one
        that cannot be made does."""

        def full(self: Path, *args: object, **kwargs: object) -> int:
            raise OSError(errno.ENOSPC, "No space left on device", str(self))

        pem = "".join(f"    {line}\n" for line in pki.cert("server").read_text().splitlines())
        key = "".join(f"    {line}\n" for line in pki.key("server").read_text().splitlines())
        path = folder / "web.yml"
        path.write_text(f"tls_server_config:\n  cert: |\n{pem}  key: |\n{key}")
        monkeypatch.setattr(Path, "write_text", full)
        with pytest.raises(WebConfigError) as caught:
            read_web_config(path)
        assert "cannot write the inline PEM to a temporary file: " in str(caught.value)
        assert "No space left on device" in str(caught.value)

    def test_an_inline_key_beside_a_cert_file_is_written_to_a_private_folder(
        self,
        folder: Path,
        pki: Pki,
        tmp_path_factory: pytest.TempPathFactory,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """cert_file with an inline key: the key still goes through a temporary folder
        of its own, never a key.pem beside whatever directory the exporter runs in."""
        cwd = tmp_path_factory.mktemp("cwd")
        monkeypatch.chdir(cwd)
        key = "".join(f"    {line}\n" for line in pki.key("server").read_text().splitlines())
        path = folder / "web.yml"
        path.write_text(f"tls_server_config:\n  cert_file: server.crt\n  key: |\n{key}")
        assert (read_web_config(path).tls is not None, []) == (True, list(cwd.iterdir()))

    def test_a_file_of_no_pem_and_a_key_of_another_certificate_are_said_plainly(
        self, folder: Path
    ) -> None:
        """OpenSSL says "[SSL] PEM lib (_ssl.c:3905)" for the one and KEY_VALUES_MISMATCH
        for the other: the line says what is wrong, and keeps OpenSSL's code."""
        path = folder / "web.yml"
        (folder / "garbage.crt").write_text("not a certificate\n")
        path.write_text("tls_server_config:\n  cert_file: garbage.crt\n  key_file: server.key\n")
        with pytest.raises(
            WebConfigError, match=r"not a PEM certificate and private key \(OpenSSL"
        ):
            read_web_config(path)
        path.write_text("tls_server_config:\n  cert_file: ca.crt\n  key_file: server.key\n")
        with pytest.raises(
            WebConfigError,
            match=r"the private key is not the certificate's \(OpenSSL: KEY_VALUES_MISMATCH\)",
        ):
            read_web_config(path)

    def test_a_cipher_suite_this_openssl_lacks_is_a_refusal_not_a_traceback(
        self, folder: Path
    ) -> None:
        """Go knows the 3DES suites; OpenSSL 3 as usually built and configured offers none,
        and set_ciphers then raises an SSLError with no ``reason`` attribute at all:
        reading it raised AttributeError, a traceback at start-up, not the one line."""
        lacking = []
        for name, openssl_name in CIPHER_SUITES.items():
            if openssl_name is None:
                continue
            try:
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(openssl_name)
            except ssl.SSLError:
                lacking.append(name)
        if not lacking:
            pytest.skip(f"{ssl.OPENSSL_VERSION} has every suite Go names")
        path = folder / "web.yml"
        path.write_text(f"{TLS}  max_version: TLS12\n  cipher_suites: [{lacking[0]}]\n")
        with pytest.raises(WebConfigError) as caught:
            read_web_config(path)
        assert "tls_server_config.cipher_suites: none of them is available in this OpenSSL (" in (
            str(caught.value)
        )
        assert "PEM" not in str(caught.value)

    def test_a_client_ca_file_that_is_no_pem_is_not_said_to_lack_a_key(self, folder: Path) -> None:
        """A CA file holds certificates only: a cut one is "not PEM certificates", not the
        certificate-and-key pair's wording."""
        path = folder / "web.yml"
        (folder / "cut-ca.crt").write_text((folder / "ca.crt").read_text()[:300])
        path.write_text(
            f"{TLS}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: cut-ca.crt\n"
        )
        with pytest.raises(WebConfigError, match=r"cut-ca\.crt\): not PEM certificates \(OpenSSL"):
            read_web_config(path)

    def test_serve_refuses_at_start_up(self, folder: Path) -> None:
        """The exporter does not start on a refused file: one ConfigError line."""
        from exporter.app import serve
        from exporter.cli import parse_config
        from exporter.config import ConfigError

        path = folder / "web.yml"
        path.write_text(f"{TLS}  min_version: TLS1.3\n")
        config = parse_config(["--demo", "--web.config.file", str(path)], {})
        with pytest.raises(ConfigError, match=r"tls_server_config\.min_version: unknown value"):
            asyncio.run(serve(config, stop=asyncio.Event()))

    def test_serve_says_its_listener_is_tls(self, folder: Path) -> None:
        """``listening`` says tls=true where the web config turns TLS on (what a probe's
        scheme must match), tls=false without one."""
        from exporter.app import serve
        from exporter.cli import parse_config

        path = folder / "web.yml"
        path.write_text(TLS)

        async def listening(flags: list[str]) -> list[bool]:
            """What ``listening`` says, then stopped (a stop set before start-up ends
            is never listened for)."""
            stop = asyncio.Event()
            with capture_logs() as logs:
                serving = asyncio.create_task(serve(parse_config(flags, {}), stop=stop))
                for _ in range(3000):
                    if serving.done() or any(e["event"] == "listening" for e in logs):
                        break
                    await asyncio.sleep(0.01)
                stop.set()
                await serving
            return [e["tls"] for e in logs if e["event"] == "listening"]

        said = [
            asyncio.run(listening(["--demo", "--web.listen-address=127.0.0.1:0", *extra]))
            for extra in (["--web.config.file", str(path)], [])
        ]
        assert [[True], [False]] == said

    def test_serve_reads_the_debug_auth_file_as_users_only(self, folder: Path) -> None:
        """--web.debug-auth.file holds users and nothing else: a key of the full web
        config there (a TLS or HTTP setting it cannot apply) is refused at start-up."""
        from exporter.app import serve
        from exporter.cli import parse_config
        from exporter.config import ConfigError

        path = folder / "debug.yml"
        path.write_text("http_server_config:\n  http2: false\n")
        flags = ["--demo", "--web.listen-address=127.0.0.1:0", "--web.debug-auth.file", str(path)]
        stopped = asyncio.Event()
        stopped.set()  # were the file taken, serve() would return at once
        with pytest.raises(ConfigError, match=r"http_server_config: unknown key"):
            asyncio.run(serve(parse_config(flags, {}), stop=stopped))


async def _get(
    url: str, context: ssl.SSLContext | None = None, **headers: str
) -> tuple[int, dict[str, str]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, ssl=context if context is not None else False, headers=headers) as r,
    ):
        await r.read()
        return r.status, dict(r.headers)


async def _peer(port: int, context: ssl.SSLContext) -> tuple[str | None, str, bytes]:
    """TLS version, cipher and certificate the server answers a new connection with."""
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        sslobj = writer.get_extra_info("ssl_object")
        cipher = writer.get_extra_info("cipher")
        return sslobj.version(), cipher[0], sslobj.getpeercert(binary_form=True)
    finally:
        writer.close()
        await writer.wait_closed()


def _client(pki: Pki, *, client: str | None = None, maximum: str = "TLSv1_3") -> ssl.SSLContext:
    context = client_context(pki, client=client)
    context.maximum_version = ssl.TLSVersion[maximum]
    return context


def _live(folder: Path, text: str) -> LiveWebConfig:
    path = folder / "web.yml"
    path.write_text(text)
    return LiveWebConfig(path)


@pytest.mark.parametrize(
    ("text", "warned"),
    [
        ("", True),
        ("# tls_server_config: to come\n", True),
        ("{}\n", True),
        ("http_server_config:\n  headers:\n    X-Frame-Options: deny\n", False),
        ("rate_limit:\n  interval: 1s\n  burst: 5\n", False),
    ],
)
def test_a_file_that_sets_nothing_is_warned_of(folder: Path, text: str, warned: bool) -> None:
    """An empty file is no file, as exporter-toolkit has it, but said: a Secret mounted
    without its key would otherwise serve plain HTTP to anyone unseen."""
    with capture_logs() as logs:
        live = _live(folder, text)
    assert live.current().tls is None
    expected = [("web_config_empty", str(live.path))] if warned else []
    assert expected == [(e["event"], e["path"]) for e in logs]


class TestServedTls:
    async def test_min_version(self, folder: Path, pki: Pki) -> None:
        """min_version TLS13 refuses a TLS 1.2 client."""
        async with served(_live(folder, f"{TLS}  min_version: TLS13\n")) as server:
            assert ("TLSv1.3", 200) == (
                (await _peer(server.port, _client(pki)))[0],
                (await _get(server.url("/metrics"), _client(pki)))[0],
            )
            with pytest.raises((ssl.SSLError, ConnectionError)):
                await _peer(server.port, _client(pki, maximum="TLSv1_2"))

    @pytest.mark.parametrize(
        ("suite", "negotiated"),
        [
            ("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"),
            # One OpenSSL left to itself would not pick (it prefers AES-GCM): the list is
            # applied, not only read.
            ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"),
        ],
    )
    async def test_max_version_and_cipher_suites(
        self, folder: Path, pki: Pki, suite: str, negotiated: str
    ) -> None:
        """max_version TLS12 and the one suite in cipher_suites are what is negotiated."""
        text = f"{TLS}  max_version: TLS12\n  cipher_suites: [{suite}]\n"
        async with served(_live(folder, text)) as server:
            version, cipher, _ = await _peer(server.port, _client(pki))
        assert ("TLSv1.2", negotiated) == (version, cipher)

    async def test_cipher_suites_of_tls13_only_leave_tls12_no_handshake(
        self, folder: Path, pki: Pki
    ) -> None:
        """Go enables no TLS 1.2 suite when cipher_suites lists TLS 1.3 suites only, so
        a TLS 1.2 client fails: the same here, not OpenSSL's TLS 1.2 defaults. With
        max_version below TLS 1.3 no handshake is left at all: refused."""
        text = f"{TLS}  cipher_suites: [TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384]\n"
        async with served(_live(folder, text)) as server:
            version, _, _ = await _peer(server.port, _client(pki))
            assert "TLSv1.3" == version
            with pytest.raises((ssl.SSLError, ConnectionError)):
                await _peer(server.port, _client(pki, maximum="TLSv1_2"))
        with pytest.raises(WebConfigError, match=r"cipher_suites: lists TLS 1\.3 suites only"):
            _parse(f"{TLS}  max_version: TLS12\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n")

    @pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl binary")
    async def test_curve_preferences(self, folder: Path) -> None:
        """curve_preferences [CurveP384]: a client offering only P-256 cannot connect.

        (The client lists P-256 too where it must accept the server's P-256 ECDSA key.)"""

        def handshake(port: int, group: str) -> int:
            return subprocess.run(
                ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-groups", group,
                 "-tls1_2", "-brief"],
                input=b"", capture_output=True, timeout=30, check=False,
            ).returncode  # fmt: skip

        async with served(_live(folder, f"{TLS}  curve_preferences: [CurveP384]\n")) as server:
            results = await asyncio.gather(
                asyncio.to_thread(handshake, server.port, "P-384:P-256"),
                asyncio.to_thread(handshake, server.port, "P-256"),
            )
        assert 0 == results[0]
        assert 0 != results[1]

    def test_prefer_server_cipher_suites(self, folder: Path) -> None:
        """prefer_server_cipher_suites sets or clears OpenSSL's server preference."""
        for value, expected in (("true", True), ("false", False)):
            config = _parse(f"{TLS}  prefer_server_cipher_suites: {value}\n")
            assert config.tls is not None
            tls = TlsSettings(
                cert_file=folder / "server.crt",
                key_file=folder / "server.key",
                prefer_server_cipher_suites=config.tls.prefer_server_cipher_suites,
            )
            context = build_ssl_context(tls, source=folder / "web.yml")
            assert expected == bool(context.options & ssl.OP_CIPHER_SERVER_PREFERENCE)

    async def test_inline_cert_key_and_client_ca(self, folder: Path, pki: Pki) -> None:
        """cert, key and client_ca may be given inline as PEM."""

        def indented(path: Path) -> str:
            return "".join(f"    {line}\n" for line in path.read_text().splitlines())

        text = (
            "tls_server_config:\n  cert: |\n" + indented(pki.cert("server"))
            + "  key: |\n" + indented(pki.key("server"))
            + "  client_ca: |\n" + indented(pki.ca)
            + "  client_auth_type: RequireAndVerifyClientCert\n"
        )  # fmt: skip
        async with served(_live(folder, text)) as server:
            assert 200 == (await _get(server.url("/metrics"), _client(pki, client="prometheus")))[0]
            assert 403 == (await _get(server.url("/metrics"), _client(pki)))[0]

    async def test_require_and_verify_client_cert(self, folder: Path, pki: Pki) -> None:
        """RequireAndVerifyClientCert: a CA-signed client passes, no certificate is 403 except
        on the probes (not 401: no WWW-Authenticate scheme brings a certificate), a
        certificate from another CA fails the handshake."""
        text = f"{TLS}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
        async with served(_live(folder, text)) as server:
            good = _client(pki, client="prometheus")
            assert 200 == (await _get(server.url("/metrics"), good))[0]
            for path in ("/metrics", "/debug/allocations"):
                status, headers = await _get(server.url(path), _client(pki))
                assert (403, None) == (status, headers.get("WWW-Authenticate"))
            for probe in ("/healthz", "/readyz"):
                assert 200 == (await _get(server.url(probe), _client(pki)))[0]
            with pytest.raises(aiohttp.ClientError):
                await _get(server.url("/healthz"), _client(pki, client="stranger"))

    async def test_verify_client_cert_if_given(self, folder: Path, pki: Pki) -> None:
        """VerifyClientCertIfGiven: no certificate passes, a foreign one does not."""
        text = f"{TLS}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n"
        async with served(_live(folder, text)) as server:
            assert 200 == (await _get(server.url("/metrics"), _client(pki)))[0]
            assert 200 == (await _get(server.url("/metrics"), _client(pki, client="intruder")))[0]
            with pytest.raises(aiohttp.ClientError):
                await _get(server.url("/metrics"), _client(pki, client="stranger"))

    async def test_client_allowed_sans(self, folder: Path, pki: Pki) -> None:
        """client_allowed_sans: a verified certificate needs one of the listed SANs (DNS or IP)."""
        text = (
            f"{TLS}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
            "  client_allowed_sans: [{san}]\n"
        )
        for san in ("prometheus.monitoring.svc", "10.0.0.7"):
            async with served(_live(folder, text.format(san=san))) as server:
                metrics = server.url("/metrics")
                assert 200 == (await _get(metrics, _client(pki, client="prometheus")))[0]
                assert 403 == (await _get(metrics, _client(pki, client="intruder")))[0]
                probe = server.url("/readyz")
                assert 200 == (await _get(probe, _client(pki, client="intruder")))[0]

    async def test_client_allowed_sans_with_verify_if_given(self, folder: Path, pki: Pki) -> None:
        """With SANs listed, no certificate is refused too (it used to pass where a wrong
        one got 403); the probes stay open."""
        text = (
            f"{TLS}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n"
            "  client_allowed_sans: [prometheus.monitoring.svc]\n"
        )
        async with served(_live(folder, text)) as server:
            metrics = server.url("/metrics")
            assert 200 == (await _get(metrics, _client(pki, client="prometheus")))[0]
            assert 403 == (await _get(metrics, _client(pki, client="intruder")))[0]
            assert 403 == (await _get(metrics, _client(pki)))[0]
            assert 403 == (await _get(server.url("/debug/allocations"), _client(pki)))[0]
            for probe in ("/healthz", "/readyz"):
                assert 200 == (await _get(server.url(probe), _client(pki)))[0]

    async def test_clients_refused_for_their_certificate_spend_no_rate_limit(
        self, folder: Path, pki: Pki
    ) -> None:
        """A client without a certificate, or with one of other SANs, is refused before
        the rate limit, as exporter-toolkit's handshake refuses it: a stranger cannot
        spend the tokens and lock the scraper that holds the right certificate out."""
        text = (
            f"{TLS}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
            "  client_allowed_sans: [prometheus.monitoring.svc]\n"
            "rate_limit:\n  interval: 1h\n  burst: 1\n"
        )
        async with served(_live(folder, text)) as server:
            metrics = server.url("/metrics")
            strangers = [
                (await _get(metrics, _client(pki, client=client)))[0]
                for client in (None, "intruder", None, "intruder")
            ]
            scraper = _client(pki, client="prometheus")
            assert ([403] * 4, [200, 429]) == (
                strangers,
                [(await _get(metrics, scraper))[0] for _ in range(2)],
            )

    async def test_clients_refused_for_their_password_spend_no_rate_limit(
        self, folder: Path
    ) -> None:
        """A client with no password or a wrong one gets 401 and spends no token: it
        used to, so that anyone who reached the port could keep the scraper at 429."""
        text = f"basic_auth_users:\n  alice: {HASH}\nrate_limit:\n  interval: 1h\n  burst: 1\n"
        wrong = [{}, basic("alice", "wrong"), {}, basic("mallory", "s3cret")]
        async with served(_live(folder, text)) as server:
            metrics = server.url("/metrics")
            strangers = [(await _get(metrics, **headers))[0] for headers in wrong]
            right = basic("alice", "s3cret")
            scraper = [(await _get(metrics, **right))[0] for _ in range(2)]
        assert ([401] * 4, [200, 429]) == (strangers, scraper)

    async def test_headers_on_every_response(self, folder: Path, pki: Pki) -> None:
        """http_server_config.headers are sent on every response, refusals and probes too."""
        text = (
            f"{TLS}http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
            "    Strict-Transport-Security: max-age=60\n"
            f"basic_auth_users:\n  alice: {HASH}\n"
        )
        async with served(_live(folder, text)) as server:
            for path, status in (("/metrics", 401), ("/healthz", 200), ("/nowhere", 401)):
                got, headers = await _get(server.url(path), _client(pki))
                assert (status, "deny", "max-age=60", "podresources-exporter") == (
                    got,
                    headers.get("X-Frame-Options"),
                    headers.get("Strict-Transport-Security"),
                    headers.get("Server"),
                )

    async def test_rate_limit(self, folder: Path) -> None:
        """rate_limit: past the burst, 429 with Retry-After the interval (when a request
        can pass again, not "1" whatever the setting); the probes are never limited."""
        async with served(_live(folder, "rate_limit:\n  interval: 1h\n  burst: 2\n")) as server:
            answers = [await _get(server.url("/metrics")) for _ in range(3)]
            assert [200, 200, 429] == [status for status, _ in answers]
            assert "3600" == answers[2][1].get("Retry-After")
            assert 200 == (await _get(server.url("/healthz")))[0]


def _replace(path: Path, text: str) -> None:
    """Replace a file by rename, as a Kubernetes Secret volume does."""
    scratch = path.with_name(f".{path.name}.new")
    scratch.write_text(text)
    os.replace(scratch, path)


class TestReload:
    async def test_edited_file_applies_to_the_next_request(self, folder: Path) -> None:
        """A new user and a new header apply without a restart."""
        other = bcrypt.hashpw(b"other", bcrypt.gensalt(rounds=4)).decode()
        live = _live(folder, f"basic_auth_users:\n  alice: {HASH}\n")
        async with served(live) as server:
            assert 401 == (await _get(server.url("/metrics"), **basic("bob", "other")))[0]
            _replace(
                live.path,
                f"basic_auth_users:\n  alice: {HASH}\n  bob: {other}\n"
                "http_server_config:\n  headers:\n    X-Frame-Options: deny\n",
            )
            status, headers = await _get(server.url("/metrics"), **basic("bob", "other"))
            assert (200, "deny") == (status, headers.get("X-Frame-Options"))

    async def test_broken_edit_keeps_the_last_good_config(self, folder: Path) -> None:
        """An edit that does not load is logged once and the last good config stays."""
        live = _live(folder, f"basic_auth_users:\n  alice: {HASH}\n")
        async with served(live) as server:
            _replace(live.path, "basic_auth_users:\n  alice: plaintext\n")
            with capture_logs() as logs:
                for _ in range(3):
                    assert (
                        200 == (await _get(server.url("/metrics"), **basic("alice", "s3cret")))[0]
                    )
                    assert 401 == (await _get(server.url("/metrics")))[0]
            failures = [e for e in logs if e["event"] == "web_config_reload_failed"]
            assert 1 == len(failures)
            assert "basic_auth_users.alice: not a bcrypt hash" in failures[0]["error"]

    async def test_turning_tls_off_is_refused(self, folder: Path, pki: Pki) -> None:
        """Removing tls_server_config from a TLS listener keeps TLS and says a restart is needed."""
        live = _live(folder, TLS)
        async with served(live) as server:
            _replace(live.path, "")
            with capture_logs() as logs:
                assert 200 == (await _get(server.url("/metrics"), _client(pki)))[0]
            assert "needs a restart" in logs[0]["error"]

    @pytest.mark.parametrize("emptied", ["", "basic_auth_users: {}\n", "rate_limit:\n  burst: 5\n"])
    async def test_removing_every_user_is_refused(self, folder: Path, emptied: str) -> None:
        """An edit that leaves no user keeps asking for the last good users and says a
        restart is needed: it must not open /metrics to anyone silently."""
        live = _live(folder, f"basic_auth_users:\n  alice: {HASH}\n")
        async with served(live) as server:
            _replace(live.path, emptied)
            with capture_logs() as logs:
                anonymous = (await _get(server.url("/metrics")))[0]
                alice = (await _get(server.url("/metrics"), **basic("alice", "s3cret")))[0]
            assert ((401, 200), ["web_config_reload_failed"]) == (
                (anonymous, alice),
                [e["event"] for e in logs],
            )
            assert "turning basic auth off needs a restart" in logs[0]["error"]

    async def test_an_edited_rate_limit_applies(self, folder: Path) -> None:
        """A changed rate_limit starts a bucket of its own from the next request."""
        live = _live(folder, "rate_limit:\n  interval: 1h\n  burst: 1\n")
        async with served(live) as server:
            before = [(await _get(server.url("/metrics")))[0] for _ in range(2)]
            _replace(live.path, "rate_limit:\n  interval: 1h\n  burst: 3\n")
            after = [(await _get(server.url("/metrics")))[0] for _ in range(4)]
        assert ([200, 429], [200, 200, 200, 429]) == (before, after)

    async def test_a_password_changed_in_place_applies(self, folder: Path) -> None:
        """The file rewritten in place (same inode) with a hash of the same length (every
        bcrypt hash has 60 characters): its modification time tells the edit."""
        live = _live(folder, f"basic_auth_users:\n  alice: {HASH}\n")
        other = bcrypt.hashpw(b"changed", bcrypt.gensalt(rounds=4)).decode()
        async with served(live) as server:
            url = server.url("/metrics")
            assert 200 == (await _get(url, **basic("alice", "s3cret")))[0]
            before = live.path.stat()
            live.path.write_text(f"basic_auth_users:\n  alice: {other}\n")
            later = before.st_mtime_ns + 1_000_000_000  # a later edit, whatever the clock's tick
            os.utime(live.path, ns=(later, later))
            after = live.path.stat()
            assert (before.st_ino, before.st_size) == (after.st_ino, after.st_size)
            assert [401, 200] == [
                (await _get(url, **basic("alice", "s3cret")))[0],
                (await _get(url, **basic("alice", "changed")))[0],
            ]

    async def test_a_file_replaced_with_the_same_size_and_time_applies(self, folder: Path) -> None:
        """A file replaced by rename (a Secret's update) is seen by its inode even where
        the new one has the same size and modification time (written within one tick of
        the file system's clock, or copied with its times kept)."""
        live = _live(folder, f"basic_auth_users:\n  alice: {HASH}\n")
        other = bcrypt.hashpw(b"changed", bcrypt.gensalt(rounds=4)).decode()
        async with served(live) as server:
            url = server.url("/metrics")
            assert 200 == (await _get(url, **basic("alice", "s3cret")))[0]
            before = live.path.stat()
            scratch = live.path.with_name(".web.yml.new")
            scratch.write_text(f"basic_auth_users:\n  alice: {other}\n")
            os.utime(scratch, ns=(before.st_atime_ns, before.st_mtime_ns))
            os.replace(scratch, live.path)
            after = live.path.stat()
            assert (before.st_mtime_ns, before.st_size) == (after.st_mtime_ns, after.st_size)
            assert [401, 200] == [
                (await _get(url, **basic("alice", "s3cret")))[0],
                (await _get(url, **basic("alice", "changed")))[0],
            ]

    async def test_rotated_certificate_is_served_to_new_connections(
        self, folder: Path, pki: Pki
    ) -> None:
        """A certificate and key replaced on disk are served from the next connection on."""
        async with served(_live(folder, TLS)) as server:
            before = (await _peer(server.port, _client(pki)))[2]
            issue(pki, "server-next", san="IP:127.0.0.1")
            _replace(folder / "server.key", pki.key("server-next").read_text())
            _replace(folder / "server.crt", pki.cert("server-next").read_text())
            after = (await _peer(server.port, _client(pki)))[2]
        assert before == ssl.PEM_cert_to_DER_cert(pki.cert("server").read_text())
        assert after == ssl.PEM_cert_to_DER_cert(pki.cert("server-next").read_text())

    async def test_an_edit_naming_files_yet_to_come_applies_when_they_come(
        self, folder: Path, pki: Pki
    ) -> None:
        """An edit naming a certificate and key not there yet (a ConfigMap updated before
        the Secret beside it) keeps the old pair and says so once; when they come, the
        next connection gets them, with no further edit of the file."""
        live = _live(folder, TLS)
        async with served(live) as server:
            issue(pki, "server-later", san="IP:127.0.0.1")
            with capture_logs() as logs:
                _replace(live.path, TLS.replace("server.", "later."))
                before = [(await _peer(server.port, _client(pki)))[2] for _ in range(2)]
                shutil.copy(pki.key("server-later"), folder / "later.key")
                shutil.copy(pki.cert("server-later"), folder / "later.crt")
                after = (await _peer(server.port, _client(pki)))[2]
        old = ssl.PEM_cert_to_DER_cert(pki.cert("server").read_text())
        new = ssl.PEM_cert_to_DER_cert(pki.cert("server-later").read_text())
        assert ([old, old], new) == (before, after)
        assert ["web_config_reload_failed", "web_config_reloaded"] == [e["event"] for e in logs]

    def test_an_edit_of_no_utf8_keeps_the_last_good_config(self, folder: Path) -> None:
        """An edit that is not UTF-8 is refused like any other, not an exception out of
        every answer from reading which files it names."""
        live = _live(folder, TLS)
        good = live.current()
        with capture_logs() as logs:
            live.path.write_bytes(TLS.encode() + b"# \xff\n")
            kept = live.current()
        assert (good, ["web_config_reload_failed"]) == (kept, [e["event"] for e in logs])

    async def test_half_rotated_pair_keeps_the_old_one(self, folder: Path, pki: Pki) -> None:
        """A new certificate whose key is not there yet keeps serving the old pair."""
        async with served(_live(folder, TLS)) as server:
            issue(pki, "server-half", san="IP:127.0.0.1")
            with capture_logs() as logs:
                _replace(folder / "server.crt", pki.cert("server-half").read_text())
                served_cert = (await _peer(server.port, _client(pki)))[2]
        assert served_cert == ssl.PEM_cert_to_DER_cert(pki.cert("server").read_text())
        assert "web_config_reload_failed" in [e["event"] for e in logs]


def test_verified_client_certificates_without_a_ca_are_checked_against_the_hosts(
    folder: Path,
) -> None:
    """No client_ca_file nor client_ca: the host's roots verify client certificates, as Go
    does with no ClientCAs (not no root at all, which would refuse every certificate)."""
    host = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    host.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    if not host.cert_store_stats()["x509_ca"]:
        pytest.skip("this host has no CA certificates to compare with")
    tls = TlsSettings(
        cert_file=folder / "server.crt",
        key_file=folder / "server.key",
        client_auth_type="RequireAndVerifyClientCert",
    )
    context = build_ssl_context(tls, source=folder / "web.yml")
    assert host.cert_store_stats()["x509_ca"] == context.cert_store_stats()["x509_ca"]


@pytest.mark.parametrize(
    "text",
    [
        f'{TLS}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: "ca\\0.crt"\n',
        'tls_server_config:\n  cert: "\\ud800"\n  key: x\n',
        "basic_auth_users: " + "[" * 5000 + "]" * 5000 + "\n",
    ],
    ids=["nul-in-a-path", "lone-surrogate-in-inline-pem", "nested-too-deep"],
)
def test_what_python_itself_refuses_is_a_refusal(folder: Path, text: str) -> None:
    """Content the checks do not name is still refused with one line, not raised as a
    ValueError or RecursionError (a traceback at start-up)."""
    path = folder / "web.yml"
    path.write_text(text)
    with pytest.raises(WebConfigError) as caught:
        read_web_config(path)
    assert "\n" not in str(caught.value)


async def test_an_edit_that_python_refuses_keeps_the_last_good_config(folder: Path) -> None:
    """A reload whose parsing raised something other than WebConfigError used to escape
    every LiveWebConfig.current(): every answer failed, /healthz and /readyz included
    (the response-headers hook reads the config), so the kubelet restarted the pod."""
    live = _live(folder, f"basic_auth_users:\n  alice: {HASH}\n")
    async with served(live) as server:
        _replace(
            live.path,
            f"basic_auth_users:\n  alice: {HASH}\n"
            + "rate_limit:\n  interval: 1"
            + "0" * 400
            + "\n  burst: 1\n",
        )
        with capture_logs() as logs:
            statuses = [
                (await _get(server.url("/healthz")))[0],
                (await _get(server.url("/readyz")))[0],
                (await _get(server.url("/metrics"), **basic("alice", "s3cret")))[0],
                (await _get(server.url("/metrics")))[0],
            ]
    assert ([200, 200, 200, 401], ["web_config_reload_failed"]) == (
        statuses,
        [e["event"] for e in logs],
    )


def test_an_encrypted_key_is_refused_without_asking_for_a_pass_phrase(
    folder: Path, pki: Pki
) -> None:
    """exporter-toolkit reads unencrypted keys only. Given an encrypted one, OpenSSL
    prompts for a pass phrase and, with no terminal, reads stdin: a container started
    with stdin open hung at start-up (or on a reload, on the event loop), and with stdin
    closed the refusal said only "Invalid argument"."""
    subprocess.run(
        ["openssl", "pkey", "-in", str(pki.key("server")), "-aes256", "-passout", "pass:x",
         "-out", str(folder / "server.key")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    (folder / "web.yml").write_text(TLS)
    code = (
        "import sys; from pathlib import Path; from exporter.webconfig import read_web_config\n"
        f"read_web_config(Path({str(folder / 'web.yml')!r}))\n"
    )
    # stdin left open, as a container's with stdin: true, and never written to; the
    # timeout only catches the old hang.
    with subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stderr=subprocess.PIPE
    ) as child:
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            raise AssertionError("blocked reading a pass phrase from stdin") from None
        assert child.stderr is not None
        stderr = child.stderr.read()
    assert b"tls_server_config.cert_file/key_file: the private key is encrypted" in stderr


def test_tls_values_are_checked_even_without_a_certificate() -> None:
    """A bad value under tls_server_config is refused even where TLS stays off."""
    with pytest.raises(WebConfigError, match="min_version: unknown value 'tls13'"):
        _parse("tls_server_config:\n  min_version: tls13\n")
    assert _parse("tls_server_config:\n  min_version: TLS13\n").tls is None
