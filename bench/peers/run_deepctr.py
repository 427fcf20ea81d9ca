"""DeepCTR-Torch DeepFM or WDL: one epoch over the first 80% of the rows (batch 256), scores
the last 20%. Runs in bench/.peers-venv. Input: an .npz of labels and per-field ids, then k
and the hidden layers, then optionally the model (deepfm, the default, or wdl). PEER_SEED in
the environment moves DeepCTR's own seed (1024 + PEER_SEED; DeepCTR seeds its layers itself,
so torch's seed changes nothing). Prints JSON."""

import json
import os
import sys
import time

import numpy as np
import pandas as pd
import torch
from deepctr_torch.inputs import SparseFeat, get_feature_names
from deepctr_torch.models import WDL, DeepFM
from sklearn.metrics import log_loss, roc_auc_score

data = np.load(sys.argv[1])
k, hidden = int(sys.argv[2]), tuple(int(h) for h in sys.argv[3].split(","))
model_type = sys.argv[4] if len(sys.argv) > 4 else "deepfm"
labels, ids = data["labels"], data["ids"]
cut = int(len(labels) * 0.8)
names = [f"f{i}" for i in range(ids.shape[1])]
frame = pd.DataFrame(ids, columns=names)
columns = [SparseFeat(n, vocabulary_size=int(ids[:, i].max()) + 1, embedding_dim=k) for i, n in enumerate(names)]
seed = int(os.environ.get("PEER_SEED", "0"))
torch.manual_seed(seed)
build = {"deepfm": DeepFM, "wdl": WDL}[model_type]
model = build(columns, columns, task="binary", dnn_hidden_units=hidden, device="cpu", seed=1024 + seed)
model.compile("adam", "binary_crossentropy")
x = {n: frame[n].values for n in get_feature_names(columns)}
start = time.perf_counter()
model.fit({n: v[:cut] for n, v in x.items()}, labels[:cut], batch_size=256, epochs=1, verbose=0)
elapsed = time.perf_counter() - start
scores = model.predict({n: v[cut:] for n, v in x.items()}, batch_size=4096)
print(
    json.dumps(
        {
            "auc": roc_auc_score(labels[cut:], scores),
            "logloss": log_loss(labels[cut:], np.asarray(scores, dtype=np.float64).reshape(-1), labels=[0, 1]),
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
