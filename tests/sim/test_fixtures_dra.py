"""The simulated node's DRA files read back, through the dra collector and the resolver,
to the hardware its DRA claims name."""

from __future__ import annotations

from pathlib import Path

from exporter.collectors.base import CollectorContext
from exporter.collectors.dra import CHECKPOINT_SOURCE, METADATA_SOURCE, DraCollector
from exporter.collectors.nvml import NvmlCollector
from exporter.join import join_snapshot
from exporter.model import (
    ClaimDevice,
    CollectorRun,
    DraDevice,
    DraState,
    DynamicResource,
    HardwareKey,
    KeyKind,
    KubeletStatus,
    Readings,
    Resolution,
)
from exporter.resolver import CDI_SOURCE, GRAMMAR_SOURCE, resolve_claim_device
from exporter.sim.dra import SRIOV_DRIVER
from exporter.sim.fixtures import dra as dra_files
from exporter.sim.gpus import SimulatedNvmlSource
from exporter.sim.hardware import demo_hardware
from exporter.sim.node import SimulatedNode
from exporter.sim.scenario import DemoScenario, DenseScenario, DraScenario

SCENARIO = DemoScenario.create()
HW = demo_hardware()
GPU4, GPU5 = HW.gpus[4], HW.gpus[5]
MIG = GPU5.mig_devices[0]
NVIDIA_UID = "3f9a1c52-7b1e-4d2a-9c8e-1f2a3b4c5d6e"
AMD_UID = "5a7c3e91-0d2b-4f6a-8e1c-9b8a7f6e5d4c"
MIG_NAME = "gpu-5-mig-1g10gb-19-3"


def _write(root: Path) -> CollectorContext:
    context = CollectorContext(
        sysfs=root / "sys",
        procfs=root / "proc",
        kubelet_plugins=root / "plugins",
        cdi=(root / "cdi",),
    )
    dra_files.write(
        plugins=context.kubelet_plugins,
        cdi=context.cdi[0],
        procfs_root=context.procfs,
        claims=SCENARIO.dra_claims,
    )
    return context


def _claims() -> list[tuple[str, DynamicResource]]:
    """(pod, claim) of every DRA claim the simulated kubelet reports."""
    return [
        (pod.name, claim)
        for pod in SCENARIO.state_at(0).pods
        for container in pod.containers
        for claim in container.dynamic_resources
    ]


def _resolve_all(dra: DraState) -> dict[tuple[str, str], Resolution]:
    """Resolution of each (pod, DRA device) of the demo."""
    return {
        (pod, device.device): resolve_claim_device(
            device,
            claim_namespace=claim.claim_namespace,
            claim_name=claim.claim_name,
            dra=dra,
        )
        for pod, claim in _claims()
        for device in claim.devices
    }


