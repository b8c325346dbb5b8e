"""Port traffic, state and errors of RDMA devices (``<sysfs>/class/infiniband/<dev>/ports/<p>/``).

Every device is reported under ``RDMA <name>`` and, where its ``device`` link points
at a PCI function (the HCA, or a VF's own RDMA device), ``PCI <address>``; software
devices (rxe, siw) have no PCI key. Which kubelet or DRA device names it is
``exporter.resolver``'s business.

Counters follow node_exporter/procfs: ``counters_ext/*_64`` (kernels before 4.5, whose
``counters/`` were 32 bits and saturate) is preferred where present, else ``counters/``
(64 bits where the port's agent offers extended counters, as mlx5's does; otherwise
32 bits that saturate). A ``counters/`` figure at the 32-bit maximum, 4294967295, gives
no sample: a saturated counter stops there until something resets it, and served as it
is it would read as an idle port (``rate()`` 0); a 64-bit counter passes that value in
an instant, costing one sample. ``port_rcv_data``/``port_xmit_data`` count 4-octet words and
are multiplied by 4 here. A port without a performance-management agent makes older
kernels print ``N/A (no PMA)`` and newer ones fail the read with EINVAL (or
EOPNOTSUPP): both mean absent, as in procfs.

Each port's health (``read_port_health``), every driver's: ``state`` and ``phys_state``
as the kernel numbers them (``"4: ACTIVE"``, ``"5: LinkUp"``: ib core's ``state_show``
and ``phys_state_show``; the numbers are the IBA's, so a new name changes nothing),
``rate`` as bytes per second (``"400 Gb/sec (4X NDR)"``, the leading figure in Gb/s;
the kernel answers EINVAL, no figure, where the port reports no valid width, as a port
that is down may; mlx5 reports a default instead, so its down ports read a rate).
RoCE drivers (mlx5, irdma, qedr, mana...) take the state from the netdev: ACTIVE and
LinkUp with carrier, else DOWN and Disabled, never Polling. EFA's ``efa_query_port``
reports ACTIVE, LinkUp and a fixed rate whatever the link: constants, not health. Then
the PortCounters error fields in ``counters/``: ``link_downed``
(the link failed its error recovery and went down), ``symbol_error``,
``link_error_recovery``, ``local_link_integrity_errors``,
``excessive_buffer_overrun_errors``, ``port_rcv_errors``,
``port_rcv_remote_physical_errors`` and ``port_xmit_discards``. Those are 4 to 16 bits
wide in the IBA's PortCounters and stop at their maximum (255 for ``link_downed``)
until the subnet manager's performance manager or ``perfquery -R`` clears them; they
are served as they are.

What does not change while a device exists (its PCI function and vendor, its ports and
which counter folders they have) is found when it is first listed and kept by its class
entry's name and inode, so a renamed or re-created device is found again; each port's
files are kept open between polls and re-read (``KeptFiles``): a GPU node's eight HCAs
cost ~15 reads a port a poll, not ~15 opens and a walk of their folders. ib core makes
the class entry (``device_add``) before the device's ports and their counter folders
(``ib_setup_port_attrs``), with its uevent held back until they exist (kernel commit
e7a5b4aafd82): a device listed in between would show fewer ports or folders than it
has. So a layout is kept for good only once two walks, a poll apart, found the same
one: a device is walked in the first two polls that list it. Where ``class/infiniband``
itself goes (ib_core unloaded), what was kept is dropped and its files closed.

A device whose driver has no MAD support gets no ``counters/`` at all (ib core's
``setup_port`` makes it only for drivers with ``process_mad``): AWS EFA, the RDMA
device of GPU instances, is one. Its traffic is in the driver's own
``hw_counters/{rx,tx}_bytes`` and ``{rx,tx}_pkts`` (octets, not words), read only
where ``counters/`` is absent, so no figure is ever counted from both. (mlx5's
``hw_counters`` holds RoCE events and errors, no traffic.) A missing counter gives no
sample; an unreadable or garbage one loses that figure and is reported as an issue
with its path.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from exporter.collectors.base import (
    Collector,
    CollectorContext,
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
from exporter.pci_address import is_pci_address
from exporter.sysfs import (
    GARBAGE,
    MAX_COUNTER,
    UNREADABLE,
    KeptFiles,
    failed_with,
    file_issue,
    list_source_inodes,
    read_pci_id,
    read_text,
    vendor_name,
)

__all__ = [
    "IB_PORT_ERRORS",
    "IB_PORT_LINK_DOWNED",
    "IB_PORT_PHYSICAL_STATE",
    "IB_PORT_RATE",
    "IB_PORT_STATE",
    "IB_RECEIVE_BYTES",
    "IB_RECEIVE_PACKETS",
    "IB_TRANSMIT_BYTES",
    "IB_TRANSMIT_PACKETS",
    "REGISTRATION",
    "IbDevice",
    "IbPortCounters",
    "IbPortHealth",
    "InfinibandCollector",
    "device_reading",
    "ib_samples",
    "parse_counter",
    "parse_rate",
    "parse_state",
    "read_port_counters",
    "read_port_health",
]

_LABELS = ("ib_device", "port")
IB_RECEIVE_BYTES = MetricSpec(
    "podresources_infiniband_receive_bytes_total",
    MetricKind.COUNTER,
    "Data octets the InfiniBand port received.",
    _LABELS,
)
IB_TRANSMIT_BYTES = MetricSpec(
    "podresources_infiniband_transmit_bytes_total",
    MetricKind.COUNTER,
    "Data octets the InfiniBand port transmitted.",
    _LABELS,
)
IB_RECEIVE_PACKETS = MetricSpec(
    "podresources_infiniband_receive_packets_total",
    MetricKind.COUNTER,
    "Packets the InfiniBand port received, errors included.",
    _LABELS,
)
IB_TRANSMIT_PACKETS = MetricSpec(
    "podresources_infiniband_transmit_packets_total",
    MetricKind.COUNTER,
    "Packets the InfiniBand port transmitted, errors included.",
    _LABELS,
)

IB_PORT_STATE = MetricSpec(
    "podresources_infiniband_port_state_id",
    MetricKind.GAUGE,
    "The port's logical state, as numbered in its state file: 1 DOWN, 2 INIT, 3 ARMED, "
    "4 ACTIVE (passing traffic), 5 ACTIVE_DEFER.",
    _LABELS,
)
IB_PORT_PHYSICAL_STATE = MetricSpec(
    "podresources_infiniband_port_physical_state_id",
    MetricKind.GAUGE,
    "The port's physical link state, as numbered in its phys_state file: 1 Sleep, "
    "2 Polling (InfiniBand: no peer, no cable or the far end down), 3 Disabled "
    "(InfiniBand: turned off by the subnet manager or an administrator; RoCE: no carrier), "
    "4 PortConfigurationTraining, 5 LinkUp, 6 LinkErrorRecovery, "
    "7 Phy Test.",
    _LABELS,
)
IB_PORT_RATE = MetricSpec(
    "podresources_infiniband_port_rate_bytes_per_second",
    MetricKind.GAUGE,
    "The port's link rate as the kernel reports it (its lanes times their nominal "
    "speed; an SDR, DDR or QDR link carries 80% of it as data), in bytes per second; a "
    "port that is not ACTIVE passes no traffic, whatever its rate reads.",
    _LABELS,
)
IB_PORT_LINK_DOWNED = MetricSpec(
    "podresources_infiniband_port_link_downed_total",
    MetricKind.COUNTER,
    "Times the port's link failed its error recovery and went down (PortCounters' "
    "LinkDownedCounter; stops at 255 until cleared).",
    _LABELS,
)
IB_PORT_ERRORS = MetricSpec(
    "podresources_infiniband_port_errors_total",
    MetricKind.COUNTER,
    "Errors the port counted, by type (PortCounters' error fields; each stops at its "
    "maximum until cleared).",
    (*_LABELS, "type"),
)

_T = TypeVar("_T")
# How an attribute file is read: ``read_text`` opens it each time; the collector's
# ``KeptFiles.read_text`` re-reads a descriptor kept open between polls.
_Reader = Callable[[str], str | None]
_OCTETS_PER_DATA_UNIT = 4  # PortRcvData/PortXmitData count 32-bit words
_SATURATED_32 = 2**32 - 1  # where a 32-bit PortCounters figure stops
_MAX_DIGITS = len(str(MAX_COUNTER))
_NOT_AVAILABLE = "N/A"  # "N/A (no PMA)" from ports without a performance-management agent


@dataclass(frozen=True, slots=True)
class IbPortCounters:
    """Traffic of one port; None where the driver does not count it."""

    port: int
    # counters{,_ext}/port_rcv_data{,_64} x 4, or hw_counters/rx_bytes (EFA), and so on
    receive_bytes: int | None
    transmit_bytes: int | None  # counters{,_ext}/port_xmit_data{,_64} x 4
    receive_packets: int | None  # counters{,_ext}/port_rcv_packets{,_64}
    transmit_packets: int | None  # counters{,_ext}/port_xmit_packets{,_64}


# counters/<file> -> IB_PORT_ERRORS' type: PortCounters' error fields an HCA's port
# counts (not the switch-only relay errors, nor partition-key constraint errors)
_ERROR_COUNTERS = (
    ("symbol_error", "symbol"),
    ("link_error_recovery", "link_error_recovery"),
    ("local_link_integrity_errors", "local_link_integrity"),
    ("excessive_buffer_overrun_errors", "excessive_buffer_overrun"),
    ("port_rcv_errors", "receive"),
    ("port_rcv_remote_physical_errors", "receive_remote_physical"),
    ("port_xmit_discards", "transmit_discards"),
)


@dataclass(frozen=True, slots=True)
class IbPortHealth:
    """State, rate and error counts of one port; None (or no entry) where not read."""

    port: int
    state: int | None  # ports/<p>/state's number: 4 is ACTIVE
    physical_state: int | None  # ports/<p>/phys_state's number: 5 is LinkUp
    rate_bytes_per_second: float | None  # ports/<p>/rate
    link_downed: int | None  # counters/link_downed
    errors: tuple[tuple[str, int], ...]  # (IB_PORT_ERRORS' type, count), in _ERROR_COUNTERS' order


@dataclass(frozen=True, slots=True)
class IbDevice:
    """One RDMA device: its name, the PCI function behind it and its ports (each one's
    traffic and health)."""

    name: str
    pci_address: str | None  # None for software devices (rxe, siw) without a PCI parent
    vendor: str | None  # from the PCI vendor ID: "mellanox"
    ports: tuple[tuple[IbPortCounters, IbPortHealth], ...]


def parse_counter(text: str) -> int | None:
    """One counter file: its value, or None for ``N/A (no PMA)``.

    Raises ValueError for anything else, a value beyond 64 bits included.
    """
    stripped = text.strip()
    if stripped.startswith(_NOT_AVAILABLE):
        return None
    # The length check first: int() of a huge string costs time (and raises past 4300 digits).
    if not (stripped.isascii() and stripped.isdigit() and len(stripped) <= _MAX_DIGITS):
        raise ValueError(f"not a 64-bit counter: {stripped[:40]!r}")
    value = int(stripped)
    if value > MAX_COUNTER:
        raise ValueError(f"not a 64-bit counter: {stripped!r}")
    return value


def parse_state(text: str) -> int:
    """The number of a ``state`` or ``phys_state`` file (``"4: ACTIVE"``).

    Raises ValueError for anything else.
    """
    number, colon, _ = text.strip().partition(":")
    if not (colon and number.isascii() and number.isdigit() and len(number) <= 3):
        raise ValueError(f"not a numbered port state: {text.strip()[:40]!r}")
    return int(number)


_BYTES_PER_GIGABIT = 125_000_000
# ASCII digits, bounded: float() takes any Unicode digits, and hundreds of them give inf.
_RATE = re.compile(r"([0-9]{1,6}(?:\.[0-9]{1,6})?) Gb/sec")


def parse_rate(text: str) -> float:
    """A ``rate`` file (``"400 Gb/sec (4X NDR)"``, ``"2.5 Gb/sec (1X SDR)"``) in bytes per
    second. Raises ValueError for anything else."""
    match = _RATE.match(text.strip())
    if match is None:
        raise ValueError(f"not a port rate: {text.strip()[:40]!r}")
    return float(match[1]) * _BYTES_PER_GIGABIT


def ib_samples(device: IbDevice) -> tuple[Sample, ...]:
    """The device's samples, port by port, for the figures it has."""
    samples: list[Sample] = []
    for traffic, health in device.ports:
        labels = (device.name, str(traffic.port))
        figures: tuple[tuple[MetricSpec, float | None], ...] = (
            (IB_RECEIVE_BYTES, traffic.receive_bytes),
            (IB_TRANSMIT_BYTES, traffic.transmit_bytes),
            (IB_RECEIVE_PACKETS, traffic.receive_packets),
            (IB_TRANSMIT_PACKETS, traffic.transmit_packets),
            (IB_PORT_STATE, health.state),
            (IB_PORT_PHYSICAL_STATE, health.physical_state),
            (IB_PORT_RATE, health.rate_bytes_per_second),
            (IB_PORT_LINK_DOWNED, health.link_downed),
        )
        samples += [Sample(spec, float(v), labels) for spec, v in figures if v is not None]
        samples += [Sample(IB_PORT_ERRORS, float(n), (*labels, t)) for t, n in health.errors]
    return tuple(samples)


