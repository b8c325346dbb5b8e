"""What ?device= finds: a device by its ID or its hardware's names, and how it relates."""

from __future__ import annotations

import pytest

from exporter.devicematch import Match, device_match
from exporter.model import (
    NO_HARDWARE,
    UNALLOCATED,
    DeviceHardware,
    DeviceIdentity,
    DeviceReading,
    DeviceView,
    HardwareKey,
    KeyKind,
    PartKind,
    Resolution,
    WholeDevice,
)
from exporter.resolver import resolve_device_id

GPU = "GPU-8f3c1a2b-0000-1111-2222-333344445555"
GPU_PCI = "0000:17:00.0"
GPU_READING = DeviceReading(
    GPU,
    (
        HardwareKey(KeyKind.GPU_UUID, GPU),
        HardwareKey(KeyKind.NVIDIA_MINOR, "0"),
        HardwareKey(KeyKind.PCI, GPU_PCI),
    ),
)


def _view(device_id: str, resolution: Resolution | None = None) -> DeviceView:
    return DeviceView(
        resource="nvidia.com/gpu",
        device_id=device_id,
        numa_nodes=(),
        owner=UNALLOCATED,
        allocatable=True,
        resolution=resolution or resolve_device_id(device_id),
    )


class TestSame:
    @pytest.mark.parametrize("asked", [GPU, GPU_PCI])
    def test_a_gpu_by_its_id_or_pci_address(self, asked: str) -> None:
        """A whole GPU is found by its ID and by the PCI address its reading has."""
        assert Match.SAME == device_match(asked, _view(GPU), DeviceHardware(GPU_READING))

    def test_a_dra_device_by_its_resolution_without_a_reading(self) -> None:
        """A DRA device that a driver's file resolved to a GPU UUID is found by it while
        no collector reads the GPU."""
        view = _view("gpu-0", Resolution("gpu-0", (HardwareKey(KeyKind.GPU_UUID, GPU),)))
        assert Match.SAME == device_match(GPU, view, NO_HARDWARE)

    def test_a_minor_number_is_no_name(self) -> None:
        """ "0", a minor number every node's first GPU has, finds nothing by it."""
        assert device_match("0", _view(GPU), DeviceHardware(GPU_READING)) is None


class TestShare:
    @pytest.mark.parametrize("asked", [GPU, GPU_PCI])
    def test_a_replica_by_its_gpu(self, asked: str) -> None:
        """A time-slicing replica is a share of the GPU named by UUID or PCI address."""
        replica = _view(f"{GPU}::2")
        assert Match.SHARE == device_match(asked, replica, DeviceHardware(GPU_READING))

    def test_a_replica_by_its_own_id_is_itself(self) -> None:
        """Its own ID names the replica, not a share of it."""
        replica = _view(f"{GPU}::2")
        assert Match.SAME == device_match(f"{GPU}::2", replica, DeviceHardware(GPU_READING))

    def test_another_replica_is_not_found(self) -> None:
        """One replica's ID does not name its GPU's other replicas."""
        assert device_match(f"{GPU}::1", _view(f"{GPU}::2"), DeviceHardware(GPU_READING)) is None


MIG = "MIG-1a2b3c4d-0000-1111-2222-333344445555"
# NVML's MIG reading: its identity's PCI address is its GPU's.
MIG_READING = DeviceReading(
    MIG,
    (HardwareKey(KeyKind.MIG_UUID, MIG), HardwareKey(KeyKind.MIG_PATH, f"{GPU}/1/0")),
    DeviceIdentity(uuid=MIG, pci_address=GPU_PCI),
)
MIG_HARDWARE = DeviceHardware(MIG_READING, whole=WholeDevice(PartKind.MIG_SLICE, GPU_READING.keys))


class TestParts:
    @pytest.mark.parametrize("asked", [GPU, GPU_PCI])
    def test_a_mig_device_by_its_gpu(self, asked: str) -> None:
        """A MIG device is a slice of the GPU named by UUID or PCI address, not the GPU
        itself though its reading's identity carries the GPU's PCI address."""
        assert Match.MIG_SLICE == device_match(asked, _view(MIG), MIG_HARDWARE)

    def test_a_vf_by_its_pf_rdma_name(self) -> None:
        """A VF is a VF of the PF named by its RDMA device name."""
        pf_keys = (HardwareKey(KeyKind.PCI, "0000:4b:00.0"), HardwareKey(KeyKind.RDMA, "mlx5_0"))
        hardware = DeviceHardware(whole=WholeDevice(PartKind.SRIOV_VF, pf_keys))
        assert Match.SRIOV_VF == device_match("mlx5_0", _view("0000:4b:00.3"), hardware)

    def test_a_gpu_is_not_found_by_its_slice(self) -> None:
        """A MIG device asked for finds itself only: its GPU has no whole."""
        assert device_match(MIG, _view(GPU), DeviceHardware(GPU_READING)) is None
