"""`boundless report RUN_DIR`: a run's training curves, latency histograms and versions as
PNGs, from what the run left in its folder:

- `trainer-curve.jsonl`: the trainer's progress records (`train --curve-out`);
- `latency.json`: Predict latencies measured by a client, in ms (the demo writes it);
- `serving-metrics.txt`: serving's Prometheus exposition, whose Predict histogram is the
  latency inside the server (the demo scrapes it at the end);
- `repo/<model>`: the published versions with their holdout AUC, and the rejected exports.

Each figure is drawn when its input is there; a folder with none of them is an error."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ctr.runtime.extras import require

CURVE = "trainer-curve.jsonl"
LATENCY = "latency.json"
SERVING_METRICS = "serving-metrics.txt"
PREDICT_HISTOGRAM = "boundless_serving_predict_seconds"


class ReportError(ValueError):
    pass


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, help="the run's folder (a demo's runs/demo-<time>, or any with the files above)")
    parser.add_argument("--out", type=Path, default=None, help="where the PNGs go (default RUN_DIR/report)")
    parser.add_argument("--model-name", default="ctr", help="the model's name in RUN_DIR/repo")
    parser.add_argument(
        "--curve",
        type=Path,
        default=None,
        help=f"the trainer's --curve-out file (default: RUN_DIR/{CURVE}, else the only *.jsonl there)",
    )
    parser.add_argument("--repo", type=Path, default=None, help="the model repository (default: RUN_DIR/repo)")


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def read_curve(path: Path) -> list[dict[str, Any]]:
    """The progress records; a line cut short by a crash ends the curve, a bad one names itself."""
    rows = []
    lines = path.read_text().splitlines()
    for n, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except ValueError:
            if n == len(lines):
                break  # the last line, half written when the trainer died
            raise ReportError(f"{path}:{n}: not a JSON progress record") from None
        if not isinstance(row, dict) or not isinstance(row.get("samples"), int | float):
            raise ReportError(f"{path}:{n}: a progress record needs a number in 'samples'")
        rows.append(row)
    return rows


def _series(rows: list[dict[str, Any]], key: str) -> np.ndarray:
    return np.array([float(r[key]) if isinstance(r.get(key), int | float) else math.nan for r in rows])


def read_latency(path: Path) -> tuple[np.ndarray, dict[str, Any]]:
    try:
        doc = json.loads(path.read_text())
        ms = np.asarray(doc["predict_ms"], dtype=np.float64)
    except (ValueError, KeyError, TypeError) as e:
        raise ReportError(f"{path}: expected {{'predict_ms': [numbers...]}}: {e}") from None
    if ms.ndim != 1 or not ms.size:
        raise ReportError(f"{path}: predict_ms holds no latencies")
    return ms, doc


def server_histogram(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """(upper bounds in ms, count per bucket) of serving's Predict histogram, or None."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(path.read_text()):
        if family.name != PREDICT_HISTOGRAM:
            continue
        buckets = sorted(
            (float(s.labels["le"]), s.value) for s in family.samples if s.name.endswith("_bucket") and "le" in s.labels
        )
        if not buckets:
            return None
        bounds = np.array([b for b, _ in buckets]) * 1000
        cumulative = np.array([c for _, c in buckets])
        return bounds, np.diff(cumulative, prepend=0.0)
    return None


def _trained(rows: list[dict[str, Any]]) -> np.ndarray:
    """Samples the record's run had trained: a run taken up at a cut counts its `samples` on
    from the cut's (curves written before `trained_samples` existed: the samples)."""
    trained, samples = _series(rows, "trained_samples"), _series(rows, "samples")
    return np.where(np.isnan(trained), samples, trained)


