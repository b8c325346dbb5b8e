"""Traffic counters of every network device of the node (``<sysfs>/class/net``).

Each host netdev backed by a device (one with a ``device`` link: not ``lo``, veth,
bridges, ifb) is reported under ``NETDEV <ifname>`` and, where the device is a PCI
function, ``PCI <address>``: the ``device`` link points at the function itself, or,
for virtio (the normal NIC of a VM), at ``<function>/virtio<N>`` whose parent folder
is the function. Counters come from ``class/net/<ifname>/statistics/``, labelled
``interface=<ifname>``.

An SR-IOV VF moved into a pod's network namespace (or bound to vfio-pci) is not in the
host's ``class/net``. Its traffic is read from the counters its PF keeps per VF,
``<pf>/sriov/<n>/stats`` (mlx5), where ``n`` is the PF's ``virtfn<n>`` link to the VF;
it is reported under ``PCI <vf address>`` and named by that address. Those samples are
labelled ``interface=<pf ifname>/vf<n>``: no real interface has that name (netdev
names cannot contain ``/``), which says where the figure came from. mlx5 writes
``stats`` as one file of ``name : value`` lines; a folder of one file per counter is
read too. The per-VF counters have no error counts. Every VF, on the host or not, also
carries ``SRIOV_VF <pf address>/<n>``.

A missing counter (or a device gone since the listing) gives no sample and no issue;
an unreadable or garbage one loses that figure and is reported as an issue with its
path. Which kubelet or DRA device names a NIC is ``exporter.resolver``'s business.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from exporter.collectors.base import (
    Collector,
    CollectorError,
    Registration,
    issue,
)
from exporter.model import (
    CollectorIssue,
    DeviceIdentity,
    DeviceReading,
    HardwareKey,
    KeyKind,
    MetricKind,
    MetricSpec,
    Readings,
    Sample,
)
from exporter.sysfs import (
    GARBAGE,
    MAX_ATTRIBUTE_BYTES,
    MAX_COUNTER,
    UNREADABLE,
    file_issue,
    is_pci_address,
    list_source,
    read_int,
    read_text,
    vendor_name,
)

__all__ = [
    "NET_RECEIVE_BYTES",
    "NET_RECEIVE_DROPS",
    "NET_RECEIVE_ERRORS",
    "NET_RECEIVE_PACKETS",
    "NET_TRANSMIT_BYTES",
    "NET_TRANSMIT_DROPS",
    "NET_TRANSMIT_ERRORS",
    "NET_TRANSMIT_PACKETS",
    "REGISTRATION",
    "NetdevCollector",
    "net_samples",
    "parse_vf_stats",
    "pci_function",
]

_LABELS = ("interface",)
NET_RECEIVE_BYTES = MetricSpec(
    "podresources_net_receive_bytes_total",
    MetricKind.COUNTER,
    "Bytes the network interface received.",
    _LABELS,
)
NET_TRANSMIT_BYTES = MetricSpec(
    "podresources_net_transmit_bytes_total",
    MetricKind.COUNTER,
    "Bytes the network interface transmitted.",
    _LABELS,
)
NET_RECEIVE_PACKETS = MetricSpec(
    "podresources_net_receive_packets_total",
    MetricKind.COUNTER,
    "Packets the network interface received.",
    _LABELS,
)
NET_TRANSMIT_PACKETS = MetricSpec(
    "podresources_net_transmit_packets_total",
    MetricKind.COUNTER,
    "Packets the network interface transmitted.",
    _LABELS,
)
NET_RECEIVE_ERRORS = MetricSpec(
    "podresources_net_receive_errors_total",
    MetricKind.COUNTER,
    "Bad packets the network interface received.",
    _LABELS,
)
NET_TRANSMIT_ERRORS = MetricSpec(
    "podresources_net_transmit_errors_total",
    MetricKind.COUNTER,
    "Packets the network interface failed to transmit.",
    _LABELS,
)
NET_RECEIVE_DROPS = MetricSpec(
    "podresources_net_receive_drops_total",
    MetricKind.COUNTER,
    "Received packets the network interface dropped.",
    _LABELS,
)
NET_TRANSMIT_DROPS = MetricSpec(
    "podresources_net_transmit_drops_total",
    MetricKind.COUNTER,
    "Packets the network interface dropped instead of transmitting.",
    _LABELS,
)

# Kernel counter name -> family, in the order samples are reported.
_COUNTERS: tuple[tuple[str, MetricSpec], ...] = (
    ("rx_bytes", NET_RECEIVE_BYTES),
    ("tx_bytes", NET_TRANSMIT_BYTES),
    ("rx_packets", NET_RECEIVE_PACKETS),
    ("tx_packets", NET_TRANSMIT_PACKETS),
    ("rx_errors", NET_RECEIVE_ERRORS),
    ("tx_errors", NET_TRANSMIT_ERRORS),
    ("rx_dropped", NET_RECEIVE_DROPS),
    ("tx_dropped", NET_TRANSMIT_DROPS),
)
_COUNTER_NAMES = frozenset(name for name, _ in _COUNTERS)
_MAX_DIGITS = len(str(MAX_COUNTER))
_VIRTFN = re.compile(r"^virtfn(\d+)$")
_VIRTIO = re.compile(r"^virtio\d+$")


def parse_vf_stats(text: str) -> tuple[dict[str, int], tuple[str, ...]]:
    """mlx5's per-VF ``stats`` file (one ``name : value`` line per counter): the
    counters by name, and the lines that are not ``name : value`` with a 64-bit value
    (cut to 40 characters); a bad line loses only its own figure."""
    counters: dict[str, int] = {}
    bad: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, separator, value = line.partition(":")
        value = value.strip()
        # Length first: int() of a huge string is slow, and raises past 4300 digits.
        digits = value.isascii() and value.isdigit() and len(value) <= _MAX_DIGITS
        if separator and digits and int(value) <= MAX_COUNTER:
            counters[name.strip()] = int(value)
        else:
            bad.append(line[:40])
    return counters, tuple(bad)


def net_samples(counters: Mapping[str, int], *, interface: str) -> tuple[Sample, ...]:
    """Samples of the counters present in ``counters`` (kernel names), for one interface."""
    return tuple(
        Sample(spec, float(counters[name]), (interface,))
        for name, spec in _COUNTERS
        if name in counters
    )


def pci_function(device: Path) -> Path | None:
    """The PCI function a netdev's resolved ``device`` folder stands for, or None.

    The folder itself when it is a function; its parent for a virtio device
    (``<function>/virtio<N>``); None for other parents (USB, platform, virtio-mmio).
    """
    if is_pci_address(device.name):
        return device
    if _VIRTIO.match(device.name) and is_pci_address(device.parent.name):
        return device.parent
    return None


def _resolve(link: Path) -> Path | None:
    """Where a sysfs link leads, or None when it (or its target) does not exist.

    Raises CollectorError for anything else (a symlink loop, permissions).
    """
    try:
        return Path(os.path.realpath(link, strict=True))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise CollectorError(f"cannot resolve {link}: {error.strerror or error}") from error


@dataclass(frozen=True, slots=True)
class _Interface:
    """A host netdev backed by a device; ``function`` is its PCI function, if any."""

    name: str
    path: Path  # <sysfs>/class/net/<name>, as on-call engineers know it
    function: Path | None


class NetdevCollector(Collector):
    """Traffic counters of every device-backed NIC, and of SR-IOV VFs through their PF."""

    name = "netdev"
    # NIC resources have no fixed name prefix (SR-IOV, host-device and virtio plugins
    # name them freely): an absent class/net is never judged a failure by the kubelet.
    known_errors = (UNREADABLE, GARBAGE)

    def collect(self) -> Readings:
        class_dir = self.context.sysfs / "class" / "net"
        names = list_source(class_dir, absent=f"no network devices: {class_dir} does not exist")
        issues: list[CollectorIssue] = []
        interfaces = [i for n in names if (i := _interface(class_dir / n, issues)) is not None]
        vf_links = _VfLinks(issues)
        readings = [_read_interface(i, vf_links, issues) for i in interfaces]
        readings += _read_moved_vfs(interfaces, vf_links, issues)
        return Readings(devices=tuple(readings), issues=tuple(issues))


def _interface(path: Path, issues: list[CollectorIssue]) -> _Interface | None:
    """The netdev at ``class/net/<name>``, or None for a virtual or vanished one."""
    try:
        device = _resolve(path / "device")
    except CollectorError as error:
        issues.append(file_issue(error))
        return None
    if device is None:
        return None  # no device link: lo, veth, bridges, ifb, tunnels
    return _Interface(path.name, path, pci_function(device))


def _read_interface(
    interface: _Interface, vf_links: _VfLinks, issues: list[CollectorIssue]
) -> DeviceReading:
    keys = [HardwareKey(KeyKind.NETDEV, interface.name)]
    identity = DeviceIdentity()
    if interface.function is not None:
        keys.append(HardwareKey(KeyKind.PCI, interface.function.name))
        keys.extend(vf_links.key_of_vf(interface.function))
        identity = _identity(interface.function, issues)
    counters = _read_counter_files(interface.path / "statistics", issues)
    return DeviceReading(
        name=interface.name,
        keys=tuple(keys),
        identity=identity,
        samples=net_samples(counters, interface=interface.name),
    )


def _read_moved_vfs(
    interfaces: list[_Interface], vf_links: _VfLinks, issues: list[CollectorIssue]
) -> list[DeviceReading]:
    """VFs of the host's PFs that have no host netdev, read through the PF's counters."""
    on_host = {i.function for i in interfaces if i.function is not None}
    pf_names: dict[Path, str] = {}  # each PF's first netdev, for the samples' label
    for interface in interfaces:
        if interface.function is not None:
            pf_names.setdefault(interface.function, interface.name)
    readings: list[DeviceReading] = []
    for pf, pf_name in pf_names.items():
        for index, vf in vf_links.of_pf(pf):
            if vf in on_host:
                continue
            counters = _read_vf_counters(pf / "sriov" / str(index) / "stats", issues)
            readings.append(
                DeviceReading(
                    name=vf.name,
                    keys=(
                        HardwareKey(KeyKind.PCI, vf.name),
                        HardwareKey(KeyKind.SRIOV_VF, f"{pf.name}/{index}"),
                    ),
                    identity=_identity(vf, issues),
                    samples=net_samples(counters, interface=f"{pf_name}/vf{index}"),
                )
            )
    return readings


class _VfLinks:
    """The ``virtfn<n>`` links of PFs, each PF's listed once per poll."""

    def __init__(self, issues: list[CollectorIssue]) -> None:
        self._issues = issues
        self._by_pf: dict[Path, tuple[tuple[int, Path], ...]] = {}

    def of_pf(self, pf: Path) -> tuple[tuple[int, Path], ...]:
        """``(n, VF function)`` for each ``virtfn<n>`` of ``pf``, by n; () for a non-PF."""
        if pf not in self._by_pf:
            self._by_pf[pf] = self._list(pf)
        return self._by_pf[pf]

    def key_of_vf(self, function: Path) -> tuple[HardwareKey, ...]:
        """``SRIOV_VF <pf>/<n>`` for a VF function; () for anything else."""
        try:
            pf = _resolve(function / "physfn")
        except CollectorError as error:
            self._issues.append(file_issue(error))
            return ()
        if pf is None:
            return ()  # not a VF
        for index, vf in self.of_pf(pf):
            if vf == function:
                return (HardwareKey(KeyKind.SRIOV_VF, f"{pf.name}/{index}"),)
        return ()  # the VF is being destroyed: its PF no longer links to it

    def _list(self, pf: Path) -> tuple[tuple[int, Path], ...]:
        try:
            entries = os.listdir(pf)
        except (FileNotFoundError, NotADirectoryError):
            return ()
        except OSError as error:
            self._issues.append(issue(UNREADABLE, f"cannot list {pf}: {error.strerror or error}"))
            return ()
        found: list[tuple[int, Path]] = []
        for entry in entries:
            match = _VIRTFN.match(entry)
            if match is None:
                continue
            try:
                vf = _resolve(pf / entry)
            except CollectorError as error:
                self._issues.append(file_issue(error))
                continue
            if vf is not None and is_pci_address(vf.name):
                found.append((int(match.group(1)), vf))
        return tuple(sorted(found))


