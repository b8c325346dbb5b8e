"""Read this machine's NVIDIA driver through the exporter's NVML collectors; print JSON.

test_real_driver.py runs it in a fresh interpreter (pynvml binds one libnvidia-ml per
process, and the other tests in this folder bind the fake one); on a GPU machine it
also runs by hand:

    PYTHONPATH=. python tests/collectors/nvml/real_driver_probe.py --polls 20

One JSON object: per poll of ``NvmlCollector`` its devices (keys, identity, figures),
issues and wall time (the first poll pays ``nvmlInit``), then the same for
``GpuProcessesCollector``, then whether each GPU could register for Xid events.
Figures are keyed ``name`` or ``name{label values}``.

With ``--provoke-xid`` a CUDA kernel of its own writes to address 0x10 on the first
CUDA device after the first nvml poll: the driver reports it as Xid 31 (an MMU fault,
the application's own, which the GPU survives), and the later polls must count it.
Only on a machine whose Xid log and alerts may show one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from exporter.collectors.base import (
    Collector,
    CollectorContext,
    CollectorError,
    CollectorUnavailable,
)
from exporter.collectors.gpu_processes import GpuProcessesCollector
from exporter.collectors.nvml import NvmlCollector, NvmlError, PynvmlSource
from exporter.model import Readings


def _figures(readings: Readings) -> list[dict[str, Any]]:
    devices = []
    for device in readings.devices:
        figures = {}
        for sample in device.samples:
            labels = ",".join(sample.label_values)
            figures[f"{sample.spec.name}{{{labels}}}" if labels else sample.spec.name] = (
                sample.value
            )
        devices.append(
            {
                "name": device.name,
                "keys": {str(key.kind): key.value for key in device.keys},
                "identity": {
                    "uuid": device.identity.uuid,
                    "pci_address": device.identity.pci_address,
                    "model": device.identity.model,
                    "vendor": device.identity.vendor,
                },
                "figures": figures,
            }
        )
    return devices


def _processes(readings: Readings) -> list[dict[str, Any]]:
    return [
        {
            "key": str(device.key),
            "utilization_supported": device.utilization_supported,
            "processes": [
                {
                    "pid": process.pid,
                    "command": process.command,
                    "memory_used_bytes": process.memory_used_bytes,
                    "sm_utilization_ratio": process.sm_utilization_ratio,
                    "pod_uid": process.origin.pod_uid,
                }
                for process in device.processes
            ],
        }
        for device in readings.gpu_processes or ()
    ]


# Prints the UUID of the GPU it faults on, then what cuCtxSynchronize answers: 700
# (CUDA_ERROR_ILLEGAL_ADDRESS) when the fault happened. The driver API alone, no toolkit:
# the driver compiles the PTX.
_XID_31_PROGRAM = textwrap.dedent(
    """
    import ctypes, sys
    cuda = ctypes.CDLL("libcuda.so.1")
    def check(result, call):
        if result != 0:
            sys.exit(f"{call} failed: CUresult {result}")
    PTX = (
        b".version 7.0\\n.target sm_70\\n.address_size 64\\n"
        b".visible .entry fault()\\n{\\n"
        b"  .reg .b64 %rd<2>;\\n  .reg .b32 %r<2>;\\n"
        b"  mov.u64 %rd1, 16;\\n  mov.u32 %r1, 1;\\n"
        b"  st.global.u32 [%rd1], %r1;\\n  ret;\\n}\\n"
    )
    check(cuda.cuInit(0), "cuInit")
    device = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    uuid = (ctypes.c_ubyte * 16)()
    check(cuda.cuDeviceGetUuid(uuid, device), "cuDeviceGetUuid")
    h = bytes(uuid).hex()
    print(f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}", flush=True)
    context = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    module = ctypes.c_void_p()
    check(cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(PTX)), "cuModuleLoadData")
    function = ctypes.c_void_p()
    check(cuda.cuModuleGetFunction(ctypes.byref(function), module, b"fault"), "cuModuleGetFunction")
    check(cuda.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, None, None, None), "cuLaunchKernel")
    print(cuda.cuCtxSynchronize(), flush=True)
    """
)


def _provoke_xid_31() -> dict[str, Any]:
    """Runs the faulting kernel; says on which GPU, and what CUDA answered."""
    done = subprocess.run(
        [sys.executable, "-c", _XID_31_PROGRAM],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = done.stdout.split()
    return {
        "gpu_uuid": lines[0] if lines else None,
        "cuda_result": int(lines[1]) if len(lines) > 1 else None,
        "error": done.stderr.strip() or None,
    }


def _polls(
    collector: Collector,
    count: int,
    interval_s: float,
    *,
    between_first_two: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    polls = []
    for index in range(count):
        if index == 1 and between_first_two is not None:
            between_first_two()
        if index:
            time.sleep(interval_s)
        started = time.perf_counter()
        try:
            readings = collector.collect()
        except (CollectorError, CollectorUnavailable) as error:
            polls.append({"duration_s": time.perf_counter() - started, "error": str(error)})
            continue
        polls.append(
            {
                "duration_s": time.perf_counter() - started,
                "error": None,
                "devices": _figures(readings),
                "node": {
                    sample.spec.name: list(sample.label_values) for sample in readings.node_samples
                },
                "processes": _processes(readings),
                "issues": [f"{issue.error}: {issue.detail}" for issue in readings.issues],
            }
        )
    return polls


def _xid_registration() -> dict[str, str]:
    """Per GPU UUID, whether NVML let it register for Xid events: "ok" or the error."""
    source = PynvmlSource()
    source.init()
    found: dict[str, str] = {}
    try:
        try:
            events = source.xid_event_set()
        except NvmlError as error:
            return {"(event set)": error.error_name}
        for index in range(source.device_count()):
            handle = source.device_handle(index)
            try:
                source.register_xid_events(handle, events)
                found[source.uuid(handle)] = "ok"
            except NvmlError as error:
                found[source.uuid(handle)] = error.error_name
        source.free_event_set(events)
    finally:
        source.shutdown()
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Read NVIDIA GPUs through the NVML collectors.")
    parser.add_argument("--polls", type=int, default=3, help="collect() calls per collector")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between them")
    parser.add_argument("--pod-logs", default="/var/log/pods", help="--path.pod-logs")
    parser.add_argument(
        "--provoke-xid",
        action="store_true",
        help="cause an Xid 31 on the first CUDA device after the first nvml poll",
    )
    args = parser.parse_args(argv)
    # The energy counter read and GPM measured every poll, as every other figure: these
    # polls are a fraction of a second apart, and test_energy_only_grows and the GPM
    # tests compare their readings.
    context = CollectorContext(
        pod_logs=Path(args.pod_logs), nvml_energy_interval_s=0.0, nvml_gpm_interval_s=0.0
    )
    nvml = NvmlCollector(context)
    processes = GpuProcessesCollector(context)
    provoked: dict[str, Any] = {}
    try:
        result = {
            "nvml": _polls(
                nvml,
                args.polls,
                args.interval,
                between_first_two=(
                    (lambda: provoked.update(_provoke_xid_31())) if args.provoke_xid else None
                ),
            ),
            "gpu_processes": _polls(processes, args.polls, args.interval),
        }
        xids = _xid_registration()
    finally:
        nvml.close()
        processes.close()
    if args.provoke_xid:
        result["provoked_xid"] = provoked
    json.dump({**result, "xid_registration": xids}, sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
