"""Loading a version for serving: shard files whose columns do not match the spec's
tables (the kernels index rows by the spec's k and fields) are refused with the reason."""

from __future__ import annotations

import copy
import json

import pytest

from bench.serving_model import publish, requests, spec_for
from modelmgr.repository import MANIFEST, Repository
from serving.model import load


def _manifest(tmp_path, model: str):
    repo = Repository(tmp_path / "repo", "ctr")
    publish(repo, 1, spec_for(model, k=4, hidden=(8,)), requests(1, items=3), keys=500, shards=2)
    d = repo.path(1)
    return d, json.loads((d / MANIFEST).read_text())


@pytest.mark.parametrize("model", ["fm", "ffm", "wdl"])
def test_a_version_loads_when_its_columns_fit_the_spec(tmp_path, model):
    d, m = _manifest(tmp_path, model)
    served = load(d, m, m, d, [], None)
    assert served.keys > 0 and served.spec.type == model


@pytest.mark.parametrize(
    ("model", "columns", "reason"),
    [
        ("ffm", "w:1,v:4", "table 'v' is 4 wide; the spec needs 240"),  # one field's vectors, not 60
        ("fm", "w:1,v:2", "table 'v' is 2 wide; the spec needs 4"),
        ("wdl", "w:1,v:4", "table 'emb' is not in the shard files"),
    ],
)
def test_columns_that_do_not_fit_the_spec_are_refused(tmp_path, model, columns, reason):
    d, m = _manifest(tmp_path, model)
    bad = copy.deepcopy(m)
    for f in bad["files"]:
        if f["role"] == "sparse_full":
            f["columns"] = columns
    with pytest.raises(ValueError, match=reason.replace("(", r"\(")):
        load(d, bad, bad, d, [], None)
