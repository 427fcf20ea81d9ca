"""Wide&Deep and DeepFM on the PS: the wide weights and embeddings come from sparse tables,
the MLP's weights from the dense table `mlp`. The MLP runs in torch (CUDA when present) on
the whole batch with the batch-start embeddings; the numba kernel then trains the rows
example by example with the current wide and FM terms, using the MLP's output and its
Jacobian for the deep share (update: example), or sums the gradients (update: batch). The MLP
itself steps once per batch: its mean gradient is pushed and the shard applies Adam."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ctr.data.batch import SampleBatch
from ctr.data.unique import sorted_unique_inverse
from ctr.model.dnn import pool_fields, train_deep_batch
from ctr.model.mlp import DeepCTR, device
from ctr.model.optim import PLAIN, plain_state, rows_with_weights, weights_of_rows
from ctr.model.spec import ModelSpec
from ps.api import DELTA, GRADIENT
from ps.client import PSClient
from trainer.step.dense_sync import DenseSync, dense_sync
from trainer.step.own_view import own_view


class DeepModel:
    def __init__(self, spec: ModelSpec, dense_codec: str = "fp32") -> None:
        self.spec = spec
        self.tables = {t.name: t for t in spec.tables()}
        self.emb = spec.embedding_table() or "v"
        self.sequential = spec.update == "example"
        opt = spec.optimizer("mlp")
        self.net = DeepCTR(spec, seed=opt.seed).to(device())
        self.params = {n: t.optimizer.params() for n, t in self.tables.items()}
        if dense_codec != "fp32" and opt.kind != "adam":
            raise ValueError(f"--dense-codec {dense_codec} needs an adam MLP optimizer, not {opt.kind} (--opt-mlp)")
        self._dense_sync = lambda: dense_sync(dense_codec, "mlp", opt.lr, opt.beta1, opt.beta2, opt.eps)
        self.dense: DenseSync = self._dense_sync()

    def prepare(self, client: PSClient) -> None:
        created = client.control.declare(self.spec.tables())
        if created["mlp"]:  # a fresh MLP starts from Glorot-uniform weights, not zeros
            t = self.tables["mlp"]
            start = rows_with_weights(self.net.flat().astype(np.float64).reshape(-1, 1), t.width, self.params["mlp"])
            client.push_dense("mlp", start - client.pull_dense("mlp", state=True), kind=DELTA)

    def finish(self, client: PSClient) -> None:
        self.dense.flush(client)

    def reset(self) -> None:
        self.dense = self._dense_sync()

    def state(self, client: PSClient) -> dict[str, Any]:
        return {"dense_sync": self.dense.state(client)}

    def take_up(self, client: PSClient, state: dict[str, Any]) -> None:
        self.dense.take_up(client, dict(state.get("dense_sync") or {}))

    def train(self, client: PSClient, batch: SampleBatch) -> npt.NDArray[np.float32]:
        uniq, inv = sorted_unique_inverse(batch.keys)
        uidx = inv
        seq = self.sequential
        (w_rows, w_session), (e_rows, e_session) = client.pull("w", uniq, state=seq), client.pull(self.emb, uniq, state=seq)
        if seq:  # this worker's updates that compression has not sent yet (its own view)
            own_view(client, self.tables["w"], uniq, w_rows)
            own_view(client, self.tables[self.emb], uniq, e_rows)
        bias_rows = client.pull_dense("bias", state=seq)
        self.net.load_flat(np.asarray(self.dense.weights(client), dtype=np.float32))
        k = self.spec.k
        if seq:
            pw, pe, pb = self.params["w"], self.params[self.emb], self.params["bias"]
            w_state, e_state = np.array(w_rows, np.float64), np.array(e_rows, np.float64)
            bias_state = np.array(bias_rows, np.float64).reshape(1, -1)
        else:
            pw = pe = pb = PLAIN.params()
            w_state, e_state, bias_state = plain_state(w_rows), plain_state(e_rows), plain_state(np.reshape(bias_rows, (1, 1)))
        e32 = weights_of_rows(e_state, k, pe).astype(np.float32)
        pooled = pool_fields(batch.offsets, uidx, batch.fields, batch.values, e32, self.spec.field_count)
        p_t = torch.from_numpy(pooled).to(self.net.device).requires_grad_(True)
        self.net.zero_grad(set_to_none=True)
        mlp_out = self.net(p_t)
        (jac,) = torch.autograd.grad(mlp_out.sum(), p_t, retain_graph=True)  # examples are independent
        probs, dlogit, gw, ge, gbias = train_deep_batch(
            seq,
            self.spec.family.pairwise,  # DeepFM: the FM over fields
            self.spec.pair_norm,
            batch.offsets,
            uidx,
            batch.fields,
            batch.values,
            batch.labels,
            mlp_out.detach().cpu().numpy().astype(np.float32),
            jac.cpu().numpy().astype(np.float32),
            w_state,
            pw,
            e_state,
            pe,
            bias_state,
            pb,
        )
        mlp_out.backward(torch.from_numpy(dlogit).to(self.net.device))
        n = len(batch)
        if seq:
            client.push("w", uniq, w_state - w_rows, w_session, kind=DELTA, samples=n)
            client.push(self.emb, uniq, e_state - e_rows, e_session, kind=DELTA, samples=n)
            client.push_dense("bias", bias_state - np.reshape(bias_rows, (1, -1)), kind=DELTA, samples=n)
        else:
            client.push("w", uniq, gw.astype(np.float32), w_session, kind=GRADIENT, samples=n)
            client.push(self.emb, uniq, ge.astype(np.float32), e_session, kind=GRADIENT, samples=n)
            client.push_dense("bias", np.array([gbias], np.float32), kind=GRADIENT, samples=n)
        grad = self.net.flat_grad() / max(1, n)
        self.dense.push(client, grad, n)
        return probs  # type: ignore[no-any-return]
