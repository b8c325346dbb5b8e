"""AMD (amdgpu) and Intel (i915, xe) GPUs, from ``<sysfs>/class/drm/cardN``.

What is read, and how it maps onto the vendor-neutral ``podresources_gpu_*`` families
(``card`` is ``class/drm/cardN``, ``device`` its PCI device, ``hwmon`` the first
``device/hwmon/hwmonX`` whose ``name`` is the GPU driver's, else the first of any name:
a hwmon whose parent is the GPU's own PCI function is registered by the driver bound to
it, whatever name a driver version gives it):

=================  ==============================================  =====================
family             amdgpu                                          i915 / xe
=================  ==============================================  =====================
utilization        ``device/gpu_busy_percent`` (% -> ratio)         none: Intel keeps
                                                                   busyness in fdinfo
memory bandwidth   ``device/mem_busy_percent`` (% -> ratio; not     none
utilization        on APUs but the MI300A, nor on Vega 10)
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
memory             ``hwmon/temp3_input``, the ``mem``               none
temperature        sensor (millidegrees; Vega and later
                   dGPUs and the MI300A, not other APUs)
clock              ``hwmon/freq1_input`` (sclk,    i915: ``card/gt_act_freq_mhz``, else
                   hertz)                          ``gt_cur_freq_mhz``; xe:
                                                   ``device/tile0/gt0/freq0/act_freq``, else
                                                   ``cur_freq`` (MHz)
=================  ==============================================  =====================

``podresources_gpu_sm_clock_hertz`` is NVIDIA's SM clock; its counterparts are AMD's
shader clock (sclk) and Intel's GT frequency, the clock of the render and compute
engines. ``gt_act_freq_mhz`` is what the hardware runs at (0 while the GT sleeps in
RC6); ``gt_cur_freq_mhz``, the requested frequency, stands in only where it is missing.

Each AMD or Intel card is reported under its PCI address, with the hardware keys the
resolver maps kubelet IDs to: its DRM card index (``cardN``), its render node's minor
(``renderD<minor>``, what the AMD DRA driver's ``gpu-<card>-<render>`` names) and its
PCI address. The render node is found as the kernel lays it out: ``class/drm/cardN``
links to ``<pci device>/drm/cardN``, whose ``device`` link leads back to the PCI
function; the function's ``drm/`` directory holds every minor of that DRM device,
``cardN`` and ``renderD<minor>`` (``drm_sysfs_minor_alloc`` in the kernel's
``drivers/gpu/drm/drm_sysfs.c`` names them ``card%d``/``renderD%d`` and parents them
on the device; libdrm's ``drmGetMinorNameForFD`` finds a render node the same way,
listing ``/sys/dev/char/<major>:<minor>/device/drm``).

An AMD Instinct GPU split into compute partitions (``device/current_compute_partition``
other than ``SPX``: MI300X in DPX, QPX or CPX mode) keeps its PCI function's ``cardN``
and ``renderD<minor>`` for partition 0 only; partitions 1 and up are DRM devices of
platform devices (``amdgpu_xcp``, ``amdgpu_xcp_drv.c``), and the AMD DRA driver names
each partition ``gpu-<card>-<render>``. The PCI function's figures (busy percent, VRAM
used, power, temperature) stay the whole board's, so they are reported under its PCI key
alone: under partition 0's card and render node they would be shown as its holder's,
and no partition has figures of its own in sysfs.

Cards of other drivers (nvidia-drm, ast), cards of no PCI device (simpledrm, vkms, the
partitions' platform devices) and connectors (``card0-DP-1``) are skipped. A missing
optional file leaves its figure absent, silently, and so does a read amdgpu answers
EPERM (the GPU runtime-suspended or in reset) or EOPNOTSUPP (a sensor its firmware does
not read; EINVAL on kernels before 2021, and still where the power code has no sensor
reader), the next file of a figure read instead; an unreadable or garbage one loses
that figure with an issue (``unreadable``/``garbage``); a card whose ``device`` link
is gone by the time it is read is left out as ``vanished``.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from exporter.collectors.base import (
    Collector,
    Registration,
    issue,
)
from exporter.collectors.gpu_metrics import (
    GPU_ENERGY,
    GPU_MEMORY_BANDWIDTH_UTILIZATION,
    GPU_MEMORY_TEMPERATURE,
    GPU_MEMORY_TOTAL,
    GPU_MEMORY_USED,
    GPU_POWER,
    GPU_SM_CLOCK,
    GPU_TEMPERATURE,
    GPU_UTILIZATION,
)
from exporter.model import (
    CollectorIssue,
    DeviceIdentity,
    DeviceReading,
    HardwareKey,
    KeyKind,
    MetricSpec,
    Readings,
    Sample,
)
from exporter.pci_address import is_pci_address
from exporter.sysfs import (
    GARBAGE,
    UNREADABLE,
    VANISHED,
    FileError,
    failed_with,
    list_source,
    read_int,
    read_pci_id,
    read_text,
    vendor_name,
)

__all__ = [
    "REGISTRATION",
    "DrmCard",
    "DrmCollector",
    "card_reading",
    "card_samples",
    "parse_card_name",
    "parse_render_name",
    "read_drm_card",
    "read_drm_cards",
]

_DRM_VENDOR_IDS = frozenset({"0x1002", "0x8086"})  # AMD (ATI) and Intel GPUs
# Without a vendor file the bound driver says whose card it is.
_VENDOR_BY_DRIVER = {"amdgpu": "amd", "i915": "intel", "xe": "intel"}
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
_RENDER_NAME = re.compile(r"^renderD(\d+)$")
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
    render: int | None  # minor of device/drm/renderD<minor>; None without a render node
    pci_address: str  # basename of cardN/device
    vendor: str  # "amd" or "intel", as exporter.sysfs.vendor_name says
    model: str | None = None  # from device/vendor and device/device
    utilization_ratio: float | None = None
    memory_bandwidth_utilization_ratio: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    power_watts: float | None = None
    energy_joules: float | None = None
    temperature_celsius: float | None = None
    memory_temperature_celsius: float | None = None
    clock_hertz: float | None = None
    # amdgpu's current_compute_partition ("spx", "dpx", "qpx", "cpx"); None where absent.
    compute_partition: str | None = None

    @property
    def partitioned(self) -> bool:
        """Split into compute partitions: this card is partition 0 only, while its
        figures are the whole board's (see the module's docstring)."""
        return self.compute_partition not in (None, "spx")


def parse_card_name(name: str) -> int | None:
    """N for a ``class/drm`` entry ``cardN``; None for connectors, render nodes, files."""
    match = _CARD_NAME.match(name)
    return int(match.group(1)) if match else None


def parse_render_name(name: str) -> int | None:
    """The minor of a render node entry ``renderD128``; None for anything else."""
    match = _RENDER_NAME.match(name)
    return int(match.group(1)) if match else None


def card_samples(card: DrmCard) -> tuple[Sample, ...]:
    """The ``podresources_gpu_*`` samples of one card, figures it lacks left out."""
    figures: tuple[tuple[MetricSpec, float | None], ...] = (
        (GPU_UTILIZATION, card.utilization_ratio),
        (GPU_MEMORY_BANDWIDTH_UTILIZATION, card.memory_bandwidth_utilization_ratio),
        (GPU_MEMORY_USED, card.memory_used_bytes),
        (GPU_MEMORY_TOTAL, card.memory_total_bytes),
        (GPU_POWER, card.power_watts),
        (GPU_ENERGY, card.energy_joules),
        (GPU_TEMPERATURE, card.temperature_celsius),
        (GPU_MEMORY_TEMPERATURE, card.memory_temperature_celsius),
        (GPU_SM_CLOCK, card.clock_hertz),
    )
    return tuple(Sample(spec, value) for spec, value in figures if value is not None)


def card_reading(card: DrmCard) -> DeviceReading:
    """One card's reading under its card, render node and PCI keys; shown even unallocated.
    A partitioned card's board-wide figures are under its PCI key only: its card and
    render node name partition 0, whose holder is not the whole board's."""
    keys = []
    if not card.partitioned:
        keys.append(HardwareKey(KeyKind.DRM_CARD, str(card.card)))
        if card.render is not None:
            keys.append(HardwareKey(KeyKind.DRM_RENDER, str(card.render)))
    keys.append(HardwareKey(KeyKind.PCI, card.pci_address))
    identity = DeviceIdentity(pci_address=card.pci_address, model=card.model, vendor=card.vendor)
    return DeviceReading(
        name=card.pci_address,
        keys=tuple(keys),
        identity=identity,
        samples=card_samples(card),
        standalone=True,
    )


