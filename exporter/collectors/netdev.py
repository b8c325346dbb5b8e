"""Traffic counters of the network devices the kubelet hands out.

A device ID is matched when it is a PCI address (``0000:af:00.1``) of a network
function, or the name of a netdev under ``<sysfs>/class/net``. A function's netdevs are
read from ``<function>/net/<ifname>/statistics/``, labelled ``interface=<ifname>``.

An SR-IOV VF moved into a pod's network namespace (or bound to vfio-pci) shows the host
an empty or no ``net/`` folder. Its traffic is then read from the counters the PF keeps
per VF, ``<pf>/sriov/<n>/stats`` (mlx5: reached as ``/sys/class/net/<pf>/device/sriov``),
where ``n`` is the ``virtfnN`` link of the PF that points at the VF. Those samples are
labelled ``interface=<pf ifname>/vf<n>`` (``vf<n>`` when the PF has no netdev): a name no
real interface can have, since netdev names cannot contain ``/``, which says where the
figure came from. mlx5 writes ``stats`` as one file of ``name : value`` lines; a folder
of one file per counter is read too. The per-VF counters have no error counts.

Missing counters give no samples, not an error; garbage leaves that device out and is
logged once, with the path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import structlog

from exporter.collectors._sysfs import read_int, read_text
from exporter.collectors.base import Collector, CollectorContext, CollectorError
from exporter.deviceid import is_pci_address
from exporter.model import DeviceIdentity, DeviceReading, MetricKind, MetricSpec, Readings, Sample

__all__ = [
    "NET_RECEIVE_BYTES",
    "NET_RECEIVE_DROPS",
    "NET_RECEIVE_ERRORS",
    "NET_RECEIVE_PACKETS",
    "NET_TRANSMIT_BYTES",
    "NET_TRANSMIT_DROPS",
    "NET_TRANSMIT_ERRORS",
    "NET_TRANSMIT_PACKETS",
    "NetdevCollector",
    "find_vf_index",
    "net_samples",
    "parse_vf_stats",
    "read_interface_statistics",
    "read_vf_statistics",
]

log = structlog.get_logger(__name__)

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
_VIRTFN = re.compile(r"^virtfn(\d+)$")
_MAX_IFNAME = 15  # IFNAMSIZ less the terminating NUL


def parse_vf_stats(text: str) -> dict[str, int]:
    """mlx5's per-VF ``stats`` file: one ``name : value`` line per counter."""
    counters: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, separator, value = line.partition(":")
        if not separator or not value.strip().isdigit():
            raise ValueError(f"not a 'name : value' line: {line[:40]!r}")
        counters[name.strip()] = int(value)
    return counters


def net_samples(counters: Mapping[str, int], *, interface: str) -> tuple[Sample, ...]:
    """Samples of the counters present in ``counters`` (kernel names), for one interface."""
    return tuple(
        Sample(spec, float(counters[name]), (interface,))
        for name, spec in _COUNTERS
        if name in counters
    )


def read_interface_statistics(interface_dir: Path) -> dict[str, int]:
    """The ``statistics/`` counters of one netdev that exist, by kernel name."""
    counters: dict[str, int] = {}
    for name, _ in _COUNTERS:
        value = read_int(interface_dir / "statistics" / name)
        if value is not None:
            counters[name] = value
    return counters


def read_vf_statistics(stats_path: Path) -> dict[str, int]:
    """A PF's counters of one VF: a ``name : value`` file or a folder of files; {} if absent."""
    if stats_path.is_dir():
        counters: dict[str, int] = {}
        for name, _ in _COUNTERS:
            value = read_int(stats_path / name)
            if value is not None:
                counters[name] = value
        return counters
    text = read_text(stats_path)
    if text is None:
        return {}
    try:
        return parse_vf_stats(text)
    except ValueError as error:
        raise CollectorError(f"{stats_path}: {error}") from error


def find_vf_index(pf_dir: Path, vf_address: str) -> int | None:
    """The ``n`` of the PF's ``virtfn<n>`` link that points at ``vf_address``."""
    try:
        entries = os.listdir(pf_dir)
    except FileNotFoundError:
        return None
    for entry in entries:
        match = _VIRTFN.match(entry)
        if match is None:
            continue
        try:
            target = os.readlink(pf_dir / entry)
        except OSError:  # gone since the listing (VFs being destroyed)
            continue
        if Path(target).name == vf_address:
            return int(match.group(1))
    return None


