"""What a flood of unfinished TLS handshakes costs the exporter in memory.

Starts ``python -m exporter --demo`` with TLS on (a self-signed EC certificate made with
the openssl binary), then, each round, opens ``--connections`` connections in a row that
each send a real ClientHello less its last byte (``--whole-hello``: all of it) and say
nothing more. Once the exporter's RSS has settled they are held ``--hold-s`` longer,
then closed. Per round, in MiB: the exporter's RSS before, once the burst was taken in
(``held``), its peak (VmHWM, reset each round), at the end of the hold, once the
clients closed and RSS settled again (``after``), and the ``[heap]`` mapping's share of
that; and how many more descriptors than before the round the exporter held at the end
of the hold: the round's connections it had not closed (the connection and handshake
limits, timeouts).

    .venv/bin/python bench/tls_flood.py [--connections 3000] [--rounds 6] [--hold-s 0]
                                        [--whole-hello] [-- EXPORTER FLAGS]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SETTLE_S = 3.0  # RSS within 1 MiB for this long: the burst taken in, or let go


@dataclass(frozen=True, slots=True)
class _Exporter:
    pid: int
    port: int


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _certificate(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "server.crt", folder / "server.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout", str(key),
         "-out", str(cert), "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def _client_hello() -> bytes:
    """The first flight of a real TLS client: its ClientHello record."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="node")
    with contextlib.suppress(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux 4.0+)


def _heap_kib(pid: int) -> int:
    lines = Path(f"/proc/{pid}/smaps").read_text().splitlines()
    for number, line in enumerate(lines):
        if line.endswith("[heap]"):
            for field in lines[number + 1 :]:
                if field.startswith("Rss:"):
                    return int(field.split()[1])
    return 0


def _mib(kib: int) -> float:
    return round(kib / 1024, 1)


async def _settled(pid: int) -> int:
    """RSS once it has stayed within 1 MiB for SETTLE_S."""
    last, since = _status_kib(pid, "VmRSS"), time.monotonic()
    while time.monotonic() - since < SETTLE_S:
        await asyncio.sleep(0.1)
        now = _status_kib(pid, "VmRSS")
        if abs(now - last) > 1024:
            last, since = now, time.monotonic()
    return last


async def _healthy(port: int, context: ssl.SSLContext) -> None:
    for _ in range(300):
        with contextlib.suppress(OSError):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = await reader.read()
            writer.close()
            if answer.startswith(b"HTTP/1.1 200"):
                return
        await asyncio.sleep(0.1)
    raise SystemExit("the exporter did not answer /healthz over TLS")


async def _round(
    exporter: _Exporter, hello: bytes, *, count: int, hold_s: float
) -> dict[str, float]:
    pid = exporter.pid
    before, descriptors = _status_kib(pid, "VmRSS"), _descriptors(pid)
    _reset_peak(pid)
    clients: list[asyncio.StreamWriter] = []
    for _ in range(count):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", exporter.port)
        except OSError:
            break
        writer.write(hello)
        clients.append(writer)
    held = await _settled(pid)
    await asyncio.sleep(hold_s)
    end_of_hold = _status_kib(pid, "VmRSS")
    peak = _status_kib(pid, "VmHWM")
    still_open = _descriptors(pid) - descriptors
    for writer in clients:
        writer.close()
    after = await _settled(pid)
    return {
        "opened": len(clients),
        "before_mib": _mib(before),
        "held_mib": _mib(held),
        "peak_mib": _mib(peak),
        "end_of_hold_mib": _mib(end_of_hold),
        "still_open": still_open,
        "after_mib": _mib(after),
        "heap_after_mib": _mib(_heap_kib(pid)),
    }


async def main(
    *, connections: int, rounds: int, hold_s: float, whole_hello: bool, extra: list[str]
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="prx-tlsflood-"))
    cert, key = _certificate(folder)
    web_config = folder / "web.yml"
    web_config.write_text(
        json.dumps({"tls_server_config": {"cert_file": str(cert), "key_file": str(key)}})
    )
    port = _free_port()
    argv = ["-m", "exporter", "--demo", "--web.listen-address", f"127.0.0.1:{port}",
            "--web.config.file", str(web_config), *extra]  # fmt: skip
    with (folder / "exporter.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, *argv, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        context = ssl.create_default_context(cafile=str(cert))
        await _healthy(port, context)
        exporter = _Exporter(process.pid, port)
        start = await _settled(exporter.pid)
        print(json.dumps({"start_mib": _mib(start), "heap_mib": _mib(_heap_kib(exporter.pid))}))
        hello = _client_hello()
        hello = hello if whole_hello else hello[:-1]
        for number in range(1, rounds + 1):
            result = await _round(exporter, hello, count=connections, hold_s=hold_s)
            print(json.dumps({"round": number, **result}), flush=True)
        await _healthy(port, context)  # still serving
    finally:
        process.terminate()
        await process.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--hold-s", type=float, default=0.0, help="hold each burst this long")
    parser.add_argument(
        "--whole-hello", action="store_true", help="send all of the ClientHello, then wait"
    )
    parser.add_argument("extra", nargs="*", help="more exporter flags, after --")
    args = parser.parse_args()
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    asyncio.run(
        main(
            connections=args.connections,
            rounds=args.rounds,
            hold_s=args.hold_s,
            whole_hello=args.whole_hello,
            extra=args.extra,
        )
    )
