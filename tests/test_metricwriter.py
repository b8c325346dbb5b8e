"""Our exposition writer against prometheus_client's own writers, parsers and promtool."""

from __future__ import annotations

import ast
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import exposition as text_format
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.openmetrics import exposition as openmetrics_format
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as _parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from exporter.metricwriter import (
    OPENMETRICS_EOF,
    PrefixCache,
    Rows,
    format_value,
    join_families,
    write_family,
)

PROMTOOL = shutil.which("promtool")

# prometheus_client leaves these unannotated; these names give them their types.
parse_openmetrics: Callable[[str], Iterable[Metric]] = _parse_openmetrics
_generate_openmetrics: Callable[[Collector], bytes] = openmetrics_format.generate_latest
_float_to_go: Callable[[float], str] = floatToGoString

# Label values that need escaping or are easy to get wrong.
HOSTILE = (
    'say "hi"',
    "back\\slash",
    "trailing\\",
    "new\nline",
    "ünïcødé ✓ 日本語 🚀",
    "",
    "comma,and=equals}{",
    '\\"\n\\n',
)
VALUES = (0, 1, -3, 1.5, 999_999, 1_000_000, 85_899_345_920, 1e21, 1e-7, float("inf"), -0.0)


def _families() -> list[tuple[Metric, Rows]]:
    """Each family the usual prometheus_client way and as our Rows, with the same samples:
    gauges and counters with hostile label values, one without labels, one empty."""
    gauge = GaugeMetricFamily(
        "test_temperature_celsius", 'A gauge "quoted" help\\ with\nnewline.', labels=["a", "b"]
    )
    gauge_rows = Rows(gauge.name, "gauge", gauge.documentation, ("a", "b"), [])
    for index, value in enumerate(HOSTILE):
        gauge.add_metric([value, str(index)], VALUES[index % len(VALUES)])
        gauge_rows.add((value, str(index)), VALUES[index % len(VALUES)])
    counter = CounterMetricFamily("test_events", "Events.", labels=["kind"])
    counter_rows = Rows("test_events", "counter", "Events.", ("kind",), [])
    for index, value in enumerate(HOSTILE):
        counter.add_metric([value], index * 1.25)
        counter_rows.add((value,), index * 1.25)
    plain = GaugeMetricFamily("test_plain", "No labels.", value=42)
    plain_rows = Rows("test_plain", "gauge", "No labels.", (), [((), 42)])
    empty = GaugeMetricFamily("test_empty", "No samples at all.", labels=["a"])
    empty_rows = Rows("test_empty", "gauge", "No samples at all.", ("a",), [])
    return [(gauge, gauge_rows), (counter, counter_rows), (plain, plain_rows), (empty, empty_rows)]


def _rows() -> list[Rows]:
    return [rows for _, rows in _families()]


ROOT = Path(__file__).resolve().parent.parent


class _Registry(Collector):
    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


def _ours(families: Iterable[Rows], *, openmetrics: bool) -> str:
    cache: PrefixCache = {}
    written = [write_family(f, cache=cache) for f in families]
    return join_families(written, openmetrics=openmetrics) + (
        OPENMETRICS_EOF if openmetrics else ""
    )


def _theirs(families: Iterable[Metric], *, openmetrics: bool) -> str:
    registry = _Registry(families)
    if openmetrics:
        return _generate_openmetrics(registry).decode()
    return text_format.generate_latest(registry).decode()


def promtool_problems(page: str, *, openmetrics: bool) -> list[str]:
    """What ``promtool check metrics`` says of ``page``, one problem a line.

    promtool reads only the text format: on an OpenMetrics page it finds each counter's
    ``_total`` samples without the HELP that OpenMetrics gives the family under its bare
    name. Those lines, and only those, are not problems; a parse error always is.
    """
    assert PROMTOOL is not None
    result = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=page.encode(), capture_output=True, timeout=60
    )
    if result.returncode not in (0, 3):  # 3: lint findings; anything else: did not parse
        return [result.stderr.decode() or f"promtool exited {result.returncode}"]
    counters = {
        line.split()[2]
        for line in page.splitlines()
        if line.startswith("# TYPE ") and line.endswith(" counter")
    }
    return [
        line
        for line in result.stderr.decode().splitlines()
        if not (
            openmetrics
            and line.endswith("_total no help text")
            and line.split("_total ")[0] in counters
        )
    ]


