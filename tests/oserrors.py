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


def page_reads(monkeypatch: pytest.MonkeyPatch, *, page: int = 4096) -> None:
    """Make ``os.read`` and ``os.pread`` return at most ``page`` bytes a call, as kernfs
    serves a binary attribute (a NUMA node's ``cpulist``) a page per read()."""

    def capped(real: Any) -> Any:
        def call(fd: int, size: int, *args: int) -> bytes:
            result: bytes = real(fd, min(size, page), *args)
            return result

        return call

    monkeypatch.setattr(os, "read", capped(os.read))
    monkeypatch.setattr(os, "pread", capped(os.pread))