def read_drm_cards(drm: Path, *, issues: list[CollectorIssue]) -> tuple[DrmCard, ...]:
    """Every AMD and Intel card under ``drm`` (``<sysfs>/class/drm``), by card number.

    Raises CollectorUnavailable when ``drm`` does not exist and CollectorError when it
    cannot be listed; per-file problems are appended to ``issues``.
    """
    names = list_source(drm, absent=f"no {drm}: no DRM driver loaded")
    numbered = sorted((n, name) for name in names if (n := parse_card_name(name)) is not None)
    cards = []
    for number, name in numbered:
        card = read_drm_card(drm / name, number, issues=issues)
        if card is not None:
            cards.append(card)
    return tuple(cards)


def read_drm_card(card_dir: Path, number: int, *, issues: list[CollectorIssue]) -> DrmCard | None:
    """One card's figures; None when it is gone or is not an AMD or Intel PCI GPU."""
    device = card_dir / "device"
    try:
        # Resolved rather than read: the kernel writes ``../../../<address>``, but a
        # link written as ``../..`` names the same directory.
        address = os.path.basename(os.path.realpath(device, strict=True)).lower()
    except (FileNotFoundError, NotADirectoryError):
        issues.append(issue(VANISHED, f"{device}: gone while its card was read"))
        return None
    except OSError as error:
        issues.append(issue(UNREADABLE, f"cannot resolve {device}: {error.strerror or error}"))
        return None
    if not is_pci_address(address):
        return None  # a virtual or platform device (vkms, simpledrm)
    vendor_id = _pci_id(device / "vendor", issues)  # garbage: the driver link decides
    vendor: str | None = None
    if vendor_id in _DRM_VENDOR_IDS:
        vendor = vendor_name(vendor_id)
    elif vendor_id is None:
        vendor = _VENDOR_BY_DRIVER.get(_link_basename(device / "driver") or "")
    if vendor is None:
        return None  # another vendor's card: NVIDIA has its own collector
    device_id = _pci_id(device / "device", issues)
    hwmon = _hwmon_dir(device, issues)
    partition = None
    if vendor == "amd":
        own = _amd_figures(device, hwmon, issues)
        partition = _attribute(device / "current_compute_partition", issues)
    else:
        own = _intel_figures(card_dir, device, issues)
    return DrmCard(
        card=number,
        render=_render_minor(device / "drm", issues),
        pci_address=address,
        vendor=vendor,
        model=_MODELS.get((vendor_id or "", device_id or "")),
        utilization_ratio=own.utilization_ratio,
        memory_used_bytes=own.memory_used_bytes,
        memory_total_bytes=own.memory_total_bytes,
        power_watts=_first(_under(hwmon, "power1_average", "power1_input"), issues, _MICRO),
        energy_joules=_first(_under(hwmon, "energy1_input", "energy2_input"), issues, _MICRO),
        temperature_celsius=_first(
            _under(hwmon, "temp1_input", "temp2_input"), issues, _MILLI, signed=True
        ),
        memory_temperature_celsius=own.memory_temperature_celsius,
        memory_bandwidth_utilization_ratio=own.memory_bandwidth_utilization_ratio,
        clock_hertz=own.clock_hertz,
        compute_partition=partition,
    )


