"""Time each CPU spent per mode, from ``<procfs>/stat``.

The per-CPU lines read ``cpuN user nice system idle iowait irq softirq steal guest
guest_nice``, counted in USER_HZ ticks; they are converted to seconds here, once. The
join sums them over each container's exclusive CPUs into
``podresources_container_exclusive_cpu_seconds_total{mode}``. Offline CPUs have no line.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from exporter.collectors.base import Collector, CollectorContext, CollectorError
from exporter.model import CpuTimes, Readings

__all__ = ["MODES", "CpuCollector", "parse_proc_stat", "read_proc_stat"]

# The modes exported, in /proc/stat's column order. guest and guest_nice (columns 9 and
# 10) are left out on purpose: the kernel already counts guest time in user and
# guest_nice in nice, so adding them would count that time twice.
MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
# Kernels before 2.6.11 print only some columns; fewer than these four is not /proc/stat.
_MIN_COLUMNS = 4
_CPU_NAME = re.compile(r"^cpu(\d+)$")
# /proc/stat puts the cpu lines first; a 1,024-CPU node prints ~100 KiB of them.
_MAX_STAT_BYTES = 4 * 1024 * 1024


def parse_proc_stat(text: str, *, user_hz: int) -> tuple[CpuTimes, ...]:
    """Seconds per mode of every CPU listed in ``text``, by CPU id.

    The ``cpu`` total line and non-cpu lines are skipped. Raises ValueError on a
    malformed cpu line.
    """
    if user_hz <= 0:
        raise ValueError(f"USER_HZ must be positive, not {user_hz}")
    by_cpu: dict[int, CpuTimes] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields or not fields[0].startswith("cpu") or fields[0] == "cpu":
            continue
        match = _CPU_NAME.match(fields[0])
        if match is None:
            raise ValueError(f"line {number}: not a cpu line: {line[:60]!r}")
        cpu = int(match.group(1))
        columns = fields[1:]
        if len(columns) < _MIN_COLUMNS or not all(c.isascii() and c.isdigit() for c in columns):
            raise ValueError(f"line {number}: malformed counters: {line[:80]!r}")
        if cpu in by_cpu:
            raise ValueError(f"line {number}: cpu{cpu} listed twice")
        # zip stops at steal: guest columns are dropped (see MODES).
        seconds = tuple(
            (mode, int(ticks) / user_hz) for mode, ticks in zip(MODES, columns, strict=False)
        )
        by_cpu[cpu] = CpuTimes(cpu, seconds)
    return tuple(by_cpu[cpu] for cpu in sorted(by_cpu))


def read_proc_stat(path: Path) -> str:
    """The cpu lines of ``/proc/stat`` (the file's head, up to the first other line).

    Raises CollectorError naming the path when it cannot be read.
    """
    lines: list[str] = []
    size = 0
    try:
        with path.open(encoding="ascii", errors="replace") as handle:
            for line in handle:
                if not line.startswith("cpu"):
                    break  # intr/softirq lines can be huge and are not needed
                size += len(line)
                if size > _MAX_STAT_BYTES:
                    raise CollectorError(f"{path}: cpu lines exceed {_MAX_STAT_BYTES} bytes")
                lines.append(line)
    except OSError as error:
        raise CollectorError(f"cannot read {path}: {error.strerror or error}") from error
    return "".join(lines)


class CpuCollector(Collector):
    """Per-CPU time by mode, for the exclusive-CPU usage of containers."""

    name = "cpu"
    description = "Time each CPU spent per mode, from /proc/stat."

    def __init__(self, context: CollectorContext, *, user_hz: int | None = None) -> None:
        super().__init__(context)
        # USER_HZ is fixed for the life of the kernel (100 on every common architecture).
        self._user_hz = user_hz if user_hz is not None else os.sysconf("SC_CLK_TCK")

    def collect(self, *, device_ids: frozenset[str]) -> Readings:
        """Read ``/proc/stat`` once."""
        path = self.context.procfs / "stat"
        text = read_proc_stat(path)
        try:
            cpu_times = parse_proc_stat(text, user_hz=self._user_hz)
        except ValueError as error:
            raise CollectorError(f"{path}: {error}") from error
        if not cpu_times:
            raise CollectorError(f"{path}: no per-CPU lines")
        return Readings(cpu_times=cpu_times)
