"""`dlrmbench compare-plans [--world-size N] [--hardware H] [--quick] [workload overrides]`: our optimizer's plan,
TorchRec's planner's plan and the best greedy baseline (the one our cost model rates best) run on the same
workload and ranks in one job; measured step time side by side with each plan's predictions. `--cost-model
learned` adds the plan the learned model chooses (`benchmarks.perfmodel.choose`): which model's plan measures
faster."""
from __future__ import annotations

import sys

from benchmarks.distributed.jobs import metric_value, run_cases
from benchmarks.errors import OneLineParser, one_line
from benchmarks.validate_cost import check_args, default_hardware

__all__ = ["main", "PLANNERS"]

PLANNERS = ("ours", "torchrec", "best_greedy")


def _table(records: list[dict]) -> list[str]:
    lines = ["| plan | types | measured step ms (p90) | samples/s | imbalance | ours predicted ms | "
             "TorchRec estimate ms |", "|---|---|---:|---:|---:|---:|---:|"]
    best = min((metric_value(r, "step_time") or float("inf")) for r in records)
    for r in records:
        step = metric_value(r, "step_time")
        p90 = next(m["p90"] for m in r["metrics"] if m["name"] == "step_time")
        trec = metric_value(r, "torchrec_predicted_step_time")
        types = " ".join(f"{k}{v}" for k, v in r["plan"]["sharding_types"].items())
        mark = " **fastest**" if step == best else ""
        lines.append(f"| {r['case']}{mark} | {types} | {step:.2f} ({p90:.2f}) | "
                     f"{metric_value(r, 'samples_per_s'):.0f} | {metric_value(r, 'imbalance'):.2f} | "
                     f"{metric_value(r, 'predicted_step_time'):.2f} | "
                     f"{'—' if trec is None else f'{trec:.2f}'} |")
    return lines


def _learned_case(overrides: list[str], hw: str, world: int, model: str) -> dict:
    """The case of the plan the learned model picks among ours and the baselines (planned here, run as a dict)."""
    from dataclasses import replace

    from benchmarks.distributed.case import make_plan
    from benchmarks.distributed.config import compose_dist
    from benchmarks.perfmodel.choose import choose_learned
    from embedding.workload_config import build_workload
    from sharding.learned_cost import load_learned
    from sharding.topology import load_topology
    from sharding.workload import PlanWorkload

    load_learned(model)
    cfg = compose_dist([*overrides, f"dist.hardware={hw}"])
    spec = build_workload(cfg.workload)
    spec = replace(spec, mode=spec.mode if cfg.dist.mode == "workload" else cfg.dist.mode)
    wl, topo = PlanWorkload.from_spec(spec, optimizer=cfg.dist.optimizer), load_topology(hw, ranks=world)
    plan, _ = choose_learned(make_plan("ours", wl, topo), "ours", wl, topo, hw, model)
    return {"label": f"learned:{plan.meta['learned_choice']['chosen']}", "overrides": [], "plan": plan.to_dict()}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "compare-plans":
        argv = argv[1:]
    p = OneLineParser(prog="dlrmbench compare-plans", description=__doc__.splitlines()[0])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--hardware", default="")
    p.add_argument("--quick", action="store_true", help="5 timed steps per phase")
    p.add_argument("--records", default="results/records.jsonl")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--cost-model", choices=["analytic", "learned"], default="analytic",
                   help="learned: also run the plan the learned model rates fastest")
    p.add_argument("--learned-model", default="results/perfmodel/model.json")
    args, overrides = p.parse_known_args(argv)
    bad = [o for o in overrides if "=" not in o or o.startswith("-")]
    if bad or args.world_size < 2:
        print(f"dlrmbench compare-plans: error: {'unknown arguments ' + str(bad) if bad else '--world-size must be ≥ 2'}"
              " (workload settings are Hydra overrides such as workload=rm2 workload.max_rows=100000)",
              file=sys.stderr)
        return 2
    hw = default_hardware(args.hardware)
    try:
        check_args(hw, args.records, args.timeout, [args.world_size])
    except (ValueError, OSError) as e:
        print(f"dlrmbench compare-plans: error: {one_line(e)}", file=sys.stderr)
        return 2
    base = [*overrides, f"dist.hardware={hw}"] + (["dist.repeats=5", "dist.warmup=2"] if args.quick else [])
    cases = [{"label": name, "overrides": [], "plan": name} for name in PLANNERS]
    if args.cost_model == "learned":
        try:
            cases.append(_learned_case(overrides, hw, args.world_size, args.learned_model))
        except ValueError as e:  # PlanError, SpecError, LearnedModelError, TopologyError: all name the bad value
            print(f"dlrmbench compare-plans: error: {e}", file=sys.stderr)
            return 2
    rc, records = run_cases(cases, base, args.world_size, args.records, args.timeout)
    if records:
        print("\n".join(_table(records)))
        print(f"\n{args.world_size} ranks, hardware {hw!r}; records appended to {args.records}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
