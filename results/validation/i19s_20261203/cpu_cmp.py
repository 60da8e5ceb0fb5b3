"""cpu_cmp.py A.jsonl B.jsonl: per instance B/A of our model's plan_cost and TorchRec's rating (lower is better);
wins/losses/ties (ties: within 1e-9) and the geometric mean ratio, overall and per hardware/world; and by both
models at once: B better on both (no worse on either, better on one), worse on both, mixed."""
import json
import math
import sys
from collections import defaultdict


def load(p):
    return {r["instance"]: r for r in map(json.loads, open(p))}


A, B = load(sys.argv[1]), load(sys.argv[2])
groups = defaultdict(list)
for k, a in A.items():
    b = B.get(k)
    if b is None or "error" in a or "error" in b:
        if b is not None and ("error" in a) != ("error" in b):
            print(f"{k}: error in {'A' if 'error' in a else 'B'} only")
        continue
    r = (b["ours_ms"] / a["ours_ms"], b["trec_ms"] / a["trec_ms"], a["hash"] != b["hash"])
    _, hw, world = k.split("/")
    for g in ("all", hw, f"{hw}/{world}"):
        groups[g].append((k, *r))
    if r[2]:
        print(f"{k:16s} ours B/A {r[0]:.4f}  trec B/A {r[1]:.4f}  types A {a['types']} B {b['types']}")
print("| group | n | changed | ours: wins/losses/ties | ours geomean B/A | trec: wins/losses/ties | trec geomean B/A "
      "| both: better/worse/mixed |")
print("|---|---|---|---|---|---|---|---|")
def wlt(rows, i):
    return (sum(r[i] < 1 - 1e-9 for r in rows), sum(r[i] > 1 + 1e-9 for r in rows),
            sum(abs(r[i] - 1) <= 1e-9 for r in rows))


def pareto(rows):
    le = [(r[1] <= 1 + 1e-9 and r[2] <= 1 + 1e-9, r[1] >= 1 - 1e-9 and r[2] >= 1 - 1e-9) for r in rows if r[3]
          and not (abs(r[1] - 1) <= 1e-9 and abs(r[2] - 1) <= 1e-9)]
    better, worse = sum(a for a, _ in le), sum(b and not a for a, b in le)
    return f"{better}/{worse}/{len(le) - better - worse}"


for g, rows in groups.items():
    gm = [math.exp(sum(math.log(r[i]) for r in rows) / len(rows)) for i in (1, 2)]
    print(f"| {g} | {len(rows)} | {sum(r[3] for r in rows)} | {'/'.join(map(str, wlt(rows, 1)))} | {gm[0]:.5f} | "
          f"{'/'.join(map(str, wlt(rows, 2)))} | {gm[1]:.5f} | {pareto(rows)} |")
