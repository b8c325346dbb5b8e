"""Read this machine's NVIDIA driver through the exporter's NVML collectors; print JSON.

test_real_driver.py runs it in a fresh interpreter (pynvml binds one libnvidia-ml per
process, and the other tests in this folder bind the fake one); on a GPU machine it
also runs by hand:

    PYTHONPATH=. python tests/collectors/nvml/real_driver_probe.py --polls 20

One JSON object: per poll of ``NvmlCollector`` its devices (keys, identity, figures),
issues and wall time (the first poll pays ``nvmlInit``), then the same for
``GpuProcessesCollector``, then whether each GPU could register for Xid events.
Figures are keyed ``name`` or ``name{label values}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
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


def _polls(collector: Collector, count: int, interval_s: float) -> list[dict[str, Any]]:
    polls = []
    for index in range(count):
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
    args = parser.parse_args(argv)
    context = CollectorContext(pod_logs=Path(args.pod_logs))
    nvml = NvmlCollector(context)
    processes = GpuProcessesCollector(context)
    try:
        result = {
            "nvml": _polls(nvml, args.polls, args.interval),
            "gpu_processes": _polls(processes, args.polls, args.interval),
        }
        xids = _xid_registration()
    finally:
        nvml.close()
        processes.close()
    json.dump({**result, "xid_registration": xids}, sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
