"""--web.listen-address as the Prometheus ecosystem means it, and a Server header without
versions, on the real serve()."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from pki import make_pki
from structlog.testing import capture_logs
from webserving import KernelWithoutIPv6, free_dual_stack_port, has_ipv6_loopback

from exporter.app import serve
from exporter.cli import parse_config
from exporter.config import ConfigError

IPV6 = pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback on this machine")
# serve() runs --demo here, whose node lays out its tree where tempfile says.
pytestmark = pytest.mark.usefixtures("tempfile_in_memory")


@contextlib.asynccontextmanager
async def _serving(
    *addresses: str, environ: dict[str, str] | None = None, flags: tuple[str, ...] = ()
) -> AsyncIterator[None]:
    listen = [f"--web.listen-address={address}" for address in addresses]
    config = parse_config(["--demo", *listen, *flags], environ or {})
    stop = asyncio.Event()
    task = asyncio.create_task(serve(config, stop=stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)


async def _exchange(host: str, port: int, request: bytes) -> bytes:
    """Send raw bytes once the listener is up; return the whole answer."""
    for _ in range(100):
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        writer.write(request)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout=30)
        writer.close()
        return answer
    raise AssertionError(f"nothing listens on {host}:{port}")


HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


async def _healthy(host: str, port: int) -> bool:
    return (await _exchange(host, port, HEALTHZ)).startswith(b"HTTP/1.1 200")


class TestStoppedWhileStarting:
    async def test_a_stop_asked_during_start_up_never_listens(self) -> None:
        """SIGTERM in the second of start-up (a rollout, a node drain) used to bind the
        port and log "listening" after "stopping"; serve() now returns before that."""
        port = free_dual_stack_port()
        config = parse_config(["--demo", f"--web.listen-address=127.0.0.1:{port}"], {})
        stop = asyncio.Event()
        stop.set()
        with capture_logs() as logs:
            await asyncio.wait_for(serve(config, stop=stop), timeout=30)
        events = [e["event"] for e in logs]
        assert ("starting" in events, "listening" in events) == (True, False)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))  # free: nothing was bound


class TestListenAddress:
    @IPV6
    async def test_port_only_binds_every_family(self) -> None:
        """':PORT' answers on IPv4 and IPv6, as Go's net.Listen does."""
        port = free_dual_stack_port()
        async with _serving(f":{port}"):
            assert [True, True] == [await _healthy("127.0.0.1", port), await _healthy("::1", port)]

    @IPV6
    @pytest.mark.parametrize("wildcard", ["[::]", "0.0.0.0"])
    async def test_a_wildcard_host_binds_every_family(self, wildcard: str) -> None:
        """'[::]:PORT' and '0.0.0.0:PORT' answer on IPv4 and IPv6, as Go listens on a
        wildcard (a dual-stack socket): node_exporter's [::]:9100 answers IPv4 too."""
        port = free_dual_stack_port()
        async with _serving(f"{wildcard}:{port}"):
            assert [True, True] == [await _healthy("127.0.0.1", port), await _healthy("::1", port)]

    @IPV6
    async def test_port_zero_with_a_wildcard_is_one_port_for_both_families(self) -> None:
        """':0' draws one port that IPv4 and IPv6 both serve, as Go's one dual-stack
        socket has it: asyncio alone draws a port for each family."""
        with capture_logs() as logs:
            async with _serving(":0"):
                for _ in range(300):  # until serve() has bound and logged both sockets
                    bound = [e["address"] for e in logs if e["event"] == "listening"]
                    if len(bound) == 2:
                        break
                    await asyncio.sleep(0.1)
                ports = {int(address.rpartition(":")[2]) for address in bound}
                (port,) = ports
                answers = [await _healthy("127.0.0.1", port), await _healthy("::1", port)]
        assert ([f"0.0.0.0:{port}", f"[::]:{port}"], [True, True]) == (bound, answers)

    async def test_an_address_of_a_family_the_kernel_lacks_is_refused(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """'[::1]:PORT' on a kernel booted with ipv6.disable=1: no socket can be made, and
        asyncio makes none, without a word before Python 3.13 and saying so from it; the
        start is refused, naming the address."""

        monkeypatch.setattr(socket, "socket", KernelWithoutIPv6)
        config = parse_config(["--demo", "--web.listen-address=[::1]:0"], {})
        refused = r"cannot listen on \[::1\]:0: (its address family|could not bind on any)"
        with pytest.raises(ConfigError, match=refused):
            await asyncio.wait_for(serve(config, stop=asyncio.Event()), timeout=30)

    async def test_ipv4_wildcard(self) -> None:
        """'0.0.0.0:PORT' listens on IPv4."""
        port = free_dual_stack_port()
        async with _serving(f"0.0.0.0:{port}"):
            assert await _healthy("127.0.0.1", port)

    async def test_every_address_given_is_served_and_logged_as_bound(self) -> None:
        """A repeated flag serves each address; 'listening' names each socket as bound:
        the port ':0' chose, not 0."""
        port = free_dual_stack_port()
        with capture_logs() as logs:
            async with _serving(f"127.0.0.1:{port}", "127.0.0.1:0"):
                assert await _healthy("127.0.0.1", port)
                bound = [e["address"] for e in logs if e["event"] == "listening"]
                chosen = int(bound[1].rpartition(":")[2])
                assert await _healthy("127.0.0.1", chosen)
        assert (f"127.0.0.1:{port}", True) == (bound[0], chosen > 0)

    @IPV6
    async def test_ipv6_address_is_logged_in_brackets(self) -> None:
        port = free_dual_stack_port()
        with capture_logs() as logs:
            async with _serving(f"[::1]:{port}"):
                assert await _healthy("::1", port)
        assert [f"[::1]:{port}"] == [e["address"] for e in logs if e["event"] == "listening"]

    async def test_a_misspelt_variable_is_logged_at_start(self) -> None:
        """A PODRESOURCES_EXPORTER_* variable no flag reads is named in one warning at
        start (a typo would otherwise be silently ignored); the others are not."""
        port = free_dual_stack_port()
        environ = {
            "PODRESOURCES_EXPORTER_POLL_INTERVL": "5",
            "PODRESOURCES_EXPORTER_POLL_INTERVAL": "10",
            "PODRESOURCES_EXPORTER_NO_COLLECTOR_NVML": "1",
            "PODRESOURCES_EXPORTER_COLLECTOR_NVML": "true",
        }
        with capture_logs() as logs:
            async with _serving(f"127.0.0.1:{port}", environ=environ):
                assert await _healthy("127.0.0.1", port)
        unknown = [e for e in logs if e["event"] == "environment_variable_unknown"]
        expected = [
            ["PODRESOURCES_EXPORTER_NO_COLLECTOR_NVML", "PODRESOURCES_EXPORTER_POLL_INTERVL"]
        ]
        assert (expected, ["warning"]) == (
            [e["variables"] for e in unknown],
            [e["log_level"] for e in unknown],
        )

    async def test_host_name(self) -> None:
        """A host name is resolved and listened on."""
        port = free_dual_stack_port()
        async with _serving(f"localhost:{port}"):
            assert await _healthy("127.0.0.1", port)


class TestServerHeader:
    @pytest.mark.parametrize(
        "request_bytes",
        [
            HEALTHZ,
            b"GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            b"GARBAGE\r\n\r\n",
        ],
        ids=["healthz", "not-found", "malformed"],
    )
    async def test_no_versions(self, request_bytes: bytes) -> None:
        """Whatever the answer, even aiohttp's own 400, Server names no software version."""
        port = free_dual_stack_port()
        async with _serving(f"127.0.0.1:{port}"):
            answer = await _exchange("127.0.0.1", port, request_bytes)
        head = answer.split(b"\r\n\r\n")[0].decode()
        servers = [line for line in head.split("\r\n") if line.lower().startswith("server:")]
        assert ["Server: podresources-exporter"] == servers


class TestWebConfigHeaders:
    async def test_the_files_headers_are_on_the_answers(self, tmp_path: Path) -> None:
        """http_server_config.headers of --web.config.file are on what the real serve()
        answers, not only on an app wired by hand."""
        web = tmp_path / "web.yml"
        web.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
        port = free_dual_stack_port()
        async with _serving(f"127.0.0.1:{port}", flags=("--web.config.file", str(web))):
            answer = await _exchange("127.0.0.1", port, HEALTHZ)
        head = answer.split(b"\r\n\r\n")[0].decode().split("\r\n")
        assert ["X-Frame-Options: deny"] == [h for h in head if h.lower().startswith("x-frame")]


class TestLoopErrors:
    def test_accept_failures_are_one_throttled_warning_other_errors_one_line_each(
        self,
    ) -> None:
        """The event loop's handler: accept() failing for want of descriptors is one
        ``accept_failed`` warning with its hint, repeats held back; any other error
        (an OSError too) is an ``event_loop_error`` naming the exception, each time."""
        from exporter.app import _LoopErrors

        handler = _LoopErrors(interval_s=3600)
        loop = asyncio.new_event_loop()
        accept = {
            "message": "socket.accept() out of system resource",
            "exception": OSError(24, "Too many open files"),
        }
        reset = {
            "message": "Fatal read error on socket transport",
            "exception": ConnectionResetError(104, "Connection reset by peer"),
        }
        try:
            with capture_logs() as logs:
                for context in (accept, accept, reset, reset, {"message": "Task was destroyed"}):
                    handler(loop, context)
        finally:
            loop.close()
        assert [
            ("accept_failed", "warning", "Too many open files", 24),
            (
                "event_loop_error",
                "error",
                "ConnectionResetError: [Errno 104] Connection reset by peer",
                None,
            ),
            (
                "event_loop_error",
                "error",
                "ConnectionResetError: [Errno 104] Connection reset by peer",
                None,
            ),
            ("event_loop_error", "error", None, None),
        ] == [(e["event"], e["log_level"], e.get("error"), e.get("errno")) for e in logs]


def _exporter_on(tmp_path: Path, port: int, *flags: str) -> list[str]:
    """The exporter's command line on 127.0.0.1:``port``, its kubelet and trees in
    ``tmp_path``."""
    return [
        sys.executable,
        "-m",
        "exporter",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--kubelet.socket={tmp_path}/kubelet.sock",
        f"--path.sysfs={tmp_path}",
        f"--path.procfs={tmp_path}",
        *flags,
    ]


# A child that lowers its own open-files limit, then becomes the exporter. Not
# subprocess's preexec_fn: that forks this process, whose gRPC (the simulated kubelets of
# earlier tests) restarts its poller thread in the fork, after close_fds has closed the
# poller's epoll descriptor, and aborts the child before it execs (SIGABRT, "epoll_wait
# error: Bad file descriptor": grpc/grpc#43055, grpcio 1.80 on). Without preexec_fn,
# subprocess spawns the child (vfork), and no fork handler runs.
_LOWER_OPEN_FILES_THEN_EXEC = (
    "import os, resource, sys; "
    "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard)); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])"
)


def _run_on_a_taken_port(
    tmp_path: Path, *flags: str, soft_open_files: int | None = None
) -> tuple[int, subprocess.CompletedProcess[str]]:
    """``python -m exporter`` told to listen on a port already taken: it starts, says
    what it runs with, fails to listen and exits."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = _exporter_on(tmp_path, port, *flags)
        if soft_open_files is not None:
            command = [sys.executable, "-c", _LOWER_OPEN_FILES_THEN_EXEC, str(soft_open_files)]
            command += _exporter_on(tmp_path, port, *flags)[1:]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    return port, result


_LATE = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class TestLateSignals:
    """_Signals.ignore_from_now on a loop of the test's, in the main thread; the process's
    signal actions and wakeup fd are put back after each test."""

    @pytest.fixture(autouse=True)
    def _signal_state_restored(self) -> Iterator[None]:
        saved = {signum: signal.getsignal(signum) for signum in (*_LATE, signal.SIGUSR1)}
        wakeup_fd = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(wakeup_fd)
        try:
            yield
        finally:
            for signum, action in saved.items():
                signal.signal(signum, action)
            signal.set_wakeup_fd(wakeup_fd)

    def test_once_stopped_the_three_stay_ignored_after_the_loop_closes(self) -> None:
        """The loop's close() puts back the default for every handler it still holds: a
        SIGTERM, SIGINT or SIGHUP between it and the exit would kill the process."""
        from exporter.app import _Signals

        loop = asyncio.new_event_loop()
        try:
            signals = _Signals(asyncio.Event())
            signals.install(loop)
            signals.ignore_from_now(loop)
        finally:
            loop.close()
        assert dict.fromkeys(_LATE, signal.SIG_IGN) == {s: signal.getsignal(s) for s in _LATE}

    def test_the_action_goes_to_ignored_without_passing_through_the_default(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """loop.remove_signal_handler puts the default back first: a signal in that gap
        killed the process (-15), seen in the port-taken test's SIGTERM storm."""
        from exporter.app import _Signals

        loop = asyncio.new_event_loop()
        actions: list[tuple[int, object]] = []
        set_action = signal.signal

        def recording(signum: int, action: Any) -> Any:
            actions.append((signum, action))
            return set_action(signum, action)

        try:
            signals = _Signals(asyncio.Event())
            signals.install(loop)
            monkeypatch.setattr(signal, "signal", recording)
            signals.ignore_from_now(loop)
        finally:
            loop.close()
        assert [(s, signal.SIG_IGN) for s in _LATE] == actions

    def test_the_wakeup_fd_is_let_go_with_the_loops_last_handler(self) -> None:
        """As remove_signal_handler does: else the wakeup fd stays the loop's socket,
        which its close() closes, and a signal would be written into whatever file gets
        that number next."""
        from exporter.app import _Signals

        loop = asyncio.new_event_loop()
        try:
            signals = _Signals(asyncio.Event())
            signals.install(loop)
            signals.ignore_from_now(loop)
            assert -1 == signal.set_wakeup_fd(-1)
        finally:
            loop.close()

    async def test_a_handler_the_loop_holds_for_another_signal_still_works(self) -> None:
        """Only the three are taken from the loop: a handler for another signal keeps its
        wakeup fd, and so keeps being called."""
        from exporter.app import _Signals

        loop = asyncio.get_running_loop()
        heard = asyncio.Event()
        signals = _Signals(asyncio.Event())
        signals.install(loop)
        loop.add_signal_handler(signal.SIGUSR1, heard.set)
        try:
            signals.ignore_from_now(loop)
            os.kill(os.getpid(), signal.SIGUSR1)
            for _ in range(100):  # a bound, not a timing assertion
                if heard.is_set():
                    break
                await asyncio.sleep(0.02)
        finally:
            loop.remove_signal_handler(signal.SIGUSR1)
        assert heard.is_set()

    def test_a_loop_without_asyncios_table_is_told_through_its_public_way(self) -> None:
        """Another loop (uvloop, say) has only remove_signal_handler, which puts the
        default back: the handler is removed there and the action still ends ignored."""
        from exporter.app import _Signals

        class PublicOnlyLoop:
            def __init__(self) -> None:
                self.removed: list[int] = []

            def remove_signal_handler(self, signum: int) -> bool:
                self.removed.append(signum)
                signal.signal(signum, signal.SIG_DFL)  # as asyncio's does
                return True

        loop = PublicOnlyLoop()
        _Signals(asyncio.Event()).ignore_from_now(cast(asyncio.AbstractEventLoop, loop))
        assert (list(_LATE), dict.fromkeys(_LATE, signal.SIG_IGN)) == (
            loop.removed,
            {s: signal.getsignal(s) for s in _LATE},
        )


class TestPortTaken:
    @pytest.mark.parametrize("log_format", ["json", "logfmt", "console"])
    def test_one_event_in_the_log_format_then_exit_2(self, tmp_path: Path, log_format: str) -> None:
        """A port already taken ends the process with status 2 and one event, in the
        configured format: with JSON logs, a JSON line a log pipeline can parse."""
        port, result = _run_on_a_taken_port(tmp_path, f"--log.format={log_format}")
        assert 2 == result.returncode, result.stderr
        failed = [line for line in result.stderr.splitlines() if "startup_failed" in line]
        assert 1 == len(failed), result.stderr
        assert f"cannot listen on 127.0.0.1:{port}" in failed[0]
        if log_format == "json":
            event = json.loads(failed[0])
            assert ("error", "startup_failed") == (event["level"], event["event"])
            assert all(json.loads(line) for line in result.stderr.splitlines())
        elif log_format == "logfmt":
            assert " level=error event=startup_failed error=" in failed[0]
        else:  # console: a line for people, "[error    ] startup_failed ..."
            assert (False, True) == (failed[0].startswith("{"), "[error" in failed[0])
        assert "Traceback" not in result.stderr

    async def test_sigterms_during_a_failed_start_cannot_change_its_exit(
        self, tmp_path: Path
    ) -> None:
        """SIGTERMs sent every few milliseconds from ``starting`` to the end of a start
        that fails (the port taken): the exit is still 2, the failure's, or, where the
        first SIGTERM came before the port was tried, 0 with ``stopped`` (nothing to
        listen for); never a death by the signal, in the loop or after it."""
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            process = await asyncio.create_subprocess_exec(
                *_exporter_on(tmp_path, port), stderr=asyncio.subprocess.PIPE
            )
            assert process.stderr is not None
            while b'"starting"' not in await process.stderr.readline():
                pass  # the handlers are in place from this line on
            while process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(process.wait(), 0.002)
            rest = await process.stderr.read()
        outcome = (process.returncode, rest.count(b'"startup_failed"'), rest.count(b'"stopped"'))
        assert outcome in ((2, 1, 0), (0, 0, 1))

    def test_the_start_says_what_it_runs_with(self, tmp_path: Path) -> None:
        """At --log.level=debug, before it fails: the soft open-files limit raised to the
        hard one (the collectors' kept files are budgeted from it), ``starting`` with the
        effective configuration, and, on glibc, no word of an untuned allocator."""
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        soft = min(256, hard)
        port, result = _run_on_a_taken_port(
            tmp_path, "--log.level=debug", "--node-name=gpu-7", soft_open_files=soft
        )
        events = [json.loads(line) for line in result.stderr.splitlines()]
        named = {event["event"]: event for event in events}
        raised = named.get("open_files_limit_raised", {})
        starting = named["starting"]
        assert (
            (soft, hard) if soft != hard else (None, None),
            ([f"127.0.0.1:{port}"], "gpu-7"),
            platform.libc_ver()[0] != "glibc",
        ) == (
            (raised.get("before"), raised.get("after")),
            (starting.get("listen_addresses"), starting.get("node_name")),
            "allocator_not_tuned" in named,
        )

    def test_the_log_level_holds_from_the_first_line(self, tmp_path: Path) -> None:
        """At --log.level=error the only line is the failure: no ``starting``."""
        _, result = _run_on_a_taken_port(tmp_path, "--log.level=error")
        assert ["startup_failed"] == [
            json.loads(line)["event"] for line in result.stderr.splitlines()
        ]


class TestExit:
    def test_what_a_throttle_holds_is_logged_before_stopped(self, tmp_path: Path) -> None:
        """Three plain-HTTP requests to the HTTPS port within one interval: the first is
        logged, the other two held back. A SIGTERM then ends the process before the
        interval does; the held two are told on the way out, not lost with the timer."""
        pki = make_pki(tmp_path / "pki")
        web_config = tmp_path / "web.yml"
        web_config.write_text(
            f"tls_server_config:\n  cert_file: {pki.cert('server')}\n"
            f"  key_file: {pki.key('server')}\n"
        )
        port = free_dual_stack_port()
        log_path = tmp_path / "exporter.log"
        command = _exporter_on(tmp_path, port, "--demo", f"--web.config.file={web_config}")
        with log_path.open("wb") as log, subprocess.Popen(command, stderr=log) as process:
            try:
                answered = 0
                deadline = time.monotonic() + 30  # a bound for a slow start, not a timing
                while answered < 3 and time.monotonic() < deadline:
                    assert process.poll() is None, log_path.read_text()[-2000:]
                    try:
                        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
                            conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                            if conn.recv(64).startswith(b"HTTP/1.1 400"):
                                answered += 1
                    except ConnectionRefusedError:
                        time.sleep(0.2)  # not listening yet
                assert answered == 3, log_path.read_text()[-2000:]
                process.send_signal(signal.SIGTERM)
                assert process.wait(timeout=30) == 0
            finally:
                if process.poll() is None:
                    process.kill()
        events = [json.loads(line) for line in log_path.read_text().splitlines()]
        told = [
            (e["event"], e.get("suppressed_since_last"))
            for e in events
            if e["event"] in ("http_request_on_https_port", "stopped")
        ]
        assert [
            ("http_request_on_https_port", 0),
            ("http_request_on_https_port", 1),
            ("stopped", None),
        ] == told