def _read_attribute(
    path: str, parse: Callable[[str], _T | None], *, issues: list[CollectorIssue], read: _Reader
) -> tuple[bool, _T | None]:
    """Whether one port attribute answered, and ``parse`` of it. Absent, or refused with
    EINVAL or EOPNOTSUPP (no PMA: ``show_pma_counter`` returns the MAD query's error; no
    valid width for ``rate``), it did not; unreadable or garbage, it did, with no value
    and an issue naming it."""
    try:
        text = read(path)
    except CollectorError as error:
        if failed_with(error, errno.EINVAL, errno.EOPNOTSUPP):
            return False, None
        issues.append(file_issue(error))
        return True, None
    if text is None:
        return False, None
    try:
        return True, parse(text)
    except ValueError as error:
        issues.append(issue(GARBAGE, f"{path}: {error}"))
        return True, None


def _read_counter(
    paths: tuple[str, ...], *, issues: list[CollectorIssue], read: _Reader
) -> tuple[int | None, str | None]:
    """The value of the first of ``paths`` that answers, and that path. The first file
    that answers decides: a garbage counters_ext/ value is not replaced by a counters/
    one that may be a saturated 32-bit figure."""
    for path in paths:
        answered, value = _read_attribute(path, parse_counter, issues=issues, read=read)
        if answered:
            return value, path
    return None, None


