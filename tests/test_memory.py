"""exporter.memory: glibc tuning that returns freed memory, and nothing elsewhere."""

from __future__ import annotations

import platform

from exporter.memory import trim, tune_allocator

GLIBC = platform.libc_ver()[0] == "glibc"


def test_tuned_where_glibc() -> None:
    """On glibc both mallopt calls succeed; elsewhere tune_allocator says it did nothing."""
    assert GLIBC == tune_allocator()


def test_trim_runs_where_glibc() -> None:
    """malloc_trim after freeing a large heap block hands memory back on glibc."""
    blocks = [bytearray(64 * 1024) for _ in range(400)]  # heap-sized, under the threshold
    del blocks
    assert GLIBC == trim()
