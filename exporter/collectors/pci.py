"""PCI functions as sysfs describes them (``<sysfs>/bus/pci/devices/<address>/``).

Reports the facts the join needs to place devices on NUMA nodes and to find a GPU or
NIC by its address: vendor, device, class and NUMA node of every function a kubelet
device ID names, and of every display, processing accelerator and network (InfiniBand
included) function, whether allocatable or not, since NVML GPUs are looked up here by
the PCI address NVML reports.

A function that vanishes while being read is left out silently (hot unplug, VFs being
destroyed); one with garbage in a file is left out and logged once, with the path.
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog

from exporter.collectors._sysfs import read_text
from exporter.collectors.base import (
    Collector,
    CollectorContext,
    CollectorError,
    CollectorUnavailable,
)
from exporter.deviceid import is_pci_address
from exporter.model import PciDevice, Readings

__all__ = [
    "REPORTED_CLASS_PREFIXES",
    "PciCollector",
    "is_reported_class",
    "parse_hex_id",
    "parse_numa_node",
    "read_pci_class",
    "read_pci_device",
]

log = structlog.get_logger(__name__)

# Base class bytes: network (0x02, InfiniBand is 0x0207), display (0x03), processing
# accelerator (0x12).
REPORTED_CLASS_PREFIXES = ("0x02", "0x03", "0x12")


def parse_hex_id(text: str, *, digits: int) -> str:
    """A sysfs hex ID (``0x10DE``) as lower-case ``0x`` plus ``digits`` hex digits."""
    stripped = text.strip()
    if not stripped.lower().startswith("0x"):
        raise ValueError(f"not a 0x-prefixed hex number: {stripped[:40]!r}")
    value = int(stripped, 16)
    if value < 0 or value >= 16**digits:
        raise ValueError(f"more than {digits} hex digits: {stripped[:40]!r}")
    return f"0x{value:0{digits}x}"


def parse_numa_node(text: str) -> int | None:
    """A ``numa_node`` attribute: the node id, or None where the kernel says -1 (no affinity)."""
    value = int(text.strip())
    return None if value < 0 else value


def is_reported_class(class_id: str) -> bool:
    """True for the PCI classes reported whether or not a device ID names them."""
    return class_id.startswith(REPORTED_CLASS_PREFIXES)


def read_pci_class(device_dir: Path) -> str | None:
    """The normalised ``class`` of one function, or None when it is gone."""
    return _read_hex(device_dir / "class", digits=6)


def read_pci_device(device_dir: Path, *, address: str) -> PciDevice | None:
    """One PCI function, or None when it vanished while being read.

    Raises CollectorError naming the file when one holds garbage.
    """
    vendor_id = _read_hex(device_dir / "vendor", digits=4)
    device_id = _read_hex(device_dir / "device", digits=4)
    class_id = _read_hex(device_dir / "class", digits=6)
    if vendor_id is None or device_id is None or class_id is None:
        return None
    numa_path = device_dir / "numa_node"
    numa_text = read_text(numa_path)
    numa_node = None  # kernels built without NUMA have no numa_node file: same as -1
    if numa_text is not None:
        try:
            numa_node = parse_numa_node(numa_text)
        except ValueError as error:
            raise CollectorError(f"{numa_path}: not a NUMA node: {numa_text[:40]!r}") from error
    return PciDevice(
        address=address,
        vendor_id=vendor_id,
        device_id=device_id,
        class_id=class_id,
        numa_node=numa_node,
    )


def _read_hex(path: Path, *, digits: int) -> str | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        return parse_hex_id(text, digits=digits)
    except ValueError as error:
        raise CollectorError(f"{path}: {error}") from error


class PciCollector(Collector):
    """Vendor, device, class and NUMA node of GPUs, accelerators, NICs and named functions."""

    name = "pci"
    description = "PCI functions of GPUs, accelerators and NICs: vendor, device, class, NUMA node."

    def __init__(self, context: CollectorContext) -> None:
        super().__init__(context)
        self._skipped: frozenset[str] = frozenset()

    def collect(self, *, device_ids: frozenset[str]) -> Readings:
        """Read every reported PCI function and every one a device ID names."""
        devices_dir = self.context.sysfs / "bus" / "pci" / "devices"
        try:
            listed = os.listdir(devices_dir)
        except FileNotFoundError as error:
            raise CollectorUnavailable(f"no PCI bus at {devices_dir}") from error
        except OSError as error:
            raise CollectorError(f"cannot list {devices_dir}: {error.strerror}") from error
        named = {d.lower() for d in device_ids if is_pci_address(d.lower())}
        addresses = named | {entry for entry in listed if is_pci_address(entry)}
        found: list[PciDevice] = []
        errors: list[str] = []
        for address in sorted(addresses):
            device_dir = devices_dir / address
            try:
                class_id = read_pci_class(device_dir)
                if class_id is None or not (address in named or is_reported_class(class_id)):
                    continue
                device = read_pci_device(device_dir, address=address)
            except CollectorError as error:
                errors.append(str(error))
                continue
            if device is not None:
                found.append(device)
        self._note_skipped(errors)
        return Readings(pci_devices=tuple(found))

    def _note_skipped(self, errors: list[str]) -> None:
        # Log each broken file once, not on every poll.
        current = frozenset(errors)
        for message in sorted(current - self._skipped):
            log.warning("device_skipped", collector=self.name, error=message)
        self._skipped = current
