#!/usr/bin/env bash
# Installs the peers that the benchmarks run side by side with Boundless into their own
# environment, bench/.peers-venv, never into the product's: Vowpal Wabbit, xLearn and
# DeepCTR-Torch (with the same CPU torch as the product).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PY:-python3.11}
VENV=.peers-venv
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q -c ../constraints.txt numpy torch==2.13.0
"$VENV/bin/pip" install -q -c ../constraints.txt vowpalwabbit xlearn deepctr-torch requests scikit-learn pandas
"$VENV/bin/python" -c "import vowpalwabbit, xlearn, deepctr_torch; print('peers ready')"
