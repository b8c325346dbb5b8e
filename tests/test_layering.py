"""Layering rules of issue 10: collectors know nothing of the kubelet, and
``exporter/resolver.py`` is the one module that knows kubelet device ID shapes."""

from __future__ import annotations

import ast
import inspect
import re
import typing
from pathlib import Path

import pytest

from exporter.collectors import registrations
from exporter.collectors.base import Collector, Registration
from exporter.model import Readings

PACKAGE = Path(__file__).resolve().parents[1] / "exporter"
RESOLVER = PACKAGE / "resolver.py"
GENERATED = PACKAGE / "kubelet" / "api"

# Markers of ID-shape parsing, searched in each string constant of the code. Each matches
# a *shape* -- a bare prefix or separator as given to startswith/split/partition, or a
# regex built around one -- never a concrete value: "GPU-" and r"^MIG-(GPU-[0-9a-f-]+)"
# match, a UUID "GPU-8f3c..." or a DRA device name "gpu-0" in simulated data does not.
_PATTERN_TAIL = r"(?:$|[\[\\(.])"  # end of the constant, or where a regex takes over
SHAPE_MARKERS: dict[str, re.Pattern[str]] = {
    "NVIDIA GPU UUID prefix": re.compile(rf"(?:^|[\^(])GPU-{_PATTERN_TAIL}"),
    "NVIDIA MIG prefix": re.compile(rf"(?:^|[\^(])MIG-(?:GPU-|{_PATTERN_TAIL})"),
    "replica separator": re.compile(r"::"),
    "GKE nvidiaN": re.compile(r"nvidia\(?(?:\\d|\[0-9)"),
    "Intel cardN-M": re.compile(r"card(?:\\d\+?|\[0-9\]\+?|\((?:\\d|\[0-9\])\+\))(?:\(\?:|\()?-"),
    "DRA gpu-<n> name": re.compile(rf"(?:^|[\^(])gpu-{_PATTERN_TAIL}|-mig-"),
}


def _collector_class(registration: Registration) -> type[Collector]:
    """The class a registration's factory builds: the factory itself, or its return type."""
    factory = registration.factory
    if isinstance(factory, type):
        return factory
    built = typing.get_type_hints(factory)["return"]
    assert isinstance(built, type), f"{registration.name}: factory has no class return type"
    return built


def _collect_parameters(registration: Registration) -> list[str]:
    return list(inspect.signature(_collector_class(registration).collect).parameters)


class TestCollectorsTakeNoInput:
    def test_collect_takes_only_self(self) -> None:
        """collect() of every registered collector takes nothing but self: a collector
        reads hardware, never kubelet IDs."""
        taking_input = {
            r.name: params
            for r in registrations()
            if (params := _collect_parameters(r)) != ["self"]
        }

        assert {} == taking_input

    def test_check_sees_parameters(self) -> None:
        """The check notices a collect() that takes device IDs, as the old contract did."""

        class _OldStyle(Collector):
            name = "old"

            def collect(self, *, device_ids: frozenset[str]) -> Readings:  # type: ignore[override]
                return Readings()

        old = Registration("old", "the contract before issue 10", _OldStyle)

        assert ["self", "device_ids"] == _collect_parameters(old)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (text for readers, not code)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _f_string_parts(tree: ast.AST) -> set[int]:
    """ids of the literal parts of f-strings: they build an ID, they cannot read one."""
    return {
        id(part)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        for part in node.values
        if isinstance(part, ast.Constant)
    }


def shape_markers(source: str) -> list[tuple[int, str, str]]:
    """(line, marker, constant) for each string constant of code that names an ID shape."""
    tree = ast.parse(source)
    skipped = _docstrings(tree) | _f_string_parts(tree)
    return [
        (node.lineno, marker, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if id(node) not in skipped
        for marker, pattern in SHAPE_MARKERS.items()
        if pattern.search(node.value)
    ]


class TestOnlyTheResolverKnowsIdShapes:
    def test_no_module_but_the_resolver_parses_id_shapes(self) -> None:
        """No module under exporter/ except resolver.py (and generated gRPC code) holds a
        string constant that names a kubelet ID shape.

        The rule: an ID shape (``GPU-``/``MIG-`` prefixes, ``::`` replicas, GKE
        ``nvidiaN``, Intel ``cardN-M``, NVIDIA DRA ``gpu-N[-mig-...]``) is parsed with a
        bare prefix or separator, or a regex around one; each is a string constant.
        Docstrings may describe shapes, f-string parts may build IDs (the simulated
        kubelet does), and concrete values (a UUID, "gpu-0") are data: none is checked.
        Reading a UUID from NVML is no parsing either. A new shape belongs in resolver.py.
        """
        found = [
            f"{path.relative_to(PACKAGE.parent)}:{line}: {marker}: {value!r}"
            for path in sorted(PACKAGE.rglob("*.py"))
            if path != RESOLVER and GENERATED not in path.parents
            for line, marker, value in shape_markers(path.read_text(encoding="utf-8"))
        ]

        assert [] == found

    def test_resolver_is_seen_parsing(self) -> None:
        """The markers find every shape the resolver knows, so they are not blind."""
        found = {marker for _, marker, _ in shape_markers(RESOLVER.read_text(encoding="utf-8"))}

        # Device-plugin shapes; DRA names are checked by the markers' own cases below.
        expected = set(SHAPE_MARKERS) - {"DRA gpu-<n> name"}
        assert expected <= found

    @pytest.mark.parametrize(
        ("code", "expected"),
        [
            ('ok = device_id.startswith("GPU-")', ["NVIDIA GPU UUID prefix"]),
            (
                'MIG = re.compile(r"^MIG-(GPU-[0-9a-f-]+)/(\\d+)/(\\d+)$")',
                ["NVIDIA GPU UUID prefix", "NVIDIA MIG prefix"],
            ),
            ('head, _, n = device_id.rpartition("::")', ["replica separator"]),
            ('GKE = re.compile(r"^nvidia(\\d+)(?:/(gi|vgpu)(\\d+))?$")', ["GKE nvidiaN"]),
            ('CARD = re.compile(r"^card(\\d+)(?:-\\d+)?$")', ["Intel cardN-M"]),
            ('GKE = re.compile(r"^nvidia([0-9]+)$")', ["GKE nvidiaN"]),
            ('CARD = re.compile(r"^card([0-9]+)(?:-[0-9]+)?$")', ["Intel cardN-M"]),
            ('DRA = re.compile(r"^gpu-(\\d+)-mig-")', ["DRA gpu-<n> name"]),
            ('uuid = "GPU-8f3c2a10-5e1f-4c2a-9d3b-000000000100"', []),
            ('name = f"{uuid}::{n}"', []),
            ('device = "gpu-0"', []),
            ('CARD = re.compile(r"^card(\\d+)$")', []),  # a sysfs DRM name, not a kubelet ID
            ('resource = "nvidia.com/gpu"; vendor = "nvidia"', []),
            ('def f():\n    """Reads GPU- and MIG- IDs, nvidia0/gi1 and ``<id>::<n>``."""', []),
        ],
    )
    def test_markers_tell_shapes_from_data(self, code: str, expected: list[str]) -> None:
        """Prefixes, separators and regexes of ID shapes are flagged; values and docs not."""
        assert expected == [marker for _, marker, _ in shape_markers(code)]
