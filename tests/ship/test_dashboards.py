"""The Grafana dashboards: well-formed, importable as they are, and no panel empty on the demo.

The live tests run `python -m exporter --demo`, scrape it with a real Prometheus every
second, resolve each dashboard's template variables the way Grafana does ("All" of a
label_values query) and run every panel query, which must return at least one series.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from scratch import demo_environ

import exporter.collectors
from exporter.collectors.gpu_metrics import GPU_RETIRED_PAGES, GPU_RETIRED_PAGES_PENDING
from exporter.model import MetricSpec

# One worker of `make unit` runs them all: the demo and the Prometheus scraping it, started once.
pytestmark = pytest.mark.xdist_group("dashboards")

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((REPO / "dashboards").glob("*.json"))
RULES = REPO / "alerts" / "podresources-exporter.rules.yml"
EXPECTED = {"node-inventory.json", "workloads.json", "waste-placement.json", "exporter-health.json"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
JOB = "podresources-exporter"
NODE = "demo-node"
# A second target where nothing listens: an exporter that is down, which has no series but `up`.
DEAD_NODE = "dead-node"
# $node comes from the scrape targets, so that an exporter that is down is still listed.
NODE_VARIABLE = f'label_values(up{{job="{JOB}"}}, node)'
# Grafana's built-in variables, as the live test sets them: windows that 1 s scrapes over
# ~10 s of data can fill.
BUILTINS = {"__rate_interval": "10s", "__interval": "1s", "__range": "1m"}
MIN_SCRAPES = 10
LABEL_VALUES = re.compile(r"^label_values\((?:(?P<selector>.+),\s*)?(?P<label>\w+)\)$")
VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)|\[\[(\w+)\]\]")
# A regex matcher on __name__ such as podresources_container_(device_info|memory_bytes).
METRIC_ALTERNATION = re.compile(r"\b(podresources_[a-z0-9_]*)\(([a-z0-9_|]+)\)")
METRIC = re.compile(r"\b((?:podresources|process|scrape)_[a-z0-9_]+|up)\b")
# Families the demo's hardware cannot have: page retirement is for GPUs before Ampere,
# and the simulated node's are H100s, which answer NOT_SUPPORTED (as a real one does).
# Named from the collector's own specs, so a misspelt name in a rule or panel still fails.
NOT_ON_THE_DEMO = {GPU_RETIRED_PAGES.name, GPU_RETIRED_PAGES_PENDING.name}
# Selectors of series the demo's hardware cannot have within a family it has: NVLink 5's
# error types are a Blackwell GPU's, and the demo's GPUs are H100s.
NOT_ON_THE_DEMO_SELECTORS = (
    'type=~"recovery_failed|symbol|effective|malformed_packet|buffer_overrun|receive|'
    'receive_remote|receive_general|local_link_integrity"',
)
REGEX_SPECIALS = set("\\.^$*+?()[]{}|")
# A counter's rate() in Grafana's per-second units: bytes (SI or IEC) for a *_bytes_total
# family, and for any other count (errors, packets, requests) counts of some kind.
BYTE_RATE_UNITS = {"Bps", "binBps"}
COUNT_RATE_UNITS = {"cps", "ops", "pps", "reqps", "iops", "eps", "mps"}
RATE = re.compile(r"\b(?:rate|irate)\(\s*([a-z_:][a-z0-9_:]*)")
# A sum, with the labels it keeps; its argument follows the opening parenthesis.
SUM = re.compile(r"\bsum\s*(?:by\s*\(([^)]*)\)\s*)?\(")
ONE_PER_DEVICE = re.compile(r"\bmax\s+by\s*\([^)]*\)\s*\(")

Panel = dict[str, Any]
Dashboard = dict[str, Any]


def _holder_families() -> set[str]:
    """Families the exporter serves under each holder of a device (owner and device
    labels), one series per container: the collectors' MetricSpecs, less those the demo
    serves for the node alone (NUMA memory, the driver, collector errors)."""
    specs: set[str] = set()
    for module_info in pkgutil.iter_modules(exporter.collectors.__path__):
        module = importlib.import_module(f"exporter.collectors.{module_info.name}")
        specs |= {v.name for v in vars(module).values() if isinstance(v, MetricSpec)}
    demo = (REPO / "tests" / "golden" / "demo.prom").read_text()
    served = re.findall(r"^(podresources_\w+)(\{[^}]*\})? ", demo, re.MULTILINE)
    held = {name for name, labels in served if "container=" in labels}
    return specs - ({name for name, _ in served} - held)


def _argument(expr: str, start: int) -> str:
    """What the parenthesis opening at expr[start - 1] holds."""
    depth = 1
    for end in range(start, len(expr)):
        depth += {"(": 1, ")": -1}.get(expr[end], 0)
        if depth == 0:
            return expr[start:end]
    raise AssertionError(f"unbalanced: {expr}")


def _load(path: Path) -> Dashboard:
    dashboard: Dashboard = json.loads(path.read_text())
    return dashboard


def _panels(dashboard: Dashboard) -> Iterator[Panel]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def _query_panels(dashboard: Dashboard) -> list[Panel]:
    return [p for p in _panels(dashboard) if p["type"] != "row"]


def _variables(dashboard: Dashboard) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard["templating"]["list"]}


def _variable_query(variable: dict[str, Any]) -> str:
    query = variable["query"]
    return str(query["query"] if isinstance(query, dict) else query)


def _grafana_regex_escape(value: str) -> str:
    # What Grafana's Prometheus data source does to each value of a multi-value variable.
    return "".join(f"\\\\{c}" if c in REGEX_SPECIALS else c for c in value)


def _substitute(text: str, values: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = next(group for group in match.groups() if group)
        return values[name]

    return VARIABLE.sub(one, text)


@pytest.fixture(params=DASHBOARDS, ids=lambda path: path.name)
def dashboard(request: pytest.FixtureRequest) -> Dashboard:
    """One dashboard's JSON."""
    return _load(request.param)


