"""Which tables keep their rows in the fastest tier, which are cached from the next tier, and how much.

When the tables do not fit the fastest tier of all ranks together, rows are demoted in steps of cache fraction
(1 → 0.5 → 0.2 → 0.1 → 0.05 → 0, i.e. uncached), always taking the step with the smallest added lookup time per
byte freed, until the fast-tier demand fits `fill` of its capacity. Miss rates come from the cost model (measured
miss-ratio curves when given, the analytic Zipf hot-set estimate otherwise).
"""
from __future__ import annotations

import heapq

from sharding.cost import CostModel
from sharding.plan import ShardingType
from sharding.workload import PlanError

__all__ = ["assign_tiers", "CACHE_LEVELS"]

CACHE_LEVELS = (1.0, 0.5, 0.2, 0.1, 0.05, 0.0)  # share of a table's rows held in the fastest tier
TW = ShardingType.TABLE_WISE


def _level(cost: CostModel, name: str, i: int) -> tuple[str, float, float, dict[str, float]]:
    """(tier, cache fraction, TW cost, TW memory) of table `name` at cache level i."""
    t, topo = cost.tables[name], cost.topology
    f = CACHE_LEVELS[i]
    tier, cf = (topo.fast.name, 0.0) if f >= 1 else (topo.tiers[1].name, f)
    c = cost.shard_cost(t, TW, t.rows, t.dim, tier, cf).total
    return tier, cf, c, cost.shard_memory(t, TW, t.rows, t.dim, tier, cf)


def assign_tiers(cost: CostModel, fill: float = 0.92) -> dict[str, tuple[str, float]]:
    """Table name -> (tier, cache fraction)."""
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
    state = {n: _level(cost, n, 0) for n in names}
    demand = sum(s[3].get(fast, 0.0) for s in state.values())
    if demand <= cap_fast:
        return {n: (fast, 0.0) for n in names}
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
    if demand > cap_fast:
        raise PlanError(f"even with every table in {topo.tiers[1].name} the fast-tier buffers need "
                        f"{demand / fill / 1e9:.3f} GB of {fast}, more than the {cap_fast / fill / 1e9:.3f} GB usable")
    slow = topo.tiers[1].name
    slow_need = sum(s[3].get(slow, 0.0) for s in state.values())
    if slow_need > topo.usable(slow) * topo.world_size:
        raise PlanError(f"tables need {slow_need / 1e9:.3f} GB of {slow} after filling {fast}; the ranks have "
                        f"{topo.usable(slow) * topo.world_size / 1e9:.3f} GB "
                        f"(short by {(slow_need - topo.usable(slow) * topo.world_size) / 1e9:.3f} GB)")
    return {n: (s[0], s[1]) for n, s in state.items()}
