"""Which tables keep their rows in the fastest tier, which are cached from the next tier, and how much.

When the tables do not fit the fastest tier of all ranks together, rows are demoted in steps of cache fraction
(1 → 0.5 → 0.2 → 0.1 → 0.05 → 0, i.e. uncached), always taking the step with the smallest added lookup time per
byte freed, until the fast-tier demand fits `fill` of its capacity. Miss rates come from the cost model (measured
miss-ratio curves when given, the analytic Zipf hot-set estimate otherwise).
"""
from __future__ import annotations

import heapq

import numpy as np

from sharding.cost import CostModel
from sharding.layouts import table_plan
from sharding.plan import ShardingPlan, ShardingType, TablePlan
from sharding.relayout import _memory  # bytes per (tier, rank) of a table plan
from sharding.trec_cost import TorchRecCostModel
from sharding.workload import PlanError

__all__ = ["assign_tiers", "tierings", "promote", "CACHE_LEVELS", "PROMOTE_WORK"]

CACHE_LEVELS = (1.0, 0.5, 0.2, 0.1, 0.05, 0.0)  # share of a table's rows held in the fastest tier
TW = ShardingType.TABLE_WISE


def _level(cost: CostModel, name: str, i: int) -> tuple[str, float, float, dict[str, float]]:
    """(tier, cache fraction, TW cost, TW memory) of table `name` at cache level i."""
    t, topo = cost.tables[name], cost.topology
    f = CACHE_LEVELS[i]
    tier, cf = (topo.fast.name, 0.0) if f >= 1 else (topo.tiers[1].name, f)
    c = cost.shard_cost(t, TW, t.rows, t.dim, tier, cf).total
    return tier, cf, c, cost.shard_memory(t, TW, t.rows, t.dim, tier, cf)


def _price_fast(cost: CostModel) -> None:
    """Every table table-wise in the fast tier (`_level` 0) priced in one `CostModel.price_many` pass (the same
    floats as `shard_cost` one by one, in the same memo): issue 16, one `_shard_cost` per table was 1,000 Python
    pricings on random:1000:1 before the packings price them all in one pass anyway."""
    fast = cost.topology.fast.name
    cost.price_many([(t, TW, t.rows, t.dim, fast, 0.0) for t in cost.workload.tables])


def assign_tiers(cost: CostModel, fill: float = 0.92, take_back: bool = True) -> dict[str, tuple[str, float]]:
    """Table name -> (tier, cache fraction); `take_back`: then the greedy steps that the fast tier no longer
    needs are taken back (`_undo`)."""
    got = tierings(cost, fill)
    return got[0] if take_back else got[1]


def tierings(cost: CostModel, fill: float = 0.92,
             ) -> tuple[dict[str, tuple[str, float]], dict[str, tuple[str, float]]]:
    """(`assign_tiers` with the greedy steps taken back, the greedy steps alone), computed once."""
    topo = cost.topology
    fast = topo.fast.name
    names = [t.name for t in cost.workload.tables]
    total = sum(topo.usable(t.name) for t in topo.tiers) * topo.world_size
    for t in cost.workload.tables:
        need = t.rows * cost.workload.row_bytes(t)
        if need > total:
            raise PlanError(f"table {t.name!r} needs {need / 1e9:.3f} GB, more than all {topo.world_size} ranks hold "
                            f"together ({total / 1e9:.3f} GB usable; short by {(need - total) / 1e9:.3f} GB)")
    cap_fast = topo.usable(fast) * topo.world_size * fill
    levels = {n: 0 for n in names}
    _price_fast(cost)
    state = {n: _level(cost, n, 0) for n in names}
    demand = sum(s[3].get(fast, 0.0) for s in state.values())
    if demand <= cap_fast:
        same = {n: (fast, 0.0) for n in names}
        return same, same
    if len(topo.tiers) < 2:
        raise PlanError(f"tables need {demand / fill / 1e9:.3f} GB of {fast} but the {topo.world_size} ranks have "
                        f"{cap_fast / fill / 1e9:.3f} GB usable and no slower tier "
                        f"(short by {(demand - cap_fast) / fill / 1e9:.3f} GB)")
    heap: list[tuple[float, str, int]] = []

    def push(n: str) -> None:
        i = levels[n]
        if i + 1 < len(CACHE_LEVELS):
            nxt = _level(cost, n, i + 1)
            freed = state[n][3].get(fast, 0.0) - nxt[3].get(fast, 0.0)
            if freed > 0:
                heapq.heappush(heap, ((nxt[2] - state[n][2]) / freed, n, i + 1))

    for n in names:
        push(n)
    while demand > cap_fast and heap:
        _, n, i = heapq.heappop(heap)
        if levels[n] != i - 1:
            continue
        nxt = _level(cost, n, i)
        demand += nxt[3].get(fast, 0.0) - state[n][3].get(fast, 0.0)
        levels[n], state[n] = i, nxt
        push(n)
    greedy = {n: (s[0], s[1]) for n, s in state.items()}
    if demand <= cap_fast:  # the greedy steps overshoot: a step taken early may not be needed once later,
        demand = _undo(cost, levels, state, demand, cap_fast)  # larger ones freed more; take back what fits
    if demand > cap_fast:
        raise PlanError(f"even with every table in {topo.tiers[1].name} the fast-tier buffers need "
                        f"{demand / fill / 1e9:.3f} GB of {fast}, more than the {cap_fast / fill / 1e9:.3f} GB usable")
    slow = topo.tiers[1].name
    slow_need = sum(s[3].get(slow, 0.0) for s in state.values())
    if slow_need > topo.usable(slow) * topo.world_size:
        raise PlanError(f"tables need {slow_need / 1e9:.3f} GB of {slow} after filling {fast}; the ranks have "
                        f"{topo.usable(slow) * topo.world_size / 1e9:.3f} GB "
                        f"(short by {(slow_need - topo.usable(slow) * topo.world_size) / 1e9:.3f} GB)")
    return {n: (s[0], s[1]) for n, s in state.items()}, greedy


