"""cpu_ab.py OUT.jsonl [SEEDS]: issue 19's A/B of the planner on CPU topologies (run with PYTHONPATH at the tree
under test). Workloads: `sharding.family` instances 0 … SEEDS−1 (≤ 60 tables, rows capped at 1 M so they fit
CPU memory; batch and mode as drawn); hardware: the calibrated dev_2core file of issue 19 (stage overheads) and
the dev_2core preset (none), at 2 (1×2), 4 (1×4) and 8 (2×4) ranks. Per plan: our model's plan_cost, TorchRec's
estimator's rating, a hash of the plan, the optimizer's pick and its counted proposals; plans saved beside."""
import hashlib
import json
import sys
from dataclasses import replace
from pathlib import Path

from sharding import CostModel, PlanError, load_topology, optimize
from sharding.family import instance
from sharding.optimizer import OptimizeStats
from sharding.trec_cost import TorchRecCostModel
from sharding.workload import PlanWorkload

HW = {"cal": "/work/notes/s11/q19/cal.yaml", "dev": "dev_2core"}
out, seeds = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 30
plans = out.with_suffix("")
plans.mkdir(parents=True, exist_ok=True)
with open(out, "w") as f:
    for seed in range(seeds):
        inst = instance(seed, 60)
        wl = PlanWorkload(tuple(replace(t, rows=min(t.rows, 1_000_000)) for t in inst.workload.tables),
                          inst.workload.batch_size, inst.workload.mode)
        for hw, path in HW.items():
            for world in (2, 4, 8):
                topo = load_topology(path, world, min(world, 4))
                name = f"f{seed}/{hw}/{world}"
                rec = {"instance": name, "tables": len(wl.tables), "batch": wl.batch_size, "mode": wl.mode}
                stats = OptimizeStats()
                try:
                    plan = optimize(wl, topo, stats=stats)
                except PlanError as e:
                    rec["error"] = str(e)[:120]
                    f.write(json.dumps(rec) + "\n")
                    continue
                bt = topo.reserve_inputs(wl.ids_per_batch)
                d = json.dumps(plan.to_dict(), sort_keys=True)
                (plans / f"f{seed}_{hw}_{world}.json").write_text(d)
                rec.update(ours_ms=CostModel(wl, bt).plan_cost(plan) * 1e3,
                           trec_ms=TorchRecCostModel(wl, bt).plan_cost(plan) * 1e3,
                           hash=hashlib.sha1(d.encode()).hexdigest()[:12], chosen=stats.chosen,
                           types=sorted({tp.sharding_type.short for tp in plan.tables.values()}))
                f.write(json.dumps(rec) + "\n")
                f.flush()
