"""Give freed memory back to the OS: one big kubelet reply must not raise RSS for good.

glibc raises its mmap threshold each time a large block is freed, so after one big
reply the next big strings come from the heap and stay resident: RSS stayed at three
times its level after a 15 MiB reply. ``tune_allocator`` (once, at start) fixes the
threshold so large blocks live in mmap and are returned on free, and caps the arenas
the render threads spread over; ``trim`` hands back what the heap still holds free,
which the poller asks for on the polls after a large kubelet reply went away.
Both do nothing where the C library is not glibc. ``tune_gc`` lets the cycle
collector run less often: what a poll makes is freed by reference counting.
"""

from __future__ import annotations

import ctypes
import gc
from typing import Any

__all__ = [
    "GC_GEN0_THRESHOLD",
    "MALLOC_ARENAS",
    "MMAP_THRESHOLD_BYTES",
    "trim",
    "tune_allocator",
    "tune_gc",
]

# glibc's mallopt parameters (malloc.h).
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
MMAP_THRESHOLD_BYTES = 128 * 1024
MALLOC_ARENAS = 2
# A poll makes and drops tens of thousands of objects (readings, views, lines) that
# reference counting frees. At the default 700 the cycle collector still ran every poll
# on the dense node (per 60 polls: 164 young, 15 middle and 1 full collection; 2.0-3.6
# ms of a poll and its render, ~25 ms then, over two runs). At 10,000 a steady poll
# triggers none; the few cycles the exporter makes wait for a later collection
# (docs/benchmarks.md).
GC_GEN0_THRESHOLD = 10_000


def _glibc() -> Any:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt  # noqa: B018 - glibc has it; musl's libc.so.6 does not exist
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def tune_allocator() -> bool:
    """Fix the mmap threshold and cap the arenas; False where not glibc."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        and libc.mallopt(_M_ARENA_MAX, MALLOC_ARENAS)
    )


def trim() -> bool:
    """Return free heap memory to the OS (glibc malloc_trim); True when some was."""
    libc = _glibc()
    return bool(libc is not None and libc.malloc_trim(0))


def tune_gc() -> None:
    """Raise the cycle collector's first threshold (once, at start); the others stay."""
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)