# PortCounters' traffic fields, in IbPortCounters' order: (counters/ name, the driver's
# hw_counters/ name where a port has no PMA (EFA's), words of 4 octets in counters/)
_TRAFFIC = (
    ("port_rcv_data", "rx_bytes", True),
    ("port_xmit_data", "tx_bytes", True),
    ("port_rcv_packets", "rx_pkts", False),
    ("port_xmit_packets", "tx_pkts", False),
)


@dataclass(frozen=True, slots=True)
class _PortLayout:
    """Where one port's figures are: ib core makes a port's folders as it registers the
    device, so once registered which exist does not change while the device does."""

    number: int
    # per _TRAFFIC entry, the files to try in turn: counters_ext/*_64 before counters/
    traffic: tuple[tuple[str, ...], ...]
    state: str
    physical_state: str
    rate: str
    link_downed: str | None  # counters/link_downed; None without counters/
    errors: tuple[tuple[str, str], ...]  # (IB_PORT_ERRORS' type, its counters/ file)

    @property
    def pma(self) -> bool:
        """counters/ (or counters_ext/, kernels before 4.5) exist; else hw_counters/."""
        return self.link_downed is not None

    @property
    def files(self) -> tuple[str, ...]:
        """Every file the port's figures are read from."""
        return (
            *(path for paths in self.traffic for path in paths),
            self.state,
            self.physical_state,
            self.rate,
            *((self.link_downed,) if self.link_downed else ()),
            *(path for _, path in self.errors),
        )


