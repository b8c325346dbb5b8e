"""What DRA drivers' node-local files say of the devices they prepared.

Reads, every poll, under ``--path.kubelet-plugins`` and ``--path.cdi``:

- the NVIDIA GPU driver's checkpoint, ``<plugins>/gpu.nvidia.com/checkpoint.json``
  (NVIDIA/k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin/checkpoint.go, checkpointv.go,
  prepared.go, mig.go, deviceinfo.go): ``{"checksum", "v1", "v2": {"checksum",
  "nodeBootID", "preparedClaims": {<claim UID>: {"checkpointState", "name",
  "namespace", "status", "preparedDevices": [{"devices": [{"gpu": {"info": {"uuid"},
  "device"}, "mig": {"concrete": {"parentMinor", "giId", "ciId", "migUUID",
  "parentUUID"}, "device"}, "vfio": {"info": {"uuid", "pciBusID"}, "device"}}],
  "configState"}]}}}}`` (before v25.12 a MIG device is ``{"info": {"uuid"},
  "device"}``, prepared.go@v25.8.1), where ``device`` is the kubelet plugin library's
  ``Device`` without JSON tags: ``{"Requests", "PoolName", "DeviceName",
  "CDIDeviceIDs"}``. v25.3 writes ``v1`` alone, its claims as v2's without
  ``checkpointState``, all prepared. Only ``PrepareCompleted`` claims count (the
  driver names the claim only while it is ``PrepareStarted``, so their devices name
  no claim), and only claims of this boot:
  MIG devices (GPU instances, UUIDs) do not survive a reboot. From v0.4.0 (the release
  after v25.12) the file says its boot, ``nodeBootID``, checked against
  ``<procfs>/sys/kernel/random/boot_id``; v25.12 and earlier write none, and such a
  file counts when it was last written after this boot started (``btime`` of
  ``<procfs>/stat``, else ``<procfs>/uptime``). It is the only source for MIG devices
  the driver created on demand.
- KEP-5304 device metadata of any driver,
  ``<plugins>/<driver>/dra-device-metadata/<claim namespace>_<claim name>/<request>/metadata.json``
  (kubernetes/enhancements keps/sig-node/5304-dra-attributes-downward-api; the writer
  is k8s.io/dynamic-resource-allocation kubeletplugin/metadata.go): a JSON stream of
  one ``DeviceMetadata`` per API version, newest first; we read
  ``metadata.resource.k8s.io/v1alpha1``: ``{"metadata": {"name", "namespace"},
  "requests": [{"name", "devices": [{"driver", "pool", "name", "attributes":
  {<name>: {"string" | "int" | "bool" | "version": value}}}]}]}``. The standard
  ``resource.kubernetes.io/pciBusID`` attribute gives a PCI address (else AMD's
  ``pciAddr`` or SR-IOV's ``pciAddress``, ``DRIVER_PCI_ATTRIBUTES``), a ``uuid``
  attribute a GPU or MIG UUID.
- CDI specs, ``*.json`` and ``*.yaml`` in each ``--path.cdi`` directory
  (cncf-tags/container-device-interface specs-go/config.go): ``{"cdiVersion", "kind":
  "<vendor>/<class>", "devices": [{"name", "annotations", "containerEdits": {"env",
  "deviceNodes": [{"path", "hostPath"}], "netDevices": [{"hostInterfaceName"}]}}]}``.
  Each device ``<kind>=<name>`` maps to the hardware its edits name: ``/dev/nvidiaN``,
  ``/dev/dri/cardN``, ``/dev/dri/renderDN``, host interfaces, GPU/MIG UUIDs in env
  values and annotations. Spec-wide edits are common to every device and name none.
  As CDI resolves a name found twice (pkg/cdi/cache.go, spec.go): a spec its validation
  refuses (a device named twice, or without a name or container edits, names, edits and
  net devices as ``_check_edits`` says, no devices) is refused whole, as if absent;
  the first directory listed here wins over later ones (CDI lets the last of its own
  list win, and lists ``/etc/cdi`` first: this flag lists them the other way round);
  two specs of one directory naming the same device conflict, and that name is then used
  from no directory, even one that defines it once (CDI deletes a conflicting name after
  its scan).

Which claim device each entry belongs to is ``exporter.resolver``'s business: this
module never parses DRA device names. Every file is read bounded; one bad file is one
issue and loses that file only, labelled as sysfs reads are (``unreadable``,
``garbage``) or ``stale_checkpoint`` (written in another boot, or not saying which);
the detail names the file.
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from exporter.collectors.base import (
    Collector,
    CollectorContext,
    CollectorError,
    CollectorUnavailable,
    Registration,
    issue,
)
from exporter.model import CollectorIssue, DraDevice, DraState, HardwareKey, KeyKind, Readings
from exporter.pci_address import parse_pci_address
from exporter.sysfs import (
    GARBAGE,
    UNREADABLE,
    GarbageFile,
    UnreadableFile,
    file_issue,
    open_regular,
    parse_boot_time,
    read_text,
)

__all__ = [
    "CHECKPOINT_SOURCE",
    "METADATA_SOURCE",
    "NVIDIA_CHECKPOINT",
    "REGISTRATION",
    "STALE_CHECKPOINT",
    "DraCollector",
    "StaleCheckpointError",
    "parse_cdi_spec",
    "parse_device_metadata",
    "parse_nvidia_checkpoint",
    "read_bounded",
]

NVIDIA_DRIVER = "gpu.nvidia.com"
NVIDIA_CHECKPOINT = Path(NVIDIA_DRIVER) / "checkpoint.json"
METADATA_DIR = "dra-device-metadata"
METADATA_FILE = "metadata.json"
METADATA_API_VERSION = "metadata.resource.k8s.io/v1alpha1"
PREPARE_COMPLETED = "PrepareCompleted"
CHECKPOINT_SOURCE = "gpu.nvidia.com checkpoint"
METADATA_SOURCE = "KEP-5304 device metadata"
CDI_SUFFIXES = (".json", ".yaml")
STALE_CHECKPOINT = "stale_checkpoint"

# Caps: a checkpoint holds every prepared claim's allocation status; an NVIDIA CDI
# spec lists the driver's libraries. Far above real sizes, far below harm.
MAX_CHECKPOINT_BYTES = 16 * 1024 * 1024
MAX_METADATA_BYTES = 1024 * 1024
MAX_CDI_SPEC_BYTES = 4 * 1024 * 1024
MAX_DIRECTORY_ENTRIES = 4096
# The pure-Python YAML parser holds ~1 KiB per node until it returns: a 4 MiB spec of
# CDI's own shape is ~220,000 nodes, 280 MiB of RSS and 10 s. The claim specs in
# tests/fixtures/dra/cdi are 16-67 nodes; a node-wide NVIDIA spec (a hundred or so
# library mounts, hooks) is estimated at a few thousand, not measured here.
MAX_CDI_YAML_NODES = 50_000
# /proc/stat, read once for btime: its intr line grows with the IRQs of big hosts.
MAX_PROC_STAT_BYTES = 4 * 1024 * 1024

# The standard attribute (k8s.io/dynamic-resource-allocation deviceattribute); the
# KEP's example spells it resource.k8s.io/, so both are read.
PCI_BUS_ID_ATTRIBUTES = ("resource.kubernetes.io/pciBusID", "resource.k8s.io/pciBusID")
# Drivers' own names for the address, in the driver's domain (written bare or with it),
# read where the standard one is absent: ROCm/k8s-gpu-dra-driver's ``pciAddr``
# (cmd/gpu-kubeletplugin/deviceinfo.go; a partition has its GPU's as ``parentPciAddr``,
# not this device's, so not read) and dra-driver-sriov's ``pciAddress``
# (pkg/consts/consts.go), which its releases before the standard one published alone.
DRIVER_PCI_ATTRIBUTES = ("pciAddr", "pciAddress")

_BOOT_ID = Path("sys") / "kernel" / "random" / "boot_id"
_UPTIME = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,9})?")
_NVML_UUID = re.compile(r"^(GPU|MIG)-([0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})$", re.IGNORECASE)
# Device nodes a CDI device injects, by path prefix, and the key their number is.
_DEVICE_NODES = (
    ("/dev/nvidia", KeyKind.NVIDIA_MINOR),
    ("/dev/dri/card", KeyKind.DRM_CARD),
    ("/dev/dri/renderD", KeyKind.DRM_RENDER),
)
_MIG_CAPABILITY_NODES = "/dev/nvidia-caps/"


class StaleCheckpointError(ValueError):
    """The checkpoint was written in another boot, or says not which."""


# --- Parsers: pure, on text --------------------------------------------------------------


def parse_nvidia_checkpoint(
    text: str,
    *,
    boot_id: str,
    modified_s: float | None = None,
    boot_started_s: float | None = None,
) -> tuple[DraDevice, ...]:
    """Devices of the ``PrepareCompleted`` claims of a gpu.nvidia.com checkpoint.

    ``modified_s`` is the file's mtime and ``boot_started_s`` when this boot started,
    both seconds since the epoch (None: unknown): they date a file without
    ``nodeBootID``. Raises StaleCheckpointError when the file is not of this boot, or
    cannot be told to be, and ValueError when it is neither a v1 nor a v2 checkpoint.
    """
    v2 = _latest_version(_load_json(text))
    _check_boot(
        _string(v2.get("nodeBootID")),
        boot_id=boot_id,
        modified_s=modified_s,
        boot_started_s=boot_started_s,
    )
    devices: list[DraDevice] = []
    claims = _mapping(v2.get("preparedClaims"))
    for _uid, claim_value in sorted(claims.items()):
        claim = _mapping(claim_value)
        if claim.get("checkpointState") != PREPARE_COMPLETED:
            continue  # a prepare that crashed half-way: its devices may not exist
        for group in _sequence(claim.get("preparedDevices")):
            for prepared in _sequence(_mapping(group).get("devices")):
                device = _checkpoint_device(
                    _mapping(prepared),
                    claim_namespace=_string(claim.get("namespace")) or "",
                    claim_name=_string(claim.get("name")) or "",
                )
                if device is not None:
                    devices.append(device)
    return tuple(devices)


def _latest_version(checkpoint: Mapping[str, Any]) -> Mapping[str, Any]:
    """The v2 checkpoint, or the v1 one as v2, as the driver reads either
    (checkpoint.go@v0.4.0 ToLatestVersion): v25.3 writes only v1, whose claims are
    all prepared (device_state.go@v25.3.2:158-166; checkpointv.go@v25.8.1 ToV2)."""
    if v2 := _mapping(checkpoint.get("v2")):
        return v2
    if v1 := _mapping(checkpoint.get("v1")):
        claims = _mapping(v1.get("preparedClaims"))
        return {
            "preparedClaims": {
                uid: {**_mapping(claim), "checkpointState": PREPARE_COMPLETED}
                for uid, claim in claims.items()
            }
        }
    raise ValueError("neither v1 nor v2 checkpoint")


def _check_boot(
    node_boot_id: str | None,
    *,
    boot_id: str,
    modified_s: float | None,
    boot_started_s: float | None,
) -> None:
    """Raises StaleCheckpointError unless the checkpoint is of this boot."""
    if node_boot_id:
        if node_boot_id != boot_id:
            raise StaleCheckpointError(
                f"nodeBootID {node_boot_id!r} is not this boot's {boot_id!r}"
            )
        return
    # v25.12 and earlier (the next release was v0.4.0, commit 506ada34) write no
    # nodeBootID. Each prepare and unprepare rewrites the file and no prepared device
    # outlives a reboot, so a file written since this boot started holds this boot's
    # claims; v0.4.0 itself takes such a file for this boot's
    # (device_state.go@v0.4.0:197-209).
    if modified_s is None or boot_started_s is None:
        raise StaleCheckpointError("no nodeBootID (a driver before v0.4.0), and no boot time")
    if modified_s < boot_started_s:
        raise StaleCheckpointError(
            f"no nodeBootID (a driver before v0.4.0), and last written at "
            f"{_timestamp(modified_s)}, before this boot started at {_timestamp(boot_started_s)}"
        )


def _timestamp(seconds: float) -> str:
    try:
        return datetime.fromtimestamp(seconds, tz=UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        # Past datetime's years 1-9999: an mtime set so on tmpfs, a btime of 20 digits.
        return f"{seconds:.0f} s since the epoch"


def _checkpoint_device(
    prepared: Mapping[str, Any], *, claim_namespace: str, claim_name: str
) -> DraDevice | None:
    keys: list[HardwareKey] = []
    if gpu := _mapping(prepared.get("gpu")):
        body = gpu
        _add_uuid(keys, _mapping(gpu.get("info")).get("uuid"))
    elif mig := _mapping(prepared.get("mig")):
        body = mig
        concrete = _mapping(mig.get("concrete"))
        _add_uuid(keys, concrete.get("migUUID"))
        # Before v25.12: MigDeviceInfo, of which only the UUID is serialized
        # (prepared.go@v25.8.1 PreparedMigDevice.Info, deviceinfo.go@v25.8.1:48).
        _add_uuid(keys, _mapping(mig.get("info")).get("uuid"))
        parent_uuid = _string(concrete.get("parentUUID"))
        gi, ci = _integer(concrete.get("giId")), _integer(concrete.get("ciId"))
        parent_minor = _integer(concrete.get("parentMinor"))
        if parent_uuid and gi is not None and ci is not None:
            keys.append(HardwareKey(KeyKind.MIG_PATH, f"{parent_uuid}/{gi}/{ci}"))
        if parent_minor is not None and gi is not None:
            keys.append(HardwareKey(KeyKind.NVIDIA_MINOR_GI, f"{parent_minor}/{gi}"))
    elif vfio := _mapping(prepared.get("vfio")):
        # Bound to vfio-pci, the GPU is gone from NVML; sysfs still knows its function.
        body = vfio
        _add_pci(keys, _mapping(vfio.get("info")).get("pciBusID"))
    else:
        return None
    device = _mapping(body.get("device"))
    name = _string(device.get("DeviceName"))
    if not name or not keys:
        return None
    return DraDevice(
        driver=NVIDIA_DRIVER,
        pool=_string(device.get("PoolName")) or "",
        device=name,
        keys=tuple(keys),
        source=CHECKPOINT_SOURCE,
        claim_namespace=claim_namespace,
        claim_name=claim_name,
    )


def parse_device_metadata(
    text: str, *, claim_namespace: str, claim_name: str
) -> tuple[DraDevice, ...]:
    """Devices with hardware keys in a KEP-5304 ``metadata.json`` stream.

    The claim comes from the object's own metadata, else from the directory name the
    caller passes. Raises ValueError when the stream holds no v1alpha1 DeviceMetadata.
    """
    document = next(
        (d for d in _json_stream(text) if d.get("apiVersion") == METADATA_API_VERSION), None
    )
    if document is None:
        raise ValueError(f"no {METADATA_API_VERSION} DeviceMetadata")
    meta = _mapping(document.get("metadata"))
    namespace = _string(meta.get("namespace")) or claim_namespace
    name = _string(meta.get("name")) or claim_name
    devices: list[DraDevice] = []
    for request in _sequence(document.get("requests")):
        for entry_value in _sequence(_mapping(request).get("devices")):
            entry = _mapping(entry_value)
            driver, device = _string(entry.get("driver")), _string(entry.get("name"))
            keys = _attribute_keys(_mapping(entry.get("attributes")), driver=driver or "")
            if driver and device and keys:
                devices.append(
                    DraDevice(
                        driver=driver,
                        pool=_string(entry.get("pool")) or "",
                        device=device,
                        keys=keys,
                        source=METADATA_SOURCE,
                        claim_namespace=namespace,
                        claim_name=name,
                    )
                )
    return tuple(devices)


def _attribute_keys(attributes: Mapping[str, Any], *, driver: str) -> tuple[HardwareKey, ...]:
    keys: list[HardwareKey] = []
    for attribute in ("uuid", f"{driver}/uuid"):
        _add_uuid(keys, _mapping(attributes.get(attribute)).get("string"))
    # A MIG device carries its parent GPU's pciBusID: that address is not this device.
    if not any(k.kind is KeyKind.MIG_UUID for k in keys):
        for attribute in PCI_BUS_ID_ATTRIBUTES:
            _add_pci(keys, _mapping(attributes.get(attribute)).get("string"))
        if not any(k.kind is KeyKind.PCI for k in keys):
            for name in DRIVER_PCI_ATTRIBUTES:
                for attribute in (name, f"{driver}/{name}"):
                    _add_pci(keys, _mapping(attributes.get(attribute)).get("string"))
    return tuple(keys)


def parse_cdi_spec(
    text: str, *, yaml_format: bool
) -> tuple[tuple[str, tuple[HardwareKey, ...]], ...]:
    """``(<kind>=<name>, hardware keys)`` of each named device of a CDI spec; the keys
    are empty for a device whose edits name no hardware (it still takes part in the
    conflicts between specs).

    Raises ValueError when the text is not a CDI spec, names a device twice, or holds a
    device without a name or without edits: CDI refuses such a spec whole.
    """
    spec = _load_yaml(text) if yaml_format else _load_json(text)
    kind = _string(spec.get("kind")) or ""
    vendor, _, device_class = kind.partition("/")
    if not vendor or not device_class:
        raise ValueError(f"kind {kind!r} is not <vendor>/<class>")
    for part, what in ((vendor, "vendor"), (device_class, "class")):
        if not _CDI_KIND_PART.fullmatch(part):
            raise ValueError(f"kind {kind!r}: {what} {part!r} is not a CDI name")
    _check_edits(_mapping(spec.get("containerEdits")), "the spec's container edits")
    found: dict[str, tuple[HardwareKey, ...]] = {}
    for device_value in _sequence(spec.get("devices")):
        device = _mapping(device_value)
        name = _name(device.get("name"))
        if not name:  # CDI refuses the spec (pkg/parser ValidateDeviceName)
            raise ValueError("a device without a name")
        if not _CDI_DEVICE_NAME.fullmatch(name):
            raise ValueError(f"device name {name!r} is not a CDI device name")
        if name in found:
            raise ValueError(f"device {name!r} named twice")  # CDI refuses the spec
        edits = _mapping(device.get("containerEdits"))
        if not _has_edits(edits):
            raise ValueError(f"device {name!r} has no container edits")  # so does this
        _check_edits(edits, f"device {name!r}")
        found[name] = _edit_keys(edits, _mapping(device.get("annotations")))
    if not found:
        raise ValueError("no devices")  # pkg/cdi/spec.go validate: "invalid spec, no devices"
    return tuple((f"{kind}={name}", keys) for name, keys in found.items())


# CDI's name rules (pkg/parser/parser.go): a vendor or class starts with a letter, a
# device name with a letter or digit; both end with one; between, ASCII letters, digits
# and ``_-.``, and ``:`` in a device name.
_CDI_KIND_PART = re.compile(r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
_CDI_DEVICE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")
# pkg/cdi/container-edits.go: the OCI hook names, and a device node's types.
_CDI_HOOK_NAMES = frozenset(
    ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")
)
_CDI_NODE_TYPES = frozenset(("", "b", "c", "u", "p"))


def _check_edits(edits: Mapping[str, Any], where: str) -> None:
    """Refuse edits CDI's ``ContainerEdits.Validate`` refuses, which make the runtime
    skip the whole spec: a spec the runtime skips must not name hardware here, nor
    shadow or conflict with a valid spec of the same device. Only the checks every CDI
    release makes; the spec's version and unknown fields depend on the runtime's."""
    _check_env(edits.get("env"), where)
    for node in map(_mapping, _sequence(edits.get("deviceNodes"))):
        path = _string(node.get("path"))
        if path is None:
            raise ValueError(f"{where}: a device node without a path")
        # A key left empty (``type:``) is null, which Go's JSON decoding leaves "".
        node_type = node.get("type")
        if node_type is not None and node_type not in _CDI_NODE_TYPES:
            raise ValueError(f"{where}: device node {path!r} has type {node_type!r}")
        permissions = node.get("permissions")
        if permissions not in (None, "none") and (
            not isinstance(permissions, str) or permissions.strip("rwm")
        ):
            raise ValueError(f"{where}: device node {path!r} has permissions {permissions!r}")
    for hook in map(_mapping, _sequence(edits.get("hooks"))):
        if hook.get("hookName") not in _CDI_HOOK_NAMES:
            raise ValueError(f"{where}: hook name {hook.get('hookName')!r}")
        if _string(hook.get("path")) is None:
            raise ValueError(f"{where}: hook {hook.get('hookName')!r} without a path")
        _check_env(hook.get("env"), where)
    for mount in map(_mapping, _sequence(edits.get("mounts"))):
        if _string(mount.get("hostPath")) is None or _string(mount.get("containerPath")) is None:
            raise ValueError(f"{where}: a mount without a host or container path")
    hosts: set[str] = set()
    names: set[str] = set()
    for net in map(_mapping, _sequence(edits.get("netDevices"))):
        host, name = _string(net.get("hostInterfaceName")), _string(net.get("name"))
        if host is None or name is None:
            raise ValueError(f"{where}: a net device without a host interface or a name")
        if host in hosts or name in names:
            raise ValueError(f"{where}: net device {host!r} or {name!r} listed twice")
        hosts.add(host)
        names.add(name)


def _check_env(env: Any, where: str) -> None:
    for entry in _sequence(env):
        # CDI's ValidateEnv: a name, then "=" (strings.IndexByte(v, '=') <= 0 is refused).
        if not isinstance(entry, str) or entry.find("=") <= 0:
            raise ValueError(f"{where}: environment entry {entry!r} is not NAME=value")


# What CDI counts as a device's edits (pkg/cdi/container-edits.go isEmpty, which
# pkg/cdi/device.go validate refuses): a device with none makes its whole spec invalid.
_EDIT_LISTS = ("env", "deviceNodes", "hooks", "mounts", "additionalGids", "netDevices")


def _has_edits(edits: Mapping[str, Any]) -> bool:
    return edits.get("intelRdt") is not None or any(_sequence(edits.get(k)) for k in _EDIT_LISTS)


def _edit_keys(edits: Mapping[str, Any], annotations: Mapping[str, Any]) -> tuple[HardwareKey, ...]:
    keys: list[HardwareKey] = []
    for value in (*_env_values(edits.get("env")), *annotations.values()):
        for token in (_string(value) or "").split(","):
            _add_uuid(keys, token.strip())
    # hostPath, where given, is the host's node: the hardware. It may be relocated (the
    # GPU operator's driver container: /run/nvidia/driver/dev/nvidia0), so it is read
    # from its last /dev/. path is the node as the container sees it, which a spec may
    # name otherwise (a render node renumbered inside the container).
    paths = [
        _device_path(_string(node.get("hostPath")) or "") or _string(node.get("path")) or ""
        for node in map(_mapping, _sequence(edits.get("deviceNodes")))
    ]
    # A MIG device's edits hold its parent GPU's nodes (/dev/nvidiaN, and the GPU's DRM
    # card and render node from the parent's spec) beside its capability nodes: those
    # name the whole GPU, not this device.
    if any(p.startswith(_MIG_CAPABILITY_NODES) for p in paths):
        paths = []
    for path in paths:
        for prefix, kind in _DEVICE_NODES:
            number = path.removeprefix(prefix)
            if number != path and len(number) <= 9 and number.isascii() and number.isdigit():
                _add(keys, HardwareKey(kind, str(int(number))))
    for net in map(_mapping, _sequence(edits.get("netDevices"))):
        if interface := _string(net.get("hostInterfaceName")):
            _add(keys, HardwareKey(KeyKind.NETDEV, interface))
    return tuple(keys)


def _device_path(host_path: str) -> str:
    """``/run/nvidia/driver/dev/nvidia0`` -> ``/dev/nvidia0``: from the last ``/dev/``."""
    start = host_path.rfind("/dev/")
    return host_path[start:] if start >= 0 else host_path


def _env_values(env: Any) -> list[str]:
    return [entry.partition("=")[2] for entry in _sequence(env) if isinstance(entry, str)]


def _add(keys: list[HardwareKey], key: HardwareKey) -> None:
    if key not in keys:
        keys.append(key)


def _add_uuid(keys: list[HardwareKey], value: Any) -> None:
    """A GPU or MIG UUID as NVML writes it (``GPU-`` + lower-case hex), if it is one."""
    match = _NVML_UUID.match(value) if isinstance(value, str) else None
    if match is not None:
        kind = KeyKind.GPU_UUID if match[1].upper() == "GPU" else KeyKind.MIG_UUID
        _add(keys, HardwareKey(kind, f"{match[1].upper()}-{match[2].lower()}"))


def _add_pci(keys: list[HardwareKey], value: Any) -> None:
    """A PCI address in the kernel's form, from it or NVML's ``00000000:3B:00.0``."""
    address = parse_pci_address(value) if isinstance(value, str) else None
    if address is not None:
        _add(keys, HardwareKey(KeyKind.PCI, address))


def _load_json(text: str) -> Mapping[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON: {error}") from error
    except RecursionError:  # the parsers recurse: a few thousand "[" exhaust the stack
        raise ValueError("not JSON this exporter reads: nested too deeply") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def _json_stream(text: str) -> Iterable[Mapping[str, Any]]:
    """The objects of a concatenated JSON stream, as KEP-5304 writes one per version."""
    decoder = json.JSONDecoder()
    position = 0
    while (position := _skip_space(text, position)) < len(text):
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise ValueError(f"not a JSON stream: {error}") from error
        except RecursionError:
            raise ValueError("not a JSON stream this exporter reads: nested too deeply") from None
        if isinstance(value, dict):
            yield value


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


@functools.cache
def _no_alias_loader() -> type[Any]:
    """Safe YAML without anchors and aliases: a few bytes of aliases can expand to
    gigabytes ("billion laughs"), and no CDI spec needs them; and of at most
    MAX_CDI_YAML_NODES nodes.

    Made on first use: PyYAML costs ~0.9 MiB of RSS, paid only where a CDI spec is YAML.
    """
    import yaml

    class NoAliasLoader(yaml.SafeLoader):
        nodes = 0  # composed so far, per load: yaml.load makes a loader each call

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise yaml.YAMLError("YAML aliases are not accepted")
            self.nodes += 1
            if self.nodes > MAX_CDI_YAML_NODES:
                raise yaml.YAMLError(f"more than {MAX_CDI_YAML_NODES} YAML nodes")
            return super().compose_node(parent, index)

    return NoAliasLoader


def _load_yaml(text: str) -> Mapping[str, Any]:
    loader = _no_alias_loader()  # a SafeLoader, aliases refused
    import yaml

    try:
        value = yaml.load(text, Loader=loader)
    except yaml.YAMLError as error:
        raise ValueError(f"not YAML: {str(error).splitlines()[0]}") from error
    except RecursionError:
        raise ValueError("not YAML this exporter reads: nested too deeply") from None
    except (ArithmeticError, AttributeError, LookupError, ValueError) as error:
        # SafeLoader's constructors raise these, not YAMLError, for a scalar that its
        # tag cannot take (!!bool x: KeyError, !!timestamp x: AttributeError, !!int '':
        # IndexError, !!float '1:1:…': OverflowError) or an integer past int()'s limit.
        raise ValueError(
            f"not YAML this exporter reads: a value it cannot construct "
            f"({type(error).__name__}: {str(error)[:80]})"
        ) from error
    if not isinstance(value, dict):
        raise ValueError("not a YAML mapping")
    return value


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _sequence(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list) else ()


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _name(value: Any) -> str | None:
    """A CDI device's name as CDI reads it: sigs.k8s.io/yaml gives a Go string field an
    unquoted YAML integer or boolean as its text (``name: 0`` is ``"0"``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, int) else _string(value)


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# --- Readers: I/O --------------------------------------------------------------------------


