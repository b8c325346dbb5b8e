"""NVIDIA GPU and MIG telemetry through NVML, under each device's hardware keys.

``NvmlSource`` is the handful of NVML calls the collector needs, in NVML's own units;
``PynvmlSource`` makes them through pynvml (the only place that touches its untyped
API), ``exporter.sim.gpus.SimulatedNvmlSource`` answers them for the demo node. The
collector converts units once, to the names in ``exporter.collectors.gpu_metrics``.

Every GPU is reported under its UUID, minor number (``/dev/nvidiaN``) and PCI address;
every MIG device under its UUID, its parent's UUID with GPU- and compute-instance IDs,
and -- the first compute instance of each GPU instance only -- the parent's minor number
with the GPU instance, and with the GPU instance's profile ID and placement start (the
physical slot the NVIDIA DRA driver names MIG devices by). ``exporter.resolver`` maps
kubelet IDs and DRA devices onto these.

pynvml (~1 MiB of RSS) is imported by the first ``nvmlInit`` that finds
libnvidia-ml.so.1, so a node that never enables this collector, or has no NVIDIA driver,
never loads it.

Errors: no library or no driver -> ``CollectorUnavailable``; any other failed nvmlInit
or device count -> ``CollectorError``. A failed figure loses that figure only (the
NVLink figure, one link or field that fails: that link or field only), and is
reported as an issue, counted in
``podresources_collector_errors_total{collector="nvml",error=<NVML name>}``
-- except ``NOT_SUPPORTED``, which many boards answer for many figures (and MIG devices
for most) on every poll: it is the board's nature, not a fault, so it is not counted.
A SUCCESS whose value is no figure (nvml.h's NVML_VALUE_NOT_AVAILABLE: all bits of an
unsigned field set; or a NaN) fails as ``VALUE_NOT_AVAILABLE``, and text that is not
UTF-8 as ``NOT_UTF8``.
``GPU_IS_LOST`` abandons that GPU and its MIG devices for the rest of the poll (each
further call would fail too, and can be slow), so a lost GPU counts once a poll.
A GPU instance's placement is read once per MIG device (it is fixed while the instance
exists). NVML documents the call for privileged callers only, and the exporter drops
every capability: the first ``NO_PERMISSION`` is one issue, then placements are never
asked for again and MIG devices go without that key. Likewise a MIG-enabled GPU's
aggregate figures (its memory): ``NO_PERMISSION`` there is one issue per GPU, and that
figure of that GPU is not asked again until NVML is initialised afresh or the GPU's
MIG mode is turned off. A GPU whose handle NVML refuses with ``NO_PERMISSION`` (the
exporter may not open its device node) is one issue, then left out until NVML is
initialised afresh.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import Any, Literal, NewType, ParamSpec, Protocol, TypeVar

from exporter.collectors.base import (
    Collector,
    CollectorContext,
    CollectorError,
    CollectorUnavailable,
    Registration,
    issue,
)
from exporter.collectors.gpu_metrics import (
    GPU_CLOCKS_THROTTLED,
    GPU_DRAM_ACTIVE,
    GPU_DRIVER_INFO,
    GPU_ECC_ERRORS,
    GPU_ENERGY,
    GPU_FABRIC_HEALTH_ISSUE,
    GPU_FABRIC_STATE,
    GPU_FABRIC_STATUS,
    GPU_GRAPHICS_ENGINE_ACTIVE,
    GPU_MEMORY_BANDWIDTH_UTILIZATION,
    GPU_MEMORY_TEMPERATURE,
    GPU_MEMORY_TOTAL,
    GPU_MEMORY_USED,
    GPU_NVLINK_ERRORS,
    GPU_NVLINK_LINKS,
    GPU_NVLINK_RECEIVE,
    GPU_NVLINK_TRANSMIT,
    GPU_PCIE_RECEIVE,
    GPU_PCIE_REPLAYS,
    GPU_PCIE_TRANSMIT,
    GPU_PIPE_ACTIVE,
    GPU_POWER,
    GPU_RECOVERY_ACTION,
    GPU_REMAPPED_ROWS,
    GPU_RETIRED_PAGES,
    GPU_RETIRED_PAGES_PENDING,
    GPU_ROW_REMAP_FAILED,
    GPU_ROW_REMAP_PENDING,
    GPU_SM_ACTIVE,
    GPU_SM_CLOCK,
    GPU_SM_OCCUPANCY,
    GPU_TEMPERATURE,
    GPU_UTILIZATION,
    GPU_VIDEO_UTILIZATION,
    GPU_XID_ERRORS,
    GPU_XID_ERRORS_BY_CODE,
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
from exporter.pci_address import parse_pci_address

__all__ = [
    "FABRIC_STATE_COMPLETED",
    "MAX_EVENTS_PER_POLL",
    "NVLINK_ERROR_TYPES",
    "NVLINK_MAX_LINKS",
    "REGISTRATION",
    "EccErrorType",
    "NvmlCollector",
    "NvmlError",
    "NvmlEventSet",
    "NvmlFabric",
    "NvmlGpmMetrics",
    "NvmlGpmSample",
    "NvmlGpuInstancePlacement",
    "NvmlHandle",
    "NvmlMemory",
    "NvmlNvLinkFields",
    "NvmlProcess",
    "NvmlProcessSample",
    "NvmlRemappedRows",
    "NvmlRetiredPages",
    "NvmlSession",
    "NvmlSource",
    "NvmlUtilization",
    "PynvmlSource",
    "XidWatch",
]


# NVML return codes by their nvml.h name without the NVML_ERROR_ prefix.
NOT_SUPPORTED = "NOT_SUPPORTED"
NOT_FOUND = "NOT_FOUND"
INVALID_ARGUMENT = "INVALID_ARGUMENT"
GPU_IS_LOST = "GPU_IS_LOST"
UNKNOWN = "UNKNOWN"
TIMEOUT = "TIMEOUT"
NO_PERMISSION = "NO_PERMISSION"
# nvml.h's NVML_VALUE_NOT_AVAILABLE: SUCCESS with a value that is no figure (-1 in an
# unsigned field, all its bits set; a NaN or infinite double).
VALUE_NOT_AVAILABLE = "VALUE_NOT_AVAILABLE"
_UINT_NOT_AVAILABLE = 0xFFFFFFFF  # (unsigned int)NVML_VALUE_NOT_AVAILABLE
_ULL_NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF  # (unsigned long long)NVML_VALUE_NOT_AVAILABLE
# Not nvml.h's: text NVML answered (a name, a UUID) in bytes that are not UTF-8.
NOT_UTF8 = "NOT_UTF8"
FUNCTION_NOT_FOUND = "FUNCTION_NOT_FOUND"
ARGUMENT_VERSION_MISMATCH = "ARGUMENT_VERSION_MISMATCH"
_ABSENT = {
    "LIBRARY_NOT_FOUND": "libnvidia-ml.so.1 not found: no NVIDIA driver on this node",
    "DRIVER_NOT_LOADED": "the NVIDIA kernel driver is not loaded",
}

# The library pynvml loads (its _LoadNvmlLibrary, on Linux) and nvml.h's code for its
# absence, which pynvml would raise.
NVML_LIBRARY = "libnvidia-ml.so.1"
_LIBRARY_NOT_FOUND_CODE = 12
# nvmlSystemGetDriverVersion's prefix on drivers of the R535 branch.
_R535_DRIVER = "535."

NvmlHandle = NewType("NvmlHandle", object)
"""An opaque device handle; only the source that made it can use it."""

NvmlEventSet = NewType("NvmlEventSet", object)
"""An opaque NVML event set; only the source that made it can use it."""

NvmlGpmSample = NewType("NvmlGpmSample", object)
"""An nvmlGpmSample_t: a GPU's or MIG device's performance counters at one time, NVML's
memory until freed; only the source that made it can use it."""

EccErrorType = Literal["corrected", "uncorrected"]

# nvmlInit retried after failing: first after this long, doubling up to the max.
INIT_RETRY_INITIAL_S = 10.0
INIT_RETRY_MAX_S = 300.0

_P = ParamSpec("_P")
_T = TypeVar("_T")


class NvmlError(Exception):
    """An NVML call failed; ``error_name`` is nvml.h's ``NVML_ERROR_<name>`` suffix."""

    def __init__(self, error_name: str, *, code: int | None = None) -> None:
        super().__init__(f"NVML error {error_name}")
        self.error_name = error_name
        self.code = code


@dataclass(frozen=True, slots=True)
class NvmlUtilization:
    """nvmlDeviceGetUtilizationRates: percent of the last sample period (1/6 s to 1 s,
    by product) the GPU ran a kernel, and its memory was read or written."""

    gpu_percent: int
    memory_percent: int


@dataclass(frozen=True, slots=True)
class NvmlMemory:
    """Device (or MIG instance) memory; ``used`` excludes driver-reserved memory."""

    total_bytes: int
    used_bytes: int


@dataclass(frozen=True, slots=True)
class NvmlGpuInstancePlacement:
    """Where a GPU instance sits: its profile ID (19 is 1g.10gb on an H100) and first slot."""

    profile_id: int
    start: int


@dataclass(frozen=True, slots=True)
class NvmlRemappedRows:
    """nvmlDeviceGetRemappedRows: rows remapped for each kind of error, and the flags."""

    correctable: int
    uncorrectable: int
    pending: bool  # a remapping waits for a GPU reset
    failed: bool  # a remapping has ever failed


@dataclass(frozen=True, slots=True)
class NvmlRetiredPages:
    """Pages retired for each kind of ECC error, and whether some wait to be set aside."""

    multiple_single_bit_ecc: int
    double_bit_ecc: int
    pending: bool


# NVLink error counters by the type label each is served under: (type, nvml.h field ID,
# scopeId), all links together. Before Blackwell the *_ERROR_COUNT_TOTAL fields at scope
# 0, as DCGM reads them.
NVLINK_ERROR_FIELDS = (
    ("crc_flit", 38, 0),  # NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL
    ("crc_data", 45, 0),  # ..._CRC_DATA_ERROR_COUNT_TOTAL
    ("replay", 52, 0),  # ..._REPLAY_ERROR_COUNT_TOTAL
    ("recovery", 59, 0),  # ..._RECOVERY_ERROR_COUNT_TOTAL
    ("ecc_data", 160, 0),  # NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL
)
NVLINK_ERROR_TYPES = tuple(kind for kind, _, _ in NVLINK_ERROR_FIELDS)
# nvml.h's NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (the field DCGM's health watch
# reads for it), by number as nvml.h gives it.
_FIELD_RECOVERY_ACTION = 230
# nvml.h's scopeId for "all links" (it documents it for the throughput fields; DCGM asks
# NVLink 5's counters so too: "NVLink5+ requires scopeId = UINT_MAX for aggregate data").
ALL_NVLINKS = 0xFFFFFFFF
# From Blackwell (NVLink 5) the NVML_FI_DEV_NVLINK_COUNT_* counters, which NVML answers
# for NVLink 5 only; the totals above are left out there, as nvidia-smi nvlink -e and
# DCGM's CLI leave them (NVLink 5 drivers do not show them). "recovery" is the link going
# from up to recovery, the older GPUs' recovery count; NVLink 5 has no CRC or replay
# count (FEC corrects, and "symbol" and "effective" count what it did not).
NVLINK5_ERROR_FIELDS = (
    ("malformed_packet", 206, ALL_NVLINKS),  # ..._COUNT_MALFORMED_PACKET_ERRORS
    ("buffer_overrun", 207, ALL_NVLINKS),  # ..._COUNT_BUFFER_OVERRUN_ERRORS
    ("receive", 208, ALL_NVLINKS),  # ..._COUNT_RCV_ERRORS
    ("receive_remote", 209, ALL_NVLINKS),  # ..._COUNT_RCV_REMOTE_ERRORS
    ("receive_general", 210, ALL_NVLINKS),  # ..._COUNT_RCV_GENERAL_ERRORS
    ("local_link_integrity", 211, ALL_NVLINKS),  # ..._COUNT_LOCAL_LINK_INTEGRITY_ERRORS
    ("transmit_discard", 212, ALL_NVLINKS),  # ..._COUNT_XMIT_DISCARDS
    ("recovery", 215, ALL_NVLINKS),  # ..._COUNT_LINK_RECOVERY_EVENTS
    ("recovery_failed", 214, ALL_NVLINKS),  # ..._COUNT_LINK_RECOVERY_FAILED_EVENTS
    ("effective", 219, ALL_NVLINKS),  # ..._COUNT_EFFECTIVE_ERRORS
    ("symbol", 221, ALL_NVLINKS),  # ..._COUNT_SYMBOL_ERRORS
    ("ecc_data", 160, 0),  # as before Blackwell (DCGM reads it so there too)
)
# nvml.h's nvmlDeviceArchitecture_t: Blackwell and later have NVLink 5 or newer.
_ARCH_BLACKWELL = 10
_ARCH_UNKNOWN = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class NvmlNvLinkFields:
    """A GPU's NVLink field values, None where NVML could not answer that field: the
    links it has (NVML_FI_DEV_NVLINK_LINK_COUNT), its error counters by type (those it
    answered, of ``NVLINK_ERROR_FIELDS`` or, from Blackwell, ``NVLINK5_ERROR_FIELDS``, in
    that order) and its data traffic in KiB; ``failure``,
    the first error a field answered that is not the driver's or the GPU's nature (its
    value undefined, so left out like the others)."""

    link_count: int | None
    errors: tuple[tuple[str, int], ...]
    transmit_kib: int | None
    receive_kib: int | None
    failure: NvmlError | None = None


