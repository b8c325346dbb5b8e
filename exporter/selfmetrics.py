"""The exporter's own process families, as ``Rows``, without prometheus_client.

``live_rows()`` gives the series prometheus_client's ``PROCESS_COLLECTOR``,
``PLATFORM_COLLECTOR`` and ``GC_COLLECTOR`` give, in their order, with their names,
types, HELP texts and labels: ``process_*`` from ``/proc/self/stat``,
``/proc/self/limits``, ``/proc/self/fd`` (its size, or its listing) and the boot time
in ``/proc/stat``;
``python_info`` from ``platform``; ``python_gc_*`` from ``gc.get_stats()``. Values are
read at each call: the exposition renders them at scrape time, not per poll.

As prometheus_client does, the ``process_*`` families are left out where ``/proc``
cannot be read (not Linux), the descriptor pair where its files cannot be, and the
``python_gc_*`` families outside CPython. A line that does not parse leaves its
families out too (prometheus_client would fail the scrape).
"""

from __future__ import annotations

import functools
import gc
import os
import platform
from dataclasses import dataclass
from pathlib import Path

from exporter.metricwriter import Rows, counter, gauge
from exporter.sysfs import parse_boot_time

__all__ = [
    "PROC",
    "ProcessStat",
    "live_rows",
    "parse_max_fds",
    "parse_process_stat",
]

PROC = Path("/proc")

_TICKS_PER_S = float(os.sysconf("SC_CLK_TCK"))
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
_NO_LABELS: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ProcessStat:
    """What ``/proc/<pid>/stat`` says of a process, in bytes and seconds."""

    virtual_memory_bytes: float
    resident_memory_bytes: float
    started_after_boot_seconds: float
    cpu_seconds: float  # user + system


def parse_process_stat(
    text: bytes, *, ticks_per_s: float = _TICKS_PER_S, page_bytes: int = _PAGE_BYTES
) -> ProcessStat:
    """``/proc/<pid>/stat``; ValueError or IndexError when it is not that.

    The command name (field 2, in parentheses) may hold spaces and parentheses, so the
    fields are counted from the last ``)``: field 3 (state) is index 0 there.
    """
    fields = text.rsplit(b")", 1)[1].split()
    return ProcessStat(
        virtual_memory_bytes=float(fields[20]),  # field 23, vsize
        resident_memory_bytes=float(fields[21]) * page_bytes,  # field 24, rss in pages
        started_after_boot_seconds=float(fields[19]) / ticks_per_s,  # field 22, starttime
        cpu_seconds=(float(fields[11]) + float(fields[12])) / ticks_per_s,  # utime, stime
    )


def parse_max_fds(text: bytes) -> float:
    """The soft ``Max open files`` limit of ``/proc/<pid>/limits``; ValueError when the
    line is missing or the limit is not a number ("unlimited")."""
    for line in text.splitlines():
        if line.startswith(b"Max open files"):
            return float(line.split()[3])
    raise ValueError("no Max open files line")


def _read(path: str) -> bytes:
    with open(path, "rb") as file:  # not Path.read_bytes: a third slower, every scrape
        return file.read()


_BOOT_TIMES: dict[Path, float] = {}


def _boot_time(proc: Path) -> float | None:
    """The boot time, read once per root; None where it cannot be read (not Linux).
    Only a read that worked is kept: one that failed for a while (EMFILE in a burst of
    connections) is tried again by the next live render, at most once a second."""
    found = _BOOT_TIMES.get(proc)
    if found is None:
        try:
            found = _BOOT_TIMES[proc] = parse_boot_time(_read(f"{proc}/stat"))
        except (OSError, ValueError):
            return None
    return found


def _one(family: Rows, value: float) -> Rows:
    """``family`` with its one unlabelled sample."""
    family.add(_NO_LABELS, value)
    return family


def _gauge(name: str, documentation: str, value: float) -> Rows:
    return _one(gauge(name, documentation, _NO_LABELS), value)


def _process_rows(proc: Path) -> list[Rows]:
    boot_time = _boot_time(proc)
    if boot_time is None:
        return []
    own = f"{proc}/self"
    rows: list[Rows] = []
    try:
        stat = parse_process_stat(_read(f"{own}/stat"))
    except (OSError, ValueError, IndexError):
        pass
    else:
        rows += [
            _gauge(
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                stat.virtual_memory_bytes,
            ),
            _gauge(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                stat.resident_memory_bytes,
            ),
            _gauge(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                stat.started_after_boot_seconds + boot_time,
            ),
            _one(
                counter(
                    "process_cpu_seconds",
                    "Total user and system CPU time spent in seconds.",
                    _NO_LABELS,
                ),
                stat.cpu_seconds,
            ),
        ]
    try:
        max_fds = parse_max_fds(_read(f"{own}/limits"))
        open_fds = _open_fds(proc, own)
    except (OSError, ValueError, IndexError):
        return rows
    return [
        *rows,
        _gauge("process_open_fds", "Number of open file descriptors.", open_fds),
        _gauge("process_max_fds", "Maximum number of open file descriptors.", max_fds),
    ]


def _open_fds(proc: Path, own: str) -> int:
    """This process's open descriptors. Since Linux 6.2 the size of ``/proc/<pid>/fd``
    is their count: one stat instead of a listing, which on a node with many NICs
    (netdev keeps ~8 counter files open per NIC) is the bulk of a scrape's process
    figures: ~4 us against ~240 us for 480 descriptors, on the event loop. Older
    kernels give 0 there, and a fixture tree is not procfs: those are listed. Unlike
    a listing, the count leaves out the descriptor the listing itself opens."""
    if proc == PROC:
        count = os.stat(f"{own}/fd").st_size
        if count > 0:
            return count
    return len(os.listdir(f"{own}/fd"))


@functools.cache
def _python_info() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(label names, values) of python_info, as PLATFORM_COLLECTOR gives them."""
    major, minor, patchlevel = platform.python_version_tuple()
    info = {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "major": major,
        "minor": minor,
        "patchlevel": patchlevel,
    }
    return tuple(info), tuple(info.values())


def _platform_rows() -> list[Rows]:
    labels, values = _python_info()
    info = gauge("python_info", "Python platform information", labels)
    info.add(values, 1)
    return [info]


def _gc_rows() -> list[Rows]:
    if not hasattr(gc, "get_stats") or platform.python_implementation() != "CPython":
        return []
    generation = ("generation",)
    collected = counter("python_gc_objects_collected", "Objects collected during gc", generation)
    uncollectable = counter(
        "python_gc_objects_uncollectable", "Uncollectable objects found during GC", generation
    )
    collections = counter(
        "python_gc_collections", "Number of times this generation was collected", generation
    )
    for index, stats in enumerate(gc.get_stats()):
        labels = (str(index),)
        collected.add(labels, stats["collected"])
        uncollectable.add(labels, stats["uncollectable"])
        collections.add(labels, stats["collections"])
    return [collected, uncollectable, collections]


def live_rows(*, proc: Path = PROC) -> list[Rows]:
    """The process, platform and GC families, read now; ``proc``: the procfs root whose
    ``self`` is this process."""
    return [*_process_rows(proc), *_platform_rows(), *_gc_rows()]
