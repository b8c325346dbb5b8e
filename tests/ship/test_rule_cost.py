"""bench/rule_cost.py at its smoke size: a real Prometheus over two nodes' hours, the
shipped rules' records backfilled, sees each fault the fleet is given fire its alert.

The figures are the bench's to print (docs/benchmarks.md, "Rules that remember a day");
this checks that it runs, measures the rules it should, and reads what it writes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "rule_cost.py"
RULES = REPO / "alerts" / "podresources-exporter.rules.yml"


def test_the_smoke_fleet_fires_one_alert_a_fault(
    prometheus: str, promtool: str, tmp_path: Path
) -> None:
    """One GPU's lost link, one port down and one slowed: one series each of the three
    alerts that remember a day, and none of the other alerts reading those series."""
    path = os.pathsep.join([str(Path(prometheus).parent), str(Path(promtool).parent)])
    done = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--work", str(tmp_path), str(RULES)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PATH": f"{path}{os.pathsep}{os.environ['PATH']}"},
    )
    assert 0 == done.returncode, done.stdout + done.stderr
    found = dict(re.findall(r"^(Podresources\w+): ([0-9]+) series$", done.stdout, re.MULTILINE))
    assert {
        "PodresourcesGPUFabricNotReady": "0",
        "PodresourcesGPUNVLinkDown": "1",
        "PodresourcesInfinibandDeviceGone": "0",
        "PodresourcesInfinibandLinkDegraded": "1",
        "PodresourcesInfinibandPortDown": "1",
    } == found
    records = re.findall(r"^  ([a-z_]+:[a-z_]+:[a-z_]+) ", done.stdout, re.MULTILINE)
    assert 3 == len(records), done.stdout