@dataclass(frozen=True, slots=True)
class NvmlFabric:
    """nvmlDeviceGetGpuFabricInfo: the GPU's fabric registration state (nvml.h's
    NVML_GPU_FABRIC_STATE_*: 0 not supported, 1 not started, 2 in progress, 3 completed),
    its status, an nvmlReturn_t that counts only once the state is completed, and its
    health mask (nvml.h's NVML_GPU_FABRIC_HEALTH_MASK_*; None from a driver before R550,
    whose older call has none)."""

    state: int
    status: int
    health_mask: int | None = None


@dataclass(frozen=True, slots=True)
class NvmlGpmMetrics:
    """nvmlGpmMetricsGet between two samples: each metric asked, in order, None where
    NVML could not answer it (NOT_SUPPORTED, or a NaN or infinity: no time measured); ``failure``,
    the first other error a metric answered."""

    values: tuple[float | None, ...]
    failure: NvmlError | None = None


@dataclass(frozen=True, slots=True)
class NvmlProcess:
    """A running process as NVML lists it; memory None where NVML cannot say."""

    pid: int
    used_memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class NvmlProcessSample:
    """One per-process utilization sample; ``timestamp_us`` is NVML's CPU timestamp."""

    pid: int
    timestamp_us: int
    sm_percent: int


class NvmlSource(Protocol):
    """The NVML calls the collector makes, in NVML's units; each raises ``NvmlError``."""

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def driver_version(self) -> str: ...  # 580.159.04
    def cuda_driver_version(self) -> int: ...  # 13000 for CUDA 13.0
    def device_count(self) -> int: ...
    def device_handle(self, index: int) -> NvmlHandle: ...
    def uuid(self, handle: NvmlHandle) -> str: ...
    def name(self, handle: NvmlHandle) -> str: ...
    def pci_bus_id(self, handle: NvmlHandle) -> str: ...  # NVML's form: 00000000:17:00.0
    def minor_number(self, handle: NvmlHandle) -> int: ...
    def mig_enabled(self, handle: NvmlHandle) -> bool: ...  # the current, not pending, mode
    def max_mig_device_count(self, handle: NvmlHandle) -> int: ...
    # NOT_FOUND for an empty slot.
    def mig_device_handle(self, handle: NvmlHandle, index: int) -> NvmlHandle: ...
    def gpu_instance_id(self, handle: NvmlHandle) -> int: ...
    def compute_instance_id(self, handle: NvmlHandle) -> int: ...
    # Of GPU instance ``gpu_instance_id`` of the GPU ``handle`` (the parent, not a MIG
    # device); NO_PERMISSION unless privileged.
    def gpu_instance_placement(
        self, handle: NvmlHandle, gpu_instance_id: int
    ) -> NvmlGpuInstancePlacement: ...
    def utilization(self, handle: NvmlHandle) -> NvmlUtilization: ...
    # Percent of the last sample period each video engine (NVENC, NVDEC) was busy;
    # NOT_SUPPORTED on a MIG-enabled GPU (nvml.h).
    def encoder_percent(self, handle: NvmlHandle) -> int: ...
    def decoder_percent(self, handle: NvmlHandle) -> int: ...
    def memory(self, handle: NvmlHandle) -> NvmlMemory: ...
    def power_milliwatts(self, handle: NvmlHandle) -> int: ...
    def energy_millijoules(self, handle: NvmlHandle) -> int: ...  # since the driver loaded
    def temperature_celsius(self, handle: NvmlHandle) -> int: ...
    # NOT_SUPPORTED where the GPU has no memory sensor (GDDR boards and older GPUs, it
    # seems; nvml.h says only "Memory temperature for the device").
    def memory_temperature_celsius(self, handle: NvmlHandle) -> int: ...
    def sm_clock_mhz(self, handle: NvmlHandle) -> int: ...
    def clocks_event_reasons(self, handle: NvmlHandle) -> int: ...  # nvml.h's bit mask
    def ecc_errors(self, handle: NvmlHandle, error_type: EccErrorType) -> int: ...  # volatile
    # NOT_SUPPORTED before Ampere and on a MIG-enabled GPU with active instances.
    def remapped_rows(self, handle: NvmlHandle) -> NvmlRemappedRows: ...
    # NOT_SUPPORTED where the GPU remaps rows instead (Ampere and later).
    def retired_pages(self, handle: NvmlHandle) -> NvmlRetiredPages: ...
    def pcie_replays(self, handle: NvmlHandle) -> int: ...  # since the GPU's last reset
    # nvml.h's nvmlDeviceGpuRecoveryAction_t; NOT_SUPPORTED where the driver has none.
    def recovery_action(self, handle: NvmlHandle) -> int: ...
    def nvlink_fields(self, handle: NvmlHandle) -> NvmlNvLinkFields: ...
    def nvlink_active(self, handle: NvmlHandle, link: int) -> bool: ...
    def fabric(self, handle: NvmlHandle) -> NvmlFabric: ...
    # GPM (Hopper and later): a GPU's or MIG device's counters sampled, and metrics between
    # two samples of it. A sample is NVML's memory until freed.
    def gpm_supported(self, handle: NvmlHandle) -> bool: ...
    def gpm_sample(self, handle: NvmlHandle) -> NvmlGpmSample: ...
    def gpm_mig_sample(self, handle: NvmlHandle, gpu_instance: int) -> NvmlGpmSample: ...
    def gpm_metrics(
        self, older: NvmlGpmSample, newer: NvmlGpmSample, metric_ids: tuple[int, ...]
    ) -> NvmlGpmMetrics: ...
    def gpm_free(self, sample: NvmlGpmSample) -> None: ...
    def compute_processes(self, handle: NvmlHandle) -> tuple[NvmlProcess, ...]: ...
    def graphics_processes(self, handle: NvmlHandle) -> tuple[NvmlProcess, ...]: ...
    # Clients of an MPS server (its own process is among the compute processes).
    def mps_processes(self, handle: NvmlHandle) -> tuple[NvmlProcess, ...]: ...
    # Samples newer than ``since_us`` (0: all NVML still holds); () when there are none.
    def process_utilization(
        self, handle: NvmlHandle, since_us: int
    ) -> tuple[NvmlProcessSample, ...]: ...
    # Xid events: a set, GPUs registered with it, the next event without waiting (None:
    # none waiting) as the GPU's handle and the Xid, and the set freed.
    def xid_event_set(self) -> NvmlEventSet: ...
    def register_xid_events(self, handle: NvmlHandle, events: NvmlEventSet) -> None: ...
    def next_xid(self, events: NvmlEventSet) -> tuple[NvmlHandle, int] | None: ...
    def free_event_set(self, events: NvmlEventSet) -> None: ...
    # What a handle points at, equal for two handles of one device without asking NVML
    # (an event's handle is another object than the one registered).
    def device_key(self, handle: NvmlHandle) -> Hashable: ...


# --- The real library -----------------------------------------------------------------


# nvml.h's NVML_GPU_FABRIC_STATE_NOT_SUPPORTED and _COMPLETED
_FABRIC_NOT_SUPPORTED = 0
FABRIC_STATE_COMPLETED = 3


def _available(value: Any, not_available: int = _UINT_NOT_AVAILABLE) -> int:
    """An unsigned NVML figure; NVML_VALUE_NOT_AVAILABLE (all its bits set: 4294967295
    mW, MHz or percent, 2**64 - 1 bytes or mJ) raises VALUE_NOT_AVAILABLE."""
    number = int(value)
    if number == not_available:
        raise NvmlError(VALUE_NOT_AVAILABLE)
    return number


def _memory_info(info: Any) -> NvmlMemory:
    """nvmlMemory_t or nvmlMemory_v2_t, each figure NVML gave."""
    return NvmlMemory(
        total_bytes=_available(info.total, _ULL_NOT_AVAILABLE),
        used_bytes=_available(info.used, _ULL_NOT_AVAILABLE),
    )


class _FabricInfo(ctypes.Structure):
    """nvml.h's nvmlGpuFabricInfo_t, declared here rather than taken from pynvml: pynvml's
    own before 13.6xx gives ``clusterUuid`` NVML_DEVICE_UUID_BUFFER_SIZE (80) bytes where
    nvml.h has NVML_GPU_FABRIC_UUID_LEN (16), so its ``status`` and ``state`` lie past
    what the driver writes, and read 0. The state is one byte (nvmlGpuFabricState_t):
    the padding after it, which the driver may fill, is not read."""

    _fields_ = (
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_uint8),
    )


class _FabricInfoV2(ctypes.Structure):
    """nvml.h's nvmlGpuFabricInfo_v2_t, for nvmlDeviceGetGpuFabricInfoV. pynvml names it
    c_nvmlGpuFabricInfoV_t from 12.550, with the 80-byte ``clusterUuid`` until 12.570,
    and c_nvmlGpuFabricInfo_v2_t only from 13.580."""

    _fields_ = (
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_uint8),
        ("healthMask", ctypes.c_uint),
    )


# nvml.h's NVML_STRUCT_VERSION(GpuFabricInfo, 2): the size, and the version in the top byte.
FABRIC_INFO_V2 = ctypes.sizeof(_FabricInfoV2) | 2 << 24


class _ProcessInfo(ctypes.Structure):
    """nvml.h's record of the running-process lists: nvmlProcessInfo_v2_t for _v2 and
    nvmlProcessInfo_t for _v3, 24 bytes alike (but R535's _v3: see
    ``_choose_process_versions``). The lists are called here with it rather than through
    pynvml, whose record has been 24 or 32 bytes by release (12.535.77 reads 32 from
    every driver) and whose 12.535 releases have no _v2 lists at all."""

    _fields_ = (
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    )


