"""The exporter's effective configuration: one frozen Config, and the defaults behind it.

A leaf module: ``cli.py`` builds a Config from flags, ``app.py`` runs one; neither
imports the other.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_CDI",
    "DEFAULT_COLLECTOR_TIMEOUT_S",
    "DEFAULT_KUBELET_PLUGINS",
    "DEFAULT_KUBELET_TIMEOUT_S",
    "DEFAULT_LISTEN_ADDRESS",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_NVML_ENERGY_INTERVAL_S",
    "DEFAULT_NVML_GPM_INTERVAL_S",
    "DEFAULT_POLL_INTERVAL_S",
    "DEFAULT_SOCKET",
    "Config",
    "ConfigError",
    "is_wildcard_host",
    "join_host_port",
]

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# 1 MiB, not the reference client's 16 MiB: memory follows the series a reply makes (two
# per device ID, ~1.7 KiB each through render and scrape), not its bytes. A 1 MiB reply of
# 40-byte IDs (GPU UUIDs) peaks at ~135 MiB, inside the DaemonSet's 256Mi; 16 MiB would
# be OOM-killed where a refusal keeps the last good data and says which flag to raise. A
# dense 250-pod node's reply is 14 KB (docs/benchmarks.md, "Large kubelet replies").
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024
DEFAULT_KUBELET_TIMEOUT_S = 5.0
DEFAULT_POLL_INTERVAL_S = 10.0
DEFAULT_LISTEN_ADDRESS = ":9410"
DEFAULT_COLLECTOR_TIMEOUT_S = 5.0
DEFAULT_KUBELET_PLUGINS = "/var/lib/kubelet/plugins"
DEFAULT_CDI = "/var/run/cdi:/etc/cdi"
# NVIDIA's driver takes ~3 ms of CPU per GPU to answer the energy counter, more than the
# rest of a poll (docs/benchmarks.md, "On a real GPU"). Read every 10 s poll, two readings
# in three were never scraped at the ServiceMonitor's 30 s interval.
DEFAULT_NVML_ENERGY_INTERVAL_S = 30.0
# A GPM measurement (nvmlGpmMetricsGet, 0.9-1.8 ms of CPU per GPU on an H200) averages
# its metrics over the time between two samples: at the ServiceMonitor's 30 s interval
# each scrape sees a whole 30 s window, as dcgm-exporter's 30 s collect interval does.
DEFAULT_NVML_GPM_INTERVAL_S = 30.0


def join_host_port(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets, as Go's net.JoinHostPort writes it."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_wildcard_host(host: str) -> bool:
    """Whether a listen host is a wildcard: "" (":9410"), 0.0.0.0, :: or ::ffff:0.0.0.0
    (Go's net.IP.IsUnspecified). The exporter binds one as every address of both
    families, as Go listens on one (a dual-stack socket, ipsock_posix.go
    favoriteAddrFamily): node_exporter's [::]:9100 answers IPv4."""
    if not host:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # a host name
    mapped = getattr(address, "ipv4_mapped", None)  # an IPv6 address's, if any
    return address.is_unspecified or (mapped is not None and mapped.is_unspecified)


class ConfigError(Exception):
    """A flag or environment value is unusable; the message is one line."""


@dataclass(frozen=True, slots=True)
class Config:
    kubelet_socket: str
    kubelet_max_message_bytes: int
    kubelet_timeout_s: float
    poll_interval_s: float
    collector_timeout_s: float
    # (host, port) pairs; host "" is every address of both families (":9410")
    listen_addresses: tuple[tuple[str, int], ...]
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
    nvml_energy_interval_s: float = DEFAULT_NVML_ENERGY_INTERVAL_S
    nvml_gpm_interval_s: float = DEFAULT_NVML_GPM_INTERVAL_S
    # Variables named like a flag's (PODRESOURCES_EXPORTER_*) that no flag reads: a
    # misspelt one is otherwise silently ignored.
    unknown_environment: tuple[str, ...] = ()

    def as_log_fields(self) -> dict[str, Any]:
        """The effective configuration, for the start-up log line."""
        return {
            "kubelet_socket": self.kubelet_socket,
            "kubelet_max_message_bytes": self.kubelet_max_message_bytes,
            "kubelet_timeout_s": self.kubelet_timeout_s,
            "poll_interval_s": self.poll_interval_s,
            "collector_timeout_s": self.collector_timeout_s,
            "listen_addresses": [join_host_port(h, p) for h, p in self.listen_addresses],
            "web_config_file": str(self.web_config_file) if self.web_config_file else None,
            "debug_auth_file": str(self.debug_auth_file) if self.debug_auth_file else None,
            "enable_debug": self.enable_debug,
            "sysfs": str(self.sysfs),
            "procfs": str(self.procfs),
            "kubelet_plugins": str(self.kubelet_plugins),
            "cdi": [str(p) for p in self.cdi],
            "pod_logs": str(self.pod_logs),
            "nvml_energy_interval_s": self.nvml_energy_interval_s,
            "nvml_gpm_interval_s": self.nvml_gpm_interval_s,
            "collectors": list(self.collectors),
            "node_name": self.node_name,
            "demo": self.demo,
        }
