"""AMD (amdgpu) and Intel (i915, xe) GPUs, from ``<sysfs>/class/drm/cardN``.

What is read, and how it maps onto the vendor-neutral ``podresources_gpu_*`` families
(``card`` is ``class/drm/cardN``, ``device`` its PCI device, ``hwmon`` the first
``device/hwmon/hwmonX`` whose ``name`` is the GPU driver's):

=================  ==============================================  =====================
family             amdgpu                                          i915 / xe
=================  ==============================================  =====================
utilization        ``device/gpu_busy_percent`` (% -> ratio)         none: Intel keeps
                                                                   busyness in fdinfo
memory used        ``device/mem_info_vram_used``                    ``card/lmem_total_bytes``
                                                                   minus ``lmem_avail_bytes``
                                                                   (Intel's i915 backport)
memory total       ``device/mem_info_vram_total``                   xe: sum of
                                                                   ``device/tileN/physical_
                                                                   vram_size_bytes``; else
                                                                   ``card/lmem_total_bytes``
power              ``hwmon/power1_average``, else ``power1_input`` (microwatts)
energy             ``hwmon/energy1_input``, else ``energy2_input`` (microjoules; amdgpu has
                   none, xe puts the package counter on channel 2)
temperature        ``hwmon/temp1_input``, else ``temp2_input`` (millidegrees; amdgpu hides
                   the edge sensor on some Instinct parts, xe reports the package on 2)
clock              ``hwmon/freq1_input`` (sclk,    i915: ``card/gt_act_freq_mhz``, else
                   hertz)                          ``gt_cur_freq_mhz``; xe:
                                                   ``device/tile0/gt0/freq0/act_freq``, else
                                                   ``cur_freq`` (MHz)
=================  ==============================================  =====================

``podresources_gpu_sm_clock_hertz`` is NVIDIA's SM clock; its counterparts are AMD's
shader clock (sclk) and Intel's GT frequency, the clock of the render and compute
engines. ``gt_act_freq_mhz`` is what the hardware runs at (0 while the GT sleeps in
RC6); ``gt_cur_freq_mhz``, the requested frequency, stands in only where it is missing.

Cards are matched to kubelet device IDs by PCI address (the basename of the ``device``
link: the AMD device plugin's IDs) and by card number (Intel's ``cardN-M``, where M is
the plugin's share index, and ``cardN``); each matching ID gets its own reading, so
``card1-0`` and ``card1-1`` both carry card1's figures. A card no ID names is reported
under its PCI address. Cards of other drivers (nvidia-drm, ast) and connectors
(``card0-DP-1``) are skipped. A missing file leaves its figure absent; an unreadable or
garbage one too, and the error is logged once while it lasts.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import structlog

from exporter.collectors._sysfs import read_int, read_text
from exporter.collectors.base import (
    Collector,
    CollectorContext,
    CollectorError,
    CollectorUnavailable,
)
from exporter.collectors.gpu_metrics import (
    GPU_ENERGY,
    GPU_MEMORY_TOTAL,
    GPU_MEMORY_USED,
    GPU_POWER,
    GPU_SM_CLOCK,
    GPU_TEMPERATURE,
    GPU_UTILIZATION,
)
from exporter.deviceid import is_pci_address
from exporter.model import DeviceIdentity, DeviceReading, MetricSpec, Readings, Sample

__all__ = [
    "DrmCard",
    "DrmCollector",
    "card_readings",
    "card_samples",
    "parse_card_name",
    "parse_intel_card_id",
    "read_drm_card",
    "read_drm_cards",
]

log = structlog.get_logger(__name__)

AMD = "amd"
INTEL = "intel"
_VENDOR_BY_PCI_ID = {"0x1002": AMD, "0x8086": INTEL}
_VENDOR_BY_DRIVER = {"amdgpu": AMD, "i915": INTEL, "xe": INTEL}
_HWMON_NAMES = frozenset(_VENDOR_BY_DRIVER)

# Data-centre parts by (PCI vendor, PCI device), named as pci.ids and the vendors do.
_MODELS = {
    ("0x1002", "0x738c"): "AMD Instinct MI100",
    ("0x1002", "0x740c"): "AMD Instinct MI250X/MI250",
    ("0x1002", "0x740f"): "AMD Instinct MI210",
    ("0x1002", "0x74a0"): "AMD Instinct MI300A",
    ("0x1002", "0x74a1"): "AMD Instinct MI300X",
    ("0x1002", "0x74a5"): "AMD Instinct MI325X",
    ("0x1002", "0x75a0"): "AMD Instinct MI350X",
    ("0x1002", "0x75a3"): "AMD Instinct MI355X",
    ("0x8086", "0x0b69"): "Intel Data Center GPU Max 1450",
    ("0x8086", "0x0bd5"): "Intel Data Center GPU Max 1550",
    ("0x8086", "0x0bd6"): "Intel Data Center GPU Max 1550",
    ("0x8086", "0x0bd7"): "Intel Data Center GPU Max 1350",
    ("0x8086", "0x0bd8"): "Intel Data Center GPU Max 1350",
    ("0x8086", "0x0bd9"): "Intel Data Center GPU Max 1100",
    ("0x8086", "0x0bda"): "Intel Data Center GPU Max 1100",
    ("0x8086", "0x0bdb"): "Intel Data Center GPU Max 1100",
    ("0x8086", "0x56c0"): "Intel Data Center GPU Flex 170",
    ("0x8086", "0x56c1"): "Intel Data Center GPU Flex 140",
}

_CARD_NAME = re.compile(r"^card(\d+)$")
_INTEL_CARD_ID = re.compile(r"^card(\d+)(?:-\d+)?$")
_HWMON_DIR = re.compile(r"^hwmon(\d+)$")
_TILE_DIR = re.compile(r"^tile(\d+)$")

# Unit conversions as (multiplier, divisor): one exact division, so 55 % is 0.55.
_MICRO = (1, 1_000_000)
_MILLI = (1, 1000)
_MEGA = (1_000_000, 1)
_PERCENT = (1, 100)
_UNIT = (1, 1)


@dataclass(frozen=True, slots=True)
class DrmCard:
    """One AMD or Intel GPU as sysfs shows it; each figure None where not exposed."""

    card: int  # N of class/drm/cardN
    pci_address: str  # basename of cardN/device
    vendor: str  # "amd" or "intel"
    model: str | None = None  # from device/vendor and device/device
    utilization_ratio: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    power_watts: float | None = None
    energy_joules: float | None = None
    temperature_celsius: float | None = None
    clock_hertz: float | None = None


def parse_card_name(name: str) -> int | None:
    """N for a ``class/drm`` entry ``cardN``; None for connectors, render nodes, files."""
    match = _CARD_NAME.match(name)
    return int(match.group(1)) if match else None


def parse_intel_card_id(device_id: str) -> int | None:
    """N for an Intel device plugin ID ``cardN-M`` (M is the share index) or ``cardN``."""
    match = _INTEL_CARD_ID.match(device_id)
    return int(match.group(1)) if match else None


def card_samples(card: DrmCard) -> tuple[Sample, ...]:
    """The ``podresources_gpu_*`` samples of one card, figures it lacks left out."""
    figures: tuple[tuple[MetricSpec, float | None], ...] = (
        (GPU_UTILIZATION, card.utilization_ratio),
        (GPU_MEMORY_USED, card.memory_used_bytes),
        (GPU_MEMORY_TOTAL, card.memory_total_bytes),
        (GPU_POWER, card.power_watts),
        (GPU_ENERGY, card.energy_joules),
        (GPU_TEMPERATURE, card.temperature_celsius),
        (GPU_SM_CLOCK, card.clock_hertz),
    )
    return tuple(Sample(spec, value) for spec, value in figures if value is not None)


def card_readings(
    cards: Iterable[DrmCard], device_ids: frozenset[str]
) -> tuple[DeviceReading, ...]:
    """One reading per kubelet ID naming a card, or per card under its PCI address."""
    by_address: dict[str, list[str]] = defaultdict(list)
    by_number: dict[int, list[str]] = defaultdict(list)
    for device_id in device_ids:
        if is_pci_address(device_id.lower()):
            by_address[device_id.lower()].append(device_id)
        elif (number := parse_intel_card_id(device_id)) is not None:
            by_number[number].append(device_id)
    readings = []
    for card in sorted(cards, key=lambda c: c.card):
        identity = DeviceIdentity(
            pci_address=card.pci_address, model=card.model, vendor=card.vendor
        )
        samples = card_samples(card)
        matched = sorted({*by_address.get(card.pci_address, ()), *by_number.get(card.card, ())})
        for device_id in matched or [card.pci_address]:
            readings.append(DeviceReading(device_id, identity, samples))
    return tuple(readings)


def read_drm_cards(drm: Path, *, errors: list[str]) -> tuple[DrmCard, ...]:
    """Every AMD and Intel card under ``drm`` (``<sysfs>/class/drm``), by card number.

    Raises CollectorUnavailable when ``drm`` does not exist and CollectorError when it
    cannot be listed; per-file problems are appended to ``errors``.
    """
    try:
        names = [entry.name for entry in drm.iterdir()]
    except (FileNotFoundError, NotADirectoryError) as error:
        raise CollectorUnavailable(f"no {drm}: no DRM driver loaded") from error
    except OSError as error:
        raise CollectorError(f"cannot list {drm}: {error.strerror or error}") from error
    numbered = sorted((n, name) for name in names if (n := parse_card_name(name)) is not None)
    cards = []
    for number, name in numbered:
        card = read_drm_card(drm / name, number, errors=errors)
        if card is not None:
            cards.append(card)
    return tuple(cards)


def read_drm_card(card_dir: Path, number: int, *, errors: list[str]) -> DrmCard | None:
    """One card's figures; None when it is gone or is not an AMD or Intel PCI GPU."""
    address = _link_basename(card_dir / "device")
    if address is None or not is_pci_address(address.lower()):
        return None  # vanished, or a virtual/platform device (vkms, simpledrm)
    address = address.lower()
    device = card_dir / "device"
    vendor_id = _attribute(device / "vendor", errors)
    vendor = _VENDOR_BY_PCI_ID.get(vendor_id or "")
    if vendor is None and vendor_id is None:
        vendor = _VENDOR_BY_DRIVER.get(_link_basename(device / "driver") or "")
    if vendor is None:
        return None  # another vendor's card: NVIDIA has its own collector
    device_id = _attribute(device / "device", errors)
    hwmon = _hwmon_dir(device, errors)
    if vendor == AMD:
        own = _amd_figures(device, hwmon, errors)
    else:
        own = _intel_figures(card_dir, device, errors)
    return DrmCard(
        card=number,
        pci_address=address,
        vendor=vendor,
        model=_MODELS.get((vendor_id or "", device_id or "")),
        utilization_ratio=own.utilization_ratio,
        memory_used_bytes=own.memory_used_bytes,
        memory_total_bytes=own.memory_total_bytes,
        power_watts=_first(_under(hwmon, "power1_average", "power1_input"), errors, _MICRO),
        energy_joules=_first(_under(hwmon, "energy1_input", "energy2_input"), errors, _MICRO),
        temperature_celsius=_first(
            _under(hwmon, "temp1_input", "temp2_input"), errors, _MILLI, signed=True
        ),
        clock_hertz=own.clock_hertz,
    )


