"""How many test workers `make unit` starts: the affinity mask, bounded by a CPU quota."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cpu_budget import quota_from_cfs, quota_from_cpu_max, usable_cpus

AFFINITY = len(os.sched_getaffinity(0))


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _usable(tmp_path: Path, membership: str, files: dict[str, str]) -> int:
    _tree(tmp_path / "sys/fs/cgroup", files)
    _tree(tmp_path / "proc/self", {"cgroup": membership})
    return usable_cpus(tmp_path / "sys/fs/cgroup", tmp_path / "proc/self/cgroup")


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("max 100000\n", None),  # the kernel's default: no quota
        ("200000 100000\n", 2.0),
        ("150000 100000\n", 1.5),
        ("50000 100000\n", 0.5),
        ("0 100000\n", None),
        ("max\n", None),
        ("-1 100000\n", None),
        ("", None),
        ("\uff1200000 100000\n", None),  # a full-width digit is not the kernel's
    ],
)
def test_cpu_max(text: str, cpus: float | None) -> None:
    assert cpus == quota_from_cpu_max(text)


@pytest.mark.parametrize(
    ("quota", "period", "cpus"),
    [("-1\n", "100000\n", None), ("300000\n", "100000\n", 3.0), ("100000\n", "0\n", None)],
)
def test_cfs_quota(quota: str, period: str, cpus: float | None) -> None:
    assert cpus == quota_from_cfs(quota, period)


def test_a_pods_quota_above_its_container_bounds_it(tmp_path: Path) -> None:
    """cgroup v2 as the kubelet's systemd driver lays it out: the pod's cpu.max limits
    the container whose own is "max"."""
    pod = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice"
    files = {
        "kubepods.slice/cpu.max": "max 100000\n",
        f"{pod}/cpu.max": "100000 100000\n",
        f"{pod}/cri-containerd-abc.scope/cpu.max": "max 100000\n",
    }
    assert 1 == _usable(tmp_path, f"0::/{pod}/cri-containerd-abc.scope\n", files)


def test_a_container_sees_its_own_cgroup_at_the_root(tmp_path: Path) -> None:
    """In a container without a cgroup namespace /proc/self/cgroup names the host's path,
    which is not under the container's /sys/fs/cgroup: the root's cpu.max is its own."""
    membership = "0::/kubepods.slice/pod2.slice/cri-containerd-def.scope\n"
    assert 1 == _usable(tmp_path, membership, {"cpu.max": "50000 100000\n"})


def test_a_fraction_of_a_cpu_rounds_up(tmp_path: Path) -> None:
    expected = min(AFFINITY, 2)
    assert expected == _usable(tmp_path, "0::/\n", {"cpu.max": "150000 100000\n"})


def test_cgroup_v1_quota_on_the_cpu_and_cpuacct_mount(tmp_path: Path) -> None:
    """docker run --cpus=1 on cgroup v1: the quota beside cpuacct."""
    files = {
        "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "100000\n",
        "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
        "memory/docker/abc/memory.limit_in_bytes": "1073741824\n",
    }
    membership = "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n"
    assert 1 == _usable(tmp_path, membership, files)


def test_no_quota_leaves_the_affinity_mask(tmp_path: Path) -> None:
    files = {
        "cpu/cpu.cfs_quota_us": "-1\n",
        "cpu/cpu.cfs_period_us": "100000\n",
        "cpu.max": "max 100000\n",
    }
    assert AFFINITY == _usable(tmp_path, "1:cpu:/\n0::/\n", files)


def test_a_quota_above_the_affinity_mask_changes_nothing(tmp_path: Path) -> None:
    quota = f"{(AFFINITY + 4) * 100000} 100000\n"
    assert AFFINITY == _usable(tmp_path, "0::/\n", {"cpu.max": quota})


def test_no_cgroup_files_at_all(tmp_path: Path) -> None:
    assert AFFINITY == _usable(tmp_path, "", {})
