"""A simulated NVML: answers ``NvmlSource`` calls for the GPUs of a ``SimHardware``.

The demo uses it so it has GPU telemetry without a GPU, a driver or a compiler. Every
figure is a pure function of the hardware description and ``clock()`` (seconds), so a
fixed clock gives a fixed exposition:

- utilization wobbles by +-10 % around ``SimGpu.utilization`` over a minute (an idle
  GPU stays at 0); NVML answers whole percent, and every other figure follows that;
  its memory is busy two thirds of that;
- memory used is that share of the total (of the instance's total for a MIG device);
- power is ``limit * (0.2 + 0.7 * utilization)``, the limit itself from 90 % utilization
  (where the clocks are held at the power cap, below); energy grows linearly with the clock
  at the power of the base utilization, as if the driver had loaded a day before 0;
- temperature is ``30 + utilization% / 2``, the memory's (HBM) 5 °C above it; the SM
  clock 1980 MHz, 345 MHz when idle; clocks are held at the power cap from 90 %
  utilization, and idle below 1 %.

Like a real MIG-enabled board, a MIG GPU answers NOT_SUPPORTED for its utilization and
its remapped rows (nvml.h: not with active instances), and its MIG devices answer only
identity, memory and their process lists. GPU instances give their placement, as NVML
does to a privileged caller. Memory is healthy: no ECC error, no remapped row. A GPU
whose PCIe link (``SimHardware.pcie_links``) trained at fewer lanes than it can run at
replays ``REPLAYS_PER_S_NARROW_LINK`` packets a second since its reset (when the driver
loaded, a day before 0); the others none. A GPU with NVLinks (``SimGpu.nvlinks``) sends
and receives ``NVLINK_BYTES_PER_S_BUSY`` times its base utilization a second each way
since the driver loaded, its links active but ``SimGpu.nvlinks_down``, its error
counters fixed but for a burst (``SimGpu.nvlink_burst``) ``NVLINK_BURST_AFTER_DRAINS``
drains (polls) after they are first read; a MIG-enabled one reports every link
inactive, as NVML does (the bug DCGM works around), and a GPU without NVLinks
NOT_SUPPORTED. A GPU with NVLinks sits on an NVSwitch board, its fabric registration
completed and reporting no health problem; one without is in no fabric. A GPU's Xids
(``SimGpu.xids``) are raised ``XID_AFTER_DRAINS`` drains after it is first watched.
The burst and the Xids come while the GPU is watched: the alerts read increases, and a
count the exporter finds at its start is no increase.

Every GPU is a Hopper, so GPM samples it, each of its MIG devices and each GPU instance
(a MIG device, or an instance, at its GPU's load). Between two samples GPM answers, as
percentages of the utilization at the newer one, what a transformer training step looks
like: graphics engine 100, SMs active 90, occupancy 40, tensor pipes 60, FP32 25, FP16
10, FP64 2, DRAM bandwidth 67 (the memory's busy share above); PCIe 20 MiB/s sent and
80 MiB/s received for each percent, as a job streams its batches in.

Processes (``SimHardware.gpu_processes``) are listed on their device as compute
processes; each whole-GPU process has one utilization sample per poll, stamped with
the clock (in NVML's microseconds), so a poll at the same clock sees none new.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from exporter.collectors.nvml import (
    FABRIC_STATE_COMPLETED,
    NVLINK_ERROR_TYPES,
    EccErrorType,
    NvmlError,
    NvmlEventSet,
    NvmlFabric,
    NvmlGpmMetrics,
    NvmlGpmSample,
    NvmlGpuInstancePlacement,
    NvmlHandle,
    NvmlMemory,
    NvmlNvLinkFields,
    NvmlProcess,
    NvmlProcessSample,
    NvmlRemappedRows,
    NvmlRetiredPages,
    NvmlSource,
    NvmlUtilization,
)
from exporter.sim.hardware import SimGpu, SimHardware, SimMigDevice

__all__ = [
    "MAX_MIG_DEVICES",
    "SIM_CUDA_DRIVER_VERSION",
    "SIM_DRIVER_VERSION",
    "SimulatedNvmlSource",
]

MAX_MIG_DEVICES = 7  # MIG slots of an A100/H100
# The driver the simulated node runs: the one seen on an H100 (nvidia-smi's 13.0).
SIM_DRIVER_VERSION = "580.159.04"
SIM_CUDA_DRIVER_VERSION = 13000
WOBBLE_PERIOD_S = 60.0
WOBBLE = 0.1  # relative amplitude
DRIVER_UPTIME_AT_ZERO_S = 86_400.0
SM_CLOCK_BUSY_MHZ = 1980
SM_CLOCK_IDLE_MHZ = 345
POWER_CAPPED_PERCENT = 90
CLOCKS_EVENT_GPU_IDLE = 0x1  # nvml.h's nvmlClocksEventReasonGpuIdle
CLOCKS_EVENT_SW_POWER_CAP = 0x4  # nvmlClocksEventReasonSwPowerCap
# 30 a minute: above the 15.4 the spec's error rate allows 8 lanes at 32 GT/s, so
# PodresourcesGPUPCIeReplays would fire for it: a card to reseat
REPLAYS_PER_S_NARROW_LINK = 0.5
# An all-reduce heavy job's share of an H100's 450 GB/s each way
NVLINK_BYTES_PER_S_BUSY = 150e9
# nvml.h's fabric health mask with every problem reported absent: DEGRADED_BW,
# ROUTE_RECOVERY, ROUTE_UNHEALTHY and ACCESS_TIMEOUT_RECOVERY FALSE (2 in each two-bit
# field), INCORRECT_CONFIGURATION NONE (1 at bit 8); the fields after them unreported.
FABRIC_HEALTHY = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8


# GPM metric ID (nvml.h's nvmlGpmMetricId_t) -> its value for each percent of the
# device's utilization: a share of it, or for PCIe traffic (20 sent, 21 received) MiB/s
GPM_SHARES = {
    1: 1.0,  # graphics engine
    2: 0.9,  # SMs active
    3: 0.4,  # SM occupancy
    5: 0.6,  # any tensor pipe
    10: 2 / 3,  # DRAM bandwidth: the memory's busy share
    11: 0.02,  # FP64
    12: 0.25,  # FP32
    13: 0.1,  # FP16
    20: 20.0,  # PCIe sent, MiB/s
    21: 80.0,  # PCIe received, MiB/s
}


@dataclass(frozen=True, slots=True)
class _SimHandle:
    gpu: SimGpu
    mig: SimMigDevice | None = None


@dataclass(frozen=True, slots=True)
class _SimGpmSample:
    device: _SimHandle
    taken_at: float  # clock() seconds


# Drains (polls) after a GPU is first watched that its Xids are raised: a minute at the
# default 10 s poll, so that a Prometheus scraping every 30 s has seen the count at 0.
XID_AFTER_DRAINS = 6
# Drains (polls) after a GPU's NVLink error counters are first read that its burst of
# errors (SimGpu.nvlink_burst) is counted: as for the Xids, a minute at the default poll,
# so that a Prometheus scraping every 30 s has seen the counts from before.
NVLINK_BURST_AFTER_DRAINS = 6


class SimulatedNvmlSource(NvmlSource):
    """``NvmlSource`` for simulated GPUs; telemetry follows ``clock()`` in seconds."""

    def __init__(self, hardware: SimHardware, *, clock: Callable[[], float]) -> None:
        self._gpus = hardware.gpus
        self._processes = hardware.gpu_processes
        self._narrow_links = frozenset(
            address for address, link in hardware.pcie_links if link.width < link.max_width
        )
        self._clock = clock
        self._initialized = False
        self._xids_raised: set[str] = set()
        # Xids raised XID_AFTER_DRAINS drains after their GPU is first watched (with the
        # drain each is due at), and those raised, read at the next drain: a fault while
        # the GPU is watched, its counters served at 0 for a minute of polls before (one
        # raised at the first poll would be born at 1, and increase(), which the Xid
        # alert reads, never sees a series' first value).
        self._drains = 0
        self._xids_due: list[tuple[int, SimGpu, int]] = []
        self._xids_waiting: list[tuple[SimGpu, int]] = []
        # The drain each GPU's NVLink counters were first read at: its burst is counted
        # from NVLINK_BURST_AFTER_DRAINS drains after (one counted at the first read
        # would be in the series' first value, which the NVLink errors alert's
        # increase() and rate() never see).
        self._nvlinks_first_read: dict[str, int] = {}

    def init(self) -> None:
        self._initialized = True

    def shutdown(self) -> None:
        self._initialized = False

    def xid_event_set(self) -> NvmlEventSet:
        self._require_initialized()
        return NvmlEventSet(object())

    def register_xid_events(self, handle: NvmlHandle, events: NvmlEventSet) -> None:
        # A GPU's Xids are raised once after it is first watched, once in the process's
        # life (the driver does not raise an Xid again for a new watcher).
        gpu = _whole(handle)
        if gpu.uuid not in self._xids_raised:
            self._xids_raised.add(gpu.uuid)
            due = self._drains + XID_AFTER_DRAINS
            self._xids_due.extend((due, gpu, xid) for xid in gpu.xids)

    def next_xid(self, events: NvmlEventSet) -> tuple[NvmlHandle, int] | None:
        if not self._xids_waiting:
            # The end of a drain: what is due by now is raised, for the next one to read.
            self._drains += 1
            now = self._drains
            self._xids_waiting = [(gpu, xid) for due, gpu, xid in self._xids_due if due <= now]
            self._xids_due = [entry for entry in self._xids_due if entry[0] > now]
            return None
        gpu, xid = self._xids_waiting.pop(0)
        return NvmlHandle(_SimHandle(gpu)), xid

    def free_event_set(self, events: NvmlEventSet) -> None:
        self._xids_due.clear()
        self._xids_waiting.clear()

    def device_key(self, handle: NvmlHandle) -> Hashable:
        sim = _unwrap(handle)
        return (sim.gpu.uuid, None if sim.mig is None else sim.mig.uuid)

    def driver_version(self) -> str:
        self._require_initialized()
        return SIM_DRIVER_VERSION

    def cuda_driver_version(self) -> int:
        self._require_initialized()
        return SIM_CUDA_DRIVER_VERSION

    def device_count(self) -> int:
        self._require_initialized()
        return len(self._gpus)

    def device_handle(self, index: int) -> NvmlHandle:
        self._require_initialized()
        if not 0 <= index < len(self._gpus):
            raise NvmlError("INVALID_ARGUMENT")
        return NvmlHandle(_SimHandle(self._gpus[index]))

    def uuid(self, handle: NvmlHandle) -> str:
        sim = _unwrap(handle)
        return sim.gpu.uuid if sim.mig is None else sim.mig.uuid

    def name(self, handle: NvmlHandle) -> str:
        sim = _unwrap(handle)
        return sim.gpu.model if sim.mig is None else f"{sim.gpu.model} MIG {sim.mig.profile}"

    def pci_bus_id(self, handle: NvmlHandle) -> str:
        domain, bus, device_function = _unwrap(handle).gpu.pci_address.split(":")
        return f"{int(domain, 16):08X}:{bus.upper()}:{device_function.upper()}"

    def minor_number(self, handle: NvmlHandle) -> int:
        return _whole(handle).index

    def mig_enabled(self, handle: NvmlHandle) -> bool:
        return bool(_whole(handle).mig_devices)

    def max_mig_device_count(self, handle: NvmlHandle) -> int:
        return MAX_MIG_DEVICES if _whole(handle).mig_devices else 0

    def mig_device_handle(self, handle: NvmlHandle, index: int) -> NvmlHandle:
        gpu = _whole(handle)
        if not gpu.mig_devices or not 0 <= index < MAX_MIG_DEVICES:
            raise NvmlError("INVALID_ARGUMENT")
        if index >= len(gpu.mig_devices):
            raise NvmlError("NOT_FOUND")
        return NvmlHandle(_SimHandle(gpu, gpu.mig_devices[index]))

    def gpu_instance_id(self, handle: NvmlHandle) -> int:
        return _mig(handle).gpu_instance

    def compute_instance_id(self, handle: NvmlHandle) -> int:
        return _mig(handle).compute_instance

    def gpu_instance_placement(
        self, handle: NvmlHandle, gpu_instance_id: int
    ) -> NvmlGpuInstancePlacement:
        gpu = _whole(handle)
        if not gpu.mig_devices:
            raise NvmlError("NOT_SUPPORTED")  # as NVML where MIG mode is off
        for mig in gpu.mig_devices:
            if mig.gpu_instance == gpu_instance_id:
                return NvmlGpuInstancePlacement(mig.profile_id, mig.placement_start)
        raise NvmlError("NOT_FOUND")

    def utilization(self, handle: NvmlHandle) -> NvmlUtilization:
        gpu = _whole(handle)
        if gpu.mig_devices:
            raise NvmlError("NOT_SUPPORTED")  # as NVML on a MIG-enabled GPU
        percent = self._percent(gpu)
        return NvmlUtilization(gpu_percent=percent, memory_percent=percent * 2 // 3)

    def encoder_percent(self, handle: NvmlHandle) -> int:
        return _video_percent(handle)

    def decoder_percent(self, handle: NvmlHandle) -> int:
        return _video_percent(handle)

    def memory(self, handle: NvmlHandle) -> NvmlMemory:
        sim = _unwrap(handle)
        total = sim.gpu.memory_total_bytes if sim.mig is None else sim.mig.memory_total_bytes
        return NvmlMemory(total_bytes=total, used_bytes=total * self._percent(sim.gpu) // 100)

    def power_milliwatts(self, handle: NvmlHandle) -> int:
        gpu = _whole(handle)
        percent = self._percent(gpu)
        if percent >= POWER_CAPPED_PERCENT:  # held at its limit, as clocks_event_reasons says
            return round(gpu.power_limit_watts * 1000)
        return round(_power_watts(gpu, percent / 100) * 1000)

    def energy_millijoules(self, handle: NvmlHandle) -> int:
        gpu = _whole(handle)
        uptime_s = DRIVER_UPTIME_AT_ZERO_S + max(self._clock(), 0.0)
        return round(_power_watts(gpu, gpu.utilization) * uptime_s * 1000)

    def temperature_celsius(self, handle: NvmlHandle) -> int:
        return 30 + self._percent(_whole(handle)) // 2

    def memory_temperature_celsius(self, handle: NvmlHandle) -> int:
        return 35 + self._percent(_whole(handle)) // 2

    def recovery_action(self, handle: NvmlHandle) -> int:
        _whole(handle)
        return 0  # NVML_GPU_RECOVERY_ACTION_NONE: the simulated GPUs have had no fault

    def sm_clock_mhz(self, handle: NvmlHandle) -> int:
        return SM_CLOCK_BUSY_MHZ if self._percent(_whole(handle)) else SM_CLOCK_IDLE_MHZ

    def clocks_event_reasons(self, handle: NvmlHandle) -> int:
        percent = self._percent(_whole(handle))
        if percent >= POWER_CAPPED_PERCENT:
            return CLOCKS_EVENT_SW_POWER_CAP
        return CLOCKS_EVENT_GPU_IDLE if percent == 0 else 0

    def ecc_errors(self, handle: NvmlHandle, error_type: EccErrorType) -> int:
        _whole(handle)
        return 0

    def remapped_rows(self, handle: NvmlHandle) -> NvmlRemappedRows:
        gpu = _whole(handle)
        if gpu.mig_devices:
            raise NvmlError("NOT_SUPPORTED")  # nvml.h: not with active MIG instances
        return NvmlRemappedRows(correctable=0, uncorrectable=0, pending=False, failed=False)

    def retired_pages(self, handle: NvmlHandle) -> NvmlRetiredPages:
        _whole(handle)
        raise NvmlError("NOT_SUPPORTED")  # H100s remap rows instead

    def pcie_replays(self, handle: NvmlHandle) -> int:
        gpu = _whole(handle)
        if gpu.pci_address not in self._narrow_links:
            return 0
        uptime_s = DRIVER_UPTIME_AT_ZERO_S + max(self._clock(), 0.0)
        return int(REPLAYS_PER_S_NARROW_LINK * uptime_s)

    def nvlink_fields(self, handle: NvmlHandle) -> NvmlNvLinkFields:
        gpu = _with_nvlinks(handle)
        uptime_s = DRIVER_UPTIME_AT_ZERO_S + max(self._clock(), 0.0)
        kib = int(NVLINK_BYTES_PER_S_BUSY * gpu.utilization * uptime_s) // 1024
        errors = dict(gpu.nvlink_errors)
        first_read = self._nvlinks_first_read.setdefault(gpu.uuid, self._drains)
        if self._drains >= first_read + NVLINK_BURST_AFTER_DRAINS:
            for kind, count in gpu.nvlink_burst:
                errors[kind] = errors.get(kind, 0) + count
        return NvmlNvLinkFields(
            link_count=gpu.nvlinks,
            errors=tuple((kind, errors.get(kind, 0)) for kind in NVLINK_ERROR_TYPES),
            transmit_kib=kib,
            receive_kib=kib,
        )

    def nvlink_active(self, handle: NvmlHandle, link: int) -> bool:
        gpu = _with_nvlinks(handle)
        if not 0 <= link < gpu.nvlinks:
            raise NvmlError("INVALID_ARGUMENT")
        return not gpu.mig_devices and link not in gpu.nvlinks_down

    def fabric(self, handle: NvmlHandle) -> NvmlFabric:
        gpu = _whole(handle)
        if not gpu.nvlinks:
            return NvmlFabric(state=0, status=0)
        return NvmlFabric(state=FABRIC_STATE_COMPLETED, status=0, health_mask=FABRIC_HEALTHY)

    def gpm_supported(self, handle: NvmlHandle) -> bool:
        _unwrap(handle)
        return True

    def gpm_sample(self, handle: NvmlHandle) -> NvmlGpmSample:
        self._require_initialized()
        return NvmlGpmSample(_SimGpmSample(_unwrap(handle), self._clock()))

    def gpm_mig_sample(self, handle: NvmlHandle, gpu_instance: int) -> NvmlGpmSample:
        self._require_initialized()
        gpu = _whole(handle)
        for mig in gpu.mig_devices:
            if mig.gpu_instance == gpu_instance:  # the instance's load is its first device's
                return NvmlGpmSample(_SimGpmSample(_SimHandle(gpu, mig), self._clock()))
        raise NvmlError("NOT_FOUND")

    def gpm_metrics(
        self, older: NvmlGpmSample, newer: NvmlGpmSample, metric_ids: tuple[int, ...]
    ) -> NvmlGpmMetrics:
        if not (isinstance(older, _SimGpmSample) and isinstance(newer, _SimGpmSample)):
            raise NvmlError("INVALID_ARGUMENT")
        if older.device != newer.device or older.taken_at > newer.taken_at:
            raise NvmlError("INVALID_ARGUMENT")  # not two samples of one device, in order
        percent = self._percent(newer.device.gpu)
        shares = (GPM_SHARES.get(metric_id) for metric_id in metric_ids)
        return NvmlGpmMetrics(tuple(None if s is None else round(s * percent, 2) for s in shares))

    def gpm_free(self, sample: NvmlGpmSample) -> None:
        if not isinstance(sample, _SimGpmSample):
            raise NvmlError("INVALID_ARGUMENT")

    def compute_processes(self, handle: NvmlHandle) -> tuple[NvmlProcess, ...]:
        uuid = self.uuid(handle)
        return tuple(
            NvmlProcess(p.pid, p.memory_used_bytes)
            for p in self._processes
            if p.device_uuid == uuid
        )

    def graphics_processes(self, handle: NvmlHandle) -> tuple[NvmlProcess, ...]:
        _unwrap(handle)
        return ()

    def mps_processes(self, handle: NvmlHandle) -> tuple[NvmlProcess, ...]:
        _unwrap(handle)
        return ()

    def process_utilization(
        self, handle: NvmlHandle, since_us: int
    ) -> tuple[NvmlProcessSample, ...]:
        gpu = _whole(handle)  # MIG devices give no per-process samples
        now_us = round((DRIVER_UPTIME_AT_ZERO_S + max(self._clock(), 0.0)) * 1e6)
        if now_us <= since_us:
            return ()
        return tuple(
            NvmlProcessSample(p.pid, now_us, p.sm_percent)
            for p in self._processes
            if p.device_uuid == gpu.uuid
        )

    def _percent(self, gpu: SimGpu) -> int:
        phase = 2 * math.pi * (self._clock() / WOBBLE_PERIOD_S + gpu.index / 4)
        ratio = min(1.0, gpu.utilization * (1 + WOBBLE * math.sin(phase)))
        return round(100 * ratio)

    def _require_initialized(self) -> None:
        if not self._initialized:
            raise NvmlError("UNINITIALIZED")


def _power_watts(gpu: SimGpu, utilization: float) -> float:
    return gpu.power_limit_watts * (0.2 + 0.7 * utilization)


def _unwrap(handle: NvmlHandle) -> _SimHandle:
    if not isinstance(handle, _SimHandle):
        raise NvmlError("INVALID_ARGUMENT")
    return handle


def _video_percent(handle: NvmlHandle) -> int:
    """A video engine's busy percent: 0, training and inference running no video; nvml.h:
    not supported on a MIG-enabled GPU (nor on a MIG device)."""
    if _whole(handle).mig_devices:
        raise NvmlError("NOT_SUPPORTED")
    return 0


def _whole(handle: NvmlHandle) -> SimGpu:
    """The GPU of a whole-GPU handle; a MIG handle answers NOT_SUPPORTED, as NVML's mostly do."""
    sim = _unwrap(handle)
    if sim.mig is not None:
        raise NvmlError("NOT_SUPPORTED")
    return sim.gpu


def _with_nvlinks(handle: NvmlHandle) -> SimGpu:
    """The GPU of a whole-GPU handle that has NVLinks; NOT_SUPPORTED otherwise."""
    gpu = _whole(handle)
    if not gpu.nvlinks:
        raise NvmlError("NOT_SUPPORTED")
    return gpu


def _mig(handle: NvmlHandle) -> SimMigDevice:
    sim = _unwrap(handle)
    if sim.mig is None:
        raise NvmlError("INVALID_ARGUMENT")
    return sim.mig