class TestFiles:
    def test_collector_reads_back_the_demo_claims(self, tmp_path: Path) -> None:
        """Checkpoint, metadata and CDI specs the sim writes give the expected DraState."""
        context = _write(tmp_path)

        def vf(claim: str) -> DraDevice:
            keys = (HardwareKey(KeyKind.PCI, "0000:4b:00.5"),)
            return DraDevice(
                SRIOV_DRIVER, "demo-node", "0000-4b-00-5", keys, METADATA_SOURCE, "dra-demo", claim
            )

        expected = Readings(
            dra=DraState(
                devices=(
                    DraDevice(
                        "gpu.nvidia.com",
                        "demo-node",
                        "gpu-4",
                        (HardwareKey(KeyKind.GPU_UUID, GPU4.uuid),),
                        CHECKPOINT_SOURCE,
                    ),
                    DraDevice(
                        "gpu.nvidia.com",
                        "demo-node",
                        MIG_NAME,
                        (
                            HardwareKey(KeyKind.MIG_UUID, MIG.uuid),
                            HardwareKey(KeyKind.MIG_PATH, f"{GPU5.uuid}/5/0"),
                            HardwareKey(KeyKind.NVIDIA_MINOR_GI, "5/5"),
                        ),
                        CHECKPOINT_SOURCE,
                    ),
                    vf("dpdk-a"),
                    vf("dpdk-b"),
                ),
                cdi_devices=(
                    (
                        f"k8s.gpu.amd.com/gpu={AMD_UID}-gpu-3-130",
                        (
                            HardwareKey(KeyKind.DRM_CARD, "3"),
                            HardwareKey(KeyKind.DRM_RENDER, "130"),
                        ),
                    ),
                    (
                        f"k8s.gpu.nvidia.com/claim={NVIDIA_UID}-gpu-4",
                        (HardwareKey(KeyKind.NVIDIA_MINOR, "4"),),
                    ),
                ),
            )
        )
        assert expected == DraCollector(context).collect()

    def test_no_claims_no_files(self, tmp_path: Path) -> None:
        """Without DRA claims the sim has the kubelet's empty plugins directory only."""
        assert not isinstance(DenseScenario.create(pod_count=1), DraScenario)
        dra_files.write(
            plugins=tmp_path / "plugins",
            cdi=tmp_path / "cdi",
            procfs_root=tmp_path / "proc",
            claims=(),
        )
        context = CollectorContext(
            procfs=tmp_path / "proc", kubelet_plugins=tmp_path / "plugins", cdi=(tmp_path / "cdi",)
        )
        assert Readings(dra=DraState()) == DraCollector(context).collect()


class TestResolution:
    def test_every_demo_device(self, tmp_path: Path) -> None:
        """Each DRA device resolves to hardware the sim has; gpu.example.com does not."""
        readings = DraCollector(_write(tmp_path)).collect()
        assert readings.dra is not None
        found = {
            key: (resolution.keys[:1], resolution.source)
            for key, resolution in _resolve_all(readings.dra).items()
        }
        expected = {
            ("inference-dra-0", "gpu-0"): ((), ""),
            ("llm-gpus-0", "gpu-4"): (
                (HardwareKey(KeyKind.GPU_UUID, GPU4.uuid),),
                CHECKPOINT_SOURCE,
            ),
            ("llm-gpus-0", MIG_NAME): (
                (HardwareKey(KeyKind.MIG_UUID, MIG.uuid),),
                CHECKPOINT_SOURCE,
            ),
            ("render-amd-0", "gpu-3-130"): ((HardwareKey(KeyKind.DRM_CARD, "3"),), CDI_SOURCE),
            ("dpdk-a-0", "0000-4b-00-5"): (
                (HardwareKey(KeyKind.PCI, "0000:4b:00.5"),),
                METADATA_SOURCE,
            ),
            ("dpdk-b-0", "0000-4b-00-5"): (
                (HardwareKey(KeyKind.PCI, "0000:4b:00.5"),),
                METADATA_SOURCE,
            ),
        }
        assert expected == found

    def test_mig_device_needs_the_checkpoint(self, tmp_path: Path) -> None:
        """Without the checkpoint the MIG device's name gives its slot, never its UUID."""
        context = _write(tmp_path)
        (context.kubelet_plugins / "gpu.nvidia.com" / "checkpoint.json").unlink()
        readings = DraCollector(context).collect()
        assert readings.dra is not None
        resolution = _resolve_all(readings.dra)[("llm-gpus-0", MIG_NAME)]
        expected = Resolution(
            MIG_NAME, keys=(HardwareKey(KeyKind.MIG_PLACEMENT, "5/19/3"),), source=GRAMMAR_SOURCE
        )
        assert expected == resolution

    def test_mig_device_joined_by_its_slot_without_the_checkpoint(self, tmp_path: Path) -> None:
        """Without the checkpoint, NVML's placement of GPU 5's instance still brings the
        MIG device's telemetry to the claim that names it."""
        context = _write(tmp_path)
        (context.kubelet_plugins / "gpu.nvidia.com" / "checkpoint.json").unlink()
        dra = DraCollector(context).collect().dra
        assert dra is not None
        nvml = NvmlCollector(CollectorContext(), source=SimulatedNvmlSource(HW, clock=lambda: 0.0))
        try:
            runs = (CollectorRun("nvml", True, 0.0, nvml.collect()),)
        finally:
            nvml.close()
        state = SCENARIO.state_at(0)

        snapshot = join_snapshot(
            node="demo-node",
            collected_at=0.0,
            kubelet=KubeletStatus(up=True, socket="/kubelet.sock", api=()),
            pods=state.pods,
            allocatable=state.allocatable,
            cpu_numa={},
            dra=dra,
            collector_runs=runs,
        )

        (device,) = (d for d in snapshot.devices if d.device_id == MIG_NAME)
        reading = snapshot.hardware_of(device).reading
        found = (device.owner.pod, device.resolution.source, reading and reading.name)
        assert ("llm-gpus-0", GRAMMAR_SOURCE, MIG.uuid) == found

    def test_hardware_behind_the_keys(self) -> None:
        """The GPUs, MIG device, AMD card and VF the claims name are in the sim hardware."""
        assert (
            (4, "GPU-00000104-5e1f-4c2a-9d3b-000000000104"),
            (5, 0),
            "MIG-00000501-5e1f-4c2a-9d3b-000000000501",
            "0000:e5:00.0",
            True,
        ) == (
            (GPU4.index, GPU4.uuid),
            (MIG.gpu_instance, MIG.compute_instance),
            MIG.uuid,
            next(g.pci_address for g in HW.drm_gpus if g.card == 3),
            any(n.pci_address == "0000:4b:00.5" for n in HW.nics),
        )


