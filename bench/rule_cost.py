"""What the rules that remember a day cost a real Prometheus over a GPU fleet.

A day of the series that PodresourcesGPUNVLinkDown, PodresourcesInfinibandPortDown and
PodresourcesInfinibandLinkDegraded read, as a fleet's exporters serve them: --nodes
nodes of 8 GPUs (NVLink counts by state, fabric state) and 8 single-port HCAs (port
state, rate), scraped every 30 s, each device held by one pod after another (a new
series at each change of holder, unallocated between them), a few links, ports and
rates failing in the last hours. It is written as OpenMetrics, one file a 2-hour
block, and backfilled with `promtool tsdb create-blocks-from openmetrics`.

For each rules file given, a Prometheus opens those blocks and the file's recording
rules backfilled over the day (`promtool tsdb create-blocks-from rules`, every minute,
as a group evaluated every minute writes them); every rule of the hardware group that
reads those series, or a record of them, is evaluated through the HTTP API at the
day's end (`stats=all`: the engine's evalTotalTime, not the JSON's), --runs times, the
files' Prometheus servers up side by side and taken in turn. It prints each rule's
median, their sum (one evaluation of these rules), and the series each file's alerts
return, which must agree between the files (exit status 1 where they do not).

    .venv/bin/python bench/rule_cost.py --nodes 300 --runs 7 OLD.rules.yml NEW.rules.yml

(`git show REV:alerts/podresources-exporter.rules.yml > OLD.rules.yml` for a past
revision's rules.) At --nodes 300: 36 M samples, ~700 MB of text at a time, about 8
minutes to backfill on 2 cores and as long again to measure three files; --smoke is the
same on 2 nodes over 3 hours, in seconds (tests/ship/test_rule_cost.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
GROUP = "podresources-exporter.hardware"
READY_TIMEOUT_S = 120
BLOCK_S = 2 * 3600  # promtool's backfill cuts 2-hour blocks; one file each
GPUS = 8
PORTS = 8
NVLINKS = 18
RATE_BYTES_PER_S = 50e9  # 400 Gb/s, NDR
MLX5_DOWN_RATE_BYTES_PER_S = 5e9  # what mlx5 reports for a port that is down
FAMILIES = (
    "podresources_gpu_nvlink_links",
    "podresources_gpu_fabric_state_id",
    "podresources_infiniband_port_state_id",
    "podresources_infiniband_port_rate_bytes_per_second",
)


@dataclass(frozen=True, slots=True)
class Fleet:
    """The fleet and its day: ``end_s`` is the day's last scrape (a Unix time)."""

    nodes: int
    span_s: int
    end_s: int
    scrape_s: int = 30
    hold_s: int = 3 * 3600  # a holder's mean time on a device
    seed: int = 1

    @property
    def start_s(self) -> int:
        return self.end_s - self.span_s


@dataclass(frozen=True, slots=True)
class Holding:
    """One series of a device: its owner's labels from ``start_s`` until before ``end_s``."""

    start_s: int
    end_s: int
    owner: str  # 'namespace="..",pod="..",container=".."'


@dataclass(frozen=True, slots=True)
class Device:
    """A GPU or a port: its identity labels, its holders, and its fault from ``fails_at_s``
    on: ``link`` (a GPU loses an NVLink), ``down`` (a port goes DOWN, at mlx5's default
    rate), ``slow`` (a port's rate halves), or ``""`` (none)."""

    labels: str
    holdings: tuple[Holding, ...]
    fault: str = ""
    fails_at_s: int = 0


_FREE = 'namespace="",pod="",container=""'


def _holdings(fleet: Fleet, rng: random.Random) -> tuple[Holding, ...]:
    """Holders one after another over the day, some minutes unallocated between them."""
    spans = []
    t = fleet.start_s - rng.randrange(fleet.hold_s)
    while t <= fleet.end_s:
        held = int(rng.expovariate(1 / fleet.hold_s)) + 600
        pod = f"job-{rng.randrange(10**6):06d}-{rng.randrange(16)}"
        owner = f'namespace="team-{rng.randrange(20)}",pod="{pod}",container="main"'
        spans.append(Holding(t, t + held, owner))
        idle = rng.randrange(1800)
        spans.append(Holding(t + held, t + held + idle, _FREE))
        t += held + idle
    return tuple(s for s in spans if s.end_s > fleet.start_s and s.start_s <= fleet.end_s)


