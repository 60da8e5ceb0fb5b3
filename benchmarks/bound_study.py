"""Bound study: per table set, what keeping each hot table whole costs at least, whether ours keeps it whole, and
the lower bound split into those cases (`sharding.bound_cases`).

  .venv/bin/python -m benchmarks.bound_study --sets random500/64 --hot 6 --depth 16
  .venv/bin/python -m benchmarks.bound_study --out results/bound_study.jsonl
A row "t424  TW in ours  4.1776  1.051" reads: every plan that keeps t424 table-wise has a step of at least
4.1776 ms, 1.051 × the lower bound; ours keeps it table-wise, so no refinement of ours that keeps it whole can get
below that. The case split's value is a lower bound on every plan (min over its cases and leaf).
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Any

from benchmarks.plan_bench import SETS, set_model
from sharding import lower_bound, optimize
from sharding.bound_cases import case_split_bound, hot_tables, types_bound, whole_table_bounds

__all__ = ["study", "main"]


def study(label: str, hot: int, depth: int) -> dict[str, Any]:
    wl, topo, cost = set_model(label)
    t0 = time.perf_counter()
    lb = lower_bound(cost)
    lb_wall = time.perf_counter() - t0
    plan = optimize(wl, topo)
    ours = cost.plan_cost(plan)
    t0 = time.perf_counter()
    typed = types_bound(cost, plan, cut=lb.cut)
    typed_wall = time.perf_counter() - t0
    names = hot_tables(cost, hot)
    t0 = time.perf_counter()
    whole = whole_table_bounds(cost, names, cut=lb.cut)
    whole_wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    split, cases, leaf = case_split_bound(cost, depth) if depth > 0 else (0.0, [], 0.0)
    split_wall = time.perf_counter() - t0
    return {"set": label, "bound_s": lb.value, "bound_wall_s": lb_wall, "ours_s": ours,
            "ours_types_bound_s": typed, "types_wall_s": typed_wall,
            "hot": [{"table": n, "whole_bound_s": whole[n], "ours_type": plan.tables[n].sharding_type.short}
                    for n in names], "whole_wall_s": whole_wall,
            "depth": depth, "split_s": split, "split_leaf_s": leaf, "split_cases": len(cases),
            "split_wall_s": split_wall}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="*", default=list(SETS), choices=list(SETS))
    ap.add_argument("--hot", type=int, default=6, help="hottest tables to bound when kept whole")
    ap.add_argument("--depth", type=int, default=4, help="hottest tables the case split runs over (0: none)")
    ap.add_argument("--out", default=None, help="append records (JSON lines) here")
    args = ap.parse_args(argv)
    if args.hot < 0 or args.depth < 0:
        ap.error("--hot and --depth must be ≥ 0")
    for label in args.sets:
        s = study(label, args.hot, args.depth)
        lb = s["bound_s"]
        print(f"{label}: lower bound {lb * 1e3:.4f} ms ({s['bound_wall_s']:.1f} s); ours {s['ours_s'] * 1e3:.4f} ms "
              f"= {s['ours_s'] / lb:.3f} × bound")
        print(f"  every plan with ours' sharding types ≥ {s['ours_types_bound_s'] * 1e3:.4f} ms = "
              f"{s['ours_types_bound_s'] / lb:.3f} × bound; ours / that = {s['ours_s'] / s['ours_types_bound_s']:.3f} "
              f"({s['types_wall_s']:.1f} s)")
        print(f"  {'table':<10} {'in ours':>8} {'whole ≥ ms':>11} {'× bound':>8}   (bound on every plan keeping it "
              f"table-wise; {s['whole_wall_s']:.1f} s)")
        for h in s["hot"]:
            whole = h["whole_bound_s"]
            print(f"  {h['table']:<10} {h['ours_type']:>8} {whole * 1e3:11.4f} {whole / lb:8.3f}")
        if s["depth"]:
            print(f"  case split over the {s['split_cases']} hottest: {s['split_s'] * 1e3:.4f} ms = "
                  f"{s['split_s'] / lb:.4f} × bound (leaf {s['split_leaf_s'] * 1e3:.4f}; {s['split_wall_s']:.1f} s)",
                  flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps({"benchmark": "bound_study", **s,
                                    "method": "HiGHS dual bounds of sharding.bound_cut's MILP per case "
                                              "(sharding.bound_cases); ours: sharding.optimize, default"}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
