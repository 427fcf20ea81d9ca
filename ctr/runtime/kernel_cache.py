"""numba's on-disk kernel cache, keyed on what a kernel's file imports as well as on the file.

numba stamps a cached kernel with a hash of the one file that defines it. A kernel that calls
a function or reads a constant from another module has that code compiled into it, so after
an edit or a `git pull` that changes only the other module, numba loads the old machine
code: a fixed bug stays unfixed, a changed layout is read with the old one, and nothing
says so. `install()` makes the stamp of a kernel defined in the product's packages also
carry a digest of every product module its file imports, directly or through others
(found by reading their import lines), so such a change recompiles the kernels that can
see it and no others (docs/design/kernel-cache.md).

The locators are swapped when `numba.core.caching` is first imported, or at once when it
already is; every product package calls `install()` first thing, before any of its modules
defines a kernel. Importing this module does not import numba.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.abc
import re
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PRODUCT_ROOT = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("boundless", "ctr", "modelmgr", "ps", "serving", "trainer")
CACHING = "numba.core.caching"
# `from a.b import c, d` (names possibly in parentheses over several lines) or `import a.b`
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)|import[ \t]+([\w.]+))", re.M)

_sources: list[tuple[Path, tuple[str, ...]]] = []  # (root, packages) whose kernels get stamped
_digests: dict[Path, str] = {}


def install(root: Path = PRODUCT_ROOT, packages: Sequence[str] = PRODUCT_PACKAGES) -> None:
    """Stamps the cached kernels of modules in `packages` (directories under `root`) with
    their imports' digest. Idempotent; the product's packages call it with the defaults."""
    entry = (root.resolve(), tuple(packages))
    if entry in _sources:
        return
    _sources.append(entry)
    if CACHING in sys.modules:
        _patch(sys.modules[CACHING])
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def imports_digest(path: Path) -> str | None:
    """A digest of the contents of every module of the registered packages that `path`
    imports, directly or not (itself left out: numba hashes it); None for a file outside
    them, whose kernels keep numba's stamp."""
    path = path.resolve()
    if _source_of(path) is None:
        return None
    if path not in _digests:
        h = hashlib.sha256()
        for dep in sorted(_closure(path) - {path}):
            h.update(str(dep).encode() + b"\0" + _content_hash(dep))
        _digests[path] = h.hexdigest()
    return _digests[path]


def _source_of(path: Path) -> tuple[Path, tuple[str, ...]] | None:
    for root, packages in _sources:
        if any(path.is_relative_to(root / p) for p in packages):
            return root, packages
    return None


def _closure(path: Path) -> set[Path]:
    seen, todo = {path}, [path]
    while todo:
        for dep in _imported_files(todo.pop()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


@functools.cache  # a file is read once a process, whichever kernels' closures hold it
def _content_hash(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).digest()


@functools.cache
def _imported_files(path: Path) -> frozenset[Path]:
    """The files of registered packages that `path`'s import lines name: a module, its
    package's __init__, and `from package import submodule` targets."""
    source = _source_of(path)
    if source is None:
        return frozenset()
    root, packages = source
    out: set[Path] = set()
    for m in _IMPORT.finditer(path.read_text(encoding="utf-8", errors="replace")):
        module = m.group(1) or m.group(3)
        if module.split(".")[0] not in packages:
            continue
        names = re.findall(r"[A-Za-z_]\w*", m.group(2) or "")
        for name in [module, *(f"{module}.{n}" for n in names if n != "as")]:
            parts = name.split(".")
            for i in range(1, len(parts) + 1):  # every package on the way runs its __init__
                out.update(_module_files(root, ".".join(parts[:i])))
    return frozenset(out)


@functools.cache
def _module_files(root: Path, dotted: str) -> tuple[Path, ...]:
    """The file of module `dotted` under root: a.py or a/__init__.py (none for a name
    that is not a module, such as an imported function)."""
    base = root.joinpath(*dotted.split("."))
    return tuple(f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file())


def _stamped(locator: type) -> type:
    class Stamped(locator):  # type: ignore[valid-type, misc]
        def get_source_stamp(self) -> Any:
            stamp = super().get_source_stamp()
            deps = imports_digest(Path(self._py_file))
            return stamp if deps is None else (stamp, deps)

    Stamped.__name__ = Stamped.__qualname__ = f"ImportsStamped{locator.__name__}"
    return Stamped


def _patch(caching: types.ModuleType) -> None:
    """Each source-file locator of numba's cache replaced by one that adds the digest."""
    impl = caching.CacheImpl
    if getattr(impl, "_imports_stamped", False):
        return
    bases = (caching.UserProvidedCacheLocator, caching.InTreeCacheLocator, caching.UserWideCacheLocator)
    impl._locator_classes = [_stamped(c) if c in bases else c for c in impl._locator_classes]
    impl._imports_stamped = True


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds numba.core.caching with the other finders and patches it once it has run."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None) -> Any:
        if fullname != CACHING:
            return None
        sys.meta_path.remove(self)
        spec = None
        for finder in sys.meta_path:  # whichever would have found it (a site directory, an editable install)
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                break
        if spec is None or not isinstance(spec.loader, importlib.abc.Loader):
            return spec
        run = spec.loader.exec_module

        def exec_then_patch(module: types.ModuleType) -> None:
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_then_patch  # type: ignore[method-assign]
        return spec
