"""Regenerate the gRPC stubs in exporter/kubelet/api/ from proto/.

Run after editing proto/: ``python scripts/generate_stubs.py``. The generated files are
committed (so ``pip install .`` needs no protoc) and tests/test_stubs.py fails when they
drift from proto/.

protoc's virtual path mapping (``-Iexporter/kubelet/api=proto``) makes the generated
modules import each other as ``exporter.kubelet.api.v1...``, so no import rewriting is needed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
PACKAGE = "exporter/kubelet/api"
PROTO_FILES = ("v1/api.proto", "v1alpha1/api.proto")


def generate(out_dir: Path) -> None:
    """Write the *_pb2.py, *_pb2.pyi and *_pb2_grpc.py modules below out_dir."""
    for proto in PROTO_FILES:
        args = [
            "grpc_tools.protoc",
            f"-I{PACKAGE}={PROTO_DIR}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            f"{PACKAGE}/{proto}",
        ]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed on {proto}")
    for folder in (out_dir / PACKAGE / "v1", out_dir / PACKAGE / "v1alpha1"):
        (folder / "__init__.py").touch()


def main() -> None:
    generate(ROOT)
    print(f"stubs written to {ROOT / PACKAGE}", file=sys.stderr)


if __name__ == "__main__":
    main()
