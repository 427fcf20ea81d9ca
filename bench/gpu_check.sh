#!/usr/bin/env bash
# The one prepared run of a session lent a GPU machine (results under $OUT, at most 8 files).
# Steps in order of what matters most; each has its own timeout, and a step is skipped when
# the run's deadline (DEADLINE_S, from the start) would not leave it its time:
#   1. the numba kernels compiled and cached, one process per model type in parallel,
#      while the CUDA and DNN unit tests run (serving's MLP on CUDA, the trainer's device);
#   2. DeepFM (defaults: k 8, 400x400x400) on Frappe through `boundless train --ps local`,
#      whole process: one pass for AUC on the GPU and the CPU, then Frappe x4 for speed at
#      batch 256 (the default), 4096 and 16384, --device auto, and a profile of the GPU run;
#   3. serving on this machine's cores (bench_serving.py, --processes 12): closed loop with
#      1, 4 and 16 clients, then open loop to the knee, for the gRPC floor, LR and DeepFM; DeepFM
#      in one process too;
#   4. ranks (bench_ranks.py): DeepFM on the GPU with 1, 2 and 4 ranks; LR and FFM with 1, 2
#      and 4 ranks on 2 gRPC shards;
#   5. bench/bench_gpu_dnn.py (serving's MLP on the GPU).
# The machine has torch, numba and numpy; the other core packages travel as wheels in .whl,
# the datasets in .gpudata. To prepare them here (both ignored through .git/info/exclude):
#   echo /.whl/ >> .git/info/exclude; echo /.gpudata/ >> .git/info/exclude
#   python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     grpcio==1.85.1 grpcio-health-checking==1.85.1 grpcio-reflection==1.85.1 protobuf==7.36.2 rocksdict==0.3.29 \
#     zstandard==0.25.0 pydantic==2.14.3 pydantic_core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5 \
#     typing_extensions==4.16.0 prometheus_client==0.26.0 PyYAML==6.0.3 tqdm==4.70.1 safetensors==0.8.0
#   mkdir -p .gpudata && cp -r ../shared/data/{frappe,criteo_10k,avazu_10k} .gpudata/
# then run `DEADLINE_S=540 bash bench/gpu_check.sh` with carry [".whl", ".gpudata"] and timeout_s 600.
set -u
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
DEADLINE_S=${DEADLINE_S:-540}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
# 2026-11-28: 4.9 s of compile() in every process there (bytecode not written, or numba kernels
# compiled again; see the cache count below): the bytecode compiled once, and later imports write theirs
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 16 /tmp/site boundless ctr ps serving trainer modelmgr protos bench > /dev/null 2>&1
mkdir -p ../shared/data && cp -r .gpudata/* ../shared/data/  # bench/datasets.py reads ../shared/data
LOG="$OUT/log.txt"
left() { echo $((DEADLINE_S - SECONDS)); }
step() {  # step SECONDS NAME COMMAND...: runs it under its timeout when the deadline leaves room
  local t=$1 name=$2; shift 2
  if [ "$(left)" -lt "$t" ]; then echo "== $name: skipped, $(left) s left" >> "$LOG"; return; fi
  echo "== $name (at ${SECONDS} s)" >> "$LOG"
  timeout "$t" "$@" >> "$LOG" 2>&1
  echo "== $name: rc=$? (at ${SECONDS} s)" >> "$LOG"
}
{ nvidia-smi -L; nproc; python3 -c "import torch, numba, numpy; print(torch.__version__, numba.__version__, numpy.__version__, torch.cuda.get_device_name())"; } > "$LOG" 2>&1

# 1. kernels and tests
for m in lr fm ffm wdl deepfm; do timeout 240 python3 -m boundless.warm_kernels --models $m > "/tmp/warm-$m.txt" 2>&1 & done
step 200 "CUDA and DNN unit tests" python3 -m pytest -q -p no:cacheprovider -x tests/unit/serving/scoring \
  tests/unit/ctr/model/test_registry.py tests/unit/ctr/model/test_scoring_kernels.py tests/unit/trainer/step
wait; cat /tmp/warm-*.txt | tail -12 >> "$LOG"
# numba writes a kernel's cache index without a lock: the parallel processes may have dropped
# each other's entries, so one pass more, in turn (cached kernels load in seconds)
step 150 "kernels, once more in turn" python3 -m boundless.warm_kernels

# 2. DeepFM training
cat .gpudata/frappe/frappe.validation.libfm .gpudata/frappe/frappe.test.libfm > /tmp/frappe.libfm
for i in 1 2 3 4; do cat /tmp/frappe.libfm; done > /tmp/frappe4.libfm
train() {  # train FILE WINDOW DEVICE BATCH
  local args=(--source "$1" --no-follow --format libsvm --ps local --window "$2" --model deepfm --device "$3"
    --metrics-port -1 --port -1 --metrics-out /tmp/m.json)
  [ "$4" != 0 ] && args+=(--batch-size "$4")
  rm -f /tmp/m.json
  if [ "$(left)" -lt 70 ]; then echo "deepfm $1 $3 $4: skipped" >> "$OUT/deepfm_train.txt"; return; fi
  timeout 70 python3 -m boundless train "${args[@]}" > /dev/null 2> /tmp/err.txt
  python3 -c "import json,sys; m=json.load(open('/tmp/m.json')); print(*sys.argv[1:], m['device'], round(m['examples_per_s']), round(m['elapsed_s'],1), round(m['window_auc'],4), round(m['progressive_logloss'],4))" \
    "$(basename "$1")" "$3" "$4" >> "$OUT/deepfm_train.txt" 2>&1 || tail -3 /tmp/err.txt >> "$OUT/deepfm_train.txt"
}
echo "file device batch chosen examples/s elapsed_s last20%_auc progressive_logloss" > "$OUT/deepfm_train.txt"
train /tmp/frappe.libfm 17316 cuda 0
train /tmp/frappe.libfm 17316 cpu 0
train /tmp/frappe4.libfm 69264 cuda 0
train /tmp/frappe4.libfm 69264 cuda 4096
train /tmp/frappe4.libfm 69264 cuda 16384
train /tmp/frappe4.libfm 69264 cpu 4096
train /tmp/frappe4.libfm 69264 cpu 0
train /tmp/frappe.libfm 17316 auto 0
step 60 "deepfm on cuda, where the main thread's time goes (cProfile)" bash -c "python3 -m cProfile -s tottime -m boundless \
  train --source /tmp/frappe.libfm --no-follow --format libsvm --ps local --model deepfm --device cuda --metrics-port -1 \
  --port -1 2>/dev/null | head -45"
# 2026-11-28: 4.9 s of compile() in every process; were those numba kernels compiled again?
step 60 "numba cache in a deepfm run (index loads, data loads, saves)" bash -c "NUMBA_DEBUG_CACHE=1 python3 -m boundless \
  train --source /tmp/frappe.libfm --no-follow --format libsvm --ps local --model deepfm --device cuda --metrics-port -1 \
  --port -1 2>/dev/null | grep -o '\[cache\] [a-z ]*' | sort | uniq -c"

# 3. serving on 16 cores
SERVE="--serve-args=--processes=12"
OPEN="--senders 64"  # over 4 connections a serving process: the kernel spreads connections, not requests
step 100 "serving closed loop: floor, lr" python3 bench/bench_serving.py --models floor,lr --clients 1,4,16 --requests 300 --reps 1 "$SERVE" --out s1.json
step 90 "serving open loop: floor, lr" python3 bench/bench_serving.py --open-loop --models floor,lr --rates 400,800,1600,2400,3200,4000,5000 --step-s 2 $OPEN "$SERVE" --out s2.json
step 80 "serving closed loop: deepfm (MLP on the GPU)" python3 bench/bench_serving.py --models deepfm --clients 1,4,16 --requests 300 --reps 1 "$SERVE" --out s3.json
step 80 "serving open loop: deepfm" python3 bench/bench_serving.py --open-loop --models deepfm --rates 400,800,1600,2400,3200 --step-s 2 $OPEN "$SERVE" --out s4.json
# one process (every core for one request, the GPU to itself) against twelve: 2026-11-28 had 1-client p50 14.9 ms with twelve
step 60 "serving closed loop: deepfm, one process" python3 bench/bench_serving.py --models deepfm --clients 1,4 --requests 200 --reps 1 --serve-args=--processes=1 --out s5.json

# 4. ranks
step 90 "ranks: deepfm on the GPU" python3 bench/bench_ranks.py --models deepfm --lines 3000 --train-args=--device=cuda
step 120 "ranks: lr, ffm" python3 bench/bench_ranks.py --models lr,ffm --lines 40000

# 5. serving's MLP on the GPU
step 60 "bench_gpu_dnn" python3 bench/bench_gpu_dnn.py --seconds 0.5 --threads 1,16,64
cp bench/results/s*.json "$OUT/" 2>/dev/null
echo "done at ${SECONDS} s" >> "$LOG"