class PynvmlSource(NvmlSource):
    """``NvmlSource`` calling libnvidia-ml.so.1 through pynvml.

    pynvml is imported by the first ``init`` that finds the library, not before: the
    bindings cost ~1 MiB of RSS, for nothing on a node without the NVIDIA driver.
    Every other call comes after an ``init`` that succeeded.
    """

    def __init__(self) -> None:
        self._pynvml: Any = None
        self._library: Any = None  # the loaded libnvidia-ml.so.1, for the process lists
        self._error_names: dict[int, str] = {}
        self._temperature_v = False
        self._memory_v2 = False
        self._clocks_events = False
        self._fabric_v = False
        self._process_versions: dict[str, list[str]] = {}
        # device_key -> whether the GPU has NVLink 5 or newer (its architecture, read once)
        self._nvlink5: dict[Hashable, bool] = {}

    def _bind(self) -> None:
        """Import pynvml once the library loads; LIBRARY_NOT_FOUND, as pynvml says it, if
        it does not (ctypes hands pynvml the same loaded object afterwards)."""
        try:
            self._library = ctypes.CDLL(NVML_LIBRARY)
        except OSError:
            raise NvmlError("LIBRARY_NOT_FOUND", code=_LIBRARY_NOT_FOUND_CODE) from None
        pynvml: Any = importlib.import_module("pynvml")
        self._pynvml = pynvml
        self._error_names = {
            value: name.removeprefix("NVML_ERROR_")
            for name, value in vars(pynvml).items()
            if name.startswith("NVML_ERROR_") and isinstance(value, int)
        }
        # Newer APIs first; fall back once when the driver predates them.
        self._temperature_v = hasattr(pynvml, "nvmlDeviceGetTemperatureV")
        self._memory_v2 = hasattr(pynvml, "nvmlMemory_v2")
        self._clocks_events = hasattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons")
        self._fabric_v = hasattr(pynvml, "nvmlDeviceGetGpuFabricInfoV")

    def _choose_process_versions(self) -> None:
        """Running-process list versions, newest first, for the driver now loaded; older
        ones drop out on FUNCTION_NOT_FOUND (a driver that predates them).

        R535 drivers fill the _v3 lists with 32-byte records (CUDA 12.2's nvml.h added
        usedGpuCcProtectedMemory without a version bump; R545 took it out again), while
        pynvml reads 24-byte ones: every record after the first would be misread
        (NVIDIA/go-nvml#75, nvitop PR #79). There only _v2, 24 bytes on every driver, is
        asked. Known by the version rather than by which symbols the library exports
        (nvitop's test): R535's own nvml.h changed twice (535.98 dropped the _v3
        declarations, 535.104.05 restored them: nvitop #89, #94), so exports follow the
        record size loosely, while asking _v2 of an R535 driver whose _v3 was sound loses
        nothing -- both carry the PID and memory read here. Which lists there are is the
        library's say (it exports them), not pynvml's: the lists are called directly.
        """
        try:
            version = self.driver_version()
        except NvmlError:
            version = ""
        suffixes = ("_v2",) if version.startswith(_R535_DRIVER) else ("_v3", "_v2")
        self._process_versions = {
            kind: [
                f"nvmlDevice{kind}RunningProcesses{suffix}"
                for suffix in suffixes
                if hasattr(self._library, f"nvmlDevice{kind}RunningProcesses{suffix}")
            ]
            for kind in ("GetCompute", "GetGraphics", "GetMPSCompute")
        }

    def _call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call pynvml; its NVMLError becomes NvmlError, named as in nvml.h. pynvml
        decodes the strings it returns as UTF-8: text that is not fails as NOT_UTF8."""
        try:
            return function(*args, **kwargs)
        except self._pynvml.NVMLError as error:
            code = int(error.value)
            raise self._error(code) from error
        except UnicodeDecodeError as error:
            raise NvmlError(NOT_UTF8) from error

    def _error(self, code: int) -> NvmlError:
        """NVML's return code as NvmlError, named as in nvml.h."""
        return NvmlError(self._error_names.get(code, f"CODE_{code}"), code=code)

    def init(self) -> None:
        if self._pynvml is None:
            self._bind()
        self._call(self._pynvml.nvmlInit)
        self._nvlink5.clear()  # handles may name other GPUs after a new init
        self._choose_process_versions()  # again at each init: the driver may be new

    def shutdown(self) -> None:
        self._call(self._pynvml.nvmlShutdown)

    def driver_version(self) -> str:
        return str(self._call(self._pynvml.nvmlSystemGetDriverVersion))

    def cuda_driver_version(self) -> int:
        return int(self._call(self._pynvml.nvmlSystemGetCudaDriverVersion))

    def device_count(self) -> int:
        return int(self._call(self._pynvml.nvmlDeviceGetCount))

    def device_handle(self, index: int) -> NvmlHandle:
        return NvmlHandle(self._call(self._pynvml.nvmlDeviceGetHandleByIndex, index))

    def uuid(self, handle: NvmlHandle) -> str:
        return str(self._call(self._pynvml.nvmlDeviceGetUUID, handle))

    def name(self, handle: NvmlHandle) -> str:
        return str(self._call(self._pynvml.nvmlDeviceGetName, handle))

    def pci_bus_id(self, handle: NvmlHandle) -> str:
        info = self._call(self._pynvml.nvmlDeviceGetPciInfo, handle)
        # pynvml's structures decode their char arrays as UTF-8 on attribute access
        # (_PrintableStructure.__getattribute__): reading busId is what can fail.
        bus_id = self._call(getattr, info, "busId")
        return self._call(bytes.decode, bus_id) if isinstance(bus_id, bytes) else str(bus_id)

    def minor_number(self, handle: NvmlHandle) -> int:
        return int(self._call(self._pynvml.nvmlDeviceGetMinorNumber, handle))

    def mig_enabled(self, handle: NvmlHandle) -> bool:
        current, _pending = self._call(self._pynvml.nvmlDeviceGetMigMode, handle)
        return bool(current == self._pynvml.NVML_DEVICE_MIG_ENABLE)

    def max_mig_device_count(self, handle: NvmlHandle) -> int:
        return int(self._call(self._pynvml.nvmlDeviceGetMaxMigDeviceCount, handle))

    def mig_device_handle(self, handle: NvmlHandle, index: int) -> NvmlHandle:
        return NvmlHandle(
            self._call(self._pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, index)
        )

    def gpu_instance_id(self, handle: NvmlHandle) -> int:
        return int(self._call(self._pynvml.nvmlDeviceGetGpuInstanceId, handle))

    def compute_instance_id(self, handle: NvmlHandle) -> int:
        return int(self._call(self._pynvml.nvmlDeviceGetComputeInstanceId, handle))

    def gpu_instance_placement(
        self, handle: NvmlHandle, gpu_instance_id: int
    ) -> NvmlGpuInstancePlacement:
        instance = self._call(self._pynvml.nvmlDeviceGetGpuInstanceById, handle, gpu_instance_id)
        info = self._call(self._pynvml.nvmlGpuInstanceGetInfo, instance)
        return NvmlGpuInstancePlacement(
            profile_id=int(info.profileId), start=int(info.placement.start)
        )

    def utilization(self, handle: NvmlHandle) -> NvmlUtilization:
        rates = self._call(self._pynvml.nvmlDeviceGetUtilizationRates, handle)
        return NvmlUtilization(
            gpu_percent=_available(rates.gpu), memory_percent=_available(rates.memory)
        )

    def encoder_percent(self, handle: NvmlHandle) -> int:
        percent, _period_us = self._call(self._pynvml.nvmlDeviceGetEncoderUtilization, handle)
        return _available(percent)

    def decoder_percent(self, handle: NvmlHandle) -> int:
        percent, _period_us = self._call(self._pynvml.nvmlDeviceGetDecoderUtilization, handle)
        return _available(percent)

    def memory(self, handle: NvmlHandle) -> NvmlMemory:
        # v2 reports driver-reserved memory apart from used, as nvidia-smi shows it.
        if self._memory_v2:
            try:
                info = self._call(
                    self._pynvml.nvmlDeviceGetMemoryInfo, handle, version=self._pynvml.nvmlMemory_v2
                )
                return _memory_info(info)
            except NvmlError as error:
                if error.error_name != FUNCTION_NOT_FOUND:
                    raise
                self._memory_v2 = False
        return _memory_info(self._call(self._pynvml.nvmlDeviceGetMemoryInfo, handle))

    def power_milliwatts(self, handle: NvmlHandle) -> int:
        return _available(self._call(self._pynvml.nvmlDeviceGetPowerUsage, handle))

    def energy_millijoules(self, handle: NvmlHandle) -> int:
        energy = self._call(self._pynvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        return _available(energy, _ULL_NOT_AVAILABLE)

    def temperature_celsius(self, handle: NvmlHandle) -> int:
        # nvmlDeviceGetTemperature is deprecated (gone in CUDA 14); older drivers lack V.
        if self._temperature_v:
            try:
                celsius = int(
                    self._call(
                        self._pynvml.nvmlDeviceGetTemperatureV,
                        handle,
                        self._pynvml.NVML_TEMPERATURE_GPU,
                    )
                )
                if celsius == -1:  # nvmlTemperature_v1_t's is a signed int: all bits set
                    raise NvmlError(VALUE_NOT_AVAILABLE)
                return celsius
            except NvmlError as error:
                if error.error_name != FUNCTION_NOT_FOUND:
                    raise
                self._temperature_v = False
        return _available(
            self._call(
                self._pynvml.nvmlDeviceGetTemperature, handle, self._pynvml.NVML_TEMPERATURE_GPU
            )
        )

    def memory_temperature_celsius(self, handle: NvmlHandle) -> int:
        # Only a field value (NVML_FI_DEV_MEMORY_TEMP).
        return self._one_field(handle, self._pynvml.NVML_FI_DEV_MEMORY_TEMP)

    def recovery_action(self, handle: NvmlHandle) -> int:
        # A driver older than the field answers INVALID_ARGUMENT for an ID it does not
        # know, which is no recovery to report.
        try:
            return self._one_field(handle, _FIELD_RECOVERY_ACTION)
        except NvmlError as error:
            if error.error_name == INVALID_ARGUMENT:
                raise NvmlError(NOT_SUPPORTED, code=error.code) from error
            raise

    def _one_field(self, handle: NvmlHandle, field_id: int) -> int:
        """One field value, asked alone. The call succeeds if any field was filled
        (nvml.h) and says per field whether it could answer: the field's own error is
        raised."""
        pynvml = self._pynvml
        (field,) = self._call(pynvml.nvmlDeviceGetFieldValues, handle, [field_id])
        code = int(field.nvmlReturn)
        if code != pynvml.NVML_SUCCESS:
            raise self._error(code)
        return int(_field_number(pynvml, field))

    def sm_clock_mhz(self, handle: NvmlHandle) -> int:
        return _available(
            self._call(self._pynvml.nvmlDeviceGetClockInfo, handle, self._pynvml.NVML_CLOCK_SM)
        )

    def clocks_event_reasons(self, handle: NvmlHandle) -> int:
        # "Throttle reasons" became "clocks event reasons" in R535 (the old name is gone
        # in CUDA 14); older drivers have only the old one.
        if self._clocks_events:
            try:
                return int(self._call(self._pynvml.nvmlDeviceGetCurrentClocksEventReasons, handle))
            except NvmlError as error:
                if error.error_name != FUNCTION_NOT_FOUND:
                    raise
                self._clocks_events = False
        return int(self._call(self._pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, handle))

    def ecc_errors(self, handle: NvmlHandle, error_type: EccErrorType) -> int:
        nvml_type = (
            self._pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
            if error_type == "corrected"
            else self._pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        )
        count = self._call(
            self._pynvml.nvmlDeviceGetTotalEccErrors,
            handle,
            nvml_type,
            self._pynvml.NVML_VOLATILE_ECC,
        )
        return _available(count, _ULL_NOT_AVAILABLE)

    def remapped_rows(self, handle: NvmlHandle) -> NvmlRemappedRows:
        try:
            found = self._call(self._pynvml.nvmlDeviceGetRemappedRows, handle)
        except NvmlError as error:
            if error.error_name == FUNCTION_NOT_FOUND:
                # A driver before R450 (before Ampere): no GPU it drives has spare rows.
                raise NvmlError(NOT_SUPPORTED) from error
            raise
        correctable, uncorrectable, pending, failed = found
        return NvmlRemappedRows(int(correctable), int(uncorrectable), bool(pending), bool(failed))

    def retired_pages(self, handle: NvmlHandle) -> NvmlRetiredPages:
        pynvml = self._pynvml
        # pynvml asks the count, then the addresses (a few dozen at most): only counted.
        single = self._call(
            pynvml.nvmlDeviceGetRetiredPages,
            handle,
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
        )
        double = self._call(
            pynvml.nvmlDeviceGetRetiredPages,
            handle,
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
        )
        pending = self._call(pynvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        return NvmlRetiredPages(len(single), len(double), bool(pending))

    def pcie_replays(self, handle: NvmlHandle) -> int:
        return _available(self._call(self._pynvml.nvmlDeviceGetPcieReplayCounter, handle))

    def nvlink_fields(self, handle: NvmlHandle) -> NvmlNvLinkFields:
        # One call for all: the link count at scope 0, the error counters as DCGM reads
        # them (``NVLINK_ERROR_FIELDS``, or ``NVLINK5_ERROR_FIELDS`` from Blackwell), the
        # traffic at scope UINT_MAX, nvml.h's "aggregate value summed up across all
        # links". A field this driver or GPU cannot answer (NOT_SUPPORTED, or
        # INVALID_ARGUMENT for an ID older drivers do not know) is left out. Not so
        # INVALID_ARGUMENT from NVLink 5's counters at UINT_MAX: a driver for Blackwell
        # knows their IDs, so it refuses the scope (nvml.h documents them per link), and
        # that is reported rather than every counter left out without a word.
        pynvml = self._pynvml
        error_fields = NVLINK5_ERROR_FIELDS if self._has_nvlink5(handle) else NVLINK_ERROR_FIELDS
        requested = (
            (pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT, 0),
            *((field, scope) for _, field, scope in error_fields),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_NVLINKS),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL_NVLINKS),
        )
        # Only NVLink 5's counters are asked of all links among the error fields.
        unknown_id_absent = (
            True,
            *(scope != ALL_NVLINKS for *_, scope in error_fields),
            True,
            True,
        )
        answered: list[int | None] = []
        failure: NvmlError | None = None
        values = self._call(pynvml.nvmlDeviceGetFieldValues, handle, requested)
        for field, lenient in zip(values, unknown_id_absent, strict=True):
            code = int(field.nvmlReturn)
            if code == pynvml.NVML_SUCCESS:
                try:
                    answered.append(int(_field_number(pynvml, field)))
                except NvmlError as unreadable:  # that field's value only
                    answered.append(None)
                    failure = failure or unreadable
                continue
            answered.append(None)
            if code == pynvml.NVML_ERROR_NOT_SUPPORTED or (
                lenient and code == pynvml.NVML_ERROR_INVALID_ARGUMENT
            ):
                continue
            error = self._error(code)
            if error.error_name == GPU_IS_LOST:
                raise error
            failure = failure or error
        link_count, *errors, transmit, receive = answered
        return NvmlNvLinkFields(
            link_count=link_count,
            errors=tuple(
                (kind, count)
                for (kind, _, _), count in zip(error_fields, errors, strict=True)
                if count is not None
            ),
            transmit_kib=transmit,
            receive_kib=receive,
            failure=failure,
        )

    def _has_nvlink5(self, handle: NvmlHandle) -> bool:
        """Whether the GPU is a Blackwell or later (NVLink 5 or newer), by its
        architecture, read once: not by its NVLink version, which nvml.h numbers 7 for
        NVLink 5.0. A driver without the call (FUNCTION_NOT_FOUND) predates Blackwell, and
        a GPU that answers NOT_SUPPORTED is taken for an older one too; another failure
        raises, and the GPU's NVLink figures are asked again next poll."""
        key = self.device_key(handle)
        known = self._nvlink5.get(key)
        if known is None:
            try:
                architecture = int(self._call(self._pynvml.nvmlDeviceGetArchitecture, handle))
            except NvmlError as error:
                if error.error_name not in (FUNCTION_NOT_FOUND, NOT_SUPPORTED):
                    raise
                architecture = 0
            known = _ARCH_BLACKWELL <= architecture < _ARCH_UNKNOWN
            self._nvlink5[key] = known
        return known

    def nvlink_active(self, handle: NvmlHandle, link: int) -> bool:
        state = self._call(self._pynvml.nvmlDeviceGetNvLinkState, handle, link)
        return bool(state == self._pynvml.NVML_FEATURE_ENABLED)

    def fabric(self, handle: NvmlHandle) -> NvmlFabric:
        # nvmlDeviceGetGpuFabricInfoV (R550 on) with its v2 struct; R535 has only the
        # first, deprecated call (gone in CUDA 14). Both structs are ours: pynvml's
        # differ by version, and most from nvml.h (_FabricInfo).
        pynvml = self._pynvml
        if self._fabric_v:
            info = _FabricInfoV2(version=FABRIC_INFO_V2)
            try:
                self._call(pynvml.nvmlDeviceGetGpuFabricInfoV, handle, ctypes.byref(info))
                return NvmlFabric(
                    state=int(info.state),
                    status=int(info.status),
                    health_mask=int(info.healthMask),
                )
            except NvmlError as error:
                if error.error_name not in (FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH):
                    raise
                self._fabric_v = False
        old = _FabricInfo()
        self._call(pynvml.nvmlDeviceGetGpuFabricInfo, handle, ctypes.byref(old))
        return NvmlFabric(state=int(old.state), status=int(old.status))

    def gpm_supported(self, handle: NvmlHandle) -> bool:
        # A driver before R520 has no GPM at all. In a vGPU guest GPM works only on a
        # MIG-backed profile with the instance's whole frame buffer (nvml.h), which the
        # guest cannot tell apart: others fail every sample with errors that would be
        # reported every poll (dcgm-exporter#661), so no vGPU guest is sampled.
        pynvml = self._pynvml
        try:
            support = self._call(pynvml.nvmlGpmQueryDeviceSupport, handle)
        except NvmlError as error:
            if error.error_name == FUNCTION_NOT_FOUND:
                return False
            raise
        if not support.isSupportedDevice:
            return False
        try:
            mode = self._call(pynvml.nvmlDeviceGetVirtualizationMode, handle)
        except NvmlError as error:
            if error.error_name not in (FUNCTION_NOT_FOUND, NOT_SUPPORTED):
                raise
            return True  # no virtualization to speak of: bare metal
        return bool(int(mode) != pynvml.NVML_GPU_VIRTUALIZATION_MODE_VGPU)

    def gpm_sample(self, handle: NvmlHandle) -> NvmlGpmSample:
        # nvml.h: nvmlGpmSampleGet takes a GPU's or a MIG device's handle (DCGM reads a
        # compute instance's metrics so).
        return self._gpm_sampled(self._pynvml.nvmlGpmSampleGet, handle)

    def gpm_mig_sample(self, handle: NvmlHandle, gpu_instance: int) -> NvmlGpmSample:
        # A GPU instance's counters, through its GPU's handle and the instance's ID.
        return self._gpm_sampled(self._pynvml.nvmlGpmMigSampleGet, handle, gpu_instance)

    def _gpm_sampled(self, get: Callable[..., Any], *args: Any) -> NvmlGpmSample:
        """A sample allocated and filled by ``get(*args, sample)``; freed if that fails."""
        pynvml = self._pynvml
        sample = self._call(pynvml.nvmlGpmSampleAlloc)
        try:
            self._call(get, *args, sample)
        except NvmlError:
            self._call(pynvml.nvmlGpmSampleFree, sample)
            raise
        return NvmlGpmSample(sample)

    def gpm_metrics(
        self, older: NvmlGpmSample, newer: NvmlGpmSample, metric_ids: tuple[int, ...]
    ) -> NvmlGpmMetrics:
        pynvml = self._pynvml
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(metric_ids)
        request.sample1 = older
        request.sample2 = newer
        for slot, metric_id in enumerate(metric_ids):
            request.metrics[slot].metricId = metric_id
        self._call(pynvml.nvmlGpmMetricsGet, request)
        values: list[float | None] = []
        failure: NvmlError | None = None
        for slot in range(len(metric_ids)):
            metric = request.metrics[slot]
            code = int(metric.nvmlReturn)
            value = float(metric.value)
            # NaN, or an infinity (a count over no time): nothing measured
            if code == pynvml.NVML_SUCCESS and math.isfinite(value):
                values.append(value)
                continue
            values.append(None)
            if code not in (pynvml.NVML_SUCCESS, pynvml.NVML_ERROR_NOT_SUPPORTED):
                failure = failure or self._error(code)
        return NvmlGpmMetrics(tuple(values), failure)

    def gpm_free(self, sample: NvmlGpmSample) -> None:
        self._call(self._pynvml.nvmlGpmSampleFree, sample)

    def compute_processes(self, handle: NvmlHandle) -> tuple[NvmlProcess, ...]:
        return self._processes("GetCompute", handle)

    def graphics_processes(self, handle: NvmlHandle) -> tuple[NvmlProcess, ...]:
        return self._processes("GetGraphics", handle)

    def mps_processes(self, handle: NvmlHandle) -> tuple[NvmlProcess, ...]:
        return self._processes("GetMPSCompute", handle)

    def _processes(self, kind: str, handle: NvmlHandle) -> tuple[NvmlProcess, ...]:
        versions = self._process_versions[kind]
        while versions:
            try:
                found = self._list_processes(getattr(self._library, versions[0]), handle)
            except NvmlError as error:
                if error.error_name != FUNCTION_NOT_FOUND or len(versions) == 1:
                    raise
                versions.pop(0)
                continue
            return tuple(
                NvmlProcess(
                    pid=int(p.pid),
                    used_memory_bytes=(
                        None if p.usedGpuMemory == _ULL_NOT_AVAILABLE else int(p.usedGpuMemory)
                    ),
                )
                for p in found
            )
        raise NvmlError(FUNCTION_NOT_FOUND)

    def _list_processes(self, function: Any, handle: NvmlHandle) -> list[_ProcessInfo]:
        """One list, sized as pynvml sizes it: its count asked first, then room for twice
        that and 5 more (processes start in between)."""
        count = ctypes.c_uint(0)
        code = function(handle, ctypes.byref(count), None)
        if code == self._pynvml.NVML_SUCCESS:
            return []  # none: NVML answers SUCCESS to the size query
        if code != self._pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
            raise self._error(code)
        count.value = count.value * 2 + 5
        records = (_ProcessInfo * count.value)()
        code = function(handle, ctypes.byref(count), records)
        if code != self._pynvml.NVML_SUCCESS:
            raise self._error(code)
        return records[: count.value]

    def process_utilization(
        self, handle: NvmlHandle, since_us: int
    ) -> tuple[NvmlProcessSample, ...]:
        try:
            found = self._call(self._pynvml.nvmlDeviceGetProcessUtilization, handle, since_us)
        except NvmlError as error:
            # NOT_FOUND: no sample since ``since_us``. pynvml raises even for SUCCESS,
            # which NVML answers to the size query when it has nothing to report.
            if error.error_name == NOT_FOUND or error.code == 0:
                return ()
            raise
        return tuple(
            NvmlProcessSample(
                pid=int(s.pid), timestamp_us=int(s.timeStamp), sm_percent=int(s.smUtil)
            )
            for s in found
        )

    def xid_event_set(self) -> NvmlEventSet:
        return NvmlEventSet(self._call(self._pynvml.nvmlEventSetCreate))

    def register_xid_events(self, handle: NvmlHandle, events: NvmlEventSet) -> None:
        xid = self._pynvml.nvmlEventTypeXidCriticalError
        self._call(self._pynvml.nvmlDeviceRegisterEvents, handle, xid, events)

    def next_xid(self, events: NvmlEventSet) -> tuple[NvmlHandle, int] | None:
        xid = self._pynvml.nvmlEventTypeXidCriticalError
        while True:
            try:
                event = self._call(self._pynvml.nvmlEventSetWait_v2, events, 0)
            except NvmlError as error:
                if error.error_name == TIMEOUT:  # nothing waiting
                    return None
                raise
            if int(event.eventType) & xid:  # only Xids are registered; be sure
                return NvmlHandle(event.device), int(event.eventData)

    def free_event_set(self, events: NvmlEventSet) -> None:
        self._call(self._pynvml.nvmlEventSetFree, events)

    def device_key(self, handle: NvmlHandle) -> Hashable:
        # nvmlDevice_t is a pointer: its address names the device.
        pointer: Any = handle
        return ctypes.cast(pointer, ctypes.c_void_p).value