def fleet_devices(fleet: Fleet) -> tuple[list[Device], list[Device]]:
    """The fleet's GPUs and ports: one GPU in 50 loses a link, one port in 40 goes down
    and one in 30 slows, each at some time of the day's last quarter."""
    rng = random.Random(fleet.seed)
    gpus: list[Device] = []
    ports: list[Device] = []
    for n in range(fleet.nodes):
        node = f'job="podresources-exporter",instance="gpu-{n:04d}",node="gpu-{n:04d}"'
        for g in range(GPUS):
            labels = f'{node},resource="nvidia.com/gpu",device_id="{_uuid(n, g)}"'
            fault = "link" if len(gpus) % 50 == 7 else ""
            gpus.append(Device(labels, _holdings(fleet, rng), fault, _late(fleet, rng)))
        for p in range(PORTS):
            labels = (
                f'{node},resource="nvidia.com/hca",device_id="0000:{0x1B + 16 * p:02x}:00.0",'
                f'ib_device="mlx5_{p}",port="1"'
            )
            fault = {3: "down"}.get(len(ports) % 40) or {11: "slow"}.get(len(ports) % 30, "")
            ports.append(Device(labels, _holdings(fleet, rng), fault, _late(fleet, rng)))
    return gpus, ports


def _uuid(node: int, gpu: int) -> str:
    return f"GPU-{node:08x}-5e1f-4c2a-9d3b-{gpu:012x}"


def _late(fleet: Fleet, rng: random.Random) -> int:
    return fleet.end_s - fleet.span_s // 4 + rng.randrange(fleet.span_s // 4)


def _series(family: str, fault: str) -> tuple[tuple[str, float, float], ...]:
    """Each series of ``family`` for a device: (its extra labels, its value before the
    device's fault, after)."""
    if family == "podresources_gpu_nvlink_links":
        lost = 1 if fault == "link" else 0
        return ((',state="active"', NVLINKS, NVLINKS - lost), (',state="inactive"', 0, lost))
    if family == "podresources_gpu_fabric_state_id":
        return (("", 3, 3),)
    if family == "podresources_infiniband_port_state_id":
        return (("", 4, 1 if fault == "down" else 4),)
    after = {"down": MLX5_DOWN_RATE_BYTES_PER_S, "slow": RATE_BYTES_PER_S / 2}
    return (("", RATE_BYTES_PER_S, after.get(fault, RATE_BYTES_PER_S)),)


def write_window(
    fleet: Fleet, devices: Sequence[Sequence[Device]], *, start_s: int, path: Path
) -> int:
    """The samples of ``[start_s, start_s + BLOCK_S)`` as OpenMetrics text; their count."""
    gpus, ports = devices
    end_s = min(start_s + BLOCK_S, fleet.end_s + 1)
    written = 0
    with path.open("w") as out:
        for family in FAMILIES:
            out.write(f"# TYPE {family} gauge\n")
            for device in gpus if "_gpu_" in family else ports:
                fails_s = device.fails_at_s if device.fault else end_s
                for holding in device.holdings:
                    lo, hi = max(start_s, holding.start_s), min(end_s, holding.end_s)
                    lo += (fleet.start_s - lo) % fleet.scrape_s  # on the scrape grid
                    for extra, before, after in _series(family, device.fault):
                        series = f"{family}{{{device.labels},{holding.owner}{extra}}}"
                        for t in range(lo, hi, fleet.scrape_s):
                            out.write(f"{series} {before if t < fails_s else after:g} {t}\n")
                            written += 1
        out.write("# EOF\n")
    return written


def backfill_fleet(fleet: Fleet, *, into: Path, work: Path) -> int:
    """The fleet's day as blocks under ``into``; the samples written. One text file a
    block: promtool reads its input once for each block it cuts."""
    devices = fleet_devices(fleet)
    samples = 0
    for start_s in range(fleet.start_s - fleet.start_s % BLOCK_S, fleet.end_s + 1, BLOCK_S):
        text = work / "window.om"
        samples += write_window(fleet, devices, start_s=start_s, path=text)
        _run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "-q", str(text), str(into)])
        text.unlink()
    return samples


