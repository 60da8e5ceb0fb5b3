"""`dlrmbench validate-cost [--hardware H] [--world-sizes 2] [--quick] [--records F]`: run ≥ 10 plans for real
and hold the cost model to what they measure.

Plans span sharding types (our optimizer's, TorchRec's planner's, greedy, round-robin, all row-wise, column-wise,
table-row-wise, some data-parallel, everything on one rank) over three workloads, on each world size given.
Per case: predicted step time (our `CostModel.plan_cost` and TorchRec's estimator, both on `--hardware`) against
the measured step time; per rank: predicted rank time (ours: the rank's work + the collectives it joins + its
wait for slower peers, `RankCost.elapsed`; TorchRec: its shards' perf summed) against the measured embedding
stages of that rank (which include those waits). Error = |predicted − measured| / measured; the table ends with
the median absolute error of each model. The whole list of cases runs `--rounds` times, one job each, in a
different (seeded) order each round, and each measured figure is the median over rounds of the per-round
medians over steps (the statistic `benchmarks.calibrate` fits with): on a shared machine load from other
processes comes in bursts of seconds, which one round of a case can fall into. The table shows each case's
spread over rounds (min–max of the per-round medians) and the median relative spread, the noise floor any
error figure sits on.
A `validation` record with those medians is appended next to the cases' own `distributed` records.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.distributed.config import compose_dist
from benchmarks.distributed.jobs import metric_value, rank_values, run_cases
from benchmarks.errors import InputError, OneLineParser, check_output_file, one_line
from benchmarks.records import append_records, environment, git_sha, metric, new_run_id
from embedding.workload_config import build_workload
from sharding.layouts import column_splits, table_plan
from sharding.plan import ShardingPlan, ShardingType

__all__ = ["main", "WORKLOADS", "build_cases", "error_table", "merge_rounds"]

TW, RW, CW, TWRW, DP = (ShardingType.TABLE_WISE, ShardingType.ROW_WISE, ShardingType.COLUMN_WISE,
                        ShardingType.TABLE_ROW_WISE, ShardingType.DATA_PARALLEL)

WORKLOADS = {
    "small4": ["workload=smoke"],
    "uniform8": ["workload=smoke", "workload.rows=[200000,200000,200000,200000,200000,200000,200000,200000]",
                 "workload.dim=32", "workload.pooling.kind=fixed", "workload.pooling.mean=16",
                 "workload.access.kind=uniform", "workload.batch_size=1024"],
    "wide2": ["workload=smoke", "workload.rows=[500000,300000]", "workload.dim=128", "workload.pooling.kind=fixed",
              "workload.pooling.mean=32", "workload.batch_size=512"],
}
PLANS = {"small4": ["ours", "torchrec", "round_robin", "all_rw", "one_rank", "dp_small"],
         "uniform8": ["ours", "greedy_size", "all_cw", "all_twrw"],
         "wide2": ["ours", "all_rw", "all_cw"]}


def _built(name: str, overrides: list[str], world: int) -> dict | str:
    """A named optimizer, or a plan dict of one sharding layout for every table."""
    if name in ("ours", "torchrec", "round_robin", "greedy_size", "best_greedy"):
        return name
    spec = build_workload(compose_dist(overrides).workload)
    ranks = list(range(world))
    tables = {}
    for i, t in enumerate(spec.tables):
        if name == "all_rw":
            tp = table_plan(t, RW, ranks, "ddr")
        elif name == "all_twrw":
            tp = table_plan(t, TWRW, ranks, "ddr")
        elif name == "all_cw" and world in column_splits(t.dim):
            tp = table_plan(t, CW, [(i + k) % world for k in ranks], "ddr")
        elif name == "dp_small" and t.rows <= 20000:
            tp = table_plan(t, DP, ranks, "ddr")
        else:  # one_rank, or the table-wise fallback: round-robin (one_rank: all on rank 0)
            tp = table_plan(t, TW, [0 if name == "one_rank" else i % world], "ddr")
        tables[t.name] = tp
    return ShardingPlan(world, tables, optimizer=name).to_dict()


def build_cases(world: int, quick: bool) -> list[dict]:
    cases = []
    for wl, overrides in WORKLOADS.items():
        for plan in PLANS[wl][: 3 if quick else None]:
            cases.append({"label": f"{wl}/{plan}/w{world}", "overrides": overrides,
                          "plan": _built(plan, overrides, world)})
    return cases


def _err(pred: float | None, meas: float | None) -> float | None:
    return None if pred is None or not meas else abs(pred - meas) / meas


def _fmt(x: float | None, pct: bool = False) -> str:
    return "—" if x is None else (f"{100 * x:.0f}%" if pct else f"{x:.2f}")


def _ours_rank(record: dict, rank: int) -> float | None:
    per = record.get("prediction", {}).get("ours_per_rank") or []
    if rank >= len(per):
        return None
    r = per[rank]
    return 1e3 * (float(r.get("elapsed_s", r["total_s"])) - float(r.get("other_s", 0.0)))  # embedding stages


def merge_rounds(rounds: list[list[dict]]) -> list[dict]:
    """One summary per case: median over rounds of the measured step and per-rank embedding times."""
    by_case: dict[str, list[dict]] = {}
    for recs in rounds:
        for r in recs:
            by_case.setdefault(r["case"], []).append(r)
    out = []
    for case, recs in by_case.items():
        first = recs[0]
        ranks = [rank_values(r, "embedding_time") for r in recs]
        steps = [float(metric_value(r, "step_time") or 0.0) for r in recs]
        out.append({"case": case, "types": first["plan"]["sharding_types"], "rounds": len(recs),
                    "run_ids": [r["run_id"] for r in recs], "round_steps": steps,
                    "measured": float(np.median(steps)),
                    "ours": metric_value(first, "predicted_step_time"),
                    "torchrec": metric_value(first, "torchrec_predicted_step_time"),
                    "rank_measured": [float(np.median(v)) for v in zip(*ranks, strict=True)],
                    "rank_ours": [_ours_rank(first, k) for k in range(len(ranks[0]))],
                    "rank_torchrec": rank_values(first, "torchrec_predicted_rank_time") or None})
    return out


def error_table(cases: list[dict]) -> tuple[list[str], dict[str, float]]:
    """Markdown lines (per case, then per rank) and the median absolute errors."""
    lines = ["| case | types | measured step ms | min–max over rounds | ours ms | ours err | TorchRec ms | "
             "TorchRec err |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    spreads = []
    errs: dict[str, list[float]] = {"ours": [], "torchrec": [], "ours_rank": [], "torchrec_rank": []}
    rank_lines = ["| case | rank | measured embedding ms | ours ms | ours err | TorchRec ms | TorchRec err |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
    for c in cases:
        meas, ours, trec = c["measured"], c["ours"], c["torchrec"]
        eo, et = _err(ours, meas), _err(trec, meas)
        errs["ours"] += [eo] if eo is not None else []
        errs["torchrec"] += [et] if et is not None else []
        types = " ".join(f"{k}{v}" for k, v in c["types"].items())
        rs = c.get("round_steps") or [meas]
        spreads.append((max(rs) - min(rs)) / meas if meas else 0.0)
        lines.append(f"| {c['case']} | {types} | {_fmt(meas)} | {min(rs):.1f}–{max(rs):.1f} | {_fmt(ours)} | "
                     f"{_fmt(eo, True)} | {_fmt(trec)} | {_fmt(et, True)} |")
        tr = c["rank_torchrec"]
        for k, m in enumerate(c["rank_measured"]):
            po, pt = c["rank_ours"][k], (tr[k] if tr else None)
            e1, e2 = _err(po, m), _err(pt, m)
            errs["ours_rank"] += [e1] if e1 is not None else []
            errs["torchrec_rank"] += [e2] if e2 is not None else []
            rank_lines.append(f"| {c['case']} | {k} | {_fmt(m)} | {_fmt(po)} | {_fmt(e1, True)} | {_fmt(pt)} | "
                              f"{_fmt(e2, True)} |")
    med = {k: float(np.median(v)) for k, v in errs.items() if v}
    med["round_spread"] = float(np.median(spreads)) if spreads else 0.0
    lines.append(f"\nmedian absolute error of the step time: ours {_fmt(med.get('ours'), True)}, TorchRec "
                 f"{_fmt(med.get('torchrec'), True)} ({len(cases)} cases, median over "
                 f"{max(c['rounds'] for c in cases)} rounds; median spread over rounds (max − min) / median: "
                 f"{_fmt(med['round_spread'], True)})\n")
    rank_lines.append(f"\nmedian absolute error per rank: ours {_fmt(med.get('ours_rank'), True)}, TorchRec "
                      f"{_fmt(med.get('torchrec_rank'), True)}")
    return lines + rank_lines, med


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="dlrmbench validate-cost", description=__doc__.splitlines()[0])
    p.add_argument("--hardware", default="", help="hardware preset or YAML (default: "
                   "results/hardware/calibrated.yaml when `dlrmbench calibrate` wrote it, else dev_2core)")
    p.add_argument("--world-sizes", default="2", help="comma-separated rank counts, one job each")
    p.add_argument("--quick", action="store_true", help="3 plans per workload, 5 timed steps, one round")
    p.add_argument("--rounds", type=int, default=5, help="jobs over the whole case list; median over rounds")
    p.add_argument("--repeats", type=int, default=20, help="timed steps per case and round")
    p.add_argument("--records", default="results/records.jsonl")
    p.add_argument("--timeout", type=float, default=300.0)
    return p


def check_args(hardware: str, records: str, timeout: float, worlds: list[int]) -> None:
    """What every job of validate-cost or compare-plans needs, checked once before the first job starts."""
    from benchmarks.distributed.config import TIMEOUT_MAX_S
    from sharding.topology import load_topology

    if not 0 < timeout <= TIMEOUT_MAX_S:
        raise InputError(f"--timeout {timeout} must be > 0 and ≤ {TIMEOUT_MAX_S} s")
    check_output_file(records, "--records")
    for w in worlds:
        load_topology(hardware, ranks=w)


def default_hardware(given: str) -> str:
    if given:
        return given
    calibrated = Path("results/hardware/calibrated.yaml")
    return str(calibrated) if calibrated.is_file() else "dev_2core"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "validate-cost":
        argv = argv[1:]
    args = _parser().parse_args(argv)
    try:
        worlds = [int(x) for x in args.world_sizes.split(",")]
        if any(w < 2 for w in worlds):
            raise ValueError
    except ValueError:
        print(f"dlrmbench validate-cost: error: --world-sizes {args.world_sizes!r} must list integers ≥ 2",
              file=sys.stderr)
        return 2
    if args.rounds < 1 or args.repeats < 1:
        print("dlrmbench validate-cost: error: --rounds and --repeats must be ≥ 1", file=sys.stderr)
        return 2
    hw = default_hardware(args.hardware)
    try:
        check_args(hw, args.records, args.timeout, worlds)
    except (ValueError, OSError) as e:
        print(f"dlrmbench validate-cost: error: {one_line(e)}", file=sys.stderr)
        return 2
    rounds = 1 if args.quick else args.rounds
    overrides = [f"dist.hardware={hw}", "dist.model=embedding", "dist.mode=train"]
    overrides += ["dist.repeats=5", "dist.warmup=2"] if args.quick else [f"dist.repeats={args.repeats}"]
    per_round: list[list[dict]] = [[] for _ in range(rounds)]
    rc = 0
    for k in range(rounds):
        for w in worlds:
            cases = build_cases(w, args.quick)
            random.Random(k).shuffle(cases)  # a burst of load hits different cases in different rounds
            code, found = run_cases(cases, overrides, w, args.records, args.timeout)
            rc, per_round[k] = rc or code, per_round[k] + found
    records = [r for recs in per_round for r in recs]
    if not records:
        return rc or 1
    cases = merge_rounds(per_round)
    lines, med = error_table(cases)
    print("\n".join(lines))
    how = f"median over cases of |predicted − measured| / measured, hardware {hw!r}"
    append_records(args.records, [{
        "run_id": new_run_id(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "git_sha": git_sha(),
        "env": environment(), "kind": "validation", "backend": "torchrec_dmp", "config": {"hardware": hw,
        "world_sizes": worlds, "quick": args.quick, "rounds": rounds}, "cases": [c["case"] for c in cases],
        "case_run_ids": sorted({r["run_id"] for r in records}),
        "metrics": [metric(f"median_abs_error_{k}", v, "fraction", how + (" (per rank: embedding stages)"
                                                                          if k.endswith("rank") else ""))
                    for k, v in med.items() if k != "round_spread"]
        + [metric("median_round_spread", med["round_spread"], "fraction", "median over cases of (max − min) / "
                  "median of the per-round median step times")]}])
    return rc


if __name__ == "__main__":
    sys.exit(main())
