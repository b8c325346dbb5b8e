"""The committed gRPC stubs are exactly what scripts/generate_stubs.py makes from proto/."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ROOT / "exporter" / "kubelet" / "api"


def _load_generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "generate_stubs", ROOT / "scripts/generate_stubs.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["generate_stubs"] = module
    spec.loader.exec_module(module)
    return module


def _tree(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): path.read_text()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.name != "__init__.py"
    }


def test_committed_stubs_match_proto(tmp_path: Path) -> None:
    """Regenerating from proto/ gives byte-identical stubs (run `make stubs` if not)."""
    _load_generator().generate(tmp_path)
    fresh = _tree(tmp_path / "exporter" / "kubelet" / "api")
    assert sorted(fresh) == sorted(_tree(GENERATED))
    assert fresh == _tree(GENERATED), "stubs drifted from proto/: run `make stubs`"


def test_wire_names_are_the_kubelets() -> None:
    """Service and message names on the wire are v1.PodResourcesLister and friends."""
    from exporter.kubelet.api.v1 import api_pb2
    from exporter.kubelet.api.v1alpha1 import api_pb2 as alpha

    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert [m.name for m in service.methods] == ["List", "GetAllocatableResources", "Get"]
    assert alpha.DESCRIPTOR.services_by_name["PodResourcesLister"].full_name == (
        "v1alpha1.PodResourcesLister"
    )
    dynamic = api_pb2.DynamicResource.DESCRIPTOR
    assert [f.number for f in dynamic.fields] == [2, 3, 4]  # 1 (class_name) is reserved
    claim = api_pb2.ClaimResource.DESCRIPTOR.fields_by_name["share_id"]
    assert claim.number == 5
    assert claim.has_presence
