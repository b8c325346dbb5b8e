"""What --collector.nvml.energy-interval and --collector.nvml.gpm-interval save on this
machine's real driver.

    .venv/bin/python bench/nvml_intervals.py [--polls 60] [--rounds 2]

Needs an NVIDIA GPU (the simulated GPUs answer in microseconds). Runs the nvml collector
on the real library, its clock stepped 10 s a poll (the default --poll.interval) so
that no run waits, ``--polls`` polls a run with the energy counter read and GPM
measured every poll (0) or every 30 s (the defaults): both every poll, the energy
counter alone every 30 s, then both. Each is run ``--rounds`` times, alternated, and
prints the thread-CPU time of one ``collect()``: its median (the polls between reads)
and its mean (what a poll costs on average). The first poll, which pays nvmlInit, is
left out. Figures only.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

from exporter.collectors.base import CollectorContext
from exporter.collectors.gpu_metrics import GPU_ENERGY
from exporter.collectors.nvml import NvmlCollector

POLL_INTERVAL_S = 10.0
# (energy interval, GPM interval): every poll, the energy interval alone, both.
SETTINGS = ((0.0, 0.0), (30.0, 0.0), (30.0, 30.0))


def _run(energy_s: float, gpm_s: float, polls: int) -> tuple[list[float], int]:
    """CPU seconds of each poll's collect(), and how many polls served a new energy value."""
    now = [0.0]
    context = CollectorContext(nvml_energy_interval_s=energy_s, nvml_gpm_interval_s=gpm_s)
    collector = NvmlCollector(context, clock=lambda: now[0])
    try:
        collector.collect()  # nvmlInit
        spent, served = [], []
        for _ in range(polls):
            now[0] += POLL_INTERVAL_S
            started = time.thread_time()
            readings = collector.collect()
            spent.append(time.thread_time() - started)
            served.append(
                [s.value for d in readings.devices for s in d.samples if s.spec is GPU_ENERGY]
            )
    finally:
        collector.close()
    changed = sum(1 for before, after in itertools.pairwise(served) if before != after)
    return spent, changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=60, help="polls a run")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each setting")
    args = parser.parse_args()
    print(f"{'energy':>8s} {'gpm':>6s} {'median':>10s} {'mean':>10s}  polls with new energy")
    for _ in range(args.rounds):
        for energy_s, gpm_s in SETTINGS:
            spent, changed = _run(energy_s, gpm_s, args.polls)
            median_ms = statistics.median(spent) * 1000
            mean_ms = statistics.fmean(spent) * 1000
            print(
                f"{energy_s:6g} s {gpm_s:4g} s {median_ms:7.3f} ms {mean_ms:7.3f} ms  "
                f"{changed} of {args.polls - 1}"
            )


if __name__ == "__main__":
    main()
