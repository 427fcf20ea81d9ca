#!/usr/bin/env bash
# The GPU checks of a session lent a device machine (one prepared run, results under $OUT):
#   1. the CUDA and DNN unit tests (serving's MLP on CUDA, the batcher, the model families);
#   2. DeepFM training on Frappe through `boundless train --ps local`, whole process,
#      alternating --device cuda and --device cpu at batch 256 and 4096, then --device auto
#      (which times a step on each and says what it chose), the trainer's examples/s and AUC;
#   3. bench/bench_gpu_dnn.py (serving's MLP on the GPU) for 1 s per point.
# The machine has torch, numba and numpy; the other core packages travel as wheels in .whl
# (built for its Python 3.12 by `pip download`, see docs/benchmarks.md).
set -u
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
{ nvidia-smi -L; nproc; python3 -c "import torch, numba, numpy; print(torch.__version__, numba.__version__, numpy.__version__, torch.cuda.get_device_name())"; } > "$OUT/machine.txt" 2>&1
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/unit/serving/scoring tests/unit/ctr/model/test_registry.py \
  tests/unit/ctr/model/test_scoring_kernels.py tests/unit/trainer/step > "$OUT/tests.txt" 2>&1
echo "tests rc=$?" >> "$OUT/tests.txt"
cat .gpudata/frappe.validation.libfm .gpudata/frappe.test.libfm > /tmp/frappe.libfm
for batch in 256 4096; do
  for dev in cuda cpu cuda cpu auto; do
    timeout 150 python3 -m boundless train --source /tmp/frappe.libfm --no-follow --ps local --window 17316 \
      --model deepfm --k 16 --hidden 400,400,400 --batch-size $batch --device $dev \
      --metrics-port -1 --port -1 --metrics-out /tmp/m.json > /dev/null 2> /tmp/err.txt
    python3 -c "import json,sys; m=json.load(open('/tmp/m.json')); print(sys.argv[1], sys.argv[2], m['device'], round(m['examples_per_s']), round(m['elapsed_s'],1), round(m['window_auc'],4), round(m['progressive_logloss'],4))" \
      $batch $dev >> "$OUT/deepfm_train.txt" 2>&1 || tail -5 /tmp/err.txt >> "$OUT/deepfm_train.txt"
  done
done
timeout 200 python3 bench/bench_gpu_dnn.py --seconds 1 > "$OUT/gpu_dnn.txt" 2>&1
echo "bench rc=$?" >> "$OUT/gpu_dnn.txt"
