"""Helpers for the fake libnvidia-ml.so.1 (fake_nvml.c): describe GPUs, write its config."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "CONFIG_ENV",
    "DRIVER_NOT_LOADED",
    "FUNCTION_NOT_FOUND",
    "GIB",
    "MIB",
    "NOT_FOUND",
    "NOT_SUPPORTED",
    "NO_PERMISSION",
    "UNKNOWN",
    "FakeGpu",
    "FakeMig",
    "FakeNvml",
    "FakeNvmlLibrary",
    "FakeProcess",
    "FakeSample",
    "render_config",
]

CONFIG_ENV = "FAKE_NVML_CONFIG"
MIB = 1024 * 1024
GIB = 1024 * MIB

# nvml.h return codes
NOT_SUPPORTED = 3
NO_PERMISSION = 4
DRIVER_NOT_LOADED = 9
NOT_FOUND = 6
FUNCTION_NOT_FOUND = 13
UNKNOWN = 999

# What NVML answers NOT_SUPPORTED for on a MIG device handle.
MIG_UNSUPPORTED = (
    "util",
    "power",
    "energy",
    "temperature",
    "clock",
    "clocks_event",
    "remap",
    "retired",
    "ecc",
    "proc_util",
)


@dataclass(frozen=True, slots=True)
class FakeProcess:
    """A running process NVML lists; ``memory`` None: NVML_VALUE_NOT_AVAILABLE."""

    pid: int
    memory: int | None
    graphics: bool = False
    mps: bool = False  # an MPS client (nvmlDeviceGetMPSComputeRunningProcesses)
    alive_flag: Path | None = None  # listed only while this file exists


@dataclass(frozen=True, slots=True)
class FakeSample:
    """A per-process utilization sample."""

    pid: int
    timestamp_us: int
    sm_percent: int
    present_flag: Path | None = None  # held by NVML only while this file exists


def _process_lines(
    processes: tuple[FakeProcess, ...], samples: tuple[FakeSample, ...]
) -> list[str]:
    lines = []
    for p in processes:
        memory = "na" if p.memory is None else str(p.memory)
        flag = "" if p.alive_flag is None else f" {p.alive_flag}"
        kind = "graphics" if p.graphics else "mps" if p.mps else "compute"
        lines.append(f"proc {kind} {p.pid} {memory}{flag}")
    lines += [
        f"sample {s.pid} {s.timestamp_us} {s.sm_percent}"
        + ("" if s.present_flag is None else f" {s.present_flag}")
        for s in samples
    ]
    return lines


def _nvlink_lines(gpu: FakeGpu) -> list[str]:
    lines = [f"nvlinks {gpu.nvlinks}" + ("" if gpu.nvlinks_counted else " uncounted")]
    if gpu.nvlink_count is not None:
        lines.append(f"nvlink_count {gpu.nvlink_count}")
    lines += [f"nvlink_down {link}" for link in gpu.nvlinks_down]
    lines += [f"nvlink_absent {link}" for link in gpu.nvlinks_absent]
    lines += [f"nvlink_error {link} {code}" for link, code in gpu.nvlink_state_errors]
    lines.append(
        "nvlink_errors " + " ".join("-1" if n is None else str(n) for n in gpu.nvlink_errors)
    )
    if gpu.nvlink5_errors is not None:
        lines.append(
            "nvlink5_errors " + " ".join("-1" if n is None else str(n) for n in gpu.nvlink5_errors)
        )
    if gpu.arch is not None:
        lines.append(f"arch {gpu.arch}")
    if gpu.nvlink5_per_link:
        lines.append("nvlink5_per_link")
    if gpu.nvlink_traffic_kib is not None:
        tx, rx = ("-1" if kib is None else str(kib) for kib in gpu.nvlink_traffic_kib)
        lines.append(f"nvlink_traffic {tx} {rx}")
    if gpu.fabric is not None:
        lines.append("fabric {} {}".format(*gpu.fabric) + (" v1" if gpu.fabric_v1_only else ""))
    if gpu.fabric_health:
        lines.append(f"fabric_health {gpu.fabric_health:#x}")
    return lines


# GPM percentages for metrics 1, 2, 3, 5, 10, 11, 12, 13 (graphics, SM active, SM
# occupancy, any tensor, DRAM bandwidth, FP64, FP32, FP16); -1: that metric NOT_SUPPORTED,
# -2: UNKNOWN, -N for N of 3 or more: NVML return code N, "nan": a NaN.
GpmPercents = tuple[
    float | str,
    float | str,
    float | str,
    float | str,
    float | str,
    float | str,
    float | str,
    float | str,
]


def _gpm_lines(gpm: GpmPercents | None) -> list[str]:
    return [] if gpm is None else ["gpm " + " ".join(str(p) for p in gpm)]


@dataclass(frozen=True, slots=True)
class FakeMig:
    slot: int
    uuid: str
    gpu_instance: int
    compute_instance: int
    name: str = "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    memory: tuple[int, int, int] = (40 * GIB, 4 * GIB, 0)  # total, used, reserved
    # Its GPU instance's profile ID, placement start and size: 3g.40gb in slots 0-3.
    placement: tuple[int, int, int] = (9, 0, 4)
    fail: tuple[tuple[str, int], ...] = tuple((figure, NOT_SUPPORTED) for figure in MIG_UNSUPPORTED)
    fail_while: tuple[tuple[str, int, Path], ...] = ()  # ... while the file exists
    processes: tuple[FakeProcess, ...] = ()
    present_flag: Path | None = None  # exists only while this file exists
    gone_flag: Path | None = None  # exists only while this file does not
    gpm: GpmPercents | None = None  # None: GPM not supported


@dataclass(frozen=True, slots=True)
class FakeGpu:
    uuid: str
    minor: int = 0
    name: str = "NVIDIA H100 80GB HBM3"
    pci: str = "00000000:17:00.0"
    util: tuple[int, int] = (85, 40)  # gpu %, memory %
    memory: tuple[int, int, int] = (80 * GIB, 20 * GIB, 512 * MIB)  # total, used, reserved
    power_mw: int = 456_789
    energy_mj: int = 123_456_789_012
    temperature: int = 55
    sm_clock_mhz: int = 1755
    clocks_event: int = 0x4  # nvmlClocksEventReasonSwPowerCap: at its power limit
    ecc: tuple[int, int] = (3, 1)  # corrected, uncorrected (volatile)
    # Rows remapped for correctable and uncorrectable errors, a remap pending, one failed.
    remap: tuple[int, int, int, int] = (2, 5, 1, 0)
    # A GPU before Ampere retires pages instead: for multiple single-bit and for
    # double-bit ECC errors, and whether some wait; None: NOT_SUPPORTED, as later GPUs.
    retired: tuple[int, int, int] | None = None
    pcie_replays: int = 4  # nvmlDeviceGetPcieReplayCounter
    video: tuple[int, int] = (12, 30)  # encoder %, decoder %
    # NVML_FI_DEV_MEMORY_TEMP; None: NOT_SUPPORTED, as a GPU without a memory sensor
    memory_temperature: int | None = 63
    # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (0: none asked); None: NOT_SUPPORTED
    recovery_action: int | None = 0
    # NVLinks (18: an H100 SXM board; 0: none, as a PCIe card), whether field 91 counts
    # them (False: NOT_SUPPORTED, as older drivers), the inactive ones, the error totals
    # (crc_flit, crc_data, replay, recovery, ecc_data; None: NOT_SUPPORTED) and the data
    # sent and received in KiB (None, either or both: NOT_SUPPORTED)
    nvlinks: int = 18
    nvlinks_counted: bool = True
    nvlink_count: int | None = None  # field 91's answer where not nvlinks (0: none counted)
    nvlinks_down: tuple[int, ...] = (5,)
    nvlinks_absent: tuple[int, ...] = ()  # below the count, yet INVALID_ARGUMENT
    nvlink_state_errors: tuple[tuple[int, int], ...] = ()  # (link, NVML code its state answers)
    nvlink_errors: tuple[int | None, int | None, int | None, int | None, int | None] = (
        14,
        2,
        3,
        1,
        None,
    )
    nvlink_traffic_kib: tuple[int | None, int | None] | None = (7_340_032, 9_437_184)
    # nvmlDeviceGetArchitecture's answer (None: the fake's default, 9, Hopper; "missing":
    # a driver without the call), and NVLink 5's counters, answered from Blackwell (10)
    # on: malformed packet, buffer overrun, Rx, Rx remote, Rx general, local link
    # integrity, Tx discards, recovery events, failed recoveries, effective and symbol
    # errors, all links together (None there: NOT_SUPPORTED; None: all of them)
    arch: int | str | None = None
    nvlink5_errors: tuple[int | None, ...] | None = None
    nvlink5_per_link: bool = False  # NVLink 5's counters refuse scope UINT_MAX
    # NVLink fabric registration (state, status; None: state NOT_SUPPORTED, no fabric),
    # and whether the driver predates nvmlDeviceGetGpuFabricInfoV (R535)
    fabric: tuple[int, int] | None = (3, 0)
    fabric_v1_only: bool = False
    fabric_health: int = 0  # the V call's health mask (0: no problem reported, nor its absence)
    gpm: GpmPercents | None = None  # None: GPM not supported (a GPU before Hopper)
    # GPM's PCIe traffic from and to the GPU in MiB/s (as gpm's values; None: NOT_SUPPORTED)
    gpm_pcie: tuple[float | str, float | str] | None = None
    virtualization: int = 0  # nvml.h's NVML_GPU_VIRTUALIZATION_MODE_* (2: a vGPU guest)
    fail: tuple[tuple[str, int], ...] = ()  # (figure, NVML return code)
    fail_while: tuple[tuple[str, int, Path], ...] = ()  # ... while the file exists
    # (field ID, nvmlValueType_t, value): a field that answers SUCCESS answers so instead
    fields_as: tuple[tuple[int, int, str], ...] = ()
    migs: tuple[FakeMig, ...] = field(default=())
    lost_flag: Path | None = None  # lost while this file exists
    mig_off_flag: Path | None = None  # MIG mode off while this file exists (with migs)
    mig_pending: int | None = None  # the pending MIG mode; None: the current one
    # Xids the driver raises for it: (code, raised once this file exists; None: at once).
    xids: tuple[tuple[int, Path | None], ...] = ()
    # lost from the Nth call (figure, N) of a figure naming it or its MIG devices
    lost_at: tuple[str, int] | None = None
    processes: tuple[FakeProcess, ...] = ()
    samples: tuple[FakeSample, ...] = ()


def render_config(
    gpus: tuple[FakeGpu, ...],
    *,
    init_error: int | None = None,
    driver_version: str | None = None,
    cuda_version: int | None = None,
    event_set_error: int | tuple[int, Path] | None = None,
    event_wait_error: tuple[int, Path] | None = None,
    cuda_error: tuple[int, Path] | None = None,
    unprivileged: bool = False,
    count_error: int | None = None,
    samples_none_success: bool = False,
    gpm_missing: bool = False,
    gpm_mig_missing: bool = False,
) -> str:
    """The text fake_nvml.c reads at nvmlInit."""
    lines: list[str] = []
    if init_error is not None:
        lines.append(f"init_error {init_error}")
    if isinstance(event_set_error, tuple):
        lines.append(f"event_set_error {event_set_error[0]} {event_set_error[1]}")
    elif event_set_error is not None:
        lines.append(f"event_set_error {event_set_error}")
    if cuda_error is not None:
        lines.append(f"cuda_error {cuda_error[0]} {cuda_error[1]}")
    if event_wait_error is not None:
        lines.append(f"event_wait_error {event_wait_error[0]} {event_wait_error[1]}")
    if cuda_version is not None:
        lines.append(f"cuda_version {cuda_version}")
    if unprivileged:
        lines.append("unprivileged")
    if count_error is not None:
        lines.append(f"count_error {count_error}")
    if samples_none_success:
        lines.append("samples_none_success")
    if gpm_missing:
        lines.append("gpm_missing")
    if gpm_mig_missing:
        lines.append("gpm_mig_missing")
    if driver_version is not None:
        lines.append(f"driver_version {driver_version}")
    for gpu in gpus:
        lines += [
            "gpu",
            f"uuid {gpu.uuid}",
            f"name {gpu.name}",
            f"pci {gpu.pci}",
            f"minor {gpu.minor}",
            f"util {gpu.util[0]} {gpu.util[1]}",
            "memory {} {} {}".format(*gpu.memory),
            f"power {gpu.power_mw}",
            f"energy {gpu.energy_mj}",
            f"temperature {gpu.temperature}",
            f"sm_clock {gpu.sm_clock_mhz}",
            f"clocks_event {gpu.clocks_event:#x}",
            f"ecc {gpu.ecc[0]} {gpu.ecc[1]}",
            "remap " + " ".join(str(part) for part in gpu.remap),
            *(() if gpu.retired is None else ("retired " + " ".join(map(str, gpu.retired)),)),
            f"replays {gpu.pcie_replays}",
            f"video {gpu.video[0]} {gpu.video[1]}",
            *(
                ()
                if gpu.memory_temperature is None
                else (f"memory_temperature {gpu.memory_temperature}",)
            ),
            *(() if gpu.recovery_action is None else (f"recovery_action {gpu.recovery_action}",)),
            *_nvlink_lines(gpu),
            *_gpm_lines(gpu.gpm),
            *(() if gpu.gpm_pcie is None else ("gpm_pcie {} {}".format(*gpu.gpm_pcie),)),
            f"virtualization {gpu.virtualization}",
            *(f"fail {figure} {code}" for figure, code in gpu.fail),
            *(f"fail {figure} {code} {path}" for figure, code, path in gpu.fail_while),
            *(f"field_as {field} {kind} {value}" for field, kind, value in gpu.fields_as),
            *_process_lines(gpu.processes, gpu.samples),
        ]
        if gpu.lost_flag is not None:
            lines.append(f"lost_flag {gpu.lost_flag}")
        if gpu.mig_off_flag is not None:
            lines.append(f"mig_off_flag {gpu.mig_off_flag}")
        if gpu.mig_pending is not None:
            lines.append(f"mig_pending {gpu.mig_pending}")
        lines += [f"xid {code}" + ("" if flag is None else f" {flag}") for code, flag in gpu.xids]
        if gpu.lost_at is not None:
            lines.append(f"lost_at {gpu.lost_at[0]} {gpu.lost_at[1]}")
        if gpu.migs:
            lines += ["mig_mode 1", "max_mig 7"]
        for mig in gpu.migs:
            lines += [
                f"mig {mig.slot}",
                f"uuid {mig.uuid}",
                f"name {mig.name}",
                f"gi {mig.gpu_instance}",
                f"ci {mig.compute_instance}",
                "placement {} {} {}".format(*mig.placement),
                "memory {} {} {}".format(*mig.memory),
                *(f"fail {figure} {code}" for figure, code in mig.fail),
                *(f"fail {figure} {code} {path}" for figure, code, path in mig.fail_while),
                *_process_lines(mig.processes, ()),
                *(() if mig.present_flag is None else (f"present_flag {mig.present_flag}",)),
                *(() if mig.gone_flag is None else (f"gone_flag {mig.gone_flag}",)),
                *_gpm_lines(mig.gpm),
            ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class FakeNvmlLibrary:
    """The compiled fake, loaded into this process."""

    path: Path
    cdll: ctypes.CDLL

    def init_count(self) -> int:
        """nvmlInit calls not yet matched by nvmlShutdown."""
        return int(self.cdll.fakeNvmlInitCount())

    def calls(self, figure: str) -> int:
        """Per-device calls of ``figure`` (a name of the config's ``fail`` lines:
        "energy", "proc_util"...) since the library loaded; compare before and after."""
        self.cdll.fakeNvmlCalls.restype = ctypes.c_long
        count = int(self.cdll.fakeNvmlCalls(figure.encode()))
        if count < 0:
            raise ValueError(f"the fake NVML has no figure {figure!r}")
        return count

    def last_event_wait_ms(self) -> int:
        """The timeout of the last nvmlEventSetWait_v2 call, in ms (-1: none yet)."""
        self.cdll.fakeNvmlLastEventWaitMs.restype = ctypes.c_long
        return int(self.cdll.fakeNvmlLastEventWaitMs())

    def registered_events(self, index: int) -> int:
        """The event type mask GPU ``index`` is registered for."""
        self.cdll.fakeNvmlRegisteredEvents.restype = ctypes.c_ulonglong
        return int(self.cdll.fakeNvmlRegisteredEvents(ctypes.c_uint(index)))

    def gpm_samples_live(self) -> int:
        """GPM samples allocated and not yet freed."""
        self.cdll.fakeNvmlGpmSamplesLive.restype = ctypes.c_long
        return int(self.cdll.fakeNvmlGpmSamplesLive())

    def struct_size(self, name: str) -> int:
        self.cdll.fakeNvmlStructSize.restype = ctypes.c_long
        return int(self.cdll.fakeNvmlStructSize(name.encode()))


@dataclass(frozen=True, slots=True)
class FakeNvml:
    """One test's view of the fake: the GPUs it describes."""

    library: FakeNvmlLibrary
    config_path: Path
    monkeypatch: pytest.MonkeyPatch

    def configure(self, *gpus: FakeGpu, **driver: Any) -> None:
        """Describe the node's GPUs, and the driver and caller as ``render_config`` takes
        them ("535.*" writes R535's process records; ``unprivileged``: without MIG
        monitoring); read at the next nvmlInit."""
        text = render_config(gpus, **driver)
        self.config_path.write_text(text)
        self.monkeypatch.setenv(CONFIG_ENV, str(self.config_path))
