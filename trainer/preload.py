"""Loads a rank's modules (numba kernels, gRPC, torch for the group) once, in the process
that forks the `--workers` ranks (the multiprocessing forkserver preloads this module), so
each rank starts without paying numba's and torch's start-up again (about 0.5 s and 1 s of
CPU per rank on this machine)."""

from __future__ import annotations

from ctr.data.fields import FieldIndex
from ctr.data.schema import PRESETS
from ctr.model.spec import ModelSpec
from ps.client import PSClient, load_wire_kernels
from trainer import daemon  # noqa: F401 - the ranks run it
from trainer.input.block_parser import BlockParser
from trainer.run import group  # noqa: F401 - torch.distributed, for the ranks' group
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