def _undo(cost: CostModel, levels: dict[str, int], state: dict[str, tuple], demand: float, cap_fast: float,
          ) -> float:
    """Take back demotion steps while the fast tier still fits: each round, of the steps back up (one level)
    that fit, the one that saves the most lookup time per byte it takes. A table whose table-wise shard fits on
    no rank is counted here in its row-wise form over all ranks (a cached shard keeps buffers of its own on each
    rank, so the row-wise form takes more), so the packings keep the room the greedy steps gave them (f89 of
    `sharding.family` had no plan when the table-wise bytes were taken back). Returns the fast-tier demand."""
    fast = cost.topology.fast.name
    held = {n: _held(cost, n, i) for n, i in levels.items()}
    total = sum(held.values())
    heap: list[tuple[float, str, int]] = []

    def push(n: str) -> None:  # the step of table n back up one level, by its saving per byte (largest first)
        i = levels[n]
        if i > 0:
            more = _held(cost, n, i - 1) - held[n]
            gain = (state[n][2] - _level(cost, n, i - 1)[2]) / max(more, 1.0)
            if gain > 0:
                heapq.heappush(heap, (-gain, n, i - 1))

    for n in levels:
        push(n)
    while heap:  # the total only grows, so a step that does not fit now never will
        _, n, i = heapq.heappop(heap)
        more = _held(cost, n, i) - held[n]
        if total + more > cap_fast:
            continue
        up = _level(cost, n, i)
        demand += up[3].get(fast, 0.0) - state[n][3].get(fast, 0.0)
        total += more
        held[n] += more
        levels[n], state[n] = i, up
        push(n)
    return demand


