"""probe_presets.py: our plan (as `compare-plans` makes it) for six workload presets (max_rows 200000) on the
calibrated dev_2core file at 2 ranks: preset, tables, plan hash, plan_cost ms. Run with PYTHONPATH at the tree."""
import hashlib
import json
from dataclasses import replace

from benchmarks.distributed.case import make_plan
from benchmarks.distributed.config import compose_dist
from embedding.workload_config import build_workload
from sharding import CostModel
from sharding.topology import load_topology
from sharding.workload import PlanWorkload

hw = "/work/notes/s11/q19/cal.yaml"
for w in ["rm1", "rm2", "rm3", "criteo_kaggle", "dcnv2", "default"]:
    cfg = compose_dist([f"workload={w}", "workload.max_rows=200000", f"dist.hardware={hw}"])
    spec = build_workload(cfg.workload)
    spec = replace(spec, mode=spec.mode if cfg.dist.mode == "workload" else cfg.dist.mode)
    wl, topo = PlanWorkload.from_spec(spec, optimizer=cfg.dist.optimizer), load_topology(hw, ranks=2)
    p = make_plan("ours", wl, topo)
    d = json.dumps(p.to_dict()["tables"] if "tables" in p.to_dict() else p.to_dict(), sort_keys=True)
    bt = topo.reserve_inputs(wl.ids_per_batch)
    print(w, len(wl.tables), hashlib.sha1(d.encode()).hexdigest()[:10], f"{CostModel(wl, bt).plan_cost(p)*1e3:.3f}", flush=True)
