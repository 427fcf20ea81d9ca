"""`boundless report`: the PNGs drawn from what a run folder holds, and clear errors for
what cannot be read."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from boundless import report
from boundless.cli import main

PNG = b"\x89PNG\r\n\x1a\n"


def _curve(path: Path, n: int = 5) -> None:
    rows = [
        {"samples": 1000.0 * (i + 1), "elapsed_s": float(i), "window_auc": 0.6 + 0.01 * i, "window_logloss": 0.5}
        | {"progressive_logloss": 0.55, "push_bytes": 100 * i, "pull_bytes": 200 * i}
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _serving_metrics(path: Path) -> None:
    registry = CollectorRegistry()
    h = Histogram(report.PREDICT_HISTOGRAM.removesuffix("_seconds"), "x", unit="seconds", registry=registry)
    for s in (0.0004, 0.0008, 0.003, 0.003):
        h.observe(s)
    path.write_bytes(generate_latest(registry))


@pytest.mark.slow
def test_every_input_gives_its_figure(tmp_path):
    _curve(tmp_path / report.CURVE)
    (tmp_path / report.LATENCY).write_text(json.dumps({"predict_ms": [1.0, 1.2, 1.1, 5.0], "items": 200}))
    _serving_metrics(tmp_path / report.SERVING_METRICS)
    bounds, counts = report.server_histogram(tmp_path / report.SERVING_METRICS) or (None, None)
    assert counts is not None and counts.sum() == 4 and bounds is not None and bounds[0] == 5.0  # 0.005 s
    written = report.make(tmp_path)
    assert [p.name for p in written] == ["training.png", "latency.png"]
    assert all(p.read_bytes()[:8] == PNG for p in written)


def test_a_last_line_cut_short_ends_the_curve_and_a_bad_line_inside_is_named(tmp_path):
    path = tmp_path / report.CURVE
    _curve(path)
    path.write_text(path.read_text() + '{"samples": 60')  # the trainer died mid-line
    assert len(report.read_curve(path)) == 5
    path.write_text('{"samples": 1}\nnot json\n{"samples": 2}\n')
    with pytest.raises(report.ReportError, match=r"trainer-curve.jsonl:2: not a JSON progress record"):
        report.read_curve(path)


def test_an_empty_folder_is_an_error_that_says_what_is_missing(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "nothing to draw" in capsys.readouterr().out
    (tmp_path / report.LATENCY).write_text('{"predict_ms": "fast"}')
    assert main(["report", str(tmp_path)]) == 2
    assert "latency.json: expected {'predict_ms': [numbers...]}" in capsys.readouterr().out
    (tmp_path / report.LATENCY).write_text('{"predict_ms": []}')
    assert main(["report", str(tmp_path)]) == 2
    assert "predict_ms holds no latencies" in capsys.readouterr().out


def test_throughput_is_over_what_each_run_trained_and_spans_no_two_runs():
    first = [{"samples": 1000.0 * i, "trained_samples": 1000.0 * i, "elapsed_s": float(i)} for i in (1, 2, 3)]
    # the next run took up a cut at 2,500 samples: its clock starts again, its count goes on
    second = [{"samples": 2500.0 + 500 * i, "trained_samples": 500.0 * i, "elapsed_s": float(i)} for i in (1, 2)]
    seconds, rate = report.throughput(first + second)
    assert seconds.tolist() == [2.0, 3.0, 1.0, 2.0]
    assert rate[:2].tolist() == [1000.0, 1000.0] and rate[3] == 500.0
    assert math.isnan(rate[2])  # the restart: not a rate
    old = [{"samples": 100.0, "elapsed_s": 1.0}, {"samples": 300.0, "elapsed_s": 2.0}]  # before trained_samples
    assert report.throughput(old)[1].tolist() == [200.0]
