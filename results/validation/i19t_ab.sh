#!/usr/bin/env bash
# Quiet A/B of `dlrmbench calibrate` (issue 19, brief i19t): A = main's tree, B = branch i19t's tree, run A B B A,
# each calibration in its own hold of the measurement lock (autogroup -19) under /usr/bin/time -v, the load before
# and after; then every calibration rescores the same stored validation measurements (c: q19c, run from main's
# tree; y: q19y, run from /work/wt/meas, so that the plan files are found). Usage: i19t_ab.sh OUTDIR [A_TREE B_TREE]
set -u
OUT=${1:?OUTDIR}; A=${2:-/work/main}; B=${3:-/work/wt/i19t}; PY=/work/main/.venv/bin/python
mkdir -p "$OUT"
for arm in A1 B1 B2 A2; do
  tree=$A; [ "${arm:0:1}" = B ] && tree=$B
  flock /work/locks/measure.lock setsid bash -c "echo -19 > /proc/\$\$/autogroup; cd $tree; export PYTHONPATH=$tree; \
    { date -u +%T; cat /proc/loadavg; } > $OUT/$arm.load; \
    /usr/bin/time -v $PY -m benchmarks.cli calibrate --out $OUT/$arm.yaml > $OUT/$arm.log 2>&1; \
    { date -u +%T; cat /proc/loadavg; } >> $OUT/$arm.load"
done
for arm in A1 B1 B2 A2; do
  (cd /work/main && PYTHONPATH=$PWD $PY -m benchmarks.cli validate-cost --hardware $OUT/$arm.yaml --rescore latest \
     --records /work/notes/s12/q19c/records.jsonl > $OUT/rs_c_$arm.log 2>&1)
  (cd /work/wt/meas && PYTHONPATH=$PWD $PY -m benchmarks.cli validate-cost --hardware $OUT/$arm.yaml --rescore latest \
     --records /work/notes/s12/q19y/records.jsonl > $OUT/rs_y_$arm.log 2>&1)
done
for arm in A1 B1 B2 A2; do
  echo "$arm $(tr '\n' ' ' < $OUT/$arm.load) | $(grep -o 'Elapsed.*' $OUT/$arm.log) | $(grep -o 'Maximum resident.*' $OUT/$arm.log)"
  $PY - "$OUT/$arm.yaml" <<'PY'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))["calibration"]
print("  phase_s", c["phase_s"])
PY
  for v in c y; do echo "  $v: $(grep -o 'step time: ours [0-9]*% (p90 [0-9]*%)' $OUT/rs_${v}_$arm.log) | $(grep -o 'per rank: ours [0-9]*% (p90 [0-9]*%)' $OUT/rs_${v}_$arm.log)"; done
done
date -u +%T > $OUT/DONE