def _identity(function: Path, issues: list[CollectorIssue]) -> DeviceIdentity:
    try:
        vendor = vendor_name(read_text(function / "vendor"))
    except CollectorError as error:
        issues.append(file_issue(error))
        vendor = None
    return DeviceIdentity(pci_address=function.name, vendor=vendor)


def _read_counter_files(directory: Path, issues: list[CollectorIssue]) -> dict[str, int]:
    """The counters of ``directory/<kernel name>`` that exist; a bad file loses its figure."""
    counters: dict[str, int] = {}
    for name, _ in _COUNTERS:
        try:
            value = read_int(directory / name)
        except CollectorError as error:
            issues.append(file_issue(error))
            continue
        if value is not None:
            counters[name] = value
    return counters


def _read_vf_counters(stats: Path, issues: list[CollectorIssue]) -> dict[str, int]:
    """A PF's counters of one VF: a ``name : value`` file or a folder of files; {} if absent."""
    if stats.is_dir():
        return _read_counter_files(stats, issues)
    try:
        text = read_text(stats)
    except CollectorError as error:
        issues.append(file_issue(error))
        return {}
    if text is None:
        return {}  # the PF keeps no per-VF counters (most drivers but mlx5)
    if len(text) >= MAX_ATTRIBUTE_BYTES:
        # Cut at the read bound, its last value may be cut too: no kernel writes this much.
        issues.append(issue(GARBAGE, f"{stats}: longer than {MAX_ATTRIBUTE_BYTES} bytes"))
        return {}
    counters, bad_lines = parse_vf_stats(text)
    issues.extend(issue(GARBAGE, f"{stats}: not a 'name : value' line: {b!r}") for b in bad_lines)
    return {name: value for name, value in counters.items() if name in _COUNTER_NAMES}


REGISTRATION = Registration(
    "netdev",
    "Traffic counters of network devices: NICs (virtio included) and SR-IOV VFs",
    NetdevCollector,
)
