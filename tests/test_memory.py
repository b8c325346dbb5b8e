"""exporter.memory: glibc tuning that returns freed memory, and nothing elsewhere; and
the modules a plain exporter leaves unloaded."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest
from freshprocess import run_python

from exporter.memory import MALLOC_ARENAS, trim, tune_allocator

GLIBC = platform.libc_ver()[0] == "glibc"


def test_tuned_where_glibc() -> None:
    """On glibc both mallopt calls succeed; elsewhere tune_allocator says it did nothing."""
    assert GLIBC == tune_allocator()


def test_trim_runs_where_glibc() -> None:
    """trim() says True on glibc and False elsewhere."""
    blocks = [bytearray(64 * 1024) for _ in range(400)]  # heap-sized, under the threshold
    del blocks
    assert GLIBC == trim()


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_trim_hands_freed_heap_memory_back() -> None:
    """In a fresh process, every other one of 800 touched 64 KiB heap blocks freed: the
    holes stay resident (free() gives back only the heap's top), and trim() returns
    them to the OS (of the 25 MiB freed, at least half leaves RSS). Its return value
    alone could not tell a trim() that never called malloc_trim from one that did."""
    script = """
import ctypes, json, os
from exporter.memory import trim

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
BLOCK = 64 << 10

def resident():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

blocks = [libc.malloc(BLOCK) for _ in range(800)]
for block in blocks:
    ctypes.memset(block, 1, BLOCK)
for block in blocks[::2]:
    libc.free(block)
before = resident()
trimmed = trim()
print(json.dumps({"trimmed": trimmed, "returned_mib": (before - resident()) >> 20}))
"""
    done = json.loads(run_python(script).stdout)

    assert (True, True) == (done["trimmed"], done["returned_mib"] >= 12), done


def test_a_plain_exporter_leaves_optional_modules_unloaded(tmp_path: Path) -> None:
    """An exporter built from default flags (every default collector, its app and its
    password checker) and a /metrics page rendered in every variant have not imported
    what only some nodes need: PyYAML (a web config, YAML CDI specs), bcrypt (basic
    auth), pynvml (an NVIDIA driver), importlib.metadata, the simulator (--demo), nor
    prometheus_client (our own writer serves every family; the tests use its parsers).
    Each costs RSS on every node otherwise (docs/benchmarks.md)."""
    script = f"""
import json, sys
from exporter.app import Exporter
from exporter.auth import PasswordChecker
from exporter.cli import parse_config
flags = ["--kubelet.socket", {str(tmp_path / "kubelet.sock")!r}]
exporter = Exporter(parse_config(flags, {{}}))
exporter.create_app()
PasswordChecker().close()
from exporter.exposition import render
from exporter.join import join_snapshot
from exporter.model import AllocatableResources, KubeletStatus
snapshot = join_snapshot(
    node="n", collected_at=1.0, kubelet=KubeletStatus(up=True, socket="/s", api=()),
    pods=(), allocatable=AllocatableResources(), cpu_numa={{}},
)
page = render(snapshot)
assert all(page.page(openmetrics=o, gzipped=g) for o in (False, True) for g in (False, True))
optional = (
    "yaml", "bcrypt", "pynvml", "importlib.metadata", "exporter.sim", "prometheus_client"
)
print(json.dumps([m for m in optional if m in sys.modules]))
"""
    done = run_python(script)

    assert [] == json.loads(done.stdout)


def test_tune_gc_raises_only_the_first_threshold() -> None:
    """The cycle collector's first threshold goes up to GC_GEN0_THRESHOLD; the others
    stay as they were."""
    import gc

    from exporter.memory import GC_GEN0_THRESHOLD, tune_gc

    before = gc.get_threshold()
    try:
        tune_gc()
        assert (GC_GEN0_THRESHOLD, *before[1:]) == gc.get_threshold()
    finally:
        gc.set_threshold(*before)


@pytest.mark.skipif(not GLIBC, reason="mallopt and malloc_info are glibc's")
def test_tuning_fixes_the_mmap_threshold_and_caps_the_arenas() -> None:
    """In a fresh tuned process, glibc's own counters: after an 8 MiB block is freed (which
    raises glibc's dynamic mmap threshold to 8 MiB), a 512 KiB block still comes from mmap
    and a 64 KiB one from the heap; eight threads holding memory at once share the
    MALLOC_ARENAS arenas (untuned: one arena each, nine)."""
    script = """
import ctypes, json, threading
from exporter.memory import tune_allocator

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
    )]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.open_memstream.restype = ctypes.c_void_p
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
tuned = tune_allocator()

def mapped(size):
    before = libc.mallinfo2().hblks
    block = libc.malloc(size)
    after = libc.mallinfo2().hblks
    libc.free(block)
    return after - before

libc.free(libc.malloc(8 << 20))
blocks = {"64KiB": mapped(64 << 10), "512KiB": mapped(512 << 10)}
barrier = threading.Barrier(9)

def hold():
    block = libc.malloc(1024)
    barrier.wait()
    barrier.wait()
    libc.free(block)

threads = [threading.Thread(target=hold) for _ in range(8)]
for thread in threads:
    thread.start()
barrier.wait()  # all eight hold a block now
text, size = ctypes.c_void_p(), ctypes.c_size_t()
stream = libc.open_memstream(ctypes.byref(text), ctypes.byref(size))
libc.malloc_info(0, stream)
libc.fclose(stream)
arenas = ctypes.string_at(text, size.value).decode().count("<heap nr=")
libc.free(text)
barrier.wait()
for thread in threads:
    thread.join()
print(json.dumps({"tuned": tuned, "mapped": blocks, "arenas": arenas}))
"""
    done = run_python(script)

    assert {"tuned": True, "mapped": {"64KiB": 0, "512KiB": 1}, "arenas": MALLOC_ARENAS} == (
        json.loads(done.stdout)
    )