class TestDashboardJson:
    def test_the_four_dashboards_exist(self) -> None:
        """dashboards/ holds exactly the four documented dashboards."""
        assert EXPECTED == {path.name for path in DASHBOARDS}

    def test_uids_and_titles_are_unique_and_short(self) -> None:
        """Every dashboard has its own uid (40 characters at most) and title."""
        dashboards = [_load(path) for path in DASHBOARDS]
        uids = [d["uid"] for d in dashboards]
        assert len(set(uids)) == len(uids)
        assert all(0 < len(uid) <= 40 for uid in uids)
        titles = [d["title"] for d in dashboards]
        assert len(set(titles)) == len(titles)

    def test_current_schema_and_importable_as_is(self, dashboard: Dashboard) -> None:
        """schemaVersion 39 or later, no id, no import-time inputs, tagged for cross-links."""
        assert dashboard["schemaVersion"] >= 39
        assert dashboard["id"] is None
        assert "__inputs" not in dashboard
        assert "podresources-exporter" in dashboard["tags"]

    def test_datasource_variable(self, dashboard: Dashboard) -> None:
        """A `datasource` variable of type datasource picks a Prometheus data source."""
        variable = _variables(dashboard)["datasource"]
        assert variable["type"] == "datasource"
        assert variable["query"] == "prometheus"

    def test_template_variables_are_label_values_queries(self, dashboard: Dashboard) -> None:
        """node everywhere; namespace and pod wherever pods are shown; all label_values queries."""
        variables = _variables(dashboard)
        wanted = (
            {"node"}
            if dashboard["uid"].endswith("exporter-health")
            else {
                "node",
                "namespace",
                "pod",
            }
        )
        assert wanted | {"datasource"} == set(variables)
        # Not from the exporter's own series: a dead exporter has none, and would vanish.
        assert _variable_query(variables["node"]) == NODE_VARIABLE
        for name in wanted:
            variable = variables[name]
            query = _variable_query(variable)
            match = LABEL_VALUES.match(query)
            assert match, f"{name}: {query}"
            assert match["label"] == name
            assert variable["type"] == "query"
            assert variable["datasource"] == DATASOURCE
            assert variable["definition"] == query
            assert variable["includeAll"] is True
            assert "allValue" not in variable, "All must expand to the values, not .*"

    def test_every_datasource_reference_is_the_variable(self, dashboard: Dashboard) -> None:
        """Panels and targets use ${datasource}, never a uid from someone's Grafana."""
        for panel in _query_panels(dashboard):
            assert panel["datasource"] == DATASOURCE, panel["title"]
            for target in panel["targets"]:
                assert target["datasource"] == DATASOURCE, panel["title"]

    def test_panels_have_ids_layout_and_queries(self, dashboard: Dashboard) -> None:
        """Unique ids, on the 24-column grid, each query panel with refId'd PromQL targets."""
        ids = [panel["id"] for panel in _panels(dashboard)]
        assert len(set(ids)) == len(ids)
        for panel in _panels(dashboard):
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24, panel["title"]
        for panel in _query_panels(dashboard):
            assert panel["title"].strip()
            assert panel.get("description", "").strip(), f"{panel['title']}: no description"
            targets = panel["targets"]
            assert targets, panel["title"]
            ref_ids = [t["refId"] for t in targets]
            assert len(set(ref_ids)) == len(ref_ids), panel["title"]
            assert all(t["expr"].strip() for t in targets), panel["title"]

    def test_a_panels_written_legends_are_distinct(self, dashboard: Dashboard) -> None:
        """Two queries of one panel never draw series under one legend (a GPU's temperature
        and its memory's, say), which a reader could not tell apart."""
        for panel in _query_panels(dashboard):
            legends = [
                t["legendFormat"]
                for t in panel["targets"]
                if t.get("legendFormat", "__auto") != "__auto"
            ]
            assert len(set(legends)) == len(legends), panel["title"]

    def test_workload_queries_leave_out_devices_no_pod_holds(self) -> None:
        """A family that also has series with pod="" (a GPU no pod holds, in the demo) is
        shown per workload only with pod!="", where its pod=~"$pod" alone would match them."""
        demo = (REPO / "tests" / "golden" / "demo.prom").read_text()
        unheld = set(re.findall(r'^(podresources_\w+)\{[^}]*\bpod=""', demo, re.MULTILINE))
        assert unheld  # the demo has devices no pod holds
        dashboard = _load(REPO / "dashboards" / "workloads.json")
        unfiltered = [
            f"{panel['title']} {target['refId']}"
            for panel in _query_panels(dashboard)
            for target in panel["targets"]
            if set(METRIC.findall(target["expr"])) & unheld and 'pod!=""' not in target["expr"]
        ]
        assert unfiltered == []

    def test_the_nvlink5_column_sums_what_the_alert_fires_on_as_the_crc_column_sums(
        self,
    ) -> None:
        """The GPU NVLinks table's "NVLink 5 errors" column, which the demo's H100s leave
        empty (NOT_ON_THE_DEMO_SELECTORS), so no data can check it: it sums exactly the
        types PodresourcesGPUNVLinkErrors fires on at any increase but replay and recovery
        (their own columns), per GPU and holder as the "CRC errors" column sums its two,
        the same query but for the types, and its refId is the one its header renames."""
        rules = yaml.safe_load(RULES.read_text())
        alert = next(
            rule["expr"]
            for group in rules["groups"]
            for rule in group["rules"]
            if rule.get("alert") == "PodresourcesGPUNVLinkErrors"
        )
        fired = set(re.findall(r'type=~"([^"]+)"', alert)[0].split("|")) - {"replay", "recovery"}
        dashboard = _load(REPO / "dashboards" / "node-inventory.json")
        panel = next(p for p in _query_panels(dashboard) if p["title"] == "GPU NVLinks")
        renames = {
            column: name.removeprefix("Value #")
            for transformation in panel["transformations"]
            for name, column in transformation["options"].get("renameByName", {}).items()
        }
        expr = {target["refId"]: target["expr"] for target in panel["targets"]}
        nvlink5 = expr.get(renames["NVLink 5 errors"], "")
        summed = re.findall(r'type=~"([^"]+)"', nvlink5)

        assert (fired, expr[renames["CRC errors"]]) == (
            set(summed[0].split("|")) if summed else set(),
            nvlink5.replace(summed[0], "crc_flit|crc_data") if summed else nvlink5,
        )

    def test_a_tables_renamed_and_styled_columns_are_its_own(self, dashboard: Dashboard) -> None:
        """A table's column names come from its transformation: every "Value #X" renamed
        is one of its queries (a refId changed alone leaves the header "Value #K"), every
        query of a table of several is renamed, and every column an override styles by
        name is one the table has (a header renamed alone loses its colours)."""
        wrong = []
        for panel in _panels(dashboard):
            if panel.get("type") != "table":
                continue
            renames: dict[str, str] = {}
            for transformation in panel.get("transformations", []):
                renames.update(transformation.get("options", {}).get("renameByName") or {})
            refs = {target["refId"] for target in panel.get("targets", [])}
            wrong += [
                f"{panel['title']}: {name} is no query"
                for name in renames
                if name.startswith("Value #") and name.removeprefix("Value #") not in refs
            ]
            if len(refs) > 1:
                wrong += [
                    f"{panel['title']}: Value #{ref} not renamed"
                    for ref in sorted(refs)
                    if f"Value #{ref}" not in renames
                ]
            wrong += [
                f"{panel['title']}: override of {override['matcher']['options']!r}"
                for override in panel.get("fieldConfig", {}).get("overrides", [])
                if override["matcher"]["id"] == "byName"
                and override["matcher"]["options"] not in {*renames, *renames.values()}
            ]
        assert wrong == []

    def test_every_panel_says_why_it_may_be_empty(self, dashboard: Dashboard) -> None:
        """A panel with nothing to show says so, and why (none misaligned, no exclusive
        CPUs, an opt-in collector off), instead of Grafana's bare "No data": a Grafana
        user must never meet an unexplained empty panel on a healthy node."""
        silent = [
            panel["title"]
            for panel in _query_panels(dashboard)
            if not str(panel.get("fieldConfig", {}).get("defaults", {}).get("noValue", "")).strip()
        ]
        assert silent == []

    def test_health_stats_do_not_look_healthy_without_data(self) -> None:
        """Exporter health's stats show no data in red, saying why: "0" in green (the old
        noValue) read as "nothing wrong" when no exporter answered at all."""
        health = _load(REPO / "dashboards" / "exporter-health.json")
        stats = [p for p in _query_panels(health) if p["type"] == "stat"]
        assert stats
        for panel in stats:
            defaults = panel["fieldConfig"]["defaults"]
            results = [
                m["options"]["result"]
                for m in defaults.get("mappings", [])
                if m["type"] == "special" and m["options"]["match"] in {"null", "null+nan"}
            ]
            assert results, f"{panel['title']}: no mapping for no data"
            assert all(r["color"] == "red" and r["text"].strip() for r in results), panel["title"]
            assert defaults["noValue"] not in {"0", "0%", "100%"}, panel["title"]

    def test_a_rate_is_plotted_per_second(self, dashboard: Dashboard) -> None:
        """A panel plotting a counter's rate() has a per-second unit: bytes per second for a
        *_bytes_total family, counts per second for another ("Collector errors" plotted
        errors per second as "short", a bare number an on-call engineer read as a count).
        Not a rate of a *_seconds_total family (seconds per second: CPUs, or a share of
        time), a ratio of rates, or a histogram's quantile (in the histogram's unit)."""
        wrong = []
        for panel in _query_panels(dashboard):
            unit = panel["fieldConfig"]["defaults"].get("unit")
            for target in panel["targets"]:
                expr = target["expr"]
                if "histogram_quantile(" in expr or " / " in expr:
                    continue
                for family in RATE.findall(expr):
                    if family.endswith("_seconds_total"):
                        continue
                    wanted = (
                        BYTE_RATE_UNITS if family.endswith("_bytes_total") else COUNT_RATE_UNITS
                    )
                    if unit not in wanted:
                        wrong.append(
                            f"{panel['title']} {target['refId']}: rate of {family} in {unit}"
                        )
        assert wrong == []

    def test_a_sum_over_holders_takes_each_device_once(self, dashboard: Dashboard) -> None:
        """A sum that drops `container` adds a device's series once only: each container
        holding a replica of a time-sliced GPU carries the whole GPU's figures, so the
        figure per device (max by it) comes first, as in the GPU NVLinks table. Summed
        straight, a pod whose two containers share a GPU read its energy, Xid errors and
        NVLink errors twice."""
        holder = _holder_families()
        wrong = []
        for panel in _query_panels(dashboard):
            for target in panel["targets"]:
                expr = target["expr"]
                for match in SUM.finditer(expr):
                    if "container" in (match[1] or ""):
                        continue
                    summed = _argument(expr, match.end())
                    per_device = [
                        _argument(summed, m.end()) for m in ONE_PER_DEVICE.finditer(summed)
                    ]
                    for taken in per_device:
                        summed = summed.replace(taken, "")
                    families = set(METRIC.findall(summed)) & holder
                    if families:
                        wrong.append(f"{panel['title']} {target['refId']}: {sorted(families)}")
        assert wrong == []

    def test_queries_use_only_defined_variables(self, dashboard: Dashboard) -> None:
        """Every $variable in a query is a template variable or a Grafana built-in."""
        known = set(_variables(dashboard)) | set(BUILTINS)
        for panel in _query_panels(dashboard):
            for target in panel["targets"]:
                for match in VARIABLE.finditer(target["expr"]):
                    name = next(group for group in match.groups() if group)
                    assert name in known, f"{panel['title']}: ${name}"


