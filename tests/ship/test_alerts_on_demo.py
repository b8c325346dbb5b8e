"""The shipped alert rules against what the exporter really serves on the demo node.

alerts/tests/*.yml feed the rules series written by hand: a label, a label value or a
device ID form the exporter does not serve would pass there and stay silent in
production. Here the rules read the real /metrics pages of the exporter on the simulated
node of ``python -m exporter --demo`` (exporter/sim/), whose faults must fire exactly
the alerts of EXPECTED below, with those labels, and nothing else may fire.

The exporter runs in this process, as --demo runs it: the demo collectors, a tick of
the node at each poll, every 10 s (--poll.interval's default). The polls are driven by
the test on a ManualClock that the simulated NVML and the poller's wall clock share, so
the clock is promtool's: podresources_snapshot_timestamp_seconds reads against time().
Every third poll's page is a scrape of the ServiceMonitor's (every 30 s), given its
target labels (job, and instance and node both the node's name). After the last page
the node holds still until the last check: gauges keep their last value, counters go on
growing as they last did, and the snapshot's timestamp keeps up with the clock (the
exporter goes on polling).

promtool (2.42) compares annotations whole, and the descriptions are pages of text that
query other series; alerts/tests checks them. This test is about which alerts fire,
with which labels, so promtool runs a copy of the shipped rules with the annotations
left out, and nothing else changed.
"""

from __future__ import annotations

import asyncio
import math
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer
from manualclock import ManualClock
from prometheus_client.parser import text_string_to_metric_families
from scratch import scratch_folder

from exporter.app import Exporter, collector_context, demo_collectors
from exporter.cli import parse_config
from exporter.collectors.gpu_processes import GpuProcessesCollector
from exporter.collectors.nvml import NvmlCollector
from exporter.poller import Poller
from exporter.sim.gpus import NVLINK_BURST_AFTER_DRAINS, XID_AFTER_DRAINS, SimulatedNvmlSource
from exporter.sim.hardware import LINK_FLAP_TICK
from exporter.sim.node import SimulatedNode
from exporter.sim.scenario import DemoScenario

# One worker of `make unit` runs them all: the demo's pages, captured once.
pytestmark = pytest.mark.xdist_group("alerts_on_demo")

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "alerts" / "podresources-exporter.rules.yml"

NODE = "demo-node"
# What the ServiceMonitor (manifests/components/prometheus-operator/servicemonitor.yaml)
# adds to every series: the job, and the node's name as node and as instance.
TARGET = {"job": "podresources-exporter", "instance": NODE, "node": NODE}
POLL_S = 10  # --poll.interval's default
SCRAPE_S = 30  # the ServiceMonitor's interval
SCRAPES = 12  # pages captured: 6 minutes of the demo
EVALUATION_S = 60  # Prometheus' default evaluation_interval, as in alerts/tests (but *.day.yml)
# The first check: the events (alerts without `for:`) of the demo's first minutes, while
# no `for:` (5 minutes the shortest) can have been met yet. The second: every `for:`
# (2 hours the longest) met, the events long over.
EARLY = "4m"
LATE = "2h30m"
# Checks of the alerts EXPECTED never names alone, silent there too: each minute of the
# captured pages (a false alarm at the demo's start), and once the 10-minute and the
# 1-hour windows see the held pages alone.
QUIET = ("1m", "2m", "3m", "5m", "6m", "20m", "1h10m")

GPU_0, GPU_1, GPU_2, GPU_3, GPU_4, GPU_5, GPU_6 = (
    f"GPU-{n:08x}-5e1f-4c2a-9d3b-{n:012x}" for n in range(0x100, 0x107)
)
MIG_3G = "MIG-00000201-5e1f-4c2a-9d3b-000000000201"
TRAINER = {"namespace": "ml-training", "pod": "trainer-0", "container": "trainer"}
LLM_SERVER = {"namespace": "ml-inference", "pod": "llm-server-7d9f8", "container": "server"}

