"""Rebuild a validate-cost run's plan files with the code of its git sha (PYTHONPATH at that tree), each case's
plan as rank 0 made it (resolve_case's path: compose_dist -> build_workload -> make_plan), written at every
round's plan-file path under BASE; then PROVE they are the measured plans: the analytic prediction re-made from
the rebuilt plan with that code and calibration must equal, float for float, what each record stored at
measurement time (ours_s, every rank's elapsed_s and other_s, TorchRec's estimate); the record's sharding types
are printed beside each case. (Adapted from i19l's replan script, which it replaces.)"""
import json, sys
from dataclasses import replace
from pathlib import Path
from benchmarks.validate_cost import build_cases
from benchmarks.distributed.config import compose_dist
from benchmarks.distributed.worker import plan_file
from benchmarks.distributed.report import predictions
from embedding.workload_config import build_workload
from sharding.workload import PlanWorkload
from sharding.topology import load_topology
import benchmarks.distributed.case as C

records, base = sys.argv[1], Path(sys.argv[2])
rs = [json.loads(l) for l in open(records)]
val = [r for r in rs if r.get("kind") == "validation"][-1]
hw = val["config"]["hardware"]
recs = [r for r in rs if r.get("kind") == "distributed" and r["run_id"] in val["case_run_ids"]]
job = [f"dist.hardware={hw}", "dist.model=embedding", "dist.mode=train"]
checked = bad = 0
for c in build_cases(2, False):
    mine = [r for r in recs if r["case"] == c["label"]]
    if not mine:
        continue
    cfg = compose_dist([*job, *c["overrides"]])
    spec = build_workload(cfg.workload)
    spec = replace(spec, mode=spec.mode if cfg.dist.mode == "workload" else cfg.dist.mode)
    wl = PlanWorkload.from_spec(spec, optimizer=cfg.dist.optimizer)
    topo = load_topology(cfg.dist.hardware, ranks=2)
    plan = C.make_plan(c["plan"], wl, topo)
    case = C.Case(c["label"], cfg, spec, wl, topo, plan, True)
    pred = predictions(case)
    for r in mine:
        s = r["prediction"]
        ok = (s["ours_s"] == pred["ours_s"]
              and [(x["elapsed_s"], x.get("other_s")) for x in s["ours_per_rank"]]
              == [(x["elapsed_s"], x.get("other_s")) for x in pred["ours_per_rank"]]
              and s.get("torchrec_s") == pred.get("torchrec_s"))
        checked += 1
        if not ok:
            bad += 1
            print("MISMATCH", c["label"], r["run_id"], s["ours_s"], pred["ours_s"], s.get("torchrec_s"), pred.get("torchrec_s"))
        out = base / r["plan"]["file"]
        assert out.name == plan_file(c["label"]), (out.name, c["label"])
        out.parent.mkdir(parents=True, exist_ok=True)
        plan.save(out)
    print(c["label"], f"ours {pred['ours_s']*1e3:.4f} ms", "records", len(mine), "types rec", mine[0]["plan"]["sharding_types"], flush=True)
print(f"checked {checked} records, {bad} mismatches, {len({r['case'] for r in recs})} cases")
