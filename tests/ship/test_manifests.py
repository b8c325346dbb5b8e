"""The kustomize manifests: every overlay renders, validates strictly and keeps its promises."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

# One worker of `make unit` runs them all: each kustomization, rendered once.
pytestmark = pytest.mark.xdist_group("manifests")

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
DASHBOARDS = REPO / "dashboards"
NAMESPACE = "podresources-exporter"
KUSTOMIZATIONS = [
    "manifests",
    *sorted(
        f"manifests/overlays/{p.name}" for p in (MANIFESTS / "overlays").iterdir() if p.is_dir()
    ),
]
# Kinds that only exist with the Prometheus Operator's CRDs: kubernetes-validate has no
# schema for them and raises SchemaNotFoundError; they are checked structurally below.
CRD_KINDS = {
    ("monitoring.coreos.com/v1", kind)
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule")
}
# recursiveReadOnly (the kubelet-plugins mount) is a field from 1.30 on; 1.29 clusters
# remove it with docs/operations.md's upgrade-note patch (TestOldestKubernetesPatch).
OLDEST_KUBERNETES = "1.30"
GPU_TAINTS = {"nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915"}

Doc = dict[str, Any]


def _render(kubectl: str, directory: Path) -> list[Doc]:
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"kubectl kustomize {directory}: {result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def rendered(kubectl: str) -> dict[str, list[Doc]]:
    """Every kustomization's output, keyed by its path relative to the repository."""
    return {name: _render(kubectl, REPO / name) for name in KUSTOMIZATIONS}


def _one(docs: list[Doc], kind: str) -> Doc:
    matches = [doc for doc in docs if doc["kind"] == kind]
    assert len(matches) == 1, f"expected one {kind}, got {len(matches)}"
    return matches[0]


def _daemonset(docs: list[Doc]) -> Doc:
    return _one(docs, "DaemonSet")


def _pod_spec(docs: list[Doc]) -> Doc:
    spec: Doc = _daemonset(docs)["spec"]["template"]["spec"]
    return spec


def _container(docs: list[Doc]) -> Doc:
    (container,) = _pod_spec(docs)["containers"]
    return container


def _validation_versions() -> list[str]:
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="pip install kubernetes-validate (in the test extras)"
    )
    return [OLDEST_KUBERNETES, kubernetes_validate.latest_version()]


class TestRendering:
    def test_overlays_are_the_expected_ones(self) -> None:
        """The base and the documented overlays exist."""
        overlays = (
            "gpu-nodes",
            "gpu-processes",
            "gpu-taints-only",
            "grafana",
            "non-root",
            "pcie-switch-links",
            "prometheus-operator",
            "web-config",
        )
        expected = ["manifests"] + [f"manifests/overlays/{name}" for name in overlays]
        assert expected == KUSTOMIZATIONS

    @pytest.mark.parametrize("name", KUSTOMIZATIONS)
    def test_renders_and_keeps_everything_in_one_namespace(
        self, rendered: dict[str, list[Doc]], name: str
    ) -> None:
        """`kubectl kustomize` renders it, and every namespaced object lands in our namespace."""
        docs = rendered[name]
        assert _one(docs, "Namespace")["metadata"]["name"] == NAMESPACE
        for doc in docs:
            if doc["kind"] != "Namespace":
                assert doc["metadata"].get("namespace") == NAMESPACE, doc["metadata"]["name"]

    def test_the_documented_combination_renders_with_its_image(
        self, kubectl: str, tmp_path: Path
    ) -> None:
        """docs/operations.md's "Combining options" example, as written beside a checkout
        of this repository, renders, and its images: entry reaches the DaemonSet (one
        naming the bare image matched nothing: the base has renamed it already)."""
        text = (REPO / "docs" / "operations.md").read_text()
        section = text[text.index("### Combining options") :]
        example = section[section.index("```yaml\n") + 8 : section.index("```\n", 8)]
        (tmp_path / "podresources-exporter").symlink_to(REPO)
        (tmp_path / "kustomization.yaml").write_text(example)
        wanted = yaml.safe_load(example)["images"][0]
        image = _container(_render(kubectl, tmp_path))["image"]
        assert image == f"{wanted['newName']}:{wanted['newTag']}"
        assert not image.startswith("registry.example.com/")

    def test_components_combine(self, kubectl: str, tmp_path: Path) -> None:
        """All four components applied together on the base render one consistent set."""

        def rel(path: Path) -> str:
            return os.path.relpath(path, tmp_path)

        components = MANIFESTS / "components"
        (tmp_path / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "namespace": NAMESPACE,
                    "resources": [rel(MANIFESTS / "base")],
                    "components": [
                        rel(components / name)
                        for name in ("gpu-nodes", "gpu-processes", "prometheus-operator", "grafana")
                    ],
                }
            )
        )
        docs = _render(kubectl, tmp_path)
        kinds = sorted(doc["kind"] for doc in docs)
        assert kinds == sorted(
            [
                "Namespace",
                "ServiceAccount",
                "Service",
                "NetworkPolicy",
                "DaemonSet",
                "ServiceMonitor",
                "PrometheusRule",
                *["ConfigMap"] * 4,
            ]
        )
        assert "affinity" in _pod_spec(docs)


