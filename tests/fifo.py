"""Reading a FIFO without a writer must fail at once; a test of that must not hang."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

# How long a read may take before it counts as blocked: it bounds a hang, it measures
# nothing (a refused FIFO returns in microseconds).
HANG_GUARD_S = 30.0


def error_reading_fifo(read: Callable[[Path], object], path: Path) -> BaseException:
    """Make ``path`` a FIFO with no writer and return what ``read(path)`` raised; fail
    the test if it returned, or if it blocked (after releasing it so the run can end)."""
    os.mkfifo(path)
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(read(path))
        except BaseException as error:  # handed to the test thread to assert on
            outcome.append(error)

    reader = threading.Thread(target=call, daemon=True)
    reader.start()
    reader.join(HANG_GUARD_S)
    if reader.is_alive():
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # release the blocked reader
        reader.join()
        pytest.fail(f"{getattr(read, '__name__', read)} blocked on a FIFO")
    [result] = outcome
    if not isinstance(result, BaseException):
        pytest.fail(f"reading a FIFO returned {result!r} instead of failing")
    return result
