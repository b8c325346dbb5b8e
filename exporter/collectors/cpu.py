"""Time each CPU spent per mode, from ``<procfs>/stat``.

The per-CPU lines read ``cpuN user nice system idle iowait irq softirq steal guest
guest_nice``, counted in USER_HZ ticks; they are converted to seconds here, once. The
join sums them over each container's exclusive CPUs into
``podresources_container_exclusive_cpu_seconds_total{mode}``. Offline CPUs have no line.

The kernel's figures can go backwards a little (iowait by design, user and system on
``nohz_full`` CPUs, which exclusive CPUs often are), and Prometheus reads any decrease
of a counter as a reset: ``rate()`` would count a CPU's whole lifetime again. So a mode
that went back keeps its last value, as node_exporter does; an idle time ``JUMP_BACK_S``
or more back means the CPU was taken offline and back (older kernels restart its idle
count then), and its figures are taken as they are.

Failures are per figure (``Readings.issues``, error ``garbage``): a counter that is
not a 64-bit number loses that CPU's mode, a malformed line that CPU. The collector
fails only when ``/proc/stat`` cannot be read or gives no CPU at all.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Generic, TypeVar

from exporter.collectors.base import (
    Collector,
    CollectorContext,
    CollectorError,
    Registration,
    issue,
)
from exporter.model import CpuTimes, Readings
from exporter.sysfs import GARBAGE, MAX_COUNTER, GarbageFile, UnreadableFile, open_regular

__all__ = [
    "JUMP_BACK_S",
    "MODES",
    "REGISTRATION",
    "CpuCollector",
    "ProcStatTimes",
    "not_backwards",
    "parse_proc_stat",
    "read_proc_stat",
]

# The modes exported, in /proc/stat's column order. guest and guest_nice (columns 9 and
# 10) are left out on purpose: the kernel already counts guest time in user and
# guest_nice in nice, so adding them would count that time twice.
MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
# Idle time this far back is a CPU taken offline and back, not jitter (node_exporter's
# threshold): its figures restart from what the kernel says.
JUMP_BACK_S = 3.0
_IDLE = MODES.index("idle")
# Kernels before 2.6.11 print only some columns; fewer than these four is not /proc/stat.
_MIN_COLUMNS = 4
_CPU_NAME = re.compile(r"^cpu(\d{1,6})$")
_COUNTER = re.compile(r"^[0-9]{1,20}$")  # 2**64 - 1 has 20 digits
_UNIFORM_MAX_DIGITS = 19  # below 2**64 whatever the digits: no range check needed
# /proc/stat puts the cpu lines first; a 1,024-CPU node prints ~100 KiB of them.
_MAX_STAT_BYTES = 4 * 1024 * 1024


def parse_proc_stat(text: str, *, user_hz: int) -> tuple[tuple[CpuTimes, ...], tuple[str, ...]]:
    """Seconds per mode of every CPU listed in ``text``, by CPU id, and what was wrong.

    The ``cpu`` total line and non-cpu lines are skipped. A counter that is not a
    64-bit number loses that mode of that CPU; a line that is not a cpu line, has
    fewer than four counters or repeats a CPU is left out. Each gives one message,
    with its line number. Raises ValueError for a USER_HZ that is not positive.
    """
    if user_hz <= 0:
        raise ValueError(f"USER_HZ must be positive, not {user_hz}")
    uniform = _parse_uniform(text, user_hz=user_hz)
    if uniform is not None:
        return tuple(uniform.values()), ()
    return _parse_lines(text, user_hz=user_hz)


def _parse_lines(text: str, *, user_hz: int) -> tuple[tuple[CpuTimes, ...], tuple[str, ...]]:
    """parse_proc_stat line by line, saying what is wrong with each line that is."""
    by_cpu: dict[int, CpuTimes] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields or not fields[0].startswith("cpu") or fields[0] == "cpu":
            continue
        match = _CPU_NAME.match(fields[0])
        if match is None:
            problems.append(f"line {number}: not a cpu line: {line[:60]!r}")
            continue
        cpu = int(match.group(1))
        columns = fields[1:]
        if len(columns) < _MIN_COLUMNS:
            problems.append(f"line {number}: fewer than {_MIN_COLUMNS} counters: {line[:80]!r}")
            continue
        if cpu in by_cpu:
            problems.append(f"line {number}: cpu{cpu} listed twice")
            continue
        seconds = []
        # zip stops at steal: guest columns are dropped (see MODES).
        for mode, ticks in zip(MODES, columns, strict=False):
            if _COUNTER.match(ticks) is None or int(ticks) > MAX_COUNTER:
                problems.append(
                    f"line {number}: cpu{cpu} {mode}: not a 64-bit counter: {ticks[:40]!r}"
                )
                continue
            seconds.append((mode, int(ticks) / user_hz))
        if seconds:
            by_cpu[cpu] = CpuTimes(cpu, tuple(seconds))
    return tuple(by_cpu[cpu] for cpu in sorted(by_cpu)), tuple(problems)


def _parse_uniform(
    text: str, *, user_hz: int, floors: dict[int, CpuTimes] | None = None
) -> ProcStatTimes | None:
    """parse_proc_stat's result for the kernel's usual output, else None.

    Usual: only cpu lines, all with the same number of columns, every counter plain
    digits short enough to be 64-bit, no CPU twice. Checked for the whole text at once,
    so 256 CPUs cost a few C-level passes instead of a check per counter; anything
    else goes through the per-line parser, which says what is wrong.
    """
    tokens = text.split()
    lines = text.count("\n") + (not text.endswith("\n"))
    if not tokens or len(tokens) % lines:
        return None
    width = len(tokens) // lines
    names = tokens[::width]
    del tokens[::width]  # the counters are left
    joined = "".join(tokens)
    if width <= _MIN_COLUMNS or not (joined.isascii() and joined.isdigit()):
        return None
    if max(map(len, tokens)) > _UNIFORM_MAX_DIGITS:
        return None
    total = names[0] == "cpu"
    cpus = []
    for name in names[total:]:
        if _CPU_NAME.match(name) is None:
            return None
        cpus.append(int(name[3:]))
    if len(set(cpus)) != len(cpus):
        return None
    counters = width - 1
    rows = dict(sorted(zip(cpus, range(len(cpus)), strict=True)))
    return ProcStatTimes(
        rows,
        tokens[counters * total :],
        width=counters,
        kept=min(counters, len(MODES)),
        user_hz=user_hz,
        floors=floors,
    )


# What a table keeps of each CPU listed: its row of counters, or its parsed times.
_Listed = TypeVar("_Listed")


class _FlooredTimes(Mapping[int, CpuTimes], Generic[_Listed]):
    """CPU times by CPU, each made when first looked up (``_times``) and then kept. A
    CPU found in ``floors`` (the figures given before) never goes below them
    (``not_backwards``), and what it gives becomes its floor. ``floors`` is the
    collector's, shared by the tables of every poll: a snapshot's page is rendered by
    its first scrape, which may come after the next poll has read /proc/stat (a scrape
    while that poll waits on the kubelet or a slow collector), and the figures it gives
    then must floor the next poll's as well. (The collector drops a CPU's floor when a
    poll lists it again after one that did not: a late render still finds it.)

    Plain data once built: the counters were checked when read, nothing is read later.
    Two threads converting the same CPU at once both store the same figures.
    """

    __slots__ = ("_converted", "_cpus", "_floors")

    def __init__(self, cpus: Mapping[int, _Listed], floors: dict[int, CpuTimes]) -> None:
        self._cpus = cpus  # what was read of each CPU listed
        self._floors = floors
        self._converted: dict[int, CpuTimes] = {}

    def _times(self, cpu: int) -> CpuTimes:
        raise NotImplementedError

    def __getitem__(self, cpu: int) -> CpuTimes:
        found = self._converted.get(cpu)
        if found is None:
            found = _given(self._times(cpu), self._floors)
            self._converted[cpu] = found
        return found

    def __contains__(self, cpu: object) -> bool:
        return cpu in self._cpus

    def __iter__(self) -> Iterator[int]:
        return iter(self._cpus)

    def __len__(self) -> int:
        return len(self._cpus)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self._cpus)} CPUs)"


class ProcStatTimes(_FlooredTimes[int]):
    """The usual /proc/stat's CPU times, each converted to seconds when first looked up:
    a poll reads every CPU's line, but the join needs only the exclusive CPUs' (a
    256-CPU node converts the few dozen lines containers hold, not 256)."""

    __slots__ = ("_counters", "_kept", "_user_hz", "_width")

    def __init__(
        self,
        rows: dict[int, int],
        counters: list[str],
        *,
        width: int,
        kept: int,
        user_hz: int,
        floors: dict[int, CpuTimes] | None = None,
    ) -> None:
        super().__init__(rows, {} if floors is None else floors)  # CPU -> its row, in order
        self._counters = counters  # every row's counters, as digits
        self._width = width  # counters per row
        self._kept = kept  # the leading counters that are MODES
        self._user_hz = user_hz

    def _times(self, cpu: int) -> CpuTimes:
        start = self._cpus[cpu] * self._width
        ticks = self._counters[start : start + self._kept]
        seconds = [int(count) / self._user_hz for count in ticks]
        return CpuTimes(cpu, tuple(zip(MODES, seconds, strict=False)))


class _ParsedTimes(_FlooredTimes[CpuTimes]):
    """The per-line parser's CPU times, floored as ``ProcStatTimes``' are: when first
    looked up, not when read. Floored at the read, a poll of unusual text would take
    the floors of before a late render of the last snapshot (its first scrape, after
    this read), and fall below the figures that page gave."""

    __slots__ = ()

    def _times(self, cpu: int) -> CpuTimes:
        return self._cpus[cpu]


def _given(times: CpuTimes, floors: dict[int, CpuTimes]) -> CpuTimes:
    """``times`` kept from going below its CPU's floor, and made that floor: what a
    table gives when a CPU is first looked up."""
    floor = floors.get(times.cpu)
    if floor is not None:
        times = not_backwards(times, floor)
    floors[times.cpu] = times
    return times


def not_backwards(times: CpuTimes, floor: CpuTimes) -> CpuTimes:
    """``times`` with each mode at least what ``floor`` gave, unless idle went back by
    ``JUMP_BACK_S`` or more (the CPU went offline and back: ``times`` as they are)."""
    # Both list MODES in order (a prefix of it where the kernel prints fewer columns), so
    # modes pair by position: this runs for every held CPU of every rendered snapshot.
    new, old = times.seconds_by_mode, floor.seconds_by_mode
    if not (_leading(new) and _leading(old)):
        return _not_backwards_by_mode(times, floor)
    if len(new) > _IDLE and len(old) > _IDLE and old[_IDLE][1] - new[_IDLE][1] >= JUMP_BACK_S:
        return times
    for n, o in zip(new, old, strict=False):
        if n[1] < o[1]:
            break
    else:
        return times  # nothing went back: most CPUs, most polls
    kept = tuple((mode, max(seconds, o[1])) for (mode, seconds), o in zip(new, old, strict=False))
    return CpuTimes(times.cpu, kept + new[len(kept) :])


def _leading(seconds: tuple[tuple[str, float], ...]) -> bool:
    """Whether ``seconds`` lists the leading MODES: a garbage counter the per-line parser
    refused leaves a gap, and then modes do not pair by position. (The modes come in
    MODES order, so the last one's place tells.)"""
    return not seconds or seconds[-1][0] == MODES[len(seconds) - 1]


def _not_backwards_by_mode(times: CpuTimes, floor: CpuTimes) -> CpuTimes:
    """``not_backwards`` for figures with a gap in their modes: modes pair by name."""
    old = dict(floor.seconds_by_mode)
    idle, old_idle = dict(times.seconds_by_mode).get("idle"), old.get("idle")
    if idle is not None and old_idle is not None and old_idle - idle >= JUMP_BACK_S:
        return times
    kept = tuple(
        (mode, max(seconds, old.get(mode, seconds))) for mode, seconds in times.seconds_by_mode
    )
    return CpuTimes(times.cpu, kept)


def read_proc_stat(path: Path) -> str:
    """The cpu lines of ``/proc/stat`` (the file's head, up to the first other line).

    Raises CollectorError naming the path when it cannot be read, is not a regular
    file (a FIFO would block) or its cpu lines exceed 4 MiB.
    """
    lines: list[bytes] = []
    size = 0
    try:
        with open_regular(path) as handle:
            while True:
                # Bounded: a file of one endless line must not be read whole.
                line = handle.readline(_MAX_STAT_BYTES + 1 - size)
                if not line.startswith(b"cpu"):
                    break  # intr/softirq lines can be huge and are not needed
                size += len(line)
                if size > _MAX_STAT_BYTES:
                    raise GarbageFile(f"{path}: cpu lines exceed {_MAX_STAT_BYTES} bytes")
                lines.append(line)
    except OSError as error:
        raise UnreadableFile(f"cannot read {path}: {error.strerror or error}") from error
    return b"".join(lines).decode("ascii", errors="replace")


class CpuCollector(Collector):
    """Per-CPU time by mode, for the exclusive-CPU usage of containers."""

    name = "cpu"
    # Only bad counters are issues; an unreadable /proc/stat fails the whole collector.
    known_errors = (GARBAGE,)

    def __init__(self, context: CollectorContext, *, user_hz: int | None = None) -> None:
        super().__init__(context)
        # USER_HZ is fixed for the life of the kernel (100 on every common architecture).
        self._user_hz = user_hz if user_hz is not None else os.sysconf("SC_CLK_TCK")
        # Each CPU's figures last given, by whichever poll's table gave them: the floors
        # of every table, kept across polls nobody scraped (nothing converted then).
        self._floors: dict[int, CpuTimes] = {}
        self._listed: frozenset[int] = frozenset()  # the CPUs the last table listed

    def collect(self) -> Readings:
        """Read ``/proc/stat`` once."""
        path = self.context.procfs / "stat"
        text = read_proc_stat(path)
        floors = self._floors
        cpu_times: Mapping[int, CpuTimes] | None = _parse_uniform(
            text, user_hz=self._user_hz, floors=floors
        )
        problems: tuple[str, ...] = ()
        if cpu_times is None:  # unusual text: the per-line parser says what is wrong
            listed, problems = _parse_lines(text, user_hz=self._user_hz)
            cpu_times = _ParsedTimes({t.cpu: t for t in listed}, floors)
        if not cpu_times:
            reason = problems[0] if problems else "no per-CPU lines"
            raise CollectorError(f"{path}: {reason}")
        # An offline CPU's floor goes when it is back, not when it goes: its figures
        # restart from what the kernel says, but the late render of the last snapshot
        # (its first scrape, after this read) still floors it on the figures last given.
        cpus = frozenset(cpu_times)
        if cpus != self._listed:
            for cpu in cpus - self._listed:
                floors.pop(cpu, None)
            self._listed = cpus
        return Readings(
            cpu_times=cpu_times,
            issues=tuple(issue(GARBAGE, f"{path}: {problem}") for problem in problems),
        )


REGISTRATION = Registration(
    "cpu",
    "Time each CPU spent per mode, from /proc/stat (exclusive CPU usage of containers)",
    CpuCollector,
)
