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
            # A VF by its interface name (a PF by its own: TestByTheDeviceADeviceIsPartOf).
            (VF0_1.netdev, [("ml-training", "trainer-0")]),
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


async def _matches(client: TestClient, device: str, output: str = "json") -> list[tuple[str, ...]]:  # type: ignore[type-arg]
    """(namespace, pod, device ID, match) of each device ?device= found, JSON or table."""
    params = {"device": device, "format": output}
    response = await client.get("/debug/allocations", params=params)
    assert 200 == response.status, await response.text()
    if output == "text":
        lines = (await response.text()).split("\n# ")[0].splitlines()
        columns = lines[1].split()
        rows = [dict(zip(columns, line.split(), strict=False)) for line in lines[2:]]
        return sorted(
            (r["NAMESPACE"], r["POD"], r["DEVICE"], r["MATCH"]) for r in rows if r["MATCH"] != "-"
        )
    body = await response.json()
    found = []
    for pod in body["pods"]:
        for container in pod["containers"]:
            devices = [
                *container["devices"],
                *(d for c in container["dynamic_resources"] for d in c["devices"]),
            ]
            for d in devices:
                if d.get("match"):
                    found.append(
                        (
                            pod["namespace"],
                            pod["name"],
                            d.get("device_id") or d["device"],
                            d["match"],
                        )
                    )
    return sorted(found)


MIG_A, MIG_B, MIG_C = (m.uuid for m in MIG_GPU.mig_devices)
PF0_HOLDERS = [
    ("batch", "etl-0", "0000:4b:00.4", "sriov_vf"),
    ("dra-demo", "dpdk-a-0", "0000-4b-00-5", "sriov_vf"),
    ("dra-demo", "dpdk-b-0", "0000-4b-00-5", "sriov_vf"),
    ("ml-inference", "llm-server-7d9f8", "0000:4b:00.2", "sriov_vf"),
    ("ml-training", "trainer-0", "0000:4b:00.0", "same"),
    ("ml-training", "trainer-0", "0000:4b:00.3", "sriov_vf"),
]


class TestByTheDeviceADeviceIsPartOf:
    async def test_who_is_on_a_mig_gpu(
        self,
        client: TestClient,  # type: ignore[type-arg]
    ) -> None:
        """Paged for a MIG-enabled GPU's Xid, on-call asks for the GPU and gets the pods
        on its slices (they got none: no pod holds the GPU itself)."""
        assert [
            ("ml-inference", "embedder-0"),
            ("ml-inference", "llm-server-7d9f8"),
        ] == await _pods(client, MIG_GPU.uuid)

    @pytest.mark.parametrize("output", ["json", "text"])
    @pytest.mark.parametrize("asked", [MIG_GPU.uuid, MIG_GPU.pci_address])
    async def test_a_mig_gpu_finds_the_holders_of_its_slices(
        self,
        client: TestClient,  # type: ignore[type-arg]
        asked: str,
        output: str,
    ) -> None:
        """A MIG-enabled GPU, by the UUID its Xid, NVLink and PCIe series carry or its
        PCI address, finds every pod holding one of its MIG devices, each said to hold
        a slice of it."""
        assert [
            ("ml-inference", "embedder-0", MIG_B, "mig_slice"),
            ("ml-inference", "embedder-0", MIG_C, "mig_slice"),
            ("ml-inference", "llm-server-7d9f8", MIG_A, "mig_slice"),
        ] == await _matches(client, asked, output)

    async def test_a_gpu_finds_its_mig_device_held_through_dra(
        self,
        client: TestClient,  # type: ignore[type-arg]
    ) -> None:
        """The GPU of a MIG device a DRA claim holds finds the claim's pod."""
        assert [
            ("dra-demo", "llm-gpus-0", "gpu-5-mig-1g10gb-19-3", "mig_slice"),
        ] == await _matches(client, DRA_MIG_GPU.uuid)

    @pytest.mark.parametrize("output", ["json", "text"])
    @pytest.mark.parametrize("asked", [PF0.pci_address, "mlx5_0", PF0.netdev])
    async def test_a_pf_finds_the_holders_of_its_vfs(
        self,
        client: TestClient,  # type: ignore[type-arg]
        asked: str,
        output: str,
    ) -> None:
        """A PF, by PCI address, RDMA device or interface name, finds its own holder and
        every pod holding one of its VFs, through a device plugin or a DRA claim."""
        assert PF0_HOLDERS == await _matches(client, asked, output)

    async def test_the_processes_on_a_mig_gpus_slices_are_listed(
        self,
        sim_node: SimulatedNode,
        aiohttp_client: Any,
    ) -> None:
        """With gpu_processes on, ?device=<MIG-enabled GPU> lists the processes NVML
        finds on its MIG devices, as it does the pods holding them."""
        flags = [*sim_node.exporter_flags(), "--collector.gpu_processes"]
        config = parse_config(flags, {})
        exporter = Exporter(config, collectors=demo_collectors(config, sim_node))
        try:
            await exporter.poller.poll_once()
            client = await aiohttp_client(exporter.create_app())
            response = await client.get("/debug/allocations", params={"device": MIG_GPU.uuid})
            body = await response.json()
        finally:
            await exporter.close()
        listed = [
            (d["device_id"], [p["owner"] for p in d["processes"]]) for d in body["gpu_processes"]
        ]
        assert [(MIG_A, ["ml-inference/llm-server-7d9f8/server"])] == listed

    async def test_a_part_does_not_find_its_whole(
        self,
        client: TestClient,  # type: ignore[type-arg]
    ) -> None:
        """A MIG device or a VF finds its own holder only, not its GPU's or PF's."""
        found = [await _matches(client, name) for name in (MIG_A, VF0_1.pci_address)]
        assert [
            [("ml-inference", "llm-server-7d9f8", MIG_A, "same")],
            [("ml-training", "trainer-0", VF0_1.pci_address, "same")],
        ] == found
