"""A stronger lower bound than the LP relaxation of `sharding.bounds`: sharding groups present or absent (binary),
and one rank written out, the one holding the hottest table if that table is whole (one piece: TW, or CW / RW
in one block, `whole_options`).

Why: the LP lets a group be "15% present" (paying 15% of its collectives' latency) and spreads every table's
work over all ranks. On random100/16 its optimum pays a sixth of a column-wise group to cut the hottest table,
and the average rank then carries less compute than that one table (0.146 ms against 0.125 ms). In any real plan
the table is either cut (its group's collectives paid in full) or lies whole on one rank, whose other shards then
decide whether the remaining ranks can balance the all-to-alls without also exceeding it in compute.

The MILP (normalised units as in `sharding.bounds`; h is the table with the largest table-wise compute, W(h) its
whole options; x_{h,W} = Σ_{o ∈ W(h)} x_{h,o}):
  the LP's variables and rows (x per option, p per group, M_k, D_k), with p binary and x_{h,o} binary, o ∈ W(h);
  y_q ∈ [0, 1] per piece kind q (an option's shards of one size, n_q of them, loads V_q) other than data-parallel
      replicas and h's whole pieces: the share of kind q's pieces on rank r0, the rank holding h if h is
      whole (any rank otherwise); y_q ≤ x_o(q);
  e_g ∈ [0, p_g] per group: whether r0 holds a shard of g (e_g(o) ≥ x_{h,o}); E_k, r0's load on resource k:
      E_k = Σ_{o ∈ W(h)} x_{h,o}·V_{h,o}[k] + Σ_q y_q·n_q·V_q[k] + Σ_{g ≠ DP} e_g·hold[g, k] + D_k, except on a resource the
      cost model prices by the mean over ranks (CPU all-to-alls: `CostModel.collective_price`), where every rank
      carries 1/W of it: E_k = Σ_o T[o, k]·x_o / W
  r0:            E_k ≤ M_k
  the other W−1: Σ_o T[o, k]·x_o + Σ_g hold[g, k]·p_g − E_k ≤ (W − 1)·M_k
Validity: for any plan our options express, set x, p from its choices, r0 as above, y_q the share of kind q's
pieces on r0 and e_g whether r0 holds group g. Then E_k is r0's load except data-parallel's per-holder work (every
rank holds DP, so the W − 1 others hold at least as much of it as the row leaves out), and the totals the second
row uses are at most the plan's (each present group has ≥ 1 holder; the tier penalty of rows in the slow tier,
which could all lie on r0, is left out of it), so both rows hold with M_k = the plan's maximum. The minimum over
the MILP is ≤ every plan's cost. HiGHS's dual bound is used (at its node limit, still a bound), shaved by 1e-5
relative for solver tolerances.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array, hstack, vstack

from sharding.plan import ShardingType

__all__ = ["hot_rank_cut", "whole_options", "NODE_LIMIT"]

NODE_LIMIT = 200  # branch-and-bound nodes (deterministic); the dual bound at the limit is still a bound


def whole_options(r) -> np.ndarray:  # noqa: ANN001 (bounds._Relax)
    """Per option of `r`: whether it keeps its table whole on one rank (one piece, not data-parallel): table-wise,
    column-wise in one block, row-wise in one block. The cut writes out the rank of such a piece of h, whatever
    its type: with TW alone, CW in one block (issue 16) let the LP dodge the cut (random100/16 lost its +4.5%)."""
    n_x = r.n_x
    one_kind = np.bincount(r.ko, minlength=n_x) == 1
    single = np.zeros(n_x, dtype=bool)
    single[r.ko[r.kn == 1]] = True
    return one_kind & single & (r.og != r.groups.index(ShardingType.DATA_PARALLEL))


def hot_rank_cut(r, world_size: int, node_limit: int = NODE_LIMIT) -> float:  # noqa: ANN001 (bounds._Relax)
    """The MILP's bound in seconds (0.0 if HiGHS returns none). h is the hottest table that `r.hi` keeps whole
    (no open option cuts it: `sharding.bound_cases`, the bound of that case), else the hottest with a whole option
    open."""
    w, K, n_x, G = world_size, r.K, r.n_x, r.G
    if w < 2:
        return 0.0
    tw, dp = r.groups.index(ShardingType.TABLE_WISE), r.groups.index(ShardingType.DATA_PARALLEL)
    whole, is_open = whole_options(r), r.hi[:n_x] > 0
    loose = np.zeros(len(r.b_eq), dtype=bool)  # tables with an open option that cuts them
    loose[r.ot[is_open & ~whole]] = True
    for pick in (~loose[r.ot], np.ones(n_x, dtype=bool)):  # the tables kept whole, else any table
        tw_opts = np.flatnonzero((r.og == tw) & pick & np.isin(r.ot, r.ot[whole & is_open]))
        if len(tw_opts):
            break
    else:
        tw_opts = np.flatnonzero(r.og == tw)
    h_tw = int(tw_opts[np.argmax(r.T[tw_opts, 0] + r.T[tw_opts, 1])])
    h_opts = np.flatnonzero((r.ot == r.ot[h_tw]) & whole & is_open)
    if not len(h_opts):
        h_opts = np.array([h_tw])
    movable = np.flatnonzero((r.og[r.ko] != dp) & ~np.isin(r.ko, h_opts))
    nq, n0 = len(movable), r.a_ub.shape[1]
    y0, e0, m0, d0 = n0, n0 + len(movable), n_x + G, n_x + G + K  # new variables: y (kinds), e (groups)
    n_var = n0 + nq + G
    load = r.kn[movable, None] * r.V[movable]  # (nq, K): all of kind q's pieces
    load[:, r.spread] = 0.0  # a resource priced by the mean over ranks: E_k = Σ T x / W, whoever holds what
    hold = np.where(np.arange(G)[:, None] == dp, 0.0, r.hold)  # r0's per-holder work, DP's left out
    ri, ci, vals = [], [], []

    def put(rows: np.ndarray, cols: np.ndarray, v: np.ndarray) -> None:
        ri.append(rows)
        ci.append(cols)
        vals.append(v)

    def explicit(row0: int, sign: float) -> None:  # sign · E_k in rows row0 + k
        qi, k = np.nonzero(load)
        put(row0 + k, y0 + qi, sign * load[qi, k])
        gi, gk = np.nonzero(hold)
        put(row0 + gk, e0 + gi, sign * hold[gi, gk])
        ho, hk = np.nonzero(r.T[h_opts] * ~r.spread)
        put(row0 + hk, h_opts[ho], sign * r.T[h_opts[ho], hk])
        so, sk = np.nonzero(r.T * r.spread)
        put(row0 + sk, so, sign * r.T[so, sk] / w)
        put(row0 + np.arange(K), d0 + np.arange(K), np.full(K, sign))

    explicit(0, 1.0)  # E_k − M_k ≤ 0
    put(np.arange(K), m0 + np.arange(K), -np.ones(K))
    o_idx, k_idx = np.nonzero(r.T)  # Σ T x + Σ hold p − E_k − (W − 1) M_k ≤ 0
    put(K + k_idx, o_idx, r.T[o_idx, k_idx])
    g_idx, gk_idx = np.nonzero(r.hold)
    put(K + gk_idx, n_x + g_idx, r.hold[g_idx, gk_idx])
    explicit(K, -1.0)
    put(K + np.arange(K), m0 + np.arange(K), np.full(K, -(w - 1.0)))
    put(2 * K + np.arange(nq), y0 + np.arange(nq), np.ones(nq))  # y_q − x_o(q) ≤ 0
    put(2 * K + np.arange(nq), r.ko[movable], -np.ones(nq))
    rows = 2 * K + nq  # e_g ≤ p_g; x_{h,o} ≤ e_g(o) for each whole option o of h
    put(rows + np.arange(G), e0 + np.arange(G), np.ones(G))
    put(rows + np.arange(G), n_x + np.arange(G), -np.ones(G))
    nh = len(h_opts)
    put(rows + G + np.arange(nh), h_opts, np.ones(nh))
    put(rows + G + np.arange(nh), e0 + r.og[h_opts], -np.ones(nh))
    extra = coo_array((np.concatenate(vals), (np.concatenate(ri), np.concatenate(ci))),
                      shape=(rows + G + nh, n_var)).tocsr()
    a_ub = vstack([hstack([r.a_ub, coo_array((r.a_ub.shape[0], nq + G))]), extra]).tocsr()
    b_ub = np.concatenate([r.b_ub, np.zeros(rows + G + nh)])
    a_eq = hstack([r.a_eq, coo_array((r.a_eq.shape[0], nq + G))]).tocsr()
    c = np.concatenate([r.c, np.zeros(nq + G)])
    lo, hi = np.concatenate([r.lo, np.zeros(nq + G)]), np.concatenate([r.hi, np.ones(nq + G)])
    integral = np.zeros(n_var)
    integral[n_x:n_x + G] = 1
    integral[h_opts] = 1
    res = milp(c, integrality=integral, bounds=Bounds(lo, hi),
               constraints=[LinearConstraint(a_ub, -np.inf, b_ub), LinearConstraint(a_eq, r.b_eq, r.b_eq)],
               options={"node_limit": node_limit, "disp": False})
    bound = getattr(res, "mip_dual_bound", None)
    if bound is None or not np.isfinite(bound):
        return 0.0
    return max(0.0, (float(bound) + r.base) * r.scale * (1 - 1e-5))
