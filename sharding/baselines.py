"""Baselines from the sharding literature: whole tables (table-wise) placed one by one.

Greedy: tables sorted by a cost key, descending, each onto the rank with the least summed key that still fits
(fastest tier first, then the next tier down, uncached). Round-robin: table i onto rank i mod W, or the next rank
with room. Random: a seeded uniform choice among the ranks with room.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from embedding.spec import TableSpec
from sharding.cost import CostModel
from sharding.layouts import table_plan
from sharding.packing import Bins, no_room
from sharding.plan import ShardingPlan, ShardingType
from sharding.topology import Topology
from sharding.workload import PlanWorkload

__all__ = ["GREEDY_KEYS", "greedy_plan", "round_robin_plan", "random_plan", "BASELINES"]

TW = ShardingType.TABLE_WISE

GREEDY_KEYS: dict[str, Callable[[TableSpec], float]] = {
    "size": lambda t: t.bytes,
    "lookups": lambda t: t.dim * t.pooling.expected,
    "size_lookups": lambda t: t.bytes * t.dim * t.pooling.expected,
}


def _memory(cost: CostModel, t: TableSpec, tier: str) -> dict[str, float]:
    return cost.shard_memory(t, TW, t.rows, t.dim, tier)


def _place(cost: CostModel, bins: Bins, t: TableSpec, choose: Callable[[np.ndarray], int]) -> tuple[int, str]:
    """Rank and tier for whole table `t`: the fastest tier with a fitting rank, rank picked by `choose`."""
    for tier in bins.tiers:
        mem = _memory(cost, t, tier)
        ok = bins.fits(mem)
        if ok.any():
            r = choose(ok)
            bins.add(r, 0.0, mem)
            return r, tier
    raise no_room(t.name, bins, _memory(cost, t, bins.tiers[-1]))


def _finish(placed: dict[str, tuple[int, str]], wl: PlanWorkload, topo: Topology, name: str) -> ShardingPlan:
    tables = {t.name: table_plan(t, TW, [placed[t.name][0]], placed[t.name][1]) for t in wl.tables}
    return ShardingPlan(topo.world_size, tables, optimizer=name)


def _cost(workload: PlanWorkload, topology: Topology, cost: CostModel | None) -> CostModel:
    """`cost` where it prices this workload on this topology (its memo of shard memory then serves every
    baseline: the optimizer passes its own), else a new model. Shard memory reads nothing else of a model."""
    if cost is not None and cost.workload is workload and cost.topology is topology:
        return cost
    return CostModel(workload, topology)


def greedy_plan(workload: PlanWorkload, topology: Topology, key: str, cost: CostModel | None = None) -> ShardingPlan:
    """Largest `key` first onto the least-loaded rank (load = summed key) that still fits."""
    f = GREEDY_KEYS[key]
    topology = topology.reserve_inputs(workload.ids_per_batch)
    cost, bins = _cost(workload, topology, cost), Bins(topology)
    placed: dict[str, tuple[int, str]] = {}
    for t in sorted(workload.tables, key=f, reverse=True):
        r, tier = _place(cost, bins, t, lambda ok: int(np.argmin(np.where(ok, bins.load, np.inf))))
        bins.load[r] += f(t)
        placed[t.name] = (r, tier)
    return _finish(placed, workload, topology, f"greedy_{key}")


def round_robin_plan(workload: PlanWorkload, topology: Topology, cost: CostModel | None = None) -> ShardingPlan:
    topology = topology.reserve_inputs(workload.ids_per_batch)
    cost, bins = _cost(workload, topology, cost), Bins(topology)
    w = topology.world_size
    placed = {}
    for i, t in enumerate(workload.tables):
        def choose(ok: np.ndarray, i: int = i) -> int:
            order = (np.arange(w) + i) % w
            return int(order[np.argmax(ok[order])])
        placed[t.name] = _place(cost, bins, t, choose)
    return _finish(placed, workload, topology, "round_robin")


def random_plan(workload: PlanWorkload, topology: Topology, seed: int = 0, cost: CostModel | None = None,
                ) -> ShardingPlan:
    topology = topology.reserve_inputs(workload.ids_per_batch)
    cost, bins = _cost(workload, topology, cost), Bins(topology)
    rng = np.random.default_rng(seed)
    placed = {t.name: _place(cost, bins, t, lambda ok: int(rng.choice(np.flatnonzero(ok))))
              for t in workload.tables}
    return _finish(placed, workload, topology, "random")


# each takes an optional `cost=` (a model of the same workload and reserved topology whose memo it may use)
BASELINES: dict[str, Callable[..., ShardingPlan]] = {
    "greedy_size": lambda wl, tp, cost=None: greedy_plan(wl, tp, "size", cost),
    "greedy_lookups": lambda wl, tp, cost=None: greedy_plan(wl, tp, "lookups", cost),
    "greedy_size_lookups": lambda wl, tp, cost=None: greedy_plan(wl, tp, "size_lookups", cost),
    "round_robin": lambda wl, tp, cost=None: round_robin_plan(wl, tp, cost),
    "random": lambda wl, tp, cost=None: random_plan(wl, tp, 0, cost),
}
