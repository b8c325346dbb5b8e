"""bench/nvml_calls.py and bench/nvml_intervals.py, timings of the real driver,
run against the fake so that they keep working for the next machine with a GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from fake_nvml_support import FakeGpu, FakeNvml
from freshprocess import REPO_ROOT, with_repo_path


def _bench(fake_nvml: FakeNvml, *argv: str) -> str:
    """A bench script's output, run on one fake GPU through the fake library."""
    fake_nvml.configure(FakeGpu("GPU-aaaa", gpm=(90.0, 80.0, 40.0, 60.0, 70.0, 1.0, 20.0, 10.0)))
    env = with_repo_path({**os.environ, "LD_LIBRARY_PATH": str(fake_nvml.library.path.parent)})
    done = subprocess.run(
        [sys.executable, *argv],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def test_times_every_call_the_collectors_make(fake_nvml: FakeNvml) -> None:
    """Every PynvmlSource call is timed and answered; the sum closes the table."""
    stdout = _bench(fake_nvml, "bench/nvml_calls.py", "--runs", "3")
    lines = stdout.splitlines()
    timed = {line.split()[0] for line in lines[1:-1]}
    assert {
        "energy_millijoules",
        "process_utilization",
        "mig_enabled",
        "uuid",
        "compute_processes",
        "next_xid",
        "pcie_replays",
        "memory_temperature_celsius",
        "encoder_percent",
        "decoder_percent",
        "nvlink_fields",
        "nvlink_active",
        "gpm_supported",
        "gpm_sample_and_free",
        "gpm_metrics",
    } <= timed
    assert "GPU-aaaa" in stdout
    assert lines[-1].startswith("sum of medians: wall ")
    # The fake GPU's 18 links: 17 more state calls in the sum.
    assert "nvlink_active x 18" == lines[-2].split("  ")[0].strip(), stdout
    assert all(" us  cpu " in line for line in lines[1:-2]), stdout


def test_intervals_bench_runs_each_setting(fake_nvml: FakeNvml) -> None:
    """A row for each setting, each round, with its median and mean."""
    stdout = _bench(fake_nvml, "bench/nvml_intervals.py", "--polls", "7", "--rounds", "1")
    rows = [line.split() for line in stdout.splitlines()[1:]]
    settings = [["0", "s", "0", "s"], ["30", "s", "0", "s"], ["30", "s", "30", "s"]]
    assert settings == [row[:4] for row in rows], stdout
    assert all(row[5] == "ms" and row[7] == "ms" for row in rows), stdout


def test_exporter_on_gpu_bench_serves_and_measures(fake_nvml: FakeNvml) -> None:
    """The exporter polls the simulated kubelet, serves GPU 0's energy under the pod
    holding it at each mark, and its CPU closes the output in millicores."""
    stdout = _bench(
        fake_nvml,
        "bench/exporter_on_gpu.py",
        *("--warmup", "2", "--seconds", "1"),
        *("--", "--poll.interval=1", "--collector.nvml.gpm-interval=0"),
    )
    lines = stdout.splitlines()
    assert lines[0].startswith("1 GPU(s), the pod holding GPU-aaaa; exporter "), stdout
    marks = [index for index, line in enumerate(lines) if line.startswith("== at ")]
    assert 3 == len(marks), stdout
    served = [
        line.split("{")[0].strip()
        for line in lines[marks[-1] + 1 : -1]
        if 'pod="trainer-0"' in line
    ]
    assert "podresources_gpu_energy_joules_total" in served, stdout
    assert "podresources_gpu_sm_active_ratio" in served, stdout
    assert re.fullmatch(r"CPU over 1 s: \d+ ms, \d+\.\d\d millicores", lines[-1]), stdout
