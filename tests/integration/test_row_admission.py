"""Row admission (`--admit-after`, here `--local-admit-after`) costs a DNN model little
quality: a key's row is made only from its second sighting, so until then it reads as its
initial row, and the MLP sees those rows as they are. On Avazu 10k, DeepFM's MLP at its
default rate then took ever larger steps (its mean gradient grew 60-fold over 39 steps) and
ended worse than a constant: window logloss 1.06 against 0.41 without admission. Its steps
are now clipped to the default clip_norm (docs/design/mlp-step.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_parquet import AVAZU


def _train(source: Path, out: Path, model: str, *args: str) -> dict[str, float]:
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(source), "--no-follow", "--ps", "local"]
    cmd += ["--format", "avazu", "--model", model, "--window", "2000", "--metrics-port", "-1", "--metrics-out", str(out)]
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("model", ["deepfm", "wdl"])
def test_a_dnn_trained_with_row_admission_stays_near_its_quality_without(data_dir: Path, tmp_path: Path, model: str) -> None:
    free = _train(data_dir / AVAZU, tmp_path / "free.json", model)
    admitted = _train(data_dir / AVAZU, tmp_path / "admitted.json", model, "--local-admit-after", "2")
    assert admitted["not_admitted"] > 0
    assert admitted["window_logloss"] < free["window_logloss"] + 0.01, (admitted["window_logloss"], free["window_logloss"])
    assert admitted["window_auc"] > free["window_auc"] - 0.02, (admitted["window_auc"], free["window_auc"])
