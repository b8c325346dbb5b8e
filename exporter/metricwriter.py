"""Our own writer of the Prometheus text and OpenMetrics formats; pure, no I/O.

prometheus_client escapes every label name and value of every sample on every call
(several microseconds a sample); here a sample's ``name{labels}`` prefix is escaped
once and looked up by its raw label values afterwards, so a poll pays only for its
values. The output is byte for byte what ``prometheus_client`` writes for the same
gauge, counter or histogram family (the tests hold it to that, and to the official
parsers and ``promtool``), but for label values UTF-8 cannot encode, on which
prometheus_client fails (``_utf8_text``). It covers what the exporter writes: no timestamps,
exemplars, units, nor names outside the legacy character set (refused).

The sample lines of a family are the same in both formats; only the HELP/TYPE header
and the closing ``# EOF`` differ. So a family is rendered once to a ``FamilyText`` and
joined per format only when a scraper asks for that format.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "OPENMETRICS_EOF",
    "FamilyText",
    "PrefixCache",
    "Rows",
    "counter",
    "format_value",
    "gauge",
    "join_families",
    "label_prefix",
    "sample_line",
    "write_family",
]

OPENMETRICS_EOF = "# EOF\n"

# Legacy names without ':' -- prometheus_client's OpenMetrics writer rewrites ':' in
# sample names to '_', its text writer keeps it; the exporter's names have none.
_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_INF = float("inf")

PrefixCache = dict[Hashable, str]


def _escape_value(value: str) -> str:
    if not value.isascii():
        value = _utf8_text(value)
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _utf8_text(value: str) -> str:
    """``value``, with what UTF-8 cannot encode shown as escapes.

    Names read from the kernel are bytes: a netdev may be named with any byte but '/',
    ':' and whitespace, and Python hands a name that is not UTF-8 over with surrogates
    standing for its bytes (``'eth\\udce9'`` for ``b'eth\\xe9'``). Such a value cannot be
    encoded, so one of them would fail the whole page; Prometheus would refuse invalid
    UTF-8 anyway. Each such byte is written as ``\\xe9``, as the kernel's tools show it.
    """
    try:
        value.encode()
    except UnicodeEncodeError:
        try:
            raw = value.encode(errors="surrogateescape")  # the bytes the name came from
        except UnicodeEncodeError:  # a lone surrogate no byte stands for
            raw = value.encode(errors="surrogatepass")
        return raw.decode(errors="backslashreplace")
    return value


def label_prefix(name: str, labels: Iterable[tuple[str, str]]) -> str:
    """``name{a="x",b="y"}`` with labels sorted by name, as both formats want it."""
    pairs = sorted(labels)
    if not pairs:
        return name
    inner = ",".join(f'{key}="{_escape_value(value)}"' for key, value in pairs)
    return f"{name}{{{inner}}}"


def format_value(value: float) -> str:
    """A sample value as Go (and so Prometheus) prints it: prometheus_client's
    ``floatToGoString``, with short cuts for the small integers and floats most
    samples are."""
    if type(value) is int and -1_000_000 < value < 1_000_000:
        return f"{value}.0"  # repr(float(value)); from 1e6 up Go switches to exponents
    if type(value) is float:
        text = repr(value)
        if 0 < text.find(".") <= 6:  # Python and Go agree; inf, nan and exponents differ
            return text
    number = float(value)
    if number == _INF:
        return "+Inf"
    if number == -_INF:
        return "-Inf"
    if number != number:
        return "NaN"
    text = repr(number)
    dot = text.find(".")
    if number > 0 and dot > 6:  # Go switches to exponents sooner than Python
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


@dataclass(frozen=True, slots=True)
class FamilyText:
    """One family's header fields and its sample lines, shared by both formats."""

    name: str
    type: str
    documentation: str
    body: str
    samples: int

    def text(self) -> str:
        name, kind = self.name, self.type
        if kind == "counter":
            name += "_total"
        documentation = self.documentation.replace("\\", r"\\").replace("\n", r"\n")
        return f"# HELP {name} {documentation}\n# TYPE {name} {kind}\n{self.body}"

    def openmetrics(self) -> str:
        return (
            f"# HELP {self.name} {_escape_value(self.documentation)}\n"
            f"# TYPE {self.name} {self.type}\n{self.body}"
        )


@dataclass(frozen=True, slots=True)
class Rows:
    """A family built as rows of label values: the fast way for big families.

    ``labels`` name the values of each row, in order; ``sample_name`` defaults to the
    family name (``_total`` appended for counters, as prometheus_client does).
    """

    name: str
    type: str
    documentation: str
    labels: tuple[str, ...]
    rows: list[tuple[tuple[str, ...], float]]

    @property
    def sample_name(self) -> str:
        return self.name + "_total" if self.type == "counter" else self.name

    def add(self, values: Sequence[str], value: float) -> None:
        self.rows.append((tuple(values), value))


def gauge(name: str, documentation: str, labels: Sequence[str]) -> Rows:
    """An empty gauge family with these label names."""
    return Rows(name, "gauge", documentation, tuple(labels), [])


def counter(name: str, documentation: str, labels: Sequence[str]) -> Rows:
    """An empty counter family; its samples are ``<name>_total`` (given with or without it)."""
    return Rows(name.removesuffix("_total"), "counter", documentation, tuple(labels), [])


def sample_line(
    name: str,
    labels: tuple[tuple[str, str], ...],
    value: float,
    *,
    cache: PrefixCache,
    previous: PrefixCache,
) -> str:
    """One sample's line; its escaped prefix is taken from ``previous`` where it is,
    and put in ``cache``."""
    key = (name, labels)
    prefix = previous.get(key)
    if prefix is None:
        prefix = label_prefix(name, labels)
    cache[key] = prefix
    return f"{prefix} {format_value(value)}\n"


def _rows_body(family: Rows, *, cache: PrefixCache, previous: PrefixCache) -> str:
    name = family.sample_name
    labels = family.labels
    lines = []
    for values, value in family.rows:
        key = (name, values)
        prefix = previous.get(key)
        if prefix is None:
            prefix = label_prefix(name, zip(labels, values, strict=True))
        cache[key] = prefix
        lines.append(f"{prefix} {format_value(value)}\n")
    return "".join(lines)


def write_family(
    family: Rows, *, cache: PrefixCache, previous: PrefixCache | None = None
) -> FamilyText:
    """One family's text; prefixes found in ``previous`` are re-used, and every prefix
    used is put in ``cache`` (so a cache holds exactly one poll's series: no growth)."""
    if not _NAME.match(family.name) or not all(_NAME.match(k) for k in family.labels):
        raise ValueError(f"family {family.name!r}: names outside the legacy character set")
    body = _rows_body(family, cache=cache, previous=previous if previous is not None else {})
    return FamilyText(family.name, family.type, family.documentation, body, len(family.rows))


def join_families(families: Iterable[FamilyText], *, openmetrics: bool) -> str:
    """The families in one format, without OpenMetrics' closing ``# EOF``."""
    if openmetrics:
        return "".join(f.openmetrics() for f in families)
    return "".join(f.text() for f in families)