# (when, alert, its labels besides the target's and the rule's severity): every alert
# the demo fires. Any other alert firing at either check fails the test.
EXPECTED: tuple[tuple[str, str, dict[str, str]], ...] = (
    # GPU 6 raises Xid 31 XID_AFTER_DRAINS polls (a minute) after it is first watched
    # (hardware._free_gpu, gpus.XID_AFTER_DRAINS); one alert per physical GPU, by uuid.
    (EARLY, "PodresourcesGPUXidErrors", {"uuid": GPU_6}),
    # mlx5_1's link, down once before the exporter started (silent), flaps again at tick
    # LINK_FLAP_TICK (a poll each, a minute in), with link error recoveries and symbol
    # errors (hardware.demo_hardware); the HCA nobody holds.
    (
        EARLY,
        "PodresourcesInfinibandLinkDowned",
        {
            "resource": "nvidia.com/hca",
            "device_id": "0000:d8:00.0",
            "ib_device": "mlx5_1",
            "port": "1",
        },
    ),
    # GPU 1, held by trainer-0, sits idle: utilization 0.0 (demo_hardware).
    (
        LATE,
        "PodresourcesGPUAllocatedIdle",
        {**TRAINER, "resource": "nvidia.com/gpu", "device_id": GPU_1},
    ),
    # GPU 1 carries a leftover process of the embedder pod (hardware._demo_processes).
    (
        LATE,
        "PodresourcesGPUForeignProcesses",
        {"resource": "nvidia.com/gpu", "device_id": GPU_1, "kind": "other_pod"},
    ),
    # GPU 6, allocated to nobody, is busy with a host process: "free but busy".
    (
        LATE,
        "PodresourcesGPUForeignProcesses",
        {"resource": "nvidia.com/gpu", "device_id": GPU_6, "kind": "unallocated_device"},
    ),
    # llm-server's MIG slice is on NUMA 1, its exclusive CPUs on NUMA 0 (scenario.pods).
    (LATE, "PodresourcesContainerNotNUMAAligned", LLM_SERVER),
    # llm-server's VF is PF 0's, across the sockets from its MIG GPU, though PF 1's VFs
    # share that GPU's PCIe switch (scenario.pods).
    (
        LATE,
        "PodresourcesGPUNICNotAligned",
        {
            **LLM_SERVER,
            "resource": "nvidia.com/mig-3g.40gb",
            "device_id": MIG_3G,
            "nic_resource": "mellanox.com/cx7_sriov_vf",
        },
    ),
    # The Intel plugin reports NUMA 0 for the card sysfs puts on NUMA 1
    # (scenario.INTEL_PLUGIN_NUMA), for both its shares card2-0 and card2-1: one alert
    # for the card.
    (
        LATE,
        "PodresourcesDeviceNUMAMismatch",
        {
            "resource": "gpu.intel.com/i915",
            "device_id": "card2",
            "kubelet_numa_node": "0",
            "sysfs_numa_node": "1",
        },
    ),
    # GPU 0, busy training, trained its link at 8 of its 16 lanes (hardware._demo_links):
    # one alert per PCI function, by the address podresources_device_info gives it.
    (LATE, "PodresourcesPCIeLinkDegraded", {"pci_address": "0000:17:00.0"}),
    # ... and so replays REPLAYS_PER_S_NARROW_LINK packets a second, above what the
    # spec's error rate allows 8 lanes at 32 GT/s (gpus.py). Its 27 corrected AER errors,
    # from before the link trained narrow, fire nothing: no rule reads corrected errors
    # (PodresourcesPCIeUncorrectableErrors reads nonfatal and fatal ones).
    (LATE, "PodresourcesGPUPCIeReplays", {"uuid": GPU_0}),
    # GPU 4's NVLinks see a burst of CRC errors, and replays, NVLINK_BURST_AFTER_DRAINS
    # polls (a minute) after they are first read (hardware._dra_gpus,
    # gpus.NVLINK_BURST_AFTER_DRAINS): the CRC errors above 100 a second, any replay.
    # The counts from before the exporter started (crc_flit, replay, recovery) are silent.
    (EARLY, "PodresourcesGPUNVLinkErrors", {"uuid": GPU_4, "type": "crc_flit"}),
    (EARLY, "PodresourcesGPUNVLinkErrors", {"uuid": GPU_4, "type": "replay"}),
    # GPU 4, claimed through DRA (resource gpu.nvidia.com, device gpu-4), has lost one of
    # its 18 NVLinks (hardware._dra_gpus): one alert per physical GPU, by uuid.
    (LATE, "PodresourcesGPUNVLinkDown", {"uuid": GPU_4}),
)

