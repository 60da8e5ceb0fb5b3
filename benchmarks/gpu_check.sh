#!/usr/bin/env bash
# One GPU session's checks, in one go (device time is scarce): the CUDA tests, the device's lookup and copy
# bandwidth (benchmarks/device_bw.py), the torch backend and the full DLRM on the GPU (inference and training),
# hybrid placement, and cached execution with the fast tier in HBM over pinned host memory.
#   bash benchmarks/gpu_check.sh OUTDIR          (PY=python to use another interpreter; CPU=1 dry-runs on the CPU)
# Every step has its own time limit and writes its log and records under OUTDIR as it goes, so a step that fails
# or times out leaves the others' results. torchrec and fbgemm-gpu are used only where installed.
set -u
OUT=${1:-results/gpu}
PY=${PY:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
GPU=gpu HYB=hybrid ROWS=0
if [ "${CPU:-0}" = 1 ]; then GPU=cpu HYB=cpu ROWS=65536; fi

step() {  # step NAME SECONDS CMD...: run with a limit, log to OUT/NAME.log, print the exit status
  local name=$1 limit=$2; shift 2
  echo "=== $name ($(date +%T))"
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$OUT/$name.log"
  echo "=== $name rc=$rc"
}

{ nvidia-smi -L 2>&1; $PY -c 'import torch, numpy, numba; print("torch", torch.__version__, "cuda", torch.version.cuda,
"gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "numpy", numpy.__version__,
"numba", numba.__version__)'; } 2>&1 | tee "$OUT/env.txt"
RUN=($PY -m benchmarks.run hydra.run.dir=/tmp/dlrmbench_hydra output.progress=false
     output.records="$OUT/records.jsonl")
step tests 150 $PY -m pytest -q -p no:cacheprovider tests/foundation/test_backends.py tests/cache/test_cache_tiered.py \
  tests/foundation/test_device_bw.py tests/cache/test_cache_workload.py
step device_bw 150 $PY -m benchmarks.device_bw --rows $ROWS --out "$OUT/device_bw.yaml"
step gpu_inference 90 "${RUN[@]}" placement=$GPU backend=torch
step gpu_train 90 "${RUN[@]}" placement=$GPU backend=torch workload.mode=train
step gpu_inference_b64k 120 "${RUN[@]}" placement=$GPU backend=torch workload.batch_size=65536
step hybrid 90 "${RUN[@]}" placement=$HYB backend=torch
step cache_exec 90 "${RUN[@]}" placement=$GPU backend=none workload=smoke cache=lru_execute cache.slow_tier=host \
  workload.num_batches=50
step cache_exec_train 90 "${RUN[@]}" placement=$GPU backend=none workload=smoke cache=lru_execute \
  cache.slow_tier=host workload.num_batches=50 workload.mode=train
echo "done $(date +%T)"
