"""Where tests lay out simulated nodes: a memory filesystem where the machine has one.

A simulated node is some 800 small files, folders and symlinks, written at start, again
at every tick, and removed at the end; hundreds of tests start one. On a disk each entry
costs a journal update, and on a shared machine's virtual disk that came to ~1 ms of
system time per file created: a second or more per node, most of the suite's time. The
sysfs and procfs these trees stand for are in memory anyway.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

__all__ = ["demo_environ", "memory_parent", "scratch_folder"]

MEMORY_FS = "/dev/shm"
# A container's /dev/shm can be as small as 64 MiB (Docker's default): a node's tree
# takes a few MiB, but a full one must never be what fails a test.
_MIN_FREE_BYTES = 512 * 1024 * 1024


def memory_parent() -> str | None:
    """/dev/shm where it is a folder this process may write with room to spare, else
    None: the default temporary folder."""
    try:
        stats = os.statvfs(MEMORY_FS)
    except OSError:
        return None
    if not os.access(MEMORY_FS, os.W_OK | os.X_OK):
        return None
    return MEMORY_FS if stats.f_bavail * stats.f_frsize >= _MIN_FREE_BYTES else None


@contextlib.contextmanager
def scratch_folder(prefix: str) -> Iterator[Path]:
    """A new empty folder with a short path (unix socket paths end at 108 bytes), in
    memory where there is room; removed on the way out."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=memory_parent()))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def demo_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` for a ``--demo`` process, whose node makes its own temporary root:
    TMPDIR in memory where there is room."""
    parent = memory_parent()
    return {**environ, "TMPDIR": parent} if parent is not None else dict(environ)
