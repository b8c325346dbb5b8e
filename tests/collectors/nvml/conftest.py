"""Build the fake libnvidia-ml.so.1 once and bind the real pynvml to it.

How the library gets loaded: glibc reads LD_LIBRARY_PATH only at process start, so
setting it here would not reach pynvml's ``CDLL("libnvidia-ml.so.1")``. Instead the
fake is loaded once by absolute path with RTLD_GLOBAL; when pynvml then asks for
"libnvidia-ml.so.1", glibc finds an object with that soname already loaded and hands it
back, even on a host that has a real NVML. That keeps every test in this process
(fast, plain asserts). pynvml keeps its handle in a module global, so a real library
it bound earlier in this process would win: the fixture checks and skips then. The one
case that needs no library at all runs in a subprocess (test_nvml.py).

fake_nvml.c rereads the file named by FAKE_NVML_CONFIG at every nvmlInit, so each test
writes its own GPUs; with the variable unset the fake says "driver not loaded".
"""

from __future__ import annotations

import ctypes
import itertools
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest
from fake_nvml_support import CONFIG_ENV, FakeNvml, FakeNvmlLibrary

from exporter.collectors.base import CollectorContext
from exporter.collectors.nvml import NvmlCollector

SOURCE = Path(__file__).with_name("fake_nvml.c")


@pytest.fixture(scope="session")
def fake_nvml_library(tmp_path_factory: pytest.TempPathFactory) -> FakeNvmlLibrary:
    """The fake NVML, compiled and loaded so that pynvml binds to it."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed: cannot build the fake libnvidia-ml.so.1")
    folder = tmp_path_factory.mktemp("fake_nvml")
    # Debian's gcc only recommends the C library's headers (libc6-dev): without them
    # nothing can be built, which is a missing tool, not a broken fake.
    probe = folder / "probe.c"
    probe.write_text("#include <stdio.h>\nint main(void) { return 0; }\n")
    if subprocess.run([gcc, "-o", folder / "probe", probe], capture_output=True).returncode:
        pytest.skip("gcc cannot build against the C library: its headers are missing (libc6-dev)")
    path = folder / "libnvidia-ml.so.1"
    built = subprocess.run(
        [gcc, "-shared", "-fPIC", "-O1", "-Wl,-soname,libnvidia-ml.so.1", "-o", path, SOURCE],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        pytest.fail(f"gcc could not build the fake NVML:\n{built.stderr}")
    cdll = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    bound = pynvml.nvmlLib
    if bound is not None and not hasattr(bound, "fakeNvmlInitCount"):
        pytest.skip("pynvml is already bound to another libnvidia-ml in this process")
    return FakeNvmlLibrary(path, cdll)


@pytest.fixture
def fake_nvml(
    fake_nvml_library: FakeNvmlLibrary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> FakeNvml:
    """A node without GPUs until the test calls ``configure``."""
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    return FakeNvml(fake_nvml_library, tmp_path / "fake_nvml.conf", monkeypatch)


@pytest.fixture
def collector(fake_nvml: FakeNvml) -> Iterator[NvmlCollector]:
    """An NvmlCollector on the real pynvml source, closed after the test.

    Its clock jumps past any init back-off between readings, so each collect() may
    retry nvmlInit; the back-off has its own tests."""
    hours = itertools.count(step=3600.0)
    nvml = NvmlCollector(CollectorContext(), clock=lambda: float(next(hours)))
    yield nvml
    nvml.close()
