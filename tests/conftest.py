import os
from pathlib import Path

import pytest

DATA = Path(os.environ.get("BOUNDLESS_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA.is_dir():
        raise RuntimeError(f"real CTR samples expected in {DATA} (see ../shared/data/PROVENANCE.md)")
    return DATA