def _field_number(pynvml: Any, field: Any) -> float:
    """A field value's number, read from the union member its ``valueType`` names."""
    member = _value_members(pynvml).get(int(field.valueType))
    if member is None:  # a type newer than these bindings: not a number we can read
        raise NvmlError(UNKNOWN)
    raw = getattr(field.value, member)
    number = float(raw)
    # A double NaN or infinite (int() of it would raise), or an unsigned member all set.
    if not math.isfinite(number) or raw == _FIELD_NOT_AVAILABLE.get(member):
        raise NvmlError(VALUE_NOT_AVAILABLE)
    return number


# NVML_VALUE_NOT_AVAILABLE in nvmlValue_t's unsigned members (unsigned long: 64 bits on
# the Linux LP64 ABI).
_FIELD_NOT_AVAILABLE = {
    "uiVal": _UINT_NOT_AVAILABLE,
    "ulVal": _ULL_NOT_AVAILABLE,
    "ullVal": _ULL_NOT_AVAILABLE,
    "usVal": 0xFFFF,
}


@functools.cache
def _value_members(pynvml: Any) -> dict[int, str]:
    """nvmlValue_t's union member for each nvmlValueType_t, built once (a poll reads
    several field values a GPU)."""
    members = {
        "NVML_VALUE_TYPE_DOUBLE": "dVal",
        "NVML_VALUE_TYPE_UNSIGNED_INT": "uiVal",
        "NVML_VALUE_TYPE_UNSIGNED_LONG": "ulVal",
        "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG": "ullVal",
        "NVML_VALUE_TYPE_SIGNED_LONG_LONG": "sllVal",
        "NVML_VALUE_TYPE_SIGNED_INT": "siVal",
        # From 12.560 (the type) and 12.570 (the member): older bindings know neither.
        "NVML_VALUE_TYPE_UNSIGNED_SHORT": "usVal",
    }
    return {
        getattr(pynvml, value_type): member
        for value_type, member in members.items()
        if hasattr(pynvml, value_type) and hasattr(pynvml.c_nvmlValue_t, member)
    }


# --- Figures: one NVML reading, converted to base units ----------------------------------

_Figure = Callable[[NvmlSource, NvmlHandle], tuple[Sample, ...]]


def _utilization(source: NvmlSource, handle: NvmlHandle) -> tuple[Sample, ...]:
    rates = source.utilization(handle)
    return (
        Sample(GPU_UTILIZATION, rates.gpu_percent / 100),
        Sample(GPU_MEMORY_BANDWIDTH_UTILIZATION, rates.memory_percent / 100),
    )


