"""bench/: the decode floor reads every field of the kubelet's replies, and the poll
breakdown runs and accounts for the whole poll.

The floor is what issue 11's poll targets are ratios of. With upb, parsing makes no
Python objects: a field the floor leaves unread costs it nothing that the exporter,
which reads them all, pays, and the ratios come out too high (it read a third of the
fields until 2026-11-25). A field the proto gains must be read by the floor too.
``make bench`` is not part of ``make test`` (it prints figures of a shared machine);
``bench/poll_parts.py``, on a small node, runs the same set-up, floor and exporter in
two seconds, so a change that breaks them fails here.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from exporter.kubelet.api.v1 import api_pb2 as v1

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench.py"
POLL_PARTS = BENCH.parent / "poll_parts.py"


def _field_names(message: Any, seen: set[str] | None = None) -> set[str]:
    """The names of every field of ``message`` and of the messages its fields hold."""
    seen = set() if seen is None else seen
    if message.full_name in seen:
        return set()
    seen.add(message.full_name)
    names: set[str] = set()
    for field in message.fields:
        names.add(field.name)
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            names |= _field_names(field.message_type, seen)
    return names


def _attributes_read_by_floor() -> set[str]:
    tree = ast.parse(BENCH.read_text(encoding="utf-8"))
    floor = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name == "_DecodeFloor"
    )
    seconds = next(
        node for node in floor.body if isinstance(node, ast.FunctionDef) and node.name == "seconds"
    )
    return {node.attr for node in ast.walk(seconds) if isinstance(node, ast.Attribute)}


def test_the_floor_reads_every_field_of_both_replies() -> None:
    fields = _field_names(v1.ListPodResourcesResponse.DESCRIPTOR)
    fields |= _field_names(v1.AllocatableResourcesResponse.DESCRIPTOR)
    # The walk itself: the deepest fields of both replies are in it.
    assert {"ID", "share_id", "name", "size", "device_ids"} <= fields
    assert fields - _attributes_read_by_floor() == set()


def _figure(pattern: str, text: str) -> float:
    """The number the one group of ``pattern`` finds in ``text``, which must be there."""
    found = re.search(pattern, text)
    assert found is not None, f"{pattern!r} not in:\n{text}"
    return float(found.group(1))


def test_poll_parts_runs_and_its_threads_add_up_to_the_polls() -> None:
    """Also with one RDMA shared pool: its 1,000 IDs are on the page it renders."""
    done = subprocess.run(
        [sys.executable, str(POLL_PARTS), "--pods", "10", "--polls", "3", "--rdma-pools", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    parts, steady, churn = done.stdout.split("  by thread, ")
    assert _figure(r"poll, process CPU\s+([\d.]+) ms", parts) > 0
    assert _figure(r"floor ([\d.]+) ms", parts) > 0
    for part in ("join", "run_all", "netdev", "cpu", "channel reopened", "channel kept open"):
        assert _figure(rf"{part}[^\n]*?([\d.]+) ms\n", parts) > 0
    for by_thread, title in ((steady, "polls again"), (churn, "polls after churn")):
        total = _figure(rf"^3 {title} \(mean ms a poll, of ([\d.]+)\)", by_thread)
        shares = [float(s) for s in re.findall(r"\n {6}\S[^\n]*?([\d.]+) ms", by_thread)]
        assert "collector-lane" in by_thread
        assert len(shares) >= 3  # the lane, the loop, the workers at least
        # Every share over 0.005 ms is printed, each rounded to 0.01 ms.
        assert abs(sum(shares) - total) <= 0.01 * len(shares) + 0.05, by_thread
    assert _figure(r"join and allocation diff after churn[^\n]*?([\d.]+) ms", churn) > 0
    rendered = churn.replace(",", "")
    assert _figure(r"render at a poll's first scrape \((\d+) series\)", rendered) > 1000
    for kind in ("steady", "after churn", "cold"):
        assert _figure(rf"[:,] {kind} ([\d.]+) ms", churn) > 0


def test_gpu_nic_paths_bench_runs_on_both_layouts() -> None:
    """bench/gpu_nic_paths.py times its two training layouts, 16 series each: a level
    and a best level per GPU, one NIC resource."""
    done = subprocess.run(
        [sys.executable, str(BENCH.parent / "gpu_nic_paths.py"), "--runs", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for layout in ("8 pods", "1 pod"):
        line = next(line for line in done.stdout.splitlines() if line.strip().startswith(layout))
        assert _figure(r"gpu_nic_paths ([\d.]+) ms", line) > 0
        assert _figure(r"render ([\d.]+) ms", line) > 0
        assert line.endswith(" 16 series"), line


def test_time_sliced_bench_shows_the_holders_set_the_series() -> None:
    """bench/time_sliced.py, which README's memory sizing quotes: with 48 replicas of each
    GPU held by 384 containers, each holder carries its GPU's telemetry, over 40 series
    a holder, and the process's peak RSS is above the one-replica node's."""
    done = subprocess.run(
        [sys.executable, str(BENCH.parent / "time_sliced.py")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    one, many = (line for line in done.stdout.splitlines() if "holders:" in line)
    series = [_figure(r"(\d+) series", line.replace(",", "")) for line in (one, many)]
    peaks = [_figure(r"peak RSS ([\d.]+) MiB", line) for line in (one, many)]
    assert (series[1] > 40 * 384, peaks[1] > peaks[0]) == (True, True), done.stdout
