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
