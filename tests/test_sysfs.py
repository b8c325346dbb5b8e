"""The bounded sysfs/procfs readers refuse what would hang, blow up or lie, naming the path."""

from __future__ import annotations

import errno
import gc
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from fifo import error_reading_fifo
from openfiles import count_opens, held_under
from oserrors import fail_reads, page_reads

from exporter.errors import CollectorError
from exporter.sim.fixtures.pci import write_attribute
from exporter.sysfs import (
    GARBAGE,
    MAX_ATTRIBUTE_BYTES,
    MAX_COUNTER,
    MAX_CPUS,
    MAX_KEPT_FILES,
    UNREADABLE,
    FileError,
    GarbageFile,
    KeptFiles,
    UnreadableFile,
    failed_with,
    is_sysfs_mount,
    is_sysfs_tree,
    kept_files_budget,
    list_source,
    node_dirs,
    open_regular,
    parse_cpulist,
    read_int,
    read_text,
    vendor_name,
)

CAPTURED = Path(__file__).parent / "fixtures" / "captured" / "vm-virtio-2cpu"


def _node_root(sysfs: Path) -> Path:
    return sysfs / "devices" / "system" / "node"


class TestReadText:
    def test_stripped_contents(self, tmp_path: Path) -> None:
        """Surrounding whitespace and the newline the kernel appends are dropped."""
        write_attribute(tmp_path / "name", "  amdgpu\n")

        assert "amdgpu" == read_text(tmp_path / "name")

    def test_missing_file_and_missing_parent_are_none(self, tmp_path: Path) -> None:
        """An absent file, or a path through a file, is an absent optional attribute."""
        write_attribute(tmp_path / "file", "1\n")

        expected = (None, None)
        assert expected == (read_text(tmp_path / "absent"), read_text(tmp_path / "file" / "x"))

    def test_trailing_nul_is_dropped(self, tmp_path: Path) -> None:
        """A driver that writes its string's NUL terminator still gives the string."""
        (tmp_path / "name").write_bytes(b"xe\x00\n")

        assert "xe" == read_text(tmp_path / "name")

    def test_binary_contents_are_garbage(self, tmp_path: Path) -> None:
        """A NUL inside the data (a binary attribute such as ``config``) is refused."""
        path = tmp_path / "config"
        path.write_bytes(b"\x86\x80\x00\x0b\xd5\x00")

        with pytest.raises(GarbageFile, match=f"^{path}: binary contents$") as caught:
            read_text(path)
        assert GARBAGE == caught.value.label

    def test_undecodable_bytes_are_replaced(self, tmp_path: Path) -> None:
        """Bytes that are not UTF-8 become U+FFFD rather than an exception."""
        (tmp_path / "label").write_bytes(b"temp\xff\n")

        assert "temp\ufffd" == read_text(tmp_path / "label")

    def test_huge_file_is_garbage(self, tmp_path: Path) -> None:
        """A file beyond the cap is refused, not silently cut short."""
        path = tmp_path / "huge"
        path.write_bytes(b"1" * (MAX_ATTRIBUTE_BYTES + 1))

        with pytest.raises(GarbageFile, match=f"^{path}: longer than {MAX_ATTRIBUTE_BYTES}"):
            read_text(path)

    def test_file_at_the_cap_is_read(self, tmp_path: Path) -> None:
        """A file of exactly the cap is still read whole."""
        (tmp_path / "big").write_bytes(b"a" * MAX_ATTRIBUTE_BYTES)

        assert "a" * MAX_ATTRIBUTE_BYTES == read_text(tmp_path / "big")

    def test_fifo_is_refused_without_blocking(self, tmp_path: Path) -> None:
        """A FIFO with no writer is refused at once: a plain open would block forever."""
        path = tmp_path / "fifo"
        error = error_reading_fifo(read_text, path)
        assert isinstance(error, UnreadableFile)
        assert f"cannot read {path}: not a regular file" == str(error)

    def test_directory_is_unreadable_as_the_os_says(self, tmp_path: Path) -> None:
        """A directory where an attribute belongs fails as read() would: EISDIR, as cause."""
        (tmp_path / "hwmon").mkdir()

        with pytest.raises(UnreadableFile) as caught:
            read_text(tmp_path / "hwmon")
        assert (f"cannot read {tmp_path / 'hwmon'}: Is a directory", UNREADABLE, True) == (
            str(caught.value),
            caught.value.label,
            isinstance(caught.value.__cause__, IsADirectoryError),
        )

    def test_symlink_loop_is_unreadable(self, tmp_path: Path) -> None:
        """A link loop is an unreadable file, not a crash or a hang."""
        (tmp_path / "a").symlink_to("b")
        (tmp_path / "b").symlink_to("a")

        with pytest.raises(UnreadableFile, match=f"^cannot read {tmp_path / 'a'}: Too many"):
            read_text(tmp_path / "a")

    def test_no_descriptor_is_left_open(self, tmp_path: Path) -> None:
        """A file read, and a directory or FIFO refused, leave no descriptor behind: the
        collectors read every few seconds and would run out of them."""
        write_attribute(tmp_path / "name", "xe\n")
        (tmp_path / "hwmon").mkdir()
        os.mkfifo(tmp_path / "fifo")
        read = read_text(tmp_path / "name")
        for name in ("hwmon", "fifo"):
            with pytest.raises(UnreadableFile):
                read_text(tmp_path / name)

        assert ("xe", []) == (read, held_under(tmp_path))

    def test_errors_are_collector_errors(self) -> None:
        """Callers that catch CollectorError keep catching both kinds."""
        assert issubclass(UnreadableFile, CollectorError)
        assert issubclass(GarbageFile, FileError)


