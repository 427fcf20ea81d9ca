"""The folders are the architecture (docs/architecture.md): packages import only downward and
only through the public API of the package below; no two packages import each other, lazy
(function-level) imports counted; and importing a client loads no server module."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protos", "ctr", "ps", "serving", "trainer", "modelmgr", "boundless")
# a package may import only packages of a lower rank (and itself)
RANK = {"protos": 0, "ctr": 1, "ps": 2, "serving": 2, "trainer": 3, "modelmgr": 3, "boundless": 4}
# what a package above may import of one below; ctr and protos are shared layers, all of them public
PUBLIC = {
    # ps.config: the trainer's in-process shards take the shard daemon's row-lifecycle section
    "ps": ("ps.api", "ps.client", "ps.compression", "ps.config"),
    "serving": ("serving.client", "serving.request", "serving.loading"),
    "modelmgr": ("modelmgr.publish", "modelmgr.commands"),  # boundless warms the gate's kernels; its API pins and rolls back
    "trainer": ("trainer.api",),  # boundless.api trains in process
}
# inside the shared layer: data and runtime at the bottom, the repository contract on top
CTR_RANK = {"ctr.runtime": 0, "ctr.data": 0, "ctr.routing": 0, "ctr.format": 1, "ctr.model": 2, "ctr.repository": 3}


def module_files() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if "_pb2" in path.name:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


MODULES = module_files()


def _resolve(module: str, name: str) -> str:
    full = f"{module}.{name}"
    return full if full in MODULES else module


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _imports_in(nodes: list[ast.stmt], eager: bool) -> Iterator[str]:
    for node in nodes:
        if isinstance(node, ast.If) and _is_type_checking(node):
            continue  # never executed
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] in PACKAGES)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] in PACKAGES:
            yield from (_resolve(node.module, a.name) for a in node.names)
        if eager and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue  # a function's imports run when it is called
        if eager and isinstance(node, ast.ClassDef):
            yield from _imports_in(node.body, eager)
            continue
        for field in ("body", "orelse", "finalbody", "handlers"):
            yield from _imports_in([n for n in getattr(node, field, []) if isinstance(n, ast.stmt | ast.ExceptHandler)], eager)  # type: ignore[misc]


@cache
def imports_of(module: str, eager: bool) -> frozenset[str]:
    """What a module imports: every import statement (eager=False, lazy ones included), or
    only those that run when it is imported (eager=True)."""
    tree = ast.parse(MODULES[module].read_text())
    return frozenset(i for i in _imports_in(tree.body, eager) if i in MODULES)


def loaded_by(module: str) -> set[str]:
    """The product modules that importing `module` loads: eager imports, transitively, with
    the packages above each one (their __init__ runs first)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        m = todo.pop()
        parts = m.split(".")
        for k in range(1, len(parts) + 1):
            name = ".".join(parts[:k])
            if name in MODULES and name not in seen:
                seen.add(name)
                todo.extend(imports_of(name, eager=True))
    return seen


def node_of(module: str) -> str:
    """A module in a subpackage belongs to the subpackage; a package's own module stands alone."""
    parts = module.split(".")
    if len(parts) >= 3:
        return ".".join(parts[:2])
    return module


def edges() -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for module in MODULES:
        for target in imports_of(module, eager=False):
            a, b = node_of(module), node_of(target)
            if a != b and not b.startswith(a + ".") and not a.startswith(b + "."):
                out.setdefault((a, b), []).append(f"{module} -> {target}")
    return out


def test_packages_import_only_downward_through_public_apis() -> None:
    offenders = []
    for (a, b), why in edges().items():
        pa, pb = a.split(".")[0], b.split(".")[0]
        if pa == pb:
            continue
        if RANK[pb] >= RANK[pa]:
            offenders.append(f"{pa} may not import {pb} (same or higher layer): {why[0]}")
        elif pb in PUBLIC and not any(b == p or b.startswith(p + ".") for p in PUBLIC[pb]):
            offenders.append(f"{b} is not {pb}'s public API {PUBLIC[pb]}: {why[0]}")
    assert not offenders, "\n".join(offenders)


def test_the_shared_layer_is_layered_too() -> None:
    offenders = [why[0] for (a, b), why in edges().items() if a in CTR_RANK and b in CTR_RANK and CTR_RANK[b] > CTR_RANK[a]]
    assert not offenders, offenders


def test_no_import_cycles_between_packages_lazy_imports_counted() -> None:
    graph: dict[str, set[str]] = {}
    for a, b in edges():
        graph.setdefault(a, set()).add(b)
    cycles = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt) :] + [nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, [" -> ".join(c) for c in cycles]


@pytest.mark.parametrize(
    ("client", "forbidden"),
    [
        ("ps.client", ("ps.server",)),
        ("trainer.step.factorization", ("ps.server", "serving", "modelmgr")),
        ("serving.client", ("serving.loading", "serving.scoring", "serving.daemon", "modelmgr", "ps", "trainer")),
        ("serving.loading.servable", ("modelmgr", "trainer", "ps")),
        ("ctr.repository.versions", ("modelmgr", "serving", "trainer", "ps")),
    ],
)
def test_importing_a_client_loads_no_server_module(client: str, forbidden: tuple[str, ...]) -> None:
    loaded = loaded_by(client)
    bad = sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in forbidden))
    assert not bad, f"importing {client} loads {bad}"


@pytest.mark.slow
def test_the_walk_sees_what_python_loads() -> None:
    """The AST walk against the interpreter: what `import ps.client` really loads."""
    code = "import sys, ps.client\nprint(sorted(m for m in sys.modules if m.split('.')[0] in ('ps', 'ctr')))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    real = set(eval(out.stdout))  # noqa: S307 - our own printed list
    assert real == {m for m in loaded_by("ps.client") if m.split(".")[0] in ("ps", "ctr")}
    assert not any(m.startswith("ps.server") for m in real)


@pytest.mark.slow
def test_the_client_library_loads_no_torch() -> None:
    code = (
        "import sys\nfrom serving.client import PredictClient\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_an_in_process_lr_run_loads_no_grpc_protobuf_or_torch(tmp_path: Path) -> None:
    """A whole `train --ps local` LR run, defaults otherwise, loads none of them, which its
    start-up would pay for (docs/design/trainer-startup.md): the health port is off unless set."""
    data = tmp_path / "a.libfm"
    data.write_text("".join(f"{i % 2} {i}:1 {i + 7}:1\n" for i in range(200)))
    code = (
        "import sys, contextlib, io\n"
        "from boundless.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    rc = main(['train', '--model', 'lr', '--ps', 'local', '--source', {str(data)!r}])\n"
        "print(rc, sorted({m.split('.')[0] for m in sys.modules} & {'grpc', 'torch', 'google'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0 []"
