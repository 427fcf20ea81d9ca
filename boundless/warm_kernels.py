"""Compiles and caches the numba kernels before a first run needs them (`make install` runs
this): a fresh install otherwise compiles them inside its first training and first request,
a minute of a demo's clock during which nothing seems to happen.

Every model type trains a few thousand synthetic samples through the in-process PS, both
update modes where they differ, exports, and the export is published and scored the way the
manager and serving load it. Run as `python -m boundless.warm_kernels`; it prints what it
did and how long it took."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from boundless.synthetic import SyntheticSpec, SyntheticStream

MODELS: tuple[tuple[str, list[str]], ...] = (
    ("lr", []),
    ("fm", ["--k", "4"]),
    ("ffm", ["--k", "2"]),
    ("wdl", ["--k", "4", "--hidden", "8"]),
    ("deepfm", ["--k", "4", "--hidden", "8"]),
)
LINES = 3000


def _train(stream: Path, exports: Path, model: str, flags: list[str], work: Path) -> None:
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(stream), "--model", model, *flags]
    cmd += ["--format", "kv", "--ps", "local", "--local-shards", "2", "--export-dir", str(exports)]
    cmd += ["--holdout-samples", "500", "--metrics-port", "-1", "--port", "-1", "--log-level", "WARNING"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"warm_kernels: training {model} failed:\n{done.stderr[-2000:]}")


def _publish_and_score(exports: Path, repo_dir: Path) -> None:
    """The exports published as the manager does, and scored as serving does."""
    from ctr.repository.versions import Repository
    from modelmgr.publish.evaluate import load_published
    from modelmgr.publish.gate import QualityGate
    from modelmgr.publish.publisher import Publisher
    from serving.loading.swap_warmup import warmup_requests

    repo = Repository(repo_dir, "ctr")
    lenient = QualityGate(min_samples=1, min_auc=0, max_logloss=1e9, calibration_low=0, calibration_high=1e9)
    Publisher(repo, exports, lenient).poll()  # its gate scores the holdouts as the manager does
    for v in repo.versions():
        model = load_published(repo, v)
        for req in warmup_requests(model):  # both request encodings, as a serving process's first version
            model.score(req)


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m boundless.warm_kernels", allow_abbrev=False)
    names = [m for m, _ in MODELS]
    ap.add_argument("--models", default=",".join(names), help="the model types to warm (one process each may run in parallel)")
    wanted = ap.parse_args().models.split(",")
    if unknown := set(wanted) - set(names):
        ap.error(f"--models: unknown {', '.join(sorted(unknown))}; expected some of {', '.join(names)}")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="boundless-warm-") as tmp:
        work = Path(tmp)
        synth = SyntheticStream(SyntheticSpec())
        vals, _, labels = synth.sample(LINES)
        stream = work / "stream.txt"
        stream.write_text("\n".join(synth.format(vals, labels)) + "\n")
        for model, flags in (m for m in MODELS if m[0] in wanted):
            t = time.monotonic()
            exports = work / f"exports-{model}"
            _train(stream, exports, model, flags, work)
            _publish_and_score(exports, work / f"repo-{model}")
            print(f"warm_kernels: {model} compiled and cached in {time.monotonic() - t:.1f} s", flush=True)
    print(f"warm_kernels: the kernels are compiled and cached ({time.monotonic() - started:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
