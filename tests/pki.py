"""Real certificates for the TLS tests, made with the openssl binary (EC keys: fast)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["Pki", "client_context", "make_pki"]


@dataclass(frozen=True, slots=True)
class Pki:
    folder: Path
    ca: Path  # signs everything below

    def cert(self, name: str) -> Path:
        return self.folder / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.folder / f"{name}.key"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def issue(pki: Pki, name: str, *, san: str, ca_name: str = "ca") -> None:
    """A leaf ``name`` with subjectAltName ``san``, signed by ``ca_name``."""
    folder = pki.folder
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-subj", f"/CN={name}", "-keyout", str(folder / f"{name}.key"),
        "-out", str(folder / f"{name}.csr"),
    )  # fmt: skip
    # The key identifier: Python 3.13's default client context (VERIFY_X509_STRICT)
    # refuses a leaf without one, as RFC 5280 4.2.1.1 asks.
    (folder / f"{name}.ext").write_text(
        f"subjectAltName={san}\nauthorityKeyIdentifier=keyid,issuer\n"
    )
    _openssl(
        "x509", "-req", "-in", str(folder / f"{name}.csr"), "-days", "2",
        "-CA", str(folder / f"{ca_name}.crt"), "-CAkey", str(folder / f"{ca_name}.key"),
        "-CAcreateserial", "-extfile", str(folder / f"{name}.ext"),
        "-out", str(folder / f"{name}.crt"),
    )  # fmt: skip


def make_ca(folder: Path, name: str) -> None:
    """A CA as RFC 5280 has one (Python 3.13's default client context refuses a CA
    without keyUsage)."""
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-days", "2", "-subj", f"/CN={name}", "-keyout", str(folder / f"{name}.key"),
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-out", str(folder / f"{name}.crt"),
    )  # fmt: skip


def make_pki(folder: Path) -> Pki:
    """A CA; ``server`` for 127.0.0.1, ::1 and localhost; clients ``prometheus`` and
    ``intruder`` (same CA, other SAN); ``stranger`` from another CA."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl binary is needed to make test certificates")
    folder.mkdir(parents=True, exist_ok=True)
    make_ca(folder, "ca")
    make_ca(folder, "other-ca")
    pki = Pki(folder=folder, ca=folder / "ca.crt")
    issue(pki, "server", san="IP:127.0.0.1,IP:::1,DNS:localhost")
    issue(pki, "prometheus", san="DNS:prometheus.monitoring.svc,IP:10.0.0.7")
    issue(pki, "intruder", san="DNS:intruder.example")
    issue(pki, "stranger", san="DNS:prometheus.monitoring.svc", ca_name="other-ca")
    return pki


def client_context(pki: Pki, *, client: str | None = None) -> ssl.SSLContext:
    """A client that trusts the test CA and presents ``client``'s certificate if given."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    if client is not None:
        context.load_cert_chain(pki.cert(client), pki.key(client))
    return context
