"""TorchRec DeepFM or Wide&Deep: an EmbeddingBagCollection (one table per field, sum pooling)
for the embeddings and the wide weights, an FM over the fields (deepfm) and an MLP, trained
one epoch over the first 80% of the rows (batch 256, Adagrad on the tables, Adam on the
MLP), scoring the last 20%. Runs in bench/.peers-venv (bench/install_peers.sh). Input: an
.npz of labels and per-field ids; PEER_SEED in the environment seeds torch (0 when
unset). Prints JSON."""

import json
import os
import sys
import time

import numpy as np
import torch
from sklearn.metrics import log_loss, roc_auc_score
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor

data = np.load(sys.argv[1])
model_type, k, hidden = sys.argv[2], int(sys.argv[3]), tuple(int(h) for h in sys.argv[4].split(","))
labels, ids = data["labels"].astype(np.float32), data["ids"].astype(np.int64)
n, fields = ids.shape
cut = int(n * 0.8)
names = [f"f{i}" for i in range(fields)]
sizes = [int(ids[:, i].max()) + 1 for i in range(fields)]
torch.manual_seed(int(os.environ.get("PEER_SEED", "0")))


def tables(dim: int, prefix: str) -> EmbeddingBagCollection:
    return EmbeddingBagCollection(
        tables=[
            EmbeddingBagConfig(name=f"{prefix}{f}", embedding_dim=dim, num_embeddings=sizes[i], feature_names=[f])
            for i, f in enumerate(names)
        ],
        device=torch.device("cpu"),
    )


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.wide = tables(k, "e_"), tables(1, "w_")
        layers, width = [], fields * k
        for h in hidden:
            layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
            width = h
        self.mlp = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))
        self.bias = torch.nn.Parameter(torch.zeros(1))

    def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        e = torch.stack([t for t in self.emb(kjt).to_dict().values()], dim=1)  # [B, F, k]
        wide = torch.cat(list(self.wide(kjt).to_dict().values()), dim=1).sum(dim=1)
        logit = self.bias + wide + self.mlp(e.reshape(e.shape[0], -1)).squeeze(1)
        if model_type == "deepfm":
            logit = logit + 0.5 * (e.sum(dim=1) ** 2 - (e**2).sum(dim=1)).sum(dim=1)
        return logit


def batch(rows: np.ndarray) -> KeyedJaggedTensor:
    block = ids[rows]  # one id per field and row (a missing field is its own id)
    values = torch.from_numpy(np.ascontiguousarray(block.T).reshape(-1))
    return KeyedJaggedTensor.from_lengths_sync(keys=names, values=values, lengths=torch.ones(values.shape[0], dtype=torch.int32))


model = Model()
sparse = list(model.emb.parameters()) + list(model.wide.parameters())
dense = list(model.mlp.parameters()) + [model.bias]
opt_sparse, opt_dense = torch.optim.Adagrad(sparse, lr=0.05), torch.optim.Adam(dense, lr=0.001)
loss_fn = torch.nn.BCEWithLogitsLoss()
y = torch.from_numpy(labels)
start = time.perf_counter()
for lo in range(0, cut, 256):
    rows = np.arange(lo, min(cut, lo + 256))
    loss = loss_fn(model(batch(rows)), y[rows])
    opt_sparse.zero_grad()
    opt_dense.zero_grad()
    loss.backward()
    opt_sparse.step()
    opt_dense.step()
elapsed = time.perf_counter() - start
with torch.no_grad():
    scores = torch.cat([torch.sigmoid(model(batch(np.arange(lo, min(n, lo + 4096))))) for lo in range(cut, n, 4096)])
print(
    json.dumps(
        {
            "auc": roc_auc_score(labels[cut:], scores.numpy()),
            "logloss": log_loss(labels[cut:], scores.double().numpy(), labels=[0, 1]),
            "epochs": 1,
            "train_rows": cut,
            "seconds": elapsed,
            "examples_per_s": cut / elapsed,
            "k": k,
            "hidden": list(hidden),
            "model": model_type,
        }
    )
)
