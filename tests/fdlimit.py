"""Tests that hold thousands of connections need as many descriptors as they hold."""

from __future__ import annotations

import resource

import pytest

__all__ = ["need_open_files"]


def need_open_files(count: int) -> None:
    """Raise this process's soft open-files limit to ``count`` (processes started after
    inherit it), or skip, saying so, where the hard limit is lower: a common ``ulimit -n
    1024`` would otherwise fail such a test with EMFILE, not by any fault of the code."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= count:
        return
    if hard != resource.RLIM_INFINITY and hard < count:
        pytest.skip(f"needs {count} open files; the hard limit is {hard} (ulimit -Hn)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, hard))
