"""The exporter under the rendered pod's security context, not the test runner's.

Each case renders a DaemonSet and runs the exporter as its container would: every mount
read-only (readOnlyRootFilesystem, and read-only volumes) but the emptyDir ones, which
get a tmpfs of their sizeLimit at their mountPath; the pod's uid, gid and groups; no
capability left (capabilities.drop ALL: an empty bounding set, so not even uid 0 gets
one at exec) and no_new_privs (allowPrivilegeEscalation: false). Then, with TLS and
basic auth on as web-config turns them on (the certificate inline, which the exporter
writes to a temporary file for OpenSSL), the probes pass, a scrape with the password
passes, and SIGTERM ends it within terminationGracePeriodSeconds.

Needs root, util-linux's unshare, mount and setpriv, and a kernel with mount_setattr
(Linux 5.12+): a private mount namespace is made read-only, the machine's stays as it
is. --demo stands in for the node's kubelet and sysfs, as in test_probes.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import bcrypt
import pytest
import yaml
from pki import make_pki
from webserving import free_port

REPO = Path(__file__).resolve().parents[2]
SECRET_MOUNT = "/etc/podresources-exporter/web"
# Where the checkout and the case's files are bound inside the namespace: the emptyDir
# mounted on /tmp would hide them where they are (pytest's folders are under /tmp).
INSIDE = Path("/mnt")
_QUANTITY = {"Ki": "k", "Mi": "m", "Gi": "g"}

# Run by `unshare --mount` as root: bind what the case needs under /mnt, make every
# mount of this namespace read-only (mount_setattr, AT_RECURSIVE: submounts too), put a
# tmpfs on each emptyDir's path, bind back (read-only) the Python the test runs on where
# an emptyDir hides it (a checkout or virtualenv under /tmp), then exec setpriv, which
# drops to the pod's identity.
LAUNCHER = r"""
import ctypes, json, os, subprocess, sys

spec = json.loads(sys.argv[1])


def run(*argv):
    subprocess.run(argv, check=True)


run("mount", "--make-rprivate", "/")
run("mount", "-t", "tmpfs", "-o", "size=1m,mode=755", "binds", spec["inside"])
for source, target in spec["binds"]:
    os.makedirs(target)
    run("mount", "--rbind", source, target)
for number, path in enumerate(spec["restore"]):
    os.makedirs(spec["inside"] + "/keep" + str(number))
    run("mount", "--rbind", path, spec["inside"] + "/keep" + str(number))
libc = ctypes.CDLL(None, use_errno=True)
attr = (ctypes.c_uint64 * 4)(1, 0, 0, 0)  # struct mount_attr {MOUNT_ATTR_RDONLY, 0, 0, 0}
if libc.syscall(442, -100, b"/", 0x8000, attr, 32) != 0:  # mount_setattr(AT_RECURSIVE)
    raise OSError(ctypes.get_errno(), "mount_setattr")
for path, size in spec["writable"]:
    run("mount", "-t", "tmpfs", "-o", "size=" + size + ",mode=1777", "emptydir", path)
for number, path in enumerate(spec["restore"]):
    os.makedirs(path, exist_ok=True)
    run("mount", "--rbind", spec["inside"] + "/keep" + str(number), path)
    if libc.syscall(442, -100, path.encode(), 0x8000, attr, 32) != 0:
        raise OSError(ctypes.get_errno(), "mount_setattr " + path)