def _list_dir(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _is_netdev_name(text: str) -> bool:
    # Keeps arbitrary device IDs from walking out of /sys/class/net.
    return 0 < len(text) <= _MAX_IFNAME and "/" not in text and text not in (".", "..")


class NetdevCollector(Collector):
    """Traffic counters of NICs and SR-IOV VFs named by kubelet device IDs."""

    name = "netdev"
    description = "Traffic counters of network devices (NICs, SR-IOV VFs) the kubelet allocates."

    def __init__(self, context: CollectorContext) -> None:
        super().__init__(context)
        self._skipped: frozenset[str] = frozenset()

    def collect(self, *, device_ids: frozenset[str]) -> Readings:
        """Read the counters of every device ID that names a network device."""
        readings: list[DeviceReading] = []
        errors: list[str] = []
        for device_id in sorted(device_ids):
            try:
                reading = self._read_device(device_id)
            except CollectorError as error:
                errors.append(str(error))
                continue
            if reading is not None:
                readings.append(reading)
        self._note_skipped(errors)
        return Readings(devices=tuple(readings))

    def _read_device(self, device_id: str) -> DeviceReading | None:
        address = device_id.lower()
        if is_pci_address(address):
            return self._read_function(device_id, address)
        if _is_netdev_name(device_id):
            return self._read_netdev(device_id)
        return None

    def _read_function(self, device_id: str, address: str) -> DeviceReading | None:
        function_dir = self.context.sysfs / "bus" / "pci" / "devices" / address
        if not function_dir.is_dir():
            return None
        net_dir = function_dir / "net"
        samples: list[Sample] = []
        interfaces = _list_dir(net_dir)
        for interface in interfaces:
            counters = read_interface_statistics(net_dir / interface)
            samples.extend(net_samples(counters, interface=interface))
        is_vf = (function_dir / "physfn").exists()
        if not interfaces and is_vf:
            samples.extend(self._read_vf_via_pf(function_dir, address))
        if not (interfaces or samples or net_dir.is_dir()):
            return None  # not a network function, or one bound to vfio with nothing to say
        identity = DeviceIdentity(pci_address=address, vendor=read_text(function_dir / "vendor"))
        return DeviceReading(device_id=device_id, identity=identity, samples=tuple(samples))

    def _read_vf_via_pf(self, vf_dir: Path, address: str) -> tuple[Sample, ...]:
        try:
            pf_address = Path(os.readlink(vf_dir / "physfn")).name
        except OSError:  # gone since the check (VFs being destroyed)
            return ()
        # Through the bus again, so errors name the PF as on-call engineers know it.
        pf_dir = vf_dir.parent / pf_address
        index = find_vf_index(pf_dir, address)
        if index is None:
            return ()
        counters = read_vf_statistics(pf_dir / "sriov" / str(index) / "stats")
        pf_interfaces = _list_dir(pf_dir / "net")
        interface = f"{pf_interfaces[0]}/vf{index}" if pf_interfaces else f"vf{index}"
        return net_samples(counters, interface=interface)

    def _read_netdev(self, name: str) -> DeviceReading | None:
        interface_dir = self.context.sysfs / "class" / "net" / name
        if not interface_dir.is_dir():
            return None
        samples = net_samples(read_interface_statistics(interface_dir), interface=name)
        # Virtual netdevs (veth, macvlan) have no device link and so no PCI identity.
        function = Path(os.path.realpath(interface_dir / "device")).name
        identity = DeviceIdentity()
        if (interface_dir / "device").exists() and is_pci_address(function):
            identity = DeviceIdentity(
                pci_address=function, vendor=read_text(interface_dir / "device" / "vendor")
            )
        return DeviceReading(device_id=name, identity=identity, samples=samples)

    def _note_skipped(self, errors: list[str]) -> None:
        # Log each broken file once, not on every poll.
        current = frozenset(errors)
        for message in sorted(current - self._skipped):
            log.warning("device_skipped", collector=self.name, error=message)
        self._skipped = current
