"""Exact refinement: a MILP over each table's sharding type and ranks, solved by HiGHS (scipy.optimize.milp)
under a node limit (counted work, not the clock), with the tiers fixed.

Options per table: table-wise; column-wise into k equal blocks (k ≤ world, blocks on distinct ranks); row-wise
over all ranks; table-row-wise on one host; data-parallel (fast tier, tiny tables). The objective is the search's
J = max(step / lb_ours, TorchRec's max / lb_trec) with the step as `CostModel.plan_cost` assembles it:
  Z ≥ s0·(base + Σ_g fixed_g·p_g + Σ_k M_k + Σ_x spread_x·x / W),   M_k ≥ L[k, r] (every resource row k, rank r),
  Z ≥ s1·T[r],   p_g ≥ x for every placement of group g (p_g = 1: group g present),
each tier's bytes within its usable capacity (spread_x: the all-to-all seconds of placement x where the step
pays an all-to-all's mean over ranks, `Resources.spread`). It leaves out the per-holder lookup overheads (≥ 0,
calibrated CPU presets only), so its dual bound stays a valid bound and its plan is re-priced exactly before it
competes.
HiGHS's dual bound certifies how far the incumbent heuristic plan can be from the best plan of these options.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from sharding.layouts import column_splits, row_ranges, table_plan
from sharding.plan import ShardingPlan, ShardingType

if TYPE_CHECKING:
    from sharding.pack import Builder

__all__ = ["MilpStats", "milp_refine"]

TW, CW, RW, TWRW, DP = (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.ROW_WISE,
                        ShardingType.TABLE_ROW_WISE, ShardingType.DATA_PARALLEL)


@dataclass
class MilpStats:
    """What the exact step did. Objectives are the larger scaled load (ratio to the lower bound, latency aside)."""

    binaries: int = 0
    status: str = "skipped"  # skipped | optimal | limit (node) | infeasible | no solution
    incumbent: float = float("nan")  # the heuristic plan's objective
    objective: float = float("nan")  # the MILP's best plan's objective
    dual_bound: float = float("nan")  # no plan of these options (and tiers) does better
    improved: bool = False
    certified: bool = False  # the heuristic plan is optimal within 1e-4 for these options
    wall_s: float = 0.0
    nodes: int = 0  # branch-and-bound nodes HiGHS explored


def _objective(builder: Builder, plan: ShardingPlan) -> float:
    """The search's exact J of a plan."""
    res = builder.res
    return float(max(res.s0 * res.cost.plan_cost(plan), res.s1 * res.trec.plan_cost(plan)))


