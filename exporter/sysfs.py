"""Bounded, defensive readers for sysfs/procfs files, and the kernel's own formats.

Missing optional files give None; anything else unusable raises a ``FileError``
naming the path, whose ``label`` is the error a collector counts: ``unreadable``
(permissions, I/O errors, link loops, a FIFO or directory where a file belongs) or
``garbage`` (binary, oversized or unparsable contents). Reads are capped: some drivers
expose huge or endless attributes. Numbers beyond 64 bits are refused like garbage: no
kernel counter is wider. Files are opened non-blocking and must be regular files, so
a FIFO planted in the tree cannot hang a collector's thread.
"""

from __future__ import annotations

import errno
import os
import re
import resource
import stat
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO, ClassVar

from exporter.errors import CollectorError, CollectorUnavailable
from exporter.model import CollectorIssue

__all__ = [
    "GARBAGE",
    "MAX_ATTRIBUTE_BYTES",
    "MAX_COUNTER",
    "MAX_CPUS",
    "MAX_KEPT_FILES",
    "UNREADABLE",
    "VANISHED",
    "FileError",
    "GarbageFile",
    "KeptFiles",
    "UnreadableFile",
    "failed_with",
    "is_sysfs_mount",
    "is_sysfs_tree",
    "kept_files_budget",
    "list_source",
    "list_source_inodes",
    "node_dirs",
    "open_regular",
    "parse_boot_time",
    "parse_cpulist",
    "parse_hex_id",
    "raise_open_files_limit",
    "read_int",
    "read_pci_id",
    "read_text",
    "vendor_name",
]

# Error labels (``podresources_collector_errors_total{error}``) of failed file reads.
UNREADABLE = "unreadable"
GARBAGE = "garbage"
# A file or link a listing just named is gone (hot unplug, a VF destroyed mid-read).
VANISHED = "vanished"


class FileError(CollectorError):
    """One file could not be used; the message names it, ``label`` says how it failed."""

    label: ClassVar[str] = UNREADABLE


class UnreadableFile(FileError):
    """The file exists but cannot be read: permissions, I/O error, link loop, not a file."""

    label = UNREADABLE


class GarbageFile(FileError):
    """The file holds what the kernel would not write there."""

    label = GARBAGE


MAX_COUNTER = 2**64 - 1

# The kernel's NR_CPUS ceiling is 8192 on every common architecture; a cpulist naming
# more is garbage and must not cost gigabytes to expand.
MAX_CPUS = 16384

_NODE_DIR = re.compile(r"^node(\d+)$")
_RANGE = re.compile(r"^(\d{1,6})(?:-(\d{1,6}))?$")

# PCI vendor IDs (pci.ids) of the vendors whose devices a GPU/accelerator node carries:
# the one ``vendor`` label vocabulary. Others keep their hex ID.
_VENDOR_NAMES = {
    "0x10de": "nvidia",
    "0x1002": "amd",
    "0x1022": "amd",
    "0x8086": "intel",
    "0x15b3": "mellanox",
    "0x14e4": "broadcom",
    "0x1077": "qlogic",
    "0x1924": "solarflare",
    "0x19e5": "huawei",
    "0x1d0f": "amazon",
    "0x1ae0": "google",
    "0x1af4": "virtio",
    "0x1dd8": "pensando",
    "0x1e52": "tenstorrent",
    "0x1da3": "habana",
}


def vendor_name(vendor_id: str | None) -> str | None:
    """``nvidia``, ``amd``, ``intel``, ``mellanox``... for a PCI vendor ID (``0x10de``);
    the lower-case hex ID for a vendor not listed; None when unknown."""
    if not vendor_id:
        return None
    vendor_id = vendor_id.strip().lower()
    return _VENDOR_NAMES.get(vendor_id, vendor_id)


MAX_ATTRIBUTE_BYTES = 64 * 1024
_MAX_DIGITS = 40  # a 64-bit number needs 20 decimal digits, 0x plus 16 hex
_COUNTER_DIGITS = 20
_INTEGER = {10: re.compile(r"^[+-]?[0-9]+$"), 16: re.compile(r"^[+-]?(0[xX])?[0-9a-fA-F]+$")}


