#!/usr/bin/env bash
# 3 rounds, main then i16t alternated, cpu.py on the admitted small instances; load beside each
for k in 1 2 3; do
  for t in /work/main /work/wt/i16t; do
    echo "== round $k $(basename $t) load $(cut -d' ' -f1-3 /proc/loadavg) $(date +%H:%M:%S)"
    cd $t && PYTHONPATH=$PWD /work/main/.venv/bin/python /work/notes/s13/cpu.py f41 f118 f54 f94 f5 f80
  done
done
