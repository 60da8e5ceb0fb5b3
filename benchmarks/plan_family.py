"""Ours against the baselines and TorchRec's planner on a seeded family of unseen instances (`sharding.family`).

  .venv/bin/python -m benchmarks.plan_family                          # 45 instances, TorchRec capped at 60 s each
  .venv/bin/python -m benchmarks.plan_family --count 6 --torchrec-cap 20   # a quick run
  .venv/bin/python -m benchmarks.plan_family --torchrec-cache results/validation/plan_family_torchrec.jsonl

Per instance: every plan rated by both models (ours: `CostModel.plan_cost`; TorchRec's: `TorchRecCostModel`, the
re-statement of TorchRec 1.8's `EmbeddingPerfEstimator` that tests/sharding holds to 1e-9 of it), our planning CPU
time (`time.process_time`, one process) and TorchRec's planner's wall time. TorchRec's planner runs in a child
process killed at `--torchrec-cap` seconds ("gave up" in the table). Its plans can be cached (`--torchrec-cache`,
keyed by instance and cap) since they do not depend on our code: an A/B of ours then reruns ours alone.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path
from typing import Any

from sharding import BASELINES, CostModel, PlanError, ShardingPlan, optimize, validate_plan
from sharding.family import Instance, instance
from sharding.optimizer import OptimizeStats
from sharding.trec_cost import TorchRecCostModel

__all__ = ["main", "run_instance", "summarise"]


def _torchrec_child(q: Any, seed: int, max_tables: int) -> None:
    import torchrec.distributed.planner  # noqa: F401  (imports are not planning time, as for ours)

    from sharding.torchrec_adapter import run_torchrec_planner
    inst = instance(seed, max_tables)
    t0 = time.perf_counter()
    try:
        plan = run_torchrec_planner(inst.workload, inst.topology)
        q.put(("ok", time.perf_counter() - t0, plan.to_dict()))
    except Exception as e:  # TorchRec's own failure is a result ("no plan"), not a crash of the benchmark
        q.put(("no plan", time.perf_counter() - t0, f"{type(e).__name__}: {e}"[:200]))


def _torchrec(seed: int, max_tables: int, cap: float) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_torchrec_child, args=(q, seed, max_tables), daemon=True)
    t0 = time.perf_counter()
    p.start()
    try:
        status, wall, payload = q.get(timeout=cap + 30)  # + the child's imports (not planning time)
        if status == "ok" and wall > cap:
            status, payload = "gave up", f"planned in {wall:.0f} s, over the {cap:.0f} s cap"
    except Exception:
        status, wall, payload = "gave up", time.perf_counter() - t0, f"no plan in {cap:.0f} s"
    finally:
        if p.is_alive():
            p.kill()
        p.join()
    return {"status": status, "wall_s": wall, "plan": payload if status == "ok" else None,
            "note": payload if status != "ok" else ""}


def _rate(plan: ShardingPlan, inst: Instance, cost: CostModel, trec: TorchRecCostModel) -> dict[str, Any]:
    try:
        validate_plan(plan, inst.workload, inst.topology)
    except PlanError as e:
        return {"valid": False, "note": str(e)[:160]}
    return {"valid": True, "ours_ms": cost.plan_cost(plan) * 1e3, "trec_ms": trec.plan_cost(plan) * 1e3}


def run_instance(inst: Instance, torchrec: dict[str, Any] | None, torchrec_search: int = 0) -> dict[str, Any]:
    """One instance's record: every plan rated by both models, our CPU time, TorchRec's wall time."""
    wl, topo = inst.workload, inst.topology
    bound_topo = topo.reserve_inputs(wl.ids_per_batch)
    cost, trec = CostModel(wl, bound_topo), TorchRecCostModel(wl, bound_topo)
    rec: dict[str, Any] = {"instance": inst.name, "seed": inst.seed, "label": inst.label,
                           "tables": len(wl.tables), "ranks": topo.world_size, "hosts": topo.num_hosts,
                           "hbm_gib": topo.fast.capacity / 2**30, "batch": wl.batch_size, "mode": wl.mode,
                           "tight": inst.tight, "plans": {}, "load": os.getloadavg()}
    stats = OptimizeStats()
    c0, w0 = time.process_time(), time.perf_counter()
    try:  # the planner's time is `optimize` alone: the check and the ratings below are the benchmark's own
        plan = optimize(wl, topo, stats=stats, torchrec_search=torchrec_search)
    except PlanError as e:
        plan, rec["plans"]["ours"] = None, {"valid": False, "note": str(e)[:160]}
    rec["ours_cpu_s"], rec["ours_wall_s"] = time.process_time() - c0, time.perf_counter() - w0
    c1 = time.process_time()
    if plan is not None:
        rec["plans"]["ours"] = _rate(plan, inst, cost, trec)
    rec["check_cpu_s"] = time.process_time() - c1  # `validate_plan` and both ratings of our plan
    rec["ours_chosen"] = stats.chosen
    for name, fn in BASELINES.items():
        try:
            rec["plans"][name] = _rate(fn(wl, topo), inst, cost, trec)
        except PlanError as e:
            rec["plans"][name] = {"valid": False, "note": str(e)[:160]}
    if torchrec is not None:
        rec["torchrec_status"], rec["torchrec_wall_s"] = torchrec["status"], torchrec["wall_s"]
        rec["torchrec_cap_s"] = torchrec.get("cap_s")
        if torchrec["plan"] is not None:
            rec["plans"]["torchrec"] = _rate(ShardingPlan.from_dict(torchrec["plan"]), inst, cost, trec)
        else:
            rec["plans"]["torchrec"] = {"valid": False, "note": torchrec["note"]}
    return rec


def _ratios(rec: dict[str, Any]) -> dict[str, float]:
    """ours / TorchRec's plan and ours / the best baseline, by each model (nan where a side has no plan)."""
    p, nan = rec["plans"], math.nan
    ours = p.get("ours", {})
    out = {}
    for key in ("ours_ms", "trec_ms"):
        tr = p.get("torchrec", {})
        out[f"vs_torchrec_{key}"] = ours[key] / tr[key] if ours.get("valid") and tr.get("valid") else nan
        base = [v[key] for k, v in p.items() if k in BASELINES and v.get("valid")]
        out[f"vs_baseline_{key}"] = ours[key] / min(base) if ours.get("valid") and base else nan
    return out


