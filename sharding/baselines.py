"""Baselines from the sharding literature: whole tables (table-wise) placed one by one.

Greedy: tables sorted by a cost key, descending, each onto the rank with the least summed key that still fits
(fastest tier first, then the next tier down, uncached). Round-robin: table i onto rank i mod W, or the next rank
with room. Random: a seeded uniform choice among the ranks with room.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from embedding.spec import TableSpec
from sharding.baseline_kernel import fit_ranks, place_tables
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


def _first_from(ok: np.ndarray, i: int) -> int:
    """The first rank with room from rank i on, cyclically (round-robin)."""
    order = (np.arange(len(ok)) + i) % len(ok)
    return int(order[np.argmax(ok[order])])


def _least(bins: Bins, ok: np.ndarray) -> int:
    """The least-loaded rank with room, the first on ties (greedy)."""
    return int(np.argmin(np.where(ok, bins.load, np.inf)))


def _tier0_arrays(cost: CostModel, bins: Bins, tables: list[TableSpec]) -> tuple[np.ndarray, np.ndarray]:
    """Each table's bytes per tier placed whole in the fastest tier (tables × tiers) and the tiers' capacities."""
    tier0, n = bins.tiers[0], len(tables)
    mems = np.array([[m.get(x, 0.0) for x in bins.tiers] for m in (_memory(cost, t, tier0) for t in tables)],
                    dtype=np.float64).reshape(n, len(bins.tiers))
    return mems, np.array([bins.cap[x] for x in bins.tiers], dtype=np.float64)


def _place_all(cost: CostModel, bins: Bins, tables: list[TableSpec], keys: list[float], round_robin: bool,
               ) -> dict[str, tuple[int, str]]:
    """`_place` of each table in order (greedy: `keys[i]` added to the rank's load after; `round_robin`: the first
    rank with room from i on), the tables fitting in the fastest tier in one compiled call
    (`baseline_kernel.place_tables`), any other by `_place` itself (tests check the plans are the same)."""
    tier0, n = bins.tiers[0], len(tables)
    mems, cap = _tier0_arrays(cost, bins, tables)
    key, ranks = np.array(keys, dtype=np.float64), np.full(n, -1, dtype=np.int64)
    placed: dict[str, tuple[int, str]] = {}
    i = 0
    while i < n:
        used = np.stack([bins.used[x] for x in bins.tiers])
        stop = place_tables(i, mems, cap, used, bins.load, key, round_robin, ranks)
        for j, x in enumerate(bins.tiers):
            bins.used[x][:] = used[j]
        placed.update((tables[j].name, (r, tier0)) for j, r in
                      zip(range(i, stop), ranks[i:stop].tolist(), strict=True))
        if stop == n:
            break
        t = tables[stop]  # no room in the fastest tier: a slower one, as `_place`
        r, tier = _place(cost, bins, t, partial(_first_from, i=stop) if round_robin else partial(_least, bins))
        bins.load[r] += keys[stop]
        placed[t.name] = (r, tier)
        i = stop + 1
    return placed


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
    tables = sorted(workload.tables, key=f, reverse=True)
    return _finish(_place_all(cost, bins, tables, [f(t) for t in tables], False), workload, topology,
                   f"greedy_{key}")


def _greedy_reference(workload: PlanWorkload, topology: Topology, key: str, cost: CostModel | None = None,
                      ) -> ShardingPlan:
    """`greedy_plan` one `_place` at a time (the reference `_place_all` is checked against)."""
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
    return _finish(_place_all(cost, bins, list(workload.tables), [0.0] * len(workload.tables), True), workload,
                   topology, "round_robin")


def _round_robin_reference(workload: PlanWorkload, topology: Topology, cost: CostModel | None = None,
                           ) -> ShardingPlan:
    """`round_robin_plan` one `_place` at a time (the reference `_place_all` is checked against)."""
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


def _place_random(cost: CostModel, bins: Bins, tables: list[TableSpec], rng: np.random.Generator,
                  ) -> dict[str, tuple[int, str]]:
    """`_place` of each table in order, a uniform draw among the ranks with room: in the fastest tier those ranks
    come from the compiled `fit_ranks` (no dict, mask or `Bins.add` per table: `_place` was 30 µs a table on
    random:1000:1) and the draw is `rng.choice`'s own (`Generator.choice` of k items with replacement and no p
    draws `integers(0, k)`, int64: 1 µs, not 7); a table with no room there is placed by `_place` itself (tests
    check the plans are the same as `_random_reference`'s, and the draws the same as `rng.choice`'s)."""
    tier0 = bins.tiers[0]
    mems, cap = _tier0_arrays(cost, bins, tables)
    used, ranks = np.stack([bins.used[x] for x in bins.tiers]), np.empty(len(bins.load), np.int64)
    placed: dict[str, tuple[int, str]] = {}
    for i, t in enumerate(tables):
        k = fit_ranks(i, mems, cap, used, ranks)
        if k:
            r = int(ranks[rng.integers(0, k)])
            used[:, r] += mems[i]  # `Bins.add` (the load is not read)
            placed[t.name] = (r, tier0)
            continue
        for j, x in enumerate(bins.tiers):
            bins.used[x][:] = used[j]
        placed[t.name] = _place(cost, bins, t, lambda ok: int(rng.choice(np.flatnonzero(ok))))
        used = np.stack([bins.used[x] for x in bins.tiers])
    return placed


def random_plan(workload: PlanWorkload, topology: Topology, seed: int = 0, cost: CostModel | None = None,
                ) -> ShardingPlan:
    topology = topology.reserve_inputs(workload.ids_per_batch)
    cost, bins = _cost(workload, topology, cost), Bins(topology)
    rng = np.random.default_rng(seed)
    return _finish(_place_random(cost, bins, list(workload.tables), rng), workload, topology, "random")


def _random_reference(workload: PlanWorkload, topology: Topology, seed: int = 0, cost: CostModel | None = None,
                      ) -> ShardingPlan:
    """`random_plan` one `_place` at a time (the reference `_place_random` is checked against)."""
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