def _port_layout(port_dir: Path, *, port: int) -> _PortLayout:
    directory = str(port_dir)
    extended = os.path.isdir(f"{directory}/counters_ext")
    pma = extended or os.path.isdir(f"{directory}/counters")
    counters = f"{directory}/counters"
    traffic: tuple[tuple[str, ...], ...]
    if not pma:
        traffic = tuple((f"{directory}/hw_counters/{driver}",) for _, driver, _ in _TRAFFIC)
    elif extended:
        traffic = tuple(
            (f"{directory}/counters_ext/{name}_64", f"{counters}/{name}") for name, _, _ in _TRAFFIC
        )
    else:
        traffic = tuple((f"{counters}/{name}",) for name, _, _ in _TRAFFIC)
    return _PortLayout(
        number=port,
        traffic=traffic,
        state=f"{directory}/state",
        physical_state=f"{directory}/phys_state",
        rate=f"{directory}/rate",
        # the error counters are PortCounters': in counters/ alone
        link_downed=f"{counters}/link_downed" if pma else None,
        errors=tuple((kind, f"{counters}/{name}") for name, kind in _ERROR_COUNTERS) if pma else (),
    )


def read_port_counters(
    port_dir: Path, *, port: int, issues: list[CollectorIssue]
) -> IbPortCounters:
    """The traffic counters of one port directory (``ports/<port>``); failures to ``issues``."""
    return _port_counters(_port_layout(port_dir, port=port), issues=issues, read=read_text)