def read_bounded(path: Path, *, limit: int) -> str | None:
    """A driver file's text, or None when it does not exist.

    Raises UnreadableFile naming the path when it cannot be read or is no regular file
    (a FIFO would block the read forever), GarbageFile when it is larger than ``limit``
    bytes or not UTF-8.
    """
    found = _read_dated(path, limit=limit)
    return None if found is None else found[0]


def _read_dated(path: Path, *, limit: int) -> tuple[str, float] | None:
    """read_bounded's text and the file's mtime, of the one file opened: the driver
    replaces the checkpoint by a rename, so a separate stat may date another."""
    try:
        with open_regular(path) as handle:
            modified_s = os.fstat(handle.fileno()).st_mtime
            data = handle.read(limit + 1)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise UnreadableFile(f"cannot read {path}: {error.strerror or error}") from error
    if len(data) > limit:
        raise GarbageFile(f"{path}: larger than {limit} bytes")
    try:
        return data.decode("utf-8"), modified_s
    except UnicodeDecodeError as error:
        raise GarbageFile(f"{path}: not UTF-8") from error


def _read_boot_start(procfs: Path) -> float | None:
    """When this boot started, seconds since the epoch: ``btime`` of ``/proc/stat``, else
    now less ``/proc/uptime``; None where neither says."""
    try:
        stat_text = read_bounded(procfs / "stat", limit=MAX_PROC_STAT_BYTES)
        if stat_text is not None:
            return parse_boot_time(stat_text.encode())
    except (CollectorError, ValueError):
        pass
    try:
        uptime = read_text(procfs / "uptime")
    except CollectorError:
        return None
    # The kernel's "%lu.%02lu": float() alone would take "nan", "inf" or "-1e9", and a
    # boot dated nan or -inf would take any checkpoint for this boot's.
    seconds = (uptime or "").partition(" ")[0]
    if _UPTIME.fullmatch(seconds) is None:
        return None
    return time.time() - float(seconds)


