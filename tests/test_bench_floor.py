"""bench.py's decode floor reads every field of the kubelet's replies.

The floor is what issue 11's poll targets are ratios of. With upb, parsing makes no
Python objects: a field the floor leaves unread costs it nothing that the exporter,
which reads them all, pays, and the ratios come out too high (it read a third of the
fields until 2026-11-25). A field the proto gains must be read by the floor too.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from exporter.kubelet.api.v1 import api_pb2 as v1

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench.py"


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