# ----------------------------------------------------------------------------- live


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _wait(what: str, ready: Any, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{what} exited {process.returncode}: {log.read_text()[-2000:]}")
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.2)
    pytest.fail(f"{what} not ready after 30 s: {log.read_text()[-2000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class Prometheus:
    """A Prometheus HTTP API client for the test server."""

    def __init__(self, url: str, metrics_text: str) -> None:
        self.url = url
        self.metrics_text = metrics_text  # the exporter's /metrics, for names without samples

    def api(self, path: str, **params: str | list[str]) -> Any:
        query = urllib.parse.urlencode(params, doseq=True)
        status, body = _get(f"{self.url}/api/v1/{path}?{query}")
        reply = json.loads(body)
        if status != 200 or reply.get("status") != "success":
            raise AssertionError(f"{path} {params}: {status} {reply.get('error', body[:300])}")
        return reply["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result if data["resultType"] == "vector" else [data]


@pytest.fixture(scope="module")
def demo_prometheus(
    prometheus: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    """The demo exporter scraped every second by a real Prometheus, with a few scrapes done."""
    workdir = tmp_path_factory.mktemp("demo-prometheus")
    exporter_port, prometheus_port = _free_port(), _free_port()
    exporter_log = workdir / "exporter.log"
    exporter_url = f"http://127.0.0.1:{exporter_port}"
    with exporter_log.open("wb") as log:
        exporter = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "exporter",
                "--demo",
                "--web.listen-address",
                f"127.0.0.1:{exporter_port}",
                "--poll.interval",
                "1",
                # Collectors must finish within one 1 s poll.
                "--collector.timeout",
                "0.8",
                # GPM measured at each poll: its panels must have data within the
                # seconds this test runs, not from the first measurement 30 s on.
                "--collector.nvml.gpm-interval",
                "0",
                "--log.level",
                "warning",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=demo_environ(os.environ),
        )
    try:
        _wait(
            "exporter --demo",
            lambda: _get(f"{exporter_url}/readyz")[0] == 200,
            exporter,
            exporter_log,
        )
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": JOB,
                    "static_configs": [
                        {"targets": [f"127.0.0.1:{exporter_port}"], "labels": {"node": NODE}},
                        {"targets": [f"127.0.0.1:{_free_port()}"], "labels": {"node": DEAD_NODE}},
                    ],
                }
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        prometheus_log = workdir / "prometheus.log"
        with prometheus_log.open("wb") as log:
            server = subprocess.Popen(
                [
                    prometheus,
                    f"--config.file={workdir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{prometheus_port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            url = f"http://127.0.0.1:{prometheus_port}"
            client = Prometheus(url, metrics_text="")

            def scraped_enough() -> bool:
                if _get(f"{url}/-/ready")[0] != 200:
                    return False
                samples = client.query(f'count_over_time(up{{job="{JOB}"}}[1m])')
                return len(samples) == 2 and all(
                    float(sample["value"][1]) >= MIN_SCRAPES for sample in samples
                )

            _wait("prometheus", scraped_enough, server, prometheus_log)
            # Read after several polls: GPM's families have samples from the second on.
            client.metrics_text = _get(f"{exporter_url}/metrics")[1].decode()
            yield client
        finally:
            _stop(server)
    finally:
        _stop(exporter)


def _resolve_variables(
    dashboard: Dashboard, client: Prometheus, failures: list[str]
) -> dict[str, str]:
    """Each template variable's "All" value as Grafana builds it, in definition order."""
    values = dict(BUILTINS)
    for variable in dashboard["templating"]["list"]:
        name = variable["name"]
        if variable["type"] == "datasource":
            values[name] = "prometheus"
            continue
        match = LABEL_VALUES.match(_variable_query(variable))
        assert match, name
        params: dict[str, str | list[str]] = {}
        if match["selector"]:
            params["match[]"] = [_substitute(match["selector"], values)]
        found = sorted(v for v in client.api(f"label/{match['label']}/values", **params) if v)
        if not found:
            failures.append(f"variable ${name}: {_variable_query(variable)} has no values")
            found = ["no-value"]
        escaped = [_grafana_regex_escape(v) for v in found]
        values[name] = escaped[0] if len(escaped) == 1 else f"({'|'.join(escaped)})"
    return values


def test_every_panel_query_returns_data_on_the_demo(
    demo_prometheus: Prometheus, dashboard: Dashboard
) -> None:
    """Every panel target, variables set to "All", returns at least one series from the demo
    (but those of families or series the demo's hardware cannot have, NOT_ON_THE_DEMO and
    NOT_ON_THE_DEMO_SELECTORS)."""
    failures: list[str] = []
    values = _resolve_variables(dashboard, demo_prometheus, failures)
    for panel in _query_panels(dashboard):
        for target in panel["targets"]:
            expr = _substitute(target["expr"], values)
            try:
                result = demo_prometheus.query(expr)
            except AssertionError as error:
                failures.append(f"{panel['title']!r} {target['refId']}: {error}")
                continue
            if not result and not (
                set(METRIC.findall(expr)) <= NOT_ON_THE_DEMO
                or any(selector in expr for selector in NOT_ON_THE_DEMO_SELECTORS)
            ):
                failures.append(f"{panel['title']!r} {target['refId']}: no data for {expr}")
    assert not failures, f"{dashboard['title']}:\n  " + "\n  ".join(failures)


def test_demo_exports_every_metric_the_dashboards_and_alerts_use(
    demo_prometheus: Prometheus,
) -> None:
    """Each metric named in a dashboard or alert rule is a family the demo exporter declares."""
    exported = set(re.findall(r"^# TYPE (\S+) (\S+)", demo_prometheus.metrics_text, re.MULTILINE))
    families = {name for name, _ in exported}
    histograms = {name for name, kind in exported if kind == "histogram"}
    used: dict[str, set[str]] = {}
    texts = [(path.name, path.read_text()) for path in DASHBOARDS]
    texts.append((RULES.name, RULES.read_text()))
    for where, text in texts:
        for prefix, alternatives in METRIC_ALTERNATION.findall(text):
            for alternative in alternatives.split("|"):
                used.setdefault(prefix + alternative, set()).add(where)
        for name in METRIC.findall(METRIC_ALTERNATION.sub("", text)):
            used.setdefault(name, set()).add(where)
    prometheus_own = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
    missing = []
    for name, where in sorted(used.items()):
        family = re.sub(r"_(bucket|sum|count)$", "", name)
        if name in prometheus_own or name in families or family in histograms:
            continue
        if name in NOT_ON_THE_DEMO:
            continue
        missing.append(f"{name} (used in {', '.join(sorted(where))})")
    assert not missing, "not exported by the demo: " + "; ".join(missing)


def test_an_exporter_that_is_down_is_listed_and_counted(demo_prometheus: Prometheus) -> None:
    """A target Prometheus cannot scrape is one of $node's values on every dashboard, and
    the stats that count exporters count it as down: built on the exporter's own series,
    which a dead exporter does not have, they showed a dead node nowhere and stayed green."""
    down = {
        "exporter-health.json": "Exporters down",
        "node-inventory.json": "Nodes not reporting",
    }
    for path in DASHBOARDS:
        dashboard = _load(path)
        failures: list[str] = []
        values = _resolve_variables(dashboard, demo_prometheus, failures)
        assert not failures, failures
        assert {NODE, DEAD_NODE} <= set(values["node"].strip("()").split("|")), path.name
        if path.name not in down:
            continue
        (panel,) = [p for p in _query_panels(dashboard) if p["title"] == down[path.name]]
        (target,) = panel["targets"]
        (sample,) = demo_prometheus.query(_substitute(target["expr"], values))
        assert float(sample["value"][1]) == 1, f"{path.name}: {panel['title']}"
        # With only the live exporter selected, nothing is down: 0, not "no data".
        (sample,) = demo_prometheus.query(_substitute(target["expr"], {**values, "node": NODE}))
        assert float(sample["value"][1]) == 0, f"{path.name}: {panel['title']}"


def _panel_query(title: str, ref: str = "A", dashboard: str = "node-inventory.json") -> str:
    """A panel's query, its variables all nodes, namespaces and pods, and its windows the
    10 minutes the given series below run."""
    panel = next(
        p for p in _query_panels(_load(REPO / "dashboards" / dashboard)) if p["title"] == title
    )
    expr: str = next(t["expr"] for t in panel["targets"] if t["refId"] == ref)
    every = {"node": ".*", "namespace": ".*", "pod": ".*"}
    return _substitute(expr, {**every, "__rate_interval": "10m", "__range": "10m"})


def _promtool_passes(promtool: str, tmp_path: Path, tests: dict[str, Any]) -> None:
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert 0 == result.returncode, result.stdout + result.stderr


def test_gpu_counts_per_gpu_and_problem_on_given_series(promtool: str, tmp_path: Path) -> None:
    """What the demo cannot show, its GPUs healthy (every value 0): on series of a node
    with faults, through promtool, the GPU NVLinks table's "fabric problems" counts the
    problems each GPU has (two, not 1 as a max would say) on each holder's row, and
    "GPUs waiting for a recovery" counts the GPUs asked one, once however many pods
    share one, not those asked none."""

    def held(metric: str, device: str, pod: str, issue: str = "") -> str:
        labels = f'node="n1", namespace="ml", resource="nvidia.com/gpu", device_id="{device}"'
        extra = f', issue="{issue}"' if issue else ""
        return f'{metric}{{{labels}, pod="{pod}"{extra}}}'

    fabric, recovery = "podresources_gpu_fabric_health_issue", "podresources_gpu_recovery_action_id"
    series = [
        # GPU-A, shared by pods a and b: degraded bandwidth and a route being recovered.
        *(
            (held(fabric, "GPU-A", pod, issue), value)
            for pod in ("a", "b")
            for issue, value in (("degraded_bandwidth", 1), ("route_recovery", 1))
        ),
        (held(fabric, "GPU-A", "a", "route_unhealthy"), 0),
        # GPU-B: the fabric reports no problem.
        (held(fabric, "GPU-B", "c", "route_unhealthy"), 0),
        # Recovery actions: a reset (GPU-A, both pods), none (GPU-B), drain P2P (GPU-C).
        (held(recovery, "GPU-A", "a"), 1),
        (held(recovery, "GPU-A", "b"), 1),
        (held(recovery, "GPU-B", "c"), 0),
        (held(recovery, "GPU-C", ""), 3),
    ]
    holder = '{{device_id="{}", namespace="ml", node="n1", pod="{}", resource="nvidia.com/gpu"}}'
    tests = {
        "rule_files": [],
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": name, "values": f"{value}x5"} for name, value in series
                ],
                "promql_expr_test": [
                    {
                        "expr": _panel_query("GPU NVLinks", "J"),
                        "eval_time": "2m",
                        "exp_samples": [
                            {"labels": holder.format("GPU-A", "a"), "value": 2},
                            {"labels": holder.format("GPU-A", "b"), "value": 2},
                            {"labels": holder.format("GPU-B", "c"), "value": 0},
                        ],
                    },
                    {
                        "expr": _panel_query("GPUs waiting for a recovery"),
                        "eval_time": "2m",
                        "exp_samples": [{"labels": '{node="n1"}', "value": 2}],
                    },
                ],
            }
        ],
    }
    _promtool_passes(promtool, tmp_path, tests)


