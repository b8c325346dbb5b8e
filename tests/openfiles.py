"""Which files this process holds open: what a test of closing needs to see."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

__all__ = ["count_opens", "held_under"]


def held_under(root: Path | str) -> list[str]:
    """The files under ``root`` this process holds a descriptor on."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, gone by now
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(f"{root}/"):
                held.append(target)
    return held


def count_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths ``os.open`` opens from now on, in order (the list fills as they open)."""
    opened: list[str] = []
    real_open = os.open

    def recording(path: str, flags: int, *args: int, **kwargs: int) -> int:
        opened.append(str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording)
    return opened
