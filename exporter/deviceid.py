"""Understand the device ID shapes device plugins report.

Seen in the wild: NVIDIA ``GPU-<uuid>``, MIG ``MIG-<uuid>`` and the older
``MIG-GPU-<uuid>/<gi>/<ci>``, time-slicing/MPS replicas ``<id>::<n>``, GKE ``nvidia0``,
``nvidia0/gi0``, ``nvidia0/vgpu1``, PCI addresses ``0000:af:00.1`` (SR-IOV VFs, AMD
GPUs), Intel ``card0-0``. Anything else is kept as an opaque ID.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

__all__ = ["DeviceId", "DeviceKind", "is_pci_address", "parse_device_id"]

REPLICA_SEPARATOR = "::"

_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_NVIDIA_GPU = re.compile(r"^GPU-[0-9a-fA-F-]+$")
_NVIDIA_MIG_LEGACY = re.compile(r"^MIG-GPU-[0-9a-fA-F-]+/\d+/\d+$")
_NVIDIA_MIG = re.compile(r"^MIG-[0-9a-fA-F-]+$")
_GKE = re.compile(r"^nvidia\d+(/(gi|vgpu)\d+)?$")
_INTEL_CARD = re.compile(r"^card\d+(-\d+)?$")


class DeviceKind(enum.StrEnum):
    NVIDIA_GPU = "nvidia_gpu"
    NVIDIA_MIG = "nvidia_mig"
    GKE_GPU = "gke_gpu"
    PCI = "pci"
    INTEL_CARD = "intel_card"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class DeviceId:
    raw: str
    base: str  # the physical (or MIG) device: raw without a replica suffix
    replica: int | None  # n of "<id>::<n>"; None when the ID is not a replica
    kind: DeviceKind


def is_pci_address(text: str) -> bool:
    """True for a kernel-style PCI address: ``0000:af:00.1`` (lower case, with domain)."""
    return _PCI_ADDRESS.match(text) is not None


def parse_device_id(raw: str) -> DeviceId:
    """Split a kubelet device ID into its physical device, replica number and shape."""
    base, replica = raw, None
    head, separator, tail = raw.rpartition(REPLICA_SEPARATOR)
    if separator and head and tail.isdigit():
        base, replica = head, int(tail)
    return DeviceId(raw=raw, base=base, replica=replica, kind=_kind_of(base))


def _kind_of(base: str) -> DeviceKind:
    if _NVIDIA_GPU.match(base):
        return DeviceKind.NVIDIA_GPU
    if _NVIDIA_MIG_LEGACY.match(base) or _NVIDIA_MIG.match(base):
        return DeviceKind.NVIDIA_MIG
    if _GKE.match(base):
        return DeviceKind.GKE_GPU
    if is_pci_address(base.lower()):
        return DeviceKind.PCI
    if _INTEL_CARD.match(base):
        return DeviceKind.INTEL_CARD
    return DeviceKind.OTHER
