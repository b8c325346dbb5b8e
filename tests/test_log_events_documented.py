"""Every log event the exporter can emit has a row in docs/operations.md's troubleshooting,
and every row names an event the exporter emits, at the level the row gives."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEVELS = {"debug", "info", "warning", "error", "exception"}


def emitted_events() -> set[str]:
    """Event names from the source: log calls with a literal event, OutageLog and Throttle."""
    return set(emitted_levels())


def emitted_levels() -> dict[str, set[str]]:
    """Each event the source logs by name -> the levels it is logged at (``exception``
    is ``error``; a Throttle logs warnings; an OutageLog warns of failures and tells
    recoveries at info; a RepeatedFailure logs failures as errors, recoveries at info)."""
    events: dict[str, set[str]] = {}
    for path in (ROOT / "exporter").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            first = node.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in LEVELS and first.value.isidentifier():
                level = "error" if name == "exception" else name
                events.setdefault(first.value, set()).add(level)
            elif name == "OutageLog":
                for end, level in (
                    ("failed", "warning"),
                    ("failure_changed", "warning"),
                    ("recovered", "info"),
                ):
                    events.setdefault(f"{first.value}_{end}", set()).add(level)
            elif name == "Throttle":
                events.setdefault(first.value, set()).add("warning")
            elif name == "RepeatedFailure":
                events.setdefault(f"{first.value}_failed", set()).add("error")
                events.setdefault(f"{first.value}_recovered", set()).add("info")
    return events


def documented_levels() -> dict[str, str]:
    """The troubleshooting tables' events -> the level their row gives (a row of two
    events gives two levels, "warning, info"; "warning (info for `Get`)" is warning)."""
    docs = (ROOT / "docs" / "operations.md").read_text()
    section = docs[docs.index("## Troubleshooting") : docs.index("## Upgrade notes")]
    levels: dict[str, str] = {}
    in_events = False
    for line in section.splitlines():
        if line.startswith("| event | level |"):
            in_events = True
        elif not line.startswith("|"):
            in_events = False
        elif in_events and line.startswith("| `"):
            events_cell, level_cell = (c.strip() for c in line.strip("|").split("|")[:2])
            names = re.findall(r"`(\w+)`", events_cell)
            words = [w.split(" (")[0] for w in level_cell.split(", ")]
            if len(words) != len(names):
                words = words[:1] * len(names)  # one level for every event of the row
            levels.update(zip(names, words, strict=True))
    return levels


def test_every_event_is_in_the_troubleshooting_section() -> None:
    """An event added to the code without its row in the docs fails here."""
    docs = (ROOT / "docs" / "operations.md").read_text()
    section = docs[docs.index("## Troubleshooting") :]
    found = emitted_events()
    assert {"kubelet_failed", "accept_failed", "stopping"} <= found  # the scan works
    assert [] == sorted(e for e in found if f"`{e}`" not in section)


def test_every_documented_event_is_logged_at_its_level() -> None:
    """Each event a troubleshooting row names is one the source logs, at the level the
    row gives: a row left behind by a renamed event, or a level changed in the code
    alone, fails here."""
    emitted = emitted_levels()
    documented = documented_levels()
    source = "".join(p.read_text() for p in (ROOT / "exporter").rglob("*.py"))
    assert {"kubelet_failed", "stopping", "tls_handshake_failed"} <= documented.keys()
    # An event whose level is chosen at run time (level = log.info if ... else log.warning)
    # is only found by name.
    assert [] == sorted(e for e in documented if e not in emitted and f'"{e}"' not in source)
    assert {} == {
        event: (level, sorted(emitted[event]))
        for event, level in documented.items()
        if event in emitted and level not in emitted[event]
    }
