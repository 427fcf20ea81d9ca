"""What an operator sees of exports waiting for their holdout: a quiet stream leaves the
newest export short of its holdout, so no new version is published, and the gauge says how
many samples it still waits for; the READY counter moves only once it has them."""

from __future__ import annotations

import numpy as np
from prometheus_client import REGISTRY

from ctr.data.batch import SampleBatch
from ctr.data.fields import FieldIndex
from ctr.model.spec import ModelSpec
from ps.client import PSClient
from trainer.run.exporter import Exporter
from trainer.step.factorization import build_model


def _needed() -> float:
    return REGISTRY.get_sample_value("boundless_trainer_export_holdout_needed_samples") or 0.0


def _ready() -> float:
    return REGISTRY.get_sample_value("boundless_trainer_exports_ready_total") or 0.0


def _batch(n: int) -> SampleBatch:
    return SampleBatch(
        np.zeros(n, np.float32),
        np.arange(n + 1, dtype=np.int64),
        np.arange(n, dtype=np.uint64),
        np.zeros(n, np.int32),
        np.ones(n, np.float32),
    )


def test_the_gauge_counts_the_holdout_an_export_waits_for_and_ready_counts_when_it_came(tmp_path):
    fields = FieldIndex(["a", "b"])
    spec = ModelSpec("lr", k=1, fields=tuple(fields.names))
    client = PSClient.local(export_root=tmp_path)
    build_model(spec, device="cpu").prepare(client)
    exporter = Exporter(client, tmp_path, "m", spec, fields, {}, full_every=10, holdout=300)
    ready = _ready()
    first = exporter.export({"samples": 1.0})
    assert _needed() == 300 and _ready() == ready and not (tmp_path / first / "READY").exists()
    exporter.observe(_batch(200))
    assert _needed() == 100 and _ready() == ready
    exporter.observe(_batch(200))
    assert _needed() == 0 and _ready() == ready + 1 and (tmp_path / first / "READY").exists()
    exporter.export({"samples": 2.0})
    exporter.close()  # the run ends before its holdout came: READY with what there is
    assert _needed() == 0 and _ready() == ready + 2