def _memory(source: NvmlSource, handle: NvmlHandle) -> tuple[Sample, ...]:
    memory = source.memory(handle)
    return (
        Sample(GPU_MEMORY_USED, float(memory.used_bytes)),
        Sample(GPU_MEMORY_TOTAL, float(memory.total_bytes)),
    )


def _power(source: NvmlSource, handle: NvmlHandle) -> tuple[Sample, ...]:
    return (Sample(GPU_POWER, source.power_milliwatts(handle) / 1000),)


def _energy(source: NvmlSource, handle: NvmlHandle) -> tuple[Sample, ...]:
    return (Sample(GPU_ENERGY, source.energy_millijoules(handle) / 1000),)


# A reading of the energy counter, or a GPM measurement, is served until it is this much
# short of its interval (--collector.nvml.energy-interval, .gpm-interval): polls start
# milliseconds early or late, and a reading due at the 30 s poll must not wait for the
# 40 s one.
INTERVAL_SLACK_S = 0.5


def _temperature(source: NvmlSource, handle: NvmlHandle) -> tuple[Sample, ...]:
    return (Sample(GPU_TEMPERATURE, float(source.temperature_celsius(handle))),)


def _encoder(source: NvmlSource, handle: NvmlHandle) -> tuple[Sample, ...]:
    return (Sample(GPU_VIDEO_UTILIZATION, source.encoder_percent(handle) / 100, ("encoder",)),)


def _decoder(source: NvmlSource, handle: NvmlHandle) -> tuple[Sample, ...]:
    return (Sample(GPU_VIDEO_UTILIZATION, source.decoder_percent(handle) / 100, ("decoder",)),)


def _memory_temperature(source: NvmlSource, handle: NvmlHandle) -> tuple[Sample, ...]:
    return (Sample(GPU_MEMORY_TEMPERATURE, float(source.memory_temperature_celsius(handle))),)


def _sm_clock(source: NvmlSource, handle: NvmlHandle) -> tuple[Sample, ...]:
    return (Sample(GPU_SM_CLOCK, source.sm_clock_mhz(handle) * 1e6),)


# nvml.h's nvmlClocksEventReason* bits that hold clocks down, by the label they get. Left
# out: GpuIdle, ApplicationsClocksSetting and DisplayClockSetting, which are not slowdowns.
_CLOCKS_THROTTLE_REASONS = (
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake_slowdown", 0x80),
)


def _clocks_throttled(source: NvmlSource, handle: NvmlHandle) -> tuple[Sample, ...]:
    reasons = source.clocks_event_reasons(handle)
    return tuple(
        Sample(GPU_CLOCKS_THROTTLED, 1.0 if reasons & bit else 0.0, (reason,))
        for reason, bit in _CLOCKS_THROTTLE_REASONS
    )


def _ecc_corrected(source: NvmlSource, handle: NvmlHandle) -> tuple[Sample, ...]:
    return (Sample(GPU_ECC_ERRORS, float(source.ecc_errors(handle, "corrected")), ("corrected",)),)


def _ecc_uncorrected(source: NvmlSource, handle: NvmlHandle) -> tuple[Sample, ...]:
    count = float(source.ecc_errors(handle, "uncorrected"))
    return (Sample(GPU_ECC_ERRORS, count, ("uncorrected",)),)


def _remapped_rows(source: NvmlSource, handle: NvmlHandle) -> tuple[Sample, ...]:
    rows = source.remapped_rows(handle)
    return (
        Sample(GPU_REMAPPED_ROWS, float(rows.correctable), ("correctable",)),
        Sample(GPU_REMAPPED_ROWS, float(rows.uncorrectable), ("uncorrectable",)),
        Sample(GPU_ROW_REMAP_PENDING, 1.0 if rows.pending else 0.0),
        Sample(GPU_ROW_REMAP_FAILED, 1.0 if rows.failed else 0.0),
    )


def _retired_pages(source: NvmlSource, handle: NvmlHandle) -> tuple[Sample, ...]:
    pages = source.retired_pages(handle)
    return (
        Sample(
            GPU_RETIRED_PAGES, float(pages.multiple_single_bit_ecc), ("multiple_single_bit_ecc",)
        ),
        Sample(GPU_RETIRED_PAGES, float(pages.double_bit_ecc), ("double_bit_ecc",)),
        Sample(GPU_RETIRED_PAGES_PENDING, 1.0 if pages.pending else 0.0),
    )


def _recovery_action(source: NvmlSource, handle: NvmlHandle) -> tuple[Sample, ...]:
    return (Sample(GPU_RECOVERY_ACTION, float(source.recovery_action(handle))),)


def _pcie_replays(source: NvmlSource, handle: NvmlHandle) -> tuple[Sample, ...]:
    return (Sample(GPU_PCIE_REPLAYS, float(source.pcie_replays(handle))),)


# nvml.h's NVML_NVLINK_MAX_LINKS: 36 since CUDA 13.3's header, 18 before; a driver
# answers INVALID_ARGUMENT for a link past its GPU's.
NVLINK_MAX_LINKS = 36


class _PartialFigure(Exception):
    """A figure that read some of its samples and failed for the rest: the samples are
    kept and the error is reported, as a whole figure's would be."""

    def __init__(self, samples: tuple[Sample, ...], error: NvmlError) -> None:
        super().__init__(error.error_name)
        self.samples = samples
        self.error = error


def _nvlink(source: NvmlSource, handle: NvmlHandle) -> tuple[Sample, ...]:
    """A GPU's NVLink figures. The links are those NVML_FI_DEV_NVLINK_LINK_COUNT gives,
    each asked for its state, as DCGM asks them (a link answering NOT_SUPPORTED or
    INVALID_ARGUMENT is skipped); where the count is not answered (older drivers), links
    from 0 until the first that answers so (no NVLink, or past the GPU's last). A GPU
    whose links all answer so has no link series. SUCCESS with the link disabled is an
    inactive link: a PCIe card without its bridge has its links so, by design. A link
    whose state fails otherwise is ``unknown`` (that sample only while there is one),
    reported once a poll through ``_PartialFigure``: it is not active as far as anyone
    can tell, and the GPU's other NVLink figures stay; so does a field that answered
    such an error (the links are probed where it was the count). A probe that reaches
    NVLINK_MAX_LINKS without an answer to end it counts no failed link after the last
    that answered. GPU_IS_LOST is raised at once."""
    fields = source.nvlink_fields(handle)
    samples = [Sample(GPU_NVLINK_ERRORS, float(count), (kind,)) for kind, count in fields.errors]
    if fields.transmit_kib is not None:
        samples.append(Sample(GPU_NVLINK_TRANSMIT, fields.transmit_kib * 1024.0))
    if fields.receive_kib is not None:
        samples.append(Sample(GPU_NVLINK_RECEIVE, fields.receive_kib * 1024.0))
    counted = fields.link_count is not None
    active = inactive = unknown = 0
    unknown_since_answer = 0  # failed links after the last that answered its state
    failure = fields.failure
    for link in range(NVLINK_MAX_LINKS if fields.link_count is None else fields.link_count):
        try:
            up = source.nvlink_active(handle, link)
        except NvmlError as error:
            if error.error_name in (NOT_SUPPORTED, INVALID_ARGUMENT):
                if counted:
                    continue
                break
            if error.error_name == GPU_IS_LOST:
                raise
            unknown += 1
            unknown_since_answer += 1
            failure = failure or error
            continue
        unknown_since_answer = 0
        if up:
            active += 1
        else:
            inactive += 1
    else:
        if not counted:
            # Probed to nvml.h's maximum with no answer to end it: failures after the
            # last link that answered are no evidence of links (a driver failing every
            # index would serve 36 unknown); the error is still reported.
            unknown -= unknown_since_answer
    if active or inactive or unknown:
        samples.append(Sample(GPU_NVLINK_LINKS, float(active), ("active",)))
        samples.append(Sample(GPU_NVLINK_LINKS, float(inactive), ("inactive",)))
    if unknown:
        samples.append(Sample(GPU_NVLINK_LINKS, float(unknown), ("unknown",)))
    if failure is not None:
        raise _PartialFigure(tuple(samples), failure)
    return tuple(samples)


# nvml.h's NVML_GPU_FABRIC_HEALTH_MASK_* fields DCGM's health watch fails a GPU on
# (MonitorFabricFields), by the label each is served under: (issue, shift, width, the
# value that says all is well). Each field reads 0 where it is not reported (its
# *_NOT_SUPPORTED); any value other than those two is the problem (TRUE, or one of the
# incorrect configurations: system GUID, chassis serial, no partition, too few
# NVLinks, GPU firmware, location, GPU state).
_FABRIC_HEALTH_ISSUES = (
    ("degraded_bandwidth", 0, 0x3, 2),  # ..._DEGRADED_BW_FALSE
    ("route_recovery", 2, 0x3, 2),  # ..._ROUTE_RECOVERY_FALSE
    ("route_unhealthy", 4, 0x3, 2),  # ..._ROUTE_UNHEALTHY_FALSE
    ("access_timeout_recovery", 6, 0x3, 2),  # ..._ACCESS_TIMEOUT_RECOVERY_FALSE
    ("incorrect_configuration", 8, 0xF, 1),  # ..._INCORRECT_CONFIGURATION_NONE
)


def _fabric(source: NvmlSource, handle: NvmlHandle) -> tuple[Sample, ...]:
    """A GPU's NVLink fabric registration: none for a GPU in no such fabric (its state
    NOT_SUPPORTED, or the call NOT_SUPPORTED); the status only once the state is
    completed (nvml.h: "Must be checked only if state returns complete"); the health
    mask's problems each where it reports them."""
    fabric = source.fabric(handle)
    if fabric.state == _FABRIC_NOT_SUPPORTED:
        return ()
    samples = [Sample(GPU_FABRIC_STATE, float(fabric.state))]
    if fabric.state == FABRIC_STATE_COMPLETED:
        samples.append(Sample(GPU_FABRIC_STATUS, float(fabric.status)))
    if fabric.health_mask is not None:
        for issue_name, shift, width, healthy in _FABRIC_HEALTH_ISSUES:
            value = (fabric.health_mask >> shift) & width
            if value:
                problem = 0.0 if value == healthy else 1.0
                samples.append(Sample(GPU_FABRIC_HEALTH_ISSUE, problem, (issue_name,)))
    return tuple(samples)


# The same for GPUs and MIG devices: whatever NVML answers for a MIG handle is kept.
_FIGURES: tuple[_Figure, ...] = (
    _utilization,
    _memory,
    _power,
    _energy,
    _temperature,
    _sm_clock,
    _clocks_throttled,
    _ecc_corrected,
    _ecc_uncorrected,
    _remapped_rows,
    _retired_pages,
)
# Whole GPUs only: a MIG device shares its GPU's memory sensor and links, whose series
# are the GPU's; the video engines NVML does not read on a MIG-enabled GPU (nvml.h).
_GPU_FIGURES: tuple[_Figure, ...] = (
    *_FIGURES,
    _encoder,
    _decoder,
    _memory_temperature,
    _pcie_replays,
    _recovery_action,
    _nvlink,
    _fabric,
)
# Not asked of a MIG-enabled GPU: NVML reports its NVLinks as down (DCGM works around
# that bug, 200682374, by not asking), and MIG leaves NVLink, and its fabric, unused.
_NOT_WITH_MIG: frozenset[_Figure] = frozenset({_nvlink, _fabric})


