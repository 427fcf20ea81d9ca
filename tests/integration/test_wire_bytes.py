"""Every byte both ways: the trainer's wire ledger (summary JSON `wire`) equals, call kind
by call kind, the serialized requests and replies its two shard processes counted."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from boundless.processes import Daemon, start

# the trainer's kinds, by the ParameterServer method that carries them
METHODS = {
    "sparse_pull": ("Pull",),
    "dense_pull": ("PullDense",),
    "sparse_push": ("Push",),
    "dense_push": ("PushDense",),
    "control": ("DeclareTables", "Stats", "Prepare", "Commit", "Export", "Restore"),
}


def _shard_counts(shards: list[Daemon]) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for s in shards:
        text = urllib.request.urlopen(f"http://127.0.0.1:{s.ready['metrics_port']}/metrics", timeout=10).read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "boundless_ps_wire_bytes_total":
                    key = (sample.labels["method"], sample.labels["direction"])
                    out[key] = out.get(key, 0.0) + sample.value
    return out


def test_the_trainers_ledger_equals_what_the_shards_received_and_sent(data_dir: Path, tmp_path: Path):
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:20000]
    stream = tmp_path / "stream.libfm"
    stream.write_text("\n".join(lines) + "\n")
    shards = []
    for i in range(2):
        args = ["ps", "--shard-index", str(i), "--shard-count", "2", "--data-dir", str(tmp_path / f"ps{i}")]
        d = start(f"ps{i}", [*args, "--metrics-port", "0"], tmp_path)
        d.wait_ready()
        shards.append(d)
    try:
        out = tmp_path / "m.json"
        cmd = [sys.executable, "-m", "boundless", "train", "--source", str(stream), "--no-follow", "--metrics-port", "-1"]
        cmd += ["--ps", ",".join(s.address for s in shards), "--model", "deepfm", "--k", "4", "--hidden", "16"]
        cmd += ["--push-codec", "onebit", "--batch-size", "512", "--checkpoint-interval-s", "0.2", "--metrics-out", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = json.loads(out.read_text())
        counted = _shard_counts(shards)
    finally:
        for s in shards:
            s.stop()
    by_kind: dict[str, list[int]] = {}
    for kinds in got["wire"].values():
        for kind, both in kinds.items():
            kind = "sparse_push" if kind.startswith("drain_") else kind  # residuals travel as pushes
            slot = by_kind.setdefault(kind, [0, 0])
            slot[0] += both["sent"]
            slot[1] += both["received"]
    assert set(by_kind) == set(METHODS), by_kind  # this run makes every kind of call
    for kind, methods in METHODS.items():
        received = sum(counted.get((m, "received"), 0.0) for m in methods)
        sent = sum(counted.get((m, "sent"), 0.0) for m in methods)
        assert by_kind[kind] == [received, sent], (kind, by_kind[kind], received, sent)
    total = sum(sum(b) for b in by_kind.values())
    assert got["wire_bytes"] == total > 0
    assert any(k.startswith("drain_") for kinds in got["wire"].values() for k in kinds), got["wire"]  # 1-bit residuals
    assert got["rows_pushed_as_ids"] > 0, got  # drains named rows by id over gRPC
    pushes = {k: v for k, v in got["codecs"].items() if k.startswith("push:")}
    assert got["codecs"]["pull"] == "raw" and pushes and set(pushes.values()) == {"onebit"}, got["codecs"]
