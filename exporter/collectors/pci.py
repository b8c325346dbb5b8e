"""PCI functions as sysfs describes them (``<sysfs>/bus/pci/devices/<address>/``).

Reports vendor, device, class and NUMA node of every display, processing accelerator
and network (InfiniBand included) function: the join places devices on NUMA nodes with
them and finds a GPU or NIC by the PCI address its own collector reports.

Failures are per function or per figure (``Readings.issues``): a function whose
``vendor``, ``device`` or ``class`` holds garbage or cannot be read is left out; a bad
``numa_node`` loses only the node (None). A function listed on the bus whose identity
files are gone by the time they are read (hot unplug, VFs being destroyed) is left out
as ``vanished``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from exporter.collectors.base import (
    Collector,
    CollectorContext,
    Registration,
    issue,
)
from exporter.model import CollectorIssue, PciDevice, Readings
from exporter.sysfs import (
    GARBAGE,
    UNREADABLE,
    VANISHED,
    FileError,
    KeptFiles,
    is_pci_address,
    list_source_inodes,
    read_text,
)

__all__ = [
    "REGISTRATION",
    "REPORTED_CLASS_PREFIXES",
    "PciCollector",
    "is_reported_class",
    "parse_hex_id",
    "parse_numa_node",
    "read_pci_device",
]

# Base class bytes: network (0x02, InfiniBand is 0x0207), display (0x03), processing
# accelerator (0x12).
REPORTED_CLASS_PREFIXES = ("0x02", "0x03", "0x12")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def parse_hex_id(text: str, *, digits: int) -> str:
    """A sysfs hex ID (``0x10DE``) as lower-case ``0x`` plus ``digits`` hex digits.

    Raises ValueError on anything else, wider IDs included.
    """
    stripped = text.strip()
    if not stripped.lower().startswith("0x"):
        raise ValueError(f"not a 0x-prefixed hex number: {stripped[:40]!r}")
    if len(stripped) > 2 + digits:  # also keeps int() off thousands of digits
        raise ValueError(f"more than {digits} hex digits: {stripped[:40]!r}")
    # Digits only: int() would also take "0x1_de", "0x-1" and surrounding blanks.
    if not stripped[2:] or not all(c in _HEX_DIGITS for c in stripped[2:]):
        raise ValueError(f"not a hex number: {stripped[:40]!r}")
    return f"0x{int(stripped, 16):0{digits}x}"


def parse_numa_node(text: str) -> int | None:
    """A ``numa_node`` attribute: the node id, or None where the kernel says -1 (no affinity).

    Raises ValueError on anything but a small decimal integer.
    """
    stripped = text.strip()
    if len(stripped) > 6 or not stripped.lstrip("-").isdigit() or not stripped.isascii():
        raise ValueError(f"not a NUMA node: {stripped[:40]!r}")
    value = int(stripped)
    return None if value < 0 else value


def is_reported_class(class_id: str) -> bool:
    """True for the PCI classes reported: network, display, processing accelerator."""
    return class_id.startswith(REPORTED_CLASS_PREFIXES)


def read_pci_device(
    device_dir: Path, *, address: str, issues: list[CollectorIssue]
) -> PciDevice | None:
    """One PCI function of a reported class, or None (another class, gone or garbage).

    Every failed read is appended to ``issues``.
    """
    class_id = _read_hex(device_dir / "class", digits=6, issues=issues)
    if class_id is None or not is_reported_class(class_id):
        return None
    vendor_id = _read_hex(device_dir / "vendor", digits=4, issues=issues)
    device_id = _read_hex(device_dir / "device", digits=4, issues=issues)
    if vendor_id is None or device_id is None:
        return None
    return PciDevice(
        address=address,
        vendor_id=vendor_id,
        device_id=device_id,
        class_id=class_id,
        numa_node=_read_numa_node(device_dir / "numa_node", issues),
    )


def _read_hex(path: Path, *, digits: int, issues: list[CollectorIssue]) -> str | None:
    try:
        text = read_text(path)
    except FileError as error:
        issues.append(issue(error.label, str(error)))
        return None
    if text is None:
        issues.append(issue(VANISHED, f"{path}: gone while its function was read"))
        return None
    try:
        return parse_hex_id(text, digits=digits)
    except ValueError as error:
        issues.append(issue(GARBAGE, f"{path}: {error}"))
        return None


def _read_numa_node(path: Path, issues: list[CollectorIssue]) -> int | None:
    try:
        text = read_text(path)
    except FileError as error:
        issues.append(issue(error.label, str(error)))
        return None
    if text is None:
        return None  # kernels built without NUMA have no numa_node file: same as -1
    try:
        return parse_numa_node(text)
    except ValueError as error:
        issues.append(issue(GARBAGE, f"{path}: {error}"))
        return None


# A NUMA node override is looked for every this many polls (a minute at the default
# interval): re-reading ~70 numa_node files costs a dense node's poll ~0.2 ms, and the
# override is a rare, manual fix.
NUMA_RECHECK_POLLS = 6


class PciCollector(Collector):
    """Vendor, device, class and NUMA node of GPUs, accelerators and NICs.

    A function's files are read when its address is first listed and kept while the
    bus lists it under the same inode: vendor, device and class are fixed for the
    life of a function. Its NUMA node is set at enumeration but root may override it
    (``echo N > numa_node``, the kernel's answer to firmware that reports it wrong, as
    the NUMA-mismatch runbook says), so it is read again every ``NUMA_RECHECK_POLLS``
    polls, through a kept descriptor. A hot-unplugged or re-created function (a new
    sysfs entry: a new inode) is dropped or read anew; a function whose read failed is
    read, and reported, again next poll.
    """

    name = "pci"
    known_errors = (UNREADABLE, GARBAGE, VANISHED)

    def __init__(self, context: CollectorContext) -> None:
        super().__init__(context)
        # address -> what was read of it, while its bus entry keeps its inode
        self._functions: dict[str, _Known] = {}
        self._files = KeptFiles.under(context.sysfs)
        self._polls = 0

    def collect(self) -> Readings:
        """Every function of a reported class."""
        devices_dir = self.context.sysfs / "bus" / "pci" / "devices"
        listed = list_source_inodes(str(devices_dir), absent=f"no PCI bus at {devices_dir}")
        found: list[PciDevice] = []
        issues: list[CollectorIssue] = []
        kept: dict[str, _Known] = {}
        self._polls += 1
        numa_due = self._polls % NUMA_RECHECK_POLLS == 0
        for address, inode in listed:
            if not is_pci_address(address):
                continue
            known = self._functions.get(address)
            if known is not None and known.inode == inode:
                if numa_due and known.device is not None:
                    known = self._with_numa_node(known, issues)
                kept[address] = known
                device = known.device
            else:
                numa_path = str(devices_dir / address / "numa_node")
                # A descriptor kept for a function that had this address follows that
                # function's kernfs node, not the path: the new function's file is opened.
                self._files.forget((numa_path,))
                before = len(issues)
                device = read_pci_device(devices_dir / address, address=address, issues=issues)
                if len(issues) == before:
                    kept[address] = _Known(inode, device, numa_path)
            if device is not None:
                found.append(device)
        self._functions = kept  # functions no longer listed are dropped here
        if numa_due:
            self._files.sweep()  # kept descriptors of functions gone
        return Readings(pci_devices=tuple(found), issues=tuple(issues))

    def close(self) -> None:
        self._files.close()

    def _with_numa_node(self, known: _Known, issues: list[CollectorIssue]) -> _Known:
        """``known`` with its function's NUMA node as sysfs says now; as it was where the
        read fails."""
        assert known.device is not None  # the caller re-reads reported functions only
        try:
            text = self._files.read_text(known.numa_path)
            node = None if text is None else parse_numa_node(text)
        except FileError as error:
            issues.append(issue(error.label, str(error)))
            return known
        except ValueError as error:
            issues.append(issue(GARBAGE, f"{known.numa_path}: {error}"))
            return known
        if node == known.device.numa_node:
            return known
        return replace(known, device=replace(known.device, numa_node=node))


@dataclass(frozen=True, slots=True)
class _Known:
    """A function as read when its bus entry (this inode) was first listed."""

    inode: int
    device: PciDevice | None  # None for a class not reported
    numa_path: str  # <function>/numa_node, read again every NUMA_RECHECK_POLLS polls


REGISTRATION = Registration(
    "pci",
    "PCI functions of GPUs, accelerators and NICs: vendor, device, class, NUMA node",
    PciCollector,
)