class TestSameBytesAsPrometheusClient:
    @pytest.mark.parametrize("openmetrics", [False, True], ids=["text", "openmetrics"])
    def test_gauges_and_counters_with_hostile_labels(self, openmetrics: bool) -> None:
        """Byte for byte what prometheus_client writes for the same families, both formats."""
        families = _families()
        assert _theirs([m for m, _ in families], openmetrics=openmetrics) == _ours(
            [r for _, r in families], openmetrics=openmetrics
        )

    def test_names_outside_the_legacy_character_set_are_refused(self) -> None:
        """A colon (or any name prometheus_client would rewrite) is a ValueError, not
        a page that differs between the formats."""
        with pytest.raises(ValueError, match="legacy character set"):
            write_family(Rows("test:recorded", "gauge", "A colon.", (), []), cache={})
        with pytest.raises(ValueError, match="legacy character set"):
            write_family(Rows("test_ok", "gauge", "A bad label.", ("a-b",), []), cache={})

    def test_values_print_as_go_does(self) -> None:
        """Every value as prometheus_client's floatToGoString prints it."""
        values = (*VALUES, 2**53, -(2**60), 123456.0, 1234567.0, 123456.5, 1234567.25)
        values += (float("-inf"), float("nan"), 1e16, 1.5e16, -1234567.5, 5e-324, True)
        assert [_float_to_go(v) for v in values] == [format_value(v) for v in values]


class TestOfficialParsers:
    def test_text_round_trips_hostile_label_values(self) -> None:
        """The text parser reads back every label value as it was given."""
        parsed = {f.name: f for f in parse_text(_ours(_rows(), openmetrics=False))}
        values = [s.labels["a"] for s in parsed["test_temperature_celsius"].samples]
        assert list(HOSTILE) == values

    def test_openmetrics_round_trips_hostile_label_values(self) -> None:
        """The strict OpenMetrics parser reads back every label value as it was given."""
        parsed = {f.name: f for f in parse_openmetrics(_ours(_rows(), openmetrics=True))}
        values = [s.labels["kind"] for s in parsed["test_events"].samples]
        assert list(HOSTILE) == values

    @pytest.mark.skipif(PROMTOOL is None, reason="promtool not found: apt-get install prometheus")
    @pytest.mark.parametrize("openmetrics", [False, True], ids=["text", "openmetrics"])
    def test_promtool_accepts_both_formats(self, openmetrics: bool) -> None:
        """`promtool check metrics` passes on the output."""
        families = _rows()
        if openmetrics:
            # promtool reads OpenMetrics with the text parser, which rejects the \" that
            # OpenMetrics (only) escapes in HELP; our pages have none (the test below).
            families = [
                replace(f, documentation=f.documentation.replace('"', "'")) for f in families
            ]
        page = _ours(families, openmetrics=openmetrics)
        assert [] == promtool_problems(page, openmetrics=openmetrics)

    def test_no_help_of_ours_has_a_quote_or_backslash(self) -> None:
        """What the test above assumes, for every family in the source (the demo shows
        today's, a new one may not be in it): a quote in HELP is escaped in OpenMetrics
        only, which promtool rejects; a backslash would be escaped differently by the two
        formats' readers."""
        helps = _help_texts(ROOT / "exporter")
        where = {w.split(":")[0] for w, _ in helps}
        # The scan finds the families of each module that makes them.
        assert {"exposition.py", "selfmetrics.py", "process_metrics.py", "netdev.py"} <= where
        assert len(helps) > 60
        assert [] == [(w, h) for w, h in helps if '"' in h or "\\" in h]


