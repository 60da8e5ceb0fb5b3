"""Per part of the step: measured (per stage, max over ranks) vs the analytic model's stage_breakdown, on the
stored collection step records; grouped by table shapes. usage: diag.py PM_JSONL PM_DIST_JSONL HARDWARE"""
import json, sys
from collections import defaultdict
import numpy as np
sys.path.insert(0, '.')
from benchmarks.perfmodel.train import case_model

pm, dist_path, hw = sys.argv[1:4]
steps = [json.loads(l) for l in open(pm)]
steps = [r for r in steps if r.get('kind') == 'step' and r.get('plan')]
dist = {}
for l in open(dist_path):
    d = json.loads(l)
    dist.setdefault(d['run_id'], []).append(d)
GROUPS = (("fwd lookup", ("lookup",), ("lookup",)), ("bwd+opt", ("lookup_bwd", "optimizer"), ("lookup_bwd", "optimizer")),
          ("collectives", ("input_dist", "output_dist", "output_dist_bwd"), ("input_dist", "output_dist", "output_dist_bwd", "fixed")))
rows = []
for r in steps:
    ds = [d for d in dist.get(r['run_id'], []) if d.get('case') == r.get('plan_name') or True]
    # the dist record of this case: match on measured step time
    cand = [d for d in dist.get(r['run_id'], []) if any(m['name'] == 'step_time' and abs(m['median'] - 1e3 * r['step_s']) < 1e-6 for m in d['metrics'])]
    if not cand:
        continue
    d = cand[0]
    meas = defaultdict(list)
    for m in d['metrics']:
        if m['name'] in ('input_dist', 'lookup', 'output_dist', 'output_dist_bwd', 'lookup_bwd', 'optimizer', 'dense_backward'):
            meas[m['name']].append(m.get('median', m.get('value')))
    meas = {k: max(v) for k, v in meas.items()}
    cost, plan, _ = case_model(r, hw)
    pred = {k: 1e3 * v for k, v in cost.stage_breakdown(plan).items()}
    step_pred = 1e3 * cost.plan_cost(plan)
    row = {'key': r['key'], 'family': r['family'], 'step_meas': 1e3 * r['step_s'], 'step_pred': step_pred}
    for name, mk, pk in GROUPS:
        row[name] = (sum(meas.get(k, 0) for k in mk), sum(pred.get(k, 0) for k in pk))
    row['outside'] = (1e3 * r['step_s'] - sum(v for k, v in meas.items() if k != 'dense_backward'), pred.get('outside', 0))
    w = cost.workload
    llc = cost.topology.llc_bytes
    tabs = list(w.tables.values()) if isinstance(w.tables, dict) else list(w.tables)
    row['dim'] = max(t.dim for t in tabs)
    row['rows_llc'] = max(t.rows * t.dim * 4 for t in tabs) / llc
    row['tot_llc'] = sum(t.rows * t.dim * 4 for t in tabs) / llc
    ov = r['overrides']
    row['pool'] = next((float(o.split('=')[1]) for o in ov if o.startswith('workload.pooling.mean=')), None)
    row['access'] = next((o.split('=')[1] for o in ov if o.startswith('workload.access.kind=')), 'uniform')
    row['types'] = '+'.join(sorted(r.get('types', {})))
    rows.append(row)
print(f"{len(rows)} step records matched of {len(steps)}")
def summ(sel, label):
    if not sel:
        return
    e = [abs(x['step_pred'] / x['step_meas'] - 1) for x in sel]
    cells = [f"{label}", str(len(sel)), f"{100*np.median(e):.0f}%", f"{np.median([x['step_pred']/x['step_meas'] for x in sel]):.2f}"]
    for name in ("fwd lookup", "bwd+opt", "collectives", "outside"):
        ms = sum(x[name][0] for x in sel); ps = sum(x[name][1] for x in sel)
        rat = np.median([x[name][1] / x[name][0] for x in sel if x[name][0] > 0])
        share = ms / sum(x['step_meas'] for x in sel)
        cells.append(f"{rat:.2f} ({100*share:.0f}%)")
    print("| " + " | ".join(cells) + " |")
print("| group | n | step abs err median | step pred/meas median | fwd lookup pred/meas (share of measured step) | bwd+opt | collectives | outside |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
summ(rows, "all")
for d in sorted({x['dim'] for x in rows}):
    summ([x for x in rows if x['dim'] == d], f"max dim {d}")
for lo, hi in ((0, 0.25), (0.25, 1), (1, 4), (4, 1e9)):
    summ([x for x in rows if lo <= x['rows_llc'] < hi], f"largest table {lo}-{hi if hi < 1e9 else 'inf'} x LLC")
for lo, hi in ((0, 0.5), (0.5, 2), (2, 8), (8, 1e9)):
    summ([x for x in rows if lo <= x['tot_llc'] < hi], f"all tables {lo}-{hi if hi < 1e9 else 'inf'} x LLC")
for p in sorted({x['pool'] for x in rows if x['pool'] is not None}):
    summ([x for x in rows if x['pool'] == p], f"pooling {p:g}")
for a in sorted({x['access'] for x in rows}):
    summ([x for x in rows if x['access'] == a], f"access {a}")
for t in sorted({x['types'] for x in rows}):
    summ([x for x in rows if x['types'] == t], f"types {t}")
json.dump(rows, open(sys.argv[4] if len(sys.argv) > 4 else '/tmp/i19a/diag_rows.json', 'w'))
