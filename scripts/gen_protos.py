"""Regenerates protos/*_pb2*.py(i) from protos/*.proto; the one way generated code is made.

Imports in the generated gRPC modules are rewritten to be package-relative so that
`protos` works as an installed package.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "protos"


def generate(out_dir: Path) -> list[Path]:
    """Writes the generated modules for every .proto into out_dir and returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    # protoc-gen-mypy lives next to the interpreter in the venv.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    protos = sorted(PROTO_DIR.glob("*.proto"))
    include = str(Path(protoc.__file__).parent / "_proto")
    args = [
        "protoc",
        f"-I{PROTO_DIR}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_out={out_dir}",
        *[str(p) for p in protos],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    written = sorted(out_dir.glob("*_pb2*.py*"))
    for path in written:
        text = path.read_text()
        text = re.sub(r"^import (\w+_pb2) as", r"from . import \1 as", text, flags=re.M)
        path.write_text(text)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else PROTO_DIR
    for p in generate(target):
        print(p.relative_to(target))