# Each NVIDIA GPU's telemetry, under the (resource, device_id) it is served with, and
# the uuid the GPU alerts join it to through podresources_device_info (the recording
# rule physical_device:podresources_device_info:max): a whole GPU; a MIG-enabled one,
# whose slices the kubelet lists, itself under no resource; the time-sliced GPU 3,
# listed as its replicas ::0 to ::3; GPU 4, claimed through DRA, named gpu-4
# (hardware.demo_hardware, dra.py).
GPU_UUIDS = {
    ("nvidia.com/gpu", GPU_0): GPU_0,
    ("nvidia.com/gpu", GPU_1): GPU_1,
    ("", GPU_2): GPU_2,
    ("nvidia.com/gpu.shared", GPU_3): GPU_3,
    ("gpu.nvidia.com", "gpu-4"): GPU_4,
    ("", GPU_5): GPU_5,
    ("nvidia.com/gpu", GPU_6): GPU_6,
}
JOINED = """group by (resource, device_id, uuid) (
  podresources_gpu_temperature_celsius
  * on (job, instance, resource, device_id) group_left (uuid)
  physical_device:podresources_device_info:max
)"""

# Gauges that are a time: the exporter keeps polling while the node holds still, so
# each scrape finds it as far ahead as the scrape.
CLOCK_GAUGES = {"podresources_snapshot_timestamp_seconds"}
CUMULATIVE = {"counter", "histogram", "summary"}

Key = tuple[str, tuple[tuple[str, str], ...]]


def _seconds(duration: str) -> int:
    hours, _, rest = duration.rpartition("h")
    minutes, _, rest = rest.rpartition("m")
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + int(rest.rstrip("s") or 0)


def _life(
    node: SimulatedNode, clock: ManualClock, sources: tuple[SimulatedNvmlSource, ...] | None
) -> Exporter:
    """One exporter process's parts, as --demo makes them; with ``sources``, the node's
    simulated GPUs (NVML's and gpu_processes'), which outlive an exporter process as a
    node's GPUs do, in the collectors demo_collectors would make."""
    config = parse_config([*node.exporter_flags(), "--demo", "--node-name", NODE], {})
    assert POLL_S == config.poll_interval_s
    collectors = demo_collectors(config, node, clock=clock)
    if sources is not None:
        assert ("nvml", "gpu_processes") == (collectors[0].name, collectors[-1].name)
        context = collector_context(config)
        nvml, processes = sources
        collectors = [
            NvmlCollector(context, source=nvml, clock=clock),
            *collectors[1:-1],
            GpuProcessesCollector(context, source=processes),
        ]
    exporter = Exporter(config, collectors=collectors)
    exporter.poller = Poller(
        client=exporter.client,
        runner=exporter.runner,
        store=exporter.store,
        node=config.node_name,
        interval_s=config.poll_interval_s,
        clock=clock,
        monotonic=clock,
    )
    return exporter


async def _capture(*, restart_after: int | None = None) -> list[str | None]:
    """The demo's /metrics pages, one every SCRAPE_S on the simulated clock; poll k at
    10 k + 5 s, so a scrape at 30 j s finds the page of the poll 5 s before. With
    ``restart_after``, the exporter is replaced after that many scrapes (a rollout, an
    OOM kill): the next scrape fails (None), the node going on meanwhile, and the new
    process polls from the one after."""
    with scratch_folder("prx-sim-") as root:
        return await _capture_on(root, restart_after=restart_after)


async def _capture_on(root: Path, *, restart_after: int | None) -> list[str | None]:
    clock = ManualClock(POLL_S / 2)
    node = SimulatedNode(DemoScenario.create(), root=root)
    await node.start()
    sources = None
    if restart_after is not None:
        sources = tuple(SimulatedNvmlSource(node.scenario.hardware, clock=clock) for _ in range(2))
    pages: list[str | None] = []
    polls_per_scrape = SCRAPE_S // POLL_S
    exporter: Exporter | None = None
    client: TestClient | None = None  # type: ignore[type-arg]
    try:
        for poll in range(SCRAPES * polls_per_scrape):
            if poll:
                clock.advance(POLL_S)
                await node.advance()
            scrape, step = divmod(poll, polls_per_scrape)
            if scrape == restart_after and exporter is not None and client is not None:
                await client.close()
                await exporter.close()
                exporter = client = None
            if scrape == restart_after:
                if step == polls_per_scrape - 1:
                    pages.append(None)
                continue
            if exporter is None:
                exporter = _life(node, clock, sources)
                client = TestClient(TestServer(exporter.create_app()))
                await client.start_server()
            await exporter.poller.poll_once()
            if step == polls_per_scrape - 1 and client is not None:
                response = await client.get("/metrics")
                assert 200 == response.status
                pages.append(await response.text())
    finally:
        if client is not None and exporter is not None:
            await client.close()
            await exporter.close()
        await node.stop()
    return pages