def milp_refine(builder: Builder, incumbent: ShardingPlan, max_binaries: int, node_limit: int = 500) -> tuple[ShardingPlan | None, MilpStats]:
    """(a better plan or None, stats). HiGHS stops at `node_limit` branch-and-bound nodes (no time limit: the
    same plan on any machine); `stats.wall_s` only reports."""
    t0 = time.perf_counter()
    stats = MilpStats()
    topo, tables = builder.topo, builder.cost.workload.tables
    W, H, hosts = topo.world_size, min(topo.ranks_per_host, topo.world_size), topo.num_hosts
    tiers = [t.name for t in topo.tiers]
    n_cw = [1 + sum(1 for k in column_splits(t.dim) if k <= W) for t in tables]
    stats.binaries = sum((W + 1) * k + (2 if W > 1 else 0) + (hosts if H > 1 and hosts > 1 else 0)
                         for k in n_cw) + len(ShardingType)
    if stats.binaries > max_binaries:
        stats.wall_s = time.perf_counter() - t0
        return None, stats
    stats.incumbent = _objective(builder, incumbent)  # only when the MILP runs: pricing a plan twice is not free
    # option: (table index, st, k, per-variable list of [(rank, vec, mem)] ) ; a variable picks one placement
    cols: list[tuple[int, ShardingType, int, list[tuple[int, np.ndarray, dict[str, float]]]]] = []
    count: list[tuple[int, int, int, int]] = []  # per TW/CW option: (option id, first variable, k, table index)
    opt_id = 0
    for j, t in enumerate(tables):
        tier, _ = builder.tiers[t.name]
        for k in [1] + [k for k in column_splits(t.dim) if k <= W]:
            st = TW if k == 1 else CW
            v, m = builder.shard(t, st, t.rows, t.dim // k)
            first = len(cols)
            cols.extend((j, st, k, [(r, v, m)]) for r in range(W))
            count.append((opt_id, first, k, j))
            opt_id += 1
        if W > 1:
            cols.append((j, RW, W, [(r, *builder.shard(t, RW, b - a, t.dim)) for r, (a, b) in
                                    enumerate(row_ranges(t.rows, W))]))
            if tier == topo.fast.name:
                cols.append((j, DP, W, [(r, *builder.shard(t, DP, t.rows, t.dim)) for r in range(W)]))
        if H > 1 and hosts > 1:
            shards = [builder.shard(t, TWRW, b - a, t.dim) for a, b in row_ranges(t.rows, H)]
            for host in range(hosts):
                cols.append((j, TWRW, H, [(host * H + i, v, m) for i, (v, m) in enumerate(shards)]))
    n_y = len(count)
    res = builder.res
    K, stypes = res.K, list(ShardingType)
    y0 = 1 + len(cols)
    m0 = y0 + n_y  # M_k of our K − 1 resource rows
    g0 = m0 + K - 1  # group present
    n = g0 + len(stypes)  # Z, placement variables, option variables (TW/CW), M_k, p_g
    rows_i, cols_i, vals = [], [], []
    lo, hi = [], []
    row = 0
    # one option per table: Σ y(TW/CW) + Σ x(RW, DP, TWRW) = 1
    per_table: dict[int, list[int]] = {}
    for var, (j, st, _, _) in enumerate(cols):
        if st in (RW, DP, TWRW):
            per_table.setdefault(j, []).append(1 + var)
    for oid, _, _, j in count:
        per_table.setdefault(j, []).append(y0 + oid)
    for j in range(len(tables)):
        for var in per_table[j]:
            rows_i.append(row)
            cols_i.append(var)
            vals.append(1.0)
        lo.append(1.0)
        hi.append(1.0)
        row += 1
    # k blocks of a TW/CW option on k distinct ranks: Σ_r x - k y = 0
    for oid, first, k, _ in count:
        for r in range(W):
            rows_i.append(row)
            cols_i.append(1 + first + r)
            vals.append(1.0)
        rows_i.append(row)
        cols_i.append(y0 + oid)
        vals.append(-float(k))
        lo.append(0.0)
        hi.append(0.0)
        row += 1
    # resource rows (K per rank: ours k < K − 1 against M_k, TorchRec's against Z) and memory (one per tier, rank)
    load_row = {(r, k): row + K * r + k for r in range(W) for k in range(K)}
    row += K * W
    mem_row = {(r, tn): row + W * i + r for i, tn in enumerate(tiers) for r in range(W)}
    row += W * len(tiers)
    for var, (_, _, _, places) in enumerate(cols):
        for r, v, m in places:
            for k in np.flatnonzero(v):
                rows_i.append(load_row[(r, int(k))])
                cols_i.append(1 + var)
                vals.append(float(v[k]) * (res.s1 if k == K - 1 else 1.0))
            for tn, b in m.items():
                if b:
                    rows_i.append(mem_row[(r, tn)])
                    cols_i.append(1 + var)
                    vals.append(float(b))
    for r in range(W):
        for k in range(K):
            rows_i.append(load_row[(r, k)])
            cols_i.append(0 if k == K - 1 else m0 + k)
            vals.append(-1.0)
    lo.extend([-np.inf] * (K * W))
    hi.extend([0.0] * (K * W))
    for tn in tiers:
        lo.extend([-np.inf] * W)
        hi.extend([topo.usable(tn)] * W)
    # Z ≥ s0·(base + Σ fixed_g p_g + Σ M_k)
    base = res.const(set())
    for k in range(K - 1):
        rows_i.append(row)
        cols_i.append(m0 + k)
        vals.append(res.s0)
    for gi, st in enumerate(stypes):
        rows_i.append(row)
        cols_i.append(g0 + gi)
        vals.append(res.s0 * (res.const({st}) - base))
    if res.by_mean:  # a placement's all-to-alls priced by the mean: its seconds / W wherever it sits
        for var, (j, st, k, _) in enumerate(cols):
            rows_i.append(row)
            cols_i.append(1 + var)
            vals.append(res.s0 * builder.spread(tables[j], st, k) / (k if st in (TW, CW) else 1) / W)
    rows_i.append(row)
    cols_i.append(0)
    vals.append(-1.0)
    lo.append(-np.inf)
    hi.append(-res.s0 * base)
    row += 1
    # p_g ≥ every placement (and option) variable of group g
    for var, (_, st, _, _) in enumerate(cols):
        rows_i.extend([row, row])
        cols_i.extend([1 + var, g0 + stypes.index(st)])
        vals.extend([1.0, -1.0])
        lo.append(-np.inf)
        hi.append(0.0)
        row += 1
    a = coo_array((vals, (rows_i, cols_i)), shape=(row, n)).tocsr()
    c = np.zeros(n)
    c[0] = 1.0
    integrality = np.ones(n)
    integrality[0] = 0
    integrality[m0:g0] = 0
    ub = np.ones(n)
    ub[0] = np.inf
    ub[m0:g0] = np.inf
    out = milp(c, constraints=LinearConstraint(a, lo, hi), integrality=integrality, bounds=Bounds(0, ub),
               options={"disp": False, "node_limit": node_limit})
    stats.wall_s = time.perf_counter() - t0
    stats.nodes = int(getattr(out, "mip_node_count", 0) or 0)
    stats.dual_bound = float(getattr(out, "mip_dual_bound", np.nan) or np.nan)
    stats.certified = bool(stats.dual_bound >= stats.incumbent * (1 - 1e-4))
    if out.x is None:
        stats.status = "infeasible" if out.status == 2 else "no solution"
        return None, stats
    stats.status = "optimal" if out.status == 0 else "limit"
    x = np.round(out.x[1:y0]).astype(bool)
    picked: dict[int, tuple[ShardingType, list[int]]] = {}
    for var in np.flatnonzero(x):
        j, st, _, places = cols[var]
        if st in (TW, CW):
            picked.setdefault(j, (st, []))[1].append(places[0][0])
        else:
            picked[j] = (st, [r for r, _, _ in places])
    plan_tables = {}
    for j, t in enumerate(tables):
        st, rk = picked[j]
        plan_tables[t.name] = table_plan(t, st, rk, *builder.tiers[t.name])
    plan = ShardingPlan(W, plan_tables, optimizer="ours")
    stats.objective = _objective(builder, plan)
    stats.improved = stats.objective < stats.incumbent * (1 - 1e-6)
    return (plan if stats.improved else None), stats
