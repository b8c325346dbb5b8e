"""PCI functions as sysfs describes them (``<sysfs>/bus/pci/devices/<address>/``).

Reports vendor, device, class and NUMA node of every display, processing accelerator
and network (InfiniBand included) function: the join places devices on NUMA nodes with
them and finds a GPU or NIC by the PCI address its own collector reports.

And the PCIe link of each such function that has one (not of SR-IOV VFs, whose link
registers the spec reserves): the lanes and speed it trained at now
(``current_link_width``, ``current_link_speed``) and at most, the lesser of the
function's own ``max_link_*`` and its upstream port's (the parent directory in
``/sys/devices``: a root or switch port, which may be narrower or slower than the card).
A link below its width is a card badly seated, a riser or slot failing, or a link that
retrained after errors; a GPU lowers its speed itself when idle (an AMD card its lanes
too, PCIe DPM), and raises both under load. The kernel writes ``<n> GT/s PCIe``
(``<n> GT/s`` before 5.7, ``Unknown`` or ``Unknown speed`` for no link;
drivers/pci/pci-sysfs.c, pci_speed_string) and the width in lanes (a function that no
longer answers reads all ones, 63 lanes, and a maximum the kernel cannot read 255:
neither is a figure). A function that runtime power management has suspended is not
woken to read its link (kernels with "PCI/sysfs: Ensure devices are powered for config
reads", 2025, resume it for these reads; older ones read it asleep, all ones): its
current figures are left out until it wakes. AMD's and Intel's discrete GPUs carry a
PCIe switch of their own, whose upstream port's link is the card's to its slot: that one
is read for them (``_card_end``).

And, for the same functions, the reports of PCIe errors Advanced Error Reporting counted
(one report may carry several errors): the ``TOTAL_ERR_*`` line of
``aer_dev_correctable``, ``aer_dev_nonfatal`` and ``aer_dev_fatal``
(drivers/pci/pcie/aer.c), of the function itself (``device``), of the port above its
link's end (``upstream_port``: a root or switch port) and, for a card with a switch of
its own, of that switch's upstream port (``card_switch``: the card's end of the link to
its slot). The kernel counts an error at the end that saw it: each direction's errors at
its receiver, so a failing card's errors may show only at its port (Documentation/ABI/
testing/sysfs-bus-pci-devices-aer_stats): both ends are read. The files exist wherever
the function has the AER capability, but the counts rise only for errors reported to
the kernel (native AER, or firmware-first through GHES): where firmware keeps them, or
AER is off (``pci=noaer``), they stay 0. They are counts in the kernel's memory, read
without waking a suspended function.

And where each function sits in the PCI tree (``PciDevice.pcie_path``), from its real
path under ``/sys/devices``: the join tells from it how far a container's GPUs are from
its NICs (``exporter.pcie_paths``). Read once, when the function is first listed.

And the direct links between PCIe switches that Broadcom's switch-link module lists
(``<sysfs>/kernel/pci_switch_link/virtual_switch_links/<upstream port>/<peer upstream
port>``, each link listed from both ends): a PEX89000 switch split into virtual switches,
each with its own upstream port, still carries traffic between them inside itself, and
NCCL 2.22 and later read these links (``ncclOsGetBcmLinks``) to call such a GPU and NIC
PXB instead of PHB. The module is Broadcom's, not in mainline Linux (its proposal,
``PCI_SW_DISCOVERY``, 2024), and fills the folders when its ``refresh_switch_toplogy``
is read (the kernel's spelling), which NCCL does at each communicator's start: a read
that rescans the PCI bus, so the exporter never reads it, and lists the links every poll
instead. A function's ``switch_peers`` are the switches linked to any switch above it.
A link listed from one end only is not counted (the module lists both; NCCL fails
on such a link), nor an entry that is not a PCI address on the bus, nor a link with a
switch at either end whose vendor is not Broadcom's (LSI's) 0x1000: NCCL lists a
switch's links only for that vendor (``xml.cc``), so it has such a link one way at best.

Failures are per function or per figure (``Readings.issues``): a function whose
``vendor``, ``device`` or ``class`` holds garbage or cannot be read is left out; a bad
``numa_node`` loses only the node (None). A function listed on the bus whose identity
files are gone by the time they are read (hot unplug, VFs being destroyed) is left out
as ``vanished``.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from exporter.collectors.base import (
    Collector,
    CollectorContext,
    CollectorError,
    CollectorUnavailable,
    Registration,
    issue,
)
from exporter.model import CollectorIssue, MetricKind, MetricSpec, PciDevice, Readings, Sample
from exporter.pci_address import is_pci_address
from exporter.sysfs import (
    GARBAGE,
    MAX_COUNTER,
    UNREADABLE,
    VANISHED,
    FileError,
    KeptFiles,
    list_source,
    list_source_inodes,
    parse_hex_id,
    read_text,
)

__all__ = [
    "GPU_CLASS_PREFIXES",
    "NIC_CLASS_PREFIX",
    "PCIE_AER_ERRORS",
    "PCIE_LINK_MAX_SPEED",
    "PCIE_LINK_MAX_WIDTH",
    "PCIE_LINK_SPEED",
    "PCIE_LINK_WIDTH",
    "REGISTRATION",
    "REPORTED_CLASS_PREFIXES",
    "PciCollector",
    "broadcom_links_only",
    "is_reported_class",
    "parse_aer_total",
    "parse_link_speed",
    "parse_link_width",
    "parse_numa_node",
    "pcie_path_of",
    "read_pci_device",
    "read_switch_links",
    "switch_peers_of",
    "switches_above",
]

PCIE_LINK_WIDTH = MetricSpec(
    "podresources_pcie_link_width",
    MetricKind.GAUGE,
    "Lanes the PCIe link of the device runs at now (0: no link).",
)
PCIE_LINK_MAX_WIDTH = MetricSpec(
    "podresources_pcie_link_max_width",
    MetricKind.GAUGE,
    "Lanes the PCIe link of the device can run at: the fewer of the device's and its"
    " upstream port's.",
)
PCIE_LINK_SPEED = MetricSpec(
    "podresources_pcie_link_transfers_per_second",
    MetricKind.GAUGE,
    "Transfers per second a lane of the PCIe link of the device runs at now (a GPU"
    " lowers it when idle).",
)
PCIE_LINK_MAX_SPEED = MetricSpec(
    "podresources_pcie_link_max_transfers_per_second",
    MetricKind.GAUGE,
    "Transfers per second a lane of the PCIe link of the device can run at: the slower"
    " of the device's and its upstream port's.",
)

PCIE_AER_ERRORS = MetricSpec(
    "podresources_pcie_aer_errors_total",
    MetricKind.COUNTER,
    "Reports of PCIe errors Advanced Error Reporting counted for the device's link since"
    " the kernel found it, by type (correctable, nonfatal, fatal) and by the end that saw"
    " them (reported_by: device; upstream_port, the root or switch port it is attached"
    " to; card_switch, the card's own switch's port to its slot, on AMD and Intel GPUs).",
    ("type", "reported_by"),
)

# Base class bytes (PCI Code and ID Assignment): network (0x02, InfiniBand is 0x0207)
# for NICs; display (0x03) and processing accelerator (0x12) for GPUs.
NIC_CLASS_PREFIX = "0x02"
GPU_CLASS_PREFIXES = ("0x03", "0x12")
REPORTED_CLASS_PREFIXES = (NIC_CLASS_PREFIX, *GPU_CLASS_PREFIXES)


def parse_numa_node(text: str) -> int | None:
    """A ``numa_node`` attribute: the node id, or None where the kernel says -1 (no affinity).

    Raises ValueError on anything but a small decimal integer.
    """
    stripped = text.strip()
    if len(stripped) > 6 or not stripped.lstrip("-").isdigit() or not stripped.isascii():
        raise ValueError(f"not a NUMA node: {stripped[:40]!r}")
    value = int(stripped)
    return None if value < 0 else value


# Negotiated link widths the PCIe spec defines; 0 is a link that is not up.
_LINK_WIDTHS = frozenset({0, 1, 2, 4, 8, 12, 16, 32})
_LINK_SPEED = re.compile(r"([0-9]{1,3}(?:\.[0-9])?) GT/s(?: PCIe)?")


def parse_link_width(text: str) -> int | None:
    """A ``*_link_width`` attribute: lanes, or None for a number the spec gives no link
    (63: the all-ones read of a function that no longer answers; 255: the kernel's
    PCIE_LNK_WIDTH_UNKNOWN).

    Raises ValueError on anything but a small decimal integer.
    """
    stripped = text.strip()
    if len(stripped) > 3 or not stripped.isdigit() or not stripped.isascii():
        raise ValueError(f"not a link width: {stripped[:40]!r}")
    value = int(stripped)
    return value if value in _LINK_WIDTHS else None


def parse_link_speed(text: str) -> float | None:
    """A ``*_link_speed`` attribute in transfers per second a lane, None for ``Unknown``.

    Raises ValueError on anything else.
    """
    stripped = text.strip()
    if stripped.startswith("Unknown"):
        return None
    match = _LINK_SPEED.fullmatch(stripped)
    if match is None:
        raise ValueError(f"not a PCIe link speed: {stripped[:40]!r}")
    return float(match[1]) * 1e9


_AER_TOTAL = re.compile(r"TOTAL_ERR_(?:COR|NONFATAL|FATAL) ([0-9]{1,20})")


def parse_aer_total(text: str) -> int:
    """The ``TOTAL_ERR_*`` count of an ``aer_dev_*`` attribute, its last line (one line
    per error bit comes before it).

    Raises ValueError where that line is missing or not a 64-bit count.
    """
    _, _, last = text.rstrip("\n").rpartition("\n")
    match = _AER_TOTAL.fullmatch(last)
    if match is None or int(match[1]) > MAX_COUNTER:
        raise ValueError(f"no TOTAL_ERR_* count at its end: {last[:40]!r}")
    return int(match[1])


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


def pcie_path_of(function_dir: Path) -> tuple[str, ...]:
    """Where the function sits in the PCI tree, from its real sysfs path
    (``/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/...``): its host bridge, the
    last ``pci<domain>:<bus>`` folder (a Hyper-V guest's bus has one below VMBus
    folders) that no PCI function holds, then every folder from there down to this
    one. () where the real path has no such folder or ends elsewhere (plain folders of
    a fixture tree).

    A bus folder below a PCI function is a bus that function opened, not a host bridge
    of its own: Intel VMD's. The VMD is an endpoint of the CPU's root complex (in
    domain 0000), and the kernel hangs the root bus of its domain (from 0x10000) below
    it (drivers/pci/controller/vmd.c, ``pci_create_root_bus(&vmd->dev->dev, ...)``):
    ``pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:06.0/10000:e1:00.0``. The path
    climbs past it to the host bridge above, and keeps the VMD's bus folder, where the
    climb for switches stops (``switches_above``)."""
    parts = os.path.realpath(function_dir).split("/")
    if not parts or parts[-1] != function_dir.name or not is_pci_address(parts[-1]):
        return ()
    start = len(parts) - 1
    while True:
        while start > 0 and is_pci_address(parts[start - 1]):
            start -= 1
        if start == 0 or not parts[start - 1].startswith("pci"):
            return ()
        start -= 1
        if start == 0 or not is_pci_address(parts[start - 1]):
            return tuple(parts[start:])


@functools.lru_cache(maxsize=4096)
def switches_above(path: tuple[str, ...]) -> tuple[str, ...]:
    """The switches above the function at the end of ``path`` (a ``pcie_path``),
    nearest first, each named by its upstream port, as NCCL climbs (``xml.cc``): two
    folders up, past the switch's downstream port; () for a function that hangs off the
    root complex. A bus folder ends the climb: ``path[0]``, the host bridge, or a VMD's
    bus, whose root ports and the VMD above them are no switch."""
    found = []
    here = len(path) - 1
    while here >= 2 and is_pci_address(path[here - 1]) and is_pci_address(path[here - 2]):
        here -= 2
        found.append(path[here])
    return tuple(found)


# Where Broadcom's switch-link module lists the links, under the sysfs root.
SWITCH_LINKS = ("kernel", "pci_switch_link", "virtual_switch_links")


def read_switch_links(
    links_dir: Path, *, on_bus: Iterable[str], issues: list[CollectorIssue]
) -> dict[str, frozenset[str]]:
    """The switches (by upstream port) each switch has a direct link to, where both
    list the link and it names a function ``on_bus``; {} where the module is not loaded
    (no folder). A folder that cannot be listed is an issue and gives no links."""
    listed: dict[str, set[str]] = {}
    try:
        switches = list_source(links_dir, absent="")
    except CollectorUnavailable:
        return {}
    except CollectorError as error:
        issues.append(issue(UNREADABLE, str(error)))
        return {}
    functions = frozenset(on_bus)  # only where the module is: most nodes never pay it
    for switch in switches:
        if not is_pci_address(switch):
            continue
        try:
            peers = list_source(links_dir / switch, absent="")
        except CollectorUnavailable:
            continue  # gone since the listing
        except CollectorError as error:
            issues.append(issue(UNREADABLE, str(error)))
            continue
        listed[switch] = {p for p in peers if p in functions}
    return {
        switch: both_ways
        for switch, peers in listed.items()
        if (both_ways := frozenset(p for p in peers if switch in listed.get(p, ())))
    }


# The vendor ID of the switches NCCL reads links for (``ncclTopoGetXmlFromSys``).
SWITCH_LINK_VENDOR = "0x1000"


def broadcom_links_only(
    links: Mapping[str, frozenset[str]], vendor_of: Callable[[str], str | None]
) -> dict[str, frozenset[str]]:
    """``links`` between switches ``vendor_of`` says are Broadcom's, as NCCL keeps
    them: it reads a switch's links only where its vendor is SWITCH_LINK_VENDOR, so a
    link with another switch at either end is at best one-way to it."""
    broadcom = {s for s in links if vendor_of(s) == SWITCH_LINK_VENDOR}
    return {
        switch: kept
        for switch, peers in links.items()
        if switch in broadcom and (kept := peers & broadcom)
    }


def switch_peers_of(
    pcie_path: tuple[str, ...], links: Mapping[str, frozenset[str]]
) -> frozenset[str]:
    """The switches linked to any switch above the function at ``pcie_path``."""
    if not links:
        return frozenset()
    return frozenset().union(*(links.get(s, ()) for s in switches_above(pcie_path)))


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
    # Kernels built without NUMA have no numa_node file: None, the same as -1.
    return _read_parsed(read_text, str(path), parse_numa_node, issues)


# A NUMA node override is looked for every this many polls (a minute at the default
# interval): re-reading ~70 numa_node files costs a dense node's poll ~0.2 ms, and the
# override is a rare, manual fix.
NUMA_RECHECK_POLLS = 6


class PciCollector(Collector):
    """Vendor, device, class and NUMA node of GPUs, accelerators and NICs.

    A function's files are read when its address is first listed and kept while the
    bus lists it under the same inode: vendor, device, class and place in the PCI tree
    are fixed for the life of a function. Its NUMA node is set at enumeration but root
    may override it (``echo N > numa_node``, the kernel's answer to firmware that
    reports it wrong, as the NUMA-mismatch runbook says), so it is read again every
    ``NUMA_RECHECK_POLLS`` polls, through a kept descriptor. A hot-unplugged or
    re-created function (a new sysfs entry: a new inode) is dropped or read anew; a
    function whose read failed is read, and reported, again next poll.
    """

    name = "pci"
    known_errors = (UNREADABLE, GARBAGE, VANISHED)

    def __init__(self, context: CollectorContext) -> None:
        super().__init__(context)
        # address -> what was read of it, while its bus entry keeps its inode
        self._functions: dict[str, _Known] = {}
        self._files = KeptFiles.under(context.sysfs)
        self._polls = 0
        self._links_dir = context.sysfs.joinpath(*SWITCH_LINKS)

    def collect(self) -> Readings:
        """Every function of a reported class."""
        devices_dir = self.context.sysfs / "bus" / "pci" / "devices"
        listed = list_source_inodes(str(devices_dir), absent=f"no PCI bus at {devices_dir}")
        found: list[PciDevice] = []
        issues: list[CollectorIssue] = []
        kept: dict[str, _Known] = {}
        self._polls += 1
        numa_due = self._polls % NUMA_RECHECK_POLLS == 0
        links = read_switch_links(
            self._links_dir, on_bus=(address for address, _ in listed), issues=issues
        )
        if links:  # only where the module is
            links = broadcom_links_only(links, lambda s: _vendor_of(devices_dir / s))
        for address, inode in listed:
            if not is_pci_address(address):
                continue
            known = self._functions.get(address)
            if known is None or known.inode != inode:
                function_dir = devices_dir / address
                numa_path = str(function_dir / "numa_node")
                link = _find_link(function_dir)
                # A descriptor kept for a function that had this address follows that
                # function's kernfs node, not the path: the new function's file is opened.
                self._files.forget((numa_path, *(link.paths if link is not None else ())))
                before = len(issues)
                device = read_pci_device(function_dir, address=address, issues=issues)
                if device is not None:
                    device = replace(device, pcie_path=pcie_path_of(function_dir))
                known = _Known(inode, device, numa_path, link if device is not None else None)
                if len(issues) != before:  # read again, and reported again, next poll
                    known = replace(known, inode=_READ_AGAIN)
            elif numa_due and known.device is not None:
                known = self._with_numa_node(known, issues)
            if known.link is not None:
                known = self._with_link_read(known, issues)
            if known.device is not None and (links or known.device.switch_peers):
                peers = switch_peers_of(known.device.pcie_path, links)
                if peers != known.device.switch_peers:
                    known = replace(known, device=replace(known.device, switch_peers=peers))
            kept[address] = known
            if known.device is not None:
                found.append(known.device)
        self._functions = kept  # functions no longer listed are dropped here
        if numa_due:
            self._files.sweep()  # kept descriptors of functions gone
        return Readings(pci_devices=tuple(found), issues=tuple(issues))

    def close(self) -> None:
        self._files.close()

    def _with_link_read(self, known: _Known, issues: list[CollectorIssue]) -> _Known:
        """``known`` with its PCIe link's figures as sysfs says now: what it can run at
        (read once, when the function is first awake), what it runs at, and its AER
        counts. A suspended function keeps what it can run at and its counts (kernel
        memory, read without waking it) only; a read that fails loses its figure."""
        link, device = known.link, known.device
        assert link is not None  # the caller reads functions with a link only
        assert device is not None  # and only reported ones have one
        errors = self._aer_samples(link, issues)
        status = _read_parsed(self._files.read_text, link.status_path, str, issues)
        if status in _ASLEEP:
            return replace(known, device=replace(device, samples=(*(link.most or ()), *errors)))
        most = link.most
        if most is None:
            most = _most_of_link(link, issues)
            link = replace(link, most=most)
        current: list[Sample] = []
        for spec, path, parse in (
            (PCIE_LINK_WIDTH, link.width_path, parse_link_width),
            (PCIE_LINK_SPEED, link.speed_path, parse_link_speed),
        ):
            value = _read_parsed(self._files.read_text, path, parse, issues)
            if value is not None:
                current.append(Sample(spec, float(value)))
        samples = (*current, *most, *errors)
        if samples == device.samples and link is known.link:
            return known  # as last poll: no new objects
        return replace(known, device=replace(device, samples=samples), link=link)

    def _aer_samples(self, link: _Link, issues: list[CollectorIssue]) -> tuple[Sample, ...]:
        """The link's AER counts, one sample a file; a read that fails loses its figure."""
        samples = []
        for path, labels in link.aer_files:
            count = _read_parsed(self._files.read_text, path, parse_aer_total, issues)
            if count is not None:
                samples.append(Sample(PCIE_AER_ERRORS, float(count), labels))
        return tuple(samples)

    def _with_numa_node(self, known: _Known, issues: list[CollectorIssue]) -> _Known:
        """``known`` with its function's NUMA node as sysfs says now; as it was where the
        read fails."""
        assert known.device is not None  # the caller re-reads reported functions only
        reported = len(issues)
        node = _read_parsed(self._files.read_text, known.numa_path, parse_numa_node, issues)
        if len(issues) != reported or node == known.device.numa_node:
            return known
        return replace(known, device=replace(known.device, numa_node=node))


