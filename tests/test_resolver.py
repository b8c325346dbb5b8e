"""The resolver: every device-plugin ID shape seen in the wild, to hardware keys."""

from __future__ import annotations

import pytest

from exporter.model import HardwareKey, KeyKind, PartKind, Resolution, WholeDevice
from exporter.resolver import physical_id, resolve_device_id, whole_of

UUID = "GPU-8f3c1a2b-0000-1111-2222-333344445555"
MIG = "MIG-1a2b3c4d-0000-1111-2222-333344445555"


def key(kind: KeyKind, value: str) -> HardwareKey:
    return HardwareKey(kind, value)


@pytest.mark.parametrize(
    ("device_id", "expected"),
    [
        (UUID, Resolution(UUID, (key(KeyKind.GPU_UUID, UUID),), source="device id")),
        # A time-slicing/MPS replica is its GPU.
        (f"{UUID}::3", Resolution(UUID, (key(KeyKind.GPU_UUID, UUID),), source="device id")),
        (MIG, Resolution(MIG, (key(KeyKind.MIG_UUID, MIG),), source="device id")),
        (
            f"MIG-{UUID}/7/0",
            Resolution(
                f"MIG-{UUID}/7/0", (key(KeyKind.MIG_PATH, f"{UUID}/7/0"),), source="device id"
            ),
        ),
        ("nvidia0", Resolution("nvidia0", (key(KeyKind.NVIDIA_MINOR, "0"),), source="device id")),
        # Two-digit minors: a 16-GPU node (GKE's a2-megagpu-16g).
        (
            "nvidia12",
            Resolution("nvidia12", (key(KeyKind.NVIDIA_MINOR, "12"),), source="device id"),
        ),
        (
            "nvidia15/gi3/vgpu12",
            Resolution("nvidia15/gi3", (key(KeyKind.NVIDIA_MINOR_GI, "15/3"),), source="device id"),
        ),
        (
            "nvidia1/gi2",
            Resolution("nvidia1/gi2", (key(KeyKind.NVIDIA_MINOR_GI, "1/2"),), source="device id"),
        ),
        # A GKE time-sharing share is a share of the whole GPU, as a replica is.
        (
            "nvidia0/vgpu1",
            Resolution("nvidia0", (key(KeyKind.NVIDIA_MINOR, "0"),), source="device id"),
        ),
        # GKE time-sharing on MIG: a share of GPU instance 2 of GPU 1 is that partition
        # (gpusharing.go isVirtualDeviceIDForMIGMode: physical ID "nvidia1/gi2").
        (
            "nvidia1/gi2/vgpu3",
            Resolution("nvidia1/gi2", (key(KeyKind.NVIDIA_MINOR_GI, "1/2"),), source="device id"),
        ),
        # PCI addresses in any case resolve to the kernel's lower-case form.
        (
            "0000:AF:00.1",
            Resolution("0000:AF:00.1", (key(KeyKind.PCI, "0000:af:00.1"),), source="device id"),
        ),
        # An Intel VMD domain (from 0x10000) prints wider: it was taken for a NIC's name.
        (
            "10000:e1:00.1",
            Resolution("10000:e1:00.1", (key(KeyKind.PCI, "10000:e1:00.1"),), source="device id"),
        ),
        # Intel's GPU plugin names shares of card1 card1-0, card1-1, ...
        ("card1-3", Resolution("card1", (key(KeyKind.DRM_CARD, "1"),), source="device id")),
        ("card0", Resolution("card0", (key(KeyKind.DRM_CARD, "0"),), source="device id")),
        (
            "mlx5_0",
            Resolution(
                "mlx5_0",
                (key(KeyKind.NETDEV, "mlx5_0"), key(KeyKind.RDMA, "mlx5_0")),
                source="device id",
            ),
        ),
        # Opaque IDs (too long for an interface, or with a slash) resolve to nothing.
        (
            "vendor.example/opaque-device-id",
            Resolution("vendor.example/opaque-device-id", (), source="device id"),
        ),
        ("", Resolution("", (), source="device id")),
    ],
)
def test_resolve_device_id(device_id: str, expected: Resolution) -> None:
    assert expected == resolve_device_id(device_id)