def _held(cost: CostModel, name: str, i: int) -> float:
    """Fast-tier bytes of table `name` at cache level i over all ranks: table-wise where that fits a rank,
    else row-wise over all ranks."""
    topo = cost.topology
    fast = topo.fast.name
    tw = _level(cost, name, i)[3].get(fast, 0.0)
    if tw <= topo.usable(fast) or topo.world_size < 2:
        return tw
    t, w = cost.tables[name], topo.world_size
    tier, cf = (fast, 0.0) if CACHE_LEVELS[i] >= 1 else (topo.tiers[1].name, CACHE_LEVELS[i])
    rw = cost.shard_memory(t, ShardingType.ROW_WISE, -(-t.rows // w), t.dim, tier, cf).get(fast, 0.0)
    return max(tw, rw * w)


PROMOTE_WORK = 4_000  # `promote`: plan evaluations × tables per call (the evaluations shrink as tables grow)


def _levels_up(cost: CostModel, tp: TablePlan) -> list[tuple[str, float]]:
    """The (tier, cache fraction) pairs above table plan `tp`'s, nearest first, ending with the fast tier."""
    fast = cost.topology.fast.name
    (_, _, tier, fraction), _ = next(iter(tp.alike().items()))
    if tier == fast:
        return []
    up = [f for f in CACHE_LEVELS if f > fraction]
    return [(fast, 0.0) if f >= 1 else (tier, f) for f in reversed(up)]


def promote(cost: CostModel, trec: TorchRecCostModel, plan: ShardingPlan, evals: int, t_cap: float,
            ) -> ShardingPlan | None:
    """A second tiering pass, after placement: `assign_tiers` decides each table's tier before any shard is
    placed, on the ranks' summed capacity with a margin (`fill`), so a placed plan can leave room on the ranks
    that hold a slow-tier table. Each slow-tier table (most pooled lookup volume first) is tried at every higher
    cache level up to the fast tier, on the same ranks (a table-wise table also on each other rank), every rank's
    memory in every tier within its usable capacity (or not raised); its best change (least (ours, TorchRec's,
    summed work)) is applied when neither rating rises, TorchRec's stays at or below `t_cap`, neither model's
    summed work over ranks rises and something falls (one table alone rarely moves a rank maximum, so the summed
    work counts: it is what a later rebalancing can spread). The result is no worse than `plan` on either
    model. Passes repeat until one changes nothing or
    `evals` plan evaluations are spent: a count, not the clock, ends the step. Returns None if nothing changed."""
    topo = cost.topology
    if len(topo.tiers) < 2 or evals <= 0 or not any(_levels_up(cost, tp) for tp in plan.tables.values()):
        return None  # nothing in a slow tier: no memory maps built (most instances)
    tiers = [x.name for x in topo.tiers]
    cap = np.array([[topo.usable(x)] for x in tiers]) * (1 + 1e-12)
    mem = {n: _memory(cost, tp, tiers) for n, tp in plan.tables.items()}
    used = sum(mem.values())
    score = _score(cost, trec, plan)
    order = sorted(plan.tables, key=lambda n: -cost.tables[n].pooling.expected * cost.tables[n].dim)
    changed, spent, moved = True, 0, False
    while changed and spent < evals:
        changed = False
        for name in order:
            tp = plan.tables[name]
            up = _levels_up(cost, tp)
            if not up:
                continue
            t, st = cost.tables[name], tp.sharding_type
            where = [tp.ranks]
            if st == ShardingType.TABLE_WISE:
                where += [[r] for r in range(topo.world_size) if r != tp.ranks[0]]
            best: tuple[tuple[float, float, float, float], ShardingPlan, np.ndarray] | None = None
            for tier, fraction in up:
                for ranks in where:
                    if spent >= evals:
                        break
                    new = table_plan(t, st, ranks, tier, fraction)
                    m = _memory(cost, new, tiers)
                    after = used + m - mem[name]
                    if ((after > cap) & (after > used)).any():
                        continue
                    trial = ShardingPlan(plan.world_size, {**plan.tables, name: new}, optimizer=plan.optimizer)
                    spent += 1
                    got = _score(cost, trec, trial)
                    if _gain(got, score, t_cap) and (best is None or got < best[0]):
                        best = (got, trial, m)
            if best is not None:
                score, plan = best[0], best[1]
                used = used + best[2] - mem[name]
                mem[name] = best[2]
                changed = moved = True
    return plan if moved else None


def _score(cost: CostModel, trec: TorchRecCostModel, plan: ShardingPlan) -> tuple[float, float, float, float]:
    """(our cost, TorchRec's rating, our summed work over ranks and resources, TorchRec's summed perf)."""
    loads, _ = cost.resource_loads(plan)
    t = trec.rank_loads(plan)
    return cost.plan_cost(plan), float(t.max()), float(sum(v.sum() for v in loads.values())), float(t.sum())


def _gain(new: tuple[float, ...], old: tuple[float, ...], t_cap: float) -> bool:
    """Neither rating higher (TorchRec's within `t_cap` too), and less of something: a rating or summed work."""
    tol = 1 + 1e-12
    if new[0] > old[0] * tol or new[1] > old[1] * tol or new[1] > t_cap * tol or new[2] > old[2] * tol \
            or new[3] > old[3] * tol:
        return False
    return any(a < b * (1 - 1e-9) for a, b in zip(new, old, strict=True))