class TestValidation:
    @pytest.mark.parametrize("name", KUSTOMIZATIONS)
    def test_kubernetes_validate_strict(self, rendered: dict[str, list[Doc]], name: str) -> None:
        """Every built-in kind passes strict validation on the oldest and newest Kubernetes."""
        import kubernetes_validate

        for version in _validation_versions():
            for doc in rendered[name]:
                what = f"{name}: {doc['kind']}/{doc['metadata']['name']} on {version}"
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except kubernetes_validate.SchemaNotFoundError:
                    # Only the operator's CRDs may lack a schema; anything else is a typo'd
                    # apiVersion or kind that the validator would otherwise let through.
                    assert (doc["apiVersion"], doc["kind"]) in CRD_KINDS, f"no schema: {what}"
                except kubernetes_validate.ValidationError as error:
                    path = ".".join(map(str, error.path))
                    pytest.fail(f"{what}: {path}: {error.message}")

    def test_strict_validation_rejects_an_unknown_field(
        self, rendered: dict[str, list[Doc]]
    ) -> None:
        """The validator really is strict: a misspelt field in the DaemonSet fails it."""
        import kubernetes_validate

        daemonset = copy.deepcopy(_daemonset(rendered["manifests"]))
        daemonset["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFileSystem"] = True
        for version in _validation_versions():
            with pytest.raises(kubernetes_validate.ValidationError):
                kubernetes_validate.validate(daemonset, version, strict=True)