def _help_texts(package: Path) -> list[tuple[str, str]]:
    """Every HELP text written in ``package``, with where: a string constant passed as a
    ``documentation`` parameter (or field) of any of its functions and classes, or as
    ``MetricSpec``'s ``help``, by position or keyword, and the second of a constant
    (family name, HELP) pair."""
    trees = [(path, ast.parse(path.read_text(), str(path))) for path in package.rglob("*.py")]
    position: dict[str, int] = {"MetricSpec": 2}  # MetricSpec(name, kind, help, ...)
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                names = [a.arg for a in node.args.args if a.arg not in ("self", "cls")]
            elif isinstance(node, ast.ClassDef):
                names = [
                    s.target.id
                    for s in node.body
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                ]
            else:
                continue
            if "documentation" in names:
                position[node.name] = names.index("documentation")
    keyword = {name: "help" if name == "MetricSpec" else "documentation" for name in position}
    found: list[tuple[str, str]] = []
    for path, tree in trees:
        for node in ast.walk(tree):
            texts: list[ast.expr] = []
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", getattr(node.func, "attr", ""))
                at = position.get(name)
                if at is not None and len(node.args) > at:
                    texts.append(node.args[at])
                texts += [k.value for k in node.keywords if k.arg == keyword.get(name)]
            elif isinstance(node, ast.Tuple) and len(node.elts) == 2:
                family = node.elts[0]
                if isinstance(family, ast.Constant) and str(family.value).startswith(
                    "podresources_"
                ):
                    texts.append(node.elts[1])
            found += [
                (f"{path.name}:{t.lineno}", t.value)
                for t in texts
                if isinstance(t, ast.Constant) and isinstance(t.value, str)
            ]
    return found


class TestNamesThatAreNotUTF8:
    # A netdev named b"eth\xe9" as Python lists it, and a lone surrogate no byte stands for.
    NAMES = ("eth\udce9", "x\ud800y")

    def _page(self, *, openmetrics: bool) -> str:
        rows = Rows("test_bytes", "counter", "Bytes.", ("interface",), [])
        for name in self.NAMES:
            rows.add((name,), 1)
        return join_families([write_family(rows, cache={})], openmetrics=openmetrics)

    @pytest.mark.parametrize("openmetrics", [False, True], ids=["text", "openmetrics"])
    def test_each_byte_is_written_as_an_escape(self, openmetrics: bool) -> None:
        """The page encodes (one such name used to fail every scrape), and the official
        parsers read the name back with the byte as the kernel's tools show it."""
        page = self._page(openmetrics=openmetrics).encode()
        parse = parse_openmetrics if openmetrics else parse_text
        samples = next(iter(parse(page.decode()))).samples
        assert [s.labels["interface"] for s in samples] == ["eth\\xe9", "x\\xed\\xa0\\x80y"]

    @pytest.mark.skipif(PROMTOOL is None, reason="promtool not found: apt-get install prometheus")
    def test_promtool_accepts_the_page(self) -> None:
        assert [] == promtool_problems(self._page(openmetrics=False), openmetrics=False)


class TestPrefixCache:
    def test_a_warm_cache_writes_the_same_bytes_and_keeps_only_what_was_used(self) -> None:
        """Re-using prefixes changes nothing written; labels sets gone drop out."""
        first: PrefixCache = {}
        name = "test_temperature_celsius"
        write_family(
            Rows(name, "gauge", "Help.", ("a",), [(("gone",), 1), (('st"ays',), 2)]), cache=first
        )
        later = Rows(name, "gauge", "Help.", ("a",), [(('st"ays',), 3)])
        second: PrefixCache = {}
        warm = write_family(later, cache=second, previous=first)
        cold = write_family(later, cache={})
        assert (cold, [(name, ('st"ays',))]) == (warm, list(second))

    def test_a_prefix_found_in_previous_is_used_as_it_is(self) -> None:
        """A row whose prefix the last poll made takes that very string (not made and
        escaped again), and the cache keeps it for the next poll."""
        key = ("test_temperature_celsius", ("x",))
        previous: PrefixCache = {key: "kept_prefix"}
        cache: PrefixCache = {}
        rows = Rows("test_temperature_celsius", "gauge", "Help.", ("a",), [(("x",), 1)])
        written = write_family(rows, cache=cache, previous=previous)
        assert ("kept_prefix 1.0\n", {key: "kept_prefix"}) == (written.body, cache)