def throughput(rows: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, samples/s) between consecutive records. Runs append to one curve file: a
    record whose clock went back starts a run, so no rate spans two (NaN there)."""
    elapsed, done = _series(rows, "elapsed_s"), _trained(rows)
    dt = np.diff(elapsed)
    rate = np.where(dt > 0, np.diff(done) / np.where(dt > 0, dt, 1.0), np.nan)
    return elapsed[1:], rate


def draw_training(rows: list[dict[str, Any]], out: Path) -> Path:
    import matplotlib.pyplot as plt

    samples = _series(rows, "samples")
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    ax = axes[0, 0]
    ax.plot(samples, _series(rows, "window_auc"), marker=".")
    ax.set(title="progressive AUC (window)", xlabel="samples trained", ylabel="AUC")
    ax = axes[0, 1]
    ax.plot(samples, _series(rows, "window_logloss"), marker=".", label="window")
    ax.plot(samples, _series(rows, "progressive_logloss"), marker=".", label="all samples")
    ax.set(title="progressive logloss", xlabel="samples trained", ylabel="logloss")
    ax.legend()
    ax = axes[1, 0]
    if len(rows) > 1:
        ax.plot(*throughput(rows), marker=".")
    ax.set(title="throughput", xlabel="seconds", ylabel="samples/s")
    ax = axes[1, 1]
    per = np.maximum(_trained(rows), 1)  # bytes are the run's: per sample the run trained
    ax.plot(samples, _series(rows, "push_bytes") / per, marker=".", label="push")
    ax.plot(samples, _series(rows, "pull_bytes") / per, marker=".", label="pull")
    ax.set(title="bytes on the wire per sample", xlabel="samples trained", ylabel="bytes/sample")
    ax.legend()
    return _save(fig, out / "training.png")


def draw_latency(
    client_ms: np.ndarray | None, meta: dict[str, Any], server: tuple[np.ndarray, np.ndarray] | None, out: Path
) -> Path:
    import matplotlib.pyplot as plt

    panels = (client_ms is not None) + (server is not None)
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.5), squeeze=False)
    at = 0
    if client_ms is not None:
        ax = axes[0, at]
        at += 1
        ax.hist(client_ms, bins=min(60, max(10, client_ms.size // 5)))
        for q, style in ((50, "--"), (99, ":")):
            v = float(np.percentile(client_ms, q))
            ax.axvline(v, color="k", linestyle=style, label=f"p{q} {v:.2f} ms")
        items = f", {meta['items']} items" if "items" in meta else ""
        ax.set(title=f"Predict at the client ({client_ms.size} requests{items})", xlabel="ms", ylabel="requests")
        ax.legend()
    if server is not None:
        bounds, counts = server
        ax = axes[0, at]
        finite = np.isfinite(bounds)
        labels = [f"≤{b:g}" for b in bounds[finite]] + (["more"] if not finite.all() else [])
        ax.bar(range(len(counts)), counts, tick_label=labels)
        ax.tick_params(axis="x", labelrotation=60)
        ax.set(title="Predict inside serving (Prometheus buckets)", xlabel="ms", ylabel="requests")
    return _save(fig, out / "latency.png")


def draw_versions(repo_root: Path, model: str, out: Path) -> Path | None:
    import matplotlib.pyplot as plt

    from ctr.repository.versions import Repository, RepositoryError

    repo = Repository(repo_root, model)
    points = []
    for v in repo.versions():
        try:
            m = repo.manifest_model(v)
        except RepositoryError:
            continue
        cand = (m.evaluation or {}).get("candidate") or {}
        if isinstance(cand.get("auc"), int | float):
            points.append((m.created, float(cand["auc"]), m.kind, v))
    rejected = [r for r in repo.rejected() if isinstance(r.get("rejected_at"), int | float)]
    if not points and not rejected:
        return None
    start = min([p[0] for p in points] + [float(r["rejected_at"]) for r in rejected])
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for kind, marker in (("full", "s"), ("delta", "o")):
        chosen = [p for p in points if p[2] == kind]
        ax.scatter([p[0] - start for p in chosen], [p[1] for p in chosen], marker=marker, label=f"{kind} version")
    for r in rejected:
        ax.axvline(float(r["rejected_at"]) - start, color="r", alpha=0.3)
    if rejected:
        ax.plot([], [], color="r", alpha=0.3, label=f"rejected export ({len(rejected)})")
    ax.set(title=f"published versions of {model}: holdout AUC", xlabel="seconds since the first", ylabel="holdout AUC")
    ax.legend()
    return _save(fig, out / "versions.png")


def find_curve(run_dir: Path, given: Path | None) -> Path | None:
    """The progress curve: the one given, the demo's name, or the run folder's only *.jsonl."""
    if given is not None:
        if not given.is_file():
            raise ReportError(f"--curve {given}: no such file")
        return given
    if (run_dir / CURVE).is_file():
        return run_dir / CURVE
    found = sorted(run_dir.glob("*.jsonl"))
    if len(found) > 1:
        raise ReportError(f"{run_dir}: several *.jsonl files ({', '.join(p.name for p in found)}): name one with --curve")
    return found[0] if found else None


def make(
    run_dir: Path, out: Path | None = None, model: str = "ctr", curve: Path | None = None, repo: Path | None = None
) -> list[Path]:
    """Draws what the run folder holds; returns the PNGs written."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir}: no such folder")
    out = out or run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    curve = find_curve(run_dir, curve)
    if curve is not None:
        rows = read_curve(curve)
        if rows:
            written.append(draw_training(rows, out))
    client_ms, meta = read_latency(run_dir / LATENCY) if (run_dir / LATENCY).is_file() else (None, {})
    server = server_histogram(run_dir / SERVING_METRICS) if (run_dir / SERVING_METRICS).is_file() else None
    if client_ms is not None or server is not None:
        written.append(draw_latency(client_ms, meta, server, out))
    repo = repo or run_dir / "repo"
    if (repo / model).is_dir():
        drawn = draw_versions(repo, model, out)
        if drawn is not None:
            written.append(drawn)
    if not written:
        raise ReportError(f"{run_dir}: nothing to draw (no {CURVE}, {LATENCY}, {SERVING_METRICS} or repo/{model})")
    return written


def run(args: argparse.Namespace) -> int:
    require("matplotlib")  # before any work: a missing extra is one line naming it
    try:
        written = make(args.run_dir, args.out, args.model_name, args.curve, args.repo)
    except ReportError as e:
        print(f"boundless report: error: {e}")
        return 2
    for p in written:
        print(p)
    return 0
