"""The whole /metrics page of the deterministic demo node, compared with a golden file.

Regenerate after an intended change with ``UPDATE_GOLDEN=1 make unit`` and review the
diff: it is exactly what dashboards and alerts will see change.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from exporter.app import Exporter, demo_collectors
from exporter.cli import parse_config
from exporter.sim.node import SimulatedNode

GOLDEN = Path(__file__).parent / "golden" / "demo.prom"

# Families whose values depend on timing, the Python build or the process itself.
_VOLATILE = re.compile(
    r"^(# (HELP|TYPE) )?(process_|python_|podresources_exporter_build_info"
    r"|podresources_\w*duration_seconds|podresources_snapshot_timestamp_seconds)"
)


def _stable_lines(text: str) -> str:
    return "".join(line + "\n" for line in text.splitlines() if not _VOLATILE.match(line))


async def _demo_page(sim_node: SimulatedNode) -> str:
    """The demo's whole /metrics page at tick 0, as Prometheus' text format."""
    config = parse_config(
        [
            *sim_node.exporter_flags(),
            "--node-name",
            "demo-node",
            "--collector.gpu_processes",  # as --demo turns it on
        ],
        {},
    )
    exporter = Exporter(config, collectors=demo_collectors(config, sim_node, clock=lambda: 0.0))
    try:
        published = await exporter.poller.poll_once()
        exposition = await exporter.store.exposition(published)
    finally:
        await exporter.close()
    return exposition.text.decode()


async def test_demo_exposition_matches_golden(sim_node: SimulatedNode) -> None:
    """Every stable series of the demo at tick 0, labels and values, is as recorded."""
    actual = _stable_lines(await _demo_page(sim_node))
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(actual)
    assert GOLDEN.read_text() == actual, "exposition changed: UPDATE_GOLDEN=1 make unit, review"


# A family name in README, with `{a,b}` for alternatives and a last `{...}` for labels.
_NAMED = re.compile(r"\b(?:podresources|process|python)_[a-z0-9_]*(?:\{[a-z0-9_,]+\}[a-z0-9_]*)*")


def _readme_families() -> set[str]:
    """Each family README names (``process_*`` and ``python_*`` as those prefixes)."""
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    names: set[str] = set()
    for token in _NAMED.findall(text):
        token = re.sub(r"\{[a-z0-9_,]+\}$", "", token)  # the labels
        parts = re.split(r"\{([a-z0-9_,]+)\}", token)  # text, alternatives, text, ...
        expanded = [""]
        for index, part in enumerate(parts):
            choices = part.split(",") if index % 2 else [part]
            expanded = [done + choice for done in expanded for choice in choices]
        names.update(expanded)
    return names


async def test_every_family_served_is_in_the_readme(sim_node: SimulatedNode) -> None:
    """README names every family the demo serves, and every family
    README names is served by the demo or defined in exporter/ (a GPU before Ampere's
    retired pages, which the demo's H100s do not have): a family added or renamed
    without README fails here."""
    page = await _demo_page(sim_node)
    served = set(re.findall(r"^# TYPE (\S+) ", page, re.MULTILINE))
    named = _readme_families()
    assert {"podresources_kubelet_up", "podresources_gpu_utilization_ratio"} <= served
    # "the standard `process_*` and `python_*`": named by their prefixes.
    standard = tuple(prefix for prefix in ("process_", "python_") if prefix in named)
    undocumented = {f for f in served if f not in named and not f.startswith(standard)}
    assert set() == undocumented
    source = "".join(p.read_text() for p in (GOLDEN.parents[2] / "exporter").rglob("*.py"))
    unknown = {
        name
        for name in named
        if name.startswith("podresources_")
        and not name.endswith("_")
        and name not in served
        and f'"{name}"' not in source
    }
    assert set() == unknown
