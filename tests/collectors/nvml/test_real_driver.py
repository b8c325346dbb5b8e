"""The NVML collectors against this machine's real NVIDIA driver, where it has one.

What no fake can show: that pynvml's structs, our calls and our unit conversions agree
with the driver, checked against two other witnesses, ``nvidia-smi`` and the kernel
(``/sys/bus/pci/devices``, ``/proc/driver/nvidia/gpus``). A process holding a CUDA
context (through libcuda.so.1 with ctypes: no CUDA toolkit needed) must be listed with
its memory, and the exporter itself, polling a simulated kubelet whose pod holds the
real GPU, must serve the GPU's figures under that pod.

CI machines have no GPU: the module skips there, saying so. The collectors run in other
processes (the probe, the exporter): pynvml binds one libnvidia-ml per process, and the
other tests in this folder need it bound to the fake.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fault.faultkit import start_exporter
from freshprocess import with_repo_path
from prometheus_client.parser import text_string_to_metric_families

from exporter.model import AllocatableResources, ContainerResources, DeviceGroup, PodResources
from exporter.sim.kubelet import SimKubelet

REPO_ROOT = Path(__file__).resolve().parents[3]
PROBE = Path(__file__).with_name("real_driver_probe.py")
MIB = 1024 * 1024
HELD_BYTES = 256 * MIB


def _smi(*args: str) -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run([smi, *args], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None  # a GPU fallen off the bus can hang it: skip, not stop the session
    return done.stdout if done.returncode == 0 else None


_SMI_FIELDS = (
    "uuid",
    "pci.bus_id",
    "name",
    "memory.total",
    "power.limit",
    "mig.mode.current",
    "driver_version",
)
_SMI_TABLE = _smi(f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader,nounits")

pytestmark = [
    pytest.mark.skipif(
        not _SMI_TABLE,
        reason="no NVIDIA GPU here (nvidia-smi missing, failing or hanging): these checks need one",
    ),
    # One worker of `make unit` runs them all: the CUDA process and the probe, once.
    pytest.mark.xdist_group("real_driver"),
]


@dataclass(frozen=True, slots=True)
class SmiGpu:
    uuid: str
    pci_address: str  # the kernel's form: 0000:17:00.0
    name: str
    memory_total_mib: int
    power_limit_watts: float | None  # None where the board reports "[N/A]"
    mig_enabled: bool
    driver_version: str


# Boards whose memory has spare rows (NVIDIA GPU memory error management, Table 1).
_ROW_REMAPPER = re.compile(r"\b(A100|A800|A30|H100|H200|H800|H20|B100|B200|GB200)\b")


def _smi_gpus() -> list[SmiGpu]:
    gpus = []
    for line in (_SMI_TABLE or "").splitlines():
        uuid, bus_id, name, memory, power, mig, driver = (f.strip() for f in line.split(","))
        domain, rest = bus_id.split(":", 1)
        gpus.append(
            SmiGpu(
                uuid=uuid,
                pci_address=f"{int(domain, 16):04x}:{rest}".lower(),
                name=name,
                memory_total_mib=int(memory),
                power_limit_watts=None if power.startswith("[") else float(power),
                mig_enabled=mig == "Enabled",
                driver_version=driver,
            )
        )
    return gpus


# A host process holding a CUDA context and HELD_BYTES on the first GPU, through the
# driver API alone. It prints the GPU's UUID when the memory is held, then waits.
_CUDA_HOLDER = textwrap.dedent(
    """
    import ctypes, sys
    cuda = ctypes.CDLL("libcuda.so.1")
    def check(result, call):
        if result != 0:
            sys.exit(f"{call} failed: CUresult {result}")
    check(cuda.cuInit(0), "cuInit")
    device = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    uuid = (ctypes.c_ubyte * 16)()
    check(cuda.cuDeviceGetUuid(uuid, device), "cuDeviceGetUuid")
    context = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    pointer = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(HELD_BYTES)), "cuMemAlloc")
    h = bytes(uuid).hex()
    print(f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}", flush=True)
    sys.stdin.read()
    """
).replace("HELD_BYTES", str(HELD_BYTES))


@dataclass(frozen=True, slots=True)
class CudaHolder:
    pid: int
    gpu_uuid: str
    command: str  # its /proc/<pid>/comm


@pytest.fixture(scope="module")
def cuda_holder() -> Iterator[CudaHolder]:
    if any(gpu.mig_enabled for gpu in _smi_gpus()):
        # CUDA would hand out a MIG device, whose UUID NVML spells MIG-...
        pytest.skip("a GPU is in MIG mode: these checks need whole GPUs")
    process = subprocess.Popen(
        [sys.executable, "-c", _CUDA_HOLDER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdin is not None
    uuid = process.stdout.readline().strip()
    if not uuid.startswith("GPU-"):
        process.kill()
        _, stderr = process.communicate(timeout=30)
        pytest.fail(f"could not hold a CUDA context: {stderr.strip()}")
    command = Path(f"/proc/{process.pid}/comm").read_text().strip()
    yield CudaHolder(pid=process.pid, gpu_uuid=uuid, command=command)
    process.stdin.close()
    process.wait(timeout=30)


def _probe(*args: str) -> dict[str, Any]:
    """real_driver_probe.py's JSON, run in a fresh interpreter (one NVML per process)."""
    done = subprocess.run(
        [sys.executable, str(PROBE), *args],
        cwd=REPO_ROOT,
        env=with_repo_path(os.environ),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.fixture(scope="module")
def probe(cuda_holder: CudaHolder) -> dict[str, Any]:
    result = _probe("--polls", "3")
    polls = (*result["nvml"], *result["gpu_processes"])
    errors = [poll["error"] for poll in polls if poll["error"]]
    assert errors == [], "a collector failed on the real driver"
    return result


def _gpus(poll: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["keys"]["gpu_uuid"]: d for d in poll["devices"] if "gpu_uuid" in d["keys"]}


def test_every_gpu_is_found_with_the_kernels_identity(probe: dict[str, Any]) -> None:
    smi = {gpu.uuid: gpu for gpu in _smi_gpus()}
    for poll in probe["nvml"]:
        gpus = _gpus(poll)
        assert set(gpus) == set(smi)
        for uuid, gpu in gpus.items():
            expected = smi[uuid]
            assert gpu["keys"]["pci"] == expected.pci_address
            assert gpu["identity"]["pci_address"] == expected.pci_address
            assert gpu["identity"]["model"] == expected.name
            assert gpu["identity"]["vendor"] == "nvidia"
            device = Path("/sys/bus/pci/devices", expected.pci_address)
            assert (device / "vendor").read_text().strip() == "0x10de"
            information = Path("/proc/driver/nvidia/gpus", expected.pci_address, "information")
            minor = next(
                line.split(":", 1)[1].strip()
                for line in information.read_text().splitlines()
                if line.startswith("Device Minor")
            )
            assert gpu["keys"]["nvidia_minor"] == minor


def test_figures_are_in_the_drivers_units(probe: dict[str, Any], cuda_holder: CudaHolder) -> None:
    smi = {gpu.uuid: gpu for gpu in _smi_gpus()}
    for poll in probe["nvml"]:
        for uuid, gpu in _gpus(poll).items():
            figures = gpu["figures"]
            expected = smi[uuid]
            # nvidia-smi prints whole MiB of the same NVML total.
            total = figures["podresources_gpu_memory_total_bytes"]
            assert int(total // MIB) == expected.memory_total_mib
            used = figures["podresources_gpu_memory_used_bytes"]
            # An idle GPU reads 0 (seen on an H100, driver 580); the holder's, its memory.
            assert (HELD_BYTES if uuid == cuda_holder.gpu_uuid else 0) <= used <= total
            assert 0 <= figures["podresources_gpu_utilization_ratio"] <= 1
            assert 10 < figures["podresources_gpu_temperature_celsius"] < 110
            # HBM boards (an H100) have a memory sensor; GDDR boards answer NOT_SUPPORTED.
            memory_temperature = figures.get("podresources_gpu_memory_temperature_celsius")
            assert memory_temperature is None or 10 < memory_temperature < 120
            assert figures["podresources_gpu_sm_clock_hertz"] >= 100e6
            # Power needs power management, which boards without a power limit lack
            # (nvml.h); the energy counter needs Volta or newer.
            power = figures.get("podresources_gpu_power_watts")
            if expected.power_limit_watts is not None:
                assert power is not None
                assert 0 < power < 2 * expected.power_limit_watts
            assert power is None or power > 0
            energy = figures.get("podresources_gpu_energy_joules_total")
            assert energy is None or energy > 0
            # Every slowdown reason of nvml.h, 0 or 1 (an H100 held at its power cap
            # under load says sw_power_cap 1).
            throttled = {
                name: value
                for name, value in figures.items()
                if name.startswith("podresources_gpu_clocks_throttled{")
            }
            assert 6 == len(throttled), sorted(throttled)
            assert set(throttled.values()) <= {0.0, 1.0}
            # Row remapping: the data-centre GPUs since Ampere have it (not with MIG on).
            remap = {
                name: value
                for name, value in figures.items()
                if name.startswith(("podresources_gpu_remapped_rows", "podresources_gpu_row_remap"))
            }
            if _ROW_REMAPPER.search(expected.name) and not expected.mig_enabled:
                assert 4 == len(remap), sorted(figures)
            if remap:
                assert 4 == len(remap), sorted(remap)
                assert all(v >= 0 and v == int(v) for v in remap.values()), remap
                assert remap["podresources_gpu_row_remap_pending"] in (0.0, 1.0)
                assert remap["podresources_gpu_row_remap_failed"] in (0.0, 1.0)
            # Page retirement, where the GPU retires pages (before Ampere): the counts
            # and the pending status together, or nothing.
            pages = {
                name: value
                for name, value in figures.items()
                if name.startswith("podresources_gpu_retired_pages")
            }
            assert len(pages) in (0, 3), sorted(pages)
            assert all(v >= 0 and v == int(v) for v in pages.values()), pages
            assert pages.get("podresources_gpu_retired_pages_pending", 0.0) in (0.0, 1.0)
            # PCIe replays: a whole count, where the board answers one (Kepler and later).
            replays = figures.get("podresources_gpu_pcie_replays_total")
            assert replays is None or (replays >= 0 and replays == int(replays)), replays


def _smi_nvlinks(pci_address: str) -> tuple[int, int]:
    """(active, inactive) links of a GPU as ``nvidia-smi nvlink --status`` lists them
    ("Link 0: 26.562 GB/s", "Link 3: <inactive>"); (0, 0) where it lists none."""
    listing = _smi("nvlink", "--status", "-i", pci_address) or ""
    states = re.findall(r"^\s*Link \d+: (.*)$", listing, flags=re.MULTILINE)
    inactive = sum("inactive" in state for state in states)
    return len(states) - inactive, inactive


def test_nvlinks_match_nvidia_smi(probe: dict[str, Any]) -> None:
    """Each GPU's NVLinks by state as nvidia-smi lists them (none on a board without
    NVLink; none served for a MIG-enabled GPU), and its NVLink counters whole."""
    smi = {gpu.uuid: gpu for gpu in _smi_gpus()}
    for poll in probe["nvml"]:
        for uuid, gpu in _gpus(poll).items():
            figures = gpu["figures"]
            served = (
                int(figures.get("podresources_gpu_nvlink_links{active}", 0)),
                int(figures.get("podresources_gpu_nvlink_links{inactive}", 0)),
            )
            expected = (0, 0) if smi[uuid].mig_enabled else _smi_nvlinks(smi[uuid].pci_address)
            assert served == expected, (uuid, served, expected)
            counters = {
                name: value
                for name, value in figures.items()
                if name.startswith("podresources_gpu_nvlink_") and "_links" not in name
            }
            assert all(v >= 0 and v == int(v) for v in counters.values()), counters


# The per-link counters ``nvidia-smi nvlink -e`` lists, by the type the exporter serves
# their sum under: the older GPUs' and NVLink 5's (as a B300 on driver 595 names them).
# CRC is left out: nvidia-smi's one "CRC Errors" line does not say flit or data.
_SMI_NVLINK_ERRORS = {
    "replay errors": "replay",
    "recovery errors": "recovery",
    "malformed packet errors": "malformed_packet",
    "buffer overrun errors": "buffer_overrun",
    "rx errors": "receive",
    "rx remote errors": "receive_remote",
    "rx general errors": "receive_general",
    "local link integrity errors": "local_link_integrity",
    "tx discards": "transmit_discard",
    "total link recovery events": "recovery",
    "link recovery failed events": "recovery_failed",
    "effective errors": "effective",
    "symbol errors": "symbol",
}
_OLDER_ONLY = {"crc_flit", "crc_data", "replay"}
_NVLINK5_ONLY = set(_SMI_NVLINK_ERRORS.values()) - {"replay", "recovery"}


def _smi_nvlink_errors(pci_address: str) -> dict[str, int]:
    """The error counters ``nvidia-smi nvlink -e`` lists ("Link 0: Replay Errors: 0"),
    summed over the links, by the exporter's type."""
    listing = _smi("nvlink", "-e", "-i", pci_address) or ""
    sums: dict[str, int] = {}
    for name, value in re.findall(r"^\s*Link \d+: ([^:]+?)\s*:\s*(\d+)\s*$", listing, re.M):
        kind = _SMI_NVLINK_ERRORS.get(name.lower())
        if kind is not None:
            sums[kind] = sums.get(kind, 0) + int(value)
    return sums


def test_nvlink_errors_are_the_sums_of_nvidia_smis_links(probe: dict[str, Any]) -> None:
    """Each counter ``nvidia-smi nvlink -e`` lists per link, summed over the links, is
    served for the GPU, at most that sum (the probe read first: counters only grow),
    and no type of the other NVLink generation is: the scope the all-links fields are
    asked at, and the choice by architecture, on Hopper and on Blackwell alike."""
    smi = {gpu.uuid: gpu for gpu in _smi_gpus()}
    poll = probe["nvml"][-1]
    for uuid, gpu in _gpus(poll).items():
        if smi[uuid].mig_enabled:
            continue
        prefix = "podresources_gpu_nvlink_errors_total{"
        served = {
            name.removeprefix(prefix).rstrip("}"): value
            for name, value in gpu["figures"].items()
            if name.startswith(prefix)
        }
        sums = _smi_nvlink_errors(smi[uuid].pci_address)
        for kind, total in sums.items():
            assert kind in served, (uuid, kind, served, sums)
            assert served[kind] <= total, (uuid, kind, served, sums)
        other = _OLDER_ONLY if set(sums) & _NVLINK5_ONLY else _NVLINK5_ONLY
        assert not set(served) & other, (uuid, served, sums)


def _smi_fabric_state(pci_address: str) -> str:
    """The Fabric section's State of ``nvidia-smi -q`` ("Completed", "N/A"...), lower
    case without spaces; "" where it prints no such section (older drivers)."""
    listing = _smi("-q", "-i", pci_address) or ""
    match = re.search(r"^\s*Fabric\s*\n\s*State\s*:\s*(.+)$", listing, flags=re.MULTILINE)
    return "" if match is None else match.group(1).strip().lower().replace(" ", "")


def test_fabric_state_matches_nvidia_smi(probe: dict[str, Any]) -> None:
    """A GPU in an NVSwitch fabric serves the state nvidia-smi prints; one in none (N/A),
    or a MIG-enabled GPU, serves none."""
    names = {1.0: "notstarted", 2.0: "inprogress", 3.0: "completed"}
    smi = {gpu.uuid: gpu for gpu in _smi_gpus()}
    for poll in probe["nvml"]:
        for uuid, gpu in _gpus(poll).items():
            served = gpu["figures"].get("podresources_gpu_fabric_state_id")
            printed = _smi_fabric_state(smi[uuid].pci_address)
            if smi[uuid].mig_enabled or printed in ("", "n/a"):
                assert served is None, (uuid, served, printed)
            else:
                assert names.get(served) == printed, (uuid, served, printed)


def test_every_gpu_is_watched_for_xids(probe: dict[str, Any]) -> None:
    """The collector registered each GPU for Xid events: its total is served, from 0
    (a board that cannot register has none; the probe's own try says why)."""
    for poll in probe["nvml"]:
        for uuid, gpu in _gpus(poll).items():
            assert "podresources_gpu_xid_errors_total" in gpu["figures"], probe[
                "xid_registration"
            ].get(uuid)


@pytest.mark.skipif(
    os.environ.get("PODRESOURCES_PROVOKE_XID") != "1",
    reason="causes an Xid 31 on the first GPU, which its Xid log and alerts will show:"
    " set PODRESOURCES_PROVOKE_XID=1 (scripts/check-real-gpu.sh --provoke-xid) to run it",
)
def test_a_real_xid_is_counted_once() -> None:
    """A kernel writing to address 0x10 makes the driver report Xid 31 (seen on an
    H100, driver 580: an MMU fault, the GPU carries on). The watch must count it once,
    on the GPU it happened on, under its code."""
    if any(gpu.mig_enabled for gpu in _smi_gpus()):
        pytest.skip("a GPU is in MIG mode: CUDA would fault on a MIG device")
    result = _probe("--polls", "3", "--interval", "1", "--provoke-xid")
    provoked = result["provoked_xid"]
    assert provoked["cuda_result"] == 700, provoked  # CUDA_ERROR_ILLEGAL_ADDRESS
    first, *later = (_gpus(poll)[provoked["gpu_uuid"]]["figures"] for poll in result["nvml"])
    assert first["podresources_gpu_xid_errors_total"] == 0
    for figures in later:  # once, however many polls after
        assert figures["podresources_gpu_xid_errors_total"] == 1
        assert figures["podresources_gpu_xid_errors_by_code_total{31}"] == 1


def test_driver_version_is_nvidia_smis(probe: dict[str, Any]) -> None:
    (driver,) = {gpu.driver_version for gpu in _smi_gpus()}
    for poll in probe["nvml"]:
        vendor, version, cuda = poll["node"]["podresources_gpu_driver_info"]
        assert (vendor, version) == ("nvidia", driver)
        assert re.fullmatch(r"\d+\.\d+", cuda), cuda


def test_energy_only_grows(probe: dict[str, Any]) -> None:
    per_poll = [
        {
            uuid: g["figures"].get("podresources_gpu_energy_joules_total")
            for uuid, g in _gpus(poll).items()
        }
        for poll in probe["nvml"]
    ]
    for uuid in per_poll[0]:
        readings = [poll[uuid] for poll in per_poll if poll[uuid] is not None]
        assert readings == sorted(readings)


def test_a_healthy_driver_reports_no_issues(probe: dict[str, Any]) -> None:
    for collector in ("nvml", "gpu_processes"):
        for poll in probe[collector]:
            assert poll["issues"] == []


def test_a_healthy_gpu_needs_no_recovery(probe: dict[str, Any]) -> None:
    """The driver's recovery action of a lent GPU, which has had no fault: 0 (none), or
    no series where the driver predates the field; the field is read whole, not a
    neighbouring field's value through the wrong union member."""
    for poll in probe["nvml"]:
        for uuid, gpu in _gpus(poll).items():
            action = gpu["figures"].get("podresources_gpu_recovery_action_id")
            assert action in (None, 0.0), (uuid, action)


_GPM_FIGURES = (
    "podresources_gpu_graphics_engine_active_ratio",
    "podresources_gpu_sm_active_ratio",
    "podresources_gpu_sm_occupancy_ratio",
    "podresources_gpu_pipe_active_ratio{tensor}",
    "podresources_gpu_pipe_active_ratio{fp64}",
    "podresources_gpu_pipe_active_ratio{fp32}",
    "podresources_gpu_pipe_active_ratio{fp16}",
    "podresources_gpu_dram_active_ratio",
)


def _smi_vgpu_guests() -> set[str]:
    """UUIDs of the GPUs ``nvidia-smi -q`` calls a vGPU guest's ("Virtualization Mode :
    VGPU"). Read from -q: not every nvidia-smi takes ``virtualization_mode`` in a query."""
    guests = set()
    uuid = None
    for line in (_smi("-q") or "").splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "GPU UUID":
            uuid = value
        elif key == "Virtualization Mode" and value == "VGPU" and uuid is not None:
            guests.add(uuid)
    return guests


def _gpm_capable() -> set[str]:
    """UUIDs of the GPUs GPM is asked of, as nvidia-smi describes them: compute
    capability 9.0 (Hopper) or later, and not a vGPU guest."""
    table = _smi("--query-gpu=uuid,compute_cap", "--format=csv,noheader,nounits")
    if table is None:  # no witness is not "no GPM": the tests below would pass vacuously
        pytest.fail("nvidia-smi --query-gpu=uuid,compute_cap failed")
    guests = _smi_vgpu_guests()
    found = set()
    for line in table.splitlines():
        uuid, capability = (part.strip() for part in line.split(",", 1))
        with contextlib.suppress(ValueError):
            if float(capability) >= 9.0 and uuid not in guests:
                found.add(uuid)
    return found


def test_gpm_figures_from_the_second_poll_of_a_hopper(probe: dict[str, Any]) -> None:
    """GPM on the real driver: none at the first poll (one sample), then on a whole
    Hopper or later GPU each metric between the polls, a ratio within [0, 1] (a
    percentage read as a ratio, through pynvml's nvmlGpmMetricsGet_t); an older GPU, or
    a vGPU guest's, has none (and no issue: test_a_healthy_driver_reports_no_issues). A
    MIG-enabled GPU's figures, if it has any, must be ratios too."""
    capable = _gpm_capable()
    mig_enabled = {gpu.uuid for gpu in _smi_gpus() if gpu.mig_enabled}
    first, *later = probe["nvml"]
    for gpu in _gpus(first).values():
        assert not set(gpu["figures"]) & set(_GPM_FIGURES)
    for poll in later:
        for uuid, gpu in _gpus(poll).items():
            served = {name: gpu["figures"][name] for name in _GPM_FIGURES if name in gpu["figures"]}
            if uuid not in capable:
                assert served == {}, uuid
                continue
            if uuid not in mig_enabled:  # what NVML measures of a MIG-enabled GPU: unknown
                assert set(served) == set(_GPM_FIGURES), (uuid, served)
            assert all(0.0 <= value <= 1.0 for value in served.values()), (uuid, served)


_PCIE_COUNTERS = (
    "podresources_gpu_pcie_transmit_bytes_total",
    "podresources_gpu_pcie_receive_bytes_total",
)


def test_pcie_bytes_counted_from_the_second_poll_of_a_hopper(probe: dict[str, Any]) -> None:
    """GPM's PCIe rates summed into counters: none at the first poll, then on a whole
    Hopper or later GPU both directions, never falling from one poll to the next; none
    on an older GPU or a vGPU guest."""
    capable = _gpm_capable()
    mig_enabled = {gpu.uuid for gpu in _smi_gpus() if gpu.mig_enabled}
    counted: dict[str, list[tuple[float, ...]]] = {}
    for index, poll in enumerate(probe["nvml"]):
        for uuid, gpu in _gpus(poll).items():
            served = tuple(
                gpu["figures"][name] for name in _PCIE_COUNTERS if name in gpu["figures"]
            )
            if index == 0 or uuid not in capable:
                assert served == (), (uuid, index)
            elif uuid not in mig_enabled:
                assert len(served) == 2, (uuid, served)
                counted.setdefault(uuid, []).append(served)
    for uuid, series in counted.items():
        assert min(series[0]) >= 0.0, (uuid, series)
        for earlier, later in itertools.pairwise(series):
            assert all(a <= b for a, b in zip(earlier, later, strict=True)), (uuid, series)


def test_a_cuda_process_is_listed_with_its_memory(
    probe: dict[str, Any], cuda_holder: CudaHolder
) -> None:
    for poll in probe["gpu_processes"]:
        devices = {device["key"]: device for device in poll["processes"]}
        held = devices[f"gpu_uuid:{cuda_holder.gpu_uuid}"]
        (process,) = (p for p in held["processes"] if p["pid"] == cuda_holder.pid)
        assert process["memory_used_bytes"] >= HELD_BYTES
        assert process["command"] == cuda_holder.command
        assert process["pod_uid"] is None  # a host process: its cgroup is no pod's


@pytest.fixture
async def kubelet_holding_the_gpu(
    short_tmp: Path, cuda_holder: CudaHolder
) -> AsyncIterator[SimKubelet]:
    kubelet = SimKubelet(socket_path=str(short_tmp / "kubelet.sock"))
    gpus = tuple(gpu.uuid for gpu in _smi_gpus())
    held = DeviceGroup("nvidia.com/gpu", (cuda_holder.gpu_uuid,))
    pod = PodResources("ml", "trainer-0", (ContainerResources("main", devices=(held,)),))
    allocatable = AllocatableResources(devices=(DeviceGroup("nvidia.com/gpu", gpus),))
    kubelet.set_state(pods=(pod,), allocatable=allocatable)
    await kubelet.start()
    yield kubelet
    await kubelet.stop()


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


def _keep_pages(metrics: bytes, allocations: bytes) -> None:
    """scripts/check-real-gpu.sh keeps the pages, for promtool and a reader elsewhere."""
    if folder := os.environ.get("PODRESOURCES_REAL_GPU_PAGES"):
        Path(folder, "metrics.txt").write_bytes(metrics)
        Path(folder, "allocations.json").write_bytes(allocations)


async def test_the_exporter_serves_the_real_gpu_under_its_pod(
    kubelet_holding_the_gpu: SimKubelet, cuda_holder: CudaHolder, short_tmp: Path
) -> None:
    flags = [
        "--kubelet.socket",
        kubelet_holding_the_gpu.socket_path,
        "--path.sysfs",
        "/sys",
        "--path.procfs",
        "/proc",
        "--path.pod-logs",
        str(short_tmp / "no-pod-logs"),
        "--collector.gpu_processes",
    ]
    exporter = await start_exporter(None, short_tmp, flags=flags, ready_path="/readyz")
    try:
        async with aiohttp.ClientSession() as session:
            _, body, _ = await exporter.get(session, "/metrics")
            _, debug, _ = await exporter.get(session, "/debug/allocations")
    finally:
        exporter.signal(15)
        assert await exporter.wait_exit(within_s=30) == 0
    text = body.decode()
    _keep_pages(body, debug)
    holder = {"namespace": "ml", "pod": "trainer-0", "container": "main"}
    device = {"resource": "nvidia.com/gpu", "device_id": cuda_holder.gpu_uuid}
    total = {gpu.uuid: gpu.memory_total_mib for gpu in _smi_gpus()}[cuda_holder.gpu_uuid]
    assert [
        value // MIB
        for labels, value in _samples(text, "podresources_gpu_memory_total_bytes")
        if labels == {**holder, **device}
    ] == [total]
    (info,) = (
        labels
        for labels, _ in _samples(text, "podresources_device_info")
        if labels["device_id"] == cuda_holder.gpu_uuid
    )
    assert info["uuid"] == cuda_holder.gpu_uuid
    assert info["vendor"] == "nvidia"
    assert ({"collector": "nvml"}, 1.0) in _samples(text, "podresources_collector_success")
    # The holder is the host's, on a GPU the pod holds (with any other: a display server).
    (hosts,) = (
        value
        for labels, value in _samples(text, "podresources_gpu_foreign_processes")
        if labels == {**device, "kind": "host"}
    )
    assert hosts >= 1
    allocations = json.loads(debug)
    assert cuda_holder.gpu_uuid in json.dumps(allocations)
