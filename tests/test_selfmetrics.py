"""exporter.selfmetrics: prometheus_client's process, platform and GC families, without it."""

from __future__ import annotations

import gc
import os
import resource
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR
from prometheus_client import exposition as text_format
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics_format
from prometheus_client.registry import Collector

from exporter import selfmetrics
from exporter.metricwriter import OPENMETRICS_EOF, Rows, join_families, write_family
from exporter.selfmetrics import (
    ProcessStat,
    live_rows,
    parse_max_fds,
    parse_process_stat,
)
from exporter.sysfs import parse_boot_time

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")

# A /proc/<pid>/stat line whose command name holds a space and a ")": fields are counted
# from the last ")". starttime 1234567 ticks, utime 250, stime 150, vsize 123456789,
# rss 4096 pages.
STAT = (
    b"4242 (python3 (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 150 0 0 20 0 19 0 "
    b"1234567 123456789 4096 18446744073709551615 1 1 0 0 0 0 0 16781312 134234626 "
    b"0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
)
LIMITS = (
    b"Limit                     Soft Limit           Hard Limit           Units     \n"
    b"Max cpu time              unlimited            unlimited            seconds   \n"
    b"Max open files            1024                 1048576              files     \n"
    b"Max locked memory         8388608              8388608              bytes     \n"
)
STAT_FAMILIES = [
    "virtual_memory_bytes",
    "resident_memory_bytes",
    "start_time_seconds",
    "cpu_seconds",
]
PROC_STAT = b"cpu  1 2 3 4 5 6 7 8 0 0\nintr 1\nctxt 2\nbtime 1700000000\nprocesses 3\n"


def _proc_tree(root: Path, *, stat: bytes = STAT, limits: bytes = LIMITS, fds: int = 3) -> Path:
    """A procfs root shaped like the kernel's: stat, and self/{stat,limits,fd/}."""
    (root / "self" / "fd").mkdir(parents=True)
    (root / "stat").write_bytes(PROC_STAT)
    (root / "self" / "stat").write_bytes(stat)
    (root / "self" / "limits").write_bytes(limits)
    for fd in range(fds):
        (root / "self" / "fd" / str(fd)).write_text("")
    return root


def _theirs() -> list[Metric]:
    return [m for c in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR) for m in c.collect()]


def _shape(family: Metric | Rows) -> tuple[str, str, str, frozenset[tuple[str, ...]]]:
    """Name, type, HELP and the label names of each sample name."""
    if isinstance(family, Rows):
        samples = frozenset((family.sample_name, *family.labels) for _ in family.rows)
    else:
        samples = frozenset((s.name, *s.labels) for s in family.samples)
    return family.name, family.type, family.documentation, samples


def _value(families: list[Rows], name: str) -> float:
    (family,) = (f for f in families if f.name == name)
    ((_, value),) = family.rows
    return value