def test_a_gpu_two_containers_of_a_pod_hold_counts_once_for_the_pod(
    promtool: str, tmp_path: Path
) -> None:
    """Two containers of one pod holding replicas of one time-sliced GPU each carry the
    whole GPU's figures, a series each: the pod's GPU energy, its Xid errors by code and
    its NVLink errors of the day take the GPU once (as the NVLinks table's other columns
    do), where a sum over the containers read twice what the GPU counted."""

    def held(metric: str, container: str, extra: str = "") -> str:
        labels = 'node="n1", namespace="ml", pod="p", resource="nvidia.com/gpu.shared"'
        return f'{metric}{{{labels}, device_id="GPU-S", container="{container}"{extra}}}'

    series = [
        (held(name, container, extra), values)
        for container in ("a", "b")
        for name, extra, values in (
            ("podresources_gpu_energy_joules_total", "", "0+600x10"),
            ("podresources_gpu_xid_errors_by_code_total", ', xid="13"', "1x10"),
            ("podresources_gpu_nvlink_errors_total", ', type="replay"', "0+1x10"),
        )
    ]
    row = 'device_id="GPU-S", namespace="ml", node="n1", pod="p", resource="nvidia.com/gpu.shared"'
    energy = _panel_query("GPU energy over the time range, by pod", dashboard="workloads.json")
    tests = {
        "rule_files": [],
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": name, "values": values} for name, values in series],
                "promql_expr_test": [
                    {
                        "expr": energy,
                        "eval_time": "10m",
                        "exp_samples": [{"labels": '{namespace="ml", pod="p"}', "value": 6000}],
                    },
                    {
                        "expr": _panel_query("GPU Xid errors"),
                        "eval_time": "10m",
                        "exp_samples": [{"labels": f'{{{row}, xid="13"}}', "value": 1}],
                    },
                    {
                        "expr": _panel_query("GPU NVLinks", "H"),
                        "eval_time": "10m",
                        "exp_samples": [{"labels": f"{{{row}}}", "value": 10}],
                    },
                ],
            }
        ],
    }
    _promtool_passes(promtool, tmp_path, tests)


