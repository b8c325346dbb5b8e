"""The NVML collector on the oldest nvidia-ml-py that pyproject.toml allows.

The rest of the suite runs the bindings the test venv installs, the newest. Older ones
differ in more than which functions they have: names (the v2 fabric struct is
c_nvmlGpuFabricInfoV_t before 13.580), constants (NVML_VALUE_TYPE_UNSIGNED_SHORT from
12.560), and layouts that disagree with nvml.h (a fabric UUID of 80 bytes, not 16).
Deleting names from the newest bindings shows none of that, so the oldest release is
downloaded as it was published and the same collector reads the same fake GPUs through
each, in a fresh process apiece (pynvml binds the library once per process).
"""

from __future__ import annotations

import json
import re
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_nvml_support import FakeGpu, FakeMig, FakeNvml, FakeProcess
from floors import floors, pip_or_skip
from freshprocess import run_python

# One worker of `make unit` runs them all: the oldest bindings, downloaded once.
pytestmark = pytest.mark.xdist_group("oldest_bindings")

UUID_A = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
UUID_B = "GPU-bbbbbbbb-1111-2222-3333-444444444444"
MIG_1 = "MIG-11111111-aaaa-bbbb-cccc-dddddddddddd"


def gpus(pids: tuple[int, int, int]) -> tuple[FakeGpu, ...]:
    """An NVSwitch GPU registered in the fabric, with NVLink counters read as field
    values; a MIG board; a GPU with GPM. Three processes on one list: a record size read
    wrong misplaces every record after the first."""
    first, second, third = pids
    return (
        FakeGpu(
            UUID_A,
            minor=0,
            pci="00000000:17:00.0",
            fabric=(3, 0),
            fabric_health=0x2,
            processes=(
                FakeProcess(first, 1 << 30),
                FakeProcess(second, 2 << 30),
                FakeProcess(third, 3 << 30),
            ),
        ),
        FakeGpu(
            UUID_B,
            minor=1,
            pci="00000000:B1:00.0",
            migs=(
                FakeMig(
                    0,
                    MIG_1,
                    gpu_instance=1,
                    compute_instance=0,
                    processes=(FakeProcess(first, 1 << 28),),
                ),
            ),
            gpm=(10.0, 50.0, 40.0, 25.0, 60.0, 1.0, 5.0, 2.0),
        ),
    )


@pytest.fixture
def pids() -> Iterator[tuple[int, int, int]]:
    """Three processes /proc has while the test runs (the collector drops one it lacks)."""
    sleepers = [subprocess.Popen(["sleep", "300"]) for _ in range(3)]
    try:
        first, second, third = (sleeper.pid for sleeper in sleepers)
        yield first, second, third
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


# What a run prints: every sample of every device, the processes listed, the issues.
SCRIPT = """
import ctypes, json, sys
ctypes.CDLL({library!r}, mode=ctypes.RTLD_GLOBAL)
import pynvml
from exporter.collectors.base import CollectorContext
from exporter.collectors.gpu_processes import GpuProcessesCollector
from exporter.collectors.nvml import NvmlCollector
collector = NvmlCollector(CollectorContext())
readings = [collector.collect() for _ in range(2)][-1]
collector.close()
lister = GpuProcessesCollector(CollectorContext())
listed = lister.collect()
lister.close()
print(json.dumps({{
    "bindings": pynvml.__file__,
    "samples": sorted(
        [device.name, sample.spec.name, list(sample.label_values), sample.value]
        for device in readings.devices
        for sample in device.samples
    ),
    "processes": sorted(
        [device.key.value, process.pid, process.memory_used_bytes]
        for device in listed.gpu_processes or ()
        for process in device.processes
    ),
    "issues": [[issue.error, issue.detail] for issue in readings.issues],
    "process_issues": [issue.error for issue in listed.issues],
}}))
"""


def oldest_allowed() -> str:
    """The nvidia-ml-py release pyproject.toml's bound names: the oldest a user may have."""
    return floors()["nvidia-ml-py"]


@pytest.fixture(scope="module")
def oldest_bindings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the pynvml.py of the oldest allowed nvidia-ml-py."""
    version = oldest_allowed()
    folder = tmp_path_factory.mktemp("oldest_pynvml")
    pip_or_skip(
        "download", "--only-binary=:all:", "--dest", str(folder), f"nvidia-ml-py=={version}",
        what=f"nvidia-ml-py=={version}",
    )  # fmt: skip
    (wheel,) = folder.glob("nvidia_ml_py-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extract("pynvml.py", folder / "site")
    return folder / "site"


def _run(
    fake_nvml: FakeNvml, bindings: Path | None, driver: str, pids: tuple[int, int, int]
) -> dict[str, Any]:
    fake_nvml.configure(*gpus(pids), driver_version=driver)
    script = SCRIPT.format(library=str(fake_nvml.library.path))
    if bindings is not None:  # ahead of the venv's: this process imports the old one
        script = f"import sys; sys.path.insert(0, {str(bindings)!r})\n{script}"
    done = run_python(script, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_the_lower_bound_is_an_exact_release() -> None:
    """The bound names a release (X.Y.Z), so the test below runs exactly it."""
    assert re.fullmatch(r"\d+\.\d+\.\d+", oldest_allowed())


# An R535 driver fills the _v3 process lists with 32-byte records, later ones with 24.
@pytest.mark.parametrize("driver", ["535.104.05", "550.127.05"])
def test_the_oldest_bindings_read_what_the_newest_read(
    fake_nvml: FakeNvml, oldest_bindings: Path, driver: str, pids: tuple[int, int, int]
) -> None:
    """Every figure and process the newest bindings read, the oldest read alike, without
    an issue; but the fabric's health mask, which only nvmlDeviceGetGpuFabricInfoV (from
    12.550) answers."""
    newest = _run(fake_nvml, None, driver, pids)
    oldest = _run(fake_nvml, oldest_bindings, driver, pids)
    assert oldest["bindings"].startswith(str(oldest_bindings))
    assert not newest["bindings"].startswith(str(oldest_bindings))

    def without_health(samples: list[list[Any]]) -> list[list[Any]]:
        return [s for s in samples if not s[1].startswith("podresources_gpu_fabric_health")]

    health = [s for s in newest["samples"] if s not in without_health(newest["samples"])]
    assert (without_health(newest["samples"]), newest["processes"], [], []) == (
        oldest["samples"],
        oldest["processes"],
        oldest["issues"],
        newest["issues"],
    )
    assert oldest["process_issues"] == newest["process_issues"]
    # The fabric as the fake registered it, through both (0 is what a misread gives).
    fabric = [s for s in oldest["samples"] if s[1] == "podresources_gpu_fabric_state_id"]
    assert [[UUID_A, "podresources_gpu_fabric_state_id", [], 3.0]] == fabric
    assert health, "the newest bindings read no fabric health: nothing was compared"
    first, second, third = pids
    listed = [[UUID_A, first, 1 << 30], [UUID_A, second, 2 << 30], [UUID_A, third, 3 << 30]]
    assert sorted([*listed, [MIG_1, first, 1 << 28]]) == oldest["processes"]
