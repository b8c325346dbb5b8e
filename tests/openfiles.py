"""Which files this process holds open: what a test of closing needs to see."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["held_under"]


def held_under(root: Path | str) -> list[str]:
    """The files under ``root`` this process holds a descriptor on."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, gone by now
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(f"{root}/"):
                held.append(target)
    return held
