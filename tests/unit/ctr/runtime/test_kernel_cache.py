"""ctr.runtime.kernel_cache: a cached kernel is recompiled when a module it imports changes,
and loaded from the cache when only an unrelated module does. Each run is a fresh Python
process over a small package in a temporary directory, with its own numba cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CALLER = """\
import numba

from kpkg.callee import bump


@numba.njit(cache=True)
def answer(x):
    return bump(x)
"""

RUN = """\
import sys

sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "stamped":
    from pathlib import Path

    from ctr.runtime.kernel_cache import install

    install(Path(sys.argv[1]), ("kpkg",))
from kpkg.caller import answer

print(answer(1), sum(answer.stats.cache_hits.values()))
"""


def _callee(add: int) -> str:
    return f"import numba\n\nSTEP = {add}\n\n\n@numba.njit\ndef bump(x):\n    return x + STEP\n"


@pytest.fixture
def package(tmp_path: Path) -> Path:
    pkg = tmp_path / "src" / "kpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "callee.py").write_text(_callee(1))
    (pkg / "caller.py").write_text(CALLER)
    (pkg / "unrelated.py").write_text("X = 1\n")
    (tmp_path / "run.py").write_text(RUN)
    return tmp_path


def _run(root: Path, mode: str) -> tuple[int, int]:
    """(answer(1), cache hits) in a fresh process."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(root / f"cache-{mode}")}
    env.pop("NUMBA_CACHE_LOCATOR_CLASSES", None)
    done = subprocess.run(
        [sys.executable, str(root / "run.py"), str(root / "src"), mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    value, hits = done.stdout.split()
    return int(value), int(hits)


def test_a_kernel_is_recompiled_when_a_module_it_imports_changes(package: Path) -> None:
    assert _run(package, "stamped") == (2, 0)  # compiled and cached
    assert _run(package, "stamped") == (2, 1)  # from the cache
    assert _run(package, "plain") == (2, 0)
    (package / "src" / "kpkg" / "callee.py").write_text(_callee(10))  # the caller's file is untouched
    assert _run(package, "stamped") == (11, 0)
    # what numba alone does: its stamp covers the caller's file only, so it serves the
    # machine code compiled against the old callee
    assert _run(package, "plain") == (2, 1)


def test_a_change_to_a_module_the_kernel_does_not_import_keeps_the_cache(package: Path) -> None:
    assert _run(package, "stamped") == (2, 0)
    (package / "src" / "kpkg" / "unrelated.py").write_text("X = 2\n")
    assert _run(package, "stamped") == (2, 1)


STAMPED = ["ImportsStampedUserProvidedCacheLocator", "ImportsStampedInTreeCacheLocator"]


def _locators_after(imports: str) -> list[str]:
    """The first two cache locators numba tries, in a fresh process after `imports` ran."""
    code = imports + "from numba.core import caching\nprint(' '.join(c.__name__ for c in caching.CacheImpl._locator_classes))\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.split()[:2]


def test_importing_the_product_leaves_numba_unloaded_until_used_then_stamps_its_locators() -> None:
    assert _locators_after("import sys, ctr\nassert 'numba' not in sys.modules\n") == STAMPED


def test_numba_imported_before_the_product_is_stamped_at_once() -> None:
    assert _locators_after("import numba\n") != STAMPED  # numba's own, before the product loads
    assert _locators_after("import numba, ctr\n") == STAMPED