class TestBase:
    def test_pod_resources_socket_directory_is_mounted_read_only_at_the_same_path(
        self, rendered: dict[str, list[Doc]]
    ) -> None:
        """The kubelet's pod-resources directory is a read-only hostPath at the same path."""
        docs = rendered["manifests"]
        self._assert_host_mount(
            docs, "/var/lib/kubelet/pod-resources", "/var/lib/kubelet/pod-resources"
        )
        args = _container(docs)["args"]
        assert "--kubelet.socket=/var/lib/kubelet/pod-resources/kubelet.sock" in args

    def test_only_the_sysfs_trees_read_are_mounted(self, rendered: dict[str, list[Doc]]) -> None:
        """devices, bus and class are read-only under /host/sys (no submounts of /sys stay
        writable), --path.sysfs points there; besides them only the socket's directory and
        the DRA/CDI directories come from the host, and no host /proc."""
        docs = rendered["manifests"]
        for tree in ("devices", "bus", "class"):
            self._assert_host_mount(docs, f"/sys/{tree}", f"/host/sys/{tree}")
        host_paths = {v["hostPath"]["path"] for v in _pod_spec(docs)["volumes"] if "hostPath" in v}
        expected = {
            "/var/lib/kubelet/pod-resources",
            *("/sys/devices", "/sys/bus", "/sys/class"),
            *("/var/lib/kubelet/plugins", "/var/run/cdi", "/etc/cdi"),
            "/dev/null",  # the NVIDIA toolkit's volume-mount request for GPUs
        }
        assert expected == host_paths
        args = _container(docs)["args"]
        assert "--path.sysfs=/host/sys" in args
        assert not [a for a in args if a.startswith("--path.procfs")]

    def test_kubelet_plugins_submounts_are_read_only_where_possible(
        self, rendered: dict[str, list[Doc]]
    ) -> None:
        """/var/lib/kubelet/plugins holds other pods' staged volumes as submounts
        (kubernetes.io/csi/.../globalmount), which a plain read-only bind leaves writable:
        its mount is recursively read-only where the runtime can, and never fails the pod
        where it cannot (IfPossible, not Enabled). Propagation must stay None for it."""
        for name, docs in rendered.items():
            volumes = {v["name"]: v for v in _pod_spec(docs)["volumes"]}
            for mount in _container(docs)["volumeMounts"]:
                host = volumes[mount["name"]].get("hostPath", {}).get("path", "")
                if host == "/var/lib/kubelet/plugins" or host.startswith(
                    "/var/lib/kubelet/plugins/"
                ):
                    assert ("IfPossible", True, None) == (
                        mount.get("recursiveReadOnly"),
                        mount.get("readOnly"),
                        mount.get("mountPropagation"),
                    ), f"{name}: {mount['mountPath']}"

    def test_nvml_is_asked_for_both_ways_the_nvidia_toolkit_reads(
        self, rendered: dict[str, list[Doc]]
    ) -> None:
        """NVIDIA_VISIBLE_DEVICES=all, which the toolkit ignores in unprivileged pods where
        accept-nvidia-visible-devices-envvar-when-unprivileged is off (Bottlerocket), and
        /dev/null at /var/run/nvidia-container-devices/all, the request it reads from
        mounts (its requestsFromMounts: the source must be /dev/null)."""
        docs = rendered["manifests"]
        self._assert_host_mount(docs, "/dev/null", "/var/run/nvidia-container-devices/all")
        volumes = {v["name"]: v for v in _pod_spec(docs)["volumes"]}
        env = {e["name"]: e.get("value") for e in _container(docs)["env"]}
        assert ("CharDevice", "all", "utility") == (
            volumes["nvidia-all-devices"]["hostPath"]["type"],
            env["NVIDIA_VISIBLE_DEVICES"],
            env["NVIDIA_DRIVER_CAPABILITIES"],
        )

    @staticmethod
    def _assert_host_mount(docs: list[Doc], host_path: str, mount_path: str) -> None:
        volumes = {v["name"]: v for v in _pod_spec(docs)["volumes"]}
        mounts = [m for m in _container(docs)["volumeMounts"] if m["mountPath"] == mount_path]
        assert len(mounts) == 1, f"nothing mounted at {mount_path}"
        assert mounts[0].get("readOnly") is True, f"{mount_path} must be read-only"
        assert volumes[mounts[0]["name"]]["hostPath"]["path"] == host_path

    def test_every_mount_but_scratch_is_read_only(self, rendered: dict[str, list[Doc]]) -> None:
        """Only the in-memory /tmp is writable."""
        docs = rendered["manifests"]
        volumes = {v["name"]: v for v in _pod_spec(docs)["volumes"]}
        for mount in _container(docs)["volumeMounts"]:
            if not mount.get("readOnly"):
                assert "emptyDir" in volumes[mount["name"]], mount["mountPath"]

    def test_node_name_comes_from_the_downward_api(self, rendered: dict[str, list[Doc]]) -> None:
        """NODE_NAME is the pod's spec.nodeName."""
        env = {e["name"]: e for e in _container(rendered["manifests"])["env"]}
        assert {"fieldRef": {"fieldPath": "spec.nodeName"}} == env["NODE_NAME"]["valueFrom"]

    def test_container_is_locked_down(self, rendered: dict[str, list[Doc]]) -> None:
        """Root only for the socket; no capabilities, no escalation, read-only root, seccomp."""
        docs = rendered["manifests"]
        context = _container(docs)["securityContext"]
        assert context["runAsUser"] == 0
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context.get("privileged", False) is False
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        pod = _pod_spec(docs)
        for host_namespace in ("hostNetwork", "hostPID", "hostIPC"):
            assert not pod.get(host_namespace), host_namespace

    def test_root_is_explained(self) -> None:
        """The manifest says why the container runs as root."""
        text = (MANIFESTS / "base" / "daemonset.yaml").read_text()
        before = text[: text.index("runAsUser: 0")]
        assert "socket" in before[-600:]
        assert "root" in before[-600:]

    def test_no_api_token(self, rendered: dict[str, list[Doc]]) -> None:
        """Neither the ServiceAccount nor the pod mounts an API token."""
        docs = rendered["manifests"]
        account = _one(docs, "ServiceAccount")
        assert account["automountServiceAccountToken"] is False
        pod = _pod_spec(docs)
        assert pod["serviceAccountName"] == account["metadata"]["name"]
        assert pod["automountServiceAccountToken"] is False

    def test_resources_request_cpu_and_memory_and_limit_memory_only(
        self, rendered: dict[str, list[Doc]]
    ) -> None:
        """Requests for CPU and memory, a memory limit, and no CPU limit (no throttling)."""
        resources = _container(rendered["manifests"])["resources"]
        assert set(resources["requests"]) == {"cpu", "memory"}
        assert set(resources["limits"]) == {"memory"}

    def test_probes_use_health_endpoints_on_the_named_port(
        self, rendered: dict[str, list[Doc]]
    ) -> None:
        """Liveness probes /healthz and readiness /readyz on the named port metrics, 9410."""
        container = _container(rendered["manifests"])
        assert [{"name": "metrics", "containerPort": 9410, "protocol": "TCP"}] == container["ports"]
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert "--web.listen-address=:9410" in container["args"]

    def test_scheduling_defaults(self, rendered: dict[str, list[Doc]]) -> None:
        """Critical priority, every taint tolerated, no node selection."""
        pod = _pod_spec(rendered["manifests"])
        assert pod["priorityClassName"] == "system-node-critical"
        assert [{"operator": "Exists"}] == pod["tolerations"]
        assert "nodeSelector" not in pod
        assert "affinity" not in pod

    def test_headless_service_selects_the_pods(self, rendered: dict[str, list[Doc]]) -> None:
        """The Service is headless, names its port metrics and selects the DaemonSet's pods."""
        docs = rendered["manifests"]
        service = _one(docs, "Service")
        assert service["spec"]["clusterIP"] == "None"
        assert [p["name"] for p in service["spec"]["ports"]] == ["metrics"]
        pod_labels = _daemonset(docs)["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items()

    def test_image_tag_is_the_package_version(self, rendered: dict[str, list[Doc]]) -> None:
        """The image is fully qualified, on a reserved domain nobody can publish under, and
        tagged with pyproject's version."""
        version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
        expected = f"registry.example.com/podresources-exporter:{version}"
        assert expected == _container(rendered["manifests"])["image"]

    def test_network_policy_admits_only_the_monitoring_namespace(
        self, rendered: dict[str, list[Doc]]
    ) -> None:
        """Ingress to the metrics port from namespace monitoring only; no egress at all."""
        docs = rendered["manifests"]
        policy = _one(docs, "NetworkPolicy")["spec"]
        pod_labels = _daemonset(docs)["spec"]["template"]["metadata"]["labels"]
        assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
        assert ["Ingress", "Egress"] == policy["policyTypes"]
        assert [
            {
                "from": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                        }
                    }
                ],
                "ports": [{"port": "metrics", "protocol": "TCP"}],
            }
        ] == policy["ingress"]
        assert [] == policy["egress"]


