"""Every log event the exporter can emit has a row in docs/operations.md's troubleshooting."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEVELS = {"debug", "info", "warning", "error", "exception"}


def emitted_events() -> set[str]:
    """Event names from the source: log calls with a literal event, OutageLog and Throttle."""
    events: set[str] = set()
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
                events.add(first.value)
            elif name == "OutageLog":
                events |= {
                    f"{first.value}_{end}" for end in ("failed", "failure_changed", "recovered")
                }
            elif name == "Throttle":
                events.add(first.value)
    return events


def test_every_event_is_in_the_troubleshooting_section() -> None:
    """An event added to the code without its row in the docs fails here."""
    docs = (ROOT / "docs" / "operations.md").read_text()
    section = docs[docs.index("## Troubleshooting") :]
    found = emitted_events()
    assert {"kubelet_failed", "accept_failed", "stopping"} <= found  # the scan works
    assert [] == sorted(e for e in found if f"`{e}`" not in section)
