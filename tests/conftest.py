import os
from pathlib import Path

import pytest

MARKED_BY_FOLDER = {"integration": "integration", "reliability": "reliability", "image": "image"}

DATA = Path(os.environ.get("BOUNDLESS_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA.is_dir():
        raise RuntimeError(f"real CTR samples expected in {DATA} (see ../shared/data/PROVENANCE.md)")
    return DATA


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """tests/integration and tests/reliability start daemons: their folder marks them, so
    `make check` (-m "not integration and not reliability and not slow") skips them.
    tests/image runs the built image: marked `image`, which only `make test-image` selects."""
    for item in items:
        folder = Path(str(item.fspath)).relative_to(Path(__file__).parent).parts[0]
        if folder in MARKED_BY_FOLDER:
            item.add_marker(MARKED_BY_FOLDER[folder])
