"""The cpu collector turns /proc/stat's per-CPU lines into seconds per mode."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporter.collectors.base import CollectorContext, CollectorError
from exporter.collectors.cpu import CpuCollector, parse_proc_stat, read_proc_stat
from exporter.model import CpuTimes, Readings
from exporter.sim.fixtures import procfs as procfs_fixture
from exporter.sim.hardware import GIB, SimHardware, SimNumaNode

STAT = """\
cpu  10132153 290696 3084719 46828483 16683 0 25195 0 175628 0
cpu0 1393280 32966 572056 13343292 6130 0 17875 0 23933 0
cpu1 1335829 35100 523040 13393497 4050 0 3200 5 0 7
intr 199292 0 9 0 0 0 0 0 0 1 0 0 0 0 0 0 0
ctxt 38014093
btime 1680000000
processes 26442
procs_running 1
procs_blocked 0
softirq 5057579 250191 1481983 1647 211099 186066 0 1783454 622196 12499 508444
"""


def _times(cpu: int, *ticks: int, user_hz: int = 100) -> CpuTimes:
    modes = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    return CpuTimes(cpu, tuple((m, t / user_hz) for m, t in zip(modes, ticks, strict=False)))


class TestParseProcStat:
    def test_per_cpu_lines_in_seconds(self) -> None:
        """Each cpuN line becomes seconds per mode at USER_HZ 100; the total line is skipped."""
        expected = (
            _times(0, 1393280, 32966, 572056, 13343292, 6130, 0, 17875, 0),
            _times(1, 1335829, 35100, 523040, 13393497, 4050, 0, 3200, 5),
        )
        assert expected == parse_proc_stat(STAT, user_hz=100)

    def test_user_hz_is_honoured(self) -> None:
        """Ticks are divided by the USER_HZ given: 250 ticks at 250 Hz is one second."""
        expected = (CpuTimes(3, (("user", 1.0), ("nice", 0.0), ("system", 0.5), ("idle", 2.0))),)
        assert expected == parse_proc_stat("cpu3 250 0 125 500\n", user_hz=250)

    def test_guest_time_is_not_added(self) -> None:
        """guest and guest_nice, already inside user and nice, are not exported again."""
        text = "cpu0 1000 200 0 0 0 0 0 0 900 150\n"

        expected = (_times(0, 1000, 200, 0, 0, 0, 0, 0, 0),)
        assert expected == parse_proc_stat(text, user_hz=100)

    def test_old_kernels_with_fewer_columns(self) -> None:
        """A line without steal and guest columns gives only the modes it has."""
        expected = (_times(0, 100, 0, 50, 800, 0, 0, 0),)
        assert expected == parse_proc_stat("cpu0 100 0 50 800 0 0 0\n", user_hz=100)

    def test_sorted_by_cpu_with_gaps(self) -> None:
        """Offline CPUs have no line; the rest come sorted by CPU id."""
        text = "cpu  0 0 0 0\ncpu12 1 0 0 0\ncpu2 2 0 0 0\n"

        expected = (_times(2, 2, 0, 0, 0), _times(12, 1, 0, 0, 0))
        assert expected == parse_proc_stat(text, user_hz=100)

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("cpu0 1 2 3\n", "line 1: malformed counters"),
            ("cpu0 1 2 x 4\n", "line 1: malformed counters"),
            ("cpu0 1 2 -3 4\n", "line 1: malformed counters"),
            ("cpuX 1 2 3 4\n", "line 1: not a cpu line"),
            ("cpu0 1 2 3 4\ncpu0 1 2 3 4\n", "line 2: cpu0 listed twice"),
        ],
    )
    def test_garbage_raises(self, text: str, message: str) -> None:
        """A malformed cpu line is refused with its line number."""
        with pytest.raises(ValueError, match=message):
            parse_proc_stat(text, user_hz=100)

    def test_user_hz_must_be_positive(self) -> None:
        """A zero USER_HZ is refused rather than dividing by it."""
        with pytest.raises(ValueError, match="USER_HZ must be positive"):
            parse_proc_stat(STAT, user_hz=0)


class TestReadProcStat:
    def test_stops_after_the_cpu_lines(self, tmp_path: Path) -> None:
        """Only the head of the file, the cpu lines, is read."""
        (tmp_path / "stat").write_text(STAT)

        expected = "".join(STAT.splitlines(keepends=True)[:3])
        assert expected == read_proc_stat(tmp_path / "stat")

    def test_missing_file_names_the_path(self, tmp_path: Path) -> None:
        """A missing /proc/stat is an error naming the path."""
        with pytest.raises(CollectorError, match=f"cannot read {tmp_path / 'stat'}"):
            read_proc_stat(tmp_path / "stat")


class TestCpuCollector:
    def test_reads_the_fixture_procfs(self, tmp_path: Path) -> None:
        """The fixture's busy CPUs 2-5 and idle others read back in seconds, by CPU."""
        hardware = SimHardware(numa_nodes=(SimNumaNode(0, tuple(range(8)), GIB, 0, 0),))
        procfs_fixture.write(tmp_path, hardware, tick=3)
        readings = CpuCollector(CollectorContext(procfs=tmp_path), user_hz=100).collect(
            device_ids=frozenset()
        )

        expected = Readings(
            cpu_times=tuple(
                _times(cpu, *procfs_fixture.cpu_counters(cpu, tick=3)) for cpu in range(8)
            )
        )
        assert expected == readings

    def test_default_user_hz_comes_from_sysconf(self, tmp_path: Path) -> None:
        """Without an explicit USER_HZ the collector uses the kernel's SC_CLK_TCK."""
        user_hz = os.sysconf("SC_CLK_TCK")
        (tmp_path / "stat").write_text(f"cpu0 {user_hz} 0 0 {3 * user_hz}\n")

        expected = Readings(cpu_times=(_times(0, 1, 0, 0, 3, user_hz=1),))
        assert expected == CpuCollector(CollectorContext(procfs=tmp_path)).collect(
            device_ids=frozenset()
        )

    def test_garbage_names_the_path(self, tmp_path: Path) -> None:
        """Garbage in /proc/stat fails the collector with the path and line."""
        (tmp_path / "stat").write_text("cpu  1 2 3 4\ncpu0 1 2 three 4\n")

        with pytest.raises(CollectorError, match=f"{tmp_path / 'stat'}: line 2: malformed"):
            CpuCollector(CollectorContext(procfs=tmp_path)).collect(device_ids=frozenset())

    def test_no_cpu_lines_is_an_error(self, tmp_path: Path) -> None:
        """A file without per-CPU lines is not /proc/stat: the collector fails."""
        (tmp_path / "stat").write_text("hello\n")

        with pytest.raises(CollectorError, match="no per-CPU lines"):
            CpuCollector(CollectorContext(procfs=tmp_path)).collect(device_ids=frozenset())
