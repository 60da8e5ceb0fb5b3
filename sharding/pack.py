"""One packing attempt of our optimizer: pick each table's sharding type, place the shards, search locally.
Shards are priced on the step's resources by `sharding.search.Resources` (both models, each over its bound)."""
from __future__ import annotations

import numpy as np

from embedding.spec import TableSpec
from sharding.layouts import column_splits, row_ranges, row_sizes, table_plan
from sharding.plan import ShardingPlan, ShardingType
from sharding.search import Loads, Piece, Resources, best_of, local_search

__all__ = ["Builder", "NoFit", "repolish", "Option"]

TW, CW, RW, TWRW, DP = (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.ROW_WISE,
                        ShardingType.TABLE_ROW_WISE, ShardingType.DATA_PARALLEL)
Option = tuple[ShardingType, int, np.ndarray, float]  # (type, pieces, summed (ours, TorchRec) work, largest piece)


class NoFit(Exception):
    """This attempt's shards do not fit; another attempt (or the all-row-wise fallback) may."""


class Builder:
    """Packs the workload for fixed thresholds; `tiers` maps a table to (tier, cache fraction). `iters` is the
    local search's iteration budget per packing (it, not the clock, decides the plan)."""

    rw = RW

    def __init__(self, res: Resources, tiers: dict[str, tuple[str, float]], iters: int = 2000) -> None:
        self.res, self.tiers, self.iters = res, tiers, iters
        self.cost = res.cost
        self._options: dict[tuple[str, float, bool], list[Option]] = {}
        self.topo = res.cost.topology
        tw = np.array([res.summary(self.shard(t, TW, t.rows, t.dim)[0]) for t in self.cost.workload.tables])
        self.avg = float((tw.sum(axis=0) / self.topo.world_size).max())  # average rank load, larger component

    def shard(self, t: TableSpec, st: ShardingType, rows: int, cols: int) -> tuple[np.ndarray, dict[str, float]]:
        return self.res.shard(t, st, rows, cols, *self.tiers[t.name])

    def options(self, t: TableSpec, mu: float, allow_dp: bool) -> list[Option]:
        """Feasible options of table t; a piece must fit μ of a rank (RW always qualifies: it is the fallback that
        spreads memory evenly)."""
        topo = self.topo

        def fits(m: dict[str, float]) -> bool:
            return all(b <= mu * topo.usable(k) for k, b in m.items())

        key = (t.name, mu, allow_dp)
        if key not in self._options:
            self._options[key] = self._enumerate(t, mu, allow_dp, fits)
        return self._options[key]

    def _enumerate(self, t: TableSpec, mu: float, allow_dp: bool, fits) -> list[Option]:  # noqa: ANN001
        topo, w, h = self.topo, self.topo.world_size, min(self.topo.ranks_per_host, self.topo.world_size)
        tier, _ = self.tiers[t.name]
        sm = self.res.summary
        out: list[Option] = []
        if allow_dp and w > 1 and tier == topo.fast.name:
            dv, dm = self.shard(t, DP, t.rows, t.dim)
            if dm[tier] * w <= 0.01 * topo.usable(tier):
                out.append((DP, w, sm(dv) * w, float(sm(dv).max())))
        if mu > 0:
            for k in [1] + [k for k in column_splits(t.dim) if k <= w]:
                v, m = self.shard(t, TW if k == 1 else CW, t.rows, t.dim // k)
                if fits(m):
                    out.append((TW if k == 1 else CW, k, sm(v) * k, float(sm(v).max())))
            if h > 1 and topo.num_hosts > 1:
                shards = [(self.shard(t, TWRW, r, t.dim), k) for r, k in row_sizes(t.rows, h)]
                if fits(shards[0][0][1]):
                    out.append((TWRW, h, sum(sm(v) * k for (v, _), k in shards),
                                max(float(sm(v).max()) for (v, _), _ in shards)))
        if w > 1 or not out:
            shards = [(self.shard(t, RW, r, t.dim), k) for r, k in row_sizes(t.rows, w)]
            out.append((RW, w, sum(sm(v) * k for (v, _), k in shards), max(float(sm(v).max()) for (v, _), _ in shards)))
        return out

    def choose(self, t: TableSpec, theta: float, mu: float, allow_dp: bool, least_work: bool = False,
               twrw_first: bool = False) -> tuple[ShardingType, int]:
        """Sharding type and piece count for table t. Split mode: the first of DP (if replicas cost less in
        total), TW, CW by increasing k whose piece scores ≤ θ × average rank load, then TWRW, then RW
        (`twrw_first`: TWRW before CW: a column block still receives all of a table's ids).
        Least-work mode: among options whose pieces score ≤ θ × average, the least total work (as TorchRec's
        proposers rank options), else the option with the smallest piece."""
        opts = self.options(t, mu, allow_dp)
        limit = theta * self.avg
        if least_work:
            ok = [o for o in opts if o[3] <= limit]
            pick = min(ok, key=lambda o: float(o[2].max())) if ok else min(opts, key=lambda o: o[3])
            return pick[0], pick[1]
        by_type = {(o[0], o[1]): o for o in opts}
        tw = by_type.get((TW, 1))
        dp = [o for o in opts if o[0] == DP]
        if dp and tw is not None and np.all(dp[0][2] < tw[2]):
            return DP, dp[0][1]
        if tw is not None and tw[3] <= limit:
            return TW, 1
        order = (TWRW, CW) if twrw_first else (CW, TWRW)
        for st in order:
            for o in opts:
                if o[0] == st and (o[3] <= limit or st == TWRW):
                    return o[0], o[1]
        return RW, self.topo.world_size

    def pack(self, theta: float, mu: float, allow_dp: bool, least_work: bool = False,
             deadline: float = float("inf"), twrw_first: bool = False) -> ShardingPlan:
        topo = self.topo
        w, h = topo.world_size, min(topo.ranks_per_host, topo.world_size)
        choice = {t.name: self.choose(t, theta, mu, allow_dp, least_work, twrw_first) for t in self.cost.workload.tables}
        state = Loads(self.res, topo, {st for st, _ in choice.values()})
        pieces, groups = [], []
        layout: dict[str, tuple[ShardingType, list[int]]] = {}
        for t in self.cost.workload.tables:
            st, k = choice[t.name]
            if st in (DP, RW):
                for r, (a, b) in enumerate(row_ranges(t.rows, w) if st == RW else [(0, t.rows)] * w):
                    state.put(r, st, *self.shard(t, st, b - a, t.dim))
                layout[t.name] = (st, list(range(w)))
            elif st == TWRW:
                shards = [self.shard(t, st, b - a, t.dim) for a, b in row_ranges(t.rows, h)]
                groups.append((float(sum(self.res.summary(v) for v, _ in shards).max()), t.name, shards))
            else:
                v, m = self.shard(t, st, t.rows, t.dim // k)
                pieces.extend(Piece(t.name, st, v, m) for _ in range(k))
                layout[t.name] = (st, [])
        if any(state.used[k].max() > state.cap[k] for k in state.tiers):
            raise NoFit("row-wise and data-parallel shards alone overfill a rank")
        for _, name, shards in sorted(groups, key=lambda g: -g[0]):
            best, best_key = -1, (np.inf, np.inf)
            for host in range(topo.num_hosts):
                ranks = range(host * h, host * h + h)
                if all(state.fits_rank(r, m) for r, (_, m) in zip(ranks, shards, strict=True)):
                    for r, (v, m) in zip(ranks, shards, strict=True):
                        state.put(r, TWRW, v, m)
                    key = state.objective()
                    for r, (v, m) in zip(ranks, shards, strict=True):
                        state.take(r, TWRW, v, m)
                    if key < best_key:
                        best, best_key = host, key
            if best < 0:
                raise NoFit(name)
            for r, (v, m) in zip(range(best * h, best * h + h), shards, strict=True):
                state.put(r, TWRW, v, m)
            layout[name] = (TWRW, list(range(best * h, best * h + h)))
        self.place(state, pieces)
        return self.finish(state, pieces, layout, deadline)

    def place(self, state: Loads, pieces: list[Piece]) -> None:
        """Greedy: pieces by descending dominant share (largest v_k / row total of L) onto the rank minimising
        (J, secondary, ΔΣL²) after adding them."""
        if not pieces:
            return
        vecs = np.array([p.vec for p in pieces])
        total = vecs.sum(axis=0) + state.L.sum(axis=1)
        share = (vecs / np.where(total > 0, total, 1.0)).max(axis=1)
        taken: dict[str, list[int]] = {}
        for i in np.argsort(-share, kind="stable"):
            p = pieces[i]
            ok = state.fits(p.mem)
            ok[taken.setdefault(p.table, [])] = False
            j, s, q = state.place_scores(p.gi, p.vec)
            r = best_of(j, s, q, ok)
            if r < 0:
                raise NoFit(p.table)
            state.put(r, p.st, p.vec, p.mem)
            p.rank = r
            taken[p.table].append(r)

    def finish(self, state: Loads, pieces: list[Piece], layout: dict[str, tuple[ShardingType, list[int]]],
               deadline: float) -> ShardingPlan:
        local_search(state, pieces, self.iters, deadline)
        for p in pieces:
            layout[p.table][1].append(p.rank)
        tables = {}
        for t in self.cost.workload.tables:
            st, ranks = layout[t.name]
            tables[t.name] = table_plan(t, st, ranks, *self.tiers[t.name])
        return ShardingPlan(self.topo.world_size, tables, optimizer="ours")


def repolish(builder: Builder, plan: ShardingPlan, deadline: float = float("inf")) -> ShardingPlan:
    """Local search over the movable (TW, CW) shards of any plan, keeping types and tiers."""
    topo, cost = builder.topo, builder.cost
    state = Loads(builder.res, topo, {tp.sharding_type for tp in plan.tables.values()})
    pieces, layout = [], {}
    saved = builder.tiers
    builder.tiers = {n: (tp.shards[0].tier, tp.shards[0].cache_fraction) for n, tp in plan.tables.items()}
    try:
        for name, tp in plan.tables.items():
            t = cost.tables[name]
            movable = tp.sharding_type in (TW, CW)
            layout[name] = (tp.sharding_type, [] if movable else [s.rank for s in tp.shards])
            for s in tp.shards:
                v, m = builder.shard(t, tp.sharding_type, s.rows, s.cols)
                state.put(s.rank, tp.sharding_type, v, m)
                if movable:
                    pieces.append(Piece(name, tp.sharding_type, v, m, s.rank))
        return builder.finish(state, pieces, layout, deadline)
    finally:
        builder.tiers = saved

