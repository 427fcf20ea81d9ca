"""The model owns its feature transform: a client that sends raw values (the README's call)
scores as the trainer saw the samples, exactly as `boundless predict` does; features of
fields the model lacks are counted, and refused when strict."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest

from boundless.processes import start
from ctr.data.number_text import style_of
from ctr.data.quality import auc
from ctr.data.schema import CRITEO_CATEGORICAL, CRITEO_NUMERIC, FeatureSchema
from serving.client import PredictClient

NAMES = ("label", *CRITEO_NUMERIC, *CRITEO_CATEGORICAL)


def _rows(lines: list[str]) -> tuple[list[float], list[dict[str, str]]]:
    labels, items = [], []
    for line in lines:
        cols = line.rstrip("\n").split("\t")
        labels.append(float(cols[0]))
        items.append({n: v for n, v in zip(NAMES[1:], cols[1:], strict=False) if v != ""})
    return labels, items


def _wait_version(client: PredictClient, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return int(client.status().version)
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture
def criteo_served(platform, data_dir: Path, tmp_path: Path):
    lines = (data_dir / "criteo_10k/train_rows1-10000.tsv").read_text().splitlines()
    train, held = tmp_path / "train.tsv", tmp_path / "held.tsv"
    train.write_text("\n".join(lines[:8000]) + "\n")
    held.write_text("\n".join(lines[8000:]) + "\n")
    proc = platform.train(train, "--model", "lr")
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = PredictClient(platform.serving.address)
    _wait_version(client, 60)
    yield platform, client, held, lines[8000:]
    client.close()


def test_the_readme_client_call_scores_as_boundless_predict(criteo_served):
    platform, client, held, lines = criteo_served
    status = client.status()
    assert list(status.transform.numeric) == list(CRITEO_NUMERIC)  # the manifest's transform reaches clients
    labels, items = _rows(lines)
    scores = []
    for lo in range(0, len(items), 200):
        pred = client.predict(items=items[lo : lo + 200])  # raw values, as the README shows
        assert pred.unknown_features == 0
        scores.extend(pred.scores.tolist())
    through_client = auc(labels, scores)
    cli = subprocess.run(
        [sys.executable, "-m", "boundless", "predict", "--address", platform.serving.address, "--data", str(held)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    through_cli = float(re.search(r"AUC (\d\.\d+)", cli.stderr).group(1))  # type: ignore[union-attr]
    assert abs(through_client - through_cli) <= 1e-6, (through_client, through_cli)
    offline = subprocess.run(
        [sys.executable, "-m", "boundless", "eval", "--repo", str(platform.dir / "repo"), "--data", str(held), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert offline.returncode == 0, offline.stderr
    evaluated = json.loads(offline.stdout)
    assert evaluated["samples"] == len(labels) and abs(evaluated["auc"] - through_client) <= 1e-6
    assert through_client > 0.6
    # --scores: a line per sample line, "nan" at a bad one, so the scores line up with the rows
    clean, flawed = held.with_name("clean.tsv"), held.with_name("flawed.tsv")
    clean.write_text("\n".join(lines[:50]) + "\n")
    flawed.write_text("\n".join([*lines[:3], "not a criteo line", *lines[3:50]]) + "\n")
    printed = []
    for path in (clean, flawed):
        cmd = [sys.executable, "-m", "boundless", "predict", "--address", platform.serving.address, "--data", str(path)]
        out = subprocess.run([*cmd, "--scores", "--max-bad-fraction", "0.5"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        printed.append(out.stdout.split())
    assert len(printed[1]) == 51 and printed[1][3] == "nan" and printed[1][:3] + printed[1][4:] == printed[0]
    # a file of fractional labels: both refuse it, naming its lines, instead of figures from none
    fractions = held.with_name("fractions.tsv")
    fractions.write_text("".join("0.25" + line[line.index("\t") :] + "\n" for line in lines))
    for command in (["predict", "--address", platform.serving.address], ["eval", "--repo", str(platform.dir / "repo")]):
        refused = subprocess.run(
            [sys.executable, "-m", "boundless", *command, "--data", str(fractions)], capture_output=True, text=True, timeout=120
        )
        assert refused.returncode != 0 and f"{len(lines)} of {len(lines)} lines are bad" in refused.stderr, refused.stderr
        assert f"{fractions}:1: label: '0.25' is a fraction" in refused.stderr and "Traceback" not in refused.stderr
    # the same call without the transform (numeric fields hashed raw) scores something else
    raw = PredictClient(platform.serving.address, schema=FeatureSchema(format="criteo"))
    skewed = raw.predict(items=items[:200]).scores
    assert abs(skewed - client.predict(items=items[:200]).scores).max() > 1e-3
    raw.close()


def test_unknown_feature_names_are_counted_and_refused_when_strict(criteo_served):
    platform, client, _, lines = criteo_served
    _, items = _rows(lines[:5])
    renamed = [{n.lower(): v for n, v in item.items()} for item in items]  # c1 for C1
    with pytest.raises(grpc.RpcError) as refused:
        client.predict(items=renamed)  # the client library is strict by default
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'c1'" in refused.value.details()
    lenient = PredictClient(platform.serving.address, strict=False)
    pred = lenient.predict(items=renamed)
    assert pred.unknown_features == sum(len(i) for i in renamed)
    lenient.close()
    port = platform.serving.wait_ready()["metrics_port"]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    counted = re.search(r"^boundless_serving_unknown_features_total (\S+)", text, re.M)
    assert counted is not None and float(counted.group(1)) >= 2 * pred.unknown_features


def test_numbers_a_client_holds_as_floats_score_as_the_integers_the_model_learned(criteo_served):
    """A pandas column with a missing value is float64: `df.to_dict("records")` and Python's
    JSON send 1005.0 for the 1005 the trainer read. Scored as the token "1005.0", which no
    sample had, it skewed every such score in silence. The version's transform says how each
    field wrote its numbers, and the client, REST included, writes them so."""
    platform, client, _, lines = criteo_served
    styles = dict(client.status().transform.number_text)
    whole = sorted(n for n, s in styles.items() if s == "int")
    assert "C1" not in CRITEO_NUMERIC and len(whole) >= 5, styles  # found by the trainer from the stream
    _, items = _rows(lines[:200])
    # the values a float column can hold: integers in canonical form (an id such as 08222191 stays text)
    as_floats = [{n: float(v) if n in whole and style_of(v) == "int" else v for n, v in it.items()} for it in items]
    assert any(isinstance(v, float) for it in as_floats for v in it.values())
    want = client.predict(items=items).scores
    assert np.array_equal(client.predict(items=as_floats).scores, want)
    # by column: the int field most often present, over the items that hold it, as float64 and as text
    name = max(whole, key=lambda n: sum(style_of(it.get(n, "")) == "int" for it in items))
    held = [it[name] for it in items if style_of(it.get(name, "")) == "int"]
    floats, texts = {name: np.array([float(v) for v in held])}, {name: np.array(held)}
    assert len(held) >= 5, (name, len(held))
    assert np.array_equal(client.predict_columns(items=floats).scores, client.predict_columns(items=texts).scores)
    floats[name][0], texts[name][0] = np.nan, ""  # pandas' integer column with a missing value: float64 with NaN
    assert np.array_equal(client.predict_columns(items=floats).scores, client.predict_columns(items=texts).scores)
    rest = start("serving-rest", ["serve", "--repo", str(platform.dir / "repo"), "--rest-port", "0"], platform.dir)
    try:
        port = rest.wait_ready()["rest_port"]
        url = f"http://127.0.0.1:{port}/v1/models/ctr:predict"
        body = json.dumps({"instances": as_floats[:20]}).encode()
        got = json.loads(urllib.request.urlopen(url, body, timeout=30).read())
        assert np.allclose(got["predictions"], want[:20], rtol=0, atol=1e-6)
        # by column, as pandas' to_json writes an integer column with a missing value: 1005.0 ... null
        as_json = [None if np.isnan(v) else float(v) for v in floats[name]]
        body = json.dumps({"inputs": {name: as_json}}).encode()
        got = json.loads(urllib.request.urlopen(url, body, timeout=30).read())
        by_text = client.predict_columns(items=texts).scores
        assert np.allclose(got["predictions"], by_text, rtol=0, atol=1e-6)  # before: 400, null among numbers
    finally:
        rest.stop()
