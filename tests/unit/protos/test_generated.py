import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_committed_generated_code_matches_a_fresh_generation(tmp_path):
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "scripts" / "gen_protos.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fresh = mod.generate(tmp_path)
    assert fresh
    for path in fresh:
        committed = ROOT / "protos" / path.name
        assert committed.exists(), f"{path.name} is not committed"
        assert committed.read_text() == path.read_text(), f"protos/{path.name} is stale: run make protos"