# The inode of a function read with issues: no bus entry has it, so the next poll reads
# the function anew (and reports what still fails); meanwhile its link is read as any.
_READ_AGAIN = -1
# power/runtime_status of a function runtime PM has put (or is putting) to sleep.
_ASLEEP = frozenset({"suspended", "suspending"})


@dataclass(frozen=True, slots=True)
class _Link:
    """Where a function's PCIe link is read, and what it can run at once read."""

    end: Path  # the link's end below its upstream port, a real directory
    width_path: str  # <end>/current_link_width
    speed_path: str  # <end>/current_link_speed
    status_path: str  # <end>/power/runtime_status
    # PCIE_LINK_MAX_WIDTH and _MAX_SPEED, where known; None until read, which is once,
    # while the function is awake (what fails then is not read again)
    most: tuple[Sample, ...] | None = None
    # The aer_dev_* files of the function, of its link's upstream port and of its card's
    # own switch, each with its PCIE_AER_ERRORS labels: (type, reported_by)
    aer_files: tuple[tuple[str, tuple[str, str]], ...] = ()

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.width_path, self.speed_path, self.status_path, *(p for p, _ in self.aer_files))


def _find_link(function_dir: Path) -> _Link | None:
    """The function's PCIe link, if it has one: not a VF (the spec reserves a VF's link
    registers: they read 0), nor conventional PCI (no link files, as on a VM's bus). For
    a card with a PCIe switch of its own, the card's link to its slot (``_card_end``)."""
    if os.path.lexists(function_dir / "physfn"):
        return None
    if not os.path.exists(function_dir / "current_link_width"):
        return None
    real = Path(os.path.realpath(function_dir))
    end = _card_end(real)
    files = function_dir if end == real else end  # issues name the bus path where they can
    aer_files = _aer_files(function_dir, "device")
    if end != real:  # the card's end of its slot's link: its own switch's upstream port
        aer_files += _aer_files(end, "card_switch")
    if is_pci_address(end.parent.name):
        aer_files += _aer_files(end.parent, "upstream_port")
    return _Link(
        end,
        str(files / "current_link_width"),
        str(files / "current_link_speed"),
        str(files / "power" / "runtime_status"),
        aer_files=aer_files,
    )


