"""Reads that the kernel answers with an error code: sysfs attributes whose show()
fails (a netdev being unregistered, a port without PMA), which no fixture file can do."""

from __future__ import annotations

import os
from typing import Any

import pytest


def fail_reads(monkeypatch: pytest.MonkeyPatch, *, path_suffix: str, code: int) -> None:
    """Make ``os.read`` and ``os.pread`` of any descriptor open on a path ending with
    ``path_suffix`` fail with errno ``code``, as the kernel fails them; others read."""

    def failing(real: Any) -> Any:
        def call(fd: int, *args: int) -> bytes:
            if os.readlink(f"/proc/self/fd/{fd}").endswith(path_suffix):
                raise OSError(code, os.strerror(code))
            result: bytes = real(fd, *args)
            return result

        return call

    monkeypatch.setattr(os, "read", failing(os.read))
    monkeypatch.setattr(os, "pread", failing(os.pread))