def test_an_interface_counting_one_direction_shows_its_errors(
    promtool: str, tmp_path: Path
) -> None:
    """An ice VF's representor counts its VF's transmit errors but no receive errors
    (netdev's _REPRESENTED_VF_COUNTERS): "Network errors and drops" shows them, where
    adding the two directions' rates with + matched no receive series and dropped the
    interface from the panel."""
    labels = (
        'node="n1", namespace="ml", pod="p", container="c", resource="intel.com/ice_vf", '
        'device_id="0000:4b:01.0", interface="ens1f0np0/vf0"'
    )
    series = {
        f"podresources_net_transmit_errors_total{{{labels}}}": "0+60x10",
        f"podresources_net_receive_drops_total{{{labels}}}": "0+60x10",
        f"podresources_net_transmit_drops_total{{{labels}}}": "0+60x10",
    }
    row = '{container="c", interface="ens1f0np0/vf0", namespace="ml", pod="p"}'
    tests = {
        "rule_files": [],
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": name, "values": v} for name, v in series.items()],
                "promql_expr_test": [
                    {
                        "expr": _panel_query("Network errors and drops", ref, "workloads.json"),
                        "eval_time": "10m",
                        "exp_samples": [{"labels": row, "value": per_second}],
                    }
                    for ref, per_second in (("A", 1), ("B", 2))
                ],
            }
        ],
    }
    _promtool_passes(promtool, tmp_path, tests)