def _entries(directory: Path) -> list[Path]:
    """Entries of a directory, sorted, at most MAX_DIRECTORY_ENTRIES; [] when absent."""
    try:
        names = []
        for entry in directory.iterdir():
            names.append(entry.name)
            if len(names) > MAX_DIRECTORY_ENTRIES:
                raise GarbageFile(f"{directory}: more than {MAX_DIRECTORY_ENTRIES} entries")
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as error:
        raise UnreadableFile(f"cannot list {directory}: {error.strerror or error}") from error
    return [directory / name for name in sorted(names)]


def _listed(directory: Path, issues: list[CollectorIssue]) -> list[Path]:
    """``_entries``, or [] and an issue where the directory cannot be listed."""
    try:
        return _entries(directory)
    except CollectorError as error:
        issues.append(file_issue(error))
        return []


_CdiDevices = tuple[tuple[str, tuple[HardwareKey, ...]], ...]


class DraCollector(Collector):
    """Prepared DRA devices and CDI devices, from the drivers' files on the node.

    Parsed CDI specs are kept while their file is unchanged (same inode, size and
    mtime): NVIDIA's list the driver's libraries, and the pure-Python YAML parser,
    needed to refuse aliases, takes some 50 ms for one.
    """

    name = "dra"
    known_errors = (UNREADABLE, GARBAGE, STALE_CHECKPOINT)

    def __init__(self, context: CollectorContext) -> None:
        super().__init__(context)
        # path -> (inode, size, mtime), and its devices or why it was refused
        self._cdi_cache: dict[Path, tuple[tuple[int, int, int], _CdiDevices | str]] = {}
        self._boot_started_s: float | None = None  # read once: a boot outlives the process

    def collect(self) -> Readings:
        plugins, cdi_dirs = self.context.kubelet_plugins, self.context.cdi
        if not plugins.is_dir() and not any(d.is_dir() for d in cdi_dirs):
            raise CollectorUnavailable(
                f"none of {', '.join(str(p) for p in (plugins, *cdi_dirs))} is a directory"
            )
        issues: list[CollectorIssue] = []
        devices = [*self._checkpoint(plugins, issues), *self._metadata(plugins, issues)]
        cdi = self._cdi(cdi_dirs, issues)
        return Readings(dra=DraState(devices=tuple(devices), cdi_devices=cdi), issues=tuple(issues))

    def _checkpoint(self, plugins: Path, issues: list[CollectorIssue]) -> tuple[DraDevice, ...]:
        path = plugins / NVIDIA_CHECKPOINT
        try:
            found = _read_dated(path, limit=MAX_CHECKPOINT_BYTES)
            if found is None:
                return ()
            boot_id = read_text(self.context.procfs / _BOOT_ID)
            if not boot_id:
                raise UnreadableFile(
                    f"{path}: ignored, no {self.context.procfs / _BOOT_ID} to check it against"
                )
            if self._boot_started_s is None:
                self._boot_started_s = _read_boot_start(self.context.procfs)
            text, modified_s = found
            return parse_nvidia_checkpoint(
                text,
                boot_id=boot_id,
                modified_s=modified_s,
                boot_started_s=self._boot_started_s,
            )
        except StaleCheckpointError as error:
            issues.append(issue(STALE_CHECKPOINT, f"{path}: ignored, {error}"))
        except (CollectorError, ValueError) as error:
            issues.append(_issue(path, error))
        return ()

    def _metadata(self, plugins: Path, issues: list[CollectorIssue]) -> list[DraDevice]:
        devices: list[DraDevice] = []
        for claim_dir, path in self._metadata_files(plugins, issues):
            namespace, _, name = claim_dir.name.partition("_")
            try:
                text = read_bounded(path, limit=MAX_METADATA_BYTES)
                if text is not None:
                    devices.extend(
                        parse_device_metadata(text, claim_namespace=namespace, claim_name=name)
                    )
            except (CollectorError, ValueError) as error:
                issues.append(_issue(path, error))
        return devices

    def _metadata_files(
        self, plugins: Path, issues: list[CollectorIssue]
    ) -> Iterable[tuple[Path, Path]]:
        """(claim directory, metadata.json) pairs. A directory that cannot be listed is
        one issue and loses what is under it only: a driver's, or one claim's."""
        for driver_dir in _listed(plugins, issues):
            for claim_dir in _listed(driver_dir / METADATA_DIR, issues):
                for request_dir in _listed(claim_dir, issues):
                    yield claim_dir, request_dir / METADATA_FILE

    def _cdi(self, cdi_dirs: Sequence[Path], issues: list[CollectorIssue]) -> _CdiDevices:
        found: dict[str, tuple[HardwareKey, ...]] = {}
        conflicting: set[str] = set()
        cache: dict[Path, tuple[tuple[int, int, int], _CdiDevices | str]] = {}
        for directory in cdi_dirs:
            try:
                paths = [p for p in _entries(directory) if p.suffix in CDI_SUFFIXES]
            except CollectorError as error:
                issues.append(file_issue(error))
                continue
            here: dict[str, tuple[Path, tuple[HardwareKey, ...]]] = {}
            for path in paths:
                try:
                    devices = self._cdi_spec(path, cache)
                except (CollectorError, ValueError) as error:
                    issues.append(_issue(path, error))
                    continue
                for name, keys in devices:
                    if name in here:
                        other = here[name][0]
                        issues.append(
                            issue(
                                GARBAGE, f"{path}: device {name} also in {other}, used by neither"
                            )
                        )
                        conflicting.add(name)
                    else:
                        here[name] = (path, keys)
            for name, (_, keys) in here.items():
                found.setdefault(name, keys)  # the first directory listed wins
        self._cdi_cache = cache  # forgets the specs that are gone
        # CDI drops a conflicting name even where another directory defines it once.
        return tuple((n, keys) for n, keys in found.items() if keys and n not in conflicting)

    def _cdi_spec(
        self, path: Path, cache: dict[Path, tuple[tuple[int, int, int], _CdiDevices | str]]
    ) -> _CdiDevices:
        try:
            status = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return ()  # removed since listed
        except OSError as error:
            raise UnreadableFile(f"cannot stat {path}: {error.strerror or error}") from error
        version = (status.st_ino, status.st_size, status.st_mtime_ns)
        cached = self._cdi_cache.get(path)
        if cached is not None and cached[0] == version:
            cache[path] = cached
            if isinstance(cached[1], str):
                raise ValueError(cached[1])  # a new one: re-raising one would grow its traceback
            return cached[1]
        text = read_bounded(path, limit=MAX_CDI_SPEC_BYTES)
        if text is None:
            return ()
        try:
            devices = parse_cdi_spec(text, yaml_format=path.suffix == ".yaml")
        except ValueError as error:
            # Kept as the answer for this version of the file: a large bad spec is not
            # parsed again every poll (seconds of YAML), only once it changes.
            cache[path] = (version, str(error))
            raise
        cache[path] = (version, devices)
        return devices


def _issue(path: Path, error: CollectorError | ValueError) -> CollectorIssue:
    """A read failure as sysfs labels it; a parse failure is garbage in ``path``."""
    if isinstance(error, CollectorError):
        return file_issue(error)
    return issue(GARBAGE, f"{path}: {error}")


REGISTRATION = Registration(
    "dra",
    "DRA drivers' node-local files (NVIDIA checkpoint, KEP-5304 device metadata, CDI "
    "specs): which hardware each DRA claim's device is",
    DraCollector,
)
