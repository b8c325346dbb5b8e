"""Bounded, defensive readers for sysfs/procfs files, shared by the collectors.

Missing optional files give None; anything else unreadable raises CollectorError
naming the path. Reads are capped: some drivers expose huge or endless attributes.
"""

from __future__ import annotations

from pathlib import Path

from exporter.collectors.base import CollectorError

__all__ = ["MAX_ATTRIBUTE_BYTES", "read_int", "read_text"]

MAX_ATTRIBUTE_BYTES = 64 * 1024


def read_text(path: Path) -> str | None:
    """The stripped contents of a small attribute file, or None when it does not exist."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_ATTRIBUTE_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise CollectorError(f"cannot read {path}: {error.strerror or error}") from error
    return data.decode("utf-8", errors="replace").strip()


def read_int(path: Path, *, base: int = 10) -> int | None:
    """An integer attribute, or None when the file does not exist.

    Garbage contents raise CollectorError with the path.
    """
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text, base)
    except ValueError as error:
        raise CollectorError(f"{path}: not an integer: {text[:40]!r}") from error