def _port_counters(
    layout: _PortLayout, *, issues: list[CollectorIssue], read: _Reader
) -> IbPortCounters:
    values: list[int | None] = []
    for paths, (_, _, in_words) in zip(layout.traffic, _TRAFFIC, strict=True):
        value, path = _read_counter(paths, issues=issues, read=read)
        if value is not None and layout.pma:
            if value == _SATURATED_32 and path == paths[-1]:
                value = None  # a counters/ figure that may be a saturated 32-bit one
            elif in_words:
                value *= _OCTETS_PER_DATA_UNIT
        values.append(value)
    receive_bytes, transmit_bytes, receive_packets, transmit_packets = values
    return IbPortCounters(
        layout.number, receive_bytes, transmit_bytes, receive_packets, transmit_packets
    )


def read_port_health(port_dir: Path, *, port: int, issues: list[CollectorIssue]) -> IbPortHealth:
    """State, rate and error counters of one port directory; failures to ``issues``."""
    return _port_health(_port_layout(port_dir, port=port), issues=issues, read=read_text)


def _port_health(
    layout: _PortLayout, *, issues: list[CollectorIssue], read: _Reader
) -> IbPortHealth:
    def figure(path: str, parse: Callable[[str], _T | None]) -> _T | None:
        return _read_attribute(path, parse, issues=issues, read=read)[1]

    counts = ((kind, figure(path, parse_counter)) for kind, path in layout.errors)
    return IbPortHealth(
        port=layout.number,
        state=figure(layout.state, parse_state),
        physical_state=figure(layout.physical_state, parse_state),
        rate_bytes_per_second=figure(layout.rate, parse_rate),
        link_downed=None
        if layout.link_downed is None
        else figure(layout.link_downed, parse_counter),
        errors=tuple((kind, count) for kind, count in counts if count is not None),
    )


def _pci_parent(device_dir: Path, *, issues: list[CollectorIssue]) -> Path | None:
    """The PCI function the device's ``device`` link points at, or None."""
    link = device_dir / "device"
    try:
        parent = Path(os.path.realpath(link, strict=True))
    except (FileNotFoundError, NotADirectoryError):
        return None  # a software device, or one gone since the listing
    except OSError as error:
        issues.append(issue(UNREADABLE, f"cannot resolve {link}: {error.strerror or error}"))
        return None
    return parent if is_pci_address(parent.name) else None


@dataclass(frozen=True, slots=True)
class _DeviceLayout:
    """What does not change while an RDMA device exists: its PCI function, vendor and
    ports. Found once, as the device is first listed."""

    name: str
    pci_address: str | None
    vendor: str | None
    ports: tuple[_PortLayout, ...]


@dataclass(frozen=True, slots=True)
class _KeptLayout:
    """A listed device's layout, by its class entry's inode; ``confirmed`` once a second
    walk, a poll later, found the same (until then it may be a device still registering)."""

    inode: int
    layout: _DeviceLayout
    confirmed: bool


def _read_device(layout: _DeviceLayout, *, issues: list[CollectorIssue], read: _Reader) -> IbDevice:
    return IbDevice(
        name=layout.name,
        pci_address=layout.pci_address,
        vendor=layout.vendor,
        ports=tuple(
            (_port_counters(p, issues=issues, read=read), _port_health(p, issues=issues, read=read))
            for p in layout.ports
        ),
    )


