"""The Grafana dashboard in the chart queries only metrics that the daemons export: every
`boundless_*` series its panels name is found on a running process (PS shard, trainer,
model manager, serving)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from boundless.processes import start

DASHBOARD = Path(__file__).resolve().parents[2] / "helm" / "boundless" / "dashboards" / "boundless.json"
SERIES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gauge": ("",),
}


def queried_series() -> set[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert exprs, "the dashboard has no queries"
    return {name for e in exprs for name in re.findall(r"boundless_[a-z0-9_]+", e)}


def exported_series(metrics_port: int) -> set[str]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    out = set()
    for family in text_string_to_metric_families(text):  # families without samples yet count too
        out |= {family.name + suffix for suffix in SERIES.get(family.type, ("",))}
    return out


def test_every_series_the_dashboard_queries_is_exported(tmp_path, data_dir):
    (tmp_path / "in").mkdir()
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:500]
    (tmp_path / "in" / "a.libfm").write_text("\n".join(lines) + "\n")  # the trainer starts on data
    (tmp_path / "exports").mkdir()
    ps = start("ps", ["ps"], tmp_path)
    daemons = [ps]
    try:
        ps.wait_ready()
        daemons += [
            start("trainer", ["train", "--source", str(tmp_path / "in"), "--ps", ps.address], tmp_path),
            start(
                "manager", ["model", "watch", "--exports", str(tmp_path / "exports"), "--repo", str(tmp_path / "repo")], tmp_path
            ),  # noqa: E501
            start("serving", ["serve", "--repo", str(tmp_path / "repo")], tmp_path),
        ]
        exported: set[str] = set()
        for d in daemons:
            exported |= exported_series(int(d.wait_ready()["metrics_port"]))
        missing = sorted(queried_series() - exported)
        assert not missing, f"the dashboard queries series no daemon exports: {missing}"
    finally:
        for d in daemons:
            d.stop()
