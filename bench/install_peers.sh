#!/usr/bin/env bash
# Installs the peers that the benchmarks run side by side with Boundless into their own
# environment, bench/.peers-venv, never into the product's: Vowpal Wabbit, xLearn,
# DeepCTR-Torch and TorchRec (with the same CPU torch as the product).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PY:-python3.11}
VENV=.peers-venv
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q -c ../constraints.txt numpy torch==2.13.0
"$VENV/bin/pip" install -q -c ../constraints.txt vowpalwabbit xlearn deepctr-torch requests scikit-learn pandas
# torchrec pulls in the GPU fbgemm-gpu, whose import fails without CUDA: the CPU build replaces it
"$VENV/bin/pip" install -q torch==2.13.0 fbgemm-gpu-cpu==1.8.0 torchrec==1.8.0
"$VENV/bin/pip" uninstall -q -y fbgemm-gpu || true
"$VENV/bin/pip" install -q --force-reinstall --no-deps fbgemm-gpu-cpu==1.8.0
"$VENV/bin/python" -c "import vowpalwabbit, xlearn, deepctr_torch, torchrec; print('peers ready')"