def open_regular(path: Path | str) -> BinaryIO:
    """``path`` opened for binary reading, or FileNotFoundError/NotADirectoryError.

    Opened with O_NONBLOCK, then refused unless it is a regular file: a plain open of a
    FIFO blocks until a writer comes, and a device node can block or stream forever.
    sysfs attributes and procfs files are regular files. Raises UnreadableFile naming
    the path for anything else that fails.
    """
    return os.fdopen(_open_regular_fd(path), "rb")


def _open_regular_fd(path: Path | str) -> int:
    """open_regular's file descriptor: the caller closes it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        raise
    except OSError as error:
        raise UnreadableFile(f"cannot read {path}: {error.strerror or error}") from error
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            # What read() would raise; the OSError cause marks it an OS-level failure.
            cause = IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
            raise UnreadableFile(f"cannot read {path}: {cause.strerror}") from cause
        if not stat.S_ISREG(mode):
            raise UnreadableFile(f"cannot read {path}: not a regular file")
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_text(path: Path | str) -> str | None:
    """The stripped contents of a small attribute file, or None when it does not exist
    (its device gone included: sysfs answers ENODEV).

    Raises UnreadableFile or GarbageFile (binary or longer than
    ``MAX_ATTRIBUTE_BYTES``) naming the path.
    """
    fd = _open_attribute(path)
    if fd is None:
        return None
    try:
        data = _read_whole(fd, from_start=False)
    except OSError as error:
        _raise_unless_gone(error, path)
        return None
    finally:
        os.close(fd)
    return _attribute_text(data, path)


def _open_attribute(path: Path | str) -> int | None:
    """``_open_regular_fd``, or None where the file is gone: not there, or its device
    removed (sysfs answers ENODEV between a device's removal and its files' unlinking)."""
    try:
        return _open_regular_fd(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except UnreadableFile as error:
        if failed_with(error, errno.ENODEV):
            return None
        raise


def _is_gone(error: OSError) -> bool:
    """Whether a failed read says the file's device is gone (ENODEV; ENOENT once sysfs
    drained it)."""
    return error.errno in (errno.ENODEV, errno.ENOENT)


def _unreadable(error: OSError, path: Path | str) -> UnreadableFile | None:
    """What a failed read means: UnreadableFile naming ``path``, raised from ``error``;
    None where the file's device is gone (``_is_gone``), which reads as absent."""
    if _is_gone(error):
        return None
    failed = UnreadableFile(f"cannot read {path}: {error.strerror or error}")
    failed.__cause__ = error  # as raised from it: failed_with() reads its errno
    return failed


def _raise_unless_gone(error: OSError, path: Path | str) -> None:
    if (failed := _unreadable(error, path)) is not None:
        raise failed from error


# kernfs serves a binary attribute (a NUMA node's cpulist, up to NR_CPUS*7/2 bytes) at
# most a page per read(), where a text attribute comes whole in one.
_PAGE_READ = 4096


def _read_whole(fd: int, *, from_start: bool = True) -> bytes:
    """Up to MAX_ATTRIBUTE_BYTES + 1 bytes of ``fd``: one read, more only where the
    first came back a page or longer (a binary attribute may go on). ``pread`` from
    offset 0 (a kept descriptor), or with ``from_start=False`` ``read`` from where a
    fresh descriptor stands (procfs files that refuse pread are read too)."""
    limit = MAX_ATTRIBUTE_BYTES + 1
    data = os.pread(fd, limit, 0) if from_start else os.read(fd, limit)
    if len(data) < _PAGE_READ:
        return data  # a text attribute, whole: the hot path
    chunks = [data]
    size = len(data)
    while size < limit:
        more = os.pread(fd, limit - size, size) if from_start else os.read(fd, limit - size)
        if not more:
            break
        chunks.append(more)
        size += len(more)
    return b"".join(chunks)


def _attribute_text(data: bytes, path: Path | str) -> str:
    if len(data) > MAX_ATTRIBUTE_BYTES:
        raise GarbageFile(f"{path}: longer than {MAX_ATTRIBUTE_BYTES} bytes")
    # Some drivers end a string with its NUL terminator; a NUL inside is binary data.
    data = data.rstrip(b"\0\n\t ")
    if b"\0" in data:
        raise GarbageFile(f"{path}: binary contents")
    return data.decode("utf-8", errors="replace").strip()


