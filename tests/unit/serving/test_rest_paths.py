"""REST paths in TF Serving's shape: a model, a version by number or label, the call."""

from __future__ import annotations

from http import HTTPStatus

import pytest

from serving.rest import Refused, Target, parse_predict, target_of


@pytest.mark.parametrize(
    ("method", "path", "want"),
    [
        ("POST", "/v1/models/ctr:predict", Target("ctr", "predict")),
        ("POST", "/v1/models/ctr/versions/12:predict", Target("ctr", "predict", version=12)),
        ("POST", "/v1/models/ctr/labels/canary:predict", Target("ctr", "predict", label="canary")),
        ("GET", "/v1/models/ctr", Target("ctr", "status")),
        ("GET", "/v1/models/ctr/versions/3", Target("ctr", "status", version=3)),
        ("GET", "/v1/models/ctr/labels/stable", Target("ctr", "status", label="stable")),
        ("GET", "/v1/models/ctr/metadata", Target("ctr", "metadata")),
        ("GET", "/v1/models/ctr/labels/canary/metadata", Target("ctr", "metadata", label="canary")),
        ("GET", "/v1/models/ctr?x=1", Target("ctr", "status")),
        ("GET", "/v1/models", Target("", "models")),
        ("GET", "/v1/models/", Target("", "models")),
    ],
)
def test_paths_name_the_model_the_version_and_the_call(method, path, want):
    assert target_of(method, path) == want


@pytest.mark.parametrize(
    ("method", "path", "status", "words"),
    [
        ("POST", "/v1/models", HTTPStatus.NOT_FOUND, "no such endpoint"),
        ("GET", "/v1/modelsx", HTTPStatus.NOT_FOUND, "expected /v1/models/NAME"),
        ("GET", "/v2/models/ctr", HTTPStatus.NOT_FOUND, "expected /v1/models/NAME"),
        ("POST", "/v1/models/ctr:classify", HTTPStatus.NOT_FOUND, "no such endpoint"),
        ("POST", "/v1/models/ctr/versions/x:predict", HTTPStatus.BAD_REQUEST, "'x' is not a version number"),
        ("POST", "/v1/models/ctr/versions/0:predict", HTTPStatus.BAD_REQUEST, "'0' is not a version number"),
        ("POST", "/v1/models/ctr/tags/a:predict", HTTPStatus.NOT_FOUND, "/versions/V or /labels/L"),
        ("POST", "/v1/models/ctr/labels/:predict", HTTPStatus.NOT_FOUND, "/versions/V or /labels/L"),
    ],
)
def test_other_paths_are_refused_naming_the_endpoints(method, path, status, words):
    with pytest.raises(Refused) as e:
        target_of(method, path)
    assert e.value.status == status and words in str(e.value)


def test_tf_servings_default_signature_name_is_taken_and_another_refused():
    assert parse_predict(b'{"signature_name": "serving_default", "instances": [{"a": "1"}]}').rows == [{"a": "1"}]
    with pytest.raises(Refused, match="the one signature is 'serving_default'"):
        parse_predict(b'{"signature_name": "predict_v2", "instances": [{"a": "1"}]}')
