"""Wide&Deep and DeepFM on the PS: the wide weights and embeddings come from sparse tables,
the MLP's weights from the dense table `mlp`. The MLP runs in torch (CUDA when present) on
the whole batch with the batch-start embeddings; the numba kernel then trains the rows
example by example with the current wide and FM terms, using the MLP's output and its
Jacobian for the deep share (update: example), or sums the gradients (update: batch). The MLP
itself steps once per batch on its mean gradient: by default on this worker
(trainer.step.dense_replica: hybrid training, the PS holds it at cuts and exports), or, with
a compressed --dense-codec, on the shards (trainer.step.dense_sync)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ctr.data.batch import SampleBatch
from ctr.data.unique import sorted_unique_inverse
from ctr.model.dnn import deep_partials, pool_fields, train_deep_batch
from ctr.model.mlp import DeepCTR
from ctr.model.optim import FP32_MANTISSA, PLAIN, plain_state, rows_with_weights, weights_of_rows
from ctr.model.spec import ModelSpec
from ps.api import STATE
from ps.client import PSClient, PullSession
from trainer import metrics
from trainer.json_arrays import array_text, text_array
from trainer.step.dense_replica import DenseReplica
from trainer.step.dense_sync import DenseSync, dense_sync
from trainer.step.factorization import Fetched, Trained, carry_previous, push_trained
from trainer.step.host_staging import HostStaging
from trainer.step.own_view import own_view
from trainer.step.step_gate import StepGate

# |dloss/dlogit| at least this in the MLP's backward: the Jacobian is read back as the input
# gradient over it, so a saturated prediction (sigmoid rounds to the label) keeps it
JAC_FLOOR = 1e-6


class DeepModel:
    """replicated: the MLP trains on this worker (rank `rank` of `world`: with several, it
    steps in the ranks' rounds); otherwise through the PS with `dense_codec`."""

    def __init__(
        self,
        spec: ModelSpec,
        dense_codec: str = "fp32",
        replicated: bool = True,
        device: torch.device | None = None,
        rank: int = 0,
        world: int = 1,
        moment_bits: int = FP32_MANTISSA,
        weight_bits: int = FP32_MANTISSA,
        low_rank: tuple[int, int] | None = None,
        step_positives: int = 0,
    ) -> None:
        self.spec = spec
        self.tables = {t.name: t for t in spec.tables()}
        self.emb = spec.embedding_table() or "v"
        self.sequential = spec.update == "example"
        opt = spec.optimizer("mlp")
        self.net = DeepCTR(spec, seed=opt.seed).to(device or torch.device("cpu"))
        self.device = self.net.device.type
        self.staging = HostStaging(self.net.device)  # page-locked copies when the MLP is on a GPU
        self.params = {n: t.optimizer.params() for n, t in self.tables.items()}
        if dense_codec != "fp32" and opt.kind != "adam":
            raise ValueError(f"--dense-codec {dense_codec} needs an adam MLP optimizer, not {opt.kind} (--opt-mlp)")
        self._dense_sync = lambda: dense_sync(dense_codec, "mlp", opt.lr, opt.beta1, opt.beta2, opt.eps)
        self.dense: DenseSync = self._dense_sync()
        replica = replicated and dense_codec == "fp32"
        self.gate = StepGate(step_positives)  # the MLP on the shards: when its pushes go (the replica has its own)
        self.replica = (
            DenseReplica(self.net, opt, world > 1, rank, moment_bits, low_rank, weight_bits, step_positives) if replica else None
        )
        # the MLP on the shards (a --dense-codec): its gradient sum waiting for the gate
        self._waiting: npt.NDArray[np.float32] | None = None
        self._written: npt.NDArray[np.float64] | None = None  # the MLP rows prepare() wrote to a new table

    def prepare(self, client: PSClient) -> None:
        created = client.control.declare(self.spec.tables())
        self._written = None  # a declare again (after a restore) may find the table a cut holds
        if created["mlp"]:  # a fresh MLP starts from Glorot-uniform weights, not zeros
            t = self.tables["mlp"]
            start = rows_with_weights(self.net.flat().astype(np.float64).reshape(-1, 1), t.width, self.params["mlp"])
            client.push_dense("mlp", start, kind=STATE)  # written whole: nothing to pull first
            self._written = start

    def finish(self, client: PSClient) -> None:
        """Before a cut and at the end: the shards get what this worker holds of the MLP."""
        if self.replica is not None:
            self.replica.write_to(client)
        else:
            self._push_waiting(client)  # the cut holds every sample trained
            self.dense.flush(client)

    @property
    def finish_is_dense(self) -> bool:
        return self.replica is not None  # else finish pushes the embeddings' waiting gradients

    def mlp_for_export(self) -> dict[str, npt.NDArray[np.float32]] | None:
        """The MLP this worker trains, copied (training goes on after the export): the same
        on every rank, and what the shards would hold had it been written to them."""
        if self.replica is None:
            return None
        return {name: array.copy() for name, array in self.net.named_arrays().items()}

    def reset(self) -> None:
        self.dense = self._dense_sync()
        self._forget_waiting()

    def state(self, client: PSClient) -> dict[str, Any]:
        """What a cut records of this worker's model: what a compressed MLP sync holds, or
        the MLP's gradients waiting for a step where the cut's write left them waiting."""
        if self.replica is None:
            return {"dense_sync": self.dense.state(client)}
        waiting = self.replica.waiting_state()
        if waiting is None:
            return {}
        flat, samples, positives = waiting
        return {"mlp_waiting": {"grads": array_text(flat, "<f4"), "samples": samples, "positives": positives}}

    def take_up(self, client: PSClient, state: dict[str, Any]) -> None:
        written, self._written = self._written, None
        if self.replica is None:
            self._forget_waiting()  # of samples after the cut taken up: they are trained again
            self.dense.take_up(client, dict(state.get("dense_sync") or {}))
            return
        if written is not None:
            self.replica.take(written)  # the table this worker has just created: no read back
        else:
            self.replica.read_from(client)  # the cut's MLP, or the initial one another rank wrote
        waiting = state.get("mlp_waiting")
        if waiting:  # the gradients the cut's write left waiting (DenseReplica.exact)
            flat = text_array(waiting["grads"], "<f4")
            assert flat is not None
            self.replica.take_waiting(flat, int(waiting["samples"]), float(waiting["positives"]))

    def _mlp_step(
        self,
        batch: SampleBatch,
        uidx: npt.NDArray[np.int64],
        pooled: npt.NDArray[np.float32],
        w_state: npt.NDArray[np.float64],
        pw: npt.NDArray[np.float64],
        bias_state: npt.NDArray[np.float64],
        pb: npt.NDArray[np.float64],
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """One forward and one backward of the MLP: its output per example and, from the
        same backward, its Jacobian d out[e] / d pooled[e]. The backward is weighted by the
        batch-start dloss/dlogit (the logit with the rows as pulled), which gives the MLP's
        gradient in the parameters' .grad and dlogit[e] * Jacobian[e] for the input; the
        Jacobian is that over dlogit[e], kept off zero (JAC_FLOOR) where the prediction is
        saturated. A separate Jacobian pass would cost a third more of the MLP's time."""
        w32 = weights_of_rows(w_state, 1, pw)[:, 0].astype(np.float32)
        bias = float(weights_of_rows(bias_state, 1, pb)[0, 0])
        partial = deep_partials(
            batch.offsets, uidx, batch.values, w32, pooled, bias, self.spec.family.pairwise, self.spec.pair_norm
        )
        stage = self.staging
        p_t = stage.to_device("pooled", pooled).requires_grad_(True)
        y = stage.to_device("labels", np.asarray(batch.labels, np.float32))
        partial_t = stage.to_device("partial", partial)
        self.net.zero_grad(set_to_none=True)
        out = self.net(p_t)
        with torch.no_grad():
            d = torch.sigmoid(out + partial_t) - y
            d = torch.where(d.abs() < JAC_FLOOR, (1.0 - 2.0 * y) * JAC_FLOOR, d)
        # the backward of sum(out * d) hands out's node exactly d (1.0 * d), as out.backward(d)
        # would; a tensor passed to backward() makes torch import its symbolic-shapes module
        # (and sympy) at the first step, half a second of a rank's CPU inside training
        (out * d).sum().backward()
        assert p_t.grad is not None
        back = stage.to_host({"out": out.detach(), "jac": p_t.grad / d[:, None, None]})
        return back["out"], back["jac"]

    @property
    def pipelined(self) -> bool:
        """Per-example updates with the MLP on this worker run pipelined and stay exact
        (trainer.step.pipeline): the next batch's pull carries rows only, and the rows it
        shares with this batch are taken from this batch's result. An MLP that steps on the
        shards (a compressed --dense-codec) is pulled every batch and is not."""
        return self.sequential and self.replica is not None

    @property
    def overlap_pays(self) -> bool:
        """Whether overlapping the next pull with this batch pays: with the MLP on a GPU the
        main thread waits on the device while the pull runs; on the CPU the MLP's threads
        take the cores the pull and the push would use (DeepFM, Frappe, 2 gRPC shards on
        this 2-core machine: 17.1k examples/s pipelined against 18.9k, medians of 4)."""
        return self.device == "cuda"

    def fetch(self, client: PSClient, batch: SampleBatch) -> Fetched:
        """The batch's rows: the wide weights and embeddings of its unique keys, and the bias."""
        uniq, inv = sorted_unique_inverse(batch.keys)
        seq = self.sequential
        tables = ("w", self.emb)
        *pulls, bias = client.concurrently(
            *(functools.partial(client.pull, t, uniq, state=seq) for t in tables),
            functools.partial(client.pull_dense, "bias", state=seq),
        )
        rows: dict[str, tuple[npt.NDArray[Any], PullSession | None]] = dict(zip(tables, pulls, strict=True))
        if seq:  # this worker's updates that compression has not sent yet (its own view)
            for t in tables:
                own_view(client, self.tables[t], uniq, rows[t][0])
        return Fetched(uniq, inv, rows, bias, 0, np.zeros(uniq.shape[0], dtype=np.bool_))

    def compute(
        self, batch: SampleBatch, got: Fetched, previous: Trained | None = None
    ) -> tuple[npt.NDArray[np.float32], Trained]:
        """Trains a fetched batch: the MLP on the whole batch, then the rows example by
        example (or their summed gradients), and the MLP's step on this worker. `previous`
        is the batch trained just before, whose push may not have landed when this one was
        fetched: the rows both hold come from its result, as the shards will compute them
        (FactorizationModel.compute does the same)."""
        seq = self.sequential
        w_rows, e_rows, bias_rows = got.rows["w"][0], got.rows[self.emb][0], got.bias
        k = self.spec.k
        if seq:
            pw, pe, pb = self.params["w"], self.params[self.emb], self.params["bias"]
            w_state, e_state = np.array(w_rows, np.float64), np.array(e_rows, np.float64)
            bias_state = np.array(bias_rows, np.float64).reshape(1, -1)
            if previous is not None:
                bias_state = carry_previous(got.uniq, {"w": w_state, self.emb: e_state}, previous)
            start = {"w": w_state.copy(), self.emb: e_state.copy()}
            bias_start = bias_state.copy()
        else:
            pw = pe = pb = PLAIN.params()
            w_state, e_state = plain_state(w_rows), plain_state(e_rows)
            bias_state = plain_state(np.reshape(np.asarray(bias_rows), (1, 1)))
            start, bias_start = {}, bias_state.copy()
        e32 = weights_of_rows(e_state, k, pe).astype(np.float32)
        pooled = pool_fields(batch.offsets, got.uidx, batch.fields, batch.values, e32, self.spec.field_count)
        mlp_out, jac = self._mlp_step(batch, got.uidx, pooled, w_state, pw, bias_state, pb)
        probs, _, gw, ge, gbias = train_deep_batch(
            seq,
            self.spec.family.pairwise,  # DeepFM: the FM over fields
            self.spec.pair_norm,
            batch.offsets,
            got.uidx,
            batch.fields,
            batch.values,
            batch.labels,
            mlp_out,
            jac,
            w_state,
            pw,
            e_state,
            pe,
            bias_state,
            pb,
        )
        n = len(batch)
        if self.replica is not None:
            self.replica.step(n, float(np.sum(batch.labels, dtype=np.float64)))
        if seq:
            states = {"w": w_state, self.emb: e_state}
            return probs, Trained(got.uniq, start, states, bias_start, bias_state, {}, 0.0, n)
        grads = {"w": gw, self.emb: ge}
        return probs, Trained(got.uniq, {}, {}, bias_start, bias_state, grads, float(gbias), n)

    def push(self, client: PSClient, got: Fetched, done: Trained) -> None:
        push_trained(client, got, done, self.sequential)

    def train(self, client: PSClient, batch: SampleBatch) -> npt.NDArray[np.float32]:
        got = self.fetch(client, batch)
        if self.replica is None:  # the MLP steps on the shards: this batch runs the one they hold
            self.net.load_flat(np.asarray(self.dense.weights(client), dtype=np.float32))
        probs, done = self.compute(batch, got)
        self.push(client, got, done)
        if self.replica is None:
            self._push_dense(client, self.net.flat_grad(), done.samples, float(np.sum(batch.labels, dtype=np.float64)))
        return probs

    def _push_dense(self, client: PSClient, grad: npt.NDArray[np.float32], samples: int, positives: float) -> None:
        """The MLP's summed gradient goes to the shards once the batches since the last push
        hold step_positives of each label (the gate, as for the replica)."""
        if samples <= 0:
            return
        self._waiting = grad if self._waiting is None else self._waiting + grad
        if self.gate.add(samples, positives):
            self._push_waiting(client)

    def _push_waiting(self, client: PSClient) -> None:
        """The waiting gradient sum goes to the shards as one step on its mean."""
        waiting, samples = self._waiting, self.gate.samples
        self._forget_waiting()
        if waiting is not None:
            self.dense.push(client, waiting / samples, samples)
            metrics.MLP_STEPS.inc()

    def _forget_waiting(self) -> None:
        self._waiting = None
        self.gate.reset()
