"""`dlrmbench plan --cost-model learned`: the optimizer's plan and every baseline's that fits, ranked by the learned
model (`sharding.learned_cost.LearnedCostModel`); the fastest by its prediction is written.

The optimizers search with the analytic model's per-shard costs; the learned model corrects whole plans, so it
chooses among candidates rather than steering the search. Warnings (one line each) when the model was trained on
another machine, another hardware file or another world size than the plan's.
"""
from __future__ import annotations

import sys
from typing import Any

from sharding import BASELINES, PlanError, PlanWorkload, ShardingPlan, Topology, validate_plan
from sharding.learned_cost import LearnedCostModel, LookupModel, load_learned

__all__ = ["choose_learned", "DEFAULT_MODEL"]

DEFAULT_MODEL = "results/perfmodel/model.json"


def choose_learned(plan: ShardingPlan, optimizer: str, wl: PlanWorkload, topo: Topology, hardware: str,
                   model_path: str) -> tuple[ShardingPlan, dict[str, Any]]:
    """(the candidate the learned model rates fastest, what was compared: name -> analytic and learned ms)."""
    from benchmarks.perfmodel.machine import check_machine

    model = load_learned(model_path)  # LearnedModelError (a ValueError) names the file
    prov = model.get("provenance", {})
    warnings = check_machine(prov.get("machine"), what="learned model")
    if prov.get("hardware") and prov["hardware"] != hardware:
        warnings.append(f"warning: the learned model was trained with hardware {prov['hardware']!r}, the plan is "
                        f"for {hardware!r}: its corrections may not apply")
    for w in warnings:
        print(w, file=sys.stderr)
    lcm = LearnedCostModel(wl, topo, model, LookupModel.from_hardware(hardware, topo))
    candidates = {optimizer: plan}
    for name, fn in BASELINES.items():
        if name == optimizer:
            continue
        try:
            p = fn(wl, topo)
            validate_plan(p, wl, topo, lcm.analytic)
        except PlanError:
            continue
        candidates[name] = p
    scored = {n: {"analytic_ms": lcm.analytic.plan_cost(p) * 1e3, "learned_ms": lcm.plan_cost(p) * 1e3}
              for n, p in candidates.items()}
    best = min(scored, key=lambda n: scored[n]["learned_ms"])
    chosen = candidates[best]
    chosen.meta["learned_choice"] = {"model": model_path, "chosen": best, "candidates": scored,
                                     "model_provenance": {k: prov.get(k) for k in ("hardware", "git_sha", "trained",
                                                                                   "step_records")}}
    return chosen, scored