@dataclass(frozen=True, slots=True)
class _VendorFigures:
    """The figures whose files differ between amdgpu and i915/xe."""

    utilization_ratio: float | None
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    clock_hertz: float | None
    memory_temperature_celsius: float | None = None
    memory_bandwidth_utilization_ratio: float | None = None


def _amd_figures(device: Path, hwmon: Path | None, issues: list[CollectorIssue]) -> _VendorFigures:
    return _VendorFigures(
        utilization_ratio=_busy_ratio(device / "gpu_busy_percent", issues),
        memory_bandwidth_utilization_ratio=_busy_ratio(device / "mem_busy_percent", issues),
        memory_used_bytes=_figure(device / "mem_info_vram_used", issues),
        memory_total_bytes=_figure(device / "mem_info_vram_total", issues),
        clock_hertz=_first(_under(hwmon, "freq1_input"), issues),
        # amdgpu's hwmon channels are edge, junction and mem, in that order.
        memory_temperature_celsius=_first(
            _under(hwmon, "temp3_input"), issues, _MILLI, signed=True
        ),
    )


def _busy_ratio(path: Path, issues: list[CollectorIssue]) -> float | None:
    """amdgpu's busy percent as a ratio; above 100 is garbage."""
    busy = _figure(path, issues, _PERCENT)
    if busy is not None and busy > 1:
        issues.append(issue(GARBAGE, f"{path}: above 100 percent"))
        return None
    return busy


