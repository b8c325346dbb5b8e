"""The alert rules: valid for promtool, unit-tested per group, and shipped twice without drift.

``alerts/podresources-exporter.rules.yml`` is the source; the Prometheus Operator's copy,
``manifests/components/prometheus-operator/prometheusrule.yaml``, is generated from it:
``python tests/ship/test_rules.py`` rewrites it.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "alerts" / "podresources-exporter.rules.yml"
UNIT_TESTS = REPO / "alerts" / "tests"
PROMETHEUS_RULE = REPO / "manifests" / "components" / "prometheus-operator" / "prometheusrule.yaml"
GROUP_PREFIX = "podresources-exporter."
SEVERITIES = {"critical", "warning", "info"}
RUNBOOK_PARTS = ("What it means:", "Likely causes:", "Check first:")

_PROMETHEUS_RULE_HEADER = """\
# GENERATED from alerts/podresources-exporter.rules.yml by `python tests/ship/test_rules.py`;
# edit that file and regenerate (tests/ship/test_rules.py fails when the two differ).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: podresources-exporter
  labels:
    app.kubernetes.io/name: podresources-exporter
spec:
"""


def render_prometheus_rule(rules_text: str) -> str:
    """The PrometheusRule manifest carrying the groups of a plain rules file, comments and all."""
    lines = rules_text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("groups:"))
    body = "\n".join(f"  {line}" if line else "" for line in lines[start:])
    return _PROMETHEUS_RULE_HEADER + body + "\n"


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = _load(RULES)["groups"]
    return groups


def _alerts() -> list[dict[str, Any]]:
    return [rule for group in _groups() for rule in group["rules"] if "alert" in rule]


def _unit_test_files(group_name: str) -> list[Path]:
    """The group's unit tests: <group>.yml, and <group>.<part>.yml for cases that need an
    evaluation_interval of their own (hardware.day.yml: a day, at 5-minute steps)."""
    short = group_name.removeprefix(GROUP_PREFIX)
    return [UNIT_TESTS / f"{short}.yml", *sorted(UNIT_TESTS.glob(f"{short}.*.yml"))]


def test_promtool_checks_rules(promtool: str) -> None:
    """`promtool check rules` accepts the rules file."""
    result = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _group_text(name: str) -> str:
    """One group of the rules file, its text as it stands, as a rules file of its own."""
    text = RULES.read_text()
    starts = [match.start() for match in re.finditer(r"^  - name: ", text, re.MULTILINE)]
    for start, end in zip(starts, [*starts[1:], len(text)], strict=True):
        if text.startswith(f"  - name: {name}\n", start):
            return "groups:\n" + text[start:end]
    raise LookupError(name)


def test_promtool_unit_tests_pass(promtool: str, tmp_path: Path) -> None:
    """Every alert unit test in alerts/tests passes under `promtool test rules`, each file
    against its own group, cut from the shipped file as it stands, the files side by
    side. promtool evaluates every group it loads at every step of every case, and no
    group reads another's (test_groups_read_nothing_of_each_other): the other groups
    only cost time (placement.yml: 2.7 s of CPU alone, 18.9 s beside them)."""
    copies = []
    for group in _groups():
        rules = tmp_path / f"{group['name']}.rules.yml"
        rules.write_text(_group_text(group["name"]))
        assert [group] == _load(rules)["groups"]
        for path in _unit_test_files(group["name"]):
            text = path.read_text()
            shipped = f"\nrule_files:\n- ../{RULES.name}\n"
            assert text.count(shipped) == 1, path
            copy = tmp_path / path.name
            copy.write_text(text.replace(shipped, f"\nrule_files:\n- {rules.name}\n"))
            copies.append(copy)

    def run(copy: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [promtool, "test", "rules", copy.name],
            capture_output=True,
            text=True,
            check=False,
            cwd=tmp_path,
        )

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(run, copies))
    assert [] == [result.stdout + result.stderr for result in results if result.returncode]


def test_one_unit_test_file_per_group() -> None:
    """Each rule group has its own alerts/tests/<group>.yml, maybe <group>.<part>.yml
    files beside it, and there are no strays."""
    expected = {path.name for group in _groups() for path in _unit_test_files(group["name"])}
    assert all(group["name"].startswith(GROUP_PREFIX) for group in _groups())
    assert expected == {path.name for path in UNIT_TESTS.glob("*.yml")}


def test_every_alert_fires_and_stays_silent_in_its_group_file() -> None:
    """Each alert has a case where it fires and one where it must not, in its group's files."""
    for group in _groups():
        paths = _unit_test_files(group["name"])
        checks = [
            check
            for path in paths
            for case in _load(path)["tests"]
            for check in case.get("alert_rule_test", [])
        ]
        for rule in (rule for rule in group["rules"] if "alert" in rule):
            name = rule["alert"]
            mine = [check for check in checks if check["alertname"] == name]
            assert any(check.get("exp_alerts") for check in mine), f"{name} never fires in {paths}"
            assert any(not check.get("exp_alerts") for check in mine), (
                f"{name} has no silent case in {paths}"
            )
        tested = {check["alertname"] for check in checks}
        alerts = {rule.get("alert") for rule in group["rules"]}
        assert tested <= alerts, f"{paths} test other groups"