@dataclass(frozen=True, slots=True)
class _VendorFigures:
    """The figures whose files differ between amdgpu and i915/xe."""

    utilization_ratio: float | None
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    clock_hertz: float | None


def _amd_figures(device: Path, hwmon: Path | None, errors: list[str]) -> _VendorFigures:
    busy = _figure(device / "gpu_busy_percent", errors, _PERCENT)
    if busy is not None and busy > 1:
        errors.append(f"{device / 'gpu_busy_percent'}: above 100 percent")
        busy = None
    return _VendorFigures(
        utilization_ratio=busy,
        memory_used_bytes=_figure(device / "mem_info_vram_used", errors),
        memory_total_bytes=_figure(device / "mem_info_vram_total", errors),
        clock_hertz=_first(_under(hwmon, "freq1_input"), errors),
    )


def _intel_figures(card_dir: Path, device: Path, errors: list[str]) -> _VendorFigures:
    # Intel's i915 backport (the driver Data Center GPU Max ships with) puts local
    # memory on the DRM minor; mainline i915 exposes none; xe has a total per tile.
    lmem_total = _figure(card_dir / "lmem_total_bytes", errors)
    lmem_avail = _figure(card_dir / "lmem_avail_bytes", errors)
    used = None
    if lmem_total is not None and lmem_avail is not None and lmem_avail <= lmem_total:
        used = lmem_total - lmem_avail
    tiles = [_figure(tile / "physical_vram_size_bytes", errors) for tile in _tiles(device)]
    present = [size for size in tiles if size is not None]
    gt0 = device / "tile0" / "gt0" / "freq0"
    clock_files = (
        card_dir / "gt_act_freq_mhz",  # i915
        card_dir / "gt_cur_freq_mhz",
        gt0 / "act_freq",  # xe
        gt0 / "cur_freq",
    )
    return _VendorFigures(
        utilization_ratio=None,
        memory_used_bytes=used,
        memory_total_bytes=sum(present) if present else lmem_total,
        clock_hertz=_first(clock_files, errors, _MEGA),
    )