def _intel_figures(card_dir: Path, device: Path, issues: list[CollectorIssue]) -> _VendorFigures:
    # Intel's i915 backport (the driver Data Center GPU Max ships with) puts local
    # memory on the DRM minor; mainline i915 exposes none; xe has a total per tile.
    lmem_total = _figure(card_dir / "lmem_total_bytes", issues)
    lmem_avail = _figure(card_dir / "lmem_avail_bytes", issues)
    used = None
    if lmem_total is not None and lmem_avail is not None:
        if lmem_avail <= lmem_total:
            used = lmem_total - lmem_avail
        else:
            detail = f"{card_dir / 'lmem_avail_bytes'}: more than lmem_total_bytes"
            issues.append(issue(GARBAGE, detail))
    tiles = _numbered_dirs(device, _TILE_DIR, issues)
    sizes = [_figure(tile / "physical_vram_size_bytes", issues) for tile in tiles]
    present = [size for size in sizes if size is not None]
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
        clock_hertz=_first(clock_files, issues, _MEGA),
    )


def _link_basename(path: Path) -> str | None:
    try:
        return os.path.basename(os.path.realpath(path, strict=True))
    except OSError:
        return None  # no driver bound, or a dangling or looping link: vendor unknown


def _render_minor(drm_dir: Path, issues: list[CollectorIssue]) -> int | None:
    """The render node's minor among the device's DRM minors; the lowest if several."""
    try:
        names = [entry.name for entry in drm_dir.iterdir()]
    except (FileNotFoundError, NotADirectoryError):
        return None  # gone with its card; the card's figures say so
    except OSError as error:
        issues.append(issue(UNREADABLE, f"cannot list {drm_dir}: {error.strerror or error}"))
        return None
    minors = [minor for name in names if (minor := parse_render_name(name)) is not None]
    return min(minors) if minors else None


def _attribute(path: Path, issues: list[CollectorIssue]) -> str | None:
    try:
        text = read_text(path)
    except FileError as error:
        issues.append(issue(error.label, str(error)))
        return None
    return text.lower() if text else None


