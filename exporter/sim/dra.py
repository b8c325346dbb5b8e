"""The demo node's DRA claims: what each driver prepared, and what the kubelet reports.

Four drivers, each as its real counterpart names devices and writes node-local files
(``exporter.sim.fixtures.dra`` writes them):

- ``gpu.nvidia.com``: claim ``dra-demo/llm-gpus`` holds GPU 4 whole (``gpu-4``) and
  a MIG device the driver created on GPU 5 (``gpu-5-mig-1g10gb-19-3``: profile 19,
  placement 3; its GPU instance 5 and UUID are in the checkpoint, not in the name);
- ``gpu.amd.com``: claim ``dra-demo/render-amd`` holds AMD card 3 (``gpu-3-<render>``);
- ``sriovnetwork.k8snetworkplumbingwg.io`` (KEP-5304 metadata only, no CDI device
  nodes): VF ``0000:4b:00.5`` (``0000-4b-00-5``) shared by claims ``dra-demo/dpdk-a``
  and ``dra-demo/dpdk-b`` of two pods, each with its own share ID;
- ``gpu.example.com`` (in ``exporter.sim.scenario``): no files at all, unresolvable.

The kubelet builds a ClaimResource's ``cdi_devices`` once per driver, growing device by
device, so the MIG device carries GPU 4's CDI name before its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.model import (
    ClaimDevice,
    ContainerResources,
    DynamicResource,
    PodResources,
)
from exporter.sim.fixtures.drm import render_minor
from exporter.sim.hardware import SimDrmGpu, SimGpu, SimHardware, SimMigDevice, SimNic

__all__ = [
    "AMD_DRIVER",
    "DRA_NAMESPACE",
    "NVIDIA_DRIVER",
    "POOL",
    "SRIOV_DRIVER",
    "SimAmdGpu",
    "SimDraClaim",
    "SimDraDevice",
    "SimDraEntry",
    "SimMetadataDevice",
    "SimNvidiaGpu",
    "SimNvidiaMig",
    "cdi_device",
    "claim_devices",
    "demo_dra_claims",
    "demo_dra_pods",
    "dra_owned_pci_addresses",
]

NVIDIA_DRIVER = "gpu.nvidia.com"
AMD_DRIVER = "gpu.amd.com"
SRIOV_DRIVER = "sriovnetwork.k8snetworkplumbingwg.io"
POOL = "demo-node"  # drivers name their pool after the node
DRA_NAMESPACE = "dra-demo"


@dataclass(frozen=True, slots=True)
class SimNvidiaGpu:
    """A whole GPU prepared by the NVIDIA driver."""

    gpu: SimGpu

    @property
    def driver(self) -> str:
        return NVIDIA_DRIVER

    @property
    def name(self) -> str:
        return f"gpu-{self.gpu.index}"


@dataclass(frozen=True, slots=True)
class SimNvidiaMig:
    """A MIG device the NVIDIA driver created for a claim (dynamic MIG)."""

    gpu: SimGpu
    mig: SimMigDevice

    @property
    def driver(self) -> str:
        return NVIDIA_DRIVER

    @property
    def name(self) -> str:
        mig = self.mig
        profile = mig.profile.replace(".", "")
        return f"gpu-{self.gpu.index}-mig-{profile}-{mig.profile_id}-{mig.placement_start}"


@dataclass(frozen=True, slots=True)
class SimAmdGpu:
    """An AMD GPU prepared by the AMD driver, named by its DRM card and render node."""

    gpu: SimDrmGpu
    render: int

    @property
    def driver(self) -> str:
        return AMD_DRIVER

    @property
    def name(self) -> str:
        return f"gpu-{self.gpu.card}-{self.render}"


@dataclass(frozen=True, slots=True)
class SimMetadataDevice:
    """A PCI device of a driver that publishes KEP-5304 metadata (the SR-IOV driver)."""

    driver: str
    pci_address: str

    @property
    def name(self) -> str:
        # As the SR-IOV driver names VFs: the address with ":" and "." made "-".
        return self.pci_address.replace(":", "-").replace(".", "-")


SimDraDevice = SimNvidiaGpu | SimNvidiaMig | SimAmdGpu | SimMetadataDevice


@dataclass(frozen=True, slots=True)
class SimDraEntry:
    """One device of a claim, for one request."""

    device: SimDraDevice
    request: str
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class SimDraClaim:
    uid: str
    namespace: str
    name: str
    entries: tuple[SimDraEntry, ...]


def demo_dra_claims(hardware: SimHardware) -> tuple[SimDraClaim, ...]:
    """The demo's prepared claims on ``exporter.sim.hardware.demo_hardware``."""
    gpu4, gpu5 = (next(g for g in hardware.gpus if g.index == i) for i in (4, 5))
    amd = next(g for g in hardware.drm_gpus if g.card == 3)
    vf = _nic(hardware, "0000:4b:00.5")
    shared_vf = SimMetadataDevice(SRIOV_DRIVER, vf.pci_address)
    return (
        SimDraClaim(
            "3f9a1c52-7b1e-4d2a-9c8e-1f2a3b4c5d6e",
            DRA_NAMESPACE,
            "llm-gpus",
            (
                SimDraEntry(SimNvidiaGpu(gpu4), "gpu"),
                SimDraEntry(SimNvidiaMig(gpu5, gpu5.mig_devices[0]), "mig"),
            ),
        ),
        SimDraClaim(
            "5a7c3e91-0d2b-4f6a-8e1c-9b8a7f6e5d4c",
            DRA_NAMESPACE,
            "render-amd",
            (SimDraEntry(SimAmdGpu(amd, render_minor(hardware, amd)), "gpu"),),
        ),
        SimDraClaim(
            "c41d8e2a-6b3f-4e7a-9d1c-2b3a4c5d6e7f",
            DRA_NAMESPACE,
            "dpdk-a",
            (SimDraEntry(shared_vf, "vf", share_id="0d6f3c2a-1b4e-4c5d-8e9f-a0b1c2d3e4f5"),),
        ),
        SimDraClaim(
            "7e2b9d14-3c5a-4f8e-a1b2-c3d4e5f6a7b8",
            DRA_NAMESPACE,
            "dpdk-b",
            (SimDraEntry(shared_vf, "vf", share_id="91a2b3c4-d5e6-4f70-8192-a3b4c5d6e7f8"),),
        ),
    )


