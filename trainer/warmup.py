"""Loads the worker's numba kernels and gRPC modules once, in the process that forks the
workers (the multiprocessing forkserver preloads this module), so each worker starts
without paying numba's start-up again (about 0.5 s of CPU per worker on this machine)."""

from __future__ import annotations

from ctr.block_parser import BlockParser
from ctr.fields import FieldIndex
from ctr.modelspec import ModelSpec
from ctr.schema import PRESETS
from ps.client import PSClient, load_wire_kernels
from trainer.model import build_model
from trainer.workers import worker_main  # noqa: F401 - the forked workers run it


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
