"""`dlrmbench compare-plans [--world-size N] [--hardware H] [--rounds R] [--quick] [workload overrides]`: our
optimizer's plan, TorchRec's planner's plan and the best greedy baseline (the one our cost model rates best) run on
the same workload and ranks; measured step time side by side with each plan's predictions. `--cost-model learned`
adds the plan the learned model chooses (`benchmarks.perfmodel.choose`): which model's plan measures faster.

Each plan is made once; then `--rounds` jobs each run every plan, the order rotated round by round. A busy machine
moves whole rounds, so plans are compared by their ratio to ours *within* each round (paired): the table gives the
median of those ratios over rounds, their range, and in how many rounds ours was faster. Plans identical to ours
are marked: their spread is the measurement's own noise."""
from __future__ import annotations

import sys

from benchmarks.distributed.jobs import metric_value, run_cases
from benchmarks.distributed.launch import INPUT_ERRORS
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


def _planned_cases(overrides: list[str], hw: str, world: int, model: str | None) -> list[dict]:
    """Every planner's plan, made once here (so every round runs the same plans), as cases with plan dicts; with
    `model`, also the plan the learned model picks among ours and the baselines."""
    from dataclasses import replace

    from benchmarks.distributed.case import make_plan
    from benchmarks.distributed.config import compose_dist
    from embedding.workload_config import build_workload
    from sharding.topology import load_topology
    from sharding.workload import PlanWorkload

    cfg = compose_dist([*overrides, f"dist.hardware={hw}"])
    spec = build_workload(cfg.workload)
    spec = replace(spec, mode=spec.mode if cfg.dist.mode == "workload" else cfg.dist.mode)
    wl, topo = PlanWorkload.from_spec(spec, optimizer=cfg.dist.optimizer), load_topology(hw, ranks=world)
    plans = {name: make_plan(name, wl, topo) for name in PLANNERS}
    cases = [{"label": name, "overrides": [], "plan": plan.to_dict()} for name, plan in plans.items()]
    if model is not None:
        from benchmarks.perfmodel.choose import choose_learned
        from sharding.learned_cost import load_learned

        load_learned(model)
        plan, _ = choose_learned(plans["ours"], "ours", wl, topo, hw, model)
        cases.append({"label": f"learned:{plan.meta['learned_choice']['chosen']}", "overrides": [],
                      "plan": plan.to_dict()})
    return cases


def _rounds_table(cases: list[dict], per_round: list[dict[str, dict]]) -> list[str]:
    """Per plan over rounds: the median of its step medians and their range, and its paired ratio to ours."""
    import numpy as np

    step = {c["label"]: [float(metric_value(r[c["label"]], "step_time")) for r in per_round] for c in cases}
    same = {c["label"] for c in cases if c["plan"]["tables"] == cases[0]["plan"]["tables"]}
    lines = ["| plan | types | step ms, median over rounds (min–max) | / ours, median over rounds (min–max) | "
             "rounds ours faster |", "|---|---|---:|---:|---:|"]
    for c in cases:
        name, s = c["label"], np.array(step[c["label"]])
        types = per_round[0][name]["plan"]["sharding_types"]
        ratio = s / np.array(step["ours"])
        tag = " (same plan as ours)" if name in same and name != "ours" else ""
        paired = "—" if name == "ours" else f"{np.median(ratio):.3f} ({ratio.min():.3f}–{ratio.max():.3f})"
        wins = "—" if name == "ours" else f"{int((ratio > 1).sum())}/{len(ratio)}"
        lines.append(f"| {name}{tag} | {' '.join(f'{k}{v}' for k, v in types.items())} | "
                     f"{np.median(s):.2f} ({s.min():.2f}–{s.max():.2f}) | {paired} | {wins} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "compare-plans":
        argv = argv[1:]
    p = OneLineParser(prog="dlrmbench compare-plans", description=__doc__.splitlines()[0])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--hardware", default="")
    p.add_argument("--quick", action="store_true", help="5 timed steps per phase, one round")
    p.add_argument("--rounds", type=int, default=3, help="jobs over all plans, order rotated; paired ratios")
    p.add_argument("--records", default="results/records.jsonl")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--cost-model", choices=["analytic", "learned"], default="analytic",
                   help="learned: also run the plan the learned model rates fastest")
    p.add_argument("--learned-model", default="results/perfmodel/model.json")
    args, overrides = p.parse_known_args(argv)
    bad = [o for o in overrides if "=" not in o or o.startswith("-")]
    if bad or args.world_size < 2 or args.rounds < 1:
        what = ("unknown arguments " + str(bad) if bad else "--world-size must be ≥ 2" if args.world_size < 2
                else f"--rounds {args.rounds}: need ≥ 1")
        print(f"dlrmbench compare-plans: error: {what}"
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
    try:
        cases = _planned_cases(overrides, hw, args.world_size,
                               args.learned_model if args.cost_model == "learned" else None)
    except (*INPUT_ERRORS, ValueError) as e:  # Hydra's errors, PlanError, SpecError, LearnedModelError, ...
        print(f"dlrmbench compare-plans: error: {one_line(e)}", file=sys.stderr)
        return 2
    rounds = 1 if args.quick else args.rounds
    per_round: list[dict[str, dict]] = []
    for i in range(rounds):
        order = cases[i % len(cases):] + cases[:i % len(cases)]  # rotated: no plan always runs first
        rc, records = run_cases(order, base, args.world_size, args.records, args.timeout)
        if rc == 2:  # bad input, refused before any rank started; the launcher said what in one line
            return 2
        if rc or len(records) != len(cases):
            print(f"dlrmbench compare-plans: round {i + 1} of {rounds} failed (exit {rc}); records so far are in "
                  f"{args.records}", file=sys.stderr)
            return rc or 1
        print(f"round {i + 1}/{rounds}:")
        print("\n".join(_table(records)), flush=True)
        per_round.append({r["case"]: r for r in records})
    if rounds > 1:
        print(f"\nover {rounds} rounds (each plan once per round, order rotated; ratios paired within a round):")
        print("\n".join(_rounds_table(cases, per_round)))
    print(f"\n{args.world_size} ranks, hardware {hw!r}; records appended to {args.records}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
