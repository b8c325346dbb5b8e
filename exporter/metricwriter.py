"""Our own writer of the Prometheus text and OpenMetrics formats; pure, no I/O.

prometheus_client escapes every label name and value of every sample on every call
(several microseconds a sample); here a sample's ``name{labels}`` prefix is escaped
once and looked up by its raw label values afterwards, so a poll pays only for its
values. The output is byte for byte what ``prometheus_client`` writes (the tests hold
it to that, and to the official parsers and ``promtool``): for anything the fast path
does not cover -- timestamps, exemplars, native histograms, names outside the legacy
character set, text-format munging of ``_created``/``_gsum``/``_gcount`` samples, types
other than gauge, counter, histogram and summary -- a family is handed to
``prometheus_client`` whole.

The sample lines of a family are the same in both formats; only the HELP/TYPE header
and the closing ``# EOF`` differ. So a family is rendered once to a ``FamilyText`` and
joined per format only when a scraper asks for that format.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # prometheus_client is imported only for a family that needs it
    from prometheus_client.metrics_core import Metric

__all__ = [
    "OPENMETRICS_EOF",
    "FamilyText",
    "PrefixCache",
    "Rows",
    "format_value",
    "join_families",
    "label_prefix",
    "sample_line",
    "write_family",
]

OPENMETRICS_EOF = "# EOF\n"

# Legacy names without ':' -- prometheus_client's OpenMetrics writer rewrites ':' in
# sample names to '_', its text writer keeps it; such names take the slow path.
_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_FAST_TYPES = frozenset({"gauge", "counter", "histogram", "summary"})
_INF = float("inf")
_TEXT_ONLY_SUFFIXES = ("_created", "_gsum", "_gcount")  # moved to own families in text

PrefixCache = dict[Hashable, str]


def _escape_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


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
    """One family's header fields and its sample lines, shared by both formats.

    ``fallback`` holds prometheus_client's own (text, OpenMetrics) rendering for a
    family the fast path does not cover; ``body`` is then unused.
    """

    name: str
    type: str
    documentation: str
    unit: str
    body: str
    samples: int
    fallback: tuple[str, str] | None = None

    def text(self) -> str:
        if self.fallback is not None:
            return self.fallback[0]
        name, kind = self.name, self.type
        if kind == "counter":
            name += "_total"
        documentation = self.documentation.replace("\\", r"\\").replace("\n", r"\n")
        return f"# HELP {name} {documentation}\n# TYPE {name} {kind}\n{self.body}"

    def openmetrics(self) -> str:
        if self.fallback is not None:
            return self.fallback[1]
        unit = f"# UNIT {self.name} {self.unit}\n" if self.unit else ""
        return (
            f"# HELP {self.name} {_escape_value(self.documentation)}\n"
            f"# TYPE {self.name} {self.type}\n{unit}{self.body}"
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


def _fallback(metric: Metric) -> FamilyText:
    # Imported here: the exporter's own families all take the fast path, so a running
    # exporter never loads prometheus_client (~1 MiB resident, and its own registry).
    from prometheus_client import exposition as text_format
    from prometheus_client.openmetrics import exposition as openmetrics_format
    from prometheus_client.registry import Collector

    class OneFamily(Collector):
        def collect(self) -> Iterable[Metric]:
            return (metric,)

    # prometheus_client leaves its OpenMetrics writer unannotated; this gives it its type.
    generate_openmetrics: Callable[[Collector], bytes] = openmetrics_format.generate_latest
    text = text_format.generate_latest(OneFamily()).decode()
    openmetrics = generate_openmetrics(OneFamily()).decode()
    return FamilyText(
        metric.name,
        metric.type,
        metric.documentation,
        metric.unit,
        "",
        len(metric.samples),
        fallback=(text, openmetrics.removesuffix(OPENMETRICS_EOF)),
    )


def _metric_body(metric: Metric, *, cache: PrefixCache, previous: PrefixCache) -> str | None:
    """Sample lines of a prometheus_client family, or None where it needs the slow path."""
    if metric.type not in _FAST_TYPES or not _NAME.match(metric.name):
        return None
    lines = []
    for sample in metric.samples:
        if (
            sample.timestamp is not None
            or sample.exemplar is not None
            or sample.native_histogram is not None
        ):
            return None
        labels = sample.labels
        key = (sample.name, *labels.items())
        prefix = previous.get(key)
        if prefix is None:
            if not _NAME.match(sample.name) or not all(_NAME.match(k) for k in labels):
                return None
            if sample.name.endswith(_TEXT_ONLY_SUFFIXES):
                return None
            prefix = label_prefix(sample.name, labels.items())
        cache[key] = prefix
        lines.append(f"{prefix} {format_value(sample.value)}\n")
    return "".join(lines)


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
    family: Metric | Rows, *, cache: PrefixCache, previous: PrefixCache | None = None
) -> FamilyText:
    """One family's text; prefixes found in ``previous`` are re-used, and every prefix
    used is put in ``cache`` (so a cache holds exactly one poll's series: no growth)."""
    seen = previous if previous is not None else {}
    if isinstance(family, Rows):
        if not _NAME.match(family.name) or not all(_NAME.match(k) for k in family.labels):
            raise ValueError(f"family {family.name!r}: names outside the legacy character set")
        body = _rows_body(family, cache=cache, previous=seen)
        return FamilyText(
            family.name, family.type, family.documentation, "", body, len(family.rows)
        )
    metric_body = _metric_body(family, cache=cache, previous=seen)
    if metric_body is None:
        return _fallback(family)
    return FamilyText(
        family.name,
        family.type,
        family.documentation,
        family.unit,
        metric_body,
        len(family.samples),
    )


def join_families(families: Iterable[FamilyText], *, openmetrics: bool) -> str:
    """The families in one format, without OpenMetrics' closing ``# EOF``."""
    if openmetrics:
        return "".join(f.openmetrics() for f in families)
    return "".join(f.text() for f in families)
