#!/usr/bin/env bash
# One GPU session's checks, in one go (device time is scarce): the CUDA tests, the device's lookup and copy
# bandwidth (benchmarks/device_bw.py), the torch backend and the full DLRM on the GPU (inference and training),
# hybrid placement, and cached execution with the fast tier in HBM over pinned host memory.
#   bash benchmarks/gpu_check.sh OUTDIR   (PY=python: another interpreter; CPU=1: dry run on the CPU; SKIP="a b": skip steps)
# Every step has its own time limit and writes its log and records under OUTDIR as it goes, so a step that fails
# or times out leaves the others' results. torchrec and fbgemm-gpu are used only where installed.
set -u
OUT=${1:-results/gpu}
PY=${PY:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
GPU=gpu HYB=hybrid ROWS=0
if [ "${CPU:-0}" = 1 ]; then GPU=cpu HYB=cpu ROWS=65536; fi

step() {  # step NAME SECONDS CMD...: run with a limit (skipped if NAME is in $SKIP), log to OUT/steps.log
  local name=$1 limit=$2; shift 2
  case " ${SKIP:-} " in *" $name "*) echo "=== $name skipped"; return;; esac
  echo "=== $name ($(date +%T))" | tee -a "$OUT/steps.log"
  timeout "$limit" "$@" >"$OUT/step.tmp" 2>&1
  local rc=$?
  cat "$OUT/step.tmp" >>"$OUT/steps.log"; tail -n 25 "$OUT/step.tmp"; rm -f "$OUT/step.tmp"
  echo "=== $name rc=$rc" | tee -a "$OUT/steps.log"
}

{ nvidia-smi -L 2>&1; $PY -c 'import torch, numpy, numba; print("torch", torch.__version__, "cuda", torch.version.cuda,
"gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "numpy", numpy.__version__,
"numba", numba.__version__)'; } 2>&1 | tee "$OUT/env.txt"
RUN=($PY -m benchmarks.run hydra.run.dir=/tmp/dlrmbench_hydra output.progress=false
     output.records="$OUT/records.jsonl")
# The CUDA tests and what runs on torch alone (device images may lack torchrec and fbgemm-gpu).
step tests 150 $PY -m pytest -q -p no:cacheprovider tests/cache/test_cache_tiered.py tests/cache/test_cache_workload.py \
  tests/foundation/test_device_bw.py "tests/foundation/test_backends.py::test_cuda_backends_agree_with_cpu"
step device_bw 150 $PY -m benchmarks.device_bw --rows $ROWS --out "$OUT/device_bw.yaml"
step gpu_inference 90 "${RUN[@]}" placement=$GPU backend=torch
step gpu_train 90 "${RUN[@]}" placement=$GPU backend=torch workload.mode=train
step gpu_inference_b64k 120 "${RUN[@]}" placement=$GPU backend=torch workload.batch_size=65536
step hybrid 90 "${RUN[@]}" placement=$HYB backend=torch
step cache_exec 90 "${RUN[@]}" placement=$GPU backend=none workload=smoke cache=lru_execute cache.slow_tier=host \
  workload.num_batches=50
step cache_exec_train 90 "${RUN[@]}" placement=$GPU backend=none workload=smoke cache=lru_execute \
  cache.slow_tier=host workload.num_batches=50 workload.mode=train
step cache_exec_default 120 "${RUN[@]}" placement=$GPU backend=none cache=lru_execute cache.slow_tier=host \
  cache.capacity_fraction=0.2 workload.num_batches=30
echo "done $(date +%T)"
