"""Requests a version scores before it takes over when serving has no recent request of
its own to warm it with (the first version a process loads): a small request encoded the
two ways clients send them (named values, and integer columns), so that numba loads or
compiles the decoding, lookup and scoring kernels before the first real request instead
of during it. On an install whose kernel cache is cold, that first request used to wait
for the compilation: tens of seconds, past any client's deadline."""

from __future__ import annotations

import numpy as np

from serving.client import RequestEncoder
from serving.loading.servable import ServableModel
from serving.request.encoding import DecodedRequest, decode, field_hash_ids

ITEMS = 4


def warmup_requests(model: ServableModel) -> list[DecodedRequest]:
    """Decoded requests over the version's fields (none for a spec without field names:
    nothing to encode them with)."""
    fields = list(model.spec.fields)
    if not fields:
        return []
    encoder = RequestEncoder(None, fields)
    named = encoder.encode([{f: f"w{i}-{j}" for j, f in enumerate(fields)} for i in range(ITEMS)], {fields[0]: "w"})
    columns = encoder.encode_columns({f: np.arange(ITEMS, dtype=np.int64) + 1000 * j for j, f in enumerate(fields)})
    hashes = field_hash_ids(tuple(fields))
    return [decode(e, max(1, model.spec.field_count), hashes, both=model.splitter.both) for e in (named, columns)]
