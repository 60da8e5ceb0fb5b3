"""Whole-table re-layouts of a finished plan: a table re-cut row-wise over all ranks, a table-row-wise table moved
to another host or swapped with one on another host, each priced exactly by both models (`plan_cost`).

Why: the packings choose each table's sharding type before placing it, and the later moves (`sharding.search`,
`sharding.pack.retype`, `sharding.lns`, `sharding.anneal`) move pieces between ranks or re-cut a hot rank's
table-wise pieces; none re-cuts a table row-wise over all ranks, and none moves a table-row-wise group between
hosts. Where the planner falls back on polished greedy plans (memory-tight instances on which no packing fits,
tables in the slow tier), the hottest table then stays on one host: on f54 of `sharding.family` (22 tables,
32 ranks) that plan cost 1.29× TorchRec's plan by our model, whose hottest table is row-wise over all ranks.

Tables are tried hottest first (pooled lookup volume: pooling × dim), each table's best change applied when it
lowers our model's cost and TorchRec's rating stays at or below `t_cap` (so the caller's guarantees hold), every
rank's memory in every tier within its usable capacity (or not raised). Passes repeat until one changes nothing
or `evals` plan evaluations are spent: a count, not the clock, ends the step. The optimizer's final polish of a
greedy plan (`pareto=True`) also tries each fast-tier table data-parallel and applies a change only when neither
rating rises and one falls (`pareto_gain`).
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from sharding.cost import CostModel
from sharding.layouts import table_plan
from sharding.plan import ShardingPlan, ShardingType, TablePlan
from sharding.trec_cost import TorchRecCostModel

__all__ = ["relayout", "RELAYOUT_WORK", "pareto_gain"]

RW, TWRW, DP = ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE, ShardingType.DATA_PARALLEL
RELAYOUT_WORK = 4_000  # plan evaluations × tables per call (the evaluations shrink as tables grow)


def _memory(cost: CostModel, tp: TablePlan, tiers: list[str]) -> np.ndarray:
    """Bytes per (tier, rank) that table plan `tp` takes."""
    t = cost.tables[tp.name]
    out = np.zeros((len(tiers), cost.topology.world_size))
    for (rows, cols, tier, fraction), ranks in tp.alike().items():
        for k, v in cost.shard_memory(t, tp.sharding_type, rows, cols, tier, fraction).items():
            out[tiers.index(k), ranks] += v
    return out


def _options(cost: CostModel, plan: ShardingPlan, name: str, replicas: bool = False,
             ) -> Iterator[dict[str, TablePlan]]:
    """The re-layouts tried for table `name`: row-wise over all ranks (`replicas`: then data-parallel, where the
    table is in the fast tier); a table-row-wise table on each other host, and swapped with each table-row-wise
    table on another host (same tier and cache fraction as now)."""
    topo, tp = cost.topology, plan.tables[name]
    t, w, h = cost.tables[name], topo.world_size, min(topo.ranks_per_host, topo.world_size)
    (_, _, tier, fraction), ranks = next(iter(tp.alike().items()))
    if tp.sharding_type != RW and w > 1:
        yield {name: table_plan(t, RW, list(range(w)), tier, fraction)}
    if replicas and tp.sharding_type != DP and w > 1 and tier == topo.fast.name:
        yield {name: table_plan(t, DP, list(range(w)), tier, 0.0)}
    if tp.sharding_type == TWRW and topo.num_hosts > 1:
        host = min(ranks) // h
        for other in range(topo.num_hosts):
            if other != host:
                yield {name: table_plan(t, TWRW, list(range(other * h, other * h + h)), tier, fraction)}
        mine = tp.ranks
        for m, tq in plan.tables.items():
            if tq.sharding_type == TWRW:
                (_, _, tier_m, fraction_m), ranks_m = next(iter(tq.alike().items()))
                if min(ranks_m) // h != host:
                    yield {name: table_plan(t, TWRW, tq.ranks, tier, fraction),
                           m: table_plan(cost.tables[m], TWRW, mine, tier_m, fraction_m)}


def relayout(cost: CostModel, trec: TorchRecCostModel, plan: ShardingPlan, evals: int, t_cap: float,
             pareto: bool = False) -> ShardingPlan | None:
    """`plan` after whole-table re-layouts (module doc), or None if none was applied. `pareto` (the final polish,
    `optimizer` step 6): data-parallel is tried too, and a change is applied only when neither model's rating rises
    and one falls (`pareto_gain` against the current plan): the result is no worse than `plan` on either model."""
    topo = cost.topology
    tiers = [x.name for x in topo.tiers]
    cap = np.array([[topo.usable(x)] for x in tiers]) * (1 + 1e-12)
    mem = {n: _memory(cost, tp, tiers) for n, tp in plan.tables.items()}
    used = sum(mem.values())
    ours, tr = cost.plan_cost(plan), (trec.plan_cost(plan) if pareto else 0.0)  # tr: read only in the polish
    order = sorted(plan.tables, key=lambda n: -cost.tables[n].pooling.expected * cost.tables[n].dim)
    changed, spent, moved = True, 0, False
    while changed and spent < evals:
        changed = False
        for name in order:
            best: tuple[float, float, ShardingPlan, dict[str, np.ndarray]] | None = None
            for change in _options(cost, plan, name, pareto):
                if spent >= evals:
                    break
                new = {n: _memory(cost, tp, tiers) for n, tp in change.items()}
                after = used + sum(new.values()) - sum(mem[n] for n in change)
                if ((after > cap) & (after > used)).any():
                    continue
                trial = ShardingPlan(plan.world_size, {**plan.tables, **change}, optimizer=plan.optimizer)
                spent += 1
                a = cost.plan_cost(trial)
                if pareto:  # TorchRec's rating only where it can decide: a gain needs ours no higher than now
                    if a > ours * (1 + 1e-12) or (best is not None and a > best[0]):  # and than the best so far
                        continue
                    b = trec.plan_cost(trial)
                    if pareto_gain((a, b), (ours, tr), min(tr, t_cap)) and (best is None or (a, b) < best[:2]):
                        best = (a, b, trial, new)
                elif a < ours * (1 - 1e-9) and (best is None or a < best[0]) and trec.plan_cost(trial) <= t_cap * (
                        1 + 1e-12):
                    best = (a, tr, trial, new)
            if best is not None:
                ours, tr, plan = best[0], best[1], best[2]
                used = used + sum(best[3].values()) - sum(mem[n] for n in best[3])
                mem.update(best[3])
                changed = moved = True
    return plan if moved else None


def pareto_gain(new: tuple[float, float], old: tuple[float, float], t_cap: float, tol: float = 1e-9) -> bool:
    """Whether (ours, TorchRec's) `new` improves on `old`: TorchRec's rating at or below `t_cap`, and less cost by
    our model, or no more cost by ours and a lower TorchRec rating (each by more than `tol`, relative)."""
    if new[1] > t_cap * (1 + 1e-12):
        return False
    return new[0] < old[0] * (1 - tol) or (new[0] <= old[0] * (1 + 1e-12) and new[1] < old[1] * (1 - tol))
