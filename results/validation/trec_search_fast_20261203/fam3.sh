#!/usr/bin/env bash
# fam.sh's three families, in parallel (same commands, same caches): TAG
TAG=$1; PY=/work/main/.venv/bin/python
for spec in "0 plan_family_torchrec_dev_2core_20261201.jsonl" "40 plan_family_torchrec_seeds40_79_dev_2core_20261202.jsonl" "80 plan_family_torchrec_seeds80_119_dev_2core_20261202.jsonl"; do
  set -- $spec; F=$1; C=$2
  cp results/validation/$C /tmp/i16t/famcache_$F.jsonl
  PYTHONPATH=$PWD $PY -m benchmarks.plan_family --count 40 --first $F --torchrec-cap 30 \
    --torchrec-cache /tmp/i16t/famcache_$F.jsonl --out /work/notes/s12/fam/${TAG}_$F.jsonl > /work/notes/s12/fam/${TAG}_$F.log 2>&1 &
done
wait; echo done $TAG
