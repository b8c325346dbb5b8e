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


async def test_demo_exposition_matches_golden(sim_node: SimulatedNode) -> None:
    """Every stable series of the demo at tick 0, labels and values, is as recorded."""
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
    actual = _stable_lines(exposition.text.decode())
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(actual)
    assert GOLDEN.read_text() == actual, "exposition changed: UPDATE_GOLDEN=1 make unit, review"
