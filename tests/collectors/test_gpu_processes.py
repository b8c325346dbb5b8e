"""The gpu_processes collector's file reading: /proc/<pid>/cgroup and the pod-log tree.

NVML's side, through the real pynvml and the fake library, is in
``tests/collectors/nvml/test_gpu_processes_nvml.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporter.collectors.base import issue
from exporter.collectors.gpu_processes import (
    CONTAINER_UNKNOWN,
    POD_UNKNOWN,
    REGISTRATION,
    GpuProcessesCollector,
    PodLogIndex,
    UnknownCgroupError,
    name_origin,
    parse_cgroup,
    parse_container_log_name,
    parse_pod_log_dir_name,
    read_pod_logs,
)
from exporter.model import ProcessOrigin

CGROUPS = Path(__file__).parents[1] / "fixtures" / "cgroup"
UID = "5e2d3c1a-8b7f-4c6e-9a1d-2f3b4c5d6e7f"
ID = "9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d"


class TestParseCgroup:
    @pytest.mark.parametrize(
        "layout",
        [
            "v1-systemd-docker",
            "v1-systemd-crio",
            "v2-systemd-containerd",
            "v2-cgroupfs-crio",
            "v2-cgroupns",
        ],
    )
    def test_pod_layouts(self, layout: str) -> None:
        """Each driver, runtime and cgroup version gives the same pod UID and container ID."""
        assert ProcessOrigin(pod_uid=UID, container_id=ID) == parse_cgroup(
            (CGROUPS / layout).read_text()
        )

    @pytest.mark.parametrize(
        "below",
        [
            "/init.scope",  # systemd as a pod's init
            "/system.slice/slurmstepd.scope/job_12/step_0/user/task_0",  # Slurm's cgroup v2
            "/" + "b" * 64,  # docker-in-docker: another 64-hex ID deeper down
            "/job:1/step:0",  # cgroup names may hold ':', the line's separator
        ],
    )
    def test_cgroups_a_container_makes_below_its_own(self, below: str) -> None:
        """cgroup v2 delegation lets a container make cgroups under its own; a process in
        one belongs to the container (it used to be counted cgroup_unknown and dropped)."""
        text = (CGROUPS / "v2-systemd-containerd").read_text().rstrip("\n") + below + "\n"
        assert ProcessOrigin(pod_uid=UID, container_id=ID) == parse_cgroup(text)

    def test_kubelet_with_a_cgroup_root(self) -> None:
        """A kubelet with ``--cgroup-root=/kubelet`` (kind, and NVIDIA's nvkind for GPU
        nodes) on the systemd driver prefixes every slice: ``kubelet-kubepods-...-pod<uid>
        .slice``. Its pods' processes are theirs, not the host's."""
        assert ProcessOrigin(pod_uid=UID, container_id=ID) == parse_cgroup(
            (CGROUPS / "v2-kind").read_text()
        )

    def test_kubelet_with_a_cgroup_root_pod_level(self) -> None:
        """Under such a root a pod-level cgroup is still under kubepods: an unknown
        shape, not a host process."""
        with pytest.raises(UnknownCgroupError, match="kubelet-kubepods-pod"):
            parse_cgroup((CGROUPS / "v2-kind-pod-level").read_text())

    def test_captured_gke_cgroupfs(self) -> None:
        """A captured cgroupfs/containerd file: UID with dashes, bare 64-hex container ID."""
        expected = ProcessOrigin(
            pod_uid="74c13223-5a00-11e9-b385-42010a80018d",
            container_id="34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376",
        )
        assert expected == parse_cgroup((CGROUPS / "v1-cgroupfs-containerd").read_text())

    def test_static_pod(self) -> None:
        """A static pod's UID is its 32-hex config hash, as its pod-log directory names it."""
        origin = parse_cgroup((CGROUPS / "v2-static-pod").read_text())
        assert ProcessOrigin("4b5c7e2f9a1d3e6f8b0c2d4e6f8a0b1c", ID) == origin

    @pytest.mark.parametrize("layout", ["v2-host", "v1-host"])
    def test_host_processes(self, layout: str) -> None:
        """A cgroup outside kubepods is the host's: no pod UID."""
        assert ProcessOrigin() == parse_cgroup((CGROUPS / layout).read_text())

    def test_unknown_shape(self) -> None:
        """Under kubepods but without a container we can read: an error, not a host process."""
        with pytest.raises(UnknownCgroupError, match="kubepods-besteffort-pod"):
            parse_cgroup((CGROUPS / "v2-unknown").read_text())


def make_pod_logs(root: Path, pods: dict[str, tuple[str, ...]], *, links: bool = True) -> Path:
    """A kubelet pod-log tree: ``<ns>_<pod>_<uid>/<container>/0.log`` and, beside it,
    ``containers/<pod>_<ns>_<container>-<id>.log`` links (ID = container name * 8 in hex)."""
    pod_logs = root / "log" / "pods"
    containers = root / "log" / "containers"
    containers.mkdir(parents=True)
    for directory, names in pods.items():
        namespace, pod, _uid = directory.split("_")
        for name in names:
            log = pod_logs / directory / name / "0.log"
            log.parent.mkdir(parents=True)
            log.touch()
            if links:
                os.symlink(log, containers / f"{pod}_{namespace}_{name}-{container_id(name)}.log")
    return pod_logs


