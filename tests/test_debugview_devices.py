"""/debug/allocations?device= on the demo node, through the real exporter and the
simulated kubelet over gRPC: each name an on-call engineer is given for a device (the
kubelet's ID, a GPU or MIG UUID, a PCI address, an interface or RDMA device name) finds
the pods that hold it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from exporter.app import Exporter, demo_collectors
from exporter.cli import parse_config
from exporter.sim.hardware import demo_hardware
from exporter.sim.node import SimulatedNode

HW = demo_hardware()
GPU0, GPU1, MIG_GPU, SHARED_GPU, GPU4, DRA_MIG_GPU, FREE_GPU = HW.gpus
PF0 = HW.nics[0]  # 0000:4b:00.0, RDMA device mlx5_0
VF0_1 = next(n for n in HW.nics if n.physfn == PF0.pci_address and n.vf_index == 1)

Pods = list[tuple[str, str]]


@pytest.fixture
async def client(sim_node: SimulatedNode, aiohttp_client: Any) -> AsyncIterator[TestClient]:  # type: ignore[type-arg]
    config = parse_config([*sim_node.exporter_flags(), "--node-name=demo-node"], {})
    exporter = Exporter(config, collectors=demo_collectors(config, sim_node))
    await exporter.poller.poll_once()
    yield await aiohttp_client(exporter.create_app())
    await exporter.close()


async def _pods(client: TestClient, device: str) -> Pods:  # type: ignore[type-arg]
    response = await client.get("/debug/allocations", params={"device": device})
    assert 200 == response.status, await response.text()
    body = await response.json()
    return sorted((p["namespace"], p["name"]) for p in body["pods"])


class TestByTheHardwareADeviceResolvedTo:
    @pytest.mark.parametrize(
        ("asked", "expected"),
        [
            # A DRA device by its GPU's UUID, its MIG device's, its PCI address.
            (GPU4.uuid, [("dra-demo", "llm-gpus-0")]),
            (DRA_MIG_GPU.mig_devices[0].uuid, [("dra-demo", "llm-gpus-0")]),
            (GPU4.pci_address, [("dra-demo", "llm-gpus-0")]),
            # A DRA VF shared by two claims, by its PCI address.
            ("0000:4b:00.5", [("dra-demo", "dpdk-a-0"), ("dra-demo", "dpdk-b-0")]),
            # A whole GPU by the PCI address on its device_info and PCIe series.
            (GPU0.pci_address, [("ml-training", "trainer-0")]),
            # A time-sliced GPU by its PCI address: every replica's holder.
            (
                SHARED_GPU.pci_address,
                [("notebooks", "jupyter-alice"), ("notebooks", "jupyter-bob")],
            ),
            # A NIC by its interface name, an HCA by its RDMA device name.
            (VF0_1.netdev, [("ml-training", "trainer-0")]),
            ("mlx5_0", [("ml-training", "trainer-0")]),
        ],
    )
    async def test_found_by_its_hardware_names(
        self,
        client: TestClient,  # type: ignore[type-arg]
        asked: str,
        expected: Pods,
    ) -> None:
        """The names a series label, nvidia-smi, ip link or ibstat gives for a device
        find its holders, whatever ID the kubelet knows it by."""
        assert expected == await _pods(client, asked)

    @pytest.mark.parametrize(
        ("asked", "expected"),
        [
            (f"{SHARED_GPU.uuid}::1", [("notebooks", "jupyter-bob")]),
            (f"{SHARED_GPU.uuid}::3", []),  # a replica nobody holds
            (SHARED_GPU.uuid, [("notebooks", "jupyter-alice"), ("notebooks", "jupyter-bob")]),
            (MIG_GPU.mig_devices[0].uuid, [("ml-inference", "llm-server-7d9f8")]),
            (FREE_GPU.uuid, []),
        ],
    )
    async def test_kubelet_ids_find_what_they_did(
        self,
        client: TestClient,  # type: ignore[type-arg]
        asked: str,
        expected: Pods,
    ) -> None:
        """A replica ID finds that replica's holder only, a GPU every replica's, a MIG
        device its own holder's, a free GPU nobody."""
        assert expected == await _pods(client, asked)
