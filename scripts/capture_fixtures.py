#!/usr/bin/env python3
"""Capture the sysfs/procfs files the collectors read from this machine into a fixture tree.

Real kernels are the reference the simulated trees in ``exporter/sim/fixtures`` are
checked against: a reader and a fixture written by the same hand share the same
mistakes. Symbolic links are recreated as they are (sysfs links are relative), so
``class/net/eth0 -> ../../devices/...`` resolves inside the fixture as on the host.

    python scripts/capture_fixtures.py tests/fixtures/captured/<name>

Only small attribute files are copied (up to 64 KiB each), and only those the
collectors read: the list is ``PATTERNS`` below.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
from pathlib import Path

# Globs relative to / of what the collectors read (see exporter/collectors/*.py).
PATTERNS = (
    "/proc/stat",
    "/sys/devices/system/node/node*/cpulist",
    "/sys/devices/system/cpu/offline",
    "/sys/devices/system/cpu/present",
    "/sys/devices/system/cpu/cpu*/node*",
    "/sys/devices/system/node/node*/meminfo",
    "/sys/devices/system/node/node*/hugepages/hugepages-*/*_hugepages",
    "/sys/class/net/*/statistics/*",
    "/sys/class/net/*/device/vendor",
    "/sys/class/net/*/device/device",
    "/sys/class/net/*/device/class",
    "/sys/class/net/*/device/numa_node",
    "/sys/class/net/*/device/driver",
    "/sys/bus/pci/devices/*/vendor",
    "/sys/bus/pci/devices/*/device",
    "/sys/bus/pci/devices/*/class",
    "/sys/bus/pci/devices/*/numa_node",
    "/sys/class/infiniband/*/ports/*/counters/port_*",
    "/sys/class/infiniband/*/device",
    "/sys/class/drm/card*/device/vendor",
    "/sys/class/drm/card*/device/device",
)
MAX_BYTES = 64 * 1024


def _recreate(path: str, destination: Path) -> str:
    """Walk ``path`` component by component, recreating each symlink met under
    ``destination``; return the fully resolved path."""
    current = "/"
    for part in Path(path).parts[1:]:
        candidate = os.path.join(current, part)
        if os.path.islink(candidate):
            target = os.readlink(candidate)
            link = destination / candidate.lstrip("/")
            if not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(target)
            candidate = os.path.normpath(os.path.join(current, target))
            candidate = _recreate(candidate, destination)
        current = candidate
    return current


def capture(destination: Path) -> int:
    copied = 0
    for pattern in PATTERNS:
        for path in sorted(glob.glob(pattern)):
            resolved = _recreate(os.path.normpath(path), destination)
            if os.path.isdir(resolved):
                continue  # a link such as driver: recreated above
            try:
                with open(resolved, "rb") as handle:
                    data = handle.read(MAX_BYTES)
            except OSError as error:
                print(f"skipped {path}: {error.strerror}", file=sys.stderr)
                continue
            target = destination / resolved.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            copied += 1
    return copied


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("destination", type=Path, help="fixture root to create (holds sys/, proc/)")
    args = parser.parse_args()
    count = capture(args.destination)
    print(f"captured {count} files into {args.destination}")


if __name__ == "__main__":
    main()
