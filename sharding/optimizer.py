"""Our sharding optimizer: tiering, splitting rules, packing and local search on two cost models, an exact MILP
refinement for small instances, and a final choice that never loses to a baseline on either model.

1. Tiers (`sharding.tiers`): tables stay in the fastest tier unless it is short; then the coldest bytes (least
   added time per byte, from measured miss-ratio curves where given) are demoted to UVM with a cache fraction.
2. Every shard is priced by our cost model and by TorchRec's estimator (`sharding.trec_cost`), each divided by
   its own lower bound; a rank's load is a 2-vector and the objective is its largest component anywhere, i.e. the
   larger of the plan's two ratios to their bounds (`sharding.search`).
3. Splitting: tiny tables whose replicas cost less go data-parallel; a table hotter than θ × (average rank load)
   is cut column-wise into the fewest equal blocks below that; one too big for μ of a rank's memory is cut
   column-wise, else table-row-wise over a host, else row-wise over all ranks. Several (θ, μ) are tried.
4. Packing: fixed shards (RW, DP) first, table-row-wise groups onto the best host, then pieces by descending
   score onto the rank whose load grows least; then local search (moves and swaps off the worst rank).
5. Small instances: a time-limited MILP (HiGHS via scipy, `sharding.milp`) over sharding type and ranks.
6. The greedy baselines' plans, polished by the same search, are candidates too. Among candidates no worse than
   every baseline on both models, the pick is the least cost by our model among those within `TREC_SLACK` of
   the best TorchRec rating found (the two models disagree on, e.g., data-parallel's worth, so a plan best on
   one can be poor on the other). If nothing packs, every table goes row-wise over all ranks, which spreads
   memory evenly: when even that does not fit, no plan does.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from sharding.baselines import BASELINES
from sharding.bounds import lower_bound
from sharding.cost import CostModel, MissCurve
from sharding.layouts import row_ranges
from sharding.milp import MilpStats, milp_refine
from sharding.pack import Builder, NoFit, repolish
from sharding.packing import Bins, no_room
from sharding.plan import ShardingPlan
from sharding.search import Scorer
from sharding.tiers import assign_tiers
from sharding.topology import Topology
from sharding.trec_cost import TorchRecCostModel
from sharding.workload import PlanError, PlanWorkload

__all__ = ["optimize", "OptimizeStats", "MILP_MAX_VARS"]

MILP_MAX_VARS = 6000  # binaries above which the MILP step is skipped (it rarely finishes in time beyond)
TREC_SLACK = 1.03  # final pick: least our cost among candidates within 3% of the best TorchRec rating found


@dataclass
class OptimizeStats:
    candidates: list[tuple[str, float, float]] = field(default_factory=list)  # (label, ours s, TorchRec s)
    chosen: str = ""
    wall_s: float = 0.0
    lower_bounds: tuple[float, float] = (0.0, 0.0)  # (ours s, TorchRec s)
    dominates_baselines: bool = False
    milp: MilpStats | None = None


def optimize(workload: PlanWorkload, topology: Topology, miss_curves: Mapping[str, MissCurve] | None = None,
             time_limit: float = 0.5, stats: OptimizeStats | None = None, milp_time_limit: float | None = None,
             ) -> ShardingPlan:
    """Plan `workload` on `topology`; raises `PlanError` (naming the table and shortfall) when no plan exists.
    `miss_curves` (table -> miss-ratio curve) prices cached tables; `milp_time_limit` (default: what is left
    of `time_limit`) bounds the exact step, which runs only on instances below `MILP_MAX_VARS` binaries."""
    start = time.perf_counter()
    deadline = start + time_limit
    stats = stats if stats is not None else OptimizeStats()
    cost = CostModel(workload, topology, miss_curves)
    trec = TorchRecCostModel(workload, topology)
    tiers = assign_tiers(cost)
    lb = (lower_bound(cost).value, lower_bound(trec).value)
    stats.lower_bounds = lb
    joint = Builder(Scorer(cost, trec, lb), tiers)
    ours_only = Builder(Scorer(cost, trec, (lb[0], lb[1] * 1e6)), tiers)  # TorchRec's component ≈ 0
    builder = joint
    found: list[tuple[str, ShardingPlan]] = []
    attempts = [(joint, "", theta, mu, dp, lw) for mu in (0.5, 0.25, 0.1) for theta in (1.0, 0.5, 0.25)
                for lw in (True, False) for dp in (True, False)]
    attempts[1:1] = [(ours_only, " ours-only", theta, 0.5, dp, False) for theta in (1.0, 0.5) for dp in (True, False)]
    for b, tag, theta, mu, dp, lw in attempts:
        if found and time.perf_counter() > start + 0.45 * time_limit:
            break
        try:
            plan = b.pack(theta, mu, dp, min(start + 0.45 * time_limit, time.perf_counter() + 0.1 * time_limit), lw)
        except NoFit:
            continue
        found.append((f"pack{tag} θ={theta} μ={mu}{' least-work' if lw else ''}{'' if dp else ' no-DP'}", plan))
    baselines: dict[str, ShardingPlan] = {}
    for name, fn in BASELINES.items():
        try:
            baselines[name] = fn(workload, topology)
        except PlanError:
            continue
    for name in ("greedy_size_lookups", "greedy_lookups", "greedy_size"):
        if name in baselines and (time.perf_counter() < start + 0.7 * time_limit or not found):
            budget = min(start + 0.75 * time_limit, time.perf_counter() + 0.08 * time_limit)
            found.append((f"{name}+search", repolish(builder, baselines[name], budget)))
    found.extend(baselines.items())
    if not found:
        try:
            found.append(("all row-wise", builder.pack(1.0, 0.0, True, deadline)))
        except NoFit:
            need = {k: 0.0 for k in (t.name for t in topology.tiers)}
            for t in workload.tables:
                rows = row_ranges(t.rows, topology.world_size)[0][1]
                for k, v in cost.shard_memory(t, builder.rw, rows, t.dim, *tiers[t.name]).items():
                    need[k] += v
            raise no_room(max(workload.tables, key=lambda t: t.bytes).name, Bins(topology), need) from None
    scored = [(label, cost.plan_cost(p), trec.plan_cost(p), p) for label, p in found]
    best = min(scored, key=lambda x: max(x[1] / lb[0], x[2] / lb[1]))
    if milp_time_limit is None:
        milp_time_limit = max(0.0, deadline - time.perf_counter() - 0.02)
    if milp_time_limit > 0.05:
        refined, stats.milp = milp_refine(builder, best[3], milp_time_limit, MILP_MAX_VARS)
        if refined is not None:
            scored.append(("milp", cost.plan_cost(refined), trec.plan_cost(refined), refined))
    refs = [(cost.plan_cost(p), trec.plan_cost(p)) for p in baselines.values()]
    tol = 1 + 1e-9
    good = [s for s in scored if all(s[1] <= a * tol and s[2] <= b * tol for a, b in refs)]
    stats.dominates_baselines = bool(good)
    if not good:  # never worse than a greedy baseline by our model (a greedy baseline itself qualifies)
        greedy = [a for (name, _), (a, _) in zip(baselines.items(), refs, strict=True) if name.startswith("greedy")]
        good = [s for s in scored if not greedy or s[1] <= min(greedy) * tol]
    best_trec = min(x[2] for x in good)
    near = [x for x in good if x[2] <= best_trec * TREC_SLACK]
    label, _, _, plan = min(near, key=lambda x: (x[1], x[2]))
    stats.candidates = [(lab, a, b) for lab, a, b, _ in scored]
    stats.chosen = label
    stats.wall_s = time.perf_counter() - start
    plan.optimizer = "ours"
    return plan