class TestOpenRegular:
    def test_opens_a_regular_file(self, tmp_path: Path) -> None:
        """A regular file comes back open for binary reading."""
        (tmp_path / "stat").write_bytes(b"cpu0 1 2 3 4\n")

        with open_regular(tmp_path / "stat") as handle:
            assert b"cpu0 1 2 3 4\n" == handle.read()

    def test_missing_file_raises_file_not_found(self, tmp_path: Path) -> None:
        """Absence is left to the caller to judge: optional or the whole source gone."""
        with pytest.raises(FileNotFoundError):
            open_regular(tmp_path / "stat")


class TestReadInt:
    @pytest.mark.parametrize(
        ("text", "base", "expected"),
        [
            ("42\n", 10, 42),
            ("-1\n", 10, -1),
            (f"{MAX_COUNTER}\n", 10, MAX_COUNTER),
            ("0x10DE\n", 16, 0x10DE),
            ("ff", 16, 255),
        ],
    )
    def test_values(self, tmp_path: Path, text: str, base: int, expected: int) -> None:
        """Decimal and hex attributes up to 64 bits read as integers."""
        write_attribute(tmp_path / "value", text)

        assert expected == read_int(tmp_path / "value", base=base)

    @pytest.mark.parametrize(
        "text",
        [
            str(MAX_COUNTER + 1),
            f"-{MAX_COUNTER + 1}",
            "1" * 400,
            "9" * 5000,  # past int()'s 4,300 digits: refused by length, not a ValueError
            "lots",
            "1_000",
            "12 kB",
            "",
            "0x10",
        ],
    )
    def test_garbage_and_overflow_are_refused(self, tmp_path: Path, text: str) -> None:
        """Garbage and numbers beyond 64 bits either way (a 400- or 5,000-digit counter)
        are garbage."""
        path = tmp_path / "value"
        write_attribute(path, f"{text}\n")

        with pytest.raises(GarbageFile, match=f"^{path}: not a 64-bit integer: ") as caught:
            read_int(path)
        assert GARBAGE == caught.value.label

    def test_missing_is_none(self, tmp_path: Path) -> None:
        """A missing attribute is None, like read_text."""
        assert read_int(tmp_path / "value") is None

    @pytest.mark.parametrize("kept", [False, True])
    def test_unsigned_refuses_a_sign_the_kernel_never_prints(
        self, tmp_path: Path, kept: bool
    ) -> None:
        """A count the kernel prints unsigned (a netdev counter, a hugepage count, a
        sensor's reading) with a minus sign is garbage, kept descriptor or not; without
        ``unsigned`` it is a number (numa_node's -1), and 0 is a count either way."""
        path = tmp_path / "value"

        def read(text: str, *, unsigned: bool) -> int | None:
            write_attribute(path, f"{text}\n")
            if kept:
                return KeptFiles(max_open=0).read_int(str(path), unsigned=unsigned)
            return read_int(path, unsigned=unsigned)

        assert (-1, 0) == (read("-1", unsigned=False), read("-0", unsigned=True))
        with pytest.raises(GarbageFile, match=f"^{path}: negative: -1$") as caught:
            read("-1", unsigned=True)
        assert GARBAGE == caught.value.label


