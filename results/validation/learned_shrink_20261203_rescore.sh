#!/bin/bash
# Rescore the two held-out validation runs with the chosen model (plan files rebuilt by replan.py under v13/v14).
M=${1:-/tmp/i19m/m/model.json}
cd /tmp/i19m/v14 && PYTHONPATH=/work/wt/i19m /work/main/.venv/bin/python -m benchmarks.cli validate-cost --rescore latest --records /work/notes/s14/q2/records.jsonl --hardware /work/notes/s14/q2/cal.yaml --model $M > /tmp/i19m/rescore14.out 2>&1
echo "rc $? $(date -u +%T) load $(cat /proc/loadavg)" >> /tmp/i19m/rescore14.out
cd /tmp/i19m/v13 && PYTHONPATH=/work/wt/i19m /work/main/.venv/bin/python -m benchmarks.cli validate-cost --rescore latest --records /work/notes/s13/qv/records.jsonl --hardware /work/notes/s13/qv/cal.yaml --model $M > /tmp/i19m/rescore13.out 2>&1
echo "rc $? $(date -u +%T) load $(cat /proc/loadavg)" >> /tmp/i19m/rescore13.out
