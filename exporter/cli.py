"""Command line -> one frozen Config, in the Prometheus ecosystem's flag style.

Every flag can also come from an environment variable, named after the flag:
``--kubelet.socket`` <- ``PODRESOURCES_EXPORTER_KUBELET_SOCKET``. A flag given on the
command line wins. Bad values end the process at start with one line and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from exporter import __version__
from exporter.collectors import registrations
from exporter.logs import LOG_FORMATS, LOG_LEVELS

__all__ = ["Config", "ConfigError", "main", "parse_config"]

ENV_PREFIX = "PODRESOURCES_EXPORTER_"
DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
DEFAULT_LISTEN_ADDRESS = ":9410"
DEFAULT_COLLECTOR_TIMEOUT_S = 5.0
DEFAULT_KUBELET_PLUGINS = "/var/lib/kubelet/plugins"
DEFAULT_CDI = "/var/run/cdi:/etc/cdi"


class ConfigError(Exception):
    """A flag or environment value is unusable; the message is one line."""


@dataclass(frozen=True, slots=True)
class Config:
    kubelet_socket: str
    kubelet_max_message_bytes: int
    kubelet_timeout_s: float
    poll_interval_s: float
    collector_timeout_s: float
    listen_host: str
    listen_port: int
    web_config_file: Path | None
    debug_auth_file: Path | None
    enable_debug: bool
    sysfs: Path
    procfs: Path
    kubelet_plugins: Path
    cdi: tuple[Path, ...]  # CDI spec directories, the first listed wins a duplicate name
    collectors: tuple[str, ...]  # enabled, in registry order
    node_name: str
    log_level: str
    log_format: str
    demo: bool
    pod_logs: Path = Path("/var/log/pods")

    def as_log_fields(self) -> dict[str, Any]:
        """The effective configuration, for the start-up log line."""
        return {
            "kubelet_socket": self.kubelet_socket,
            "kubelet_max_message_bytes": self.kubelet_max_message_bytes,
            "kubelet_timeout_s": self.kubelet_timeout_s,
            "poll_interval_s": self.poll_interval_s,
            "collector_timeout_s": self.collector_timeout_s,
            "listen_address": f"{self.listen_host}:{self.listen_port}",
            "web_config_file": str(self.web_config_file) if self.web_config_file else None,
            "debug_auth_file": str(self.debug_auth_file) if self.debug_auth_file else None,
            "enable_debug": self.enable_debug,
            "sysfs": str(self.sysfs),
            "procfs": str(self.procfs),
            "kubelet_plugins": str(self.kubelet_plugins),
            "cdi": [str(p) for p in self.cdi],
            "pod_logs": str(self.pod_logs),
            "collectors": list(self.collectors),
            "node_name": self.node_name,
            "demo": self.demo,
        }


def env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").replace(".", "_").replace("-", "_").upper()


def _positive(kind: Callable[[str], float | int], what: str) -> Callable[[str], Any]:
    def convert(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number, not {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{what} must be greater than 0, not {text!r}")
        return value

    return convert


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")


def parse_listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` (every address of every family: host "") or ``[IPv6]:PORT``."""
    host, separator, port_text = text.rpartition(":")
    if not separator or not port_text.isdigit() or int(port_text) > 65535:
        raise ConfigError(f"--web.listen-address {text!r}: expected HOST:PORT, e.g. :9410")
    host = host.removeprefix("[").removesuffix("]")
    return host, int(port_text)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or isinstance(action.default, bool):
            return action.help  # "(default: None)" and on/off defaults say nothing useful
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, no usage dump: it lands in a pod's log.
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _build_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="podresources-exporter",
        description=(
            "Prometheus exporter for Kubernetes nodes: which pod and container holds which "
            "device, exclusive CPU, memory block and DRA claim (kubelet PodResources API), "
            "joined with GPU, NIC, RDMA, CPU and NUMA telemetry. Every flag can also be set "
            f"through the environment variable shown, {ENV_PREFIX}<FLAG>."
        ),
        formatter_class=_HelpFormatter,
    )

    def add(flag: str, *, help: str, **kwargs: Any) -> None:
        variable = env_name(flag)
        if variable in environ and "default" in kwargs:
            kwargs["default"] = environ[variable]
        parser.add_argument(flag, help=f"{help} [env {variable}]", **kwargs)

    add(
        "--kubelet.socket",
        help="kubelet PodResources socket",
        default=DEFAULT_SOCKET,
        metavar="PATH",
        dest="kubelet_socket",
    )
    add(
        "--kubelet.max-message-bytes",
        help="largest kubelet reply accepted, in bytes",
        default=DEFAULT_MAX_MESSAGE_BYTES,
        type=_positive(int, "--kubelet.max-message-bytes"),
        metavar="N",
        dest="kubelet_max_message_bytes",
    )
    add(
        "--kubelet.timeout",
        help="deadline of every kubelet call, in seconds",
        default=5.0,
        type=_positive(float, "--kubelet.timeout"),
        metavar="SECONDS",
        dest="kubelet_timeout",
    )
    add(
        "--poll.interval",
        help="seconds between polls of the kubelet and the collectors",
        default=10.0,
        type=_positive(float, "--poll.interval"),
        metavar="SECONDS",
        dest="poll_interval",
    )
    add(
        "--collector.timeout",
        help="how long one collector may take in a poll, in seconds "
        f"(default: {DEFAULT_COLLECTOR_TIMEOUT_S:g}, or the poll interval when shorter)",
        default=None,
        type=_positive(float, "--collector.timeout"),
        metavar="SECONDS",
        dest="collector_timeout",
    )
    add(
        "--web.listen-address",
        help="address to serve HTTP on, HOST:PORT",
        default=DEFAULT_LISTEN_ADDRESS,
        metavar="HOST:PORT",
        dest="listen_address",
    )
    add(
        "--web.config.file",
        help="TLS and basic auth configuration (Prometheus exporter-toolkit web config format)",
        default=None,
        metavar="PATH",
        dest="web_config_file",
    )
    add(
        "--web.debug-auth.file",
        help="basic_auth_users (exporter-toolkit format) that /debug/* requires instead of "
        "--web.config.file's; re-read when it changes",
        default=None,
        metavar="PATH",
        dest="debug_auth_file",
    )
    add(
        "--web.enable-debug",
        help="serve /debug/allocations (on by default)",
        default=True,
        action=argparse.BooleanOptionalAction,
        dest="enable_debug",
    )
    add("--path.sysfs", help="sysfs mount point", default="/sys", metavar="PATH", dest="sysfs")
    add("--path.procfs", help="procfs mount point", default="/proc", metavar="PATH", dest="procfs")
    add(
        "--path.kubelet-plugins",
        help="kubelet plugins directory: DRA drivers' checkpoints and KEP-5304 device metadata",
        default=DEFAULT_KUBELET_PLUGINS,
        metavar="PATH",
        dest="kubelet_plugins",
    )
    add(
        "--path.cdi",
        help="CDI spec directories, colon-separated; the first listed wins a duplicate name",
        default=DEFAULT_CDI,
        metavar="PATHS",
        dest="cdi",
    )
    add(
        "--path.pod-logs",
        help="the kubelet's pod-log directory: pod UID -> namespace/pod/container, for "
        "--collector.gpu_processes",
        default="/var/log/pods",
        metavar="PATH",
        dest="pod_logs",
    )
    for registration in registrations():
        state = "on" if registration.enabled_by_default else "off"
        add(
            f"--collector.{registration.name}",
            help=f"collector: {registration.help} ({state} by default)",
            default=registration.enabled_by_default,
            action=argparse.BooleanOptionalAction,
            dest=f"collector_{registration.name}",
        )
    add(
        "--node-name",
        help="this node's name (default: $NODE_NAME, else the host name)",
        default=environ.get("NODE_NAME") or socket.gethostname(),
        metavar="NAME",
        dest="node_name",
    )
    add(
        "--log.level",
        help="lowest level logged",
        default="info",
        choices=LOG_LEVELS,
        dest="log_level",
    )
    add(
        "--log.format",
        help="log line format",
        default="json",
        choices=LOG_FORMATS,
        dest="log_format",
    )
    add(
        "--demo",
        help="serve a built-in simulated node (no kubelet or GPU needed)",
        default=False,
        action=argparse.BooleanOptionalAction,
        dest="demo",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def _coerce_env_defaults(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """Environment values arrive as text: convert them as the flag would, or fail."""
    for action in parser._actions:
        if not action.option_strings or action.dest in ("help", "version"):
            continue
        flag = next(s for s in action.option_strings if not s.startswith("--no-"))
        text = environ.get(env_name(flag))
        if text is None:
            continue
        try:
            if isinstance(action, argparse.BooleanOptionalAction):
                value: Any = _boolean(text)
            elif action.type is not None and callable(action.type):
                value = action.type(text)
            else:
                value = text
        except argparse.ArgumentTypeError as error:
            raise ConfigError(f"{env_name(flag)}: {error}") from None
        if action.choices is not None and value not in action.choices:
            raise ConfigError(
                f"{env_name(flag)}: {value!r} is not one of {', '.join(map(str, action.choices))}"
            )
        action.default = value


def parse_config(argv: Sequence[str], environ: Mapping[str, str]) -> Config:
    """Flags and environment -> Config; ConfigError or SystemExit(2) on bad values."""
    parser = _build_parser(environ)
    _coerce_env_defaults(parser, environ)
    args = parser.parse_args(list(argv))
    host, port = parse_listen_address(args.listen_address)
    web_config = Path(args.web_config_file) if args.web_config_file else None
    if web_config is not None and not web_config.is_file():
        raise ConfigError(f"--web.config.file {web_config}: no such file")
    debug_auth = Path(args.debug_auth_file) if args.debug_auth_file else None
    if debug_auth is not None and not debug_auth.is_file():
        raise ConfigError(f"--web.debug-auth.file {debug_auth}: no such file")
    for flag, path in (("--path.sysfs", args.sysfs), ("--path.procfs", args.procfs)):
        if not args.demo and not Path(path).is_dir():
            raise ConfigError(f"{flag} {path}: not a directory")
    collector_timeout = args.collector_timeout or min(
        DEFAULT_COLLECTOR_TIMEOUT_S, args.poll_interval
    )
    if collector_timeout > args.poll_interval:
        raise ConfigError(
            f"--collector.timeout {collector_timeout:g}s is longer than "
            f"--poll.interval {args.poll_interval:g}s"
        )
    if args.kubelet_max_message_bytes < 4096:
        raise ConfigError("--kubelet.max-message-bytes must be at least 4096")
    return Config(
        kubelet_socket=args.kubelet_socket,
        kubelet_max_message_bytes=args.kubelet_max_message_bytes,
        kubelet_timeout_s=args.kubelet_timeout,
        poll_interval_s=args.poll_interval,
        collector_timeout_s=collector_timeout,
        listen_host=host,
        listen_port=port,
        web_config_file=web_config,
        debug_auth_file=debug_auth,
        enable_debug=args.enable_debug,
        sysfs=Path(args.sysfs),
        procfs=Path(args.procfs),
        kubelet_plugins=Path(args.kubelet_plugins),
        cdi=tuple(Path(p) for p in args.cdi.split(":") if p),
        collectors=tuple(r.name for r in registrations() if getattr(args, f"collector_{r.name}")),
        node_name=args.node_name,
        log_level=args.log_level,
        log_format=args.log_format,
        demo=args.demo,
        pod_logs=Path(args.pod_logs),
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Console script entry point."""
    # gRPC's C core logs connection chatter at INFO; our own log says what matters.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    try:
        config = parse_config(sys.argv[1:] if argv is None else argv, os.environ)
    except ConfigError as error:
        sys.stderr.write(f"podresources-exporter: error: {error}\n")
        raise SystemExit(2) from None
    from exporter.app import run  # heavy imports only once the flags are good

    try:
        run(config)
    except ConfigError as error:
        sys.stderr.write(f"podresources-exporter: error: {error}\n")
        raise SystemExit(2) from None
