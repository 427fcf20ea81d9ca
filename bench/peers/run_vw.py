"""Vowpal Wabbit's progressive (predict-then-train) logloss over a VW text file, one pass.
Runs in bench/.peers-venv. Prints JSON."""

import json
import sys
import time

import numpy as np
from vowpalwabbit import Workspace

path, extra = sys.argv[1], sys.argv[2:]
args = f"-d {path} --loss_function logistic --link logistic -b 24 --quiet {' '.join(extra)}"
start = time.perf_counter()
ws = Workspace(args)
ws.run_parser()
elapsed = time.perf_counter() - start
loss = ws.get_sum_loss() / ws.get_weighted_examples()
n = int(ws.get_weighted_examples())
ws.finish()
print(
    json.dumps(
        {
            "args": " ".join(extra) or "default",
            "progressive_logloss": loss,
            "samples": n,
            "seconds": elapsed,
            "examples_per_s": n / elapsed,
            "auc": float(np.nan),
        }
    )
)