# aer_dev_* attribute -> PCIE_AER_ERRORS' type
_AER_ATTRIBUTES = (
    ("aer_dev_correctable", "correctable"),
    ("aer_dev_nonfatal", "nonfatal"),
    ("aer_dev_fatal", "fatal"),
)


def _aer_files(function: Path, reported_by: str) -> tuple[tuple[str, tuple[str, str]], ...]:
    """The ``aer_dev_*`` files a function has (none without AER), with their labels."""
    return tuple(
        (str(function / name), (error_type, reported_by))
        for name, error_type in _AER_ATTRIBUTES
        if os.path.exists(function / name)
    )


def _card_end(function: Path) -> Path:
    """The function, or the upstream port of a PCIe switch on its own card, whose link
    is the card's link to its slot.

    AMD's and Intel's discrete GPUs (and BlueField DPUs) carry a switch of their own, of
    the card's vendor: the GPU function's link ends inside the card. Going up from the
    function through switch ports of its vendor stops below a root port (a function
    whose parent is the host bridge, of whatever vendor: Intel's are Intel's) or at a
    port of another vendor (a switch on the board, such as the Broadcom ones of GPU
    servers). ``function`` is the real directory in ``/sys/devices``."""
    vendor = _vendor_of(function)
    here = function
    while vendor is not None:
        port = here.parent
        if not (is_pci_address(port.name) and is_pci_address(port.parent.name)):
            break  # the parent is a root port, or none: here's link is the slot's
        if _vendor_of(port) != vendor or not os.path.exists(port / "current_link_width"):
            break
        here = port
    return here


