"""Rebuild the plan files of a validate-cost run from the tree of its git sha (run with PYTHONPATH at that tree):
each case's plan as its job's rank 0 made it (make_plan on the composed config), written where the run's records
name them, under a scratch base folder."""
import json, sys
from dataclasses import replace
from pathlib import Path
from benchmarks.validate_cost import build_cases
from benchmarks.distributed.config import compose_dist
from benchmarks.distributed.worker import plan_file
from embedding.workload_config import build_workload
from sharding.workload import PlanWorkload
from sharding.topology import load_topology
import benchmarks.distributed.case as C

records, hw, base = sys.argv[1], sys.argv[2], Path(sys.argv[3])
rs = [json.loads(l) for l in open(records)]
val = [r for r in rs if r.get("kind") == "validation"][-1]
first = val["case_run_ids"][0]
want = {r["case"]: r["plan"]["file"] for r in rs if r.get("kind") == "distributed" and r["run_id"] == first}
job = [f"dist.hardware={hw}", "dist.model=embedding", "dist.mode=train"]
for c in build_cases(2, False):
    if c["label"] not in want:
        continue
    cfg = compose_dist([*job, *c["overrides"]])
    spec = build_workload(cfg.workload)
    spec = replace(spec, mode=spec.mode if cfg.dist.mode == "workload" else cfg.dist.mode)
    wl = PlanWorkload.from_spec(spec, optimizer=cfg.dist.optimizer)
    topo = load_topology(cfg.dist.hardware, ranks=2)
    plan = C.make_plan(c["plan"], wl, topo)
    out = base / want[c["label"]]
    assert out.name == plan_file(c["label"]), (out.name, c["label"])
    out.parent.mkdir(parents=True, exist_ok=True)
    plan.save(out)
    print(c["label"], "->", out, flush=True)
