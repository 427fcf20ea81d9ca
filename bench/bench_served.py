"""Compression judged where it runs (issue 32): every byte both ways, and the quality of
the versions serving loads.

For each dataset, model and push/pull codec pair: 2 fresh PS shard processes over gRPC,
`boundless train` streaming the dataset repeated to --rows rows (one file; with --workers 2
a folder dealt out to two local ranks) with a checkpoint cut every --cut-s seconds and an
export every --export-every samples, and a model manager (`boundless model watch`) publishing
every export with the quality gate opened wide. The manager scores each candidate, loaded
as serving loads it, on the export's holdout: the samples read right after the export,
which that version was not trained on. A codec pair with "~nodrain" runs with
--no-export-drain (error-feedback residuals reach the shards only at cuts and the end);
with "~nocache", with --pull-cache off (every pull sends every key and gets every row);
with "~m23", with --mlp-moment-bits 23 (the MLP's Adam moments kept whole at cuts); with
"~w23", with --mlp-weight-bits 23 (its weights kept whole at cuts); with
"~cfp64z", with --cut-drain-codec fp64z (residuals sent exactly at cuts); with "~b65536",
with --batch-size 65536 (fewer, larger pushes: one worker's model with per-example updates
does not depend on the batch); with "~apowersgd:4", with --dense-allreduce powersgd:4 (the
ranks' MLP gradients in low rank); with "~s16", with --staleness 16 (each rank reuses a pulled
row for up to 16 of its batches before pulling it again).
Reported per run:

- wire bytes per sample, both ways (the trainer's ledger: sparse and dense pulls and pushes,
  residual drains, control calls, and with --workers 2 the ranks' collectives: the MLP's
  gradients, the rounds' words), and its ratio to the uncompressed protocol of the same
  configuration (`none/raw~nocache`: fp32 gradients, fp64 state deltas, raw pull replies,
  no pull cache); `none/raw` is the pull cache alone, `auto/auto` what a user gets by
  default (docs/design/auto-codec.md);
- the served AUC: the mean over published versions of their holdout AUC (the gate's own
  figure, in each version's manifest), over the first K versions in every run of a row (K
  the fewest any run published), and its difference from the uncompressed run;
- the worker's view (progressive window AUC), labelled as such: one worker predicts from
  what it pulled plus its own unsent residual, so it cannot see what the shards hold;
- examples/s of the training loop, and the CPU microseconds a sample of the trainer (with
  its ranks), the shards and the manager (`cpu_us_per_sample` in the result file).

Runs alternate configurations within a repetition; medians over --reps. Before them each
configuration runs once, unmeasured, on a short stream (--no-warm-up skips it): numba caches
its kernels by source path, so a fresh checkout (a worktree) would compile them inside its
first runs and count the compiling as training, the baseline's most. Writes
bench/results/served.json and prints markdown; asserts nothing.
`--datasets synthetic` streams the product's default synthetic stream (none repeated).
Run: .venv/bin/python bench/bench_served.py [--datasets frappe,criteo10k] [--models lr,ffm]
     [--codecs none/raw~nocache,none/raw,auto/auto] [--rows 1000000] [--reps 1] [--cut-s 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.datasets import DATASETS  # noqa: E402
from boundless.processes import start  # noqa: E402
from boundless.synthetic import SyntheticStream  # noqa: E402
from ctr.data.schema import PRESETS  # noqa: E402
from ctr.repository.versions import Repository  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NO_DRAIN = "~nodrain"  # a codec pair with this suffix runs with --no-export-drain
NO_CACHE = "~nocache"  # ... with --pull-cache off (every pull sends every key and gets every row)
# ... "~m23": with --mlp-moment-bits 23, and so on for each letter (the module's docstring)
VALUE_SUFFIXES = {
    "m": "--mlp-moment-bits",
    "w": "--mlp-weight-bits",
    "c": "--cut-drain-codec",
    "b": "--batch-size",
    "a": "--dense-allreduce",
    "s": "--staleness",
}
VALUE_SUFFIX = re.compile(r"~([mwcbas])([\w:]+)")
# the uncompressed protocol: fp32 gradients, fp64 state deltas, raw pull replies, no pull cache
BASELINE = f"none/raw{NO_CACHE}"
MODEL_FLAGS = {"lr": [], "ffm": ["--k", "4"], "deepfm": ["--k", "8", "--hidden", "400,400,400"]}
SYNTHETIC_PRESET = "kv"  # the demo's: label, then field=value per field
# the gate opened wide: every export is published, so every one is judged
OPEN_GATE = ["--min-samples", "1", "--max-auc-drop", "1", "--min-auc", "0", "--max-logloss", "100"]
OPEN_GATE += ["--calibration-low", "0", "--calibration-high", "1000", "--rollback-auc-drop", "1", "--keep-full", "1000"]


def preset_of(name: str) -> str:
    return SYNTHETIC_PRESET if name == "synthetic" else DATASETS[name].preset


def synthetic_lines(rows: int) -> list[str]:
    """`rows` samples of the product's default stream (boundless.synthetic: 16 fields,
    Zipf-distributed values up to 200,000 per field), none repeated: a stream with a long
    tail of rare rows, which a repeated small file does not have."""
    stream = SyntheticStream()
    out: list[str] = []
    while len(out) < rows:
        vals, _, labels = stream.sample(min(100_000, rows - len(out)))
        out += stream.format(vals, labels)
    return out


def write_stream(name: str, rows: int, work: Path, workers: int) -> tuple[Path, int]:
    if name == "synthetic":
        header, lines = None, synthetic_lines(rows)
    else:
        ds = DATASETS[name]
        base = ds.lines()
        header = base[0] if PRESETS[ds.preset].format == "csv" else None
        body = base[1:] if header else base
        lines = (body * -(-rows // len(body)))[:rows]
    if workers == 1:
        path = work / f"{name}.txt"
        path.write_text("\n".join([header, *lines] if header else lines) + "\n")
        return path, len(lines)
    folder = work / f"{name}-w{workers}"
    folder.mkdir()
    parts = 2 * workers
    step = -(-len(lines) // parts)
    for i in range(parts):
        part = lines[i * step : (i + 1) * step]
        (folder / f"part{i:02d}.txt").write_text("\n".join([header, *part] if header else part) + "\n")
    return folder, len(lines)


# the pull cache's counts in a trainer's summary (docs/design/pull-cache.md)
CACHE_COUNTS = (
    "kept_rows_sent_as_ids",
    "kept_rows_stale",
    "kept_rows_changed",
    "rows_pulled",
    "initial_rows_made",
    "kept_rows",
    "pulls_leased",
    "rows_leased",
)


def run_one(
    stream: Path, preset: str, model: str, codecs: str, workers: int, work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    nodrain, nocache = NO_DRAIN in codecs, NO_CACHE in codecs
    codecs = codecs.replace(NO_DRAIN, "").replace(NO_CACHE, "")
    value_flags = [arg for letter, value in VALUE_SUFFIX.findall(codecs) for arg in (VALUE_SUFFIXES[letter], value)]
    codecs = VALUE_SUFFIX.sub("", codecs)
    push, _, pull = codecs.partition("/")
    work.mkdir()
    exports, repo = work / "exports", work / "repo"
    shards = [
        start(
            f"ps{i}",
            [
                "ps",
                "--shard-index",
                str(i),
                "--shard-count",
                "2",
                "--export-root",
                str(exports),
                "--data-dir",
                str(work / f"ps{i}"),
            ],
            work,
        )
        for i in range(2)
    ]
    manager = start("model", ["model", "watch", "--exports", str(exports), "--repo", str(repo), *OPEN_GATE], work)
    try:
        for d in (*shards, manager):
            d.wait_ready()
        out = work / "m.json"
        cmd = [sys.executable, "-m", "boundless", "train", "--source", str(stream), "--format", preset, "--no-follow"]
        cmd += ["--ps", ",".join(s.address for s in shards), "--model", model, *MODEL_FLAGS[model]]
        cmd += ["--push-codec", push, "--pull-codec", pull]
        cmd += ["--export-dir", str(exports), "--export-interval-s", "0", "--holdout-samples", str(args.export_every)]
        cmd += ["--checkpoint-interval-s", str(args.cut_s), "--workers", str(workers)]
        cmd += ["--metrics-port", "-1", "--port", "-1", "--metrics-out", str(out)]
        cmd += ["--no-export-drain"] if nodrain else []
        cmd += ["--pull-cache", "off"] if nocache else []
        cmd += value_flags
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the trainer command, reaped (one rank: the run)
        trainer_cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        if args.logs:  # the trainer's log: `auto`'s switches and why (docs/design/auto-codec.md)
            Path(args.logs).mkdir(parents=True, exist_ok=True)
            (Path(args.logs) / f"{work.name}.log").write_text(proc.stderr)
        if proc.returncode:
            raise SystemExit(proc.stderr[-3000:])
        m = json.loads(out.read_text())
        versions = _published(Repository(repo, "ctr"), int(m["exports"]))
        # local ranks fork from a fork server the trainer does not reap: their CPU is the summary's
        trainer_cpu += sum(m.get("rank_cpu_s", []))
        cpu = {"trainer": trainer_cpu, "shards": sum(_cpu_s(s.proc.pid) for s in shards), "manager": _cpu_s(manager.proc.pid)}
    finally:
        manager.stop()
        for s in shards:
            s.stop()
    n = m["samples"]
    kinds: dict[str, float] = {}
    for table in m["wire"].values():
        for kind, both in table.items():
            kinds[kind] = kinds.get(kind, 0.0) + (both["sent"] + both["received"]) / n
    served = [v["auc"] for v in versions]
    mlp = m["wire"].get("mlp", {}).get("dense_push", {"sent": 0, "received": 0})
    return {
        "samples": n,
        "examples_per_s": m["examples_per_s"],
        "wire_bytes_per_sample": m["wire_bytes_per_sample"],
        "by_kind": kinds,
        "wire": m["wire"],  # per table and kind, bytes sent and received
        "pull_cache": {k: m[k] for k in CACHE_COUNTS if k in m},
        # wdl and deepfm: rank 0's writes of the MLP and its Adam state at cuts, a share that
        # moves with training speed (the same write every --cut-s whatever was trained)
        "mlp_bytes_per_sample": (mlp["sent"] + mlp["received"]) / n,
        "exports": int(m["exports"]),
        # CPU microseconds a sample by role: on 2 shared cores, speed follows their sum
        "cpu_us_per_sample": {k: 1e6 * v / n for k, v in cpu.items()},
        "published": len(versions),
        "served_auc": statistics.mean(served) if served else float("nan"),
        "served_aucs": served,  # each published version's, in export order (_summarize compares a common prefix)
        "worker_view_auc": m["window_auc"],
        "progressive_logloss": m["progressive_logloss"],
        # per table, the push codec at the end (what `auto` chose) and how often it switched
        "chose": ",".join(f"{t.removeprefix('push:')}={c}" for t, c in sorted(m["codecs"].items()) if _chosen(t)),
        "switches": m.get("auto_switches", 0.0),
        "auto_judged": m["codecs"],  # with `auto`'s last judgement of each table, and why
        # progress reports at which the ranks' MLP replicas differed (0: they never did)
        "mlp_replicas_differ": m.get("mlp_replicas_differ", 0.0),
    }


ROLES = ("trainer", "shards", "manager")  # whose CPU a run keeps (cpu_us_per_sample)
FORCED_ONEBIT = "onebit/raw"
WARM_UP_ROWS = 60_000  # a short stream: a few exports, cuts and 1-bit windows, in seconds


def warm_up(name: str, model: str, workers: int, codecs: list[str], work: Path, args: argparse.Namespace) -> None:
    """One unmeasured run of each configuration on a short stream, with exports and cuts
    far more often than the measured runs', so that every kernel they use is compiled and
    cached before one is timed."""
    folder = work / f"warm-up-{name}-{model}-w{workers}"
    folder.mkdir()
    rows = min(args.rows, WARM_UP_ROWS)
    stream, _ = write_stream(name, rows, folder, workers)
    short = argparse.Namespace(**{**vars(args), "export_every": max(1, rows // 6), "cut_s": 0.5, "logs": ""})
    started = time.monotonic()
    # `auto` may not reach 1-bit on so short a stream, and its kernels would then compile
    # inside a measured run (4 s of one DeepFM run's CPU): a forced 1-bit run compiles them
    extra = [FORCED_ONEBIT] if any(c.startswith("auto") for c in codecs) and FORCED_ONEBIT not in codecs else []
    for c in [*codecs, *extra]:
        run_one(stream, preset_of(name), model, c, workers, folder / _safe(c), short)
    print(f"warm-up of {name} {model} w{workers}: {time.monotonic() - started:.0f} s, unmeasured", flush=True)


def _safe(codecs: str) -> str:
    """A codec pair as a folder name."""
    return "".join(ch if ch.isalnum() else "_" for ch in codecs)


def _cpu_s(pid: int) -> float:
    """CPU seconds a live process has used (user and system, from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _chosen(key: str) -> bool:
    """The summary's codecs a row names: each table's push codec, the MLP's moments and weights, the cut drains."""
    return key.startswith("push:") or key in ("mlp_moments", "mlp_weights", "cut_drain", "mlp_allreduce")


def _published(repo: Repository, exports: int, timeout_s: float = 300) -> list[dict[str, float]]:
    """Each published version's holdout evaluation, once the manager handled every export."""
    deadline = time.monotonic() + timeout_s
    while len(repo.processed_exports()) < exports and time.monotonic() < deadline:
        time.sleep(0.2)
    out = []
    for v in repo.versions():
        ev = (repo.manifest(v).get("evaluation") or {}).get("candidate") or {}
        if ev.get("samples"):
            out.append({"auc": float(ev["auc"]), "samples": float(ev["samples"])})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--datasets", default="frappe,criteo10k")
    ap.add_argument("--models", default="lr,ffm")
    ap.add_argument("--codecs", default=f"{BASELINE},none/raw,auto/auto,onebit/raw,onebit/raw{NO_DRAIN},topk:0.01+onebit/raw")
    ap.add_argument("--workers", default="1")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=1)
    # a file is read far faster than a stream arrives (LR trains ~500k samples/s here), so
    # exports go by samples: one whenever the last has its holdout of --export-every samples
    # (an export every 2 s of a 25k samples/s stream), at the same samples in every run, so
    # codecs are compared on the same versions and holdouts; cuts stay on a clock
    ap.add_argument("--cut-s", type=float, default=5.0)
    ap.add_argument("--export-every", type=int, default=50_000)
    ap.add_argument("--out", default=str(ROOT / "bench/results/served.json"))
    ap.add_argument("--plot", default="", help="a PNG of served AUC against wire bytes per sample, one line per model")
    ap.add_argument("--logs", default="", help="a folder to keep each run's trainer log in")
    ap.add_argument("--plot-from", default="", help="only draw --plot from these result files (comma-separated)")
    ap.add_argument("--no-warm-up", action="store_true", help="skip each configuration's unmeasured short first run")
    ap.add_argument("--abba", action="store_true", help="run every other repetition's configurations in reverse order")
    args = ap.parse_args()
    if args.plot_from:
        plot([r for f in args.plot_from.split(",") for r in json.loads(Path(f).read_text())], Path(args.plot))
        return
    codecs = args.codecs.split(",")
    if codecs[0] != BASELINE:
        codecs = [BASELINE, *[c for c in codecs if c != BASELINE]]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in args.datasets.split(","):
            for workers in (int(w) for w in args.workers.split(",")):
                stream, rows = write_stream(name, args.rows, work, workers)
                for model in args.models.split(","):
                    if not args.no_warm_up:
                        warm_up(name, model, workers, codecs, work, args)
                    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in codecs}
                    for rep in range(args.reps):
                        # alternating within a repetition; with --abba every other repetition
                        # runs them in reverse, so that a drift of the machine's speed cancels
                        for c in codecs[::-1] if args.abba and rep % 2 else codecs:
                            tag = f"{name}-{model}-w{workers}-{_safe(c)}-{rep}"
                            r = run_one(stream, preset_of(name), model, c, workers, work / tag, args)
                            print(name, model, workers, c, json.dumps(r), flush=True)
                            runs[c].append(r)
                    results += _summarize(name, model, workers, runs)
                    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                    Path(args.out).write_text(json.dumps(results, indent=1))  # kept if a later run is cut short
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    _print(results)
    if args.plot:
        plot(results, Path(args.plot))


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """Served AUC (as its difference from the uncompressed protocol's, so every run shares
    one axis) against wire bytes per sample (log scale): a line per dataset, model and
    worker count through its codec pairs, the targets' 0.001 band shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault(f"{r['dataset']} {r['model']} W={r['workers']}", []).append(r)
    fig, ax = plt.subplots(figsize=(13, 6))
    ax.axhspan(-0.001, 0.001, color="0.9", label="within 0.001 of uncompressed")
    for name, rs in groups.items():
        rs = sorted(rs, key=lambda r: -r["wire_bytes_per_sample"])
        style = "o-" if rs[0]["workers"] == 1 else "s--"  # colours repeat past ten lines; the marks tell ranks apart
        (line,) = ax.plot([r["wire_bytes_per_sample"] for r in rs], [r["d_served_auc"] for r in rs], style, label=name)
        for r in rs:
            at = (r["wire_bytes_per_sample"], r["d_served_auc"])
            ax.annotate(r["codecs"], at, fontsize=6, rotation=25, color=line.get_color())
    ax.set_xscale("log")
    ax.set_xlabel("wire bytes per sample, both ways (log)")
    ax.set_ylabel("served AUC minus the uncompressed protocol's (holdouts)")
    ax.set_title("Compression as served: 2 shard processes, a cut every 5 s, exports every ~2 s")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _med(rs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rs)


def _common_versions(runs: dict[str, list[dict[str, Any]]]) -> None:
    """Scores every run of a row over the same versions: the first K published, K the
    fewest any run published. Ranks that interleave differently can end with one export
    more or fewer, and a mean over another set of versions is not comparable: two Frappe
    DeepFM ranks once scored +0.013 against the old protocol only because the default's
    runs had a sixth, late version (2026-12-06)."""
    every = [r for rs in runs.values() for r in rs]
    if not every or not all(r.get("served_aucs") for r in every):
        return
    k = min(len(r["served_aucs"]) for r in every)
    if any(len(r["served_aucs"]) != k for r in every):  # said, not hidden: the table's count is K
        counts = sorted({len(r["served_aucs"]) for r in every})
        print(f"served AUC over the first {k} versions: runs published {counts}", flush=True)
    for r in every:
        r["served_auc"] = statistics.mean(r["served_aucs"][:k])
        r["published"] = k


def _summarize(name: str, model: str, workers: int, runs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    _common_versions(runs)
    base = runs[BASELINE]
    out = []
    for c, rs in runs.items():
        kinds = sorted({k for r in rs for k in r["by_kind"]})
        out.append(
            {
                "dataset": name,
                "model": model,
                "workers": workers,
                "codecs": c,
                "wire_bytes_per_sample": _med(rs, "wire_bytes_per_sample"),
                "ratio": _med(base, "wire_bytes_per_sample") / _med(rs, "wire_bytes_per_sample"),
                "by_kind": {k: statistics.median(r["by_kind"].get(k, 0.0) for r in rs) for k in kinds},
                "mlp_bytes_per_sample": _med(rs, "mlp_bytes_per_sample"),
                "served_auc": _med(rs, "served_auc"),
                "d_served_auc": _med(rs, "served_auc") - _med(base, "served_auc"),
                "published": _med(rs, "published"),
                "worker_view_auc": _med(rs, "worker_view_auc"),
                "examples_per_s": _med(rs, "examples_per_s"),
                "cpu_us_per_sample": {k: statistics.median(r["cpu_us_per_sample"][k] for r in rs) for k in ROLES},
                "chose": rs[-1]["chose"],
                "wire": rs[-1]["wire"],  # the last run's bytes per table and kind, sent and received
                "pull_cache": rs[-1]["pull_cache"],  # the last run's pull cache counts
                "switches": _med(rs, "switches"),
            }
        )
    return out


def _print(results: list[dict[str, Any]]) -> None:
    print(
        "| data | model | W | push/pull codec | wire B/sample | vs uncompressed | of it: pulls, pushes, drains, between ranks |"
        " of the pushes: MLP cut writes | served AUC | dAUC | versions | worker's view AUC | ex/s |"
        " push codecs at the end (switches) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        k = r["by_kind"]
        pulls = k.get("sparse_pull", 0.0) + k.get("dense_pull", 0.0)
        pushes = k.get("sparse_push", 0.0) + k.get("dense_push", 0.0)
        drains = sum(v for kind, v in k.items() if kind.startswith("drain_"))
        ranks = k.get("ranks", 0.0)  # the ranks' collectives: the MLP's gradients, the rounds' words
        print(
            f"| {r['dataset']} | {r['model']} | {r['workers']} | {r['codecs']} | {r['wire_bytes_per_sample']:.2f} |"
            f" {r['ratio']:.2f}x | {pulls:.2f}, {pushes:.2f}, {drains:.2f}, {ranks:.2f} |"
            f" {r.get('mlp_bytes_per_sample', 0.0):.2f} |"
            f" {r['served_auc']:.4f} | {r['d_served_auc']:+.4f} |"
            f" {r['published']:.0f} | {r['worker_view_auc']:.4f} | {r['examples_per_s']:,.0f} |"
            f" {r['chose']} ({r['switches']:.0f}) |"
        )


if __name__ == "__main__":
    main()
