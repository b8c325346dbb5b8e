"""Port traffic counters of RDMA devices (``<sysfs>/class/infiniband/<dev>/ports/<p>/``).

Each device is matched to kubelet device IDs by the PCI address its ``device`` link
points at (the HCA, or a VF's own RDMA device) or by a device ID equal to its name
(``mlx5_0``); a device no ID names is reported under its name, so the node's fabric
traffic is visible before anything is allocated.

Counters follow node_exporter/procfs: ``counters_ext/*_64`` (kernels before 4.5, whose
``counters/`` were 32 bits and saturate) is preferred where present, else ``counters/``
(64 bits since 4.5). ``port_rcv_data``/``port_xmit_data`` count 4-octet words and are
multiplied by 4 here. ``hw_counters`` holds no data or packet counts (only RoCE
events and errors), so it is not read. ``N/A (no PMA)`` means absent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
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
from exporter.model import DeviceIdentity, DeviceReading, MetricKind, MetricSpec, Readings, Sample

__all__ = [
    "IB_RECEIVE_BYTES",
    "IB_RECEIVE_PACKETS",
    "IB_TRANSMIT_BYTES",
    "IB_TRANSMIT_PACKETS",
    "IbDevice",
    "IbPortCounters",
    "InfinibandCollector",
    "ib_samples",
    "parse_counter",
    "read_ib_device",
    "read_port_counters",
]

log = structlog.get_logger(__name__)

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

_OCTETS_PER_DATA_UNIT = 4  # PortRcvData/PortXmitData count 32-bit words
_NOT_AVAILABLE = "N/A"  # "N/A (no PMA)" from ports without a performance-management agent


@dataclass(frozen=True, slots=True)
class IbPortCounters:
    """Traffic of one port; None where the driver does not count it."""

    port: int
    receive_bytes: int | None  # counters{,_ext}/port_rcv_data{,_64} x 4
    transmit_bytes: int | None  # counters{,_ext}/port_xmit_data{,_64} x 4
    receive_packets: int | None  # counters{,_ext}/port_rcv_packets{,_64}
    transmit_packets: int | None  # counters{,_ext}/port_xmit_packets{,_64}


@dataclass(frozen=True, slots=True)
class IbDevice:
    """One RDMA device: its name, the PCI function behind it and its ports."""

    name: str
    pci_address: str | None  # None for software devices (rxe, siw) without a PCI parent
    vendor: str | None  # the PCI vendor ID, "0x15b3"
    ports: tuple[IbPortCounters, ...]


def parse_counter(text: str) -> int | None:
    """One counter file: its value, or None for ``N/A (no PMA)``."""
    stripped = text.strip()
    if stripped.startswith(_NOT_AVAILABLE):
        return None
    return int(stripped)


def ib_samples(device: IbDevice) -> tuple[Sample, ...]:
    """The device's samples, port by port, for the counters it has."""
    samples: list[Sample] = []
    for port in device.ports:
        labels = (device.name, str(port.port))
        for spec, value in (
            (IB_RECEIVE_BYTES, port.receive_bytes),
            (IB_TRANSMIT_BYTES, port.transmit_bytes),
            (IB_RECEIVE_PACKETS, port.receive_packets),
            (IB_TRANSMIT_PACKETS, port.transmit_packets),
        ):
            if value is not None:
                samples.append(Sample(spec, float(value), labels))
    return tuple(samples)


def _read_counter(port_dir: Path, name: str) -> int | None:
    for path in (port_dir / "counters_ext" / f"{name}_64", port_dir / "counters" / name):
        text = read_text(path)
        if text is None:
            continue
        try:
            value = parse_counter(text)
        except ValueError as error:
            raise CollectorError(f"{path}: not a counter: {text[:40]!r}") from error
        if value is not None:
            return value
    return None


def _times(value: int | None, factor: int) -> int | None:
    return None if value is None else value * factor


def read_port_counters(port_dir: Path, *, port: int) -> IbPortCounters:
    """The traffic counters of one port directory (``ports/<port>``)."""
    return IbPortCounters(
        port=port,
        receive_bytes=_times(_read_counter(port_dir, "port_rcv_data"), _OCTETS_PER_DATA_UNIT),
        transmit_bytes=_times(_read_counter(port_dir, "port_xmit_data"), _OCTETS_PER_DATA_UNIT),
        receive_packets=_read_counter(port_dir, "port_rcv_packets"),
        transmit_packets=_read_counter(port_dir, "port_xmit_packets"),
    )


def read_ib_device(device_dir: Path) -> IbDevice | None:
    """One RDMA device (``class/infiniband/<name>``), or None when it vanished."""
    try:
        port_names = os.listdir(device_dir / "ports")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise CollectorError(f"cannot list {device_dir / 'ports'}: {error.strerror}") from error
    ports = tuple(
        read_port_counters(device_dir / "ports" / name, port=int(name))
        for name in sorted(port_names, key=lambda n: (len(n), n))
        if name.isdigit()
    )
    parent = device_dir / "device"
    function = Path(os.path.realpath(parent)).name
    pci_address = function if parent.exists() and is_pci_address(function) else None
    vendor = read_text(parent / "vendor") if pci_address is not None else None
    return IbDevice(name=device_dir.name, pci_address=pci_address, vendor=vendor, ports=ports)


class InfinibandCollector(Collector):
    """Port traffic of RDMA devices, matched to device IDs by PCI address or device name."""

    name = "infiniband"
    description = "InfiniBand/RoCE port traffic counters of RDMA devices."

    def __init__(self, context: CollectorContext) -> None:
        super().__init__(context)
        self._skipped: frozenset[str] = frozenset()

    def collect(self, *, device_ids: frozenset[str]) -> Readings:
        """Read every RDMA device; one reading per matching device ID, else one under its name."""
        class_dir = self.context.sysfs / "class" / "infiniband"
        try:
            names = sorted(os.listdir(class_dir))
        except FileNotFoundError as error:
            raise CollectorUnavailable(f"no RDMA devices: {class_dir} does not exist") from error
        except OSError as error:
            raise CollectorError(f"cannot list {class_dir}: {error.strerror}") from error
        readings: list[DeviceReading] = []
        errors: list[str] = []
        for name in names:
            try:
                device = read_ib_device(class_dir / name)
            except CollectorError as error:
                errors.append(str(error))
                continue
            if device is not None:
                readings.extend(_readings(device, device_ids))
        self._note_skipped(errors)
        return Readings(devices=tuple(readings))

    def _note_skipped(self, errors: list[str]) -> None:
        # Log each broken file once, not on every poll.
        current = frozenset(errors)
        for message in sorted(current - self._skipped):
            log.warning("device_skipped", collector=self.name, error=message)
        self._skipped = current


def _readings(device: IbDevice, device_ids: frozenset[str]) -> list[DeviceReading]:
    matched = sorted(
        d
        for d in device_ids
        if d == device.name or (device.pci_address is not None and d.lower() == device.pci_address)
    )
    identity = DeviceIdentity(pci_address=device.pci_address, vendor=device.vendor)
    samples = ib_samples(device)
    return [
        DeviceReading(device_id=device_id, identity=identity, samples=samples)
        for device_id in matched or [device.name]
    ]
