"""Our sharding optimizer: tiering, splitting rules, LPT packing and a local search of moves and swaps.

1. Tiers (`sharding.tiers`): tables stay in the fastest tier unless the fast tier is short; then the coldest
   bytes (least added time per byte) are demoted to UVM with a cache fraction.
2. Splitting: tiny tables whose replicas cost less in total go data-parallel; a table hotter than θ × (average
   rank load) is cut column-wise into the fewest equal blocks below that; one too big for μ of a rank's memory
   is cut column-wise, else table-row-wise over a host, else row-wise over all ranks. Several (θ, μ) are tried.
3. LPT: fixed shards (RW, DP) first, then table-row-wise groups onto the least-loaded host, then pieces by
   descending cost onto the least-loaded rank with room.
4. Local search: move or swap a piece off the slowest rank while that lowers the maximum.
5. The greedy baselines' plans are also polished by step 4; the best plan by the full cost model wins, so ours
   is never worse than a greedy baseline. If nothing packs, every table goes row-wise over all ranks, which
   spreads memory evenly: when even that does not fit, no plan does (up to buffers and rounding).
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from embedding.spec import TableSpec
from sharding.baselines import BASELINES
from sharding.cost import CostModel, MissCurve
from sharding.layouts import column_splits, row_ranges, table_plan
from sharding.packing import Bins, no_room
from sharding.plan import ShardingPlan, ShardingType
from sharding.tiers import assign_tiers
from sharding.topology import Topology
from sharding.workload import PlanError, PlanWorkload

__all__ = ["optimize", "OptimizeStats"]

TW, CW, RW, TWRW, DP = (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.ROW_WISE,
                        ShardingType.TABLE_ROW_WISE, ShardingType.DATA_PARALLEL)


@dataclass
class OptimizeStats:
    candidates: list[tuple[str, float]] = field(default_factory=list)  # (label, cost s) of each tried plan
    chosen: str = ""
    wall_s: float = 0.0


@dataclass
class _Piece:
    table: str
    cost: float
    mem: dict[str, float]
    rank: int = -1


class _NoFit(Exception):
    pass


class _Builder:
    """One packing attempt for fixed thresholds."""

    def __init__(self, cost: CostModel, tiers: dict[str, tuple[str, float]]) -> None:
        self.cost, self.tiers, self.topo = cost, tiers, cost.topology

    def _shard(self, t: TableSpec, st: ShardingType, rows: int, cols: int) -> tuple[float, dict[str, float]]:
        tier, cf = self.tiers[t.name]
        c = self.cost.shard_cost(t, st, rows, cols, tier, cf).total
        return c, self.cost.shard_memory(t, st, rows, cols, tier, cf)

    allow_dp = True

    def choose(self, t: TableSpec, theta: float, mu: float, avg: float) -> tuple[ShardingType, int]:
        """Sharding type and piece count for table t."""
        topo, w, h = self.topo, self.topo.world_size, min(self.topo.ranks_per_host, self.topo.world_size)
        tier, _ = self.tiers[t.name]
        c, mem = self._shard(t, TW, t.rows, t.dim)

        def fits(m: dict[str, float]) -> bool:
            return all(b <= mu * topo.usable(k) for k, b in m.items())

        if self.allow_dp and w > 1 and tier == topo.fast.name:
            dc, dm = self._shard(t, DP, t.rows, t.dim)
            if dc * w < c and dm[tier] * w <= 0.01 * topo.usable(tier):
                return DP, w
        if mu > 0 and c <= theta * avg and fits(mem):
            return TW, 1
        if mu > 0:
            for k in column_splits(t.dim):
                if k > w:
                    break
                pc, pm = self._shard(t, CW, t.rows, t.dim // k)
                if pc <= theta * avg and fits(pm):
                    return CW, k
            if h > 1 and fits(self._shard(t, TWRW, row_ranges(t.rows, h)[0][1], t.dim)[1]):
                return TWRW, h
        return RW, w

    def pack(self, theta: float, mu: float, avg: float) -> ShardingPlan:
        topo, cost = self.topo, self.cost
        w, h = topo.world_size, min(topo.ranks_per_host, topo.world_size)
        bins, pieces, groups = Bins(topo), [], []
        layout: dict[str, tuple[ShardingType, list[int]]] = {}
        for t in cost.workload.tables:
            st, k = self.choose(t, theta, mu, avg)
            if st in (DP, RW):
                for r, (a, b) in enumerate(row_ranges(t.rows, w) if st == RW else [(0, t.rows)] * w):
                    c, m = self._shard(t, st, b - a, t.dim)
                    bins.add(r, c, m)
                layout[t.name] = (st, list(range(w)))
            elif st == TWRW:
                shards = [self._shard(t, st, b - a, t.dim) for a, b in row_ranges(t.rows, h)]
                groups.append((sum(c for c, _ in shards), t.name, shards))
            else:
                c, m = self._shard(t, st, t.rows, t.dim // k)
                pieces.extend(_Piece(t.name, c, m) for _ in range(k))
                layout[t.name] = (st, [])
        if any(bins.used[k].max() > bins.cap[k] for k in bins.tiers):
            raise _NoFit("row-wise and data-parallel shards alone overfill a rank")
        for _, name, shards in sorted(groups, reverse=True):
            best, best_load = -1, np.inf
            for host in range(topo.num_hosts):
                ranks = range(host * h, host * h + h)
                if all(bins.fits_rank(r, m) for r, (_, m) in zip(ranks, shards, strict=False)):
                    load = max(bins.load[r] + c for r, (c, _) in zip(ranks, shards, strict=False))
                    if load < best_load:
                        best, best_load = host, load
            if best < 0:
                raise _NoFit(name)
            for r, (c, m) in zip(range(best * h, best * h + h), shards, strict=False):
                bins.add(r, c, m)
            layout[name] = (TWRW, list(range(best * h, best * h + h)))
        for p in sorted(pieces, key=lambda p: -p.cost):
            r = bins.least_loaded(p.mem)
            if r < 0:
                raise _NoFit(p.table)
            bins.add(r, p.cost, p.mem)
            p.rank = r
        return self.finish(bins, pieces, layout)

    def finish(self, bins: Bins, pieces: list[_Piece], layout: dict, deadline: float | None = None,
               ) -> ShardingPlan:
        if deadline is not None:
            _local_search(bins, pieces, deadline)
        for p in pieces:
            layout[p.table][1].append(p.rank)
        tables = {}
        for t in self.cost.workload.tables:
            st, ranks = layout[t.name]
            tier, cf = self.tiers[t.name]
            tables[t.name] = table_plan(t, st, ranks, tier, cf)
        return ShardingPlan(self.topo.world_size, tables, optimizer="ours")


def _local_search(bins: Bins, pieces: list[_Piece], deadline: float, max_iters: int = 20000) -> None:
    """Move or swap pieces off the most loaded rank while the maximum load drops."""
    if not pieces:
        return
    costs = np.array([p.cost for p in pieces])
    ranks = np.array([p.rank for p in pieces])
    load = bins.load
    for it in range(max_iters):
        if it % 16 == 0 and time.perf_counter() > deadline:
            break
        r = int(np.argmax(load))
        top = load[r]
        on_r = np.flatnonzero(ranks == r)
        done = False
        for i in on_r[np.argsort(-costs[on_r])]:
            p = pieces[i]
            ok = bins.fits(p.mem)
            ok[r] = False
            cand = np.where(ok, load + costs[i], np.inf)
            s = int(np.argmin(cand))
            if cand[s] < top * (1 - 1e-9):
                bins.remove(r, p.cost, p.mem)
                bins.add(s, p.cost, p.mem)
                ranks[i] = p.rank = s
                done = True
                break
        if done:
            continue
        for i in on_r[np.argsort(-costs[on_r])]:
            delta = costs[i] - costs
            new_other = load[ranks] + delta
            new_r = top - delta
            obj = np.maximum(new_other, new_r)
            obj[(delta <= 0) | (ranks == r)] = np.inf
            for j in np.argsort(obj)[:8]:
                if obj[j] >= top * (1 - 1e-9):
                    break
                s, pi, pj = int(ranks[j]), pieces[i], pieces[j]
                bins.remove(r, pi.cost, pi.mem)
                bins.remove(s, pj.cost, pj.mem)
                if bins.fits_rank(s, pi.mem) and bins.fits_rank(r, pj.mem):
                    bins.add(s, pi.cost, pi.mem)
                    bins.add(r, pj.cost, pj.mem)
                    ranks[i], ranks[j] = pi.rank, pj.rank = s, r
                    done = True
                    break
                bins.add(r, pi.cost, pi.mem)
                bins.add(s, pj.cost, pj.mem)
            if done:
                break
        if not done:
            break


def _polish(builder: _Builder, plan: ShardingPlan, deadline: float) -> ShardingPlan:
    """Local search on a table-wise plan (a baseline's), keeping each table's tier."""
    cost, topo = builder.cost, builder.topo
    bins, pieces, layout = Bins(topo), [], {}
    for name, tp in plan.tables.items():
        s = tp.shards[0]
        t = cost.tables[name]
        c = cost.shard_cost(t, TW, t.rows, t.dim, s.tier, s.cache_fraction).total
        m = cost.shard_memory(t, TW, t.rows, t.dim, s.tier, s.cache_fraction)
        bins.add(s.rank, c, m)
        pieces.append(_Piece(name, c, m, s.rank))
        layout[name] = (TW, [])
    saved = builder.tiers
    builder.tiers = {n: (tp.shards[0].tier, tp.shards[0].cache_fraction) for n, tp in plan.tables.items()}
    try:
        return builder.finish(bins, pieces, layout, deadline)
    finally:
        builder.tiers = saved


def optimize(workload: PlanWorkload, topology: Topology, miss_curves: Mapping[str, MissCurve] | None = None,
             time_limit: float = 0.8, stats: OptimizeStats | None = None) -> ShardingPlan:
    """Plan `workload` on `topology`; raises `PlanError` (naming the table and shortfall) when no plan exists."""
    start = time.perf_counter()
    deadline = start + time_limit
    stats = stats if stats is not None else OptimizeStats()
    cost = CostModel(workload, topology, miss_curves)
    tiers = assign_tiers(cost)
    builder = _Builder(cost, tiers)
    avg = sum(builder._shard(t, TW, t.rows, t.dim)[0] for t in workload.tables) / topology.world_size
    found: list[tuple[float, str, ShardingPlan]] = []
    attempts = [(theta, mu, dp) for mu in (0.5, 0.25, 0.1) for theta in (1.0, 0.5, 0.25) for dp in (True, False)]
    for theta, mu, dp in attempts:
        if found and time.perf_counter() > start + 0.45 * time_limit:
            break
        builder.allow_dp = dp
        try:
            plan = builder.pack(theta, mu, avg)
        except _NoFit:
            continue
        plan = _relocal(builder, plan, start + (0.45 * time_limit if not found else 0.55 * time_limit))
        found.append((cost.plan_cost(plan), f"lpt θ={theta} μ={mu}{'' if dp else ' no-DP'}", plan))
    builder.allow_dp = True
    for name in ("greedy_size_lookups", "greedy_lookups", "greedy_size"):
        if time.perf_counter() > deadline and found:
            break
        try:
            base = BASELINES[name](workload, topology)
        except PlanError:
            continue
        plan = _polish(builder, base, min(deadline - 0.1 * time_limit, time.perf_counter() + 0.08 * time_limit))
        found.append((cost.plan_cost(plan), f"{name}+local", plan))
        found.append((cost.plan_cost(base), name, base))
    if not found:
        try:
            found.append((0.0, "all row-wise", builder.pack(1.0, 0.0, avg)))
        except _NoFit:
            need = {k: 0.0 for k in (t.name for t in topology.tiers)}
            for t in workload.tables:
                for k, v in builder._shard(t, RW, row_ranges(t.rows, topology.world_size)[0][1], t.dim)[1].items():
                    need[k] += v
            bins = Bins(topology)
            raise no_room(max(workload.tables, key=lambda t: t.bytes).name, bins, need) from None
    found.sort(key=lambda x: x[0])
    stats.candidates = [(label, c) for c, label, _ in found]
    stats.chosen = found[0][1]
    stats.wall_s = time.perf_counter() - start
    best = found[0][2]
    best.optimizer = "ours"
    return best


def _relocal(builder: _Builder, plan: ShardingPlan, deadline: float) -> ShardingPlan:
    """Re-run the local search over the movable (TW, CW) pieces of a packed plan."""
    cost, topo = builder.cost, builder.topo
    bins, pieces, layout = Bins(topo), [], {}
    for name, tp in plan.tables.items():
        t = cost.tables[name]
        movable = tp.sharding_type in (TW, CW)
        layout[name] = (tp.sharding_type, [] if movable else [s.rank for s in tp.shards])
        for s in tp.shards:
            c = cost.shard_cost(t, tp.sharding_type, s.rows, s.cols, s.tier, s.cache_fraction).total
            m = cost.shard_memory(t, tp.sharding_type, s.rows, s.cols, s.tier, s.cache_fraction)
            bins.add(s.rank, c, m)
            if movable:
                pieces.append(_Piece(name, c, m, s.rank))
    return builder.finish(bins, pieces, layout, deadline)
