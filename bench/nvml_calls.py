"""What the NVML calls of a poll cost on this machine's real driver, for a whole GPU.

    .venv/bin/python bench/nvml_calls.py [--gpu 0] [--runs 25]

Needs an NVIDIA GPU (the simulated node's GPUs cost nothing, so ``make bench`` cannot
see this). Calls the ``PynvmlSource`` methods the nvml and gpu_processes collectors use
for a whole GPU (not the MIG calls, nor the driver's version and the event set's
registration, made once), ``--runs`` times each on one GPU, and prints the median wall
and thread-CPU time of one call, with the last answer; then the sum of the medians (an
upper bound of one poll of both collectors for that GPU: the identity calls are made
once, process utilization only for a GPU running a process), with ``nvlink_active``
counted once for each link ``nvlink_fields`` counts. Figures only.
Run it with the GPU idle and again under load: some answers cost what they report.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from exporter.collectors.nvml import (
    _GPM_GPU_METRIC_IDS,
    GPM_MIN_INTERVAL_S,
    NvmlError,
    NvmlEventSet,
    PynvmlSource,
)


def _calls(
    source: PynvmlSource, gpu: int, events: NvmlEventSet | None
) -> dict[str, Callable[[], Any]]:
    handle = source.device_handle(gpu)
    xids: dict[str, Callable[[], Any]] = {}
    if events is not None:
        try:
            source.register_xid_events(handle, events)
        except NvmlError as error:  # a board without events: timed without them
            print(f"{'register_xid_events':24s} NVML {error.error_name}")
        else:
            # The poll's look for Xid events: one wait of 0 ms with none waiting.
            xids["next_xid"] = lambda: source.next_xid(events)
    gpm: dict[str, Callable[[], Any]] = {}
    try:  # two samples to measure between, as two polls leave them (freed at exit)
        older = source.gpm_sample(handle)
        time.sleep(GPM_MIN_INTERVAL_S * 2)
        newer = source.gpm_sample(handle)
    except NvmlError as error:  # a GPU before Hopper: timed without GPM
        print(f"{'gpm_sample':24s} NVML {error.error_name}")
    else:
        gpm["gpm_sample_and_free"] = lambda: source.gpm_free(source.gpm_sample(handle))
        gpm["gpm_metrics"] = lambda: source.gpm_metrics(older, newer, _GPM_GPU_METRIC_IDS)
    return {
        "device_count": source.device_count,
        "device_handle": lambda: source.device_handle(gpu),
        "uuid": lambda: source.uuid(handle),
        "name": lambda: source.name(handle),
        "pci_bus_id": lambda: source.pci_bus_id(handle),
        "minor_number": lambda: source.minor_number(handle),
        "mig_enabled": lambda: source.mig_enabled(handle),
        "utilization": lambda: source.utilization(handle),
        "encoder_percent": lambda: source.encoder_percent(handle),
        "decoder_percent": lambda: source.decoder_percent(handle),
        "memory": lambda: source.memory(handle),
        "power_milliwatts": lambda: source.power_milliwatts(handle),
        "energy_millijoules": lambda: source.energy_millijoules(handle),
        "temperature_celsius": lambda: source.temperature_celsius(handle),
        "memory_temperature_celsius": lambda: source.memory_temperature_celsius(handle),
        "sm_clock_mhz": lambda: source.sm_clock_mhz(handle),
        "clocks_event_reasons": lambda: source.clocks_event_reasons(handle),
        "ecc_errors corrected": lambda: source.ecc_errors(handle, "corrected"),
        "ecc_errors uncorrected": lambda: source.ecc_errors(handle, "uncorrected"),
        "remapped_rows": lambda: source.remapped_rows(handle),
        "retired_pages": lambda: source.retired_pages(handle),
        "pcie_replays": lambda: source.pcie_replays(handle),
        "nvlink_fields": lambda: source.nvlink_fields(handle),
        # One link's state; a poll asks each link the fields count (18 on an H100 SXM).
        "nvlink_active": lambda: source.nvlink_active(handle, 0),
        "compute_processes": lambda: source.compute_processes(handle),
        "graphics_processes": lambda: source.graphics_processes(handle),
        "mps_processes": lambda: source.mps_processes(handle),
        "process_utilization": lambda: source.process_utilization(handle, 0),
        "gpm_supported": lambda: source.gpm_supported(handle),
        **gpm,
        **xids,
    }


def _answer(call: Callable[[], object]) -> object:
    """The call's answer, or its NVML error's name."""
    try:
        return call()
    except NvmlError as error:
        return f"NVML {error.error_name}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Time each NVML call the collectors make.")
    parser.add_argument("--gpu", type=int, default=0, help="NVML index of the GPU to ask")
    parser.add_argument("--runs", type=int, default=25, help="calls of each, after one more")
    args = parser.parse_args(argv)
    source = PynvmlSource()
    started = time.perf_counter()
    try:
        source.init()
    except NvmlError as error:
        sys.exit(f"nvmlInit failed: {error.error_name} (no NVIDIA driver here?)")
    print(f"nvmlInit: {(time.perf_counter() - started) * 1000:.1f} ms")
    wall_sum = cpu_sum = 0.0
    medians: dict[str, tuple[float, float]] = {}
    answers: dict[str, object] = {}
    try:
        events: NvmlEventSet | None = source.xid_event_set()
    except NvmlError as error:
        print(f"{'xid_event_set':24s} NVML {error.error_name}")
        events = None
    try:
        for name, call in _calls(source, args.gpu, events).items():
            answer = _answer(call)
            walls, cpus = [], []
            for _ in range(args.runs):
                wall, cpu = time.perf_counter(), time.thread_time()
                _answer(call)  # an error is timed too: the collector pays it each poll
                cpus.append(time.thread_time() - cpu)
                walls.append(time.perf_counter() - wall)
            wall_us, cpu_us = statistics.median(walls) * 1e6, statistics.median(cpus) * 1e6
            medians[name], answers[name] = (wall_us, cpu_us), answer
            wall_sum += wall_us
            cpu_sum += cpu_us
            print(f"{name:24s} wall {wall_us:8.1f} us  cpu {cpu_us:8.1f} us  {str(answer)[:60]}")
    finally:
        if events is not None:
            source.free_event_set(events)
        source.shutdown()
    fields = answers.get("nvlink_fields")
    links = getattr(fields, "link_count", None) or 0
    if links > 1 and "nvlink_active" in medians:  # the other links' state calls
        wall_sum += (links - 1) * medians["nvlink_active"][0]
        cpu_sum += (links - 1) * medians["nvlink_active"][1]
        print(f"{'nvlink_active x ' + str(links):24s} (each link's state, in the sum)")
    print(f"sum of medians: wall {wall_sum / 1000:.2f} ms, cpu {cpu_sum / 1000:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