# GPM metrics (nvml.h's nvmlGpmMetricId_t) as DCGM maps its profiling fields onto them
# (DcgmFieldIdToNvmlGpmMetricId): the figures of a compute instance, so of a MIG device too.
_GPM_METRICS: tuple[tuple[int, MetricSpec, tuple[str, ...]], ...] = (
    (1, GPU_GRAPHICS_ENGINE_ACTIVE, ()),  # NVML_GPM_METRIC_GRAPHICS_UTIL
    (2, GPU_SM_ACTIVE, ()),  # NVML_GPM_METRIC_SM_UTIL
    (3, GPU_SM_OCCUPANCY, ()),  # NVML_GPM_METRIC_SM_OCCUPANCY
    (5, GPU_PIPE_ACTIVE, ("tensor",)),  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    (11, GPU_PIPE_ACTIVE, ("fp64",)),  # NVML_GPM_METRIC_FP64_UTIL
    (12, GPU_PIPE_ACTIVE, ("fp32",)),  # NVML_GPM_METRIC_FP32_UTIL
    (13, GPU_PIPE_ACTIVE, ("fp16",)),  # NVML_GPM_METRIC_FP16_UTIL
)
# Whole GPUs add DRAM bandwidth (NVML_GPM_METRIC_DRAM_BW_UTIL): DCGM serves it per GPU
# instance, never per compute instance, so a MIG device's handle is not asked for it; its
# GPU instance is, where the device is the instance's only one.
_GPM_GPU_INSTANCE_METRICS: tuple[tuple[int, MetricSpec, tuple[str, ...]], ...] = (
    (10, GPU_DRAM_ACTIVE, ()),
)
_GPM_GPU_METRICS = (*_GPM_METRICS, *_GPM_GPU_INSTANCE_METRICS)
# And PCIe traffic, per GPU in DCGM too: each direction's rate in MiB/s between the two
# samples (NVML_GPM_METRIC_PCIE_TX_PER_SEC, _RX_PER_SEC), summed into byte counters.
_GPM_PCIE = ((20, GPU_PCIE_TRANSMIT), (21, GPU_PCIE_RECEIVE))
_GPM_METRIC_IDS = tuple(metric_id for metric_id, _, _ in _GPM_METRICS)
_GPM_GPU_INSTANCE_METRIC_IDS = tuple(metric_id for metric_id, _, _ in _GPM_GPU_INSTANCE_METRICS)
_GPM_GPU_METRIC_IDS = (
    *(metric_id for metric_id, _, _ in _GPM_GPU_METRICS),
    *(metric_id for metric_id, _ in _GPM_PCIE),
)
_MIB = 1024 * 1024
# nvml.h: two samples should be more than 100 ms apart ("the internal sample refresh
# rate"); a poll sooner than that keeps the older sample. On an H200 (driver 580), two
# samples 0-50 ms apart answered NaN for DRAM activity and 0 for PCIe traffic.
GPM_MIN_INTERVAL_S = 0.1
# How a failed sample and metrics call are named in issues: a MIG device's own, and its
# GPU instance's, kept apart so that on-call can tell which of the two failed.
_DEVICE_CALLS = ("gpm_sample", "gpm_metrics")
_INSTANCE_CALLS = ("gpm_mig_sample", "gpm_mig_metrics")


@dataclass(frozen=True, slots=True)
class _GpmKept:
    """A device's latest GPM sample, taken at ``taken`` (the clock at its poll's start),
    and the metrics measured from the sample before it up to this one (None: nothing
    measured, as at a device's first sample or after a failed metrics call)."""

    taken: float
    sample: NvmlGpmSample
    measured: NvmlGpmMetrics | None


def _bytes_added(total: float | None, rate_mib_s: float | None, seconds: float) -> float | None:
    """A byte count with a rate's bytes over ``seconds`` added; unchanged without one."""
    if rate_mib_s is None:
        return total
    return (total or 0.0) + rate_mib_s * _MIB * seconds


def _gpm_samples(
    values: tuple[float | None, ...], asked: tuple[tuple[int, MetricSpec, tuple[str, ...]], ...]
) -> tuple[Sample, ...]:
    """GPM's percentages as ratios, each metric NVML answered."""
    return tuple(
        Sample(spec, value / 100, labels)
        for (_, spec, labels), value in zip(asked, values, strict=True)
        if value is not None
    )


# --- The collector ---------------------------------------------------------------------


class _GpuLostError(Exception):
    """The GPU answered GPU_IS_LOST: stop asking it anything this poll."""


@dataclass(frozen=True, slots=True)
class _Gpu:
    """What does not change while NVML stays initialised: read once per GPU."""

    handle: NvmlHandle
    uuid: str
    minor: int | None
    identity: DeviceIdentity


_PlacementKey = tuple[str, int, str]  # parent GPU UUID, GPU instance ID, MIG UUID


@dataclass(frozen=True, slots=True)
class _Mig:
    """One MIG device as NVML answered in one poll, before keys are settled."""

    gpu_instance: int | None
    compute_instance: int | None
    placement: NvmlGpuInstancePlacement | None
    reading: DeviceReading


# --- Xid errors: the driver's critical error reports, counted per GPU from NVML events ---
#
# An Xid is how the driver says a GPU or the work on it failed (NVIDIA's Xid catalog:
# 79 fell off the bus, 48 a double-bit ECC error, 63/64 row remapping, 74 NVLink, 94/95
# contained/uncontained ECC, 119/120 GSP firmware; 13, 31, 43, 45, 68 and 109 are usually
# an application's own fault, which NVIDIA's device plugin leaves out of its health
# check; 999 an Xid the driver has no number for). NVML delivers them as events to a set
# each GPU is registered with (``nvmlDeviceRegisterEvents(nvmlEventTypeXidCriticalError)``),
# as the device plugin's health check does; ``XidWatch`` drains that set once a poll,
# without waiting, and counts per GPU (from 0 when it is first watched: the series to
# alert on, whose increase is seen however an exporter restart falls) and per GPU and Xid
# (a code's series appears with its first error: it names the codes).
#
# Only Xids after a GPU is registered are seen; the counts live as long as the process
# (a new set, after a failure, does not reset them). A MIG-enabled GPU's Xids count on the GPU;
# nvml.h gives the events of single instances only to a privileged caller, the others
# (those of the whole GPU) to anyone.
# ``NOT_SUPPORTED`` (a board without events) leaves that GPU unwatched.

# Events taken from the set per poll: a GPU in an Xid storm must not hold the poll.
# NVML keeps the rest for the next one.
MAX_EVENTS_PER_POLL = 256


class XidWatch:
    """One NVML session's event set, the GPUs registered with it, and the counts.

    Call holding the session's lock, between its nvmlInit and nvmlShutdown; ``report``
    gets each failed call (error, what was asked) for the collector's issues, as every
    failed read is reported (the runner logs each distinct one once).
    """

    def __init__(self, source: NvmlSource, *, report: Callable[[NvmlError, str], None]) -> None:
        self._source = source
        self._report = report
        self._events: NvmlEventSet | None = None
        self._unavailable = False  # no event sets on this driver (final this session)
        self._unsupported: set[str] = set()  # GPU UUIDs that cannot register (final)
        self._names: dict[Hashable, str] = {}  # device_key -> UUID, registered with the set
        # Per GPU ever watched (its total is served from 0: the series alerts take the
        # increase of, which must not first appear above 0) and Xid, for the process's life.
        self._by_code: dict[str, dict[int, int]] = {}

    def watch(self, uuid: str, handle: NvmlHandle) -> None:
        """Register the GPU once per event set. NOT_SUPPORTED is final; another error is
        tried again next poll, after UNKNOWN with a new set (nvml.h,
        nvmlDeviceRegisterEvents: the set is then in an undefined state, to be freed)."""
        if uuid in self._names.values() or uuid in self._unsupported:
            return
        events = self._event_set()
        if events is None:
            return
        try:
            self._source.register_xid_events(handle, events)
        except NvmlError as error:
            if error.error_name == NOT_SUPPORTED:
                self._unsupported.add(uuid)
                return
            if error.error_name != GPU_IS_LOST:  # a lost GPU: its read reports it
                self._report(error, f"register_xid_events {uuid}")
            if error.error_name == UNKNOWN:
                self._free_set()
            return
        self._names[self._source.device_key(handle)] = uuid
        self._by_code.setdefault(uuid, {})

    def drain(self) -> None:
        """Count the events waiting, up to MAX_EVENTS_PER_POLL, without waiting."""
        for _ in range(MAX_EVENTS_PER_POLL):
            if self._events is None:
                return
            try:
                found = self._source.next_xid(self._events)
            except NvmlError as error:
                self._report(error, "next_xid")
                if error.error_name == GPU_IS_LOST:
                    # A set with a lost GPU may answer so from now on: a new set next
                    # poll, which the lost GPU cannot join, keeps the others counted.
                    self._free_set()
                return
            if found is None:
                return
            handle, xid = found
            # By the registered handle, not by asking NVML: a GPU that fell off the bus
            # (its Xid 79) answers no more calls.
            uuid = self._names.get(self._source.device_key(handle))
            if uuid is None:
                try:
                    uuid = self._source.uuid(handle)
                except NvmlError as error:
                    # The event is taken: say which Xid it was, at least in the log.
                    self._report(error, f"Xid {xid} of a GPU NVML cannot name: uuid")
                    continue
            per_code = self._by_code.setdefault(uuid, {})
            per_code[xid] = per_code.get(xid, 0) + 1

    def with_counts(self, device: DeviceReading) -> DeviceReading:
        """A GPU's reading with its Xid counts (counted, not read: a GPU lost this poll
        keeps them); any other reading as it is."""
        per_code = self._by_code.get(device.name)
        if per_code is None:
            return device
        counted = (
            Sample(GPU_XID_ERRORS, float(sum(per_code.values()))),
            *(
                Sample(GPU_XID_ERRORS_BY_CODE, float(count), (str(xid),))
                for xid, count in sorted(per_code.items())
            ),
        )
        return replace(device, samples=(*device.samples, *counted))

    def forget(self) -> None:
        """Before nvmlShutdown: free the set; the next one registers afresh."""
        self._free_set()
        self._unsupported.clear()
        self._unavailable = False

    def _free_set(self) -> None:
        events, self._events = self._events, None
        self._names.clear()  # registered with that set only: all register again
        if events is not None:
            try:
                self._source.free_event_set(events)
            except NvmlError as error:
                self._report(error, "free_event_set")

    def _event_set(self) -> NvmlEventSet | None:
        if self._events is None and not self._unavailable:
            try:
                self._events = self._source.xid_event_set()
            except NvmlError as error:
                if error.error_name in (NOT_SUPPORTED, FUNCTION_NOT_FOUND):
                    self._unavailable = True  # a driver without event sets
                else:
                    self._report(error, "xid_event_set")  # tried again next poll
        return self._events