class TestSameFamiliesAsPrometheusClient:
    def test_names_types_help_and_labels(self) -> None:
        """Every family, in prometheus_client's order, with its name, type, HELP text,
        sample names and label names."""
        assert [_shape(m) for m in _theirs()] == [_shape(r) for r in live_rows()]

    def test_label_values(self) -> None:
        """python_info's labels and the GC generations are prometheus_client's."""

        def labels(family: Metric | Rows) -> list[tuple[str, ...]]:
            if isinstance(family, Rows):
                return [values for values, _ in family.rows]
            return [tuple(s.labels.values()) for s in family.samples]

        expected = {m.name: labels(m) for m in _theirs() if m.name.startswith("python_")}
        actual = {r.name: labels(r) for r in live_rows() if r.name.startswith("python_")}

        assert expected == actual

    def test_steady_families_render_byte_for_byte(self) -> None:
        """The families whose value cannot move between two reads (start time, the
        descriptor limit, python_info) render as prometheus_client's, in both formats."""
        steady = ("process_start_time_seconds", "process_max_fds", "python_info")
        theirs = [m for m in _theirs() if m.name in steady]
        ours = [write_family(r, cache={}) for r in live_rows() if r.name in steady]

        class Steady(Collector):
            def collect(self) -> list[Metric]:
                return theirs

        assert text_format.generate_latest(Steady()).decode() == join_families(
            ours, openmetrics=False
        )
        openmetrics = openmetrics_format.generate_latest(Steady()).decode()
        assert openmetrics == join_families(ours, openmetrics=True) + OPENMETRICS_EOF
        assert len(steady) == len(ours)

    def test_gc_figures(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Objects collected, uncollectable objects and collections are each generation's
        own figure from gc.get_stats(), as prometheus_client writes them."""
        stats = [
            {"collections": 3 + 10 * gen, "collected": 5 + 10 * gen, "uncollectable": 7 + 10 * gen}
            for gen in range(3)
        ]
        monkeypatch.setattr(gc, "get_stats", lambda: stats)

        def values(family: Metric | Rows) -> list[tuple[tuple[str, ...], float]]:
            if isinstance(family, Rows):
                return list(family.rows)
            return [(tuple(s.labels.values()), s.value) for s in family.samples]

        expected = {m.name: values(m) for m in GC_COLLECTOR.collect()}
        actual = {r.name: values(r) for r in live_rows() if r.name.startswith("python_gc_")}

        assert expected == actual
        assert actual["python_gc_objects_uncollectable"] == [
            (("0",), 7),
            (("1",), 17),
            (("2",), 27),
        ]


class TestValuesAreThisProcess:
    def test_cpu_seconds_lie_between_two_readings_of_os_times(self) -> None:
        """process_cpu_seconds_total is this process's user + system time."""
        before = os.times()
        value = _value(live_rows(), "process_cpu_seconds")
        after = os.times()

        tick = 1 / TICKS
        assert before.user + before.system - tick <= value <= after.user + after.system + tick

    def test_memory_and_descriptor_limit(self) -> None:
        """RSS within 16 MiB of VmRSS, virtual memory above it, the descriptor limit
        this process's."""
        rows = live_rows()
        status = Path("/proc/self/status").read_text()
        (vm_rss_kib,) = (int(line.split()[1]) for line in status.splitlines() if "VmRSS" in line)
        rss = _value(rows, "process_resident_memory_bytes")

        assert abs(rss - vm_rss_kib * 1024) < 16 * 2**20
        assert _value(rows, "process_virtual_memory_bytes") > rss
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == _value(rows, "process_max_fds")

    @pytest.mark.parametrize("way", ["as the kernel counts", "listed"])
    def test_open_fds_are_the_descriptors_open(
        self, way: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """process_open_fds exactly: a listing of /proc/self/fd made right after shows
        one more where the kernel gave the count (the listing's own descriptor, which
        the count leaves out), and as many where the figure is a listing too. No
        collection runs between the two: a finalizer closing a file would fall there."""
        if way == "listed":  # the count is taken only from the real /proc
            monkeypatch.setattr(selfmetrics, "PROC", Path("/not-proc"))
        counted = way == "as the kernel counts" and os.stat("/proc/self/fd").st_size > 0
        collecting = gc.isenabled()
        gc.disable()
        try:
            value = _value(live_rows(), "process_open_fds")
            listed = len(os.listdir("/proc/self/fd"))
        finally:
            if collecting:
                gc.enable()

        assert listed - counted == value

    @pytest.mark.parametrize("way", ["as the kernel counts", "listed", "old kernel"])
    def test_open_fds_counts_each_descriptor_opened(
        self, way: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Twenty more open descriptors count twenty more, whether the kernel gives the
        count (Linux 6.2+; older kernels give 0 and fall back to the listing) or the
        folder is listed."""
        if way == "listed":  # the count is taken only from the real /proc
            monkeypatch.setattr(selfmetrics, "PROC", Path("/not-proc"))
        elif way == "old kernel":
            real_stat = os.stat

            def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
                found = real_stat(path, *args, **kwargs)
                if not str(path).endswith("/fd"):
                    return found
                return os.stat_result((*found[:6], 0, *found[7:]))  # st_size 0

            monkeypatch.setattr(os, "stat", stat)
        before = _value(live_rows(), "process_open_fds")
        opened = [os.open(os.devnull, os.O_RDONLY) for _ in range(20)]
        try:
            during = _value(live_rows(), "process_open_fds")
        finally:
            for fd in opened:
                os.close(fd)

        assert during - before == 20

    def test_a_kernel_that_counts_descriptors_is_not_asked_for_a_listing(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Where /proc/self/fd's size is the count (Linux 6.2+), one stat gives the
        figure: the folder is not listed, which costs ~240 us for 480 descriptors."""
        if os.stat("/proc/self/fd").st_size == 0:
            pytest.skip("this kernel does not count descriptors (before 6.2)")

        def no_listing(path: Any) -> list[str]:
            raise AssertionError(f"listed {path}")

        monkeypatch.setattr(os, "listdir", no_listing)

        assert _value(live_rows(), "process_open_fds") > 0

    def test_gc_collections_count_a_collection(self) -> None:
        """A full collection shows in generation 2's count."""

        def full_collections() -> float:
            (family,) = (r for r in live_rows() if r.name == "python_gc_collections")
            return dict(family.rows)[("2",)]

        before = full_collections()
        gc.collect()

        assert before + 1 <= full_collections()


class TestFixtureTrees:
    def test_a_whole_tree(self, tmp_path: Path) -> None:
        """Each figure from its file, in bytes and seconds."""
        rows = live_rows(proc=_proc_tree(tmp_path))
        process = [(r.name, r.type, r.rows) for r in rows if r.name.startswith("process_")]

        assert [
            ("process_virtual_memory_bytes", "gauge", [((), 123456789.0)]),
            ("process_resident_memory_bytes", "gauge", [((), 4096.0 * PAGE)]),
            ("process_start_time_seconds", "gauge", [((), 1234567 / TICKS + 1700000000.0)]),
            ("process_cpu_seconds", "counter", [((), 400 / TICKS)]),
            ("process_open_fds", "gauge", [((), 3)]),
            ("process_max_fds", "gauge", [((), 1024.0)]),
        ] == process

    def test_no_proc_leaves_the_process_families_out(self, tmp_path: Path) -> None:
        """Without a readable /proc/stat (not Linux) only python_info and GC remain."""
        names = [r.name for r in live_rows(proc=tmp_path / "absent")]

        assert [
            "python_info",
            "python_gc_objects_collected",
            "python_gc_objects_uncollectable",
            "python_gc_collections",
        ] == names

    @pytest.mark.parametrize(
        "proc_stat", [None, PROC_STAT.replace(b"btime", b"boot")], ids=["missing", "no btime"]
    )
    def test_no_boot_time_leaves_the_process_families_out(
        self, tmp_path: Path, proc_stat: bytes | None
    ) -> None:
        """Without a boot time the start time cannot be given: the process families are
        left out, as where /proc cannot be read, though self/ reads."""
        root = _proc_tree(tmp_path)
        if proc_stat is None:
            (root / "stat").unlink()
        else:
            (root / "stat").write_bytes(proc_stat)

        assert [] == [r.name for r in live_rows(proc=root) if r.name.startswith("process_")]

    def test_the_boot_time_is_read_once(self, tmp_path: Path) -> None:
        """The boot time does not change while the machine runs: the first one read is
        kept, not read again on every scrape."""
        root = _proc_tree(tmp_path)
        first = _value(live_rows(proc=root), "process_start_time_seconds")
        (root / "stat").write_bytes(PROC_STAT.replace(b"btime 1700000000", b"btime 1800000000"))

        assert first == _value(live_rows(proc=root), "process_start_time_seconds")

    @pytest.mark.parametrize(
        ("stat", "limits", "expected"),
        [
            (
                STAT,
                LIMITS.replace(b"1024                 1048576", b"unlimited unlimited"),
                STAT_FAMILIES,
            ),
            (b"4242 (python3) S 1 2 3\n", LIMITS, ["open_fds", "max_fds"]),
            (STAT.replace(b" 123456789 ", b" 12345678x "), LIMITS, ["open_fds", "max_fds"]),
        ],
        ids=["unlimited descriptors", "truncated stat", "garbled stat"],
    )
    def test_a_line_that_does_not_parse_leaves_its_families_out(
        self, tmp_path: Path, stat: bytes, limits: bytes, expected: list[str]
    ) -> None:
        """A bad stat line drops the four stat families, a bad limit the descriptor pair."""
        rows = live_rows(proc=_proc_tree(tmp_path, stat=stat, limits=limits))

        assert [f"process_{n}" for n in expected] == [
            r.name for r in rows if r.name.startswith("process_")
        ]


class TestParsers:
    def test_process_stat(self) -> None:
        """Fields counted from the last ")", converted with the given tick and page."""
        expected = ProcessStat(
            virtual_memory_bytes=123456789.0,
            resident_memory_bytes=4096.0 * 4096,
            started_after_boot_seconds=12345.67,
            cpu_seconds=4.0,
        )

        assert expected == parse_process_stat(STAT, ticks_per_s=100.0, page_bytes=4096)

    def test_boot_time_and_max_fds(self) -> None:
        """btime from /proc/stat, the soft descriptor limit from limits."""
        assert (1700000000.0, 1024.0) == (parse_boot_time(PROC_STAT), parse_max_fds(LIMITS))

    @pytest.mark.parametrize(
        ("parse", "text"),
        [(parse_boot_time, b"cpu 1 2\n"), (parse_max_fds, b"Max cpu time unlimited\n")],
    )
    def test_missing_lines_raise(self, parse: Callable[[bytes], float], text: bytes) -> None:
        """A file without the line is a ValueError, not a zero."""
        with pytest.raises(ValueError, match="no "):
            parse(text)

    @pytest.mark.parametrize("line", [b"btime ", b"btime nan", b"btime 1e9", b"btime 1 2"])
    def test_a_btime_that_is_not_an_integer_raises(self, line: bytes) -> None:
        """Anything but the kernel's one unsigned integer is a ValueError (the callers'
        refusal), not an IndexError or a NaN boot time."""
        with pytest.raises(ValueError, match="btime is not an unsigned integer"):
            parse_boot_time(b"cpu 1 2\n" + line + b"\n")


@contextmanager
def _no_descriptor_left() -> Iterator[None]:
    """Every open() in this process fails with EMFILE until the block ends."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest = os.open(os.devnull, os.O_RDONLY)
    os.close(lowest)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_process_families_come_back_after_descriptors_ran_out(tmp_path: Path) -> None:
    """A first scrape that meets EMFILE (a burst of connections) loses the process
    families for that scrape only: the boot time it could not read is read again, so
    process_open_fds is there to show the next scrape what happened."""
    root = _proc_tree(tmp_path)

    def process_families() -> list[str]:
        return [r.name for r in live_rows(proc=root) if r.name.startswith("process_")]

    with _no_descriptor_left():
        during = process_families()
    assert ([], 6) == (during, len(process_families()))