def failed_with(error: CollectorError, *codes: int) -> bool:
    """Whether ``error`` is a read that failed with one of the errnos ``codes`` (the
    kernel answering a read of an attribute with an error code of its own)."""
    cause = error.__cause__
    return isinstance(cause, OSError) and cause.errno in codes


def read_int(path: Path | str, *, base: int = 10, unsigned: bool = False) -> int | None:
    """An integer attribute (base 10 or 16), or None when the file does not exist.

    Raises GarbageFile naming the path for garbage, a number beyond 64 bits, or with
    ``unsigned`` (a count the kernel prints unsigned) a negative one; and UnreadableFile
    where read_text does.
    """
    text = read_text(path)
    return None if text is None else _attribute_int(text, path, base=base, unsigned=unsigned)


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def parse_hex_id(text: str, *, digits: int) -> str:
    """A sysfs hex ID (``0x10DE``) as lower-case ``0x`` plus ``digits`` hex digits.

    Raises ValueError on anything else, wider IDs included.
    """
    stripped = text.strip()
    if not stripped.lower().startswith("0x"):
        raise ValueError(f"not a 0x-prefixed hex number: {stripped[:40]!r}")
    if len(stripped) > 2 + digits:  # also keeps int() off thousands of digits
        raise ValueError(f"more than {digits} hex digits: {stripped[:40]!r}")
    # Digits only: int() would also take "0x1_de", "0x-1" and surrounding blanks.
    if not stripped[2:] or not all(c in _HEX_DIGITS for c in stripped[2:]):
        raise ValueError(f"not a hex number: {stripped[:40]!r}")
    return f"0x{int(stripped, 16):0{digits}x}"


def read_pci_id(path: Path | str) -> str | None:
    """A PCI ID attribute (``vendor``, ``device``: ``0x10de``) as ``parse_hex_id`` gives
    it, or None when the file does not exist.

    Raises GarbageFile naming the path for anything else (it would become a label as
    it is), and UnreadableFile where read_text does.
    """
    text = read_text(path)
    if text is None:
        return None
    try:
        return parse_hex_id(text, digits=4)
    except ValueError as error:
        raise GarbageFile(f"{path}: {error}") from None


def _int_of(data: bytes, path: str, *, base: int = 10, unsigned: bool = False) -> int:
    """An attribute's bytes as ``read_int`` takes them."""
    digits = data.rstrip(b"\n")
    # A counter as the kernel prints it, checked on the bytes (isdigit is ASCII-only
    # for bytes); anything else takes read_int's way, with its messages.
    if base == 10 and len(digits) <= _COUNTER_DIGITS and digits.isdigit():
        value = int(digits)
        if value <= MAX_COUNTER:
            return value
    return _attribute_int(_attribute_text(data, path), path, base=base, unsigned=unsigned)


def _attribute_int(text: str, path: Path | str, *, base: int, unsigned: bool = False) -> int:
    # int() alone would take "1_000" and cost quadratic time on thousands of digits.
    if len(text) > _MAX_DIGITS or not _INTEGER[base].match(text):
        raise GarbageFile(f"{path}: not a 64-bit integer: {text[:_MAX_DIGITS]!r}")
    value = int(text, base)
    if abs(value) > MAX_COUNTER:
        raise GarbageFile(f"{path}: not a 64-bit integer: {text[:_MAX_DIGITS]!r}")
    if unsigned and value < 0:
        raise GarbageFile(f"{path}: negative: {value}")
    return value


# Each kept sysfs file holds a descriptor and a kernel page (its seq_file buffer, charged
# to the pod's memory cgroup): ~4 KiB. 2,048 covers the 8 counters of 256 NICs (two PFs
# of 127 VFs) for ~8 MiB; files beyond the budget are opened per read, ~10x the cost.
MAX_KEPT_FILES = 2048


