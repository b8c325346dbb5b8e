"""Wire the parts together and run them: kubelet client, collectors, poller, HTTP server."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import signal
import ssl
import time
from collections.abc import Callable, Sequence
from ipaddress import IPv4Address, IPv6Address
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

from exporter import __version__
from exporter.auth import (
    PasswordChecker,
    access_middleware,
    response_headers,
)
from exporter.collectors import build_collectors
from exporter.collectors.base import Collector, CollectorContext
from exporter.collectors.runner import CollectorRunner
from exporter.config import Config, ConfigError, is_wildcard_host, join_host_port
from exporter.kubelet.client import KubeletClient
from exporter.logs import configure_logging
from exporter.lookup import CoalescingLookup
from exporter.memory import tune_allocator, tune_gc
from exporter.outage import Throttle, flush_held_lines
from exporter.poller import Poller
from exporter.ratelimit import TokenBucket
from exporter.store import SnapshotStore
from exporter.sysfs import raise_open_files_limit
from exporter.tlssite import make_site
from exporter.web import CLIENT_ERROR_LOG_INTERVAL_S, WebSettings, create_app, make_runner
from exporter.webconfig import LiveWebConfig, WebConfigError

if TYPE_CHECKING:  # the simulator is imported only when --demo asks for it
    from exporter.sim.node import SimulatedNode

__all__ = ["Exporter", "collector_context", "demo_collectors", "run", "serve"]

log = structlog.get_logger(__name__)

# Fresh /debug/allocations/{ns}/{pod} look-ups: a few per second at most, whatever
# the number of curls, so the kubelet's shared 100 QPS budget stays with the kubelet.
LOOKUP_RATE_PER_S = 2.0
LOOKUP_BURST = 5


def collector_context(config: Config) -> CollectorContext:
    """The filesystem roots collectors read, and their one other setting, from the flags."""
    return CollectorContext(
        sysfs=config.sysfs,
        procfs=config.procfs,
        kubelet_plugins=config.kubelet_plugins,
        cdi=config.cdi,
        pod_logs=config.pod_logs,
        nvml_energy_interval_s=config.nvml_energy_interval_s,
        nvml_gpm_interval_s=config.nvml_gpm_interval_s,
    )


class Exporter:
    """The running parts of one exporter, without the HTTP listener."""

    def __init__(self, config: Config, *, collectors: Sequence[Collector] | None = None) -> None:
        self.config = config
        if collectors is None:
            collectors = build_collectors(config.collectors, collector_context(config))
        self.client = KubeletClient(
            socket_path=config.kubelet_socket,
            max_message_bytes=config.kubelet_max_message_bytes,
            timeout_s=config.kubelet_timeout_s,
            # Fresh look-ups wait out at most half a poll after a failed call (the
            # poller's own calls are never held back).
            backoff_max_s=config.poll_interval_s / 2,
        )
        self.runner = CollectorRunner(collectors, timeout_s=config.collector_timeout_s)
        self.store = SnapshotStore()
        self.poller = Poller(
            client=self.client,
            runner=self.runner,
            store=self.store,
            node=config.node_name,
            interval_s=config.poll_interval_s,
        )
        self.lookup = CoalescingLookup(
            lambda namespace, name: self.client.get_pod(namespace=namespace, name=name),
            bucket=TokenBucket(rate_per_s=LOOKUP_RATE_PER_S, burst=LOOKUP_BURST),
        )

    def create_app(self, *, middlewares: Sequence[object] = ()) -> web.Application:
        return create_app(
            store=self.store,
            settings=WebSettings(
                poll_interval_s=self.config.poll_interval_s, enable_debug=self.config.enable_debug
            ),
            lookup=self.lookup,
            middlewares=tuple(middlewares),
        )

    async def close(self) -> None:
        await self.client.close()
        self.runner.close()  # logs each collector still stuck in a read (abandoned)


def demo_collectors(
    config: Config, node: SimulatedNode, *, clock: Callable[[], float] = time.monotonic
) -> list[Collector]:
    """The enabled collectors, with the simulated GPUs (on ``clock``) standing in for NVML."""
    from exporter.collectors.gpu_processes import GpuProcessesCollector
    from exporter.collectors.nvml import NvmlCollector
    from exporter.sim.gpus import SimulatedNvmlSource

    context = collector_context(config)
    nvml_users = ("nvml", "gpu_processes")
    collectors = build_collectors([n for n in config.collectors if n not in nvml_users], context)
    if "nvml" in config.collectors:
        source = SimulatedNvmlSource(node.scenario.hardware, clock=clock)
        collectors.insert(0, NvmlCollector(context, source=source, clock=clock))
    if "gpu_processes" in config.collectors:
        source = SimulatedNvmlSource(node.scenario.hardware, clock=clock)
        collectors.append(GpuProcessesCollector(context, source=source))
    return collectors


def _live_web_configs(config: Config) -> tuple[LiveWebConfig | None, LiveWebConfig | None]:
    """--web.config.file and --web.debug-auth.file, loaded and kept current."""
    web_config = debug_users = None
    if config.web_config_file is not None:
        web_config = LiveWebConfig(config.web_config_file)
    if config.debug_auth_file is not None:
        debug_users = LiveWebConfig(config.debug_auth_file, users_only=True)
    return web_config, debug_users


async def serve(config: Config, *, stop: asyncio.Event) -> None:
    """Run until ``stop`` is set; ConfigError when the set-up cannot work."""
    try:
        web_config, debug_users = _live_web_configs(config)
    except WebConfigError as error:
        raise ConfigError(str(error)) from None
    ssl_context = web_config.ssl_context() if web_config is not None else None
    checker = PasswordChecker()
    middlewares = [
        access_middleware(web_config=web_config, debug_users=debug_users, checker=checker)
    ]

    sim_node = None
    collectors = None
    if config.demo:
        from exporter.sim.node import SimulatedNode
        from exporter.sim.scenario import DemoScenario

        sim_node = SimulatedNode(DemoScenario.create())
        await sim_node.start(tick_interval_s=config.poll_interval_s)
        config = dataclasses.replace(
            config,
            kubelet_socket=sim_node.socket_path,
            sysfs=sim_node.sysfs,
            procfs=sim_node.procfs,
            kubelet_plugins=sim_node.kubelet_plugins,
            cdi=(sim_node.cdi,),
            pod_logs=sim_node.pod_logs,
        )
        collectors = demo_collectors(config, sim_node)

    log.info("starting", version=__version__, **config.as_log_fields())
    if config.unknown_environment:
        log.warning(
            "environment_variable_unknown",
            variables=list(config.unknown_environment),
            hint="no flag reads these; see --help for each flag's variable",
        )
    exporter = Exporter(config, collectors=collectors)
    app = exporter.create_app(middlewares=middlewares)
    app.on_response_prepare.append(response_headers(web_config))
    runner = make_runner(app)
    await runner.setup()
    try:
        if stop.is_set():
            return  # stopped while starting (SIGTERM at a rollout): nothing to listen for
        for host, port in config.listen_addresses:
            try:
                await _listen(runner, host, port, ssl_context=ssl_context)
            except OSError as error:
                raise ConfigError(
                    f"cannot listen on {join_host_port(host, port)}: {error.strerror or error}"
                ) from None
        for address in runner.addresses:  # as bound: the port ":0" chose, each family
            log.info(
                "listening",
                address=join_host_port(address[0], address[1]),
                tls=ssl_context is not None,
            )
        polling = asyncio.create_task(exporter.poller.run())
        await stop.wait()
        polling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await polling
    finally:
        await runner.cleanup()
        await exporter.close()
        checker.close()
        if sim_node is not None:
            await sim_node.stop()


async def _listen(
    runner: web.BaseRunner, host: str, port: int, *, ssl_context: ssl.SSLContext | None
) -> None:
    """Serve one listen address. A wildcard is every address of both families, a socket
    each; with port 0, IPv6 takes the port IPv4 was given, so the address has one port
    as Go's one dual-stack socket has (asyncio would draw one per family)."""
    bind = _bind_host(host)
    if bind is not None or port != 0:
        bound = len(runner.addresses)
        await make_site(runner, bind, port, ssl_context=ssl_context).start()
        if bind is not None and len(runner.addresses) == bound:
            # asyncio (and the TLS listener, as it) skips a family the kernel lacks:
            # an address of that family alone would be served by nothing, unsaid.
            raise OSError(errno.EAFNOSUPPORT, "its address family is not supported here")
        return
    await make_site(runner, str(IPv4Address(0)), 0, ssl_context=ssl_context).start()
    chosen = runner.addresses[-1][1]
    # Where the kernel has no IPv6, no socket is made for its unspecified address and
    # nothing starts, as for a wildcard's IPv6 half.
    await make_site(runner, str(IPv6Address(0)), chosen, ssl_context=ssl_context).start()


