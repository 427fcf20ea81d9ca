"""The trainer reaches the PS only through its client API (DESIGN.md section 2)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_trainer_imports_no_shard_internals():
    offenders = []
    for path in sorted((ROOT / "trainer").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ps."):
                if node.module != "ps.client":
                    offenders.append(f"{path.name}: from {node.module}")
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
                offenders += [f"{path.name}: import {n}" for n in names if n.startswith("ps.") and n != "ps.client"]
    assert not offenders, offenders


def test_an_in_process_trainer_loads_no_grpc():
    """`train --ps local` starts faster for not importing gRPC (docs/architecture.md)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from trainer import server\n"
        "from ps.client import PSClient\n"
        "from ctr.modelspec import ModelSpec\n"
        "c = PSClient.local(2); c.declare(ModelSpec('lr').tables()); c.pull_dense('bias')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('grpc', 'torch')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