def kept_files_budget(open_files_limit: int | None = None) -> int:
    """How many files a ``KeptFiles`` keeps open: ``MAX_KEPT_FILES``, or a quarter of the
    soft open-files limit (this process's, by default) where that is less, so sockets,
    scrapes and the other collectors keep the rest."""
    if open_files_limit is None:
        open_files_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if open_files_limit == resource.RLIM_INFINITY:
        return MAX_KEPT_FILES
    return max(0, min(MAX_KEPT_FILES, open_files_limit // 4))


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft open-files limit to the hard one, as Go programs do at start (a
    container often gets a soft 1,024 under a hard 524,288); (before, after). The limit
    is left as it is where it cannot be raised."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError):  # a hard limit past the kernel's nr_open
            return soft, soft
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class KeptFiles:
    """Attribute files kept open between polls and re-read with ``pread`` from offset 0.

    Opening a sysfs file costs ~10x what re-reading an open one does; sysfs runs the
    attribute's show() again on every read from offset 0, so a kept descriptor gives
    fresh values. A file is opened as ``read_text`` opens it (non-blocking, regular
    files only: a FIFO is refused before it is kept). With ``check_replaced``, a kept
    file that was unlinked or replaced (``st_nlink`` 0: fixture trees replace files) is
    reopened; sysfs never replaces a file (its node goes with its device), so on a sysfs
    mount (``is_sysfs_mount``) that ``fstat``, half the cost of a kept read, is left out.
    A file whose device is gone (sysfs answers ENODEV) reads as absent and is closed; one
    whose attribute fails to read (EIO, EINVAL) is reported and stays kept. Files not read
    since the last ``sweep()`` are closed then, so a device that disappears takes its
    descriptors with it. At most ``max_open`` files are kept (``kept_files_budget()``
    by default); files past it are opened per read. Not thread-safe: one collector owns
    it, and the runner never runs two calls of one collector at once.
    """

    def __init__(self, *, max_open: int | None = None, check_replaced: bool = True) -> None:
        self._max_open = kept_files_budget() if max_open is None else max_open
        self._check_replaced = check_replaced
        self._fds: dict[str, int] = {}
        self._read_paths: set[str] = set()
        # Raw descriptors have no file object's finalizer: an owner dropped without
        # close() (a collector a test made) kept them open for the process's life.
        weakref.finalize(self, _close_all, self._fds)

    @classmethod
    def under(cls, root: Path | str) -> KeptFiles:
        """Kept files of the tree at ``root``: unchecked for replacement where it is
        sysfs (``is_sysfs_tree``), checked anywhere else (fixture trees)."""
        return cls(check_replaced=not is_sysfs_tree(root))

    def __len__(self) -> int:
        return len(self._fds)

    def read_text(self, path: str) -> str | None:
        """What module-level ``read_text`` gives for ``path``, through a kept descriptor."""
        data = self._read(path)
        return None if data is None else _attribute_text(data, path)

    def read_int(self, path: str, *, base: int = 10, unsigned: bool = False) -> int | None:
        """What module-level ``read_int`` gives for ``path``, through a kept descriptor."""
        data = self._read(path)
        return None if data is None else _int_of(data, path, base=base, unsigned=unsigned)

    def read_counters(self, paths: Iterable[str]) -> list[int | CollectorError | None]:
        """``read_int(path, unsigned=True)`` of each of ``paths``: its value, None where
        it is absent, or the error it raised (the files after it are read still). One
        call for a device's counters, hundreds of files a poll: a kept file is read here
        without read_int's calls between; the rest as read_int reads them."""
        values: list[int | CollectorError | None] = []
        fds, read_paths, check = self._fds, self._read_paths, self._check_replaced
        for path in paths:
            fd = fds.get(path)
            try:
                if fd is None or (check and os.fstat(fd).st_nlink == 0):
                    data = self._read(path)  # opened, or replaced: reopened
                else:
                    read_paths.add(path)
                    data = os.pread(fd, _PAGE_READ, 0)
                    # The hot path: a counter, whole in one read (_int_of, inlined).
                    digits = data.rstrip(b"\n")
                    if len(digits) <= _COUNTER_DIGITS and digits.isdigit():
                        value = int(digits)
                        if value <= MAX_COUNTER:
                            values.append(value)
                            continue
                    if len(data) >= _PAGE_READ:
                        data = _read_whole(fd)  # more than a counter: read it all
                values.append(None if data is None else _int_of(data, path, unsigned=True))
            except OSError as error:  # from the kept file's fstat or read
                values.append(self._failed_kept(path, error))
            except CollectorError as error:
                values.append(error)
        return values

    def _read(self, path: str) -> bytes | None:
        self._read_paths.add(path)
        fd = self._fds.get(path)
        if fd is not None:
            # The hot path: one pread (and, on fixture trees, one fstat) a kept file.
            try:
                if not self._check_replaced or os.fstat(fd).st_nlink > 0:
                    return _read_whole(fd)
            except OSError as error:
                failed = self._failed_kept(path, error)
                if failed is not None:
                    raise failed from error
                return None
            self._forget(path)  # replaced or unlinked (fixture trees): reopen below
        fd = _open_attribute(path)
        if fd is None:
            return None
        keep = len(self._fds) < self._max_open
        try:
            data = _read_whole(fd)
        except OSError as error:
            if keep and not _is_gone(error):
                self._fds[path] = fd  # as above: kept for the next poll's read
            else:
                os.close(fd)
            _raise_unless_gone(error, path)
            return None
        if keep:
            self._fds[path] = fd
        else:
            os.close(fd)  # past max_open: opened for this read only
        return data

    def _failed_kept(self, path: str, error: OSError) -> UnreadableFile | None:
        """What a kept file's failed read means: None where its device is gone (the
        descriptor is closed with it), else the error naming ``path``. Where only the
        attribute's show() failed (EIO, EINVAL from a down port's rate), the file stays
        kept for the next poll's read: reopening would only fail the same way, at ten
        times the cost."""
        failed = _unreadable(error, path)
        if failed is None:
            self._forget(path)
        return failed

    def forget(self, paths: Iterable[str]) -> None:
        """Close the files kept at ``paths``: a kept descriptor follows its kernfs node,
        so where a path may now name another device (a netdev renamed, its name taken
        by another), the next read must open the path again."""
        for path in paths:
            if path in self._fds:
                self._forget(path)

    def sweep(self) -> None:
        """Close the files not read since the last sweep (their devices are gone)."""
        for path in [p for p in self._fds if p not in self._read_paths]:
            self._forget(path)
        self._read_paths.clear()

    def close(self) -> None:
        """Close every kept file."""
        for path in list(self._fds):
            self._forget(path)
        self._read_paths.clear()

    def _forget(self, path: str) -> None:
        os.close(self._fds.pop(path))


def _close_all(fds: dict[str, int]) -> None:
    """Close what a dropped ``KeptFiles`` still kept (nothing, after its close())."""
    for fd in fds.values():
        os.close(fd)
    fds.clear()


_MOUNTINFO = "/proc/self/mountinfo"
_MOUNTINFO_ESCAPE = re.compile(r"\\([0-7]{3})")


def is_sysfs_tree(root: Path | str, *, mountinfo: str | None = None) -> bool:
    """Whether ``root`` is a sysfs tree: a sysfs mount itself, or a folder holding one at
    ``devices/``, as the DaemonSet mounts the node's ``devices``, ``bus`` and ``class``
    under ``/host/sys`` (every attribute the collectors read resolves under
    ``devices/``)."""
    if mountinfo is None:
        mountinfo = _read_mountinfo()
    return is_sysfs_mount(root, mountinfo=mountinfo) or is_sysfs_mount(
        os.path.join(root, "devices"), mountinfo=mountinfo
    )


def _read_mountinfo() -> str:
    """This process's mount table; "" where it cannot be read (nothing is then sysfs)."""
    try:
        with open(_MOUNTINFO, encoding="utf-8", errors="replace") as file:
            return file.read()
    except OSError:
        return ""


def is_sysfs_mount(path: Path | str, *, mountinfo: str | None = None) -> bool:
    """Whether ``path`` lies on a sysfs mount, by the mount table of this process
    (``/proc/self/mountinfo``: the exporter's own mounts, whatever ``--path.procfs``
    names) or the ``mountinfo`` text given. False when the table cannot be read: the
    careful answer."""
    if mountinfo is None:
        mountinfo = _read_mountinfo()
    target = os.path.realpath(path)
    best, fstype = "", ""
    for line in mountinfo.splitlines():
        # ID parent major:minor root mount-point options [optional...] - fstype source ...
        fields = line.split(" ")
        separator = fields.index("-", 6) if "-" in fields[6:] else len(fields)
        if separator + 1 >= len(fields):
            continue  # not a mountinfo line: no fstype after the separator
        point = _MOUNTINFO_ESCAPE.sub(lambda m: chr(int(m[1], 8)), fields[4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        # The longest mount point holding the path; a later mount on it shadows earlier.
        if inside and len(point) >= len(best):
            best, fstype = point, fields[separator + 1]
    return fstype == "sysfs"


def parse_boot_time(text: bytes) -> float:
    """The ``btime`` line of ``/proc/stat``: seconds since the epoch; ValueError if none
    or not the kernel's one unsigned integer."""
    for line in text.splitlines():
        if line.startswith(b"btime "):
            fields = line.split()
            # float() alone would take "nan", "1e9" or "1_7": a boot time nothing could use.
            if len(fields) != 2 or not fields[1].isdigit() or len(fields[1]) > 20:
                raise ValueError(f"btime is not an unsigned integer: {line[:40]!r}")
            return float(fields[1])
    raise ValueError("no btime line")


def parse_cpulist(text: str) -> tuple[int, ...]:
    """The CPUs of a kernel cpulist such as ``"0-3,8,10-11"``, sorted; ``""`` gives ().

    Raises ValueError on anything the kernel would not print, CPUs beyond ``MAX_CPUS``
    or more than ``MAX_CPUS`` listed in all included.
    """
    text = text.strip()
    if not text:
        return ()  # a node with memory but no CPUs prints an empty line
    cpus: set[int] = set()
    listed = 0
    for part in text.split(","):
        match = _RANGE.match(part)
        if match is None:
            raise ValueError(f"not a cpulist range: {part[:40]!r}")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise ValueError(f"descending cpulist range: {part!r}")
        if last >= MAX_CPUS:
            raise ValueError(f"CPU {last} beyond {MAX_CPUS} CPUs")
        # The kernel prints disjoint ranges, so a list naming more than MAX_CPUS in all
        # is garbage: refused before thousands of repeated full ranges get expanded.
        listed += last - first + 1
        if listed > MAX_CPUS:
            raise ValueError(f"more than {MAX_CPUS} CPUs listed")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def node_dirs(sysfs: Path) -> tuple[tuple[int, Path], ...]:
    """``(node id, directory)`` of every NUMA node in sysfs, by id; () without NUMA.

    Raises CollectorError when the node directory exists but cannot be listed.
    """
    root = sysfs / "devices" / "system" / "node"
    try:
        names = [entry.name for entry in root.iterdir()]
    except (FileNotFoundError, NotADirectoryError):
        return ()
    except OSError as error:
        raise CollectorError(f"cannot list {root}: {error.strerror or error}") from error
    found = []
    for name in names:
        match = _NODE_DIR.match(name)
        if match is not None:
            found.append((int(match.group(1)), root / name))
    return tuple(sorted(found))


def file_issue(error: CollectorError) -> CollectorIssue:
    """The issue a collector reports for a failed read: a ``FileError`` says its label;
    anything else is unreadable when an OS error caused it, else garbage."""
    if isinstance(error, FileError):
        label = error.label
    else:
        label = UNREADABLE if isinstance(error.__cause__, OSError) else GARBAGE
    return CollectorIssue(error=label, detail=str(error))


def list_source(directory: Path, *, absent: str) -> list[str]:
    """The sorted entries of a collector's source directory (``class/net``...).

    Raises CollectorUnavailable with ``absent`` when the directory does not exist (the
    subsystem is not on this node) and CollectorError when it cannot be listed.
    """
    try:
        return sorted(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError) as error:
        raise CollectorUnavailable(absent) from error
    except OSError as error:
        raise CollectorError(f"cannot list {directory}: {error.strerror or error}") from error


def list_source_inodes(directory: str, *, absent: str) -> list[tuple[str, int]]:
    """``(name, inode)`` of each entry of a source directory, sorted by name.

    The inode comes with the listing at no extra cost; sysfs gives a re-created device
    (same name, new kernel object) a new one, so it tells a cached entry still stands.
    Raises like ``list_source``.
    """
    try:
        with os.scandir(directory) as entries:
            return sorted((entry.name, entry.inode()) for entry in entries)
    except (FileNotFoundError, NotADirectoryError) as error:
        raise CollectorUnavailable(absent) from error
    except OSError as error:
        raise CollectorError(f"cannot list {directory}: {error.strerror or error}") from error