def _samples(page: str | None) -> dict[Key, tuple[float, str]]:
    """Each series of a page as Prometheus stores it: a label with an empty value (the
    owner of a free device) left out, the target's labels added (a label of the
    exporter's of the same name renamed exported_<name>, honor_labels being off), and
    the family's type beside its value. A failed scrape (None) has only ``up`` 0."""
    up = ("up", tuple(sorted(TARGET.items())))
    if page is None:
        return {up: (0.0, "gauge")}
    samples: dict[Key, tuple[float, str]] = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            labels = {
                f"exported_{name}" if name in TARGET else name: value
                for name, value in sample.labels.items()
                if value
            }
            key = (sample.name, tuple(sorted({**labels, **TARGET}.items())))
            samples[key] = (sample.value, family.type)
    samples[up] = (1.0, "gauge")
    return samples


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    return repr(value)


def _input_series(pages: list[str | None], *, steps: int) -> list[dict[str, str]]:
    """promtool input_series: the pages at 30 s, 60 s, ... (nothing scraped at 0), a
    series gone from a page marked stale as Prometheus marks it, and those of the last
    page held until ``steps`` scrapes."""
    scraped = [_samples(page) for page in pages]
    keys = dict.fromkeys(key for samples in scraped for key in samples)
    hold = steps - len(pages)
    series = []
    for name, labels in keys:
        values = ["_"]
        seen: list[float | None] = [
            samples.get((name, labels), (None, ""))[0] for samples in scraped
        ]
        for before, value in zip([None, *seen], seen, strict=False):
            if value is not None:
                values.append(_number(value))
            else:
                values.append("stale" if before is not None else "_")
        last = seen[-1]
        if last is not None:
            kind = scraped[-1][(name, labels)][1]
            before = seen[-2]
            step = 0.0
            if name in CLOCK_GAUGES:
                step = SCRAPE_S
            elif kind in CUMULATIVE and before is not None and last >= before:
                step = last - before
            values[-1] = (
                f"{_number(last)}+{_number(step)}x{hold}" if step else f"{_number(last)}x{hold}"
            )
        text = ", ".join(f"{label}={_promql_string(value)}" for label, value in labels)
        series.append({"series": f"{name}{{{text}}}", "values": " ".join(values)})
    return series


def _promql_string(value: str) -> str:
    """A PromQL label value: double-quoted, backslash, quote and newline escaped."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _alerts(rules: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in rules["groups"] for rule in group["rules"] if "alert" in rule]


def _without_annotations(rules: dict[str, Any]) -> dict[str, Any]:
    groups = [
        {
            **group,
            "rules": [
                {k: v for k, v in rule.items() if k != "annotations"} for rule in group["rules"]
            ],
        }
        for group in rules["groups"]
    ]
    return {**rules, "groups": groups}


def _join_test() -> dict[str, Any]:
    """The uuid each GPU's temperature joins to, as GPU_UUIDS says, at the last check."""
    samples = []
    for (resource, device_id), uuid in GPU_UUIDS.items():
        labels = {"resource": resource, "device_id": device_id, "uuid": uuid}
        text = ", ".join(f"{k}={_promql_string(v)}" for k, v in sorted(labels.items()) if v)
        samples.append({"labels": f"{{{text}}}", "value": 1})
    return {"expr": JOINED, "eval_time": LATE, "exp_samples": samples}


def _alert_tests(rules: dict[str, Any]) -> list[dict[str, Any]]:
    """At each check, each alert of the rules with exactly the EXPECTED label sets; at
    the QUIET ones, the alerts EXPECTED never names silent."""
    tests = []
    never = [rule["alert"] for rule in _alerts(rules)]
    never = [alert for alert in never if alert not in {name for _, name, _ in EXPECTED}]
    for when in QUIET:
        tests += [{"eval_time": when, "alertname": alert, "exp_alerts": []} for alert in never]
    for when in (EARLY, LATE):
        for rule in _alerts(rules):
            expected = [
                {"exp_labels": {**TARGET, **rule.get("labels", {}), **labels}}
                for at, alert, labels in EXPECTED
                if (at, alert) == (when, rule["alert"])
            ]
            tests.append({"eval_time": when, "alertname": rule["alert"], "exp_alerts": expected})
    return tests