def _run(command: Sequence[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command[:4])}: {done.stdout}{done.stderr}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Prometheus:
    """A Prometheus on a data directory that scrapes nothing, for its query API; stopped
    when the ``with`` block ends."""

    def __init__(self, data: Path) -> None:
        self.url = f"http://127.0.0.1:{_free_port()}"
        config = data.with_suffix(".yml")
        config.write_text("global: {}\n")
        self._log = data.with_suffix(".log")
        with self._log.open("w") as log:
            self._process = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={data}",
                    "--storage.tsdb.retention.time=30d",
                    f"--web.listen-address={self.url.removeprefix('http://')}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def __enter__(self) -> Prometheus:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._ready():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"prometheus did not start:\n{self._log.read_text()}")
            time.sleep(0.2)
        return self

    def __exit__(self, *_: object) -> None:
        self._process.terminate()
        self._process.wait(timeout=60)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def query(self, expr: str, *, at_s: int) -> dict[str, Any]:
        """The API's answer to an instant query, with the engine's statistics."""
        form = urllib.parse.urlencode({"query": expr, "time": at_s, "stats": "all"})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{form}", timeout=600) as answer:
            body: dict[str, Any] = json.load(answer)
        if body.get("status") != "success":
            raise RuntimeError(f"{expr}: {body}")
        data: dict[str, Any] = body["data"]
        return data


def _reads(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", text) is not None


def day_rules(rules_file: Path) -> list[dict[str, Any]]:
    """The hardware group's rules that read the fleet's series, or a record of them."""
    group = next(g for g in yaml.safe_load(rules_file.read_text())["groups"] if g["name"] == GROUP)
    chosen: list[dict[str, Any]] = []
    for rule in group["rules"]:
        names = [*FAMILIES, *(r["record"] for r in chosen if "record" in r)]
        if any(_reads(rule["expr"], name) for name in names):
            chosen.append(rule)
    return chosen


def _link_blocks(source: Path, into: Path) -> None:
    """Hard links of every block of ``source`` under ``into`` (blocks are immutable)."""
    for block in (b for b in source.iterdir() if (b / "meta.json").exists()):
        for path in block.rglob("*"):
            target = into / path.relative_to(source)
            if path.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                os.link(path, target)


@dataclass(frozen=True, slots=True)
class Cost:
    """One rule's evaluation at the day's end: its runs' times, the samples it read, and
    the series it returned (label sets)."""

    name: str
    alert: bool
    eval_ms: tuple[float, ...]
    samples: int
    result: frozenset[tuple[tuple[str, str], ...]]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.eval_ms)


def prepare(rules_file: Path, fleet: Fleet, *, raw: Path, work: Path) -> Path:
    """A data directory of the fleet's day and the file's records, backfilled over it."""
    data = work / f"data-{len(list(work.glob('data-*')))}"
    data.mkdir()
    _link_blocks(raw, data)
    records = [rule for rule in day_rules(rules_file) if "record" in rule]
    if records:
        # Only the records the day rules read: promtool takes seconds over each rule.
        only = data.with_name(f"{data.name}-records.yml")
        only.write_text(yaml.safe_dump({"groups": [{"name": GROUP, "rules": records}]}))
        blocks = data.with_name(f"{data.name}-records")
        with Prometheus(data) as prometheus:
            _run(
                [
                    *(PROMTOOL, "tsdb", "create-blocks-from", "rules", "-q"),
                    f"--url={prometheus.url}",
                    f"--start={fleet.start_s}",
                    f"--end={fleet.end_s}",
                    f"--output-dir={blocks}",
                    "--eval-interval=60s",  # Prometheus' default evaluation_interval
                    str(only),
                ]
            )
        _link_blocks(blocks, data)
    return data


