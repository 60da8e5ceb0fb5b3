"""What keeping a hot table whole costs at least, and the lower bound split into those cases.

`sharding.bound_cut` writes out one rank: the one holding the hottest table if that table is whole (TW, or CW / RW
in one block: `bound_cut.whole_options`). A plan
can avoid that rank's load by splitting the table, and then the next hottest table decides. Splitting on the
hottest tables' choice makes that exact, one table at a time:
  case i:  h_1 … h_{i−1} are cut, h_i is whole  →  the cut MILP with h_i's other options closed (its rank written out)
  leaf:    none of h_1 … h_depth is whole      →  the cut MILP with their whole options closed
Every plan falls in exactly one case, so the least case value is a lower bound on every plan's step
(`case_split_bound`), never below the plain cut, whose MILP is the union of the cases. A case's own value is a
bound on every plan that keeps its table whole (`whole_table_bounds`), whatever else it does: it says what that
choice alone costs, which a plan's ratio to the overall bound does not. `types_bound` fixes every table's choice
to a plan's: a bound on every plan with the same sharding types, so a plan's cost over it is what its placement
leaves, and that bound over the overall one is what its types cost.

Measured on the benchmark sets (`benchmarks/bound_study.py`, results/validation/bound_study_dev_2core_20261130.md):
the split lifts random500/64's bound by 0.43% at depth 16 and t856/128's by 0.1% at depth 8, at 1–3 s per case,
so `lower_bound` does not use it; the per-table values are the useful part.
"""
from __future__ import annotations

import copy

import numpy as np

from sharding.bound_cut import NODE_LIMIT, hot_rank_cut, whole_options
from sharding.bounds import _build, _option_shards, _Relax, _tier_penalty
from sharding.cost import CostModel
from sharding.plan import ShardingPlan, ShardingType

__all__ = ["hot_tables", "whole_table_bounds", "case_split_bound", "types_bound"]


def _relax(cost: CostModel) -> _Relax:
    return _build(cost, _tier_penalty(cost))


def _hottest_open(r: _Relax) -> int | None:
    """The table-wise option of most compute among those still open (None: all closed)."""
    tw = np.flatnonzero((r.og == r.groups.index(ShardingType.TABLE_WISE)) & (r.hi[:r.n_x] > 0))
    return int(tw[np.argmax(r.T[tw, 0] + r.T[tw, 1])]) if len(tw) else None


def _kept_whole(r: _Relax, opt: int, whole: bool) -> _Relax:
    """`r` with table-wise option `opt`'s table kept whole on one rank (its options that cut it closed:
    `bound_cut.whole_options`; TW, CW in one block, RW in one block stay open), or (`whole` False) cut."""
    out = copy.copy(r)
    out.hi = r.hi.copy()
    mine = np.flatnonzero(r.ot[:r.n_x] == r.ot[opt])
    out.hi[mine[whole_options(r)[mine] != whole]] = 0.0
    return out


def hot_tables(cost: CostModel, n: int) -> list[str]:
    """The n tables whose table-wise shard has the most forward + backward compute, hottest first."""
    r = _relax(cost)
    tw = np.flatnonzero(r.og == r.groups.index(ShardingType.TABLE_WISE))
    order = tw[np.argsort(-(r.T[tw, 0] + r.T[tw, 1]), kind="stable")][:n]
    return [cost.workload.tables[int(r.ot[o])].name for o in order]


def whole_table_bounds(cost: CostModel, tables: list[str], node_limit: int = NODE_LIMIT,
                       cut: float | None = None) -> dict[str, float]:
    """Per table: a lower bound (s) on the step of every plan that keeps it whole on one rank (TW, CW or RW in one
    block): its
    case's value, or the plain cut's where that is higher (it bounds every plan; `cut`: its value if known,
    `LowerBound.cut`, else computed here)."""
    r = _relax(cost)
    w = cost.topology.world_size
    tw = r.groups.index(ShardingType.TABLE_WISE)
    index = {t.name: j for j, t in enumerate(cost.workload.tables)}
    base = cut if cut is not None else (hot_rank_cut(r, w, node_limit) if tables else 0.0)
    out = {}
    for name in tables:
        if name not in index:
            raise KeyError(f"table {name!r} is not in the workload")
        opt = int(np.flatnonzero((r.ot == index[name]) & (r.og == tw))[0])
        out[name] = max(base, hot_rank_cut(_kept_whole(r, opt, True), w, node_limit))
    return out


def case_split_bound(cost: CostModel, depth: int, node_limit: int = NODE_LIMIT,
                     ) -> tuple[float, list[tuple[str, float]], float]:
    """(bound s, [(h_i, case i's value)], the leaf's value) for the split of the module docstring over the
    `depth` hottest tables."""
    r = _relax(cost)
    w = cost.topology.world_size
    cases: list[tuple[str, float]] = []
    for _ in range(depth):
        opt = _hottest_open(r)
        if opt is None:
            break
        cases.append((cost.workload.tables[int(r.ot[opt])].name, hot_rank_cut(_kept_whole(r, opt, True), w,
                                                                                node_limit)))
        r = _kept_whole(r, opt, False)
    leaf = hot_rank_cut(r, w, node_limit)
    return min([leaf, *(v for _, v in cases)]), cases, leaf


def types_bound(cost: CostModel, plan: ShardingPlan, node_limit: int = NODE_LIMIT, cut: float | None = None,
                ) -> float:
    """A lower bound (s) on every plan whose tables have `plan`'s sharding types (CW: the same block count): the
    cut MILP with each table's option fixed (a table whose shards match no option of the bound stays open), the
    hottest table-wise one's rank written out; never below the plain cut (`cut`, as in `whole_table_bounds`)."""
    r = _relax(cost)
    w = cost.topology.world_size
    lo, hi = r.lo.copy(), r.hi.copy()
    o = 0
    for t in cost.workload.tables:
        opts = _option_shards(cost, t)
        tp = plan.tables[t.name]
        n = len(tp.shards)
        match = [i for i, (st, shards) in enumerate(opts) if st == tp.sharding_type
                 and (st != ShardingType.COLUMN_WISE or shards[0][2] == n)]
        if len(match) == 1:
            hi[o:o + len(opts)] = 0.0
            lo[o + match[0]] = hi[o + match[0]] = 1.0
        o += len(opts)
    fixed = copy.copy(r)
    fixed.lo, fixed.hi = lo, hi
    return max(cut if cut is not None else hot_rank_cut(r, w, node_limit), hot_rank_cut(fixed, w, node_limit))
