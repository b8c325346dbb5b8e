"""Go's ``time.ParseDuration``: the grammar of every duration the exporter reads.

The duration flags (``--poll.interval``, ``--kubelet.timeout``...) are documented as Go
durations, what kingpin's ``Duration`` flags of other exporters take; the web config
file's one duration, ``rate_limit.interval``, is a ``time.Duration`` of
exporter-toolkit's ``RateLimiterConfig`` (web/tls_config.go), which yaml.v2 decodes from
a string with ``time.ParseDuration``. Not Prometheus' ``model.ParseDuration``
(prometheus/common model/time.go: ``d``, ``w`` and ``y`` units, no fraction, no sign):
nothing this exporter reads has that type.

What each adds around the grammar stays with it: a flag also takes a plain number of
seconds and surrounding blanks (exporter.cli), a web config a bare YAML integer of
nanoseconds (exporter.webconfig).

Follows Go's time.ParseDuration (src/time/format.go) step by step, so that a value is
refused exactly where Go refuses it: a sign, then numbers of ASCII digits with an
optional fraction, each with its unit; no blanks; at most 2**63-1 ns (about 292 years).
Python's ``\\d``, ``int()`` and ``float()`` would also take other scripts' digits,
Arabic-Indic ones for a start.
"""

from __future__ import annotations

__all__ = ["MAX_DURATION_NS", "parse_go_duration_ns"]

# time.Duration is int64 nanoseconds.
MAX_DURATION_NS = 2**63 - 1
_LIMIT = 1 << 63
_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek small letter mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}


class _Overflow(Exception):
    """A number past what Go's uint64 arithmetic takes."""


def parse_go_duration_ns(text: str) -> int:
    """Nanoseconds of a Go duration (``1m30s``, ``-1.5h``, ``250ms``, ``0``), computed as
    Go computes them; ValueError with the reason for anything Go refuses."""
    rest, negative = text, False
    if rest[:1] in ("-", "+"):
        rest, negative = rest[1:], rest[0] == "-"
    if rest == "0":
        return 0
    if not rest:
        raise ValueError(f"invalid duration {text!r}")
    total = 0
    while rest:
        if not (rest[0] == "." or _is_digit(rest[0])):
            raise ValueError(f"invalid duration {text!r}")
        try:
            whole, rest, had_whole = _leading_int(rest)
        except _Overflow:
            raise _too_long(text) from None
        fraction, scale, had_fraction = 0, 1.0, False
        if rest[:1] == ".":
            fraction, scale, rest, had_fraction = _leading_fraction(rest[1:])
        if not (had_whole or had_fraction):  # ".s"
            raise ValueError(f"invalid duration {text!r}")
        end = next((i for i, c in enumerate(rest) if c == "." or _is_digit(c)), len(rest))
        if end == 0:
            raise ValueError(f"invalid duration {text!r}: missing unit")
        unit, rest = rest[:end], rest[end:]
        unit_ns = _UNITS_NS.get(unit)
        if unit_ns is None:
            raise ValueError(f"invalid duration {text!r}: unknown unit {unit!r}")
        if whole > _LIMIT // unit_ns:
            raise _too_long(text)
        part = whole * unit_ns
        if fraction > 0:
            # Go's own float arithmetic, truncated: the same nanosecond as Go.
            part += int(float(fraction) * (float(unit_ns) / scale))
        total += part
        if part > _LIMIT or total > _LIMIT:
            raise _too_long(text)
    if negative:
        return -total
    if total > MAX_DURATION_NS:
        raise _too_long(text)
    return total


def _is_digit(char: str) -> bool:
    return "0" <= char <= "9"


def _leading_int(text: str) -> tuple[int, str, bool]:
    """The leading ASCII digits as a number, the rest, and whether there were any."""
    value, end = 0, 0
    while end < len(text) and _is_digit(text[end]):
        value = value * 10 + ord(text[end]) - ord("0")
        if value > _LIMIT:
            raise _Overflow
        end += 1
    return value, text[end:], end > 0


def _leading_fraction(text: str) -> tuple[int, float, str, bool]:
    """The leading ASCII digits as a fraction (value, scale), the rest, and whether there
    were any. Digits past what 63 bits hold are read over, not counted, as Go does."""
    value, scale, end, full = 0, 1.0, 0, False
    while end < len(text) and _is_digit(text[end]):
        if not full:
            longer = value * 10 + ord(text[end]) - ord("0")
            if value > (_LIMIT - 1) // 10 or longer > _LIMIT:
                full = True
            else:
                value, scale = longer, scale * 10
        end += 1
    return value, scale, text[end:], end > 0


def _too_long(text: str) -> ValueError:
    return ValueError(f"invalid duration {text!r}: longer than Go's longest, about 292 years")
