"""/debug/allocations?device= on the demo node, through the real exporter and the
simulated kubelet over gRPC: each name an on-call engineer is given for a device (the
kubelet's ID, a GPU or MIG UUID, a PCI address, an interface or RDMA device name) finds
the pods that hold it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from exporter.app import Exporter, demo_collectors
from exporter.cli import parse_config
from exporter.model import ContainerResources, DeviceGroup, PodResources
from exporter.sim.dra import SimDraClaim
from exporter.sim.hardware import SimHardware, demo_hardware
from exporter.sim.node import SimulatedNode
from exporter.sim.scenario import DemoScenario, KubeletState

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


def _nvml_spelling(address: str) -> str:
    """``0000:17:00.0`` as nvidia-smi and NVML's busId write it: ``00000000:17:00.0``."""
    domain, rest = address.split(":", 1)
    return f"0000{domain}:{rest}".upper()


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
            # A PCI address as nvidia-smi writes it (8-digit domain, capitals).
            (_nvml_spelling(GPU0.pci_address), [("ml-training", "trainer-0")]),
            (_nvml_spelling(GPU4.pci_address), [("dra-demo", "llm-gpus-0")]),
            (_nvml_spelling("0000:4b:00.5"), [("dra-demo", "dpdk-a-0"), ("dra-demo", "dpdk-b-0")]),
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


# The RDMA shared device plugin's pools: each resource numbers its IDs from 0.
RDMA_POOLS = tuple(f"rdma/hca_shared_devices_{letter}" for letter in "abcdefgh")
RDMA_IDS_PER_POOL = 1000


@dataclass(frozen=True, slots=True)
class RdmaSharedScenario:
    """The demo node with 8 RDMA shared pools of 1,000 IDs, one held by x/rdma-user-0."""

    demo: DemoScenario

    @property
    def hardware(self) -> SimHardware:
        return self.demo.hardware

    @property
    def dra_claims(self) -> tuple[SimDraClaim, ...]:
        return self.demo.dra_claims

    def state_at(self, tick: int) -> KubeletState:
        state = self.demo.state_at(tick)
        pools = tuple(
            DeviceGroup(pool, (str(n),), (i * 2 // len(RDMA_POOLS),))
            for i, pool in enumerate(RDMA_POOLS)
            for n in range(RDMA_IDS_PER_POOL)
        )
        held = DeviceGroup(RDMA_POOLS[0], ("7",), (0,))
        user = PodResources("x", "rdma-user-0", (ContainerResources("main", devices=(held,)),))
        allocatable = replace(state.allocatable, devices=(*state.allocatable.devices, *pools))
        return KubeletState(pods=(*state.pods, user), allocatable=allocatable)


@pytest.fixture
async def rdma_client(short_tmp: Path, aiohttp_client: Any) -> AsyncIterator[TestClient]:  # type: ignore[type-arg]
    node = SimulatedNode(RdmaSharedScenario(DemoScenario.create()), root=short_tmp)
    await node.start()
    config = parse_config([*node.exporter_flags(), "--kubelet.timeout=5"], {})
    exporter = Exporter(config, collectors=demo_collectors(config, node))
    await exporter.poller.poll_once()
    yield await aiohttp_client(exporter.create_app())
    await exporter.close()
    await node.stop()


async def _body(client: TestClient, **params: str) -> tuple[int, Any]:  # type: ignore[type-arg]
    response = await client.get("/debug/allocations", params=params)
    assert 200 == response.status, await response.text()
    raw = await response.read()
    return len(raw), json.loads(raw)


def _allocatable(body: Any) -> tuple[list[tuple[str, ...]], int]:
    shown = body["allocatable"]
    return (
        [
            (d["resource"], d["device_id"], *((d["match"],) if "match" in d else ()))
            for d in shown["devices"]
        ],
        shown["devices_omitted"],
    )


class TestFilteredViewsCarryWhatTheySelect:
    async def test_an_owner_filter_leaves_the_inventory_out_and_says_so(
        self,
        rdma_client: TestClient,  # type: ignore[type-arg]
    ) -> None:
        """?namespace=x on a node with 8 x 1,000 RDMA shared IDs: x's pod, not the
        node's 8,000-odd allocatable IDs (1.1 MB of them), which it counts instead."""
        _, whole = await _body(rdma_client)
        every = len(whole["allocatable"]["devices"])
        size, body = await _body(rdma_client, namespace="x")
        assert (["rdma-user-0"], [], True) == (
            [p["name"] for p in body["pods"]],
            body["allocatable"]["devices"],
            size < 64 * 1024,
        )
        assert every == body["allocatable"]["devices_omitted"]

    async def test_the_unfiltered_view_stays_complete(
        self,
        rdma_client: TestClient,  # type: ignore[type-arg]
    ) -> None:
        """Without filters every allocatable ID is listed, and none omitted."""
        _, body = await _body(rdma_client)
        shown, omitted = _allocatable(body)
        rdma = [d for d in shown if d[0].startswith("rdma/")]
        assert (len(RDMA_POOLS) * RDMA_IDS_PER_POOL, 0) == (len(rdma), omitted)

    async def test_a_resource_filter_lists_that_resources_inventory(
        self,
        rdma_client: TestClient,  # type: ignore[type-arg]
    ) -> None:
        """?resource= lists the allocatable IDs of that resource, free ones included."""
        _, whole = await _body(rdma_client)
        _, body = await _body(rdma_client, resource="nvidia.com/gpu.shared")
        replicas = [("nvidia.com/gpu.shared", f"{SHARED_GPU.uuid}::{n}") for n in range(4)]
        assert (replicas, len(whole["allocatable"]["devices"]) - 4) == _allocatable(body)

    @pytest.mark.parametrize(
        ("asked", "expected"),
        [
            # A time-sliced GPU: its four replicas, two of them free.
            (
                SHARED_GPU.uuid,
                [("nvidia.com/gpu.shared", f"{SHARED_GPU.uuid}::{n}", "share") for n in range(4)],
            ),
            # A PF: itself and its VFs the SR-IOV plugin offers (its fourth VF is DRA's).
            (
                "mlx5_0",
                [
                    ("mellanox.com/cx7_sriov_vf", "0000:4b:00.2", "sriov_vf"),
                    ("mellanox.com/cx7_sriov_vf", "0000:4b:00.3", "sriov_vf"),
                    ("mellanox.com/cx7_sriov_vf", "0000:4b:00.4", "sriov_vf"),
                    ("nvidia.com/hca", "0000:4b:00.0", "same"),
                ],
            ),
            # An ID each shared pool has: one per pool.
            ("7", [(pool, "7", "same") for pool in RDMA_POOLS]),
        ],
    )
    async def test_a_device_filter_lists_what_it_finds(
        self,
        rdma_client: TestClient,  # type: ignore[type-arg]
        asked: str,
        expected: list[tuple[str, ...]],
    ) -> None:
        """?device= lists the allocatable devices it finds, each saying how."""
        _, whole = await _body(rdma_client)
        _, body = await _body(rdma_client, device=asked)
        shown, omitted = _allocatable(body)
        assert (expected, len(whole["allocatable"]["devices"]) - len(expected)) == (
            sorted(shown),
            omitted,
        )