@pytest.mark.parametrize(
    ("device_id", "expected"),
    [
        ("GPU-a::0", "GPU-a"),
        ("GPU-a", "GPU-a"),
        ("opaque::id", "opaque::id"),
        ("::3", "::3"),
        ("nvidia2/vgpu7", "nvidia2"),
        ("nvidia2/gi1", "nvidia2/gi1"),  # a MIG device is not a share
        ("nvidia2/gi1/vgpu0", "nvidia2/gi1"),  # a share of one is
        ("card0-12", "card0"),
        ("card0-x", "card0-x"),
        ("card0-\u0663", "card0-\u0663"),  # only ASCII digits number a share
    ],
)
def test_physical_id_strips_only_share_and_replica_suffixes(device_id: str, expected: str) -> None:
    assert expected == physical_id(device_id)


# Numbers past int()'s 4,300 digits: a device plugin names its devices freely.
_DIGITS = "9" * 5000


@pytest.mark.parametrize(
    ("device_id", "expected"),
    [
        (f"nvidia{_DIGITS}", (key(KeyKind.NVIDIA_MINOR, _DIGITS),)),
        (f"nvidia0/gi{_DIGITS}", (key(KeyKind.NVIDIA_MINOR_GI, f"0/{_DIGITS}"),)),
        (f"card{_DIGITS}", (key(KeyKind.DRM_CARD, _DIGITS),)),
        (f"MIG-{UUID}/{_DIGITS}/0", (key(KeyKind.MIG_PATH, f"{UUID}/{_DIGITS}/0"),)),
        # Leading zeros go, as int() dropped them.
        ("nvidia007", (key(KeyKind.NVIDIA_MINOR, "7"),)),
        ("card00", (key(KeyKind.DRM_CARD, "0"),)),
        # Digits of other scripts are no GPU minor: "nvidia٣" is not GPU 3.
        ("nvidia\u0663", ()),
        ("card\u0663", ()),
        # Each number of each form, leading zeros and other scripts' digits alike.
        ("nvidia0/gi007", (key(KeyKind.NVIDIA_MINOR_GI, "0/7"),)),
        (f"MIG-{UUID}/07/0", (key(KeyKind.MIG_PATH, f"{UUID}/7/0"),)),
        (f"MIG-{UUID}/\u0663/0", ()),
        ("card2-\u0663", ()),
    ],
)
def test_numbers_in_device_ids_are_taken_as_text(
    device_id: str, expected: tuple[HardwareKey, ...]
) -> None:
    """A number of any length keys as its digits (no ValueError failing the join), and
    only ASCII digits are numbers."""
    assert expected == resolve_device_id(device_id).keys


class TestWholeOf:
    @pytest.mark.parametrize(
        ("keys", "expected"),
        [
            # A legacy MIG ID names its GPU; NVML's MIG reading does too, with the minor.
            (
                resolve_device_id(f"MIG-{UUID}/7/0").keys,
                WholeDevice(PartKind.MIG_SLICE, (key(KeyKind.GPU_UUID, UUID),)),
            ),
            (
                (
                    key(KeyKind.MIG_UUID, MIG),
                    key(KeyKind.MIG_PATH, f"{UUID}/7/0"),
                    key(KeyKind.NVIDIA_MINOR_GI, "2/7"),
                    key(KeyKind.MIG_PLACEMENT, "2/19/6"),
                ),
                WholeDevice(
                    PartKind.MIG_SLICE,
                    (key(KeyKind.GPU_UUID, UUID), key(KeyKind.NVIDIA_MINOR, "2")),
                ),
            ),
            # A GKE GPU instance names its GPU's minor number.
            (
                resolve_device_id("nvidia1/gi2/vgpu3").keys,
                WholeDevice(PartKind.MIG_SLICE, (key(KeyKind.NVIDIA_MINOR, "1"),)),
            ),
            # A VF's netdev reading names its PF.
            (
                (key(KeyKind.PCI, "0000:4b:00.3"), key(KeyKind.SRIOV_VF, "0000:4b:00.0/1")),
                WholeDevice(PartKind.SRIOV_VF, (key(KeyKind.PCI, "0000:4b:00.0"),)),
            ),
            # Whole devices.
            (resolve_device_id(UUID).keys, None),
            (resolve_device_id(MIG).keys, None),  # a MIG UUID alone says nothing of its GPU
            (resolve_device_id("0000:4b:00.0").keys, None),
        ],
    )
    def test_the_device_a_part_is_of(
        self, keys: tuple[HardwareKey, ...], expected: WholeDevice | None
    ) -> None:
        """A MIG device's keys name its GPU, a VF's its PF; a whole device's none."""
        assert expected == whole_of(keys)
