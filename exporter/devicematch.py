"""Which devices ``/debug/allocations?device=`` finds, and what each is of the device
asked for. Pure.

On-call is given a device by whatever named it: the kubelet's device ID, or the
hardware a series label, nvidia-smi, ``ip link`` or ``ibstat`` names (a GPU or MIG
UUID, a PCI address, an interface or RDMA device name). A device is found as

- ``same``: by its own ID, or by a name of the hardware it resolved to (a DRA device
  by its GPU's UUID or its VF's PCI address, a GPU by its PCI address);
- ``share``: a replica or share (``GPU-x::1``, ``nvidia0/vgpu1``, ``card0-1``) of the
  device asked for, by its physical ID or its hardware's names;
- ``mig_slice``: a MIG device (or GKE GPU instance) of the GPU asked for, by its UUID
  (what its Xid, NVLink and PCIe series carry) or PCI address;
- ``sriov_vf``: an SR-IOV VF of the PF asked for, by its PCI address or its interface
  or RDMA device name.

Not the other way: a MIG device or VF asked for finds its own holder, not its whole's.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from exporter.model import DeviceHardware, DeviceView, HardwareKey, KeyKind, PartKind

__all__ = ["Match", "device_match", "hardware_names"]


class Match(enum.StrEnum):
    """What a device found is of the device asked for."""

    SAME = "same"
    SHARE = "share"
    MIG_SLICE = "mig_slice"
    SRIOV_VF = "sriov_vf"


_PARTS = {PartKind.MIG_SLICE: Match.MIG_SLICE, PartKind.SRIOV_VF: Match.SRIOV_VF}


# Keys whose values are names someone is given for a device. Not minor numbers or DRM
# card indexes: "0" asked for would be every GPU's and card's at once.
_NAMING_KINDS = frozenset(
    {KeyKind.GPU_UUID, KeyKind.MIG_UUID, KeyKind.PCI, KeyKind.NETDEV, KeyKind.RDMA}
)


def hardware_names(keys: Iterable[HardwareKey]) -> frozenset[str]:
    """The names among hardware keys: UUIDs, PCI addresses, interface and RDMA names."""
    return frozenset(k.value for k in keys if k.kind in _NAMING_KINDS)


def _own_names(device: DeviceView, hardware: DeviceHardware) -> frozenset[str]:
    # The resolution's keys too: a DRA device resolved from a driver's file to a GPU
    # UUID or a VF's address is found by it while no collector reads that hardware.
    # Not the reading's identity: a MIG device's PCI address there is its GPU's.
    names = {device.resolution.physical_id, *hardware_names(device.resolution.keys)}
    if hardware.reading is not None:
        names.add(hardware.reading.name)
        names.update(hardware_names(hardware.reading.keys))
    return frozenset(names)


def device_match(asked: str, device: DeviceView, hardware: DeviceHardware) -> Match | None:
    """What ``device`` (with ``hardware``, its snapshot's) is of the device ``asked``
    names, or None where it is not that device."""
    if asked == device.device_id:
        return Match.SAME
    if asked in _own_names(device, hardware):
        # A replica's ID names a share of its physical device; a DRA device's name is
        # the device itself, shared between claims or not.
        return Match.SAME if device.resolution.physical_id == device.device_id else Match.SHARE
    whole = hardware.whole
    if whole is not None and asked in hardware_names(whole.keys):
        return _PARTS[whole.part]
    return None
