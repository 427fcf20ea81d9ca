"""The Python API: boundless.train trains as `boundless train` does with the same settings
(the same progressive logloss, to the last bit), refuses a bad setting by its name, and
local_platform starts the platform, trains against its shards, serves and scores, and
rolls back."""

from __future__ import annotations

import csv
import gc
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import boundless
from ctr.repository.versions import RepositoryError
from ctr.runtime.config import ConfigError
from tests.support import wait_until


def test_train_from_python_equals_the_command_line(data_dir: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    source = data_dir / "frappe/frappe.test.libfm"
    out = tmp_path / "cli.json"
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(source), "--model", "fm", "--k", "4"]
    cmd += ["--ps", "local", "--batch-size", "1024", "--metrics-port", "-1", "--metrics-out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cli = json.loads(out.read_text())
    cpu_before = time.process_time()  # this test process has spent CPU before: not the run's
    summary = boundless.train(str(source), "fm", "local", k=4, batch_size=1024, metrics_port=-1, progress=True)
    assert 0 < summary.cpu_s <= time.process_time() - cpu_before
    assert isinstance(summary, boundless.TrainingSummary)
    assert summary.samples == cli["samples"] > 20_000
    assert summary.progressive_logloss == cli["progressive_logloss"]
    assert summary.window_auc == cli["window_auc"] and 0.8 < summary.window_auc < 1.0
    assert "batch_size=4096" in (boundless.train.__doc__ or "")  # help(boundless.train) tells the settings
    assert gc.get_freeze_count() == 0  # what the run froze is the caller's to collect again
    assert '"pid"' not in capfd.readouterr().out  # a daemon's ready line is for supervisors, not a notebook


def test_a_bad_setting_is_refused_by_its_name() -> None:
    with pytest.raises(ConfigError, match="batch_sise"):
        boundless.train("x.tsv", "lr", "local", batch_sise=10)
    with pytest.raises(ConfigError, match="batch_size.*'many' is not a valid int"):
        boundless.train("x.tsv", "lr", "local", batch_size="many")


def test_local_platform_trains_serves_scores_and_rolls_back(data_dir: Path, tmp_path: Path) -> None:
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    first, second = tmp_path / "a.libfm", tmp_path / "b.libfm"
    first.write_text("\n".join(lines[:12_000]) + "\n")
    second.write_text("\n".join(lines[12_000:24_000]) + "\n")
    with boundless.local_platform(shards=2, work_dir=tmp_path / "platform") as p:
        one = p.train(str(first), "lr", progress=False, metrics_port=-1)
        assert one.samples > 5_000 and one.exports >= 1
        v1 = p.wait_published()
        two = p.train(str(second), "lr", progress=False, metrics_port=-1)
        assert two.samples > 5_000
        v2 = p.wait_published(after=v1)
        assert v2 > v1 and v1 in p.models.list()
        got = p.client.predict([{"1": "5"}, {"1": "6"}, {"1": "7"}], {"0": "3"})
        assert got.version == v2 and got.scores.shape == (3,) and np.all((got.scores > 0) & (got.scores < 1))
        p.models.rollback(v1)
        assert p.models.target() == v1
        assert p.wait_published() == v1
        assert p.client.predict([{"1": "5"}], {"0": "3"}).version == v1
        # the newer version shadows the stable one, then is promoted on that evidence
        p.models.label("next", v2, shadow=1.0)
        with pytest.raises(RepositoryError, match="fewer than the 1000"):
            p.models.promote("next")
        wait_until(
            "shadow copies scored",
            lambda: (
                p.client.predict([{"1": "5"}], {"0": "3"}) is not None
                and sum(e.scored for e in p.client.status().shadows if e.label == "next") >= 10
            ),
            60,
        )
        totals = p.models.promote("next", min_shadow=10, max_mean_abs_diff=1.0)
        assert totals.evidence.version == v2 and p.models.target() == v2 and "next" not in p.repo.routing()


def test_waiting_for_a_version_the_gate_rejected_fails_at_once_with_its_reason(tmp_path: Path) -> None:
    """A CSV too short for the gate's holdout: the wait names the rejection, not a timeout."""
    rows = ["clicked,site,n", *(f"{i % 5 == 0:d},s{i % 7},{i % 11}" for i in range(1_500))]
    (tmp_path / "short.csv").write_text("\n".join(rows) + "\n")
    with boundless.local_platform(shards=1, work_dir=tmp_path / "platform") as p:
        assert p.train(str(tmp_path / "short.csv"), "lr", progress=False, metrics_port=-1).exports == 1
        with pytest.raises(boundless.NotPublished, match="holdout samples"):  # not TimeoutError
            p.wait_published(timeout=100)


def test_a_table_in_memory_trains_as_its_rows_in_a_file_and_a_second_one_trains_whole(data_dir: Path, tmp_path: Path) -> None:
    """A DataFrame-like table is read as a Parquet file of it: the same progressive logloss
    as the CSV it came from, to the last bit. On shards that hold a cut, the next table is
    new data, trained whole: never taken up at the last table's position."""
    import pyarrow as pa

    with open(data_dir / "avazu_10k/train_rows1-9999.csv", newline="") as f:
        header, *rows = list(csv.reader(f))
    columns = {name: [row[i] for row in rows] for i, name in enumerate(header)}
    source = tmp_path / "avazu.csv"
    source.write_text("\n".join(",".join(r) for r in [header, *rows]) + "\n")
    settings: dict[str, Any] = {"k": 4, "metrics_port": -1, "progress": False}
    from_file = boundless.train(str(source), "fm", **settings)
    from_table = boundless.train(pa.table(columns), "fm", **settings)
    assert from_table.samples == from_file.samples == len(rows)
    assert from_table.progressive_logloss == from_file.progressive_logloss
    from_rows = boundless.train([dict(zip(header, r, strict=True)) for r in rows], "fm", **settings)
    assert from_rows.progressive_logloss == from_file.progressive_logloss
    with pytest.raises(TypeError, match="a pandas or polars DataFrame"):
        boundless.train(42)

    half = len(rows) // 2
    with boundless.local_platform(shards=1, work_dir=tmp_path / "platform") as p:
        first = p.train({k: v[:half] for k, v in columns.items()}, "lr", metrics_port=-1, progress=False)
        second = p.train({k: v[half:] for k, v in columns.items()}, "lr", metrics_port=-1, progress=False)
    # each table's last rows are its export's holdout (export_dir is set): trained or held, every row is read
    assert first.trained_samples + first.metrics["held_out_samples"] == half
    assert second.trained_samples + second.metrics["held_out_samples"] == len(rows) - half  # the whole second table
    assert second.samples == first.samples + second.trained_samples  # counted on from the first table's cut
