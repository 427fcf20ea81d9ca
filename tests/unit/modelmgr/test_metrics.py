"""Labelled counters an operator alerts on exist at 0 from the start: a rate() over a series
that appears only with the first rejection (or the first error) sees no data until then."""

from __future__ import annotations

from prometheus_client import REGISTRY

import modelmgr.metrics
import serving.metrics


def test_every_rejection_stage_and_predict_error_code_has_its_series_at_start():
    for stage in modelmgr.metrics.STAGES:
        assert REGISTRY.get_sample_value("boundless_modelmgr_rejected_total", {"stage": stage}) is not None
    for code in ("OK", "INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "UNAVAILABLE"):
        assert REGISTRY.get_sample_value("boundless_serving_requests_total", {"code": code}) is not None
    assert serving.metrics.REQUESTS is not None
