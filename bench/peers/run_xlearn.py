"""xLearn FFM (or FM with a 6th argument "fm"): trains on a libffm file, scores a second
one. Runs in bench/.peers-venv (USER=root is needed by xLearn). Prints JSON."""

import json
import os
import sys
import tempfile
import time

import numpy as np
import xlearn as xl
from sklearn.metrics import roc_auc_score

train, test, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
epochs = int(sys.argv[4]) if len(sys.argv) > 4 else 10
kind = sys.argv[5] if len(sys.argv) > 5 else "ffm"
out = tempfile.mktemp()
model = xl.create_fm() if kind == "fm" else xl.create_ffm()
model.setTrain(train)
model.setSigmoid()
params = {"task": "binary", "lr": 0.2, "lambda": 0.00002, "k": k, "epoch": epochs, "metric": "auc", "nthread": os.cpu_count()}
start = time.perf_counter()
model.fit(params, out + ".model")
elapsed = time.perf_counter() - start
model.setTest(test)
model.predict(out + ".model", out + ".txt")
scores = np.loadtxt(out + ".txt")
with open(test) as fh:
    labels = np.array([int(line.split(" ", 1)[0]) for line in fh])
with open(train) as fh:
    rows = sum(1 for _ in fh)
print(
    json.dumps(
        {
            "auc": roc_auc_score(labels, scores),
            "epochs": epochs,
            "train_rows": rows,
            "seconds": elapsed,
            "examples_per_s": rows * epochs / elapsed,
            "k": k,
        }
    )
)
