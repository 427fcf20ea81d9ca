"""A worker's own view of the rows it trains: pulled state plus its unsent residuals."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ctr.model.optim import accumulator_columns
from ctr.model.spec import TableSpec
from ps.client import PSClient


def own_view(client: PSClient, table: TableSpec, keys: npt.NDArray[np.uint64], state: npt.NDArray[np.float64]) -> None:
    """Adds to pulled optimizer state what this worker's compressor has not sent yet, so the
    worker trains from its own updates; accumulators (n, v) stay >= 0 even when a lossy pull
    codec rounded them below what the residual takes back. Without error feedback (the
    default codecs) the pulled state is the view already."""
    unsent = client.unsent(table.name, keys, state.shape[1])
    if unsent is None:
        return
    state += unsent
    acc = accumulator_columns(table.optimizer.kind, table.dim)
    np.maximum(state[:, acc], 0.0, out=state[:, acc])