def summarise(records: list[dict[str, Any]]) -> list[str]:
    """The markdown table (one row per instance, then the summary)."""
    head = ("| instance | tables × ranks | mode | ours/TorchRec (TorchRec est.) | ours/TorchRec (ours) | "
            "ours/best baseline (TorchRec est.) | ours/best baseline (ours) | ours CPU s | TorchRec wall s |")
    lines = [head, "|" + " --- |" * 9]
    rows = []
    for r in records:
        q = _ratios(r)
        rows.append((r, q))
        tr = r.get("torchrec_status", "not run")
        trw = f"{r['torchrec_wall_s']:.1f}" if tr == "ok" else f"{tr} ({r.get('torchrec_wall_s', 0):.0f} s)"
        trw += f" (cap {r['torchrec_cap_s']:g} s)" if r.get("torchrec_cap_s") else ""
        lines.append(f"| {r['instance']} | {r['tables']} × {r['ranks']}{' tight' if r['tight'] else ''} | {r['mode']} | "
                     f"{q['vs_torchrec_trec_ms']:.3f} | {q['vs_torchrec_ours_ms']:.3f} | {q['vs_baseline_trec_ms']:.3f} | "
                     f"{q['vs_baseline_ours_ms']:.3f} | {r['ours_cpu_s']:.3f} | {trw} |")

    def worst(key: str) -> str:
        vals = [(q[key], r["instance"]) for r, q in rows if not math.isnan(q[key])]
        if not vals:
            return "–"
        bad = sum(v > 1 + 1e-9 for v, _ in vals)
        v, name = max(vals)
        return f"max {v:.3f} ({name}), {bad}/{len(vals)} > 1"

    cpu = [r["ours_cpu_s"] for r in records]
    trec_ok = sum(r.get("torchrec_status") == "ok" for r in records)
    lines.append(f"| **summary** ({len(records)} instances; TorchRec planned {trec_ok}) | | | "
                 f"{worst('vs_torchrec_trec_ms')} | {worst('vs_torchrec_ours_ms')} | {worst('vs_baseline_trec_ms')} | "
                 f"{worst('vs_baseline_ours_ms')} | max {max(cpu):.3f}, median {sorted(cpu)[len(cpu) // 2]:.3f} | |")
    return lines