class TestKubeletView:
    def test_cdi_devices_grow_device_by_device(self) -> None:
        """The kubelet appends each device's CDI IDs to one list per driver and hands each
        ClaimResource the list so far (container_manager_linux.go GetDynamicResources):
        GPU 4 carries its own name only, the MIG device GPU 4's and then its own."""
        claim = dict((c.claim_name, c) for _, c in _claims())["llm-gpus"]
        gpu4 = f"k8s.gpu.nvidia.com/claim={NVIDIA_UID}-gpu-4"
        mig = f"k8s.gpu.nvidia.com/claim={NVIDIA_UID}-{MIG_NAME}"
        assert [
            ClaimDevice("gpu.nvidia.com", "demo-node", "gpu-4", cdi_devices=(gpu4,)),
            ClaimDevice("gpu.nvidia.com", "demo-node", MIG_NAME, cdi_devices=(gpu4, mig)),
        ] == list(claim.devices)

    def test_shared_device_has_two_owners(self) -> None:
        """One VF, two pods, two claims, two share IDs."""
        owners = [
            (pod, claim.claim_name, device.share_id)
            for pod, claim in _claims()
            for device in claim.devices
            if device.device == "0000-4b-00-5"
        ]
        assert [
            ("dpdk-a-0", "dpdk-a", "0d6f3c2a-1b4e-4c5d-8e9f-a0b1c2d3e4f5"),
            ("dpdk-b-0", "dpdk-b", "91a2b3c4-d5e6-4f70-8192-a3b4c5d6e7f8"),
        ] == owners

    def test_plugins_do_not_advertise_dra_devices(self) -> None:
        """GPUs 4 and 5, AMD card 3 and the shared VF are not device-plugin devices."""
        advertised = {d for g in SCENARIO.allocatable().devices for d in g.device_ids}
        dra_owned = {GPU4.uuid, GPU5.uuid, MIG.uuid, "0000:e5:00.0", "0000:4b:00.5"}
        assert set() == advertised & dra_owned


async def test_simulated_node_points_the_exporter_at_its_files(sim_node: SimulatedNode) -> None:
    """A started node has the files under the roots its flags name."""
    flags = sim_node.exporter_flags()
    plugins = Path(flags[flags.index("--path.kubelet-plugins") + 1])
    cdi = Path(flags[flags.index("--path.cdi") + 1])
    context = CollectorContext(procfs=sim_node.procfs, kubelet_plugins=plugins, cdi=(cdi,))
    readings = DraCollector(context).collect()
    assert readings.dra is not None
    assert (4, 2, ()) == (len(readings.dra.devices), len(readings.dra.cdi_devices), readings.issues)