def _vendor_of(function: Path) -> str | None:
    # Unknown (gone, unreadable, garbage: reported where the function itself is read):
    # the walk stops, and the function's own link is read.
    return _read_hex(function / "vendor", digits=4, issues=[])


def _most_of_link(link: _Link, issues: list[CollectorIssue]) -> tuple[Sample, ...]:
    """What the link can run at: the lesser of its end's own maximum and its upstream
    port's, the parent directory of the end's real one where that is a PCI function (a
    root or switch port); the end's alone where the port says nothing."""
    upstream = link.end.parent
    sides = [link.end]
    if is_pci_address(upstream.name):
        sides.append(upstream)
    samples = []
    for spec, name, parse in (
        (PCIE_LINK_MAX_WIDTH, "max_link_width", parse_link_width),
        (PCIE_LINK_MAX_SPEED, "max_link_speed", parse_link_speed),
    ):
        values = []
        for side in sides:
            value = _read_parsed(read_text, str(side / name), parse, issues)
            if value:  # None or 0: that side does not say
                values.append(value)
        if values:
            samples.append(Sample(spec, float(min(values))))
    return tuple(samples)


_T = TypeVar("_T")


def _read_parsed(
    read: Callable[[str], str | None],
    path: str,
    parse: Callable[[str], _T | None],
    issues: list[CollectorIssue],
) -> _T | None:
    """One attribute, parsed; None where it is absent, ``parse`` says nothing, or it
    fails (the failure added to ``issues``: unreadable, or garbage for ValueError)."""
    try:
        text = read(path)
        return None if text is None else parse(text)
    except FileError as error:
        issues.append(issue(error.label, str(error)))
    except ValueError as error:
        issues.append(issue(GARBAGE, f"{path}: {error}"))
    return None


@dataclass(frozen=True, slots=True)
class _Known:
    """A function as read when its bus entry (this inode) was first listed."""

    inode: int
    device: PciDevice | None  # None for a class not reported
    numa_path: str  # <function>/numa_node, read again every NUMA_RECHECK_POLLS polls
    link: _Link | None = None  # its PCIe link, read every poll


REGISTRATION = Registration(
    "pci",
    "PCI functions of GPUs, accelerators and NICs: vendor, device, class, NUMA node, PCIe link"
    " and its errors",
    PciCollector,
)
