"""The real ``--demo`` process: what `make demo` users and outside checks see."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest
from scratch import demo_environ
from test_metricwriter import promtool_problems

# One worker of `make unit` runs them all: the --demo process, started once.
pytestmark = pytest.mark.xdist_group("demo_process")

PROMTOOL = shutil.which("promtool")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(url: str, *, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.fixture(scope="module")
def demo_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`podresources-exporter --demo` on a free loopback port, ready to scrape."""
    port = _free_port()
    log_path = tmp_path_factory.mktemp("demo") / "demo.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "exporter",
                "--demo",
                "--poll.interval",
                "1",
                "--web.listen-address",
                f"127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=demo_environ(os.environ),
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"--demo exited {process.returncode}: {log_path.read_text()[-2000:]}")
            try:
                if _get(f"{url}/readyz")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            pytest.fail(f"--demo never became ready: {log_path.read_text()[-2000:]}")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert process.returncode == 0, "SIGTERM should stop the exporter cleanly"


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not found: apt-get install prometheus")
def test_promtool_accepts_demo_metrics(demo_url: str) -> None:
    """`promtool check metrics` passes on the whole demo output, every collector on."""
    status, body = _get(f"{demo_url}/metrics")
    assert status == 200
    assert PROMTOOL is not None
    result = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=body, capture_output=True, timeout=60
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not found: apt-get install prometheus")
def test_promtool_accepts_demo_openmetrics(demo_url: str) -> None:
    """The OpenMetrics page too, every collector on: promtool reads it with the text
    parser, so a HELP that OpenMetrics escapes differently (a double quote) fails it."""
    status, body = _get(
        f"{demo_url}/metrics", headers={"Accept": "application/openmetrics-text;version=1.0.0"}
    )
    assert status == 200
    assert b"\n# EOF\n" in body[-8:]
    assert [] == promtool_problems(body.decode(), openmetrics=True)


def test_openmetrics_output_parses_strictly(demo_url: str) -> None:
    """The OpenMetrics rendering (what Prometheus asks for first) parses and ends in # EOF."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    status, body = _get(
        f"{demo_url}/metrics", headers={"Accept": "application/openmetrics-text;version=1.0.0"}
    )
    assert status == 200
    names = {family.name for family in text_string_to_metric_families(body.decode())}
    assert {"podresources_kubelet_requests", "podresources_container_device_info"} <= names


def test_the_text_view_names_a_nics_netdev_and_rdma_device(demo_url: str) -> None:
    """The HCA trainer-0 holds is one device to the exporter, its netdev's and its RDMA
    device's figures together: the table names both, as alerts name either."""
    status, table = _get(f"{demo_url}/debug/allocations?format=text")
    allocations = table.decode().split("\n# ", 1)[0]  # before the GPU sections
    rows = [line for line in allocations.splitlines() if "nvidia.com/hca" in line]
    assert (200, ["ens1f0np0, mlx5_0"]) == (status, [row.split("  ")[-1] for row in rows])


def test_demo_shows_pods_with_owner_labels(demo_url: str) -> None:
    """The README's curl session: the table lists the simulated pods; metrics carry owners."""
    status, table = _get(f"{demo_url}/debug/allocations?format=text")
    assert status == 200
    assert b"trainer-0" in table
    assert b"llm-server-7d9f8" in table
    _, metrics = _get(f"{demo_url}/metrics")
    info = [
        line
        for line in metrics.decode().splitlines()
        if line.startswith("podresources_container_device_info{")
    ]
    assert any(
        'namespace="ml-training"' in line
        and 'pod="trainer-0"' in line
        and 'container="trainer"' in line
        for line in info
    )
    for family in (
        "podresources_gpu_utilization_ratio",
        "podresources_net_receive_bytes_total",
        "podresources_infiniband_receive_bytes_total",
        "podresources_container_exclusive_cpu_seconds_total",
        "podresources_numa_memory_total_bytes",
    ):
        assert f"\n{family}{{".encode() in metrics, f"{family} missing from the demo"
    # trainer-0's GPUs are NVIDIA's: their figures come from the simulated NVML, not the
    # real library (absent here), which the demo must not fall back to.
    nvidia = [
        line
        for line in metrics.decode().splitlines()
        if line.startswith("podresources_gpu_power_watts{") and 'pod="trainer-0"' in line
    ]
    assert [] != nvidia
    status, body = _get(f"{demo_url}/debug/allocations?pod=trainer-0")
    containers = {c["name"]: c for c in json.loads(body)["pods"][0]["containers"]}
    assert containers["trainer"]["devices"][0]["telemetry"]["figures"]


def _problems(output: bytes) -> list[str]:
    """Lines that are no JSON event, or an event at error level or above."""
    found = []
    for line in output.decode(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            found.append(line)
            continue
        if not isinstance(event, dict) or event.get("level") in ("error", "critical"):
            found.append(line)
    return found


def test_a_stop_during_a_poll_logs_no_error() -> None:
    """SIGTERM as the first poll runs (it starts as "listening" is logged, and the
    first poll that ends logs allocations_loaded): exit 0, and not one ERROR line nor
    traceback, the simulated kubelet's calls cut short included."""
    process = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--demo", "--web.listen-address", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert process.stdout is not None
        head = []
        for line in process.stdout:  # EOF: it exited early, which the asserts show
            head.append(line)
            if json.loads(line).get("event") == "listening":
                process.send_signal(signal.SIGTERM)
                break
        rest, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = b"".join(head) + rest
    assert (0, []) == (process.returncode, _problems(output)), output.decode()[-3000:]