def _promtool_test(
    promtool: str, rules: Path, pages: list[str | None], checks: dict[str, Any], path: Path
) -> subprocess.CompletedProcess[str]:
    """``promtool test rules`` of ``checks`` on ``rules``, the pages scraped every
    SCRAPE_S and held until the LATE check, evaluated every EVALUATION_S."""
    series = _input_series(pages, steps=_seconds(LATE) // SCRAPE_S + 1)
    unit_test = {
        "rule_files": [str(rules)],
        "evaluation_interval": f"{EVALUATION_S}s",
        "tests": [{"interval": f"{SCRAPE_S}s", "input_series": series, **checks}],
    }
    path.write_text(yaml.safe_dump(unit_test, sort_keys=False, width=1_000_000))
    return subprocess.run(
        [promtool, "test", "rules", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.fixture(scope="module")
def pages() -> list[str | None]:
    """The demo's pages, as Prometheus scraped them."""
    return asyncio.run(_capture())


def test_the_expected_alerts_are_the_rules_own() -> None:
    """Every alert EXPECTED names is in the rules file, and every check is one of two."""
    names = {rule["alert"] for rule in _alerts(yaml.safe_load(RULES.read_text()))}
    assert set() == {alert for _, alert, _ in EXPECTED} - names
    assert {EARLY, LATE} >= {when for when, _, _ in EXPECTED}


@pytest.mark.parametrize(
    "polls",
    [XID_AFTER_DRAINS, LINK_FLAP_TICK, NVLINK_BURST_AFTER_DRAINS],
    ids=["xid", "infiniband_flap", "nvlink_burst"],
)
def test_the_early_check_sees_the_events_in_the_captured_pages(polls: int) -> None:
    """Each fault that comes some polls in (GPU 6's Xid, mlx5_1's link flap, GPU 4's
    NVLink burst) is scraped before the early check, which comes before the captured
    pages end (else move EARLY, or capture more)."""
    assert polls * POLL_S + SCRAPE_S <= _seconds(EARLY) <= SCRAPES * SCRAPE_S


def test_the_demo_fires_exactly_the_expected_alerts(
    promtool: str, pages: list[str | None], tmp_path: Path
) -> None:
    """promtool, on the shipped rules and the demo's real pages: at each check, each
    alert fires exactly as EXPECTED says, and the others are silent; each GPU's
    telemetry joins to its uuid as GPU_UUIDS says."""
    rules = yaml.safe_load(RULES.read_text())
    rules_copy = tmp_path / "rules.yml"
    rules_copy.write_text(yaml.safe_dump(_without_annotations(rules), sort_keys=False))
    test = {"alert_rule_test": _alert_tests(rules), "promql_expr_test": [_join_test()]}
    result = _promtool_test(promtool, rules_copy, pages, test, tmp_path / "demo.yml")
    assert 0 == result.returncode, result.stdout[-20_000:] + result.stderr[-5_000:]


# The scrape whose exporter is being replaced, in the restart test: after the early
# events were scraped, before any `for:` is met.
RESTART_AT_SCRAPE = 9
# A check a minute after the 15-minute `for:`s are met (the alerts' series are there
# from the first minute): a `for:` the restart started over would still be waiting.
SOON_AFTER_FOR = "17m"


def test_an_exporter_restart_changes_no_alert(promtool: str, tmp_path: Path) -> None:
    """The same, with the exporter replaced half-way (a rollout, an OOM kill) while the
    node goes on: one failed scrape, then a new process whose own counts (Xid totals,
    kubelet requests) start again from 0 and whose GPM figures are absent for a while.
    The alerts fire and stay silent as without the restart, and each alert with a
    `for:` of 15 minutes or less fires on time: no `for:` starts over, no reset reads as
    an increase, nothing fires at the restart."""
    events = max(XID_AFTER_DRAINS, LINK_FLAP_TICK, NVLINK_BURST_AFTER_DRAINS) * POLL_S
    assert events + SCRAPE_S <= RESTART_AT_SCRAPE * SCRAPE_S
    pages = asyncio.run(_capture(restart_after=RESTART_AT_SCRAPE))
    assert [None] == [page for page in pages if page is None]
    rules = yaml.safe_load(RULES.read_text())
    waits = {rule["alert"]: _seconds(rule.get("for", "0s")) for rule in _alerts(rules)}
    due = _seconds(SOON_AFTER_FOR) - EVALUATION_S
    on_time = [
        {
            "eval_time": SOON_AFTER_FOR,
            "alertname": name,
            "exp_alerts": [
                {"exp_labels": {**TARGET, **rule.get("labels", {}), **labels}}
                for when, alert, labels in EXPECTED
                if (when, alert) == (LATE, name) and waits[name] <= due
            ],
        }
        for name, rule in ((rule["alert"], rule) for rule in _alerts(rules))
    ]
    rules_copy = tmp_path / "rules.yml"
    rules_copy.write_text(yaml.safe_dump(_without_annotations(rules), sort_keys=False))
    checks = {"alert_rule_test": [*_alert_tests(rules), *on_time]}
    result = _promtool_test(promtool, rules_copy, pages, checks, tmp_path / "restart.yml")
    assert 0 == result.returncode, result.stdout[-20_000:] + result.stderr[-5_000:]


# What a template that failed on real series leaves in an annotation: Prometheus writes
# "<error expanding template: ...>" for an error, Go's text/template "<no value>" for a
# missing field, and Go's fmt "%!" for a value of the wrong type (printf "%.2f" of a
# string).
TEMPLATE_FAILURES = ("<error expanding template", "<no value>", "%!")
# What a label or lookup that rendered empty leaves (Prometheus renders a missing label
# as ""): two spaces, a space before punctuation, empty brackets.
EMPTY_FIELD = re.compile(r"  | [.,:;)]|\(\)")
SENTINEL = "annotations are read from promtool's report"


def _got_alerts(report: str) -> list[tuple[str, str]]:
    """(labels, annotations) of each alert promtool's report says it got, as written."""
    got: list[tuple[str, str]] = []
    in_got = False
    labels = ""
    for line in map(str.strip, report.splitlines()):
        if line.startswith("got:["):
            in_got = True
        elif line.startswith("]"):
            in_got = False
        elif in_got and line.startswith("Labels:{"):
            labels = line.removeprefix("Labels:")
        elif in_got and line.startswith("Annotations:{"):
            got.append((labels, line.removeprefix("Annotations:")))
    return got


def test_the_fired_alerts_annotations_render_on_the_real_pages(
    promtool: str, pages: list[str | None], tmp_path: Path
) -> None:
    """The shipped rules, annotations and all, on the demo's pages: each EXPECTED alert's
    summary and description render without a template failure or a field left empty,
    and name what they are about. promtool (2.42) compares annotations whole, so each
    alert is expected with a sentinel annotation it cannot have, and the annotations
    promtool reports it got are the ones read."""
    rules = yaml.safe_load(RULES.read_text())
    checks = sorted({(when, alert) for when, alert, _ in EXPECTED})
    tests = [
        {
            "eval_time": when,
            "alertname": alert,
            "exp_alerts": [{"exp_annotations": {"sentinel": SENTINEL}}],
        }
        for when, alert in checks
    ]
    result = _promtool_test(
        promtool, RULES, pages, {"alert_rule_test": tests}, tmp_path / "annotations.yml"
    )
    report = result.stdout + result.stderr
    got = _got_alerts(report)
    assert len(EXPECTED) == len(got), report[-20_000:]
    names = {rule["alert"] for rule in _alerts(rules)}
    for _, alert, labels in EXPECTED:
        assert alert in names
        wanted = [f"{k}={_promql_string(v)}" for k, v in {"alertname": alert, **labels}.items()]
        (rendered,) = [a for got_labels, a in got if all(w in got_labels for w in wanted)]
        assert [] == [f for f in TEMPLATE_FAILURES if f in rendered], rendered
        assert EMPTY_FIELD.search(rendered) is None, rendered
        assert 'summary="' in rendered
        assert 'description="What it means: ' in rendered
        # Each names the device, or the container, it is about.
        about = (
            labels.get("device_id")
            or labels.get("uuid")
            or labels.get("pci_address")
            or labels["pod"]
        )
        assert about in rendered, rendered
