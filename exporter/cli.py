"""Command line -> one frozen Config, in the Prometheus ecosystem's flag style.

Every flag can also come from an environment variable, named after the flag:
``--kubelet.socket`` <- ``PODRESOURCES_EXPORTER_KUBELET_SOCKET``. A flag given on the
command line wins. Bad values end the process at start with one line and exit code 2.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from exporter import __version__
from exporter.collectors import registrations
from exporter.config import (
    DEFAULT_CDI,
    DEFAULT_COLLECTOR_TIMEOUT_S,
    DEFAULT_KUBELET_PLUGINS,
    DEFAULT_KUBELET_TIMEOUT_S,
    DEFAULT_LISTEN_ADDRESS,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_NVML_ENERGY_INTERVAL_S,
    DEFAULT_NVML_GPM_INTERVAL_S,
    DEFAULT_POLL_INTERVAL_S,
    DEFAULT_SOCKET,
    Config,
    ConfigError,
    is_wildcard_host,
    join_host_port,
)
from exporter.go_duration import parse_go_duration_ns
from exporter.logs import LOG_FORMATS, LOG_LEVELS

__all__ = ["env_name", "main", "parse_config", "parse_listen_address"]

ENV_PREFIX = "PODRESOURCES_EXPORTER_"
# Ranges every numeric flag is held to: a poll below 1 s would spend the kubelet's
# node-wide 100 QPS budget; gRPC's message limits are signed 32-bit.
MIN_POLL_INTERVAL_S = 1.0
# Readiness (3 intervals), the snapshot's age and the outage alerts assume polls minutes
# apart at most; a longer interval is a typo (1e300, ms for s) more likely than a wish.
MAX_POLL_INTERVAL_S = 3600.0
MIN_MAX_MESSAGE_BYTES = 4096
MAX_MAX_MESSAGE_BYTES = 2**31 - 1
MAX_SOCKET_PATH_BYTES = 107


def env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").replace(".", "_").replace("-", "_").upper()


def _plain(number: float) -> str:
    """1 for 1.0, 2147483647 for 2**31 - 1 (where :g writes 2.14748e+09)."""
    return str(number) if isinstance(number, int) else f"{number:g}"


_URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_UNIX_SCHEME = re.compile(r"^unix:(?://)?", re.IGNORECASE)  # a URI scheme has no case
# ASCII only: float() and int() also take Arabic-Indic and other Unicode digits and
# "1_0", which no other exporter's flags do.
_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
_INTEGER = re.compile(r"[+-]?[0-9]+")


def _seconds(text: str) -> float:
    """Seconds from a plain number (``10``, ``2.5``) or a Go duration (``10s``, ``1m30s``,
    ``+500ms``), blanks around either dropped as for every number flag; ValueError for
    anything else."""
    stripped = text.strip()
    if _NUMBER.fullmatch(stripped) or stripped.lower().lstrip("+-") in ("nan", "inf", "infinity"):
        return float(stripped)  # nan and inf for the caller to refuse by name
    return parse_go_duration_ns(stripped) / 1e9


def _integer(text: str) -> int:
    if not _INTEGER.fullmatch(text.strip()):
        raise ValueError(f"not an integer: {text!r}")
    return int(text)


def _number(
    kind: Callable[[str], float | int],
    flag: str,
    *,
    minimum: float,
    maximum: float = math.inf,
    exclusive_minimum: bool = False,
) -> Callable[[str], Any]:
    """A finite number within [minimum, maximum] (or (minimum, maximum]): nan and inf fail."""
    low = f"greater than {_plain(minimum)}" if exclusive_minimum else f"at least {_plain(minimum)}"
    expected = "seconds or a duration such as 10s or 1m" if kind is _seconds else "a whole number"

    def convert(text: str) -> float | int:
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{flag} must be {expected}, not {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{flag} must be a finite number, not {text!r}")
        if value < minimum or (exclusive_minimum and value == minimum):
            raise argparse.ArgumentTypeError(f"{flag} must be {low}, not {text!r}")
        if value > maximum:
            raise argparse.ArgumentTypeError(
                f"{flag} must be at most {_plain(maximum)}, not {text!r}"
            )
        return value

    return convert


def _socket_path(text: str) -> str:
    # The endpoint forms kubelet and CRI configs write (unix:///var/lib/..., and gRPC's
    # unix:/var/lib/...): the path.
    text = _UNIX_SCHEME.sub("", text, count=1)
    if _URL_SCHEME.match(text):
        # The kubelet serves PodResources on a unix socket only; a tcp:// or other
        # endpoint would fail every poll as "no such file".
        raise argparse.ArgumentTypeError(
            f"--kubelet.socket takes a unix socket path or unix:///path, not {text!r}"
        )
    # sockaddr_un.sun_path holds 108 bytes with the terminating NUL: a longer path can
    # never be connected to, and gRPC would only say UNAVAILABLE on every poll.
    if not text:
        raise argparse.ArgumentTypeError("--kubelet.socket must not be empty")
    size = len(text.encode("utf-8", "surrogateescape"))
    if size > MAX_SOCKET_PATH_BYTES:
        raise argparse.ArgumentTypeError(
            f"--kubelet.socket is {size} bytes long; a unix socket path holds at most "
            f"{MAX_SOCKET_PATH_BYTES}"
        )
    return text


def _path(flag: str) -> Callable[[str], str]:
    """A directory path that is not empty: Path("") is the working directory, so an
    empty variable (a templating slip) would read the container's own files instead."""

    def convert(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{flag} must not be empty")
        return text

    return convert


def _log_level(text: str) -> str:
    return "warning" if text == "warn" else text


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")


def parse_listen_address(text: str, *, source: str = "--web.listen-address") -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` (every address of every family: host "") or ``[IPv6]:PORT``;
    an IPv6 host needs its brackets, as Go's net.SplitHostPort has it."""
    host, separator, port_text = text.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if (
        not separator
        or not (port_text.isascii() and port_text.isdigit())  # int() refuses "²"
        or int(port_text) > 65535
        or host.startswith("[") != host.endswith("]")  # half a bracket
        or (":" in host and not bracketed)  # "::1:9410": which colon ends the host?
    ):
        raise ConfigError(
            f"{source} {text!r}: expected HOST:PORT, e.g. :9410 or [::1]:9410 for IPv6"
        )
    host = host.removeprefix("[").removesuffix("]")
    return host, int(port_text)


def _refuse_overlapping_listens(addresses: Sequence[tuple[str, int]]) -> None:
    """ConfigError where two addresses would bind one port twice: a wildcard host
    (``is_wildcard_host``) listens on every address of both families, so ``:9410``
    beside ``0.0.0.0:9410`` or ``127.0.0.1:9410`` could only fail at bind time, less
    clearly.
    Port 0 asks for a free port each time, and an address given twice is served once."""
    wildcards: dict[int, str] = {}
    for host, port in dict.fromkeys(addresses):
        if port and is_wildcard_host(host):
            wildcards.setdefault(port, join_host_port(host, port))
    for host, port in dict.fromkeys(addresses):
        wildcard = wildcards.get(port)
        given = join_host_port(host, port)
        if wildcard is not None and given != wildcard:
            raise ConfigError(
                f"--web.listen-address {wildcard} and {given} overlap: a wildcard host"
                " listens on every address of both families; give one of them"
            )


# --demo shows per-process attribution, off by default elsewhere, unless told not to.
_DEMO_ALSO = "gpu_processes"


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or isinstance(action.default, bool):
            return action.help  # "(default: None)" and on/off defaults say nothing useful
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    def __init__(self, **kwargs: Any) -> None:
        self.variables: set[str] = set()  # each flag's environment variable
        super().__init__(**kwargs)

    def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
        if kwargs.get("action") not in ("help", "version"):  # no variable stands for them
            self.variables.update(env_name(n) for n in names if str(n).startswith("--"))
        return super().add_argument(*names, **kwargs)

    def error(self, message: str) -> NoReturn:
        # One line, no usage dump: it lands in a pod's log.
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _build_parser(environ: Mapping[str, str]) -> _Parser:
    parser = _Parser(
        prog="podresources-exporter",
        allow_abbrev=False,  # a typo or a prefix is an error, as kingpin's exact flag names
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
            try:
                kwargs["default"] = _from_env(variable, environ[variable], kwargs)
            except ConfigError as error:
                # Refused only where it is used: the flag may override it, and --help
                # and --version must work whatever the environment holds.
                kwargs["default"] = _BadEnvironment(variable, error)
        parser.add_argument(flag, help=f"{help} [env {variable}]", **kwargs)

    add(
        "--kubelet.socket",
        help="kubelet PodResources socket",
        default=DEFAULT_SOCKET,
        type=_socket_path,
        metavar="PATH",
        dest="kubelet_socket",
    )
    add(
        "--kubelet.max-message-bytes",
        help="largest kubelet reply accepted, in bytes; a bigger one is refused and the "
        "last good data kept. Raise the memory limit with it: each MiB of device IDs "
        "costs ~80 MiB of RSS (40-byte IDs) to ~25 MiB (200-byte IDs)",
        default=DEFAULT_MAX_MESSAGE_BYTES,
        type=_number(
            _integer,
            "--kubelet.max-message-bytes",
            minimum=MIN_MAX_MESSAGE_BYTES,
            maximum=MAX_MAX_MESSAGE_BYTES,
        ),
        metavar="N",
        dest="kubelet_max_message_bytes",
    )
    add(
        "--kubelet.timeout",
        help="deadline of every kubelet call: seconds, or a duration such as 5s "
        f"(default: {DEFAULT_KUBELET_TIMEOUT_S:g}, or the poll interval when shorter)",
        default=None,
        type=_number(_seconds, "--kubelet.timeout", minimum=0, exclusive_minimum=True),
        metavar="SECONDS",
        dest="kubelet_timeout",
    )
    add(
        "--poll.interval",
        help="time between polls of the kubelet and the collectors: seconds, or a duration "
        "such as 30s or 1m; from 1s to 1h",
        default=DEFAULT_POLL_INTERVAL_S,
        type=_number(
            _seconds, "--poll.interval", minimum=MIN_POLL_INTERVAL_S, maximum=MAX_POLL_INTERVAL_S
        ),
        metavar="SECONDS",
        dest="poll_interval",
    )
    add(
        "--collector.timeout",
        help="how long one collector may take in a poll: seconds, or a duration such as 5s "
        f"(default: {DEFAULT_COLLECTOR_TIMEOUT_S:g}, or the poll interval when shorter)",
        default=None,
        type=_number(_seconds, "--collector.timeout", minimum=0, exclusive_minimum=True),
        metavar="SECONDS",
        dest="collector_timeout",
    )
    # Repeatable, as exporter-toolkit's: a flag given replaces the environment's
    # address, so this one takes its default after parsing.
    parser.add_argument(
        "--web.listen-address",
        help="address to serve HTTP on, HOST:PORT; repeat the flag for more than one (one "
        "a line in the variable). "
        f"A wildcard host (:PORT, 0.0.0.0, [::]) is every address of both families "
        f"(default: {DEFAULT_LISTEN_ADDRESS}) [env {env_name('--web.listen-address')}]",
        action="append",
        metavar="HOST:PORT",
        dest="listen_address",
    )
    add(
        "--web.config.file",
        help="TLS, client certificates, headers, rate limit and basic auth (Prometheus "
        "exporter-toolkit web config format); re-read when it or a file it names changes",
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
    for filesystem, mounted_at in (("sysfs", "/sys"), ("procfs", "/proc")):
        flag = f"--path.{filesystem}"
        add(
            flag,
            help=f"{filesystem} mount point",
            default=mounted_at,
            type=_path(flag),
            metavar="PATH",
            dest=filesystem,
        )
    add(
        "--path.kubelet-plugins",
        help="kubelet plugins directory: DRA drivers' checkpoints and KEP-5304 device metadata",
        default=DEFAULT_KUBELET_PLUGINS,
        type=_path("--path.kubelet-plugins"),
        metavar="PATH",
        dest="kubelet_plugins",
    )
    add(
        "--path.cdi",
        help="CDI spec directories, colon-separated; the first listed wins a name several "
        "define; two specs of one directory naming a device conflict, and that name is "
        "used from none (as in CDI)",
        default=DEFAULT_CDI,
        metavar="PATHS",
        dest="cdi",
    )
    add(
        "--path.pod-logs",
        help="the kubelet's pod-log directory: pod UID -> namespace/pod/container, for "
        "--collector.gpu_processes",
        default="/var/log/pods",
        type=_path("--path.pod-logs"),
        metavar="PATH",
        dest="pod_logs",
    )
    for registration in registrations():
        state = "on" if registration.enabled_by_default else "off"
        demo_too = registration.name == _DEMO_ALSO
        add(
            f"--collector.{registration.name}",
            help=f"collector: {registration.help} ({state} by default"
            + (", on with --demo)" if demo_too else ")"),
            # None: neither the flag nor its variable said; --demo then decides.
            default=None if demo_too else registration.enabled_by_default,
            action=argparse.BooleanOptionalAction,
            dest=f"collector_{registration.name}",
        )
    add(
        "--collector.nvml.energy-interval",
        help="how often each NVIDIA GPU's energy counter is read: seconds, or a duration such as "
        "30s; polls in between serve the last reading. NVIDIA's driver takes ~3 ms of CPU "
        "per GPU to answer it, more than the rest of a poll; 0 reads it every poll",
        default=DEFAULT_NVML_ENERGY_INTERVAL_S,
        type=_number(_seconds, "--collector.nvml.energy-interval", minimum=0),
        metavar="SECONDS",
        dest="nvml_energy_interval",
    )
    add(
        "--collector.nvml.gpm-interval",
        help="how often each NVIDIA GPU's performance monitors (GPM: SM, tensor and DRAM "
        "activity, PCIe traffic; Hopper and later) are measured: seconds, or a duration "
        "such as 30s. Each measurement averages over the time since the last, and polls in "
        "between serve it again. NVIDIA's driver takes ~1-2 ms of CPU per GPU to answer; "
        "0 measures every poll",
        default=DEFAULT_NVML_GPM_INTERVAL_S,
        type=_number(_seconds, "--collector.nvml.gpm-interval", minimum=0),
        metavar="SECONDS",
        dest="nvml_gpm_interval",
    )
    add(
        "--node-name",
        help="this node's name, from $NODE_NAME where set, else the host name",
        default=environ.get("NODE_NAME") or socket.gethostname(),
        metavar="NAME",
        dest="node_name",
    )
    add(
        "--log.level",
        help="lowest level logged (warn, as Prometheus' own flags name it, is warning)",
        default="info",
        type=_log_level,
        choices=LOG_LEVELS,
        dest="log_level",
    )
    add(
        "--log.format",
        help="log line format: JSON lines, logfmt lines, or console (for people)",
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


class _BadEnvironment:
    """A flag's default from an environment value that does not convert: an error
    when no flag overrides it."""

    def __init__(self, variable: str, error: ConfigError) -> None:
        self.variable = variable
        self.error = error

    def __repr__(self) -> str:  # as --help shows the default
        return f"invalid {self.variable}"


def _from_env(variable: str, text: str, spec: Mapping[str, Any]) -> Any:
    """An environment value, converted and checked as the flag's own value would be."""
    try:
        if spec.get("action") is argparse.BooleanOptionalAction:
            value: Any = _boolean(text)
        else:
            value = spec["type"](text) if "type" in spec else text
    except argparse.ArgumentTypeError as error:
        raise ConfigError(f"{variable}: {error}") from None
    choices = spec.get("choices")
    if choices is not None and value not in choices:
        raise ConfigError(f"{variable}: {value!r} is not one of {', '.join(map(str, choices))}")
    return value


def _config_file(flag: str, text: str | None) -> Path | None:
    if not text:
        return None
    path = Path(text)
    if path.is_dir():
        raise ConfigError(f"{flag} {path}: is a directory; name the file in it")
    if not path.is_file():
        raise ConfigError(f"{flag} {path}: no such file")
    return path


def _within_interval(flag: str, given: float | None, default: float, interval: float) -> float:
    """A timeout in (0, interval]: a poll must end before the next one starts."""
    if given is None:
        return min(default, interval)
    if given > interval:
        raise ConfigError(f"{flag} {given:g}s is longer than --poll.interval {interval:g}s")
    return float(given)


def parse_config(argv: Sequence[str], environ: Mapping[str, str]) -> Config:
    """Flags and environment -> Config; ConfigError or SystemExit(2) on bad values."""
    parser = _build_parser(environ)
    args = parser.parse_args(list(argv))
    for value in vars(args).values():
        if isinstance(value, _BadEnvironment):
            raise value.error
    listen_variable = env_name("--web.listen-address")
    if args.listen_address:
        listen = [parse_listen_address(a) for a in args.listen_address]
    elif listen_variable in environ:
        # One address a line, as kingpin reads a repeatable flag's variable.
        lines = re.split(r"\r?\n", re.sub(r"\r?\n\Z", "", environ[listen_variable], count=1))
        listen = [parse_listen_address(line, source=listen_variable) for line in lines]
    else:
        listen = [parse_listen_address(DEFAULT_LISTEN_ADDRESS)]
    _refuse_overlapping_listens(listen)
    if not args.node_name or args.node_name != args.node_name.strip():
        raise ConfigError(
            f"--node-name (or ${env_name('--node-name')}) {args.node_name!r}: empty or"
            " padded with spaces; leave both out for $NODE_NAME or the host name"
        )
    web_config = _config_file("--web.config.file", args.web_config_file)
    debug_auth = _config_file("--web.debug-auth.file", args.debug_auth_file)
    for flag, path in (("--path.sysfs", args.sysfs), ("--path.procfs", args.procfs)):
        if not args.demo and not Path(path).is_dir():
            raise ConfigError(f"{flag} {path}: not a directory")
    interval = args.poll_interval
    collector_timeout = _within_interval(
        "--collector.timeout", args.collector_timeout, DEFAULT_COLLECTOR_TIMEOUT_S, interval
    )
    kubelet_timeout = _within_interval(
        "--kubelet.timeout", args.kubelet_timeout, DEFAULT_KUBELET_TIMEOUT_S, interval
    )
    return Config(
        kubelet_socket=args.kubelet_socket,
        kubelet_max_message_bytes=args.kubelet_max_message_bytes,
        kubelet_timeout_s=kubelet_timeout,
        poll_interval_s=args.poll_interval,
        collector_timeout_s=collector_timeout,
        listen_addresses=tuple(dict.fromkeys(listen)),  # one site per address given
        web_config_file=web_config,
        debug_auth_file=debug_auth,
        enable_debug=args.enable_debug,
        sysfs=Path(args.sysfs),
        procfs=Path(args.procfs),
        kubelet_plugins=Path(args.kubelet_plugins),
        cdi=tuple(Path(p) for p in args.cdi.split(":") if p),
        collectors=_collectors(args),
        node_name=args.node_name,
        log_level=args.log_level,
        log_format=args.log_format,
        demo=args.demo,
        pod_logs=Path(args.pod_logs),
        nvml_energy_interval_s=args.nvml_energy_interval,
        nvml_gpm_interval_s=args.nvml_gpm_interval,
        unknown_environment=_unknown_variables(parser, environ),
    )


# What Kubernetes writes into a pod for a Service of its namespace named
# "podresources-exporter" where service links are on (the default; this DaemonSet turns
# them off): <NAME>_SERVICE_HOST, _SERVICE_PORT[_<port name>], _PORT[_<n>_<PROTO>[_...]].
_SERVICE_LINK = re.compile(
    re.escape(ENV_PREFIX)
    + r"(SERVICE_HOST|SERVICE_PORT(_\w+)?|PORT(_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)"
)


def _unknown_variables(parser: _Parser, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The environment's PODRESOURCES_EXPORTER_* variables that are no flag's (nor a
    Service's link), sorted."""
    return tuple(
        sorted(
            v
            for v in environ
            if v.startswith(ENV_PREFIX)
            and v not in parser.variables
            and not _SERVICE_LINK.fullmatch(v)
        )
    )


def _collectors(args: argparse.Namespace) -> tuple[str, ...]:
    """The collectors the flags enable; gpu_processes also with --demo, where neither
    its flag nor its variable says otherwise."""
    enabled = []
    for registration in registrations():
        on = getattr(args, f"collector_{registration.name}")
        if on is None:  # only _DEMO_ALSO's default is None
            on = args.demo
        if on:
            enabled.append(registration.name)
    return tuple(enabled)


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

    run(config)  # a set-up that cannot work is logged there, in the configured format