def _load_cache(path: Path | None) -> dict[str, dict[str, Any]]:
    if path is None or not path.is_file():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            out[r["key"]] = r
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=45, help="instances (seeds first … first + count − 1)")
    ap.add_argument("--first", type=int, default=0, help="first instance seed")
    ap.add_argument("--max-tables", type=int, default=1000, help="cap on tables per instance")
    ap.add_argument("--torchrec-cap", type=float, default=60.0, help="seconds TorchRec's planner gets per instance")
    ap.add_argument("--no-torchrec", action="store_true", help="ours and the baselines only")
    ap.add_argument("--torchrec-search", type=int, default=0, metavar="N",
                    help="ours with the opt-in re-stated TorchRec search (≤ N shards per proposer; 0: off)")
    ap.add_argument("--torchrec-cache", type=Path, default=None, help="JSON lines of TorchRec's plans (read, append)")
    ap.add_argument("--out", type=Path, default=Path("results/validation/plan_family.jsonl"),
                    help="records (JSON lines); the table goes beside it as .md")
    args = ap.parse_args(argv)
    for flag, v, least in (("--count", args.count, 1), ("--first", args.first, 0), ("--max-tables", args.max_tables, 1),
                           ("--torchrec-search", args.torchrec_search, 0)):
        if v < least:
            print(f"error: {flag} {v}: must be ≥ {least}", file=sys.stderr)
            return 2
    if not args.torchrec_cap > 0:
        print(f"error: --torchrec-cap {args.torchrec_cap}: must be > 0 seconds", file=sys.stderr)
        return 2
    cache = _load_cache(args.torchrec_cache)
    records = []
    for seed in range(args.first, args.first + args.count):
        inst = instance(seed, args.max_tables)
        print(inst.label, flush=True)
        tr = None
        if not args.no_torchrec:
            key = f"{seed}/{args.max_tables}/{args.torchrec_cap:g}"
            if key not in cache:
                cache[key] = {"key": key, "cap_s": args.torchrec_cap, **_torchrec(seed, args.max_tables, args.torchrec_cap)}
                if args.torchrec_cache is not None:
                    args.torchrec_cache.parent.mkdir(parents=True, exist_ok=True)
                    with open(args.torchrec_cache, "a") as f:
                        f.write(json.dumps(cache[key]) + "\n")
            tr = cache[key]
        rec = run_instance(inst, tr, args.torchrec_search)
        records.append(rec)
        print("  " + summarise([rec])[2], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    load = os.getloadavg()
    table = summarise(records)
    md = [f"# plan_family: {len(records)} instances (seeds {args.first}–{args.first + args.count - 1}), TorchRec cap "
          f"{args.torchrec_cap:g} s", "",
          f"Command: `python -m benchmarks.plan_family {' '.join(argv if argv is not None else sys.argv[1:])}`; "
          f"load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min; per-instance load in "
          "the records). Ratios below 1: ours better. TorchRec est. = TorchRec 1.8's estimator (re-stated, 1e-9); "
          "ours = our cost model. CPU s: `time.process_time` of `optimize` alone (one process, no warm-up call; "
          "the check of our plan, `validate_plan` and its two ratings, is `check_cpu_s` in the records); "
          "TorchRec wall s: its "
          "planner in a child process; 'gave up (N s)': killed after N s, the cap plus 30 s for the child's "
          "imports; nan: that side has no valid plan.", "", *table]
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(table[-1:]))
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
