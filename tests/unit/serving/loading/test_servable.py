"""Loading and scoring a version: shard files whose columns do not match the spec's
tables (the kernels index rows by the spec's k and fields) are refused with the reason;
FFM scores the same whether its rows are read in place or copied; FM and the DNN families
the same whatever order their rows are looked up in."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from bench.serving_model import publish, requests, spec_for
from ctr.model.partial_sums import partial_sums
from ctr.repository.versions import MANIFEST, Repository
from serving.loading import servable as served
from serving.loading.servable import load
from serving.loading.swap_warmup import ITEMS, warmup_requests
from serving.request.encoding import decode, field_hash_ids


def _published(tmp_path, spec, reqs, keys: int, shards: int):
    """(the folder, the manifest) of version 1 of the model, holding the requests' keys."""
    repo = Repository(tmp_path / "repo", "ctr")
    publish(repo, 1, spec, reqs, keys=keys, shards=shards)
    d = repo.path(1)
    return d, json.loads((d / MANIFEST).read_text())


def _manifest(tmp_path, model: str):
    return _published(tmp_path, spec_for(model, k=4, hidden=(8,)), requests(1, items=3), keys=500, shards=2)


@pytest.mark.parametrize("model", ["fm", "ffm", "wdl"])
def test_a_version_loads_when_its_columns_fit_the_spec(tmp_path, model):
    d, m = _manifest(tmp_path, model)
    version = load(d, m, m, d, [], None)
    assert version.keys > 0 and version.spec.type == model


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


def test_ffm_scores_rows_in_place_as_it_scores_copied_rows(tmp_path, monkeypatch):
    """FFM reads rows where the images hold them (serving.loading.servable.locate); a version with
    more shard files than MAX_LOCATED_TABLES copies them instead: the same scores."""
    spec, reqs = spec_for("ffm", k=3, hidden=()), requests(2, items=7)
    d, m = _published(tmp_path, spec, reqs, keys=2000, shards=3)
    version = load(d, m, m, d, [], None)
    for r in reqs:
        req = decode(r, spec.field_count, field_hash_ids(spec.fields))
        in_place = version.score(req)
        monkeypatch.setattr(served, "MAX_LOCATED_TABLES", 2)
        copied = version.score(req)
        monkeypatch.undo()
        np.testing.assert_array_equal(in_place, copied)  # the same kernel over the same rows
        assert np.ptp(in_place) > 0  # the rows matter


@pytest.mark.parametrize("model", ["lr", "fm", "ffm", "deepfm"])
def test_a_first_version_is_warmed_with_requests_over_its_fields(tmp_path, model):
    """With no recent request, the warm-up builds requests of both encodings over the
    version's fields, and they score like any request (serving.loading.swap_warmup)."""
    d, m = _manifest(tmp_path, model)
    version = load(d, m, m, d, [], None)
    reqs = warmup_requests(version)
    assert len(reqs) == 2
    for req in reqs:
        assert req.item_offsets.shape[0] - 1 == ITEMS and req.keys.shape[0] > 0
        assert (req.fields < version.spec.field_count).all()
        scores = version.score(req)
        assert scores.shape == (ITEMS,) and np.isfinite(scores).all()


@pytest.mark.parametrize("model", ["fm", "deepfm"])
def test_rows_looked_up_in_first_use_order_score_as_rows_in_dictionary_order(tmp_path, model):
    """A version of FM or a DNN family looks a request's rows up in the order its items read
    them (ctr.model.first_use); the same request scored with its rows handed over in the
    dictionary's order gives the same scores, bit for bit, and FM's partial sums too."""
    spec, reqs = spec_for(model, k=4, hidden=(8,)), requests(2, items=9)
    d, m = _published(tmp_path, spec, reqs, keys=3000, shards=2)
    version = load(d, m, m, d, [], None)
    for r in reqs:
        req = decode(r, spec.field_count, field_hash_ids(spec.fields))
        in_order = version.score(req)
        np.testing.assert_array_equal(in_order, version.score(req, version.rows(req.keys)))
        assert np.ptp(in_order) > 0
        if model == "fm":
            rows, v_at = version.rows(req.keys), version.columns["v"][0]
            want = partial_sums(req.context, req.item_offsets, req.item_indices, req.values, rows, v_at, spec.k)
            np.testing.assert_array_equal(version.partial(req), want)