def container_id(name: str) -> str:
    return (name.encode().hex() * 64)[:64]


class TestRegistration:
    def test_registration(self) -> None:
        """The module registers the gpu_processes collector, off by default, serving no
        resource, with every error label it counts known from the start (so increase()
        sees the first of each)."""
        expected = (
            "gpu_processes",
            False,
            GpuProcessesCollector,
            (),
            {
                "process_exited",
                "cgroup_unknown",
                "cgroup_unreadable",
                "pod_logs_missing",
                "pod_unknown",
                "container_unknown",
            },
        )
        assert expected == (
            REGISTRATION.name,
            REGISTRATION.enabled_by_default,
            REGISTRATION.factory,
            GpuProcessesCollector.serves,
            set(GpuProcessesCollector.known_errors),
        )


class TestPodLogs:
    def test_names(self) -> None:
        """Directory and link names split where Kubernetes names cannot hold '_'."""
        assert ("team-a", "trainer-0", UID) == parse_pod_log_dir_name(f"team-a_trainer-0_{UID}")
        assert parse_pod_log_dir_name("not-a-pod-dir") is None
        assert ("team-a", "trainer-0", "log-shipper", ID) == parse_container_log_name(
            f"trainer-0_team-a_log-shipper-{ID}.log"
        )

    def test_index(self, tmp_path: Path) -> None:
        """Pods by UID with their containers; container names by ID from the links."""
        root = make_pod_logs(tmp_path, {f"team-a_trainer-0_{UID}": ("trainer", "log-shipper")})
        expected = PodLogIndex(
            pods={UID: ("team-a", "trainer-0", ("log-shipper", "trainer"))},
            containers={
                container_id("trainer"): "trainer",
                container_id("log-shipper"): "log-shipper",
            },
        )
        assert expected == read_pod_logs(root)

    def test_a_file_named_like_a_pod_directory_is_skipped(self, tmp_path: Path) -> None:
        """An entry named like a pod's directory that cannot be listed (a stray file, or a
        pod deleted while the tree is read) loses that entry only."""
        root = make_pod_logs(tmp_path, {f"team-a_trainer-0_{UID}": ("trainer",)})
        (root / "team-b_stray-0_0f0f0f0f-0000-0000-0000-000000000000").write_text("")
        assert {UID: ("team-a", "trainer-0", ("trainer",))} == read_pod_logs(root).pods

    def test_missing_tree(self, tmp_path: Path) -> None:
        """A missing pod-log directory is an error the collector counts."""
        with pytest.raises(FileNotFoundError):
            read_pod_logs(tmp_path / "nope")


class TestNameOrigin:
    INDEX = PodLogIndex(
        pods={
            UID: ("team-a", "trainer-0", ("log-shipper", "trainer")),
            "11111111-2222-3333-4444-555555555555": ("team-b", "solo", ("main",)),
        },
        containers={ID: "trainer"},
    )

    def test_container_from_link(self) -> None:
        """A pod with several containers: the link with the container ID names it."""
        named, problem = name_origin(ProcessOrigin(UID, ID), self.INDEX)
        assert (ProcessOrigin(UID, ID, "team-a", "trainer-0", "trainer"), None) == (named, problem)

    def test_single_container_pod(self) -> None:
        """A pod with one container needs no link."""
        uid = "11111111-2222-3333-4444-555555555555"
        named, problem = name_origin(ProcessOrigin(uid, "f" * 64), self.INDEX)
        assert (ProcessOrigin(uid, "f" * 64, "team-b", "solo", "main"), None) == (named, problem)

    def test_container_not_named(self) -> None:
        """Several containers, no link: the pod is known, the container is not -- counted."""
        named, problem = name_origin(ProcessOrigin(UID, "e" * 64), self.INDEX)
        assert ProcessOrigin(UID, "e" * 64, "team-a", "trainer-0", "") == named
        assert issue(
            CONTAINER_UNKNOWN, "container eeeeeeeeeeee of pod team-a/trainer-0 not named"
        ) == (problem)

    def test_pod_not_in_tree(self) -> None:
        """A UID no pod-log directory names stays unnamed, with a counted issue."""
        origin = ProcessOrigin("99999999-2222-3333-4444-555555555555", ID)
        expected_issue = issue(
            POD_UNKNOWN, "no pod-log directory for pod UID 99999999-2222-3333-4444-555555555555"
        )
        assert (origin, expected_issue) == name_origin(origin, self.INDEX)

    def test_host_process(self) -> None:
        """A host process needs no naming."""
        assert (ProcessOrigin(), None) == name_origin(ProcessOrigin(), self.INDEX)
