"""Overlaps a worker's RPCs with its work: the pull of batch i+1 runs while batch i trains,
and the push of batch i while batch i+2 is parsed, with one push in flight at most.

One worker stays exactly the synchronous path: before a batch's pull is issued, every push
but the last has been acknowledged, and the rows the batch shares with the last pushed
batch are taken from that batch's result (FactorizationModel.compute), which is what the
shards hold once its push lands (unless the shards admit or evict rows: then it does not
overlap). LR, FM, FFM and, with the MLP on the worker (hybrid training), Wide&Deep and
DeepFM run so (their `pipelined`); batch updates and an MLP that steps on the shards train
synchronously through the same interface, and so does everything with in-process shards,
where there is no latency to hide.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import cast

import numpy as np
import numpy.typing as npt

from ctr.data.batch import SampleBatch
from ps.client import PSClient
from trainer.step.factorization import Fetched, Stepwise, TrainableModel, Trained

Result = tuple[SampleBatch, npt.NDArray[np.float32]]


class Pipeline:
    """Not thread-safe: one training loop drives it."""

    def __init__(self, client: PSClient, model: TrainableModel, overlap: bool | None = None) -> None:
        self.client = client
        self.model = model
        # in-process shards leave no latency to hide, and the handoffs cost (measured: -14%);
        # shards that may drop a push's rows (admission, eviction) would leave the rows taken
        # from the last batch's result wrong; a model whose own work takes the cores the pull
        # would use (an MLP on the CPU: its overlap_pays) gains nothing
        pays = client.remote and not client.rows_may_drop and getattr(model, "overlap_pays", True)
        wanted = pays if overlap is None else overlap
        self._stepwise = cast(Stepwise, model) if wanted and getattr(model, "pipelined", False) else None
        self._fetcher = ThreadPoolExecutor(1, thread_name_prefix="pull")
        self._pusher = ThreadPoolExecutor(1, thread_name_prefix="push")
        self._pending: tuple[SampleBatch, Future[Fetched]] | None = None
        self._push: Future[None] | None = None
        self._previous: Trained | None = None

    @property
    def overlap(self) -> bool:
        return self._stepwise is not None

    def submit(self, batch: SampleBatch) -> Result | None:
        """Queues a batch; returns the batch trained meanwhile with its predictions, if any."""
        if self._stepwise is None:
            return batch, self.model.train(self.client, batch)
        if self._push is not None:
            self._push.result()  # every push but the one to come is acknowledged before this pull
        fetched = self._fetcher.submit(self._stepwise.fetch, self.client, batch)
        done = self._train_pending()
        self._pending = (batch, fetched)
        return done

    def _train_pending(self) -> Result | None:
        if self._pending is None or self._stepwise is None:
            return None
        batch, fetched = self._pending
        self._pending = None
        got = fetched.result()
        probs, trained = self._stepwise.compute(batch, got, self._previous)
        if self._push is not None:
            # the push before must have landed (or raise) before its future is replaced: a
            # flush that dropped it unread would lose a push that failed (a shard that did
            # not answer) and train on as if the shards held it
            self._push.result()
        self._push = self._pusher.submit(self._stepwise.push, self.client, got, trained)
        self._previous = trained
        return batch, probs

    def flush(self) -> Result | None:
        """Trains the queued batch and waits until every push is acknowledged."""
        done = self._train_pending()
        if self._push is not None:
            self._push.result()
            self._push = None
        self._previous = None
        return done

    def abandon(self) -> None:
        """Drops the batch in flight and its push without training or waiting on them (a
        shard restarted: they belong to a past the shards went back from)."""
        self._pending = None
        self._push = None
        self._previous = None
        self._fetcher.shutdown(wait=True, cancel_futures=True)
        self._pusher.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        self.flush()
        self._fetcher.shutdown()
        self._pusher.shutdown()