class NvmlSession:
    """One collector's use of NVML: its lock, nvmlInit retried with back-off, shutdown.

    Shared by every collector that calls NVML (nvml, gpu_processes), so each gets the
    same retry policy: the driver may load after the exporter, but on a node without
    NVIDIA GPUs a failed init loads and probes libnvidia-ml each time, and the answer
    rarely changes -- so after a failure the same answer is given until the next try,
    INIT_RETRY_INITIAL_S later, doubling to INIT_RETRY_MAX_S.
    """

    def __init__(
        self, source: NvmlSource | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.source: NvmlSource = PynvmlSource() if source is None else source
        self.lock = threading.Lock()
        self._clock = clock
        self._initialized = False
        # After a failed init: the failure repeated until _retry_at.
        self._failure: tuple[type[CollectorError], str] | None = None
        self._retry_at = 0.0
        self._delay_s = INIT_RETRY_INITIAL_S
        # GPU indices whose handle NVML refused with NO_PERMISSION: this process may not
        # open their device nodes, which does not change while it runs.
        self._refused_handles: set[int] = set()

    def device_count(self) -> int:
        """NVML initialised if it was not, then its GPU count; call holding ``lock``.

        Raises CollectorUnavailable without a driver, CollectorError when NVML fails.
        """
        self._ensure_initialized()
        try:
            return self.source.device_count()
        except NvmlError as error:
            raise CollectorError(f"nvmlDeviceGetCount failed: {error.error_name}") from error

    def device_handle(self, index: int) -> NvmlHandle | None:
        """A GPU's handle; call holding ``lock``. Raises NvmlError, NO_PERMISSION once
        per GPU: after it, None (asking every poll would count the same refusal for
        ever) until NVML is initialised afresh."""
        if index in self._refused_handles:
            return None
        try:
            return self.source.device_handle(index)
        except NvmlError as error:
            if error.error_name == NO_PERMISSION:
                self._refused_handles.add(index)
            raise

    def close(self, *, forget: Callable[[], None] = lambda: None) -> None:
        """Shut NVML down (``forget`` drops handles first); a wedged call keeps the lock,
        and process exit cleans up then."""
        if not self.lock.acquire(blocking=False):
            return
        try:
            if not self._initialized:
                return
            self._initialized = False
            self._refused_handles.clear()
            forget()
            try:
                self.source.shutdown()
            except NvmlError as error:
                raise CollectorError(f"nvmlShutdown failed: {error.error_name}") from error
        finally:
            self.lock.release()

    def _ensure_initialized(self) -> None:
        if self._initialized:
            return
        now = self._clock()
        if self._failure is not None and now < self._retry_at:
            # A fresh exception each time: re-raising one would grow its traceback.
            kind, message = self._failure
            raise kind(message)
        try:
            self.source.init()
        except NvmlError as error:
            reason = _ABSENT.get(error.error_name)
            failure: CollectorError = (
                CollectorUnavailable(reason)
                if reason is not None
                else CollectorError(f"nvmlInit failed: {error.error_name}")
            )
            self._retry_at = now + self._delay_s
            self._delay_s = min(self._delay_s * 2, INIT_RETRY_MAX_S)
            self._failure = (type(failure), str(failure))
            raise failure from error
        self._failure = None
        self._delay_s = INIT_RETRY_INITIAL_S
        self._initialized = True


class NvmlCollector(Collector):
    """NVIDIA GPU and MIG device telemetry from NVML."""

    name = "nvml"
    # The GPU device plugin's names (gpu, gpu.shared, the mixed strategy's mig-<profile>),
    # passthrough's pgpu and the DRA driver: NVIDIA's network operator names NICs and RDMA
    # devices under nvidia.com/ too (hostdev, rdma_shared_device_a), which need no NVML.
    serves = ("nvidia.com/gpu", "nvidia.com/mig-", "nvidia.com/pgpu", "gpu.nvidia.com")
    # Counted from 0, so the first of them is an increase alerts can see: the errors
    # that say a GPU is in trouble, and the privilege one.
    known_errors = (GPU_IS_LOST, "RESET_REQUIRED", TIMEOUT, UNKNOWN, NO_PERMISSION)

    def __init__(
        self,
        context: CollectorContext,
        *,
        source: NvmlSource | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(context)
        self._session = NvmlSession(source, clock=clock)
        self._source = self._session.source
        self._clock = clock
        self._gpus: dict[int, _Gpu] = {}
        # Energy counter readings by device_key(), with the clock time of each: this
        # poll's, and the last poll's to serve again while young (so departed ones drop).
        self._energy: dict[Hashable, tuple[float, tuple[Sample, ...]]] = {}
        self._last_energy: dict[Hashable, tuple[float, tuple[Sample, ...]]] = {}
        self._energy_max_age_s = context.nvml_energy_interval_s - INTERVAL_SLACK_S
        # GPM, by device UUID (a MIG device's is new with each reconfiguration; its GPU
        # instance's is "<UUID>/gpu-instance"): whether it can be sampled, asked once an
        # NVML session while the device is listed; its latest sample with what was
        # measured up to it, this poll's and the last poll's (a sample is freed once
        # measured from, or when its device is gone). A sample younger than the interval
        # is kept, and its measurement served.
        self._gpm_supported: dict[str, bool] = {}
        self._gpm: dict[str, _GpmKept] = {}
        self._last_gpm: dict[str, _GpmKept] = {}
        self._gpm_min_age_s = max(
            GPM_MIN_INTERVAL_S, context.nvml_gpm_interval_s - INTERVAL_SLACK_S
        )
        # Each whole GPU's PCIe bytes measured so far, sent and received (None: that
        # direction never answered), kept while the GPU is listed.
        self._pcie_bytes: dict[str, tuple[float | None, float | None]] = {}
        self._poll_started = 0.0  # clock() when this poll's collect() began
        # Placements by (parent UUID, GPU instance, MIG UUID), None where NVML has none:
        # this poll's, and the last poll's to take them from (so departed ones drop).
        self._placements: dict[_PlacementKey, NvmlGpuInstancePlacement | None] = {}
        self._last_placements: dict[_PlacementKey, NvmlGpuInstancePlacement | None] = {}
        self._placement_denied = False
        # Per GPU UUID, the figures a MIG-enabled GPU refused (NO_PERMISSION): not asked
        # again until NVML is initialised afresh or the GPU's MIG mode is off.
        self._mig_denied: dict[str, set[str]] = {}
        self._issues: list[CollectorIssue] = []
        # The driver's versions, read once: they change only with the driver, and a new
        # driver means a new exporter process (the old one holds the module open).
        self._driver: Sample | None = None
        self._xids = XidWatch(self._source, report=self._report_xid_failure)
        # The device being read, named in issue details: the runner logs each distinct
        # detail once, so without it a second GPU's failure would never be logged.
        self._reading = ""

    def collect(self) -> Readings:
        with self._session.lock:
            self._issues = []
            self._last_placements, self._placements = self._placements, {}
            self._last_energy, self._energy = self._energy, {}
            # One time for the poll's energy readings: a slow call on one GPU must not
            # push the GPUs read after it past their due time, a whole poll later.
            self._poll_started = self._clock()
            self._last_gpm, self._gpm = self._gpm, {}
            try:
                count = self._session.device_count()
                driver = self._driver_info()
                devices: list[DeviceReading] = []
                for index in range(count):
                    devices.extend(self._read_gpu(index))
            finally:
                self._free_gpm(self._last_gpm)  # devices not read this poll
            # A GPU no longer listed is counted from 0 if it comes back; one listed keeps
            # its counts (never falling) through a failed sample or metrics call or a
            # lost poll, without any interval left unmeasured.
            listed = {device.name for device in devices}
            self._pcie_bytes = {
                uuid: counted for uuid, counted in self._pcie_bytes.items() if uuid in listed
            }
            # Whether a device can be sampled goes with it too: a MIG reconfiguration
            # names its devices (and GPU instances, "<UUID>/gpu-instance") anew, and the
            # old names would stay for the process's life. One listed again is asked again.
            # By the suffix: a MIG UUID before R470 has "/" in it (MIG-GPU-<uuid>/<gi>/<ci>).
            self._gpm_supported = {
                key: supported
                for key, supported in self._gpm_supported.items()
                if key.removesuffix("/gpu-instance") in listed
            }
            # After the reads, which register GPUs: a GPU's Xids count from its first poll.
            self._xids.drain()
            devices = [self._xids.with_counts(device) for device in devices]
            return Readings(
                devices=tuple(devices),
                node_samples=() if driver is None else (driver,),
                issues=tuple(self._issues),
            )

    def close(self) -> None:
        self._session.close(forget=self._forget)

    def _forget(self) -> None:
        self._free_gpm(self._gpm)  # NVML's memory, before it shuts down
        self._free_gpm(self._last_gpm)
        self._gpm_supported.clear()
        self._pcie_bytes.clear()
        self._xids.forget()
        self._gpus.clear()
        self._energy.clear()  # handles are NVML's, valid until it is shut down
        self._mig_denied.clear()
        self._driver = None

    def _report_xid_failure(self, error: NvmlError, call: str) -> None:
        # Never GPU_IS_LOST's abandon-the-GPU: the Xid calls run outside a GPU's read.
        detail = f"Xid events: {call}: NVML {error.error_name}"
        self._issues.append(issue(error.error_name, detail))

    def _driver_info(self) -> Sample | None:
        """podresources_gpu_driver_info's sample; None (an issue) while a read fails."""
        if self._driver is None:
            self._reading = "driver"
            # GPU_IS_LOST from a call about the driver is counted like any failed read:
            # it names no GPU to leave alone, so it must not end the poll's GPU reads.
            version = None
            with contextlib.suppress(_GpuLostError):
                version, _ = self._attempt(self._source.driver_version)
            settled = True
            try:
                cuda: int | None = self._source.cuda_driver_version()
            except NvmlError as error:
                cuda = None
                # FUNCTION_NOT_FOUND: a driver older than the call, not a fault; any other
                # error is a failed read, asked again next poll.
                if error.error_name not in (NOT_SUPPORTED, FUNCTION_NOT_FOUND):
                    settled = False
                    with contextlib.suppress(_GpuLostError):
                        self._count(error, "cuda_driver_version")
            if version is not None:
                # nvidia-smi's "CUDA Version": 13000 is 13.0, 12040 is 12.4.
                cuda_text = "" if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}"
                sample = Sample(GPU_DRIVER_INFO, 1.0, ("nvidia", version, cuda_text))
                if not settled:
                    return sample  # not kept: the CUDA version is asked again
                self._driver = sample
        return self._driver

    def _attempt(
        self,
        read: Callable[_P, _T],
        /,
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> tuple[_T | None, bool]:
        """``(value, settled)``; settled is False after an error worth retrying."""
        try:
            return read(*args, **kwargs), True
        except NvmlError as error:
            if error.error_name == NOT_SUPPORTED:
                return None, True
            self._count(error, getattr(read, "__name__", "nvml call"))
            return None, False

    def _count(self, error: NvmlError, call: str) -> None:
        """Report a real error; after GPU_IS_LOST, leave that GPU alone this poll."""
        detail = f"{self._reading}: {call.strip('_')}: NVML {error.error_name}"
        self._issues.append(issue(error.error_name, detail))
        if error.error_name == GPU_IS_LOST:
            raise _GpuLostError from error

    def _read_gpu(self, index: int) -> list[DeviceReading]:
        self._reading = f"GPU index {index}"
        try:
            gpu = self._gpu(index)
        except _GpuLostError:
            return []
        if gpu is None:
            return []
        self._reading = gpu.uuid
        samples: list[Sample] = []
        migs: list[DeviceReading] = []
        self._xids.watch(gpu.uuid, gpu.handle)
        try:
            # Asked once a poll (~0.15 ms on an H100): MIG mode can change while we run.
            mode, settled = self._attempt(self._source.mig_enabled, gpu.handle)
            mig_enabled = bool(mode)
            if settled and not mig_enabled:
                # MIG off (or no MIG at all: NOT_SUPPORTED), as NVML said, not as a failed
                # read would have it: the whole GPU answers its aggregate figures again.
                self._mig_denied.pop(gpu.uuid, None)
            self._read_figures(
                gpu.handle, samples, gpu=gpu, mig_enabled=mig_enabled, mig_known=settled
            )
            self._gpm_figures(gpu.handle, gpu.uuid, samples, whole_gpu=True)
            samples.extend(self._pcie_samples(gpu.uuid))
            if mig_enabled:
                self._read_migs(gpu, migs)
        except _GpuLostError:
            pass  # reported; what was read before it fell off the bus stays
        keys = [HardwareKey(KeyKind.GPU_UUID, gpu.uuid)]
        if gpu.minor is not None:
            keys.append(HardwareKey(KeyKind.NVIDIA_MINOR, str(gpu.minor)))
        if gpu.identity.pci_address is not None:
            keys.append(HardwareKey(KeyKind.PCI, gpu.identity.pci_address))
        reading = DeviceReading(gpu.uuid, tuple(keys), gpu.identity, tuple(samples), True)
        return [reading, *migs]

    def _gpu(self, index: int) -> _Gpu | None:
        cached = self._gpus.get(index)
        if cached is not None:
            return cached
        source = self._source
        # None as well for a GPU NVML refused before (the session asks it once).
        handle, _ = self._attempt(self._session.device_handle, index)
        if handle is None:
            return None
        uuid, _ = self._attempt(source.uuid, handle)
        if uuid is None:
            return None
        self._reading = uuid
        name, name_settled = self._attempt(source.name, handle)
        bus_id, bus_settled = self._attempt(source.pci_bus_id, handle)
        minor, minor_settled = self._attempt(source.minor_number, handle)
        identity = DeviceIdentity(
            uuid=uuid,
            # NVML's 00000000:17:00.0 as the kernel writes it: 0000:17:00.0.
            pci_address=None if bus_id is None else parse_pci_address(bus_id),
            model=name,
            vendor="nvidia",
        )
        gpu = _Gpu(handle=handle, uuid=uuid, minor=minor, identity=identity)
        if name_settled and bus_settled and minor_settled:
            self._gpus[index] = gpu
        return gpu

    def _read_figures(
        self,
        handle: NvmlHandle,
        samples: list[Sample],
        *,
        gpu: _Gpu | None = None,
        mig_enabled: bool = False,
        mig_known: bool = True,
    ) -> None:
        """A device's figures. A whole GPU (``gpu``) with MIG enabled gives its aggregate
        memory only to a privileged caller (nvml.h, nvmlDeviceGetMemoryInfo): its
        NO_PERMISSION is one issue, then that figure is not asked again (the exporter's
        privileges do not change while it runs; every poll would only repeat it)."""
        denied = self._mig_denied.setdefault(gpu.uuid, set()) if gpu is not None else None
        for figure in _FIGURES if gpu is None else _GPU_FIGURES:
            name = figure.__name__.strip("_")
            if denied is not None and name in denied:
                continue
            # MIG mode unread (its read failed): maybe enabled, so not asked this poll
            if (mig_enabled or not mig_known) and figure in _NOT_WITH_MIG:
                continue
            try:
                if figure is _energy:
                    samples.extend(self._energy_samples(handle))
                else:
                    samples.extend(figure(self._source, handle))
            except _PartialFigure as partial:
                samples.extend(partial.samples)
                self._count(partial.error, figure.__name__)
            except NvmlError as error:
                if error.error_name == NOT_SUPPORTED:
                    continue
                refused = error.error_name == NO_PERMISSION
                if refused and gpu is not None and denied is not None and mig_enabled:
                    denied.add(name)
                    detail = (
                        f"{gpu.uuid}: {name}: NVML {NO_PERMISSION}; MIG-enabled GPU, not "
                        "asked again (needs NVIDIA_MIG_MONITOR_DEVICES=all and CAP_SYS_ADMIN)"
                    )
                    self._issues.append(issue(NO_PERMISSION, detail))
                    continue
                self._count(error, figure.__name__)

    def _gpm_figures(
        self, handle: NvmlHandle, uuid: str, samples: list[Sample], *, whole_gpu: bool
    ) -> None:
        """The device's GPM figures since its sample of the last poll, and this poll's
        sample, kept for the next. A device that cannot be sampled (before Hopper; a vGPU
        guest; a refusal) is not asked again until NVML is initialised afresh."""
        if not self._gpm_ok(handle, uuid):
            return
        asked = _GPM_GPU_METRICS if whole_gpu else _GPM_METRICS
        ids = _GPM_GPU_METRIC_IDS if whole_gpu else _GPM_METRIC_IDS
        measured = self._gpm_measure(
            uuid, _DEVICE_CALLS, functools.partial(self._source.gpm_sample, handle), ids
        )
        if measured is None:
            return
        metrics, seconds = measured
        samples.extend(_gpm_samples(metrics.values[: len(asked)], asked))
        if whole_gpu:
            self._add_pcie_bytes(uuid, metrics.values[len(asked) :], seconds)
        if metrics.failure is not None:
            self._count(metrics.failure, _DEVICE_CALLS[1])

    def _gpm_ok(self, handle: NvmlHandle, uuid: str) -> bool:
        """Whether the device can be sampled, asked once an NVML session."""
        supported = self._gpm_supported.get(uuid)
        if supported is None:
            try:
                supported = self._source.gpm_supported(handle)
            except NvmlError as error:
                if not self._gpm_refused(uuid, error, "gpm_supported"):
                    self._count(error, "gpm_supported")  # asked again next poll
                return False
            self._gpm_supported[uuid] = supported
        return supported

    def _gpm_measure(
        self,
        key: str,
        calls: tuple[str, str],
        take: Callable[[], NvmlGpmSample],
        metric_ids: tuple[int, ...],
    ) -> tuple[NvmlGpmMetrics, float] | None:
        """The metrics between the sample under ``key`` kept from the last poll and one
        ``take``n now, with the seconds between them; this poll's sample is kept for the
        next, the last one freed. Before --collector.nvml.gpm-interval has passed since
        the kept sample, no sample is taken: the kept sample stays, and what was measured
        up to it is served again, over 0 seconds and with no failure (already reported).
        None for a first sample, or a failure (reported, named by ``calls``: the sample's,
        the metrics'). A sample that fails keeps the older one for the next poll to
        measure from (not when the GPU is lost or refuses GPM: it is freed)."""
        call, metrics_call = calls
        last = self._last_gpm.pop(key, None)
        now = self._poll_started
        if last is not None and now - last.taken < self._gpm_min_age_s:
            self._gpm[key] = last  # too soon to measure again: the older sample stays
            if last.measured is None:
                return None
            return replace(last.measured, failure=None), 0.0
        try:
            try:
                sample = take()
            except NvmlError as error:
                if not self._gpm_refused(key, error, call):
                    self._count(error, call)  # raises for GPU_IS_LOST: the sample goes
                    if last is not None:
                        # The older sample stays, its measurement no longer served: the
                        # next poll that samples measures the whole time since it.
                        self._gpm[key] = replace(last, measured=None)
                        last = None
                return None
            self._gpm[key] = _GpmKept(now, sample, None)
            if last is None:
                return None  # the first sample: figures from the next measurement on
            try:
                metrics = self._source.gpm_metrics(last.sample, sample, metric_ids)
            except NvmlError as error:
                self._count(error, metrics_call)
                return None
            self._gpm[key] = _GpmKept(now, sample, metrics)
            return metrics, now - last.taken
        finally:
            if last is not None:
                self._free_gpm_sample(last.sample)

    def _gpu_instance_dram(self, gpu: _Gpu, mig: _Mig) -> _Mig:
        """A MIG device alone in its GPU instance, with the instance's DRAM bandwidth
        (nvmlGpmMigSampleGet, as DCGM reads it, per GPU instance): all of it the
        device's, as no other compute instance shares the instance's memory. Asked only
        of a device whose own GPM answers."""
        uuid = mig.reading.name
        key = f"{uuid}/gpu-instance"
        instance = mig.gpu_instance
        if instance is None or not self._gpm_supported.get(uuid):
            return mig
        if not self._gpm_supported.get(key, True):
            return mig  # refused before
        self._reading = uuid
        measured = self._gpm_measure(
            key,
            _INSTANCE_CALLS,
            functools.partial(self._source.gpm_mig_sample, gpu.handle, instance),
            _GPM_GPU_INSTANCE_METRIC_IDS,
        )
        if measured is None:
            return mig
        metrics, _ = measured
        dram = _gpm_samples(metrics.values, _GPM_GPU_INSTANCE_METRICS)
        reading = replace(mig.reading, samples=(*mig.reading.samples, *dram))
        if metrics.failure is not None:
            self._count(metrics.failure, _INSTANCE_CALLS[1])
        return replace(mig, reading=reading)

    def _add_pcie_bytes(
        self, uuid: str, rates_mib_s: tuple[float | None, ...], seconds: float
    ) -> None:
        """Add the bytes GPM's PCIe rates mean over ``seconds`` to the GPU's counts; a
        direction that did not answer this time adds nothing."""
        sent, received = self._pcie_bytes.get(uuid, (None, None))
        transmit, receive = rates_mib_s
        self._pcie_bytes[uuid] = (
            _bytes_added(sent, transmit, seconds),
            _bytes_added(received, receive, seconds),
        )

    def _pcie_samples(self, uuid: str) -> tuple[Sample, ...]:
        """The GPU's PCIe byte counts so far, each direction that has one."""
        counted = self._pcie_bytes.get(uuid, (None, None))
        return tuple(
            Sample(spec, total)
            for (_, spec), total in zip(_GPM_PCIE, counted, strict=True)
            if total is not None
        )

    def _gpm_refused(self, uuid: str, error: NvmlError, call: str) -> bool:
        """Whether ``error`` says the device is not to be asked for GPM again (until NVML
        is initialised afresh): NOT_SUPPORTED, FUNCTION_NOT_FOUND (a driver without the
        call), or NO_PERMISSION, the exporter's privileges, one issue."""
        if error.error_name not in (NOT_SUPPORTED, FUNCTION_NOT_FOUND, NO_PERMISSION):
            return False
        self._gpm_supported[uuid] = False
        if error.error_name == NO_PERMISSION:
            detail = f"{uuid}: {call}: NVML {NO_PERMISSION}; not asked again"
            self._issues.append(issue(NO_PERMISSION, detail))
        return True

    def _free_gpm(self, kept: dict[str, _GpmKept]) -> None:
        """Free GPM samples and forget them."""
        for gpm in kept.values():
            self._free_gpm_sample(gpm.sample)
        kept.clear()

    def _free_gpm_sample(self, sample: NvmlGpmSample) -> None:
        # Freeing host memory fails only for a bad pointer: nothing to report or retry.
        with contextlib.suppress(NvmlError):
            self._source.gpm_free(sample)

    def _energy_samples(self, handle: NvmlHandle) -> tuple[Sample, ...]:
        """The energy counter's samples: the last reading while it is younger than
        --collector.nvml.energy-interval, else a fresh one. A read that fails raises, as
        any figure's, and is tried again next poll."""
        key = self._source.device_key(handle)
        now = self._poll_started
        kept = self._last_energy.get(key)
        if kept is None or now - kept[0] >= self._energy_max_age_s:
            kept = (now, _energy(self._source, handle))
        self._energy[key] = kept
        return kept[1]

    def _read_migs(self, gpu: _Gpu, migs: list[DeviceReading]) -> None:
        """The MIG devices of a GPU whose MIG mode is on."""
        # MIG devices come and go with reconfiguration: read afresh every poll.
        source = self._source
        slots, _ = self._attempt(source.max_mig_device_count, gpu.handle)
        found: list[_Mig] = []
        # Whether every MIG device NVML has was read with its GPU instance: one it failed
        # to list or to place may share any instance, so none is then known to be alone.
        complete = True
        try:
            for slot in range(slots or 0):
                self._reading = f"{gpu.uuid} MIG slot {slot}"
                try:
                    handle = source.mig_device_handle(gpu.handle, slot)
                except NvmlError as error:
                    if error.error_name not in (NOT_FOUND, NOT_SUPPORTED):  # NOT_FOUND: empty
                        self._count(error, "mig_device_handle")
                        complete = False
                    continue
                mig = self._read_mig(gpu, handle)
                if mig is None or mig.gpu_instance is None:
                    complete = False
                if mig is not None:
                    found.append(mig)
            if complete:
                per_instance = Counter(mig.gpu_instance for mig in found)
                found = [
                    self._gpu_instance_dram(gpu, mig)
                    if per_instance[mig.gpu_instance] == 1
                    else mig
                    for mig in found
                ]
        finally:
            migs.extend(_with_instance_keys(gpu, found))

    def _read_mig(self, gpu: _Gpu, handle: NvmlHandle) -> _Mig | None:
        source = self._source
        uuid, _ = self._attempt(source.uuid, handle)
        if uuid is None:
            return None
        self._reading = uuid
        name, _ = self._attempt(source.name, handle)
        gpu_instance, _ = self._attempt(source.gpu_instance_id, handle)
        compute_instance, _ = self._attempt(source.compute_instance_id, handle)
        placement = None
        if gpu_instance is not None and gpu.minor is not None:
            placement = self._placement(gpu, gpu_instance, uuid)
        samples: list[Sample] = []
        self._read_figures(handle, samples)
        self._gpm_figures(handle, uuid, samples, whole_gpu=False)
        keys = [HardwareKey(KeyKind.MIG_UUID, uuid)]
        if gpu_instance is not None and compute_instance is not None:
            path = f"{gpu.uuid}/{gpu_instance}/{compute_instance}"
            keys.append(HardwareKey(KeyKind.MIG_PATH, path))
        identity = DeviceIdentity(
            uuid=uuid,
            pci_address=gpu.identity.pci_address,
            model=gpu.identity.model if name is None else name,
            vendor="nvidia",
        )
        reading = DeviceReading(uuid, tuple(keys), identity, tuple(samples), True)
        return _Mig(gpu_instance, compute_instance, placement, reading)

    def _placement(
        self, gpu: _Gpu, gpu_instance: int, uuid: str
    ) -> NvmlGpuInstancePlacement | None:
        """The MIG device's GPU-instance placement, asked once while the device exists."""
        key = (gpu.uuid, gpu_instance, uuid)
        if key in self._last_placements:
            placement = self._last_placements[key]
        elif self._placement_denied:
            return None
        else:
            try:
                placement = self._source.gpu_instance_placement(gpu.handle, gpu_instance)
            except NvmlError as error:
                if error.error_name == NO_PERMISSION:
                    # The exporter's privileges: the same answer for every GPU instance,
                    # so reported once and never asked again.
                    self._placement_denied = True
                    detail = (
                        f"{uuid}: gpu_instance_placement: NVML {NO_PERMISSION}; "
                        "not asked again, MIG devices get no placement key"
                    )
                    self._issues.append(issue(NO_PERMISSION, detail))
                    return None
                if error.error_name != NOT_SUPPORTED:
                    self._count(error, "gpu_instance_placement")
                    return None  # asked again next poll
                placement = None
        self._placements[key] = placement
        return placement


def _with_instance_keys(gpu: _Gpu, migs: list[_Mig]) -> list[DeviceReading]:
    """MIG readings by GPU then compute instance; the first compute instance of each GPU
    instance also answers for the GPU instance as a whole (``<minor>/<gi>``, and
    ``<minor>/<profile ID>/<placement start>`` where the placement is known)."""
    ordered = sorted(
        migs,
        key=lambda m: (
            -1 if m.gpu_instance is None else m.gpu_instance,
            -1 if m.compute_instance is None else m.compute_instance,
        ),
    )
    readings: list[DeviceReading] = []
    claimed: set[int] = set()
    for mig in ordered:
        reading = mig.reading
        instance = mig.gpu_instance
        if instance is not None and gpu.minor is not None and instance not in claimed:
            claimed.add(instance)
            keys = [HardwareKey(KeyKind.NVIDIA_MINOR_GI, f"{gpu.minor}/{instance}")]
            if mig.placement is not None:
                slot = f"{gpu.minor}/{mig.placement.profile_id}/{mig.placement.start}"
                keys.append(HardwareKey(KeyKind.MIG_PLACEMENT, slot))
            reading = DeviceReading(
                reading.name,
                (*reading.keys, *keys),
                reading.identity,
                reading.samples,
                reading.standalone,
            )
        readings.append(reading)
    return readings


REGISTRATION = Registration(
    "nvml", "NVIDIA GPUs and MIG devices through NVML (libnvidia-ml.so.1)", NvmlCollector
)