def _without(doc: Doc, *paths: tuple[str | int, ...]) -> Doc:
    """A copy of ``doc`` with the values at ``paths`` removed."""
    copied = copy.deepcopy(doc)
    for path in paths:
        parent = copied
        for step in path[:-1]:
            parent = parent[step]
        del parent[path[-1]]
    return copied


class TestOverlays:
    def test_gpu_taints_only_narrows_tolerations_and_nothing_else(
        self, rendered: dict[str, list[Doc]]
    ) -> None:
        """gpu-taints-only tolerates the three GPU taints instead of every taint."""
        base = _daemonset(rendered["manifests"])
        overlay = _daemonset(rendered["manifests/overlays/gpu-taints-only"])
        tolerations = overlay["spec"]["template"]["spec"]["tolerations"]
        assert GPU_TAINTS == {t["key"] for t in tolerations}
        assert all(t["operator"] == "Exists" for t in tolerations)
        where = ("spec", "template", "spec", "tolerations")
        assert _without(base, where) == _without(overlay, where)

    def test_web_config_mounts_the_secret_and_probes_over_https(
        self, rendered: dict[str, list[Doc]]
    ) -> None:
        """web-config: the Secret as a read-only directory, the flag, HTTPS probes."""
        container = _container(rendered["manifests/overlays/web-config"])
        assert "--web.config.file=/etc/podresources-exporter/web/web.yml" in container["args"]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "web-config"]
        assert {"name": "web-config", "mountPath": "/etc/podresources-exporter/web",
                "readOnly": True} == mount  # fmt: skip
        assert "subPath" not in mount, "a subPath mount never sees a rotated Secret"
        for probe in ("livenessProbe", "readinessProbe"):
            assert "HTTPS" == container[probe]["httpGet"]["scheme"]

    def test_non_root_runs_as_nobody(self, rendered: dict[str, list[Doc]]) -> None:
        """non-root: uid and gid 65534, runAsNonRoot, one supplementary group, and fsGroup
        so a mounted Secret (mode 0440) stays readable."""
        docs = rendered["manifests/overlays/non-root"]
        context = _container(docs)["securityContext"]
        assert (65534, 65534, True) == (
            context["runAsUser"],
            context["runAsGroup"],
            context["runAsNonRoot"],
        )
        pod_context = _pod_spec(docs)["securityContext"]
        assert (1, 65534) == (len(pod_context["supplementalGroups"]), pod_context["fsGroup"])

    def test_gpu_nodes_only_adds_a_gpu_node_affinity(self, rendered: dict[str, list[Doc]]) -> None:
        """gpu-nodes is the base plus a required node affinity on GPU node labels."""
        base = _daemonset(rendered["manifests"])
        overlay = copy.deepcopy(_daemonset(rendered["manifests/overlays/gpu-nodes"]))
        affinity = overlay["spec"]["template"]["spec"].pop("affinity")
        terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        keys = {e["key"] for term in terms for e in term["matchExpressions"]}
        assert {"nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present"} <= keys
        assert base == overlay

    def test_gpu_processes_adds_host_pid_and_the_pod_log_tree_only(
        self, rendered: dict[str, list[Doc]]
    ) -> None:
        """gpu-processes is the base plus hostPID, the collector's flags and the kubelet's
        log directories mounted read-only; no capability or write access."""
        base = _daemonset(rendered["manifests"])
        overlay = copy.deepcopy(_daemonset(rendered["manifests/overlays/gpu-processes"]))
        pod = overlay["spec"]["template"]["spec"]
        assert pod.pop("hostPID") is True
        (container,) = pod["containers"]
        added_args = container["args"][len(_container(rendered["manifests"])["args"]) :]
        assert ["--collector.gpu_processes", "--path.pod-logs=/host/var/log/pods"] == added_args
        del container["args"][-2:]
        mounts = container["volumeMounts"][-2:]
        del container["volumeMounts"][-2:]
        volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"][-2:]}
        del pod["volumes"][-2:]
        assert [
            ("/host/var/log/pods", True, "/var/log/pods"),
            ("/host/var/log/containers", True, "/var/log/containers"),
        ] == [(m["mountPath"], m.get("readOnly"), volumes[m["name"]]) for m in mounts]
        assert base == overlay

    def test_gpu_processes_says_whose_processes_it_could_signal(self) -> None:
        """hostPID with uid 0 reaches every other pod's root processes: the runtime's
        default AppArmor profile lets containers under it signal one another, so the
        component and the docs must not offer it as the protection, and name non-root."""
        comment = (MANIFESTS / "components" / "gpu-processes" / "kustomization.yaml").read_text()
        docs = (REPO / "docs" / "operations.md").read_text()
        item = docs[docs.index("- **Who uses each GPU**") : docs.index("- **Only GPU-tainted")]
        for text in (" ".join(comment.replace("#", " ").split()), " ".join(item.split())):
            assert "every other pod" in text
            assert "peer=<itself>" in text
            assert "non-root" in text

    def test_pcie_switch_links_adds_one_read_only_sysfs_folder(
        self, rendered: dict[str, list[Doc]]
    ) -> None:
        """pcie-switch-links is the base plus Broadcom's switch-link folder, read-only,
        under the --path.sysfs root the collectors read, and only where it exists."""
        base = _daemonset(rendered["manifests"])
        overlay = copy.deepcopy(_daemonset(rendered["manifests/overlays/pcie-switch-links"]))
        pod = overlay["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        mount = container["volumeMounts"].pop()
        volume = pod["volumes"].pop()
        assert "--path.sysfs=/host/sys" in container["args"]
        assert ("/host/sys/kernel/pci_switch_link", True, volume["name"]) == (
            mount["mountPath"],
            mount.get("readOnly"),
            mount["name"],
        )
        assert {"path": "/sys/kernel/pci_switch_link", "type": "Directory"} == volume["hostPath"]
        assert base == overlay

    def test_service_monitor_scrapes_the_service_and_labels_the_node(
        self, rendered: dict[str, list[Doc]]
    ) -> None:
        """The ServiceMonitor scrapes the Service's port, sets node and instance to the node name,
        drops clashing labels."""
        docs = rendered["manifests/overlays/prometheus-operator"]
        service = _one(docs, "Service")
        monitor = _one(docs, "ServiceMonitor")
        assert monitor["spec"]["selector"]["matchLabels"].items() <= (
            service["metadata"]["labels"].items()
        )
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        relabelings = endpoint["relabelings"]
        for target in ("node", "instance"):
            # instance too: a replaced exporter pod (new IP) keeps its series.
            assert {
                "action": "replace",
                "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                "targetLabel": target,
            } in relabelings
        (drop,) = [r for r in relabelings if r["action"] == "labeldrop"]
        for label in ("namespace", "pod", "container"):
            assert f"|{label}|" in f"|{drop['regex'].strip('()')}|"
        # job="podresources-exporter" is what the alert rules select on.
        assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == NAMESPACE

    def test_prometheus_rule_is_shipped(self, rendered: dict[str, list[Doc]]) -> None:
        """The prometheus-operator overlay carries the PrometheusRule with rule groups."""
        rule = _one(rendered["manifests/overlays/prometheus-operator"], "PrometheusRule")
        assert rule["spec"]["groups"]

    def test_grafana_config_maps_hold_every_dashboard(self, rendered: dict[str, list[Doc]]) -> None:
        """One ConfigMap per dashboard, labelled for the sidecar, unhashed, content unchanged."""
        maps = [d for d in rendered["manifests/overlays/grafana"] if d["kind"] == "ConfigMap"]
        files = {}
        for config_map in maps:
            assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
            ((key, content),) = config_map["data"].items()
            assert config_map["metadata"]["name"] == f"podresources-dashboard-{key[:-5]}"
            files[key] = content
        assert {p.name: p.read_text() for p in DASHBOARDS.glob("*.json")} == files

    def test_grafana_config_maps_fit_a_client_side_apply(
        self, rendered: dict[str, list[Doc]]
    ) -> None:
        """The overlay says `kubectl apply -k` needs no --server-side: kubectl copies each
        object, as Go's JSON encoder writes it (<, > and & as \\u003c and so on), into
        its last-applied annotation, and the API server refuses annotations over 256 KiB."""
        maps = [d for d in rendered["manifests/overlays/grafana"] if d["kind"] == "ConfigMap"]
        assert len(maps) == 4
        for config_map in maps:
            encoded = json.dumps(config_map, ensure_ascii=False, separators=(",", ":"))
            size = len(encoded.encode()) + 5 * sum(encoded.count(c) for c in "<>&")
            assert size < 256 * 1024, (config_map["metadata"]["name"], size)


def _driver_upgrade_patches() -> dict[str, str]:
    """docs/operations.md's GPU Operator driver-upgrade patches, keyed by their first line
    (a comment saying what each is for)."""
    text = (REPO / "docs" / "operations.md").read_text()
    section = text[
        text.index("- **NVIDIA GPU Operator driver upgrades**") : text.index("- **DRA drivers**")
    ]
    blocks = [textwrap.dedent(b) for b in re.findall(r"\n  ```yaml\n(.*?)\n  ```\n", section, re.S)]
    return {block.splitlines()[0]: block for block in blocks}


def _terms(pod_spec: Doc) -> list[list[Doc]]:
    required = pod_spec["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    return [term["matchExpressions"] for term in required["nodeSelectorTerms"]]


class TestDriverUpgradePatches:
    """The documented patches that let the GPU Operator unload the driver, as a user's
    kustomization beside a checkout of this repository renders them."""

    NODE_SELECTOR = (
        "# GPU Operator v26.7+: the node selector the driver manager pauses and waits for"
    )
    ALONE = "# older releases, without the gpu-nodes component"
    WITH_GPU_NODES = "# older releases, with the gpu-nodes component"
    PAUSED = {
        "key": "nvidia.com/dra-kubelet-plugin",
        "operator": "NotIn",
        "values": ["paused-for-driver-upgrade"],
    }

    @staticmethod
    def _pod_spec(kubectl: str, tmp_path: Path, patch: str | None, gpu_nodes: bool) -> Doc:
        (tmp_path / "podresources-exporter").symlink_to(REPO)
        kustomization = (
            "apiVersion: kustomize.config.k8s.io/v1beta1\n"
            "kind: Kustomization\n"
            "resources: [podresources-exporter/manifests/base]\n"
        )
        if gpu_nodes:
            kustomization += "components: [podresources-exporter/manifests/components/gpu-nodes]\n"
        (tmp_path / "kustomization.yaml").write_text(kustomization + (patch or ""))
        return _pod_spec(_render(kubectl, tmp_path))

    def test_the_three_patches_are_documented(self) -> None:
        """The section holds exactly the three patches the tests below render."""
        assert {self.NODE_SELECTOR, self.ALONE, self.WITH_GPU_NODES} == set(
            _driver_upgrade_patches()
        )

    @pytest.mark.parametrize("gpu_nodes", [False, True], ids=["base", "gpu-nodes"])
    def test_node_selector_on_the_client_label(
        self, kubectl: str, tmp_path: Path, gpu_nodes: bool
    ) -> None:
        """v26.7+: nodeSelector nvidia.com/gpu.deploy.client=true (the key the driver
        manager waits for), leaving gpu-nodes' affinity as it was."""
        patch = _driver_upgrade_patches()[self.NODE_SELECTOR]
        spec = self._pod_spec(kubectl, tmp_path, patch, gpu_nodes)
        assert {"nvidia.com/gpu.deploy.client": "true"} == spec["nodeSelector"]
        if gpu_nodes:
            (tmp_path / "without").mkdir()
            plain = self._pod_spec(kubectl, tmp_path / "without", None, gpu_nodes=True)
            assert plain["affinity"] == spec["affinity"]
        else:
            assert "affinity" not in spec

    def test_custom_label_affinity_alone(self, kubectl: str, tmp_path: Path) -> None:
        """Older releases, base only: one term, the label not paused."""
        patch = _driver_upgrade_patches()[self.ALONE]
        assert [[self.PAUSED]] == _terms(self._pod_spec(kubectl, tmp_path, patch, False))

    def test_custom_label_affinity_keeps_the_gpu_node_terms(
        self, kubectl: str, tmp_path: Path
    ) -> None:
        """Older releases with gpu-nodes: every GPU-node term kept, each with the paused
        check appended (the plain `add` on affinity would have replaced them all)."""
        (tmp_path / "gpu-nodes").mkdir()
        plain = _terms(self._pod_spec(kubectl, tmp_path / "gpu-nodes", None, True))
        (tmp_path / "patched").mkdir()
        patch = _driver_upgrade_patches()[self.WITH_GPU_NODES]
        patched = _terms(self._pod_spec(kubectl, tmp_path / "patched", patch, True))
        assert [[*term, self.PAUSED] for term in plain] == patched
        (tmp_path / "replaced").mkdir()
        alone = _driver_upgrade_patches()[self.ALONE]
        assert [[self.PAUSED]] == _terms(
            self._pod_spec(kubectl, tmp_path / "replaced", alone, True)
        )


class TestOldestKubernetesPatch:
    """docs/operations.md's upgrade note for Kubernetes 1.29, whose API server refuses the
    recursiveReadOnly field: its patch, in a kustomization beside a checkout."""

    def test_the_patch_removes_the_field_and_validates_on_1_29(
        self, kubectl: str, tmp_path: Path
    ) -> None:
        kubernetes_validate = pytest.importorskip(
            "kubernetes_validate", reason="pip install kubernetes-validate (in the test extras)"
        )
        text = (REPO / "docs" / "operations.md").read_text()
        note = text[text.index("- **Kubernetes 1.30 or later**") :]
        block = textwrap.dedent(re.findall(r"\n  ```yaml\n(.*?)\n  ```\n", note, re.S)[0])
        (tmp_path / "podresources-exporter").symlink_to(REPO)
        (tmp_path / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\n"
            "kind: Kustomization\n"
            "resources: [podresources-exporter/manifests/base]\n" + block
        )
        docs = _render(kubectl, tmp_path)
        mounts = _container(docs)["volumeMounts"]
        assert [] == [m["name"] for m in mounts if "recursiveReadOnly" in m]
        assert _container(_render(kubectl, MANIFESTS))["volumeMounts"] == [
            m | {"recursiveReadOnly": "IfPossible"} if m["name"] == "kubelet-plugins" else m
            for m in mounts
        ]
        kubernetes_validate.validate(_daemonset(docs), "1.29", strict=True)


class TestWithoutKubeletPlugins:
    """docs/operations.md's patch for nodes without DRA drivers, which takes away the
    kubelet plugins folder and so the CSI and DRA drivers' sockets in it."""

    def test_the_patch_drops_that_mount_and_nothing_else(
        self, kubectl: str, tmp_path: Path
    ) -> None:
        text = (REPO / "docs" / "operations.md").read_text()
        section = text[text.index("**Sockets under the kubelet's plugins folder.**") :]
        block = section[section.index("```yaml\n") + 8 : section.index("```\n", 8)]
        assert block.startswith("# without the kubelet's plugins folder\n")
        (tmp_path / "podresources-exporter").symlink_to(REPO)
        (tmp_path / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\n"
            "kind: Kustomization\n"
            "resources: [podresources-exporter/manifests/base]\n" + block
        )
        patched = _daemonset(_render(kubectl, tmp_path))
        pod = patched["spec"]["template"]["spec"]
        host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
        assert not [p for p in host_paths if p.startswith("/var/lib/kubelet/plugins")]
        base = copy.deepcopy(_daemonset(_render(kubectl, MANIFESTS)))
        base_pod = base["spec"]["template"]["spec"]
        base_pod["volumes"] = [v for v in base_pod["volumes"] if v["name"] != "kubelet-plugins"]
        (container,) = base_pod["containers"]
        container["volumeMounts"] = [
            m for m in container["volumeMounts"] if m["name"] != "kubelet-plugins"
        ]
        assert base == patched

    def test_the_base_says_why_the_mount_is_a_risk(self) -> None:
        """The kubelet-plugins mount's comment names the sockets and where to read on."""
        text = (MANIFESTS / "base" / "daemonset.yaml").read_text()
        mount = text.index("- name: kubelet-plugins\n              mountPath:")
        comment = text[text.rindex("readOnly: true", 0, mount) : mount]
        for word in ("connect()", "csi.sock", "dra.sock", "Sockets under the kubelet's"):
            assert word in comment, word