def measure(datas: dict[Path, Path], *, at_s: int, runs: int) -> dict[Path, list[Cost]]:
    """Each file's day rules, on its data directory, evaluated ``runs`` times at ``at_s``:
    every file's Prometheus up at once, rule after rule, file after file, round after
    round, so a busy moment of the machine hits them all alike."""
    rules = {path: day_rules(path) for path in datas}
    times: dict[tuple[Path, str], list[float]] = {}
    answers: dict[tuple[Path, str], dict[str, Any]] = {}
    with contextlib.ExitStack() as stack:
        servers = {path: stack.enter_context(Prometheus(data)) for path, data in datas.items()}
        for _ in range(runs):
            for path, server in servers.items():
                for rule in rules[path]:
                    key = (path, rule.get("alert") or rule["record"])
                    answers[key] = server.query(rule["expr"], at_s=at_s)
                    seconds = answers[key]["stats"]["timings"]["evalTotalTime"]
                    times.setdefault(key, []).append(1000 * seconds)
    return {
        path: [
            Cost(
                name,
                "alert" in rule,
                tuple(times[path, name]),
                int(answers[path, name]["stats"]["samples"]["totalQueryableSamples"]),
                frozenset(
                    tuple(sorted(series["metric"].items()))
                    for series in answers[path, name]["result"]
                ),
            )
            for rule in rules[path]
            for name in [rule.get("alert") or rule["record"]]
        ]
        for path in datas
    }


def _report(rules_file: Path, costs: Sequence[Cost]) -> None:
    print(f"\n{rules_file}")
    print(f"  {'rule':<68} {'median ms':>9} {'min-max ms':>15} {'samples':>12} {'series':>6}")
    for cost in costs:
        spread = f"{min(cost.eval_ms):.1f}-{max(cost.eval_ms):.1f}"
        print(
            f"  {cost.name:<68} {cost.median_ms:>9.1f} {spread:>15} "
            f"{cost.samples:>12,} {len(cost.result):>6}"
        )
    total = sum(cost.median_ms for cost in costs)
    samples = sum(cost.samples for cost in costs)
    print(f"  {'sum: one evaluation of these rules':<68} {total:>9.1f} {'':>15} {samples:>12,}")


def _compare_alerts(results: dict[Path, list[Cost]]) -> int:
    """0 when every file's alerts return the same series at the day's end."""
    found = {
        path: {cost.name: cost.result for cost in costs if cost.alert}
        for path, costs in results.items()
    }
    first, *others = found.values()
    differ = {
        name
        for other in others
        for name in first.keys() | other.keys()
        if first.get(name) != other.get(name)
    }
    print()
    for name in sorted(first.keys() | differ):
        print(f"{name}: {len(first.get(name, ()))} series{' (files differ)' * (name in differ)}")
    return 1 if differ else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("rules", nargs="+", type=Path, help="rules files to compare")
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--smoke", action="store_true", help="2 nodes, 3 hours, 1 run")
    parser.add_argument("--work", type=Path, help="where the blocks go (default: a temp folder)")
    args = parser.parse_args(argv)
    hour_s = 3600
    end_s = int(time.time()) // hour_s * hour_s - hour_s
    fleet = (
        Fleet(nodes=2, span_s=3 * hour_s, end_s=end_s, hold_s=hour_s)
        if args.smoke
        else Fleet(nodes=args.nodes, span_s=24 * hour_s + 600, end_s=end_s)
    )
    runs = 1 if args.smoke else args.runs
    work = Path(tempfile.mkdtemp(prefix="rule-cost-", dir=args.work))
    try:
        started = time.monotonic()
        samples = backfill_fleet(fleet, into=work / "raw", work=work)
        print(
            f"{fleet.nodes} nodes of {GPUS} GPUs and {PORTS} ports, scraped every "
            f"{fleet.scrape_s} s for {fleet.span_s / hour_s:.1f} h, a new holder every "
            f"{fleet.hold_s / hour_s:.0f} h on average: {samples:,} samples, backfilled in "
            f"{time.monotonic() - started:.0f} s; {runs} runs a rule"
        )
        datas = {path: prepare(path, fleet, raw=work / "raw", work=work) for path in args.rules}
        results = measure(datas, at_s=fleet.end_s, runs=runs)
    finally:
        shutil.rmtree(work)
    for path, costs in results.items():
        _report(path, costs)
    return _compare_alerts(results)


if __name__ == "__main__":
    sys.exit(main())
