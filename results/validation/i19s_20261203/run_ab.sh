#!/usr/bin/env bash
# the i19s A/Bs, heavy and unmeasured (counted work only): the three torchrec_default families on this branch
# (/work/notes/s12/fam.sh), then the CPU family (cpu_ab.py) on main (A, a detached worktree at 1cddd0f) and here (B)
R=/work/wt/i19s/results/validation/i19s_20261203; PY=/work/main/.venv/bin/python; T=/tmp/i19s
mkdir -p $T
date -u +%T > $T/start
(cd /work/wt/i19s && /work/notes/s12/fam.sh i19s) > $T/fam.out 2>&1
date -u +%T >> $T/start
(cd /tmp/i19s_base && PYTHONPATH=$PWD $PY $R/cpu_ab.py $T/cpu_A.jsonl ${SEEDS:-30}) > $T/cpu_A.out 2>&1
date -u +%T >> $T/start
(cd /work/wt/i19s && PYTHONPATH=$PWD $PY $R/cpu_ab.py $T/cpu_B.jsonl ${SEEDS:-30}) > $T/cpu_B.out 2>&1
date -u +%T > $T/DONE
