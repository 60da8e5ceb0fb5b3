"""Sharding benchmark: per table set and optimizer, wall time, predicted cost, ratio to the lower bound,
TorchRec's estimate of the same plan, feasibility.

  .venv/bin/python -m benchmarks.plan_bench                      # all sets; TorchRec's planner on criteo only
  .venv/bin/python -m benchmarks.plan_bench --torchrec all --torchrec-timeout 120 --out results/plan_bench.jsonl
  .venv/bin/python -m benchmarks.plan_bench --anneal 200     # also ours with the opt-in long search (minutes)
TorchRec's planner runs in a child process killed at the timeout, reported as "no plan in X s".
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from typing import Any

from sharding import (
    BASELINES,
    CostModel,
    PlanError,
    PlanWorkload,
    load_topology,
    lower_bound,
    optimize,
    validate_plan,
)
from sharding.optimizer import OptimizeStats
from sharding.tablesets import load_tables

__all__ = ["SETS", "set_model", "run_set", "main"]

# (label, tables, hardware preset, ranks, batch per rank)
SETS = {
    "criteo_tb/8": ("criteo_terabyte", "dgx_h100", 8, 8192),  # MLPerf global batch 65,536 over 8 GPUs
    "random100/16": ("random:100:1", "dgx_h100_x2", 16, 512),
    "t856/128": ("dlrm_t856", "dgx_h100_x16", 128, 512),
    "random500/64": ("random:500:5", "dgx_h100_x8", 64, 512),
}


def _torchrec_child(q: Any, tables: str, hw: str, ranks: int, batch: int) -> None:
    import torchrec.distributed.planner  # noqa: F401  (imports are not planning time, as for ours)

    from sharding.torchrec_adapter import run_torchrec_planner
    wl = PlanWorkload(load_tables(tables), batch, "train")
    t0 = time.perf_counter()
    try:
        plan = run_torchrec_planner(wl, load_topology(hw, ranks))
        q.put(("ok", time.perf_counter() - t0, plan.to_dict()))
    except Exception as e:
        q.put(("error", time.perf_counter() - t0, f"{type(e).__name__}: {e}"[:200]))


def _torchrec(tables: str, hw: str, ranks: int, batch: int, timeout: float) -> tuple[str, float, Any]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_torchrec_child, args=(q, tables, hw, ranks, batch), daemon=True)
    t0 = time.perf_counter()
    p.start()
    try:
        return q.get(timeout=timeout)
    except Exception:
        return "timeout", time.perf_counter() - t0, f"no plan in {timeout:.0f} s"
    finally:
        if p.is_alive():
            p.kill()
        p.join()


def set_model(label: str) -> tuple[PlanWorkload, Any, CostModel]:
    """(workload, topology, cost model) of one of `SETS` (training)."""
    tables, hw, ranks, batch = SETS[label]
    wl = PlanWorkload(load_tables(tables), batch, "train")
    topo = load_topology(hw, ranks)
    return wl, topo, CostModel(wl, topo)


def run_set(label: str, run_torchrec: bool, timeout: float, estimate: bool, anneal: int = 0) -> list[dict[str, Any]]:
    from sharding.plan import ShardingPlan
    from sharding.torchrec_adapter import torchrec_estimate

    tables, hw, ranks, batch = SETS[label]
    wl, topo, cost = set_model(label)
    t0 = time.perf_counter()
    bound = lower_bound(cost)
    lb, bound_wall = bound.value, time.perf_counter() - t0
    rows = []
    names = ["ours", *([f"ours+anneal {anneal}M"] if anneal else []), *BASELINES] + (["torchrec"] if run_torchrec else [])
    for name in names:
        row: dict[str, Any] = {"set": label, "optimizer": name, "tables": len(wl.tables), "ranks": ranks,
                               "bound_parts_ms": {k: bound.to_dict()[f"{k}_s"] * 1e3
                                                  for k in ("simple", "relaxation", "cut")},
                               "bound_wall_s": bound_wall}
        t0 = time.perf_counter()
        try:
            if name == "torchrec":
                status, wall, payload = _torchrec(tables, hw, ranks, batch, timeout)
                if status != "ok":
                    raise PlanError(payload)
                plan = ShardingPlan.from_dict(payload)
            else:
                stats = OptimizeStats()
                plan = (optimize(wl, topo, stats=stats, anneal=anneal if name != "ours" else 0)
                        if name.startswith("ours") else BASELINES[name](wl, topo))
                wall = time.perf_counter() - t0
                if name == "ours" and stats.milp is not None:
                    m = stats.milp
                    row["milp"] = f"{m.status}, {m.binaries} bin, improved={m.improved}, certified={m.certified}"
            validate_plan(plan, wl, topo, cost)
            c = cost.plan_cost(plan)
            loads, _ = cost.resource_loads(plan)
            imbalance = sum(float(v.max() - v.mean()) for v in loads.values())
            row.update(wall_s=wall, cost_ms=c * 1e3, lower_bound_ms=lb * 1e3, ratio=c / lb, feasible="yes",
                       balanced_ratio=(c - imbalance) / lb)
            if estimate:
                row["torchrec_est_ms"] = torchrec_estimate(plan, wl, topo)["perf_ms"]
        except PlanError as e:
            row.update(wall_s=time.perf_counter() - t0 if name != "torchrec" else wall, feasible=f"no: {e}"[:90])
        rows.append(row)
    return rows


def _fmt(x: Any, spec: str) -> str:
    return format(x, spec) if isinstance(x, float) else "—"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="*", default=list(SETS), choices=list(SETS))
    ap.add_argument("--torchrec", choices=["none", "criteo", "all"], default="criteo",
                    help="where to run TorchRec's planner (slow: 100 tables/16 ranks ≈ 16 s here, after its imports)")
    ap.add_argument("--torchrec-timeout", type=float, default=60.0)
    ap.add_argument("--no-estimate", action="store_true", help="skip TorchRec's estimator on each plan")
    ap.add_argument("--out", default=None, help="append metric records (JSON lines) here")
    ap.add_argument("--anneal", type=int, default=0, metavar="N",
                    help="also run ours with N million proposals of the opt-in long search (sharding.anneal)")
    args = ap.parse_args(argv)
    print("ratio LB: cost / lower bound; balanced: the same shards with every resource (compute, each collective) at\n"
          "its mean over ranks, / lower bound (the rest of the ratio is imbalance: CostModel.resource_loads)")
    print(f"{'set':<14} {'optimizer':<20} {'wall s':>8} {'cost ms':>9} {'ratio LB':>8} {'balanced':>8} "
          f"{'TorchRec est ms':>15}  feasible")
    records = []
    for label in args.sets:
        trec = args.torchrec == "all" or (args.torchrec == "criteo" and label.startswith("criteo"))
        rows = run_set(label, trec, args.torchrec_timeout, not args.no_estimate, args.anneal)
        parts = rows[0]["bound_parts_ms"]
        print(f"{label}: lower bound {max(parts.values()):.4f} ms = max(simple {parts['simple']:.4f}, LP "
              f"{parts['relaxation']:.4f}, MILP cut {parts['cut']:.4f}), computed in {rows[0]['bound_wall_s']:.2f} s")
        for r in rows:
            print(f"{r['set']:<14} {r['optimizer']:<20} {_fmt(r.get('wall_s'), '8.3f')} "
                  f"{_fmt(r.get('cost_ms'), '9.4f')} {_fmt(r.get('ratio'), '8.3f')} "
                  f"{_fmt(r.get('balanced_ratio'), '8.3f')} "
                  f"{_fmt(r.get('torchrec_est_ms'), '15.4f')}  {r['feasible']}"
                  + (f"  [MILP {r['milp']}]" if "milp" in r else ""), flush=True)
            records.append(r)
    if args.out:
        with open(args.out, "a") as f:
            for r in records:
                metrics = [{"name": k, "value": r[k], "unit": u, "method": m} for k, u, m in (
                    ("wall_s", "s", "perf_counter around one planning call on this machine"),
                    ("cost_ms", "ms", "dlrmbench cost model: step time as CostModel.plan_cost assembles it (collectives + fixed stage costs + slowest forward, backward and optimizer)"),
                    ("lower_bound_ms", "ms", "max of the simple bound, the LP relaxation (sharding.bounds) and the MILP "
                                             "cut (sharding.bound_cut); valid for every plan our options express"),
                    ("ratio", "x", "cost / dlrmbench lower bound (sharding.bounds)"),
                    ("balanced_ratio", "x", "(cost − Σ over resources of max − mean over ranks) / lower bound: the "
                                            "same shards perfectly balanced (CostModel.resource_loads)"),
                    ("torchrec_est_ms", "ms", "TorchRec 1.8 perf estimator, max over ranks of summed shard perf"),
                ) if isinstance(r.get(k), float)]
                f.write(json.dumps({"benchmark": "plan_bench", **{k: r[k] for k in ("set", "optimizer", "tables",
                                    "ranks", "feasible")}, "metrics": metrics}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
