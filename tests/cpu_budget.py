"""How many CPUs this process may keep busy: what `make unit` starts a test worker for.

pytest-xdist's ``-n auto`` counts the CPUs in the affinity mask. A container limited by a
CPU quota (a Kubernetes pod's ``limits.cpu``, ``docker run --cpus``) sees every CPU of
its host there: a CI job given 2 CPUs on a 64-core host would start 64 workers, each
importing gRPC and starting exporters, and thrash or run out of memory. The quota is in
the cgroup's ``cpu.max`` (v2) or ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us`` (v1), on
the process's own cgroup or any above it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["quota_from_cfs", "quota_from_cpu_max", "usable_cpus"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def quota_from_cpu_max(text: str) -> float | None:
    """CPUs a cgroup v2 ``cpu.max`` ("$MAX $PERIOD", MAX "max" for none) allows."""
    fields = text.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    return _ratio(fields[0], fields[1])


def quota_from_cfs(quota_us: str, period_us: str) -> float | None:
    """CPUs cgroup v1's ``cpu.cfs_quota_us`` (-1 for none) over its period allows."""
    return _ratio(quota_us, period_us)


def _ratio(quota: str, period: str) -> float | None:
    if not (quota.strip().isascii() and quota.strip().isdigit()):
        return None  # -1 (v1's none), or not the kernel's
    if not (period.strip().isascii() and period.strip().isdigit()):
        return None
    return int(quota) / int(period) if int(quota) > 0 and int(period) > 0 else None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, ValueError):
        return ""


def _ancestors(root: Path, own: str) -> list[Path]:
    """``root/own`` and each folder above it up to ``root``, those that exist: inside a
    container ``own`` is often the host's name for a cgroup mounted at ``root``."""
    path = root / own.strip("/")
    found = []
    while root == path or root in path.parents:
        if path.is_dir():
            found.append(path)
        path = path.parent
    return found


def _quotas(cgroup_root: Path, proc_cgroup: Path) -> list[float]:
    quotas: list[float | None] = []
    for line in _read(proc_cgroup).splitlines():
        _, controllers, own = line.split(":", 2) if line.count(":") >= 2 else ("", "-", "")
        if controllers == "":  # v2, unified
            for folder in _ancestors(cgroup_root, own):
                quotas.append(quota_from_cpu_max(_read(folder / "cpu.max")))
        elif "cpu" in controllers.split(","):
            # v1: the cpu controller mounted on its own or beside cpuacct.
            for mount in (cgroup_root / "cpu", cgroup_root / "cpu,cpuacct"):
                for folder in _ancestors(mount, own):
                    quota_us = _read(folder / "cpu.cfs_quota_us")
                    quotas.append(quota_from_cfs(quota_us, _read(folder / "cpu.cfs_period_us")))
    return [quota for quota in quotas if quota is not None]


def usable_cpus(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """The CPUs in this process's affinity mask, bounded by the tightest CPU quota of its
    cgroups (a fraction rounds up: 1.5 CPUs keep two workers partly busy); at least 1."""
    cpus = len(os.sched_getaffinity(0))
    for quota in _quotas(cgroup_root, proc_cgroup):
        cpus = min(cpus, math.ceil(quota))
    return max(1, cpus)
