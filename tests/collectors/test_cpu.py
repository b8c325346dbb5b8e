"""The cpu collector turns /proc/stat's per-CPU lines into seconds per mode."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest
from fifo import error_reading_fifo

from exporter.collectors import cpu as cpu_module
from exporter.collectors.base import CollectorContext, CollectorError, issue
from exporter.collectors.cpu import (
    REGISTRATION,
    CpuCollector,
    not_backwards,
    parse_proc_stat,
    read_proc_stat,
)
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


CAPTURED = Path(__file__).parents[1] / "fixtures" / "captured" / "vm-virtio-2cpu"


def _times(cpu: int, *ticks: int, user_hz: int = 100) -> CpuTimes:
    modes = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    return CpuTimes(cpu, tuple((m, t / user_hz) for m, t in zip(modes, ticks, strict=False)))


def _by_cpu(times: Iterable[CpuTimes]) -> dict[int, CpuTimes]:
    return {t.cpu: t for t in times}


def _collect(procfs: Path) -> Readings:
    return CpuCollector(CollectorContext(procfs=procfs), user_hz=100).collect()


class TestParseProcStat:
    def test_per_cpu_lines_in_seconds(self) -> None:
        """Each cpuN line becomes seconds per mode at USER_HZ 100; the total line is skipped."""
        expected = (
            (
                _times(0, 1393280, 32966, 572056, 13343292, 6130, 0, 17875, 0),
                _times(1, 1335829, 35100, 523040, 13393497, 4050, 0, 3200, 5),
            ),
            (),
        )
        assert expected == parse_proc_stat(STAT, user_hz=100)

    def test_user_hz_is_honoured(self) -> None:
        """Ticks are divided by the USER_HZ given: 250 ticks at 250 Hz is one second."""
        expected = (CpuTimes(3, (("user", 1.0), ("nice", 0.0), ("system", 0.5), ("idle", 2.0))),)
        assert (expected, ()) == parse_proc_stat("cpu3 250 0 125 500\n", user_hz=250)

    def test_guest_time_is_not_added(self) -> None:
        """guest and guest_nice, already inside user and nice, are not exported again."""
        text = "cpu0 1000 200 0 0 0 0 0 0 900 150\n"

        expected = ((_times(0, 1000, 200, 0, 0, 0, 0, 0, 0),), ())
        assert expected == parse_proc_stat(text, user_hz=100)

    def test_old_kernels_with_fewer_columns(self) -> None:
        """A line without steal and guest columns gives only the modes it has."""
        expected = ((_times(0, 100, 0, 50, 800, 0, 0, 0),), ())
        assert expected == parse_proc_stat("cpu0 100 0 50 800 0 0 0\n", user_hz=100)

    def test_sorted_by_cpu_with_gaps(self) -> None:
        """Offline CPUs have no line; the rest come sorted by CPU id."""
        text = "cpu  0 0 0 0\ncpu12 1 0 0 0\ncpu2 2 0 0 0\n"

        expected = ((_times(2, 2, 0, 0, 0), _times(12, 1, 0, 0, 0)), ())
        assert expected == parse_proc_stat(text, user_hz=100)

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("cpu0 1 2 3\n", "line 1: fewer than 4 counters: 'cpu0 1 2 3'"),
            ("cpuX 1 2 3 4\n", "line 1: not a cpu line: 'cpuX 1 2 3 4'"),
            (f"cpu{'1' * 400} 1 2 3 4\n", f"line 1: not a cpu line: 'cpu{'1' * 57}'"),
        ],
    )
    def test_malformed_lines_are_left_out(self, text: str, message: str) -> None:
        """A malformed cpu line loses that line only, with its line number."""
        expected = ((_times(1, 1, 2, 3, 4),), (message,))
        assert expected == parse_proc_stat(text + "cpu1 1 2 3 4\n", user_hz=100)

    def test_short_lines_are_refused_when_all_alike(self) -> None:
        """Lines all of three counters (the whole-text path's shape check) are refused
        line by line, as one short line among full ones is."""
        expected = (
            (),
            (
                "line 1: fewer than 4 counters: 'cpu0 1 2 3'",
                "line 2: fewer than 4 counters: 'cpu1 4 5 6'",
            ),
        )
        assert expected == parse_proc_stat("cpu0 1 2 3\ncpu1 4 5 6\n", user_hz=100)

    def test_line_without_a_usable_counter_loses_its_cpu(self) -> None:
        """A CPU none of whose counters is a number is left out, not listed empty."""
        times, problems = parse_proc_stat("cpu0 x y z w\ncpu1 1 2 3 4\n", user_hz=100)
        assert ((_times(1, 1, 2, 3, 4),), 4) == (times, len(problems))

    def test_repeated_cpu_keeps_the_first(self) -> None:
        """A CPU listed twice keeps its first line; the second is reported."""
        expected = ((_times(0, 1, 2, 3, 4),), ("line 2: cpu0 listed twice",))
        assert expected == parse_proc_stat("cpu0 1 2 3 4\ncpu0 5 6 7 8\n", user_hz=100)

    @pytest.mark.parametrize(
        ("counter", "shown"),
        [
            ("x", "x"),
            ("-3", "-3"),
            (str(2**64), str(2**64)),
            ("9" * 400, "9" * 40),
            ("9" * 5000, "9" * 40),  # past int()'s 4,300 digits: refused by its shape
        ],
    )
    def test_bad_counter_loses_that_mode_only(self, counter: str, shown: str) -> None:
        """A counter that is not a 64-bit number (400 digits included) loses that one mode."""
        text = f"cpu0 1 2 {counter} 4 5\n"

        expected = (
            (CpuTimes(0, (("user", 0.01), ("nice", 0.02), ("idle", 0.04), ("iowait", 0.05))),),
            (f"line 1: cpu0 system: not a 64-bit counter: {shown!r}",),
        )
        assert expected == parse_proc_stat(text, user_hz=100)

    def test_usual_output_parses_as_line_by_line(self) -> None:
        """The whole-text path for the kernel's usual output gives what the per-line
        parser gives (forced here by a trailing non-cpu line), 19-digit counters included."""
        lines = [f"cpu  {' '.join(['7'] * 10)}"]
        for cpu in (*range(1, 64), 0):  # out of order, as no kernel prints but may
            counters = [cpu * 1000 + mode * 7 for mode in range(10)]
            counters[3] = 10**18 + cpu  # idle: 19 digits
            lines.append(f"cpu{cpu} {' '.join(map(str, counters))}")
        text = "\n".join(lines) + "\n"

        usual = parse_proc_stat(text, user_hz=100)
        line_by_line = parse_proc_stat(text + "intr 1 2 3\n", user_hz=100)
        assert (line_by_line, 64) == (usual, len(usual[0]))

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

    def test_cpu_lines_of_exactly_the_bound_are_read(self, tmp_path: Path) -> None:
        """cpu lines of exactly 4 MiB are still read: the bound refuses only more."""
        line = b"cpu0 " + b"1" * (4 * 1024 * 1024 - 6) + b"\n"
        (tmp_path / "stat").write_bytes(line + b"intr 1\n")

        assert 4 * 1024 * 1024 == len(read_proc_stat(tmp_path / "stat"))

    def test_endless_cpu_line_is_refused(self, tmp_path: Path) -> None:
        """cpu lines beyond 4 MiB, even one without a newline, are refused, not read whole."""
        (tmp_path / "stat").write_bytes(b"cpu0 " + b"1" * (5 * 1024 * 1024))

        with pytest.raises(CollectorError, match="cpu lines exceed 4194304 bytes"):
            read_proc_stat(tmp_path / "stat")

    def test_symlink_loop_names_the_path(self, tmp_path: Path) -> None:
        """A stat that is a link loop is an error naming the path."""
        (tmp_path / "stat").symlink_to("stat")

        with pytest.raises(CollectorError, match=f"cannot read {tmp_path / 'stat'}: Too many"):
            read_proc_stat(tmp_path / "stat")

    def test_fifo_is_refused_without_blocking(self, tmp_path: Path) -> None:
        """A FIFO in place of /proc/stat is refused at once instead of waiting for a writer."""
        path = tmp_path / "stat"
        error = error_reading_fifo(read_proc_stat, path)
        assert isinstance(error, CollectorError)
        assert f"cannot read {path}: not a regular file" == str(error)


class TestCpuCollector:
    def test_reads_the_fixture_procfs(self, tmp_path: Path) -> None:
        """The fixture's busy CPUs 2-5 and idle others read back in seconds, by CPU."""
        hardware = SimHardware(numa_nodes=(SimNumaNode(0, tuple(range(8)), GIB, 0, 0),))
        procfs_fixture.write(tmp_path, hardware, tick=3)

        expected = Readings(
            cpu_times=_by_cpu(
                _times(cpu, *procfs_fixture.cpu_counters(cpu, tick=3)) for cpu in range(8)
            )
        )
        assert expected == _collect(tmp_path)

    def test_captured_vm(self) -> None:
        """The real 2-vCPU VM's cpu0 and cpu1 lines, at USER_HZ 100."""
        expected = Readings(
            cpu_times=_by_cpu(
                (
                    _times(0, 3064, 0, 1294, 31039, 51, 0, 83, 14),
                    _times(1, 10151, 0, 2640, 22188, 488, 0, 93, 13),
                )
            )
        )
        assert expected == _collect(CAPTURED / "proc")

    def test_user_hz_given_is_used(self, tmp_path: Path) -> None:
        """A USER_HZ given to the collector (not the usual 100) converts the ticks."""
        (tmp_path / "stat").write_text("cpu0 250 0 125 500\n")
        collector = CpuCollector(CollectorContext(procfs=tmp_path), user_hz=250)

        expected = Readings(cpu_times=_by_cpu((_times(0, 250, 0, 125, 500, user_hz=250),)))
        assert expected == collector.collect()

    def test_captured_h100_vm(self) -> None:
        """The real 16-vCPU H100 VM (kernel 6.18): 16 CPUs, the usual whole-text shape;
        cpu0's and cpu15's lines as captured."""
        times = _collect(CAPTURED.parent / "h100-firecracker" / "proc").cpu_times
        assert times is not None
        assert (list(range(16)), _times(0, 85, 0, 84, 6704, 2, 0, 33, 0)) == (
            list(times),
            times[0],
        )
        assert _times(15, 385, 0, 25, 6460, 12, 0, 1, 0) == times[15]

    def test_default_user_hz_comes_from_sysconf(self, tmp_path: Path) -> None:
        """Without an explicit USER_HZ the collector uses the kernel's SC_CLK_TCK."""
        user_hz = os.sysconf("SC_CLK_TCK")
        (tmp_path / "stat").write_text(f"cpu0 {user_hz} 0 0 {3 * user_hz}\n")

        expected = Readings(cpu_times=_by_cpu((_times(0, 1, 0, 0, 3, user_hz=1),)))
        assert expected == CpuCollector(CollectorContext(procfs=tmp_path)).collect()

    def test_400_digit_counter_loses_one_figure(self, tmp_path: Path) -> None:
        """A 400-digit counter loses that CPU's mode with an issue; everything else stays."""
        stat = tmp_path / "stat"
        stat.write_text(STAT.replace("cpu1 1335829 ", f"cpu1 {'8' * 400} "))

        cpu1 = _times(1, 0, 35100, 523040, 13393497, 4050, 0, 3200, 5)
        expected = Readings(
            cpu_times=_by_cpu(
                (
                    _times(0, 1393280, 32966, 572056, 13343292, 6130, 0, 17875, 0),
                    CpuTimes(1, cpu1.seconds_by_mode[1:]),
                )
            ),
            issues=(
                issue(
                    "garbage",
                    f"{stat}: line 3: cpu1 user: not a 64-bit counter: '{'8' * 40}'",
                ),
            ),
        )
        assert expected == _collect(tmp_path)

    @pytest.mark.parametrize(
        ("junk", "shown"), [(b"\x00\x01", "\\x00\\x01"), (b"\xff\xfe", "\ufffd\ufffd")]
    )
    def test_binary_line_loses_that_cpu(self, tmp_path: Path, junk: bytes, shown: str) -> None:
        """Binary junk in one cpu line, ASCII or not, loses that line's CPU with an issue."""
        stat = tmp_path / "stat"
        stat.write_bytes(b"cpu0 1 2 3 4\ncpu" + junk + b" 5 6 7 8\n")

        expected = Readings(
            cpu_times=_by_cpu((_times(0, 1, 2, 3, 4),)),
            issues=(issue("garbage", f"{stat}: line 2: not a cpu line: 'cpu{shown} 5 6 7 8'"),),
        )
        assert expected == _collect(tmp_path)

    def test_nothing_usable_fails_with_the_path(self, tmp_path: Path) -> None:
        """When no CPU line is usable the collector fails with the path and line."""
        (tmp_path / "stat").write_text("cpu  1 2 3 4\ncpu0 1 2\n")

        with pytest.raises(CollectorError, match=f"{tmp_path / 'stat'}: line 2: fewer than 4"):
            _collect(tmp_path)

    def test_no_cpu_lines_is_an_error(self, tmp_path: Path) -> None:
        """A file without per-CPU lines is not /proc/stat: the collector fails."""
        (tmp_path / "stat").write_text("hello\n")

        with pytest.raises(CollectorError, match="no per-CPU lines"):
            _collect(tmp_path)


class TestRegistration:
    def test_registration(self) -> None:
        """The module registers the cpu collector, on by default, serving no resource,
        with its error labels known from the start."""
        expected = ("cpu", True, CpuCollector, (), ("garbage",))
        assert expected == (
            REGISTRATION.name,
            REGISTRATION.enabled_by_default,
            REGISTRATION.factory,
            CpuCollector.serves,
            CpuCollector.known_errors,
        )


class TestProcStatTimes:
    def test_a_mapping_of_what_the_eager_parse_gives(self) -> None:
        """Looked up in any order, each CPU's times are the eager parse's; iteration is in
        CPU order; a CPU not listed is a KeyError, not a guess."""
        text = "cpu  9 9 9 9\ncpu3 1 2 3 4\ncpu1 5 6 7 8\n"
        eager, problems = parse_proc_stat(text, user_hz=100)
        assert problems == ()
        table = cpu_module._parse_uniform(text, user_hz=100)
        assert isinstance(table, cpu_module.ProcStatTimes)
        assert table[3] == eager[1]
        assert table[1] == eager[0]
        assert (list(table), len(table), 3 in table, 2 in table) == ([1, 3], 2, True, False)
        with pytest.raises(KeyError):
            table[2]
        assert dict(table) == {t.cpu: t for t in eager}

    def test_membership_needs_no_lookup_first(self) -> None:
        """A listed CPU is in the table before its times are converted: the join asks
        ``in`` of every exclusive CPU before it looks any up."""
        table = cpu_module._parse_uniform("cpu3 1 2 3 4\ncpu1 5 6 7 8\n", user_hz=100)
        assert table is not None
        assert (True, True, False) == (3 in table, 1 in table, 2 in table)

    def test_unusual_text_takes_the_per_line_parser(self, tmp_path: Path) -> None:
        """A garbage counter makes the collector fall back and report it, as before."""
        (tmp_path / "stat").write_text("cpu0 1 2 3 4\ncpu1 x 2 3 4\n")

        readings = _collect(tmp_path)
        assert list(readings.cpu_times) == [0, 1]
        assert [i.error for i in readings.issues] == ["garbage"]

    def test_the_per_line_parsers_table_needs_no_lookup_first_either(self, tmp_path: Path) -> None:
        """As for the usual table: a CPU the per-line parser listed is in its table
        before its times are converted (the join asks ``in`` first)."""
        (tmp_path / "stat").write_text("cpu3 1 2 3 4\ncpu1 x 6 7 8\n")
        table = _collect(tmp_path).cpu_times
        assert (True, True, False) == (3 in table, 1 in table, 2 in table)

    @pytest.mark.parametrize(
        "other", ["1 1 1 1 1 1 1 1", "x 1 1 1 1 1 1 1"], ids=["usual", "per-line"]
    )
    def test_a_table_gives_the_same_figures_at_every_lookup(
        self, tmp_path: Path, other: str
    ) -> None:
        """A snapshot's figures are plain data once given: looked up again after the next
        poll's table gave higher ones (its floors), they are what they were."""
        collector = CpuCollector(CollectorContext(procfs=tmp_path), user_hz=100)
        tables = []
        for iowait in (500, 510):
            (tmp_path / "stat").write_text(f"cpu0 100 0 50 1000 {iowait} 0 0 0\ncpu1 {other}\n")
            tables.append(collector.collect().cpu_times)
        first, second = tables
        given = first[0]
        assert second[0] == _times(0, 100, 0, 50, 1000, 510, 0, 0, 0)
        assert (given, given) == (first[0], _times(0, 100, 0, 50, 1000, 500, 0, 0, 0))


class TestNeverBackwards:
    """Figures that go back a little keep their last value: Prometheus would read the
    decrease as a counter reset and count the CPU's whole lifetime again."""

    def _polls(self, tmp_path: Path, *stats: str, look: tuple[bool, ...]) -> list[CpuTimes]:
        collector = CpuCollector(CollectorContext(procfs=tmp_path), user_hz=100)
        seen = []
        for text, looked_up in zip(stats, look, strict=True):
            (tmp_path / "stat").write_text(text)
            times = collector.collect().cpu_times
            assert times is not None
            if looked_up:  # a poll whose snapshot nobody scraped converts no CPU
                seen.append(times[0])
        return seen

    def test_iowait_going_back_keeps_its_last_value(self, tmp_path: Path) -> None:
        """iowait 500 -> 499 ticks (proc.rst: it 'will decrease in certain conditions'),
        user 100 -> 90 (nohz_full): both stay; the others move on."""
        seen = self._polls(
            tmp_path,
            "cpu0 100 0 50 1000 500 0 0 0\n",
            "cpu0 90 0 60 1100 499 0 0 0\n",
            "cpu0 120 0 70 1200 505 0 0 0\n",
            look=(True, True, True),
        )
        assert [
            _times(0, 100, 0, 50, 1000, 500, 0, 0, 0),
            _times(0, 100, 0, 60, 1100, 500, 0, 0, 0),
            _times(0, 120, 0, 70, 1200, 505, 0, 0, 0),
        ] == seen

    @pytest.mark.parametrize(
        ("stats", "look", "last"),
        [
            pytest.param(
                (
                    "cpu0 100 0 50 1000 500 0 0 0\ncpu1 1 1 1 1 1 1 1 1\n",
                    "cpu0 100 0 50 1000 500 0 0 0\ncpu1 1 1 1 1 1 1 1 1\n",
                    "cpu0 100 0 50 1050 480 0 0 0\ncpu1 1 1 1 1 1 1 1 1\n",
                ),
                (True, False, True),
                (100, 0, 50, 1050, 500, 0, 0, 0),
                id="floors-survive-polls-nobody-looked-at",
            ),
            pytest.param(
                ("cpu0 100 0 50 1000 500 0 0 0\n", "cpu0 5 0 3 600 2 0 0 0\n"),
                (True, True),
                (5, 0, 3, 600, 2, 0, 0, 0),
                id="idle-far-back-is-a-cpu-that-went-offline-and-back",
            ),
            pytest.param(
                ("cpu0 100 0 50 1000 500 0 0 0\n", "cpu0 5 0 3 700 2 0 0 0\n"),
                (True, True),
                (5, 0, 3, 700, 2, 0, 0, 0),
                id="idle-exactly-jump-back-s-back-restarts-too",
            ),
            pytest.param(
                (
                    "cpu0 100 0 50 1000 500 0 0 0\ncpu1 x 2 3 4\n",
                    "cpu0 100 0 50 1100 490 0 0 0\ncpu1 x 2 3 4\n",
                ),
                (True, True),
                (100, 0, 50, 1100, 500, 0, 0, 0),
                id="the-per-line-parser-keeps-floors-too",
            ),
            pytest.param(
                (
                    "cpu0 100 0 50 1000 500 0 0 0\ncpu1 x 2 3 4\n",
                    "cpu0 100 0 50 1100 510 0 0 0\ncpu1 x 2 3 4\n",
                    "cpu0 100 0 50 1200 505 0 0 0\ncpu1 x 2 3 4\n",
                ),
                (True, True, True),
                (100, 0, 50, 1200, 510, 0, 0, 0),
                id="the-per-line-parser-floors-on-the-last-figure-given",
            ),
            pytest.param(
                (
                    "cpu0 100 0 50 1000 500 0 0 0\n",
                    "cpu0 100 0 50 1100 490 0 0 0\n",
                    "cpu0 100 0 50 1200 495 0 0 0\n",
                ),
                (True, True, True),
                (100, 0, 50, 1200, 500, 0, 0, 0),
                id="a-floor-is-the-figure-given-not-the-one-read",
            ),
            pytest.param(
                (
                    "cpu0 100 0 50 1000 500 0 0 0\ncpu1 1 1 1 1 1 1 1 1\n",
                    "cpu1 1 1 1 1 1 1 1 1\n",
                    "cpu0 90 0 40 998 400 0 0 0\ncpu1 1 1 1 1 1 1 1 1\n",
                ),
                (True, False, True),
                (90, 0, 40, 998, 400, 0, 0, 0),
                id="a-cpu-missing-from-a-poll-loses-its-floor",
            ),
        ],
    )
    def test_last_figures(
        self, tmp_path: Path, stats: tuple[str, ...], look: tuple[bool, ...], last: tuple[int, ...]
    ) -> None:
        """Floors carry over polls whose snapshot nobody scraped (nothing converted) and
        hold in the per-line parser; a floor is the figure last given (floored itself),
        not the one read; idle JUMP_BACK_S or more back (a CPU offlined and back) and a
        CPU absent from a poll restart from what the kernel says."""
        assert _times(0, *last) == self._polls(tmp_path, *stats, look=look)[-1]

    def test_a_floor_is_the_last_figure_given(self, tmp_path: Path) -> None:
        """iowait 500, 510, then 505 ticks stays at 510, not at the older floor 500: the
        drop to 505 would be a counter reset."""
        seen = self._polls(
            tmp_path,
            "cpu0 100 0 50 1000 500 0 0 0\n",
            "cpu0 100 0 50 1100 510 0 0 0\n",
            "cpu0 100 0 50 1200 505 0 0 0\n",
            look=(True, True, True),
        )
        assert _times(0, 100, 0, 50, 1200, 510, 0, 0, 0) == seen[-1]

    def test_a_garbage_counter_does_not_shift_the_other_modes(self, tmp_path: Path) -> None:
        """A poll whose user counter is garbage loses user only, and its iowait going
        back still keeps its last value; the next poll's system is not held up to the
        last idle time by modes paired out of place."""
        seen = self._polls(
            tmp_path,
            "cpu0 100 0 50 100000 500 0 0 0\n",
            "cpu0 x 0 60 100100 499 0 0 0\n",
            "cpu0 110 0 70 100200 510 0 0 0\n",
            look=(True, True, True),
        )
        assert [
            _times(0, 100, 0, 50, 100000, 500, 0, 0, 0),
            CpuTimes(0, _times(0, 0, 0, 60, 100100, 500, 0, 0, 0).seconds_by_mode[1:]),
            _times(0, 110, 0, 70, 100200, 510, 0, 0, 0),
        ] == seen

    def test_a_snapshot_scraped_after_the_next_poll_read_is_a_floor_too(
        self, tmp_path: Path
    ) -> None:
        """The page of a snapshot is rendered by its first scrape, which may come after
        the next poll has read /proc/stat (a scrape between that read and the publish):
        iowait 500, 510 (converted only then), 505 serves 510, not 505 under the older
        floor 500. Prometheus would read 510 -> 505 as a counter reset."""
        collector = CpuCollector(CollectorContext(procfs=tmp_path), user_hz=100)
        polls = []
        for iowait in (500, 510, 505):
            (tmp_path / "stat").write_text(f"cpu0 100 0 50 1000 {iowait} 0 0 0\n")
            times = collector.collect().cpu_times
            assert times is not None
            polls.append(times)
        first, late, latest = polls
        assert first[0] == _times(0, 100, 0, 50, 1000, 500, 0, 0, 0)
        assert late[0] == _times(0, 100, 0, 50, 1000, 510, 0, 0, 0)  # after the next read
        assert latest[0] == _times(0, 100, 0, 50, 1000, 510, 0, 0, 0)

    def test_a_late_render_floors_a_poll_the_per_line_parser_read(self, tmp_path: Path) -> None:
        """As above, with the next poll's text unusual (a garbage counter on another CPU):
        the per-line parser's figures are floored when looked up too, not at the read,
        so iowait 500, 510 (converted only after the next read), 505 serves 510 on the
        next page, not 505 under the floor of before the late render."""
        collector = CpuCollector(CollectorContext(procfs=tmp_path), user_hz=100)
        polls = []
        for iowait, other in ((500, "1"), (510, "1"), (505, "x")):
            (tmp_path / "stat").write_text(
                f"cpu0 100 0 50 1000 {iowait} 0 0 0\ncpu1 {other} 1 1 1 1 1 1 1\n"
            )
            times = collector.collect().cpu_times
            assert times is not None
            polls.append(times)
            if len(polls) == 1:
                assert times[0] == _times(0, 100, 0, 50, 1000, 500, 0, 0, 0)  # rendered
        _, late, latest = polls
        assert late[0] == _times(0, 100, 0, 50, 1000, 510, 0, 0, 0)  # after the next read
        assert latest[0] == _times(0, 100, 0, 50, 1000, 510, 0, 0, 0)

    def test_a_late_render_keeps_the_floor_of_a_cpu_the_next_poll_found_offline(
        self, tmp_path: Path
    ) -> None:
        """A CPU the next poll does not list (offlined) keeps its floor for the late render
        of the last snapshot: iowait 510 (rendered), 505 (rendered after the next read,
        which found cpu0 offline) serves 510, not 505, which Prometheus would read as a
        reset. Back online, its figures restart from what the kernel says."""
        collector = CpuCollector(CollectorContext(procfs=tmp_path), user_hz=100)

        def poll(text: str) -> Mapping[int, CpuTimes]:
            (tmp_path / "stat").write_text(text)
            times = collector.collect().cpu_times
            assert times is not None
            return times

        first = poll("cpu0 100 0 50 1000 510 0 0 0\ncpu1 1 1 1 1 1 1 1 1\n")
        assert first[0] == _times(0, 100, 0, 50, 1000, 510, 0, 0, 0)  # rendered
        late = poll("cpu0 100 0 50 1100 505 0 0 0\ncpu1 1 1 1 1 1 1 1 1\n")
        poll("cpu1 1 1 1 1 1 1 1 1\n")  # cpu0 offline
        assert late[0] == _times(0, 100, 0, 50, 1100, 510, 0, 0, 0)  # after the next read
        back = poll("cpu0 90 0 40 1098 400 0 0 0\ncpu1 1 1 1 1 1 1 1 1\n")
        assert back[0] == _times(0, 90, 0, 40, 1098, 400, 0, 0, 0)

    def test_a_late_page_gives_no_floor_back_to_a_cpu_gone_offline(self, tmp_path: Path) -> None:
        """A snapshot's page rendered after the next poll found one of its CPUs offline
        (a scrape while that poll waits on the kubelet) gives that CPU no floor back:
        online again, its figures restart from what the kernel says, as after any poll
        that does not list it."""
        collector = CpuCollector(CollectorContext(procfs=tmp_path), user_hz=100)
        stat = tmp_path / "stat"
        stat.write_text("cpu0 100 0 50 1000 500 0 0 0\ncpu1 1 1 1 1 1 1 1 1\n")
        before = collector.collect().cpu_times
        assert before is not None
        stat.write_text("cpu1 1 1 1 1 1 1 1 1\n")  # cpu0 offline
        collector.collect()
        late = before[0]  # the first poll's page, rendered only now
        stat.write_text("cpu0 90 0 40 998 400 0 0 0\ncpu1 1 1 1 1 1 1 1 1\n")  # back
        back = collector.collect().cpu_times
        assert back is not None
        assert (late, back[0]) == (
            _times(0, 100, 0, 50, 1000, 500, 0, 0, 0),
            _times(0, 90, 0, 40, 998, 400, 0, 0, 0),
        )

    def test_a_cpu_going_offline_leaves_the_other_cpus_floors(self, tmp_path: Path) -> None:
        """cpu1 offlined drops no floor but its own (when it is back): cpu0's iowait
        going back at that poll, 510 then 505, still serves 510."""
        seen = self._polls(
            tmp_path,
            "cpu0 100 0 50 1000 510 0 0 0\ncpu1 1 1 1 1 1 1 1 1\n",
            "cpu0 100 0 50 1100 505 0 0 0\n",
            look=(True, True),
        )
        assert _times(0, 100, 0, 50, 1100, 510, 0, 0, 0) == seen[-1]

    def test_floors_do_not_chain_over_polls_nobody_scraped(self, tmp_path: Path) -> None:
        """Four hours of 10 s polls nobody scraped keep the floors without chaining every
        poll's behind the next, which a lookup would follow into a RecursionError."""
        unscraped = [f"cpu0 100 0 50 {1000 + n} 500 0 0 0\n" for n in range(1, 1500)]
        seen = self._polls(
            tmp_path,
            "cpu0 100 0 50 1000 500 0 0 0\n",
            *unscraped,
            "cpu0 100 0 50 9000 490 0 0 0\n",
            look=(True, *[False] * len(unscraped), True),
        )
        assert _times(0, 100, 0, 50, 9000, 500, 0, 0, 0) == seen[-1]

    @pytest.mark.parametrize(
        ("new", "floor", "expected"),
        [
            ((101, 0, 51, 1001), (100, 0, 50, 1000, 500), (101, 0, 51, 1001)),
            ((99, 0, 51, 1001, 7), (100, 0, 50, 1000), (100, 0, 51, 1001, 7)),
        ],
        ids=["fewer-columns-now", "fewer-columns-before"],
    )
    def test_modes_pair_by_position(
        self, new: tuple[int, ...], floor: tuple[int, ...], expected: tuple[int, ...]
    ) -> None:
        """Both sides list MODES in order; a mode only one side has is left as it is."""
        assert _times(0, *expected) == not_backwards(_times(0, *new), _times(0, *floor))
