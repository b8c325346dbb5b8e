"""Issue-10 attribution through the real exporter against the simulated kubelet.

The collectors here are the real ones: NVML through the real pynvml bindings (this
machine has no libnvidia-ml.so.1, so NVML is absent, as on a node whose runtime does
not inject it), sysfs collectors on the simulated node's kernel-shaped tree.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from freshprocess import run_python
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from exporter.app import Exporter
from exporter.cli import parse_config
from exporter.model import AllocatableResources, ContainerResources, PodResources
from exporter.sim.hardware import SimHardware, demo_hardware
from exporter.sim.node import SimulatedNode
from exporter.sim.scenario import DemoScenario, KubeletState


def _real_nvml_present() -> bool:
    # In a child: binding pynvml here would bind it for the whole session, and the tests
    # that load the fake libnvidia-ml into this process would all skip.
    try:
        done = run_python("import pynvml; pynvml.nvmlInit()", timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return True  # a driver that hangs nvmlInit is there, not absent
    return done.returncode == 0


pytestmark = pytest.mark.skipif(
    _real_nvml_present(), reason="a real NVIDIA driver is present: NVML is not absent here"
)


@dataclass(frozen=True, slots=True)
class CpuOnlyScenario:
    """A node whose kubelet advertises exclusive CPUs and no device at all."""

    hardware: SimHardware

    def state_at(self, tick: int) -> KubeletState:
        pod = PodResources("batch", "cruncher-0", (ContainerResources("main", cpu_ids=(2, 3)),))
        return KubeletState(pods=(pod,), allocatable=AllocatableResources(cpu_ids=(2, 3, 4, 5)))


async def _real_collectors_exporter(node: SimulatedNode) -> Exporter:
    config = parse_config(
        [*node.exporter_flags(), "--kubelet.timeout", "2", "--collector.timeout", "5"], {}
    )
    return Exporter(config)  # every collector built for real, NVML through pynvml


async def _nvml_success(exporter: Exporter, client: TestClient) -> float:  # type: ignore[type-arg]
    await exporter.poller.poll_once()
    response = await client.get("/metrics")
    text = await response.text()
    return next(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "podresources_collector_success" and sample.labels["collector"] == "nvml"
    )


@pytest.fixture
async def cpu_only_node(short_tmp: Path) -> AsyncIterator[SimulatedNode]:
    node = SimulatedNode(CpuOnlyScenario(demo_hardware()), root=short_tmp)
    await node.start()
    yield node
    await node.stop()


class TestNvmlAbsent:
    async def test_failure_on_a_node_with_nvidia_devices(
        self, sim_node: SimulatedNode, aiohttp_client: Any
    ) -> None:
        """No libnvidia-ml.so.1 while the kubelet advertises nvidia.com/gpu: success 0,
        and one log line says why, so the shipped NVML alert can fire."""
        assert isinstance(sim_node.scenario, DemoScenario)
        exporter = await _real_collectors_exporter(sim_node)
        try:
            client = await aiohttp_client(exporter.create_app())
            with capture_logs() as logs:
                assert 0.0 == await _nvml_success(exporter, client)
                assert 0.0 == await _nvml_success(exporter, client)
            missing = [e for e in logs if e["event"] == "collector_source_missing"]
            assert [e["collector"] for e in missing] == ["nvml"]  # logged once, not per poll
            # The demo has nvidia.com/* devices and gpu.nvidia.com claims: either is why.
            assert "but the node has " in missing[0]["error"]
            assert "nvidia.com" in missing[0]["error"].partition("but the node has ")[2]
            debug = await (await client.get("/debug/allocations")).json()
            (nvml,) = [c for c in debug["collectors"] if c["name"] == "nvml"]
            assert (nvml["success"], nvml["unavailable"] is not None) == (False, True)
        finally:
            await exporter.close()

    async def test_quiet_on_a_cpu_only_node(
        self, cpu_only_node: SimulatedNode, aiohttp_client: Any
    ) -> None:
        """The same absence on a node with no NVIDIA resources is success, and quiet."""
        exporter = await _real_collectors_exporter(cpu_only_node)
        try:
            client = await aiohttp_client(exporter.create_app())
            with capture_logs() as logs:
                assert 1.0 == await _nvml_success(exporter, client)
            assert not [e for e in logs if e["event"] == "collector_source_missing"]
            assert [e["reason"] for e in logs if e["event"] == "collector_unavailable"] != []
        finally:
            await exporter.close()