def _link_basename(path: Path) -> str | None:
    # Resolved rather than read: the kernel writes ``../../../<address>``, but a link
    # written as ``../..`` names the same directory.
    try:
        return os.path.basename(os.path.realpath(path, strict=True))
    except OSError:
        return None  # vanished, or a dangling or looping link


def _attribute(path: Path, errors: list[str]) -> str | None:
    try:
        text = read_text(path)
    except CollectorError as error:
        errors.append(str(error))
        return None
    return text.lower() if text else None


def _figure(
    path: Path, errors: list[str], unit: tuple[int, int] = _UNIT, *, signed: bool = False
) -> float | None:
    try:
        value = read_int(path)
    except CollectorError as error:
        errors.append(str(error))
        return None
    if value is None:
        return None
    if value < 0 and not signed:
        errors.append(f"{path}: negative: {value}")
        return None
    multiplier, divisor = unit
    return value * multiplier / divisor


def _first(
    paths: Iterable[Path], errors: list[str], unit: tuple[int, int] = _UNIT, *, signed: bool = False
) -> float | None:
    """The first of ``paths`` that gives a figure."""
    for path in paths:
        value = _figure(path, errors, unit, signed=signed)
        if value is not None:
            return value
    return None


def _under(directory: Path | None, *names: str) -> tuple[Path, ...]:
    return () if directory is None else tuple(directory / name for name in names)


