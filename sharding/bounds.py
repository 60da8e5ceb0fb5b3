"""Lower bounds on the cost of any plan our options can express, for a workload and topology.

`lower_bound(CostModel)` is the largest of three valid bounds: the linear-programming relaxation below, the simple
bound after it (kept as a floor and for TorchRec's rating, which is the slowest rank's summed shard perf), and the
relaxation strengthened by `sharding.bound_cut` (groups present or absent, the hottest table's rank written out).

The relaxation follows `CostModel._assemble`: step = base + Σ_g fixed_g·[group g present] + Σ_k max_r L[k, r],
k running over the forward, backward and optimizer work and each collective (group, pass, op). Every table j picks
one option o (TW, CW(k), RW, TWRW, DP, each part in its cheapest tier: `_cheapest_tiers`); T_jo[k] is what its shards put on resource k in all
and P_jo[k] the largest single shard's share of it. For any plan, with x_jo = 1 for its choices and p_g = 1 for the
groups present:
  max_r L[k, r] ≥ (Σ_j T_jo[k] + Σ_g hold_g[k]·p_g + pen_k) / W     (the average over ranks; a group present has
                                                                   ≥ 1 holder paying its per-holder work hold_g)
  max_r L[k, r] ≥ P_jo[k] + hold_g(o)[k] + Σ_{j' ≠ j} x_j'DP·T_j'DP[k]/W   (the rank holding that shard, for every
                                                                   table: it also holds a replica of every other
                                                                   data-parallel table, as every rank does)
  p_g ≥ Σ_{o ∈ g} x_jo for every table j
pen_k is the tier term below, split between forward and backward as the cost model splits lookup time. So the
minimum of base + Σ_g fixed_g·p_g + Σ_k M_k over the LP (x ≥ 0, Σ_o x_jo = 1, p ∈ [0, 1], M_k ≥ both right-hand
sides) is ≤ every plan's cost. On a topology that prices an all-to-all by the mean over ranks
(`CostModel.collective_price`: CPU ranks) a piece's all-to-all seconds count 1/W in P and V (the step pays that
much of it wherever the piece lies), in T in full (the average row is then the price itself). Piece rows are kept only for each resource's largest pieces (dropping rows only
lowers the LP, so the bound stays valid). HiGHS solves it in normalised units; the value is shaved by 1e-6
relative to cover solver tolerances.

The simple bound: per-rank cost is a sum of shard costs plus non-negative latency, so the slowest rank costs at least
  (a) the average load: Σ_j (least total work of table j over TW, DP, CW(k), TWRW, RW, in the cheapest tier)
      + the least extra time of the rows that cannot fit the fast tier, all over W ranks; and
  (b) the largest piece: max_j (over the same options, the least cost of the table's largest shard);
plus, with more than one rank, the latency of the collective calls the slowest rank must take part in, plus the
step's time outside the embedding stages (`CostModel.outside`, in the relaxations' base too).
The tier term is a fractional knapsack: the fast tier of all ranks holds at most its usable bytes, weights beyond
it (optimizer state may live in the slow tier for free) must be read from the next tier. Each table's penalty,
non-decreasing in the share demoted, is replaced by the convex minorant of a step function below it (valid for
measured LRU curves, which need not be convex); taking the cheapest slopes first is then optimal.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache, lru_cache

import numba
import numpy as np
from numba import njit
from scipy.optimize import linprog
from scipy.sparse import coo_array

from embedding.spec import DTYPE_BYTES
from sharding.bound_cut import hot_rank_cut
from sharding.cost import CostModel
from sharding.layouts import column_splits, row_sizes
from sharding.plan import ShardingType
from sharding.trec_cost import TorchRecCostModel

__all__ = ["LowerBound", "lower_bound"]

TW, CW, RW, TWRW, DP = (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.ROW_WISE,
                        ShardingType.TABLE_ROW_WISE, ShardingType.DATA_PARALLEL)
_GRID = np.linspace(0.0, 1.0, 41)  # demoted share of a table's rows


@dataclass(frozen=True)
class LowerBound:
    average: float  # (a) without the tier term
    tier_penalty: float  # added to Σ work by rows that cannot be in the fast tier
    largest_piece: float  # (b)
    world_size: int
    latency: float = 0.0  # one collective's latency per pass: the slowest rank holds a shard, so it takes part
    relaxation: float = 0.0  # the LP relaxation's value (0: not computed)
    step_overhead: float = 0.0  # `CostModel.outside()`: every plan's step has it
    cut: float = 0.0  # `sharding.bound_cut`'s MILP bound (0: not computed)

    @property
    def simple(self) -> float:
        return (max(self.average + self.tier_penalty / self.world_size, self.largest_piece) + self.latency
                + self.step_overhead)

    @property
    def value(self) -> float:
        return max(self.simple, self.relaxation, self.cut)

    def to_dict(self) -> dict[str, float]:
        return {"lower_bound_s": self.value, "relaxation_s": self.relaxation, "cut_s": self.cut, "simple_s": self.simple,
                "average_s": self.average, "tier_penalty_s": self.tier_penalty,
                "largest_piece_s": self.largest_piece, "latency_s": self.latency,
                "step_overhead_s": self.step_overhead}


def _table_terms(cost: CostModel | TorchRecCostModel, name: str, tiers: list[str],
                 options: Sequence[tuple[ShardingType, Sequence[tuple[int, int, int]]]] | None = None,
                 ) -> tuple[float, float, float, float]:
    """(least total work, least largest-shard cost) of a table, in its cheapest of `tiers`, with data-parallel allowed
    and then without it (one pricing pass for both). `options`: the table's `_option_shards` (made here if not
    given; `lower_bound` passes those it priced). Prices are read from the model's memo where `price_many` put
    them (the same objects `shard_cost` returns: `shard_cost` was a third of this function's time on r1000)."""
    t, topo = cost.tables[name], cost.topology
    w = topo.world_size
    one = tiers[0] if len(tiers) == 1 else None  # one tier (TorchRec's bound, most of ours): no generator
    ours = isinstance(cost, CostModel)
    spread = ours and cost.topology.all_to_all_by_mean and w > 1
    memo, shard_cost = cost._memo, cost.shard_cost

    def price(st: ShardingType, rows: int, cols: int) -> tuple[float, float]:
        """(the shard's total, what the step pays for it on its rank): an all-to-all priced by the mean over
        ranks (`CostModel.collective_price`) adds 1/W of its seconds to the step, wherever the shard lies."""
        if one is not None:  # `shard_cost`'s memo key (cache fraction 0.0)
            c = memo.get(("c", name, st, rows, cols, one, 0.0) if ours else (name, st, cols, one, 0.0))
            c = c if c is not None else shard_cost(t, st, rows, cols, one)
            c = c.fwd_compute + c.bwd_compute + c.fwd_comms + c.bwd_comms + c.optimizer  # `.total`, one call less
        else:
            c = min(shard_cost(t, st, rows, cols, x).total for x in tiers)
        if not spread:
            return c, c
        a2a = sum(secs for _, op, secs in cost.message_times(t, st, rows, cols) if op == "all_to_all")
        return c, max(0.0, c - a2a * (1 - 1 / w))

    work = piece = dp = dp_piece = 0.0
    for st, shards in (options if options is not None else _option_shards(cost, t)):
        if st == TW:  # the first option
            work, piece = price(TW, t.rows, t.dim)
        elif st == CW:
            (rows, cols, k), = shards
            c, cp = price(CW, rows, cols)
            work, piece = min(work, c * k), min(piece, cp)
        elif st == DP:  # one rank too: a lone replica is a valid plan
            dp, dp_piece = price(DP, t.rows, t.dim)
        else:  # RW over all ranks, TWRW over a host; n = 1 too: TorchRec prices a lone RW shard below a TW one
            cs = [(*price(st, r, cols), k) for r, cols, k in shards]
            work, piece = min(work, sum([c * k for c, _, k in cs])), min(piece, max([cp for _, cp, _ in cs]))
    work_dp, piece_dp = min(work, dp * w), min(piece, dp_piece)
    return work_dp, piece_dp, work, piece


def _all_table_terms(cost: CostModel | TorchRecCostModel, tiers: list[str], options: list) -> list[tuple]:
    """`_table_terms` of every table of the workload (`options`: their `_option_shards`, in table order). In one
    tier with no all-to-all priced by the mean (most instances), one pass: every shape's total read from the
    memo and summed as arrays (the same five additions in `ShardCost.total`'s order, elementwise), then each
    table's least work and piece from those floats as `_table_terms` forms them (2·10^4 `price` calls on r1000)."""
    tables, w = cost.workload.tables, cost.topology.world_size
    ours = isinstance(cost, CostModel)
    if len(tiers) > 1 or (ours and cost.topology.all_to_all_by_mean and w > 1):
        return [_table_terms(cost, t.name, tiers, opts) for t, opts in zip(tables, options, strict=True)]
    one, memo, shard_cost = tiers[0], cost._memo, cost.shard_cost
    cs = [memo.get(("c", t.name, st, r, c, one, 0.0) if ours else (t.name, st, c, one, 0.0))
          or shard_cost(t, st, r, c, one)
          for t, opts in zip(tables, options, strict=True) for st, shards in opts for r, c, _ in shards]
    f, b = np.array([x.fwd_compute for x in cs]), np.array([x.bwd_compute for x in cs])
    fc, bc, o = np.array([x.fwd_comms for x in cs]), np.array([x.bwd_comms for x in cs]), np.array([x.optimizer for x in cs])
    totals = ((((f + b) + fc) + bc) + o).tolist()
    out, at = [], 0
    for opts in options:
        at = _least(opts, totals, at, w, out)
    return out


def _least(opts: Sequence, totals: list[float], at: int, w: int, out: list) -> int:
    """`_table_terms`' reduction of one table's options, their shapes' totals read in order from totals[at:] (a
    shard's piece is its total: one tier, nothing priced by the mean), appended to `out`; returns where the
    next table's totals start."""
    work = piece = dp = 0.0
    for st, shards in opts:
        c = totals[at]
        if st == TW:  # the first option
            work = piece = c
        elif st == CW:
            work, piece = min(work, c * shards[0][2]), min(piece, c)
        elif st == DP:
            dp = c
        else:
            cs = totals[at:at + len(shards)]
            work = min(work, sum([x * k for x, (_, _, k) in zip(cs, shards, strict=True)]))
            piece = min(piece, max(cs))
        at += len(shards)
    out.append((min(work, dp * w), min(piece, dp), work, piece))
    return at


def _hull_segments(xs: np.ndarray, ys: np.ndarray) -> list[tuple[float, float]]:
    """(width, slope) of the lower convex hull of points (xs, ys), xs ascending, slopes ascending (the reference
    for `_hull_rows`: tests)."""
    hull: list[tuple[float, float]] = []
    for x, y in zip(xs, ys, strict=True):
        while len(hull) >= 2 and (hull[-1][1] - hull[-2][1]) * (x - hull[-2][0]) >= \
                (y - hull[-2][1]) * (hull[-1][0] - hull[-2][0]):
            hull.pop()
        hull.append((float(x), float(y)))
    return [(b[0] - a[0], (b[1] - a[1]) / (b[0] - a[0])) for a, b in zip(hull, hull[1:], strict=False)]


@njit(cache=True)
def _hull_rows(xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_hull_segments` of each row of (xs, ys), their segments concatenated row by row: widths, slopes. Compiled
    for `_tier_penalty` (its per-point Python loop was a third of `lower_bound` on f88); the same comparisons and
    the same IEEE operations in the same order (a zero width raises ZeroDivisionError, as Python's division)."""
    n, m = xs.shape
    width, slope = np.empty(n * max(m - 1, 0)), np.empty(n * max(m - 1, 0))
    hx, hy = np.empty(m), np.empty(m)
    c = 0
    for i in range(n):
        h = 0
        for j in range(m):
            x, y = xs[i, j], ys[i, j]
            while h >= 2 and (hy[h - 1] - hy[h - 2]) * (x - hx[h - 2]) >= (y - hy[h - 2]) * (hx[h - 1] - hx[h - 2]):
                h -= 1
            hx[h], hy[h] = x, y
            h += 1
        for j in range(h - 1):
            width[c] = hx[j + 1] - hx[j]
            slope[c] = (hy[j + 1] - hy[j]) / (hx[j + 1] - hx[j])
            c += 1
    return width[:c], slope[:c]


_hull_rows.compile((numba.float64[:, ::1], numba.float64[:, ::1]))  # at import, from numba's disk cache once compiled


PIECE_ROWS = 48  # per resource, the tables with the largest pieces get a piece row in the LP


@cache
def _column_splits(dim: int) -> tuple[int, ...]:
    """`column_splits`, once per dim (a loop over dim / 4 candidates, asked for every table by both bounds)."""
    return tuple(column_splits(dim))


def _option_shards(cost: CostModel, t) -> tuple[tuple[ShardingType, tuple[tuple[int, int, int], ...]], ...]:  # noqa: ANN001
    """Every option of table t as (type, ((rows, cols, how many shards), …)); read-only (shared: `_options_of`)."""
    topo = cost.topology
    return _options_of(t.rows, t.dim, topo.world_size, min(topo.ranks_per_host, topo.world_size))


@lru_cache(maxsize=1 << 14)
def _options_of(rows: int, dim: int, w: int, h: int) -> tuple[tuple[ShardingType, tuple[tuple[int, int, int], ...]], ...]:
    """`_option_shards` by what it depends on, made once for both bounds (ours, then TorchRec's, ask for every
    table's) and the LP."""
    out = [(TW, ((rows, dim, 1),))]
    # one column block too: `validate_plan` accepts a lone CW shard, which prices as TW but joins CW's group, so
    # a plan of CW tables only pays one group's collectives (issue 16: two valid plans fell below the bound)
    out += [(CW, ((rows, dim // k, k),)) for k in (1, *_column_splits(dim)) if k <= w]
    out += [(RW, tuple([(r, dim, k) for r, k in row_sizes(rows, w)])),
            (TWRW, tuple([(r, dim, k) for r, k in row_sizes(rows, h)]))]
    out.append((DP, ((rows, dim, w),)))  # on one rank too: a lone replica is a valid plan
    return tuple(out)


@dataclass
class _Relax:
    """The relaxation in normalised units (seconds / `scale`): `a_ub`·v ≤ `b_ub`, `a_eq`·v = `b_eq`, bounds
    `lo` ≤ v ≤ `hi`, minimise `c`·v; v = (x per option, p per group, M per resource, D per resource). Kept for
    `sharding.bound_cut`, which extends it: per option its group `og` and table `ot`, totals `T`; per piece kind
    (an option's shards of one size) its option `ko`, count `kn` and one piece's loads `V`; per group its
    per-holder work `hold`."""

    a_ub: object
    b_ub: np.ndarray
    a_eq: object
    b_eq: np.ndarray
    c: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    n_x: int
    G: int
    K: int
    scale: float
    base: float
    T: np.ndarray
    V: np.ndarray
    ko: np.ndarray
    kn: np.ndarray
    og: np.ndarray
    ot: np.ndarray
    hold: np.ndarray
    groups: list[ShardingType]
    spread: np.ndarray  # (K,) bool: resources priced by the mean over ranks (`CostModel.collective_price`)


def _build(cost: CostModel, penalty: float) -> _Relax:
    """The LP of the module docstring."""
    topo, wl = cost.topology, cost.workload
    w, tiers, groups = topo.world_size, _cheapest_tiers(cost), list(ShardingType)
    keys: dict[tuple, int] = {"fwd": 0, "bwd": 1, "opt": 2}  # type: ignore[dict-item]
    tots, pieces, opt_group, opt_table, kinds = [], [], [], [], []
    spread: set[int] = set()
    for j, t in enumerate(wl.tables):
        for st, shards in _option_shards(cost, t):
            tot: dict[int, float] = {}
            piece: dict[int, float] = {}
            for rows, cols, n in shards:
                cs = [cost.shard_cost(t, st, rows, cols, x) for x in tiers]  # each part at its least over tiers
                v = {0: min(c.fwd_compute for c in cs), 1: min(c.bwd_compute for c in cs),
                     2: min(c.optimizer for c in cs)}
                mean: set[int] = set()
                for p, op, secs in cost.message_times(t, st, rows, cols):
                    k = keys.setdefault((st, p, op), len(keys))
                    v[k] = v.get(k, 0.0) + secs
                    if cost.prices_by_mean(op):
                        mean.add(k)
                        spread.add(k)
                # a piece's load on its own rank; an all-to-all priced by the mean over ranks
                # (`CostModel.collective_price`) charges the step 1/W of it wherever the piece lies
                on_rank = {k: x / w if k in mean else x for k, x in v.items()}
                kinds.append((len(tots), n, on_rank))
                for k, x in v.items():
                    tot[k] = tot.get(k, 0.0) + n * x
                    piece[k] = max(piece.get(k, 0.0), on_rank[k])
            tots.append(tot)
            pieces.append(piece)
            opt_group.append(groups.index(st))
            opt_table.append(j)
    K, n_x, G = len(keys), len(tots), len(groups)
    T, P, V = np.zeros((n_x, K)), np.zeros((n_x, K)), np.zeros((len(kinds), K))
    for o in range(n_x):
        T[o, list(tots[o])] = list(tots[o].values())
        P[o, list(pieces[o])] = list(pieces[o].values())
    for q, (_, _, v) in enumerate(kinds):
        V[q, list(v)] = list(v.values())
    base_lat, base_work = cost._fixed({}, w)
    base = float(base_lat + base_work.max(axis=1).sum())
    fixed, hold = np.zeros(G), np.zeros((G, K))
    for g, st in enumerate(groups):
        lat, work = cost._fixed({st: set()}, w)
        fixed[g] = float(lat + work.max(axis=1).sum()) - base
        hold[g, :3] = cost._fixed({st: {0}}, w)[1][:, 0] - work[:, 0]
    base += cost.outside()  # every plan's step has it
    pen = np.zeros(K)
    if penalty > 0:
        f, b = _demotion_seconds(cost)
        pen[0], pen[1] = penalty * f / (f + b), penalty * b / (f + b)
    scale = max(float(T.min(axis=0).sum() / w + fixed.min() + base), 1e-30)  # work in units near 1
    T, P, V, fixed, hold, pen, base = T / scale, P / scale, V / scale, fixed / scale, hold / scale, pen / scale, base / scale
    og, ot = np.array(opt_group), np.array(opt_table)
    m0, d0, n_var = n_x + G, n_x + G + K, n_x + G + 2 * K  # variables: x (options), p (groups), M, D (resources)
    dp = og == groups.index(DP)
    per_rank_dp = np.where(dp[:, None], T / w, 0.0)  # what a data-parallel option puts on every rank
    ri: list[np.ndarray] = []
    ci: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    ub: list[np.ndarray] = []
    row = 0

    def add(r: np.ndarray, c: np.ndarray, v: np.ndarray, n_rows: int, rhs: np.ndarray | float) -> None:
        nonlocal row
        ri.append(r + row)
        ci.append(c)
        vals.append(v)
        ub.append(np.broadcast_to(np.asarray(rhs, dtype=float), (n_rows,)))
        row += n_rows

    # averages: Σ_o T[o, k]·x_o / W + Σ_g hold[g, k]·p_g / W − M_k ≤ −pen_k / W
    o_idx, k_idx = np.nonzero(T)
    g_idx, gk_idx = np.nonzero(hold)
    add(np.concatenate([k_idx, gk_idx, np.arange(K)]), np.concatenate([o_idx, n_x + g_idx, m0 + np.arange(K)]),
        np.concatenate([T[o_idx, k_idx] / w, hold[g_idx, gk_idx] / w, -np.ones(K)]), K, -pen / w)
    # pieces, for each resource's PIECE_ROWS tables with the largest pieces: the rank holding table j's largest
    # piece also holds a replica of every other data-parallel table (D_k: the data-parallel load of every rank):
    # Σ_o (P + hold)[o, k]·x_o − x_{j,DP}·T[j DP, k]/W + D_k − M_k ≤ 0
    Ph = P + hold[og] * (P > 0)
    n_tab = len(wl.tables)
    for k in range(K):
        top = np.zeros(n_tab)
        np.maximum.at(top, ot, Ph[:, k])
        keep = np.flatnonzero(top > 0)
        keep = keep[np.argsort(-top[keep], kind="stable")[:PIECE_ROWS]]
        pos = -np.ones(n_tab, dtype=np.int64)
        pos[keep] = np.arange(len(keep))
        coef = Ph[:, k] - per_rank_dp[:, k]
        opts = np.flatnonzero((pos[ot] >= 0) & (coef > 0))
        add(np.concatenate([pos[ot[opts]], np.arange(len(keep)), np.arange(len(keep))]),
            np.concatenate([opts, np.full(len(keep), m0 + k), np.full(len(keep), d0 + k)]),
            np.concatenate([coef[opts], -np.ones(len(keep)), np.ones(len(keep))]), len(keep), 0.0)
    # groups: Σ_{o ∈ g of table j} x_o − p_g ≤ 0
    pair = ot * G + og
    uniq, inv = np.unique(pair, return_inverse=True)
    add(np.concatenate([inv, np.arange(len(uniq))]), np.concatenate([np.arange(n_x), n_x + uniq % G]),
        np.concatenate([np.ones(n_x), -np.ones(len(uniq))]), len(uniq), 0.0)
    a_ub = coo_array((np.concatenate(vals), (np.concatenate(ri), np.concatenate(ci))), shape=(row, n_var)).tocsr()
    # one option per table; D_k − Σ_{o DP} T[o, k]/W·x_o = 0
    d_o, d_k = np.nonzero(per_rank_dp)
    a_eq = coo_array((np.concatenate([np.ones(n_x), np.ones(K), -per_rank_dp[d_o, d_k]]),
                      (np.concatenate([ot, n_tab + np.arange(K), n_tab + d_k]),
                       np.concatenate([np.arange(n_x), d0 + np.arange(K), d_o]))), shape=(n_tab + K, n_var)).tocsr()
    b_eq = np.concatenate([np.ones(n_tab), np.zeros(K)])
    c = np.concatenate([np.zeros(n_x), fixed, np.ones(K), np.zeros(K)])
    lo = np.zeros(n_var)
    hi = np.concatenate([np.ones(n_x + G), np.full(2 * K, np.inf)])
    return _Relax(a_ub, np.concatenate(ub), a_eq, b_eq, c, lo, hi, n_x, G, K, scale, base, T, V,
                  np.array([q[0] for q in kinds]), np.array([q[1] for q in kinds]), og, ot, hold, groups,
                  np.isin(np.arange(K), sorted(spread)))


def _relaxation(cost: CostModel, penalty: float) -> float:
    """The LP relaxation's value (see the module docstring); 0.0 if HiGHS does not solve it."""
    return _solve_lp(_build(cost, penalty))


def _solve_lp(r: _Relax) -> float:
    bounds = list(zip(r.lo, [None if np.isinf(u) else u for u in r.hi], strict=True))
    res = linprog(r.c, A_ub=r.a_ub, b_ub=r.b_ub, A_eq=r.a_eq, b_eq=r.b_eq, bounds=bounds, method="highs")
    if res.status != 0:
        return 0.0
    value = min(float(res.fun), _dual_value(res, r.b_ub, r.b_eq, r.n_x, r.G, r.c, r.a_ub, r.a_eq))
    return max(0.0, (value + r.base) * r.scale * (1 - 1e-6))


def _dual_value(res, b_ub: np.ndarray, b_eq: np.ndarray, n_x: int, G: int, c: np.ndarray, a_ub, a_eq,  # noqa: ANN001
                ) -> float:
    """Weak duality with HiGHS's multipliers (y ≤ 0 on ≤ rows, z on the equalities): for every feasible point,
    c·x ≥ b·y + b_eq·z + Σ_i min(red_i, 0)·u_i with red = c − Aᵀy − A_eqᵀz and u_i the variable's upper bound, so
    solver tolerances cannot lift the value above the true LP minimum. The M_k are unbounded above: a reduced
    cost below −1e-9 voids the certificate (inf); tinier ones are charged at 10 × max(1, M_k)."""
    y, z = np.minimum(res.ineqlin.marginals, 0.0), res.eqlin.marginals
    red = c - a_ub.T @ y - a_eq.T @ z
    box, free = red[:n_x + G], red[n_x + G:]
    if free.min() < -1e-9:
        return float("inf")
    m_cap = 10 * np.maximum(1.0, res.x[n_x + G:])
    return float(b_ub @ y + b_eq @ z + np.minimum(box, 0.0).sum() + (np.minimum(free, 0.0) * m_cap).sum())


def _cheapest_tiers(cost: CostModel | TorchRecCostModel) -> list[str]:
    """The tiers a bound must price each shard in, taking the least: the fast tier alone where no slower tier reads
    a byte for less, in either pass, for any sharding type; else every tier. A calibration can make the fast tier
    the dearer one: its fitted lookup bandwidths replace the fast tier's figure, the slow tier keeps its preset's
    (a fitted 2 GB/s under a 10 GB/s slow tier), and a bound that priced every shard in the fast tier then stood
    above plans that keep tables in the slow tier (a world-size-1 case found by the property test)."""
    topo = cost.topology
    if isinstance(cost, TorchRecCostModel) or len(topo.tiers) < 2:
        return [topo.fast.name]
    if all(min(f) >= 0 and min(b) >= 0 for f, b in (_demotions(cost, x.bandwidth) for x in topo.tiers[1:])):
        return [topo.fast.name]
    return [x.name for x in topo.tiers]


def _demotions(cost: CostModel, slow: float) -> tuple[list[float], list[float]]:
    """Per sharding type, (forward, backward) seconds added per gathered byte read from a tier of bandwidth
    `slow` instead of the fast tier (with fitted stage bandwidths a fast byte costs 1 / that type's figure)."""
    topo, train = cost.topology, cost.workload.train
    fast, mult = topo.tiers[0].bandwidth, topo.bwd_compute_multiplier
    fwd, bwd = [], []
    for st in ShardingType:
        f = 1 / slow - 1 / topo.stage_bw(st.short, "lookup", fast)
        fitted = st != DP and "lookup_bwd" in topo.stage_bandwidth.get(st.short, {})
        fwd.append(f)
        bwd.append((mult / slow - 1 / topo.stage_bw(st.short, "lookup_bwd", 1.0) if fitted else mult * f)
                   if train else 0.0)
    return fwd, bwd


def _demotion_seconds(cost: CostModel) -> tuple[float, float]:
    """(forward, backward) seconds added per gathered byte moved from tier 0 to tier 1, the least over sharding
    types (`_demotions`), at least 0."""
    fwd, bwd = _demotions(cost, cost.topology.tiers[1].bandwidth)
    return max(min(fwd), 0.0), max(min(bwd), 0.0)


def _tier_penalty(cost: CostModel) -> float:
    """Least added time of the weights that cannot fit the fast tier (see the module docstring)."""
    topo, wl = cost.topology, cost.workload
    if len(topo.tiers) < 2:
        return 0.0
    fast = topo.tiers[0]
    excess = sum(t.bytes for t in wl.tables) - topo.usable(fast.name) * topo.world_size
    if excess <= 0:
        return 0.0
    segments = _penalty_segments(cost, sum(_demotion_seconds(cost)))
    total, need = 0.0, excess
    for width, slope in sorted(segments, key=lambda s: s[1]):
        take = min(width, need)
        total += max(slope, 0.0) * take
        need -= take
        if need <= 0:
            break
    return total


def _penalty_segments(cost: CostModel, per_byte: float) -> list[tuple[float, float]]:
    """Every table's (width, slope) segments of its demotion penalty's convex minorant, in table order: each
    table's penalty at the grid's shares (`miss_rates` at the same kept shares, 1 - x, as numpy scalars), the
    points of all tables as rows and their hulls in one compiled call (`_hull_rows`, not `_hull_segments` per
    table)."""
    kept = [1 - x for x in _GRID]
    pens = []
    for t in cost.workload.tables:
        k = cost._traffic(t, TW, t.rows)[0] * t.dim * DTYPE_BYTES[t.dtype] * per_byte
        pens.append((k * cost.miss_rates(t, kept)).tolist())  # non-decreasing in the demoted share
    # demoting more than x_i costs at least pen(x_i): the step function's convex minorant bounds the penalty
    # from below whether or not the miss curve is convex (measured LRU curves need not be)
    n = len(pens)
    xs = _GRID * np.array([float(t.bytes) for t in cost.workload.tables]).reshape(n, 1)
    ys = np.zeros((n, len(_GRID)))
    ys[:, 1:] = np.array(pens, np.float64).reshape(n, len(_GRID))[:, :-1]
    width, slope = _hull_rows(xs, ys)
    return list(zip(width.tolist(), slope.tolist(), strict=True))


def lower_bound(cost: CostModel | TorchRecCostModel, relax: bool = True) -> LowerBound:
    """The bound for our cost model (with `relax`, the LP relaxation and the MILP cut too), or (given a `TorchRecCostModel`) for TorchRec's rating, which has neither
    latency nor a tier term (its slower kernels only add time, so all-fast work still bounds it).

    Latency: a plan with a data-parallel table puts a replica on every rank, so each rank takes part in at least
    its all-reduce (one call, training only); a plan without one has a slowest rank holding another shard, which
    takes part in at least the forward call (and the backward one when training). The bound is the smaller of
    the two cases, each with its own work terms."""
    topo, wl = cost.topology, cost.workload
    w = topo.world_size
    tiers = _cheapest_tiers(cost)  # one decision for every table
    options = [_option_shards(cost, t) for t in wl.tables]
    if isinstance(cost, CostModel | TorchRecCostModel):  # every option's shards priced at once (the same
        cost.price_many([(t, st, rows, cols, x, 0.0) for t, opts in zip(wl.tables, options, strict=True)
                         for st, shards in opts for rows, cols, _ in shards for x in tiers])
    all_terms = _all_table_terms(cost, tiers, options)
    terms = [(a, b) for a, b, _, _ in all_terms]
    if isinstance(cost, TorchRecCostModel):
        return LowerBound(sum(a for a, _ in terms) / w, 0.0, max(b for _, b in terms), w, 0.0)
    penalty = _tier_penalty(cost)
    lat = topo.collective_link(w > topo.ranks_per_host).latency if w > 1 else 0.0
    with_dp = LowerBound(sum(a for a, _ in terms) / w, penalty, max(b for _, b in terms), w,
                         lat * (1 if wl.train else 0))
    no_dp_terms = [(c, d) for _, _, c, d in all_terms]
    no_dp = LowerBound(sum(a for a, _ in no_dp_terms) / w, penalty, max(b for _, b in no_dp_terms), w,
                       lat * (2 if wl.train else 1))
    simple = replace(min(with_dp, no_dp, key=lambda b: b.value), step_overhead=cost.outside())
    if not relax:
        return simple
    model = _build(cost, penalty)
    return replace(simple, relaxation=_solve_lp(model), cut=hot_rank_cut(model, w))
