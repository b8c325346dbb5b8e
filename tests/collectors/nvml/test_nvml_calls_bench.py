"""bench/nvml_calls.py, the per-call timing of the real driver, run against the fake so
that it keeps working for the next machine with a GPU."""

from __future__ import annotations

import os
import subprocess
import sys

from fake_nvml_support import FakeGpu, FakeNvml
from freshprocess import REPO_ROOT, with_repo_path


def test_times_every_call_the_collectors_make(fake_nvml: FakeNvml) -> None:
    """Every PynvmlSource call is timed and answered; the sum closes the table."""
    fake_nvml.configure(FakeGpu("GPU-aaaa"))
    env = with_repo_path({**os.environ, "LD_LIBRARY_PATH": str(fake_nvml.library.path.parent)})
    done = subprocess.run(
        [sys.executable, "bench/nvml_calls.py", "--runs", "3"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = done.stdout.splitlines()
    timed = {line.split()[0] for line in lines[1:-1]}
    assert {
        "energy_millijoules",
        "process_utilization",
        "mig_enabled",
        "uuid",
        "compute_processes",
        "next_xid",
    } <= timed
    assert "GPU-aaaa" in done.stdout
    assert lines[-1].startswith("sum of medians: wall ")
    assert all(" us  cpu " in line for line in lines[1:-1]), done.stdout