def _numbered_dirs(directory: Path, pattern: re.Pattern[str]) -> list[Path]:
    try:
        names = [entry.name for entry in directory.iterdir()]
    except OSError:
        return []  # absent (the common case) or vanished with its card
    found = sorted((int(m.group(1)), name) for name in names if (m := pattern.match(name)))
    return [directory / name for _, name in found]


def _hwmon_dir(device: Path, errors: list[str]) -> Path | None:
    candidates = _numbered_dirs(device / "hwmon", _HWMON_DIR)
    for candidate in candidates:
        if _attribute(candidate / "name", errors) in _HWMON_NAMES:
            return candidate
    return candidates[0] if candidates else None


def _tiles(device: Path) -> list[Path]:
    return _numbered_dirs(device, _TILE_DIR)


class DrmCollector(Collector):
    """AMD and Intel GPUs through the kernel's DRM sysfs."""

    name = "drm"
    description = "AMD (amdgpu) and Intel (i915, xe) GPUs, from /sys/class/drm."

    def __init__(self, context: CollectorContext) -> None:
        super().__init__(context)
        self._noted_errors: frozenset[str] = frozenset()

    def collect(self, *, device_ids: frozenset[str]) -> Readings:
        """Read every AMD and Intel card once and match it to the kubelet's IDs."""
        errors: list[str] = []
        cards = read_drm_cards(self.context.sysfs / "class" / "drm", errors=errors)
        self._note_errors(errors)
        return Readings(devices=card_readings(cards, device_ids))

    def _note_errors(self, errors: Iterable[str]) -> None:
        # Log each error once while it lasts, not on every poll.
        current = frozenset(errors)
        for error in sorted(current - self._noted_errors):
            log.warning("drm_read_error", collector=self.name, error=error)
        self._noted_errors = current