MAX_STEPS_A_CASE = 360


def test_unit_test_cases_take_few_steps() -> None:
    """promtool evaluates every rule of the group, and the annotations of every alert
    pending or firing, at each evaluation_interval up to a case's last eval_time: ~10 ms
    of CPU a step of the hardware group here, 15 s for a day at 1 minute. Cases about a
    day go to a <group>.<part>.yml evaluated every 5 minutes (hardware.day.yml)."""
    steps = {}
    for path in sorted(UNIT_TESTS.glob("*.yml")):
        unit = _load(path)
        interval = _seconds(unit.get("evaluation_interval", "1m"))
        for case in unit["tests"]:
            checks = case.get("alert_rule_test", []) + case.get("promql_expr_test", [])
            steps[f"{path.name}: {case['name']}"] = max(
                _seconds(check["eval_time"]) // interval for check in checks
            )
    assert len(steps) > 100
    assert {} == {case: n for case, n in steps.items() if n > MAX_STEPS_A_CASE}


def _reads(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", text) is not None


def _rule_text(rule: dict[str, Any]) -> str:
    return "\n".join(
        [rule["expr"], *rule.get("annotations", {}).values(), *rule.get("labels", {}).values()]
    )


def test_recorded_series_are_made_before_they_are_read() -> None:
    """A rule that reads a recorded series comes after its recording rule, in its group:
    rules of a group run in order and see that evaluation's results, while another
    group's (or a later rule's) would be one evaluation old, or missing at the first."""
    recorded = [
        rule["record"] for group in _groups() for rule in group["rules"] if "record" in rule
    ]
    misplaced = []
    for group in _groups():
        made: set[str] = set()
        for rule in group["rules"]:
            name = rule.get("alert") or rule["record"]
            text = _rule_text(rule)
            misplaced += [
                f"{name} reads {r}" for r in recorded if r not in made and _reads(text, r)
            ]
            if "record" in rule:
                made.add(rule["record"])
    assert (True, []) == (bool(recorded), misplaced)


def test_groups_read_nothing_of_each_other() -> None:
    """No rule reads the alerts' own series (ALERTS, ALERTS_FOR_STATE), and records are
    read in their own group only (test above): each group fires the same alone as in the
    whole file, so its unit tests can load it alone."""
    reading = [
        f"{rule.get('alert') or rule['record']} reads {name}"
        for group in _groups()
        for rule in group["rules"]
        for name in ("ALERTS", "ALERTS_FOR_STATE")
        if _reads(_rule_text(rule), name)
    ]
    assert [] == reading


def _subqueries(expr: str) -> list[tuple[str, str, str]]:
    """Each subquery of ``expr`` (``(...)[10m:1m]``): its expression, range and step."""
    found = []
    for match in re.finditer(r"\)\[([^\]:]*):([^\]]*)\]", expr):
        depth, i = 0, match.start()
        while i >= 0:
            depth += {")": 1, "(": -1}.get(expr[i], 0)
            if depth == 0:
                break
            i -= 1
        found.append((expr[i : match.start() + 1], match.group(1), match.group(2)))
    return found


def _looked_back(expr: str, *, memories: set[str]) -> list[str]:
    """The parts of ``expr`` evaluated at past times: each subquery's expression
    (``(...)[10m:1m]``) and each range selector's series (``name{...}[5m]``), but for
    a day's memory of a device's record, one of ``memories``
    (``max_over_time(device:...:max[1d])``)."""
    parts = [text for text, _, _ in _subqueries(expr)]
    for match in re.finditer(r"([\w:]+)(?:\{[^}]*\})?\[[0-9]+[smhdwy]\]", expr):
        memory = re.search(r"max_over_time\(\s*$", expr[: match.start()])
        if not (memory and match[1] in memories):
            parts.append(match[1])
    return parts


_OWNER_LABELS = ("namespace", "pod", "container")


def _memory_records() -> set[str]:
    """The records that remember a device's value: a max by labels that name the device,
    never its holder, so that a change of holders is no new series and leaves the
    memory whole."""
    memory = set()
    for group in _groups():
        for rule in group["rules"]:
            by = re.match(r"\s*max by \(([^)]*)\)", rule.get("expr", ""))
            if "record" in rule and by and not set(_OWNER_LABELS) & set(re.split(r",\s*", by[1])):
                memory.add(rule["record"])
    return memory


# Each label_replace that reads device_id: (destination, replacement, regex). A cut is one
# whose regex is not "(.*)" (a plain copy of the ID, as into a fallback's uuid).
_READS_DEVICE_ID = re.compile(r'"(\w+)", "([^"]*)", "device_id", "([^"]*)"\s*\)')
# In every copy of the cut, and nowhere else: its first form.
_CUT_MARK = "(.+)::[0-9]+"


def test_no_recorded_series_is_read_back_in_time() -> None:
    """A recorded series exists from its rule's first evaluation on, and at a past step
    is up to one evaluation old: a subquery or range over it would lose an increase
    at a rollout of the rules or a GPU's change of hands. Those alerts write the join
    out, the same as the recording rule's. The one exception is a day's memory of a
    device's value, `max_over_time` of a record by the device, never its holders: a
    change of hands leaves it whole, and a rollout starts it (docs/operations.md says
    so)."""
    recorded = [
        rule["record"] for group in _groups() for rule in group["rules"] if "record" in rule
    ]
    memories = _memory_records()
    assert set(recorded) > memories
    back = [
        f"{rule.get('alert') or rule['record']} reads {name} back in time"
        for group in _groups()
        for rule in group["rules"]
        for part in _looked_back(rule["expr"], memories=memories)
        for name in recorded
        if _reads(part, name)
    ]
    assert [] == back
    # The written-out joins cut replica IDs as the recording rule does: a new replica ID
    # form is cut in every copy, those to the uuid and to the pci_address, in the
    # expressions and in the annotations' queries alike, and in the device alerts that
    # cut their own device_id.
    texts = [
        text
        for group in _groups()
        for rule in group["rules"]
        for text in (rule["expr"], *rule.get("annotations", {}).values())
    ]
    copies = sum(text.count(_CUT_MARK) for text in texts)
    cuts = [
        (into, replacement, regex)
        for text in texts
        for into, replacement, regex in _READS_DEVICE_ID.findall(text)
        if regex != "(.*)"
    ]
    forms = {(replacement, regex) for _, replacement, regex in cuts}
    assert (copies, 1) == (len(cuts), len(forms)), forms
    assert {into for into, _, _ in cuts} <= {"physical_id", "device_id"}


_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
MAX_SUBQUERY_STEPS = 10


def _seconds(duration: str) -> int:
    parts = re.findall(r"([0-9]+)([smhdwy])", duration)
    assert "".join(n + unit for n, unit in parts) == duration, duration
    return sum(int(n) * _SECONDS[unit] for n, unit in parts)


def test_subqueries_take_few_steps() -> None:
    """A subquery evaluates its expression over every series it selects at each of its
    steps, every evaluation: a day at 5-minute steps is 288 times, over every holder's
    series of every device (docs/benchmarks.md, "Rules that remember a day"). A longer
    memory reads a recording rule with max_over_time, in expressions and in the
    annotations' queries alike."""
    steps = {
        f"{rule.get('alert') or rule['record']}: [{window}:{step}]": _seconds(window)
        // _seconds(step or "1m")
        for group in _groups()
        for rule in group["rules"]
        for text in (rule["expr"], *rule.get("annotations", {}).values())
        for _, window, step in _subqueries(text)
    }
    assert steps
    assert {} == {where: n for where, n in steps.items() if n > MAX_SUBQUERY_STEPS}


def _cut_forms() -> list[tuple[str, str]]:
    """The cut's forms, as (the device's own ID, the replica's suffix): (".+", "::[0-9]+"),
    ("nvidia[0-9]+(?:/gi[0-9]+)?", "/vgpu[0-9]+"), ...; the last, "(.+)", is no replica."""
    record = next(
        rule
        for group in _groups()
        for rule in group["rules"]
        if rule.get("record") == "physical_device:podresources_device_info:max"
    )
    found = _READS_DEVICE_ID.search(record["expr"])
    assert found is not None
    forms = []
    for alternative in found.group(3).split("|")[:-1]:
        depths = itertools.accumulate({"(": 1, ")": -1}.get(char, 0) for char in alternative)
        end = next(i for i, depth in enumerate(depths) if depth == 0)
        forms.append((alternative[1:end], alternative[end + 1 :]))
    return forms


def test_replica_selectors_know_every_form_the_cut_knows() -> None:
    """An alert that cuts its own device_id to the device's gives on-call a selector for
    all of the device's IDs: every replica suffix the cut strips, after the IDs it strips
    it from (any ID for `::n`, nvidiaN[/giM] for `/vgpuN`, ...)."""
    forms = _cut_forms()
    assert (".+", "::[0-9]+") in forms
    cutting = [
        rule
        for group in _groups()
        for rule in group["rules"]
        if "alert" in rule
        and any(
            into == "device_id" and regex != "(.*)"
            for into, _, regex in _READS_DEVICE_ID.findall(rule["expr"])
        )
    ]
    missing = [
        f"{rule['alert']}: {own} {suffix}"
        for rule in cutting
        for own, suffix in forms
        if suffix not in rule["annotations"]["description"]
        or (
            own != ".+"
            and f"match `^{own}$` $labels.device_id" not in rule["annotations"]["description"]
        )
    ]
    assert (2, []) == (len(cutting), missing)


def test_unit_tests_load_the_shipped_rules_file() -> None:
    """Each unit-test file loads alerts/podresources-exporter.rules.yml and nothing else."""
    for path in sorted(UNIT_TESTS.glob("*.yml")):
        rule_files = [(UNIT_TESTS / name).resolve() for name in _load(path)["rule_files"]]
        assert [RULES] == rule_files, path


@pytest.mark.parametrize("alert", _alerts(), ids=lambda rule: rule["alert"])
def test_alert_has_severity_and_runbook_annotations(alert: dict[str, Any]) -> None:
    """An alert carries a known severity, a summary and a what/why/check-first description."""
    assert alert["labels"]["severity"] in SEVERITIES
    assert alert["alert"].startswith("Podresources")
    assert alert["annotations"]["summary"].strip()
    description = alert["annotations"]["description"]
    positions = [description.find(part) for part in RUNBOOK_PARTS]
    assert -1 not in positions, f"{alert['alert']}: description lacks one of {RUNBOOK_PARTS}"
    assert positions == sorted(positions), f"{alert['alert']}: runbook parts out of order"


def test_alert_names_are_unique() -> None:
    """No two alerts share a name."""
    names = [alert["alert"] for alert in _alerts()]
    assert sorted(set(names)) == sorted(names)


def test_prometheus_rule_carries_the_same_groups() -> None:
    """The operator's PrometheusRule holds exactly the rules file's groups."""
    prometheus_rule = _load(PROMETHEUS_RULE)
    assert prometheus_rule["kind"] == "PrometheusRule"
    assert _load(RULES)["groups"] == prometheus_rule["spec"]["groups"], (
        "PrometheusRule drifted from the rules file: run python tests/ship/test_rules.py"
    )


def test_prometheus_rule_is_freshly_generated() -> None:
    """The PrometheusRule file is byte-for-byte what the generator writes, comments included."""
    assert render_prometheus_rule(RULES.read_text()) == PROMETHEUS_RULE.read_text(), (
        "regenerate with: python tests/ship/test_rules.py"
    )


if __name__ == "__main__":
    PROMETHEUS_RULE.write_text(render_prometheus_rule(RULES.read_text()))
    print(f"wrote {PROMETHEUS_RULE.relative_to(REPO)}", file=sys.stderr)
