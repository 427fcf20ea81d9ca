"""Loads the worker's numba kernels and gRPC modules once, in the process that forks the
workers (the multiprocessing forkserver preloads this module), so each worker starts
without paying numba's start-up again (about 0.5 s of CPU per worker on this machine)."""

from __future__ import annotations

from ctr.data.fields import FieldIndex
from ctr.data.schema import PRESETS
from ctr.model.spec import ModelSpec
from ps.client import PSClient, load_wire_kernels
from trainer.input.block_parser import BlockParser
from trainer.run.workers import worker_main  # noqa: F401 - the forked workers run it
from trainer.step.factorization import build_model


def warm() -> None:
    """Runs each hot kernel once on a tiny input (their compiled code loads on first use)."""
    fields = FieldIndex(("0", "1"), frozen=True)
    criteo = "\t".join(["1", "5", *[""] * 12, *["a1"] * 25, "b2"]).encode() + b"\n"
    for fmt, line in (("libsvm", b"1 3:1 7:1\n"), ("criteo", criteo)):
        schema = PRESETS[fmt]
        index = fields if fmt == "libsvm" else FieldIndex(schema.base_fields(None), frozen=True)
        batch = BlockParser(schema, index, None, 1 << 20).parse(memoryview(line), False, 4).batch
        assert len(batch) == 1, fmt
    load_wire_kernels()
    for model in ("lr", "fm", "ffm"):
        client = PSClient.local(1)
        spec = ModelSpec(model, k=2, fields=tuple(index.names))
        m = build_model(spec, staleness=1)
        m.prepare(client)
        m.train(client, batch)
        client.close()


warm()