os.chdir("/")
os.execv(spec["argv"][0], spec["argv"])
"""


def _python_refused(drop: list[str]) -> str | None:
    """Why the pod's user cannot run this Python at all, which a machine may not let it
    (an interpreter under a home folder of mode 700); None if it can. That is no
    finding about the exporter."""
    probe = subprocess.run([*drop, sys.executable, "-c", "pass"], capture_output=True, text=True)
    if probe.returncode == 0:
        return None
    return (probe.stderr.strip().splitlines() or ["no message"])[-1]


def _render(kubectl: str, directory: Path) -> dict[str, Any]:
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=True
    )
    (daemonset,) = [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "DaemonSet"]
    return dict(daemonset)


def _non_root_with_web_config(tmp_path: Path) -> Path:
    folder = tmp_path / "kustomization"
    folder.mkdir()
    components = REPO / "manifests" / "components"
    (folder / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(REPO / "manifests" / "base", folder)],
                "components": [
                    os.path.relpath(components / name, folder)
                    for name in ("non-root", "web-config")
                ],
            }
        )
    )
    return folder


def _tools() -> tuple[str, str, str]:
    if os.geteuid() != 0:
        pytest.skip("needs root: a private mount namespace made read-only")
    found = [shutil.which(name) for name in ("unshare", "setpriv", "mount")]
    if None in found:
        pytest.skip("needs util-linux's unshare, setpriv and mount")
    unshare, setpriv, mount = (str(path) for path in found)
    release = tuple(int(part) for part in os.uname().release.split(".")[:2])
    if release < (5, 12):
        pytest.skip(f"needs mount_setattr, Linux 5.12+ (this is {os.uname().release})")
    probe = subprocess.run([unshare, "--mount", "true"], capture_output=True, check=False)
    if probe.returncode != 0:  # root in a container without CAP_SYS_ADMIN
        pytest.skip(f"cannot make a mount namespace: {probe.stderr.decode().strip()}")
    return unshare, setpriv, mount


def _hidden_by(writable: list[list[str]]) -> list[str]:
    """The folders of the Python running this test (its virtualenv, its installation)
    that an emptyDir's tmpfs would hide: the image has its Python outside them, this
    machine may not."""
    folders = sorted(
        {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    )
    paths = [path for path, _ in writable]
    return [f for f in folders if any(f == p or f.startswith(p.rstrip("/") + "/") for p in paths)]


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def _root_mount_options(pid: int) -> set[str]:
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/":
            return set(fields[5].split(","))
    raise AssertionError("no / in mountinfo")


@pytest.mark.parametrize("variant", ["web-config", "non-root+web-config"])
async def test_exporter_runs_under_the_pods_security_context(
    kubectl: str, tmp_path: Path, variant: str
) -> None:
    """The rendered securityContext, volumes and grace period, applied to a real
    exporter process: it starts, serves the probes and a scrape over TLS, writes
    nowhere but its emptyDir, and exits on SIGTERM in time."""
    unshare, setpriv, _ = _tools()
    overlay = (
        REPO / "manifests" / "overlays" / "web-config"
        if variant == "web-config"
        else _non_root_with_web_config(tmp_path)
    )
    daemonset = _render(kubectl, overlay)
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    context, pod_context = container["securityContext"], pod.get("securityContext", {})
    assert (True, False, ["ALL"], None) == (
        context["readOnlyRootFilesystem"],
        context["allowPrivilegeEscalation"],
        context["capabilities"]["drop"],
        context["capabilities"].get("add"),
    )
    volumes = {v["name"]: v for v in pod["volumes"]}
    writable = []
    for mount in container["volumeMounts"]:
        empty_dir = volumes[mount["name"]].get("emptyDir")
        if empty_dir is not None:
            limit = str(empty_dir["sizeLimit"])
            writable.append([mount["mountPath"], limit[:-2] + _QUANTITY[limit[-2:]]])
        else:
            assert mount.get("readOnly") is True, mount["mountPath"]
    secret_volume = volumes["web-config"]["secret"]

    # The Secret as the kubelet writes it: owned by root, group fsGroup where set.
    case = tmp_path / "case"
    secret = case / "secret"
    secret.mkdir(parents=True)
    pki = make_pki(tmp_path / "pki")
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    inline = {  # inline PEM: the exporter must write it to a temporary file
        "tls_server_config": {
            "cert": pki.cert("server").read_text(),
            "key": pki.key("server").read_text(),
        },
        "basic_auth_users": {"prometheus": hashed},
    }
    (secret / "web.yml").write_text(yaml.safe_dump(inline))
    fs_group = pod_context.get("fsGroup")
    for path in (case, secret):
        path.chmod(0o755)
    (secret / "web.yml").chmod(secret_volume["defaultMode"])
    os.chown(secret / "web.yml", 0, fs_group if fs_group is not None else 0)

    port = free_port()
    args = []
    for arg in container["args"]:
        if arg.startswith("--web.listen-address="):
            arg = f"--web.listen-address=127.0.0.1:{port}"
        args.append(arg.replace(SECRET_MOUNT, str(INSIDE / "case" / "secret")))
    groups = [*pod_context.get("supplementalGroups", ()), *([fs_group] if fs_group else [])]
    drop = [
        setpriv,
        f"--reuid={context['runAsUser']}",
        f"--regid={context['runAsGroup']}",
        f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]
    refused = _python_refused(drop)
    if refused is not None:
        pytest.skip(f"uid {context['runAsUser']} cannot run {sys.executable} here: {refused}")
    spec = {
        "inside": str(INSIDE),
        "binds": [[str(REPO), str(INSIDE / "repo")], [str(case), str(INSIDE / "case")]],
        "writable": writable,
        "restore": _hidden_by(writable),
        "argv": [
            *drop,
            sys.executable,
            "-m",
            "exporter",
            *args,
            "--demo",
            "--poll.interval",
            "1",
        ],
    }
    environment = {
        **{e["name"]: e["value"] for e in container["env"] if "value" in e},
        "NODE_NAME": "security-context-node",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(INSIDE / "repo"),
    }
    log_path = tmp_path / "exporter.log"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            unshare,
            "--mount",
            sys.executable,
            "-c",
            LAUNCHER,
            json.dumps(spec),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
            cwd="/",
        )
    try:
        results: dict[str, int] = {}
        async with aiohttp.ClientSession() as session:
            for _ in range(300):
                if process.returncode is not None:
                    break
                try:
                    async with session.get(
                        f"https://127.0.0.1:{port}/readyz", ssl=False
                    ) as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.1)
            if process.returncode is not None:
                pytest.fail(f"exited {process.returncode}: {log_path.read_text()[-2000:]}")
            for kind in ("livenessProbe", "readinessProbe"):
                get = container[kind]["httpGet"]
                url = f"{get['scheme'].lower()}://127.0.0.1:{port}{get['path']}"
                async with session.get(url, ssl=False) as response:
                    results[kind] = response.status
            credentials = base64.b64encode(b"prometheus:s3cret").decode()
            async with session.get(
                f"https://127.0.0.1:{port}/metrics",
                ssl=False,
                headers={"Authorization": f"Basic {credentials}"},
            ) as response:
                results["metrics"] = response.status
                page = await response.text()
        status = _status(process.pid)
        root = _root_mount_options(process.pid)

        grace = pod["terminationGracePeriodSeconds"]
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), timeout=grace)
        took = time.monotonic() - started
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    output = log_path.read_text()
    assert {"livenessProbe": 200, "readinessProbe": 200, "metrics": 200} == results, output
    assert "podresources_kubelet_up 1" in page
    uid, gid = str(context["runAsUser"]), str(context["runAsGroup"])
    assert (
        [uid] * 4,
        [gid] * 4,
        sorted(map(str, groups)),
        "0000000000000000",
        "0000000000000000",
        "1",
    ) == (
        status["Uid"].split(),
        status["Gid"].split(),
        sorted(status["Groups"].split()),
        status["CapEff"],
        status["CapBnd"],
        status["NoNewPrivs"],
    )
    assert "ro" in root
    assert (0, True) == (code, took < grace), output
