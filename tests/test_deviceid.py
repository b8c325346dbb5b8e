"""Device ID shapes from the wild are recognised and replicas split off."""

from __future__ import annotations

import pytest

from exporter.deviceid import DeviceId, DeviceKind, is_pci_address, parse_device_id

UUID = "GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (UUID, DeviceId(UUID, UUID, None, DeviceKind.NVIDIA_GPU)),
        (f"{UUID}::3", DeviceId(f"{UUID}::3", UUID, 3, DeviceKind.NVIDIA_GPU)),
        (
            "MIG-9a8b7c6d-0000-1111-2222-333344445555",
            DeviceId(
                "MIG-9a8b7c6d-0000-1111-2222-333344445555",
                "MIG-9a8b7c6d-0000-1111-2222-333344445555",
                None,
                DeviceKind.NVIDIA_MIG,
            ),
        ),
        (
            f"MIG-{UUID}/7/0",
            DeviceId(f"MIG-{UUID}/7/0", f"MIG-{UUID}/7/0", None, DeviceKind.NVIDIA_MIG),
        ),
        ("nvidia0", DeviceId("nvidia0", "nvidia0", None, DeviceKind.GKE_GPU)),
        ("nvidia1/gi2", DeviceId("nvidia1/gi2", "nvidia1/gi2", None, DeviceKind.GKE_GPU)),
        ("nvidia0/vgpu1", DeviceId("nvidia0/vgpu1", "nvidia0/vgpu1", None, DeviceKind.GKE_GPU)),
        ("0000:af:00.1", DeviceId("0000:af:00.1", "0000:af:00.1", None, DeviceKind.PCI)),
        ("card0-0", DeviceId("card0-0", "card0-0", None, DeviceKind.INTEL_CARD)),
        ("opaque::id", DeviceId("opaque::id", "opaque::id", None, DeviceKind.OTHER)),
        ("", DeviceId("", "", None, DeviceKind.OTHER)),
    ],
)
def test_parse_device_id(raw: str, expected: DeviceId) -> None:
    """Each shape gets its kind; only a numeric ``::n`` suffix is a replica."""
    assert expected == parse_device_id(raw)


def test_pci_address_needs_domain_and_function() -> None:
    """Kernel-style addresses only: bus-only or upper-case forms are not matched."""
    assert [
        is_pci_address(a) for a in ("0000:af:00.1", "af:00.1", "0000:AF:00.1", "0000:af:00.8")
    ] == [
        True,
        False,
        False,
        False,
    ]
