"""Per-part timing of one round of calibrate's TorchRec stage plans (helper i19t, not shipped)."""
import json, os, sys, time
from collections import defaultdict
from datetime import timedelta
import numpy as np
import torch, torch.distributed as dist

import benchmarks.calibrate as cal
import benchmarks.distributed.case as case_mod
import benchmarks.distributed.worker as worker
import benchmarks.distributed.config as config_mod
from benchmarks.perfmodel.machine import usable_cores

acc = defaultdict(float); cnt = defaultdict(int)
def wrap(mod, name, label=None):
    f = getattr(mod, name); label = label or name
    def g(*a, **k):
        t = time.perf_counter()
        try: return f(*a, **k)
        finally: acc[label] += time.perf_counter() - t; cnt[label] += 1
    setattr(mod, name, g)

wrap(config_mod, "compose_dist", "compose_dist(all)")
case_mod.compose_dist = config_mod.compose_dist
wrap(cal, "_overhead_plan")
wrap(case_mod, "resolve_case"); 
wrap(worker, "_build"); wrap(worker, "reference_state"); wrap(worker, "load_state"); wrap(worker, "shard_module"); wrap(worker, "build_module"); wrap(worker, "make_inputs"); wrap(worker, "make_optimizer")
import benchmarks.distributed.model as model_mod
stamps = []
f_fwd = worker.forward
def fwd(*a, **k):
    stamps.append(time.perf_counter()); return f_fwd(*a, **k)
worker.forward = fwd
f_run = worker.run_case
per_case = {}
def run_case(case, *a, **k):
    stamps.clear(); t0 = time.perf_counter()
    r = f_run(case, *a, **k); t1 = time.perf_counter()
    s = stamps + [t1]; d = case.cfg.dist; w, n = d.warmup, d.repeats
    seg = lambda i, j: s[j] - s[i]
    per_case[case.label] = dict(setup=s[0] - t0, warm=seg(0, w), timed=seg(w, w + n), swarm=seg(w + n, 2 * w + n),
                                stimed=seg(2 * w + n, 2 * w + 2 * n), nsteps=len(stamps))
    acc["run_case"] += t1 - t0; cnt["run_case"] += 1
    return r
worker.run_case = run_case
f_ag = dist.all_gather_object
def ag(*a, **k):
    t = time.perf_counter(); f_ag(*a, **k); acc["all_gather_object"] += time.perf_counter() - t; cnt["all_gather_object"] += 1
dist.all_gather_object = ag

torch.set_num_threads(max(1, usable_cores() // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
dist.init_process_group("gloo", timeout=timedelta(seconds=300))
steps = int(sys.argv[1]); rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 1
out = []
cache = {}
import inspect
has_cache = "cache" in inspect.signature(cal._stage_times).parameters
for r in range(rounds):
    acc.clear(); cnt.clear(); per_case.clear()
    dist.barrier(); t0 = time.perf_counter()
    res = cal._stage_times(dist.get_world_size(), steps, r, cache) if has_cache else cal._stage_times(dist.get_world_size(), steps, r)
    total = time.perf_counter() - t0
    out.append(dict(rank=dist.get_rank(), round=r, total=total, acc=dict(acc), cnt=dict(cnt), per_case=per_case.copy(),
                    stages=res["torchrec_stages_s"], step=res["torchrec_step_s"], plan_s=res["stage_plan_s"]))
if dist.get_rank() == 0:
    print("JSON" + json.dumps(out))
dist.barrier(); dist.destroy_process_group()
sys.stdout.flush(); os._exit(0)