def _bind_host(host: str) -> str | None:
    """What to bind for a listen host: a wildcard (``is_wildcard_host``) is every
    address of both families, None to asyncio (a socket each)."""
    return None if is_wildcard_host(host) else host


class _Signals:
    """SIGTERM/SIGINT stop once (a repeat is logged, not fatal); SIGHUP is logged and ignored.
    Once stopped, all three are ignored until the process has exited."""

    def __init__(self, stop: asyncio.Event) -> None:
        self._stop = stop

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_stop, signum)
        loop.add_signal_handler(signal.SIGHUP, self._on_hangup)

    def ignore_from_now(self, loop: asyncio.AbstractEventLoop) -> None:
        """Stopped: a late SIGTERM/SIGINT/SIGHUP is ignored. Left to the loop's clean-up,
        the handlers went back to the defaults while the process was still exiting, and a
        second signal then killed it (exit 143, 130 or 129 instead of 0).

        In one step: ``loop.remove_signal_handler`` puts the default action back before
        SIG_IGN could replace it, and a signal in between killed the process (the
        port-taken test, sending SIGTERM every 2 ms, once died so: -15). So the action
        goes straight from the loop's handler to SIG_IGN, and the loop forgets the handler
        without touching the action (its close() would put the default back)."""
        handlers = getattr(loop, "_signal_handlers", None)  # asyncio's unix loop's own
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            if isinstance(handlers, dict):
                signal.signal(signum, signal.SIG_IGN)
                handlers.pop(signum, None)
            else:  # another loop: its public way, with the gap
                loop.remove_signal_handler(signum)
                signal.signal(signum, signal.SIG_IGN)
        if isinstance(handlers, dict) and not handlers:
            signal.set_wakeup_fd(-1)  # as remove_signal_handler does for the last one

    def _on_stop(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self._stop.is_set():
            log.info("stop_already_requested", signal=name)
            return
        self._stop.set()  # first: nothing, not even a failing log write, may keep it
        log.info("stopping", signal=name)

    def _on_hangup(self) -> None:
        log.info(
            "sighup_ignored",
            reason="the web config is re-read when its files change; restart for flags",
        )


class _LoopErrors:
    """The event loop's exception handler: one JSON line per error, no traceback, and
    accept() failing for want of file descriptors once per interval, not per attempt."""

    def __init__(self, *, interval_s: float = CLIENT_ERROR_LOG_INTERVAL_S) -> None:
        self._accept = Throttle("accept_failed", interval_s=interval_s)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        message = str(context.get("message", ""))
        if isinstance(error, OSError) and "accept" in message:
            self._accept.warning(
                error=error.strerror or str(error),
                errno=error.errno,
                hint="raise the open-files limit or find who holds the connections",
            )
            return
        log.error(
            "event_loop_error",
            message=message,
            error=f"{type(error).__name__}: {error}" if error is not None else None,
        )


def run(config: Config) -> None:
    """Configure logging and serve until SIGTERM or SIGINT. A set-up that cannot work (the
    port taken, a bad web config file) is logged as ``startup_failed``, then exit 2."""
    configure_logging(level=config.log_level, fmt=config.log_format)
    if not tune_allocator():
        log.info("allocator_not_tuned", reason="not glibc: freed memory may stay resident")
    tune_gc()
    # Before the collectors exist: their kept sysfs files are budgeted from the limit.
    before, after = raise_open_files_limit()
    if before != after:
        log.debug("open_files_limit_raised", before=before, after=after)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(_LoopErrors())
        signals = _Signals(stop)
        signals.install(loop)
        try:
            await serve(config, stop=stop)
        finally:
            signals.ignore_from_now(loop)
            flush_held_lines()
        log.info("stopped")

    try:
        asyncio.run(main())
    except ConfigError as error:
        # Logging is set up by now: the failure goes out as one event in the configured
        # format (a JSON line where the log pipeline expects JSON), with exit status 2.
        log.error("startup_failed", error=str(error))
        raise SystemExit(2) from None