def _device_layout(device_dir: Path, *, issues: list[CollectorIssue]) -> _DeviceLayout | None:
    """The device's layout, or None when it vanished; failures to ``issues``."""
    try:
        os.stat(device_dir)  # the class link itself: one issue for a broken one, not one per file
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        issues.append(issue(UNREADABLE, f"cannot read {device_dir}: {error.strerror or error}"))
        return None
    ports_dir = device_dir / "ports"
    try:
        port_names = os.listdir(ports_dir)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        issues.append(issue(UNREADABLE, f"cannot list {ports_dir}: {error.strerror or error}"))
        port_names = []
    numbers = [
        int(name)
        for name in sorted(port_names, key=lambda n: (len(n), n))
        if name.isascii() and name.isdigit()
    ]
    function = _pci_parent(device_dir, issues=issues)
    vendor = None
    if function is not None:
        try:
            vendor = vendor_name(read_pci_id(function / "vendor"))
        except CollectorError as error:
            issues.append(file_issue(error))
    return _DeviceLayout(
        name=device_dir.name,
        pci_address=None if function is None else function.name,
        vendor=vendor,
        ports=tuple(_port_layout(ports_dir / str(n), port=n) for n in numbers),
    )


def device_reading(device: IbDevice) -> DeviceReading:
    """The device's reading under ``RDMA <name>`` and, where it has one, ``PCI <address>``."""
    keys = [HardwareKey(KeyKind.RDMA, device.name)]
    if device.pci_address is not None:
        keys.append(HardwareKey(KeyKind.PCI, device.pci_address))
    return DeviceReading(
        name=device.name,
        keys=tuple(keys),
        identity=DeviceIdentity(pci_address=device.pci_address, vendor=device.vendor),
        samples=ib_samples(device),
    )


class InfinibandCollector(Collector):
    """Port traffic, state and errors of every RDMA device of the node."""

    name = "infiniband"
    # HCA resources have no fixed name prefix (nvidia.com/hca, rdma/..., SR-IOV pools):
    # an absent class/infiniband is never judged a failure by the kubelet's resources.
    known_errors = (UNREADABLE, GARBAGE)

    def __init__(self, context: CollectorContext) -> None:
        super().__init__(context)
        self._layouts: dict[str, _KeptLayout] = {}  # by class/infiniband entry name
        self._files = KeptFiles.under(context.sysfs)

    def collect(self) -> Readings:
        class_dir = self.context.sysfs / "class" / "infiniband"
        try:
            listed = list_source_inodes(
                str(class_dir), absent=f"no RDMA devices: {class_dir} does not exist"
            )
        except CollectorError:
            # No device is read this poll (ib_core unloaded, say): none is kept open.
            self._layouts = {}
            self._files.close()
            raise
        issues: list[CollectorIssue] = []
        kept: dict[str, _KeptLayout] = {}
        devices: list[IbDevice] = []
        for name, inode in listed:
            cached = self._layouts.get(name)
            same = cached if cached is not None and cached.inode == inode else None
            if same is not None and same.confirmed:
                layout: _DeviceLayout | None = same.layout
                kept[name] = same
            else:
                if cached is not None and same is None:
                    # Another device has this name now (renamed, or re-created): the kept
                    # files still read the one that had it.
                    self._files.forget(p for port in cached.layout.ports for p in port.files)
                before = len(issues)
                layout = _device_layout(class_dir / name, issues=issues)
                if layout is not None and len(issues) == before:
                    # a failed read is walked again next poll, unkept
                    confirmed = same is not None and same.layout == layout
                    kept[name] = _KeptLayout(inode, layout, confirmed)
            if layout is not None:
                devices.append(_read_device(layout, issues=issues, read=self._files.read_text))
        self._layouts = kept  # entries no longer listed are dropped here
        self._files.sweep()
        return Readings(devices=tuple(device_reading(d) for d in devices), issues=tuple(issues))

    def close(self) -> None:
        self._files.close()


REGISTRATION = Registration(
    "infiniband",
    "InfiniBand/RoCE port traffic, state and error counters of RDMA devices",
    InfinibandCollector,
)
