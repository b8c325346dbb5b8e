"""The one place that knows kubelet device ID shapes and DRA device names.

Pure: maps each allocation to the hardware keys collectors report devices under
(``exporter.model.HardwareKey``), so a new ID shape or DRA driver is one change here.

Device-plugin IDs (seen in the wild):

- NVIDIA ``GPU-<uuid>``, MIG ``MIG-<uuid>`` and the older ``MIG-GPU-<uuid>/<gi>/<ci>``;
- GKE ``nvidiaN`` (GPU minor N), ``nvidiaN/giM`` (GPU instance M of GPU N),
  ``nvidiaN/vgpuK`` (a share of the whole GPU N), ``nvidiaN/giM/vgpuK`` (a share of
  GPU instance M: time-sharing on MIG, gpusharing.go ``isVirtualDeviceIDForMIGMode``);
- time-slicing/MPS replicas ``<id>::<n>``: the replica of ``<id>``;
- PCI addresses ``0000:af:00.1`` (SR-IOV VFs, AMD GPUs, passthrough);
- Intel ``cardN-M`` (share M of DRM card N) and ``cardN``;
- anything else: a network interface or RDMA device name, else opaque.

DRA devices (``ClaimResource``), first source with keys wins:

1. what the driver's node-local files say of this device (``DraState.devices``: the
   NVIDIA driver's checkpoint, the only source of a dynamically created MIG device's
   UUID, then KEP-5304 device metadata), for this claim where the file names one;
2. the CDI specs of the ClaimResource's ``cdi_devices`` that name this device. The
   kubelet builds ``cdi_devices`` once per driver, so one entry may carry every device
   of the claim: the device is found by its name, never by position. NVIDIA
   (``k8s.gpu.nvidia.com/claim=<claim UID>-<device>``, cmd/gpu-kubelet-plugin/cdi.go)
   and AMD (``k8s.gpu.amd.com/gpu=<claim UID>-<device>``, cmd/gpu-kubeletplugin/cdi.go)
   prefix the claim UID; others may use the bare device name;
3. the driver's device-name grammar:
   ``gpu.nvidia.com`` ``gpu-<minor>`` (deviceinfo.go ``GpuInfo.CanonicalName``) and
   ``gpu-<parent minor>-mig-<profile>-<GI profile ID>-<placement start>`` (v25.12+,
   mig.go ``ToCanonicalName``) and, from v25.3 and v25.8,
   ``gpu-<parent minor>-mig-<GI profile ID>-<placement start>-<placement size>``
   (deviceinfo.go@v25.8.1 ``MigDeviceInfo.CanonicalName``); the name carries no GPU
   instance ID or UUID, so it finds the MIG device only where NVML told the nvml
   collector its GPU instance's placement;
   ``gpu.amd.com`` ``gpu-<card>-<render>`` (ROCm/k8s-gpu-dra-driver deviceinfo.go);
   ``sriovnetwork.k8snetworkplumbingwg.io`` ``<domain>-<bus>-<slot>-<function>``, the
   VF's sysfs name with ``:`` and ``.`` made ``-`` (dra-driver-sriov
   pkg/devicestate/discovery.go; its device metadata is off by default);
4. else unresolved, with the reason: shown without telemetry.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from exporter.model import (
    ClaimDevice,
    DraDevice,
    DraState,
    HardwareKey,
    KeyKind,
    PartKind,
    Resolution,
    WholeDevice,
)
from exporter.pci_address import is_pci_address, parse_pci_address

__all__ = [
    "cdi_names_device",
    "physical_id",
    "resolve_claim_device",
    "resolve_device_id",
    "whole_of",
]

REPLICA_SEPARATOR = "::"
DEVICE_ID_SOURCE = "device id"
CDI_SOURCE = "CDI spec"
GRAMMAR_SOURCE = "device name"
NVIDIA_DRIVER = "gpu.nvidia.com"
AMD_DRIVER = "gpu.amd.com"
SRIOV_DRIVER = "sriovnetwork.k8snetworkplumbingwg.io"

_NVIDIA_GPU = re.compile(r"^GPU-[0-9a-fA-F-]+$")
_NVIDIA_MIG_LEGACY = re.compile(r"^MIG-(GPU-[0-9a-fA-F-]+)/([0-9]+)/([0-9]+)$")
_NVIDIA_MIG = re.compile(r"^MIG-[0-9a-fA-F-]+$")
_GKE = re.compile(r"^nvidia([0-9]+)(?:/(gi|vgpu)([0-9]+))?$")
_INTEL_CARD = re.compile(r"^card([0-9]+)(?:-[0-9]+)?$")
_NVIDIA_DRA_GPU = re.compile(r"^gpu-([0-9]+)$")
# The profile part is the profile name made RFC 1123-safe ("1g10gb", and "1g10gb-me"
# for 1g.10gb+me: toRFC1123Compliant writes "+" as "-").
_NVIDIA_DRA_MIG = re.compile(r"^gpu-([0-9]+)-mig-[a-z0-9-]+-([0-9]+)-([0-9]+)$")
# v25.3/v25.8: numbers only, the placement size last. Tried first: a profile name
# always has letters ("1g10gb"), so no v25.12 name is all numbers.
_NVIDIA_DRA_MIG_V25_8 = re.compile(r"^gpu-([0-9]+)-mig-([0-9]+)-([0-9]+)-[0-9]+$")
_AMD_DRA_GPU = re.compile(r"^gpu-([0-9]+)-([0-9]+)$")
# A claim UID prefixed to the device name in a CDI device name: "<uid>-<device>". Lower
# case only, as every real one is: the API server makes each UID with google/uuid's
# String(), and the drivers write the claim's UID into the name as it is (NVIDIA's and
# AMD's cdi.go: fmt.Sprintf("%s-%s", claimUID, device)); the kubelet passes CDI names on
# unchanged.
_CLAIM_UID_PREFIX = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-")
# Interface names (IFNAMSIZ 16, no '/', no whitespace) and RDMA device names.
_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")


# Shares of one device that other device plugins name apart: GKE's GPU time-sharing of a
# whole GPU ("nvidia0/vgpu1") or of a MIG partition ("nvidia0/gi1/vgpu0", physical ID
# "nvidia0/gi1": container-engine-accelerators pkg/gpu/nvidia/gpusharing/gpusharing.go)
# and Intel's GPU plugin with shared-dev-num ("card0-1").
_SHARE = re.compile(r"^(nvidia[0-9]+(?:/gi[0-9]+)?)/vgpu[0-9]+$|^(card[0-9]+)-[0-9]+$")


def _number(digits: str) -> str:
    """ASCII digits as a key's decimal, leading zeros dropped: "007" -> "7". Not int():
    a device ID is the plugin's free text, and int() refuses more than 4,300 digits
    (ValueError), which would fail the whole join on one ID."""
    return digits.lstrip("0") or "0"


def physical_id(device_id: str) -> str:
    """The device a kubelet ID names: a replica ``<id>::<n>`` without its suffix, a GKE
    or Intel share (``nvidia0/vgpu1``, ``nvidia0/gi1/vgpu0``, ``card0-1``) as its GPU or
    MIG partition (``nvidia0``, ``nvidia0/gi1``, ``card0``)."""
    head, separator, tail = device_id.rpartition(REPLICA_SEPARATOR)
    if separator and head and tail.isdigit():
        return head
    if share := _SHARE.match(device_id):
        return share[1] or share[2]
    return device_id


def _device_keys(base: str) -> tuple[HardwareKey, ...]:
    if _NVIDIA_GPU.match(base):
        return (HardwareKey(KeyKind.GPU_UUID, base),)
    if match := _NVIDIA_MIG_LEGACY.match(base):
        return (
            HardwareKey(KeyKind.MIG_PATH, f"{match[1]}/{_number(match[2])}/{_number(match[3])}"),
        )
    if _NVIDIA_MIG.match(base):
        return (HardwareKey(KeyKind.MIG_UUID, base),)
    if match := _GKE.match(base):
        if match[2] == "gi":
            return (
                HardwareKey(KeyKind.NVIDIA_MINOR_GI, f"{_number(match[1])}/{_number(match[3])}"),
            )
        return (HardwareKey(KeyKind.NVIDIA_MINOR, _number(match[1])),)  # vgpuK: whole GPU
    if address := parse_pci_address(base):
        return (HardwareKey(KeyKind.PCI, address),)
    if match := _INTEL_CARD.match(base):
        return (HardwareKey(KeyKind.DRM_CARD, _number(match[1])),)
    if _NAME.match(base):
        return (HardwareKey(KeyKind.NETDEV, base), HardwareKey(KeyKind.RDMA, base))
    return ()


def resolve_device_id(device_id: str) -> Resolution:
    """Hardware keys of a device-plugin device ID; no keys for an opaque ID."""
    base = physical_id(device_id)
    return Resolution(physical_id=base, keys=_device_keys(base), source=DEVICE_ID_SOURCE)


# Keys that name a part of a device, with the whole's key first in their value
# ("<whole>/..."): what the part is of it, and what kind of key the whole's is.
_PARTS = {
    KeyKind.MIG_PATH: (PartKind.MIG_SLICE, KeyKind.GPU_UUID),  # <GPU UUID>/<gi>/<ci>
    KeyKind.NVIDIA_MINOR_GI: (PartKind.MIG_SLICE, KeyKind.NVIDIA_MINOR),  # <minor>/<gi>
    KeyKind.MIG_PLACEMENT: (PartKind.MIG_SLICE, KeyKind.NVIDIA_MINOR),  # <minor>/<profile>/<start>
    KeyKind.SRIOV_VF: (PartKind.SRIOV_VF, KeyKind.PCI),  # <PF address>/<VF index>
}


def whole_of(keys: Iterable[HardwareKey]) -> WholeDevice | None:
    """The device that the device with ``keys`` is part of (a MIG device's GPU, from the
    GPU UUID a legacy ``MIG-GPU-<uuid>/<gi>/<ci>`` ID or NVML gives, or the minor number
    of a GKE or DRA MIG name; a VF's PF), with the keys that name it; None for a whole
    device."""
    part: PartKind | None = None
    found: list[HardwareKey] = []
    for key in keys:
        if key.kind not in _PARTS:
            continue
        kind, whole_kind = _PARTS[key.kind]
        head, separator, _ = key.value.partition("/")
        if separator and head and (part is None or part is kind):
            part = kind
            found.append(HardwareKey(whole_kind, head))
    return None if part is None else WholeDevice(part, tuple(dict.fromkeys(found)))


def resolve_claim_device(
    device: ClaimDevice, *, claim_namespace: str, claim_name: str, dra: DraState
) -> Resolution:
    """Hardware keys of one DRA device of a claim, or why none is known.

    ``physical_id`` is always the DRA device name; ``source`` says which file or rule
    gave the keys.
    """
    for prepared in dra.devices:
        if prepared.keys and _prepared_matches(
            prepared, device, claim_namespace=claim_namespace, claim_name=claim_name
        ):
            return Resolution(device.device, keys=prepared.keys, source=prepared.source)
    cdi_keys = _cdi_keys(device, dra)
    if cdi_keys:
        return Resolution(device.device, keys=cdi_keys, source=CDI_SOURCE)
    keys = _dra_name_keys(device.driver, device.device)
    if keys:
        return Resolution(device.device, keys=keys, source=GRAMMAR_SOURCE)
    return Resolution(device.device, unresolved=_unresolved_reason(device))


def cdi_names_device(cdi_device: str, device: str) -> bool:
    """True when the CDI device name ``<kind>=<name>`` is the DRA device ``device``:
    ``<name>`` is ``device`` or ``<claim UID>-<device>``."""
    _, separator, name = cdi_device.partition("=")
    if not separator or not device:
        return False
    if name == device:
        return True
    prefix = name.removesuffix(device)
    return prefix != name and _CLAIM_UID_PREFIX.fullmatch(prefix) is not None


def _prepared_matches(
    prepared: DraDevice, device: ClaimDevice, *, claim_namespace: str, claim_name: str
) -> bool:
    if (prepared.driver, prepared.device) != (device.driver, device.device):
        return False
    if prepared.pool and prepared.pool != device.pool:
        return False
    # A file that names its claim speaks for that claim only: a shared device is
    # prepared once per claim, and another claim's entry may be stale.
    return not prepared.claim_name or (prepared.claim_namespace, prepared.claim_name) == (
        claim_namespace,
        claim_name,
    )


def _cdi_keys(device: ClaimDevice, dra: DraState) -> tuple[HardwareKey, ...]:
    specs = dict(reversed(dra.cdi_devices))  # the first spec of a name wins
    keys: list[HardwareKey] = []
    for name in device.cdi_devices:
        if cdi_names_device(name, device.device):
            keys.extend(k for k in specs.get(name, ()) if k not in keys)
    return tuple(keys)


def _dra_name_keys(driver: str, name: str) -> tuple[HardwareKey, ...]:
    if driver == NVIDIA_DRIVER:
        if match := _NVIDIA_DRA_GPU.match(name):
            return (HardwareKey(KeyKind.NVIDIA_MINOR, _number(match[1])),)
        if match := _NVIDIA_DRA_MIG_V25_8.match(name) or _NVIDIA_DRA_MIG.match(name):
            slot = f"{_number(match[1])}/{_number(match[2])}/{_number(match[3])}"
            return (HardwareKey(KeyKind.MIG_PLACEMENT, slot),)
    elif driver == AMD_DRIVER and (match := _AMD_DRA_GPU.match(name)):
        return (
            HardwareKey(KeyKind.DRM_CARD, _number(match[1])),
            HardwareKey(KeyKind.DRM_RENDER, _number(match[2])),
        )
    elif driver == SRIOV_DRIVER and (address := _sriov_vf_address(name)):
        return (HardwareKey(KeyKind.PCI, address),)
    return ()


def _sriov_vf_address(name: str) -> str | None:
    """The VF's address in a dra-driver-sriov device name: the sysfs name with ':' and
    '.' made '-' (``0000-af-00-1``, ``10000-e1-00-1`` behind a VMD), so only the
    kernel's own spelling is one."""
    parts = name.split("-")
    if len(parts) != 4:
        return None
    address = f"{parts[0]}:{parts[1]}:{parts[2]}.{parts[3]}"
    return address if is_pci_address(address) else None


def _unresolved_reason(device: ClaimDevice) -> str:
    if device.driver in (NVIDIA_DRIVER, AMD_DRIVER, SRIOV_DRIVER):
        return (
            f"{device.driver} device name {device.device!r} not understood "
            "and no driver file describes it"
        )
    return (
        f"no checkpoint, KEP-5304 metadata or CDI spec of {device.driver} describes "
        f"{device.device!r}"
    )