def dra_owned_pci_addresses(claims: tuple[SimDraClaim, ...]) -> frozenset[str]:
    """PCI functions DRA drivers hand out: no device plugin advertises them too."""
    owned: set[str] = set()
    for claim in claims:
        for entry in claim.entries:
            device = entry.device
            owned.add(
                device.pci_address
                if isinstance(device, SimMetadataDevice)
                else device.gpu.pci_address
            )
    return frozenset(owned)


def cdi_device(claim: SimDraClaim, device: SimDraDevice) -> str | None:
    """The CDI device ``<kind>=<name>`` the driver returned for ``device``, if any."""
    if isinstance(device, SimNvidiaGpu | SimNvidiaMig):
        return f"k8s.gpu.nvidia.com/claim={claim.uid}-{device.name}"
    if isinstance(device, SimAmdGpu):
        return f"k8s.gpu.amd.com/gpu={claim.uid}-{device.name}"
    return None


def claim_devices(claim: SimDraClaim) -> tuple[ClaimDevice, ...]:
    """The ClaimResources the kubelet reports for ``claim``.

    The kubelet appends each device's CDI IDs to one list per driver and hands each
    ClaimResource that list as it stands (pkg/kubelet/cm/container_manager_linux.go,
    ``GetDynamicResources``): a device carries its own CDI IDs after those of the same
    driver's devices before it, never those of devices after it."""
    cdi_by_driver: dict[str, list[str]] = {}
    devices: list[ClaimDevice] = []
    for entry in claim.entries:
        names = cdi_by_driver.setdefault(entry.device.driver, [])
        if isinstance(entry.device, SimAmdGpu) and not names:
            names.append("k8s.gpu.amd.com/gpu=common")  # AMD's per-node device, first
        if isinstance(entry.device, SimMetadataDevice):
            # KEP-5304: the bind mount of the request's metadata file.
            names.append(f"{entry.device.driver}/metadata={claim.uid}_{entry.request}")
        elif (name := cdi_device(claim, entry.device)) is not None:
            names.append(name)
        devices.append(
            ClaimDevice(
                driver=entry.device.driver,
                pool=POOL,
                device=entry.device.name,
                share_id=entry.share_id,
                cdi_devices=tuple(names),
            )
        )
    return tuple(devices)


def demo_dra_pods(claims: tuple[SimDraClaim, ...]) -> tuple[PodResources, ...]:
    """One pod per demo claim, its container holding the claim."""
    return tuple(
        PodResources(
            claim.namespace,
            f"{claim.name}-0",
            (
                ContainerResources(
                    "main",
                    dynamic_resources=(
                        DynamicResource(
                            claim_name=claim.name,
                            claim_namespace=claim.namespace,
                            devices=claim_devices(claim),
                        ),
                    ),
                ),
            ),
        )
        for claim in claims
    )


def _nic(hardware: SimHardware, address: str) -> SimNic:
    return next(n for n in hardware.nics if n.pci_address == address)