class TestKeptFiles:
    def test_rewritten_in_place_is_read_afresh(self, tmp_path: Path) -> None:
        """A kept file is re-read from offset 0: a value written in place is seen."""
        path = tmp_path / "rx_bytes"
        path.write_text("1\n")
        files = KeptFiles()
        first = files.read_int(str(path))
        path.write_text("22\n")

        assert (1, 22, 1) == (first, files.read_int(str(path)), len(files))

    def test_files_kept_by_one_dropped_unclosed_are_closed_with_it(self, tmp_path: Path) -> None:
        """An owner gone without close() takes its kept descriptors with it, as a file
        object would: the tests' collectors left thousands open, and a run under the
        common `ulimit -n 1024` failed its later tests with EMFILE."""
        path = tmp_path / "rx_bytes"
        path.write_text("1\n")
        files = KeptFiles()
        files.read_int(str(path))
        (fd,) = files._fds.values()

        def open_on_path() -> bool:  # the number alone may be another file's by then
            try:
                return os.readlink(f"/proc/self/fd/{fd}") == str(path)
            except FileNotFoundError:
                return False

        kept = open_on_path()
        del files
        gc.collect()

        assert (True, False) == (kept, open_on_path())

    def test_replaced_file_is_reopened(self, tmp_path: Path) -> None:
        """A file replaced by rename (as fixture trees do) is reopened, not read stale."""
        path = tmp_path / "rx_bytes"
        write_attribute(path, "1\n")
        files = KeptFiles()
        files.read_int(str(path))
        write_attribute(path, "2\n")

        assert 2 == files.read_int(str(path))

    def test_removed_file_is_none_and_closed(self, tmp_path: Path) -> None:
        """A kept file that is gone reads as absent and its descriptor is closed."""
        path = tmp_path / "rx_bytes"
        path.write_text("1\n")
        files = KeptFiles()
        files.read_int(str(path))
        path.unlink()

        assert (None, 0) == (files.read_int(str(path)), len(files))

    def test_fifo_is_refused_and_not_kept(self, tmp_path: Path) -> None:
        """A FIFO is refused at open (O_NONBLOCK, then S_ISREG), as read_text refuses it."""
        path = tmp_path / "fifo"
        os.mkfifo(path)
        files = KeptFiles()

        with pytest.raises(UnreadableFile, match="not a regular file"):
            files.read_text(str(path))
        assert 0 == len(files)

    def test_garbage_is_refused_like_read_int(self, tmp_path: Path) -> None:
        """The same bounds and checks as read_int: a value beyond 64 bits is garbage."""
        path = tmp_path / "rx_bytes"
        path.write_text(f"{MAX_COUNTER + 1}\n")

        with pytest.raises(GarbageFile, match=f"^{path}: not a 64-bit integer"):
            KeptFiles().read_int(str(path))

    @pytest.mark.parametrize("check_replaced", [True, False], ids=["fixture", "sysfs"])
    def test_a_counter_followed_by_more_is_garbage(
        self, tmp_path: Path, check_replaced: bool
    ) -> None:
        """A kept counter re-read whose file now holds more after a run of newlines is
        garbage, as read_int says, however short the counter at its head."""
        path = tmp_path / "rx_bytes"
        path.write_text("7\n")
        files = KeptFiles(check_replaced=check_replaced)
        files.read_int(str(path))
        path.write_text("7" + "\n" * 21 + "8\n")

        with pytest.raises(GarbageFile, match=f"^{path}: not a"):
            files.read_int(str(path))

    @pytest.mark.parametrize("check_replaced", [True, False], ids=["fixture", "sysfs"])
    def test_a_failed_re_read_is_reported_whichever_the_tree(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, check_replaced: bool
    ) -> None:
        """EIO on a kept counter's re-read is unreadable, on sysfs too; the descriptor is
        kept, and once the attribute answers again the same descriptor reads it."""
        path = tmp_path / "rx_bytes"
        write_attribute(path, "1\n")
        files = KeptFiles(check_replaced=check_replaced)
        files.read_int(str(path))
        descriptor = held_under(tmp_path)
        with monkeypatch.context() as failing:
            fail_reads(failing, path_suffix="/rx_bytes", code=errno.EIO)
            with pytest.raises(UnreadableFile, match=f"^cannot read {path}: Input/output"):
                files.read_int(str(path))
        path.write_text("2\n")  # in place: the kept descriptor sees it

        assert (2, 1, descriptor) == (files.read_int(str(path)), len(files), held_under(tmp_path))

    def test_hex_attributes_read_as_hex(self, tmp_path: Path) -> None:
        """``base=16`` holds through a kept descriptor: "10" is sixteen, not ten."""
        write_attribute(tmp_path / "device", "10\n")
        write_attribute(tmp_path / "vendor", "0x10de\n")
        files = KeptFiles()

        assert (16, 0x10DE) == (
            files.read_int(str(tmp_path / "device"), base=16),
            files.read_int(str(tmp_path / "vendor"), base=16),
        )

    def test_a_failed_read_keeps_its_file_within_the_budget(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A kept file whose read fails (EIO), and a file whose first read fails, are
        unreadable; both stay kept (only the attribute failed, as a down port's rate
        answers EINVAL every poll), and are opened once however often they fail."""
        kept, fresh = tmp_path / "kept", tmp_path / "fresh"
        write_attribute(kept, "1\n")
        write_attribute(fresh, "2\n")
        files = KeptFiles()
        files.read_int(str(kept))
        fail_reads(monkeypatch, path_suffix="/kept", code=errno.EIO)
        fail_reads(monkeypatch, path_suffix="/fresh", code=errno.EINVAL)
        opened = count_opens(monkeypatch)
        for path in (kept, fresh, kept, fresh):
            with pytest.raises(UnreadableFile, match=f"^cannot read {path}: "):
                files.read_int(str(path))

        assert (2, [str(fresh)], sorted(map(str, (kept, fresh)))) == (
            len(files),
            opened,
            sorted(held_under(tmp_path)),
        )

    def test_a_failed_read_past_the_budget_leaves_nothing_open(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Past ``max_open`` a file whose read fails is unreadable and closed at once."""
        path = tmp_path / "rx_bytes"
        write_attribute(path, "1\n")
        fail_reads(monkeypatch, path_suffix="/rx_bytes", code=errno.EIO)
        files = KeptFiles(max_open=0)
        with pytest.raises(UnreadableFile, match=f"^cannot read {path}: Input/output"):
            files.read_int(str(path))

        assert (0, []) == (len(files), held_under(tmp_path))

    def test_a_device_gone_under_a_kept_file_reads_as_absent(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """sysfs answers ENODEV on a kept descriptor whose device was removed: the file
        reads as absent, and its descriptor is closed."""
        path = tmp_path / "rx_bytes"
        write_attribute(path, "1\n")
        files = KeptFiles()
        files.read_int(str(path))
        fail_reads(monkeypatch, path_suffix="/rx_bytes", code=errno.ENODEV)

        assert (None, 0, []) == (files.read_int(str(path)), len(files), held_under(tmp_path))

    @pytest.mark.parametrize("kept", [True, False], ids=["past-the-budget", "read_int"])
    @pytest.mark.parametrize("failing", ["open", "read"])
    def test_a_device_gone_past_the_budget_reads_as_absent_too(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str, kept: bool
    ) -> None:
        """A file opened per read (past ``max_open``, read for the first time, or by the
        module's read_int) whose device is gone (kernfs answers ENODEV to the open or the
        read) reads as absent like a kept one, not as unreadable: whether a removed
        device counts as an error must not depend on how the file is read."""
        path = tmp_path / "rx_bytes"
        write_attribute(path, "1\n")
        if failing == "read":
            fail_reads(monkeypatch, path_suffix="/rx_bytes", code=errno.ENODEV)
        else:
            real_open = os.open

            def open_gone(name: str, flags: int, *args: int) -> int:
                if str(name).endswith("/rx_bytes"):
                    raise OSError(errno.ENODEV, os.strerror(errno.ENODEV), name)
                return real_open(name, flags, *args)

            monkeypatch.setattr(os, "open", open_gone)
        value = KeptFiles(max_open=0).read_int(str(path)) if kept else read_int(path)

        assert (None, []) == (value, held_under(tmp_path))

    def test_sweep_closes_files_not_read_since(self, tmp_path: Path) -> None:
        """sweep() keeps what was read since the last sweep and closes the rest."""
        for name in ("a", "b"):
            (tmp_path / name).write_text("1\n")
        files = KeptFiles()
        files.read_int(str(tmp_path / "a"))
        files.read_int(str(tmp_path / "b"))
        files.sweep()
        files.read_int(str(tmp_path / "a"))
        files.sweep()

        assert 1 == len(files)

    def test_beyond_the_budget_files_are_read_but_not_kept(self, tmp_path: Path) -> None:
        """Past ``max_open`` a file is opened per read: the values still come."""
        for name in ("a", "b"):
            (tmp_path / name).write_text(f"{len(name) + ord(name)}\n")
        files = KeptFiles(max_open=1)
        values = [files.read_int(str(tmp_path / n)) for n in ("a", "b", "b")]

        assert ([98, 99, 99], 1) == (values, len(files))

    @pytest.mark.parametrize(
        ("limit", "budget"),
        [
            (resource.RLIM_INFINITY, MAX_KEPT_FILES),
            (1_048_576, MAX_KEPT_FILES),
            (4096, 1024),
            (1024, 256),  # systemd's and containerd 2's soft default
            (3, 0),
        ],
    )
    def test_budget_leaves_three_quarters_of_the_limit(self, limit: int, budget: int) -> None:
        """Kept files take at most a quarter of the open-files limit, and MAX_KEPT_FILES."""
        assert budget == kept_files_budget(limit)

    def test_budget_covers_two_pfs_of_127_vfs(self) -> None:
        """Every counter of a dense SR-IOV node stays open under a container's usual limit."""
        assert kept_files_budget(524_288) >= (2 + 2 * 127) * 8

    def test_start_raises_the_soft_limit_to_the_hard_one(self) -> None:
        """As Go programs do: a soft 1,024 under a higher hard limit is not what budgets
        the kept files."""
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        if hard == resource.RLIM_INFINITY or hard <= 64:
            pytest.skip(f"hard open-files limit {hard}: nothing to raise to")
        script = (
            "import resource\n"
            "from exporter.sysfs import kept_files_budget, raise_open_files_limit\n"
            "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))\n"
            "print(kept_files_budget(), *raise_open_files_limit(), kept_files_budget())\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
        )
        assert f"16 64 {hard} {kept_files_budget(hard)}" == result.stdout.strip(), result.stderr

    def test_real_sysfs_attribute_rereads(self) -> None:
        """On this kernel's sysfs, pread from 0 on a kept attribute gives its value again."""
        path = "/sys/class/net/lo/statistics/rx_bytes"
        if not os.path.exists(path):
            pytest.skip(f"{path} does not exist here")
        files = KeptFiles()
        first = files.read_int(path)
        second = files.read_int(path)

        assert (True, True, 1) == (
            first is not None and first >= 0,
            second is not None and first is not None and second >= first,
            len(files),
        )

    def test_unchecked_files_skip_the_replacement_check(self, tmp_path: Path) -> None:
        """Without ``check_replaced`` (sysfs mounts, where files are never replaced) a
        file replaced by rename is still read through the kept descriptor: the fstat that
        would notice is what it saves."""
        path = tmp_path / "rx_bytes"
        write_attribute(path, "1\n")
        checked, unchecked = KeptFiles(), KeptFiles(check_replaced=False)
        before = (checked.read_int(str(path)), unchecked.read_int(str(path)))
        write_attribute(path, "2\n")

        assert ((1, 1), (2, 1)) == (
            before,
            (checked.read_int(str(path)), unchecked.read_int(str(path))),
        )


# This machine's /proc/self/mountinfo (a container: sysfs on /sys, cgroup v1 and a tmpfs
# under it), and a DaemonSet's hostPath mounts of the node's /sys and /proc.
_MOUNTINFO = r"""
22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
1200 1100 0:22 / /host/sys ro,relatime master:5 - sysfs sysfs rw
1201 1100 0:21 / /host/proc ro,relatime master:6 - proc proc rw
1202 1100 0:50 / /tmp/a\040tree rw - tmpfs tmpfs rw
1203 1202 0:51 / /tmp/a\040tree/sys rw - sysfs sysfs rw
1204 1100 0:52 / /shadowed rw - sysfs sysfs rw
1205 1100 0:53 / /shadowed rw - tmpfs tmpfs rw
"""


class TestReadCounters:
    """``KeptFiles.read_counters``: read_int(path, unsigned=True) of each file in one
    call, an error in the place of a value that failed."""

    CONTENTS = {
        "zero": "0\n",
        "counter": "1126400\n",
        "largest": f"{MAX_COUNTER}\n",
        "too-large": f"{MAX_COUNTER + 1}\n",
        "negative": "-1\n",
        "text": "down\n",
        "more-after-newlines": "7" + "\n" * 21 + "8\n",
        "a-page-of-digits": "1" * 5000 + "\n",
        "longer-than-an-attribute": "1" * (MAX_ATTRIBUTE_BYTES + 1),
        "empty": "",
    }

    @staticmethod
    def _outcome(read: object) -> object:
        if isinstance(read, CollectorError):
            return type(read), str(read)
        return read

    @pytest.mark.parametrize("check_replaced", [True, False], ids=["fixture", "sysfs"])
    def test_each_file_as_read_int_reads_it(self, tmp_path: Path, check_replaced: bool) -> None:
        """Values, garbage and absent files come back as read_int gives them, on the
        first read (files opened) and the next (kept descriptors)."""
        for name, text in self.CONTENTS.items():
            write_attribute(tmp_path / name, text)
        paths = [str(tmp_path / name) for name in (*self.CONTENTS, "absent")]
        expected = []
        for path in paths:
            try:
                expected.append(KeptFiles().read_int(path, unsigned=True))
            except CollectorError as error:
                expected.append((type(error), str(error)))
        files = KeptFiles(check_replaced=check_replaced)
        first = [self._outcome(v) for v in files.read_counters(paths)]
        again = [self._outcome(v) for v in files.read_counters(paths)]

        assert (expected, expected, len(self.CONTENTS)) == (first, again, len(files))

    @pytest.mark.parametrize("check_replaced", [True, False], ids=["fixture", "sysfs"])
    def test_a_changed_counter_is_read_afresh(self, tmp_path: Path, check_replaced: bool) -> None:
        """A value written in place is seen through the kept descriptor; on a fixture
        tree, a file replaced by rename is reopened."""
        in_place, replaced = tmp_path / "rx_bytes", tmp_path / "tx_bytes"
        write_attribute(in_place, "1\n")
        write_attribute(replaced, "2\n")
        files = KeptFiles(check_replaced=check_replaced)
        paths = [str(in_place), str(replaced)]
        before = files.read_counters(paths)
        in_place.write_text("11\n")
        if check_replaced:
            write_attribute(replaced, "22\n")

        assert ([1, 2], [11, 22 if check_replaced else 2]) == (before, files.read_counters(paths))

    @pytest.mark.parametrize("check_replaced", [True, False], ids=["fixture", "sysfs"])
    def test_a_failed_read_is_its_error_and_the_rest_are_read(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, check_replaced: bool
    ) -> None:
        """EINVAL on a kept file (a netdev being unregistered) is that file's error, its
        errno readable by failed_with, the descriptor kept; a device gone (ENODEV) reads
        as absent and its descriptor is closed; the files after them are read."""
        names = ("rx_bytes", "tx_bytes", "rx_packets")
        for number, name in enumerate(names):
            write_attribute(tmp_path / name, f"{number}\n")
        paths = [str(tmp_path / name) for name in names]
        files = KeptFiles(check_replaced=check_replaced)
        files.read_counters(paths)
        fail_reads(monkeypatch, path_suffix="/rx_bytes", code=errno.EINVAL)
        fail_reads(monkeypatch, path_suffix="/tx_bytes", code=errno.ENODEV)
        failed, gone, value = files.read_counters(paths)

        assert isinstance(failed, UnreadableFile)
        assert (str(failed), failed_with(failed, errno.EINVAL)) == (
            f"cannot read {paths[0]}: Invalid argument",
            True,
        )
        assert (gone, value, sorted(held_under(tmp_path))) == (None, 2, [paths[0], paths[2]])


class TestIsSysfsMount:
    @pytest.mark.parametrize(
        ("path", "expected"),
        [
            ("/sys", True),
            ("/sys/class/net/eth0/statistics", True),
            ("/sys/fs/cgroup/cpu", False),  # a mount under /sys is not sysfs
            ("/sysfs", False),  # a prefix of the name, not a parent directory
            ("/host/sys/class/net", True),
            ("/host/proc", False),
            ("/tmp/a tree", False),  # escaped in mountinfo as \040
            ("/tmp/a tree/sys/devices", True),
            ("/shadowed/class", False),  # the later mount on the same point wins
            ("/var/lib", False),
        ],
    )
    def test_the_mount_holding_the_path_decides(self, path: str, expected: bool) -> None:
        assert expected is is_sysfs_mount(path, mountinfo=_MOUNTINFO)

    @pytest.mark.parametrize(
        ("root", "expected"),
        [
            ("/host/sys", True),  # devices/, bus/ and class/ mounted one by one
            ("/sys", True),
            ("/tmp/fixture", False),
            ("/host/proc", False),
        ],
    )
    def test_a_tree_with_sysfs_at_devices_is_sysfs(self, root: str, expected: bool) -> None:
        """The DaemonSet's layout: /host/sys is a plain folder holding three sysfs
        mounts, and is a sysfs tree (its kept files skip the replacement check)."""
        split = "\n".join(
            f"{1300 + i} 1100 0:22 /{sub} /host/sys/{sub} ro,relatime - sysfs sysfs rw"
            for i, sub in enumerate(("devices", "bus", "class"))
        )
        mountinfo = _MOUNTINFO.replace("/host/sys ro", "/elsewhere ro") + split + "\n"
        assert expected is is_sysfs_tree(root, mountinfo=mountinfo)

    def test_a_link_is_judged_by_where_it_leads(self, tmp_path: Path) -> None:
        """A root given through a symbolic link lies on the mount its target lies on."""
        (tmp_path / "sys").symlink_to("/host/sys")
        assert is_sysfs_mount(tmp_path / "sys" / "class", mountinfo=_MOUNTINFO)

    def test_the_type_decides_not_the_source(self) -> None:
        """After the separator comes the filesystem type, then the source, which is free
        text: sysfs mounted from "none" is sysfs, a tmpfs named "sysfs" is not."""
        mountinfo = "30 1 0:22 / /a rw - sysfs none rw\n31 1 0:23 / /b rw - tmpfs sysfs rw\n"
        assert (True, False) == (
            is_sysfs_mount("/a/class", mountinfo=mountinfo),
            is_sysfs_mount("/b/class", mountinfo=mountinfo),
        )

    def test_lines_not_in_the_format_are_passed_over(self) -> None:
        broken = "garbage\n\n7 8 -\n9 9 0:1 / /sys rw a b -\n9 9 0:1 / /sys rw\n"
        assert is_sysfs_mount("/sys/class", mountinfo=_MOUNTINFO + broken)

    def test_this_process_sees_its_own_mounts(self, tmp_path: Path) -> None:
        """Against the real /proc/self/mountinfo: a test's tree is no sysfs, and its kept
        files are checked for replacement; /sys is, and its are not."""
        path = tmp_path / "rx_bytes"
        write_attribute(path, "1\n")
        files = KeptFiles.under(tmp_path)
        files.read_int(str(path))
        write_attribute(path, "2\n")
        assert (False, 2) == (is_sysfs_mount(tmp_path), files.read_int(str(path)))
        if not os.path.isdir("/sys/class"):
            pytest.skip("no sysfs mounted at /sys here")
        assert is_sysfs_mount("/sys/class")


class TestPagedReads:
    """kernfs serves a binary attribute a page per read(): a NUMA node's cpulist of a
    2,048-CPU host interleaved over two sockets is 4,564 bytes, cut at 4,096 it still
    parses (to 931 CPUs ending at 1858), so a reader that stops early is wrong silently."""

    CPULIST = ",".join(str(cpu) for cpu in range(0, 2048, 2))

    def test_read_text_reads_past_the_first_page(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = tmp_path / "cpulist"
        write_attribute(path, self.CPULIST + "\n")
        page_reads(monkeypatch)
        assert tuple(range(0, 2048, 2)) == parse_cpulist(read_text(path) or "")

    def test_kept_files_read_past_the_first_page_every_time(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = tmp_path / "cpulist"
        write_attribute(path, self.CPULIST + "\n")
        page_reads(monkeypatch)
        files = KeptFiles()
        assert (self.CPULIST, self.CPULIST) == (
            files.read_text(str(path)),
            files.read_text(str(path)),  # through the kept descriptor
        )

    def test_a_paged_file_past_the_bound_is_still_refused(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = tmp_path / "huge"
        write_attribute(path, "1," * (MAX_ATTRIBUTE_BYTES // 2 + 10))
        page_reads(monkeypatch)
        with pytest.raises(GarbageFile, match="longer than"):
            read_text(path)


class TestParseCpulist:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("0-3,8,10-11", (0, 1, 2, 3, 8, 10, 11)),
            ("5", (5,)),
            ("0-1,64-65\n", (0, 1, 64, 65)),
            ("10-11,0-1", (0, 1, 10, 11)),
            ("2-2", (2,)),
            ("1,64", (1, 64)),  # a set of these iterates 64 first: sorted, not set order
            ("", ()),
            ("\n", ()),
            (f"0-{MAX_CPUS - 1}", tuple(range(MAX_CPUS))),
        ],
    )
    def test_ranges_and_single_cpus(self, text: str, expected: tuple[int, ...]) -> None:
        """Ranges and single CPUs are expanded and sorted; an empty list is no CPUs."""
        assert expected == parse_cpulist(text)

    @pytest.mark.parametrize("text", ["a", "3-1", "0-", "0,,1", "0-3:2/4", "-1", "0 1"])
    def test_garbage_raises(self, text: str) -> None:
        """Anything the kernel would not print is refused."""
        with pytest.raises(ValueError, match="cpulist range"):
            parse_cpulist(text)

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("0-20000000", "not a cpulist range: '0-20000000'"),
            ("0-200000", f"CPU 200000 beyond {MAX_CPUS} CPUs"),
            (",".join([f"0-{MAX_CPUS - 1}"] * 4000), f"more than {MAX_CPUS} CPUs listed"),
            (f"{MAX_CPUS}", f"CPU {MAX_CPUS} beyond {MAX_CPUS} CPUs"),
            (f"0-{MAX_CPUS - 1},0", f"more than {MAX_CPUS} CPUs listed"),
        ],
    )
    def test_huge_lists_are_refused_before_expanding(self, text: str, message: str) -> None:
        """Ranges beyond MAX_CPUS, or repeated until they name more, are refused unexpanded."""
        with pytest.raises(ValueError, match=message):
            parse_cpulist(text)


class TestNodeDirs:
    def test_numbered_in_numeric_order(self, tmp_path: Path) -> None:
        """nodeN directories come by number (node10 after node2); other entries are ignored."""
        root = _node_root(tmp_path)
        for name in ("node10", "node2", "node0", "power", "nodefoo"):
            (root / name).mkdir(parents=True)
        write_attribute(root / "online", "0,2,10\n")

        expected = ((0, root / "node0"), (2, root / "node2"), (10, root / "node10"))
        assert expected == node_dirs(tmp_path)

    def test_captured_vm_has_one_node(self) -> None:
        """The captured 2-vCPU VM has node0 only."""
        expected = ((0, _node_root(CAPTURED / "sys") / "node0"),)
        assert expected == node_dirs(CAPTURED / "sys")

    def test_non_numa_kernel_has_none(self, tmp_path: Path) -> None:
        """Without devices/system/node there are no nodes."""
        assert () == node_dirs(tmp_path)

    def test_unlistable_node_root_names_the_path(self, tmp_path: Path) -> None:
        """A node root that is a link loop fails with its path."""
        system = tmp_path / "devices" / "system"
        system.mkdir(parents=True)
        (system / "node").symlink_to("node")

        with pytest.raises(CollectorError, match=f"cannot list {system / 'node'}"):
            node_dirs(tmp_path)


class TestListSource:
    def test_entries_come_sorted(self, tmp_path: Path) -> None:
        """Entries come by name whatever order the filesystem lists them in (hash order
        on ext4, creation order on btrfs, its reverse on tmpfs: made here in neither)."""
        names = [f"mlx5_{n:02}" for n in (7, 2, 11, 0, 5, 9, 1, 10, 3, 8, 6, 4)]
        for name in names:
            (tmp_path / name).mkdir()

        assert sorted(names) == list_source(tmp_path, absent="none")


class TestNames:
    @pytest.mark.parametrize(
        ("vendor_id", "expected"),
        [
            ("0x10de", "nvidia"),
            ("0x1002\n", "amd"),
            ("0x8086", "intel"),
            ("0x15B3", "mellanox"),
            ("0x1a03", "0x1a03"),
            ("", None),
            (None, None),
        ],
    )
    def test_vendor_name(self, vendor_id: str | None, expected: str | None) -> None:
        """Known vendors by name, others by their lower-case hex ID, unknown as None."""
        assert expected == vendor_name(vendor_id)