def _pci_id(path: Path, issues: list[CollectorIssue]) -> str | None:
    try:
        return read_pci_id(path)
    except FileError as error:
        issues.append(issue(error.label, str(error)))
        return None


def _figure(
    path: Path,
    issues: list[CollectorIssue],
    unit: tuple[int, int] = _UNIT,
    *,
    signed: bool = False,
) -> float | None:
    try:
        value = read_int(path, unsigned=not signed)
    except FileError as error:
        # EPERM: amdgpu's answer to a sensor read while the GPU is runtime-suspended or
        # in reset (amdgpu_pm_get_access_if_active): no figure now, not a broken file.
        # EOPNOTSUPP: a sensor the part's power firmware does not read (a hwmon
        # channel shown for its family, such as the memory's): no figure, ever. The
        # powerplay parts' read_sensor (Vega10/20, Polaris) answered that EINVAL until
        # 2021's "amdgpu/pm: read_sensor() report failure apporpriately", and
        # amdgpu_dpm_read_sensor still does where the power code has no read_sensor.
        if not failed_with(error, errno.EPERM, errno.EOPNOTSUPP, errno.EINVAL):
            issues.append(issue(error.label, str(error)))
        return None
    if value is None:
        return None
    multiplier, divisor = unit
    return value * multiplier / divisor


def _first(
    paths: Iterable[Path],
    issues: list[CollectorIssue],
    unit: tuple[int, int] = _UNIT,
    *,
    signed: bool = False,
) -> float | None:
    """The first of ``paths`` that gives a figure; None once one that is there fails
    (garbage, unreadable): the next is another sensor or figure (junction for edge,
    the requested clock for the actual one), not the same one's to serve."""
    for path in paths:
        reported = len(issues)
        value = _figure(path, issues, unit, signed=signed)
        if value is not None or len(issues) > reported:
            return value
    return None


def _under(directory: Path | None, *names: str) -> tuple[Path, ...]:
    return () if directory is None else tuple(directory / name for name in names)


def _numbered_dirs(
    directory: Path, pattern: re.Pattern[str], issues: list[CollectorIssue]
) -> list[Path]:
    try:
        names = [entry.name for entry in directory.iterdir()]
    except (FileNotFoundError, NotADirectoryError):
        return []  # absent (the common case) or vanished with its card
    except OSError as error:
        issues.append(issue(UNREADABLE, f"cannot list {directory}: {error.strerror or error}"))
        return []
    found = sorted((int(m.group(1)), name) for name in names if (m := pattern.match(name)))
    return [directory / name for _, name in found]


def _hwmon_dir(device: Path, issues: list[CollectorIssue]) -> Path | None:
    candidates = _numbered_dirs(device / "hwmon", _HWMON_DIR, issues)
    for candidate in candidates:
        if _attribute(candidate / "name", issues) in _HWMON_NAMES:
            return candidate
    return candidates[0] if candidates else None


class DrmCollector(Collector):
    """AMD and Intel GPUs through the kernel's DRM sysfs."""

    name = "drm"
    # The AMD device plugin (amd.com/gpu), Intel's (gpu.intel.com/i915, /xe) and the
    # AMD and Intel DRA drivers (gpu.amd.com, gpu.intel.com).
    serves = ("amd.com/", "gpu.intel.com", "gpu.amd.com")
    known_errors = (UNREADABLE, GARBAGE, VANISHED)

    def collect(self) -> Readings:
        """Read every AMD and Intel card once."""
        issues: list[CollectorIssue] = []
        cards = read_drm_cards(self.context.sysfs / "class" / "drm", issues=issues)
        return Readings(devices=tuple(card_reading(c) for c in cards), issues=tuple(issues))


REGISTRATION = Registration(
    "drm",
    "AMD (amdgpu) and Intel (i915, xe) GPUs from /sys/class/drm: utilization, memory, "
    "power, energy, temperature, clock",
    DrmCollector,
)
