"""Simulated annealing over the movable (table- and column-wise) pieces of a plan: a short run of the fast pick
(`optimizer.ANNEAL_WORK` proposals per table), and the opt-in long search (`optimize(..., anneal=N)`, `dlrmbench plan
--anneal N`) with a second start whose sharding types come from the lower bound's own MILP. The kernel is compiled
(numba, cached on disk) when this module is imported, so planning does not wait for it.

Why: the fast optimizer's packings end at 1.13–1.14 of the bound on the 500- and 856-table sets (1.127 and 1.108
after its short anneal). Offline searches showed that part of that is search: annealing the fast pick's placement
reaches 1.097 (t856/128) and 1.106 (random500/64); annealing a plan whose types are the MILP's (`milp_types`:
≈ 150 tables column-wise in 2) reaches 1.080 and 1.096 in 60–90 s. What is left there is imbalance: the types'
means are within 1% of the bound, but compute and both all-to-alls of both groups, all driven by the same pieces,
cannot sit at their means together (rounding the column totals to whole blocks per rank, or penalising column
excess, made the other rows worse; a sum-of-squares tie-breaker in the objective did not help).

The kernel: a proposal moves one piece to another rank or swaps two pieces of different tables (half of them drawn
from a rank holding some resource's maximum); the objective is the step's own Σ_k max_r L[k, r] over the resources
the pieces touch, plus a penalty of 1,000 × TorchRec's per-rank maximum above `t_cap`; maxima are updated in O(K)
per proposal (when a maximum's holder sheds load, a scan of √W block maxima and two blocks; the rank a piece is drawn
from, the first holding a row's maximum, is kept per row). Memory per tier and distinct ranks for a
table's column blocks are hard constraints. Temperatures fall geometrically from 3e-4 to 1.5e-7 of the start's step
per stage; each of `STAGES` stages restarts from the best placement with a lower start. A proposal budget and a
seed, not the clock, decide the plan. Topologies with per-holder stage costs (calibrated CPU presets) are left to
the fast search: the kernel does not price a rank's first shard of a group.
"""
from __future__ import annotations

import copy

import numba
import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from sharding.bounds import _build, _option_shards, _tier_penalty
from sharding.layouts import table_plan
from sharding.lns import loads_of
from sharding.plan import ShardingPlan, ShardingType
from sharding.search import Resources

__all__ = ["anneal_plan", "milp_types", "seeded_builder", "STAGES"]

STAGES = 3
PENALTY = 1e3  # per second of TorchRec's per-rank maximum above the cap
T_START, T_END = 3e-4, 1.5e-7  # temperature, as a share of the start's step


@numba.njit(cache=True)
def _rescan(A: np.ndarray, bm: np.ndarray, S: int, k: int, a: int, va: float, b: int, vb: float) -> float:
    """Row k's maximum with A[k, a] = va and A[k, b] = vb: the blocks of S ranks holding neither by their maxima
    `bm` (k, block), those two rank by rank (a maximum is exact in any order)."""
    m = -1e300
    ba, bb = a // S, b // S
    for c in range(bm.shape[1]):
        if c != ba and c != bb and bm[k, c] > m:
            m = bm[k, c]
    W = A.shape[1]
    for c in (ba, bb):
        for r in range(c * S, min(W, c * S + S)):
            x = va if r == a else (vb if r == b else A[k, r])
            if x > m:
                m = x
    return m


@numba.njit(cache=True)
def _block_max(A: np.ndarray, bm: np.ndarray, S: int, k: int, c: int) -> None:
    m = -1e300
    for r in range(c * S, min(A.shape[1], c * S + S)):
        if A[k, r] > m:
            m = A[k, r]
    bm[k, c] = m


@numba.njit(cache=True)
def _holder(A: np.ndarray, k: int, h: int, old: float, a: int, b: int) -> int:
    """The first rank holding row k's maximum after ranks a and b of A changed, given h, the first holder before
    (its value then: `old`, the row's maximum), or −1 where that needs a scan of the row (h shed load, or unknown).
    Other ranks did not change, so the holder is h, a or b: the largest value, the lowest rank among equals."""
    if h < 0 or ((h == a or h == b) and A[k, h] < old):
        return -1
    x = A[k, h]
    for c in (a, b):
        y = A[k, c]
        if y > x or (y == x and c < h):
            h, x = c, y
    return h


@numba.njit(cache=True)
def _kernel(A, tr, V, vt, R, M, used, cap, tab, has, n, t0, t1, seed, tcap, pen):  # noqa: ANN001, ANN202
    """A (K, W) loads of the rows the pieces touch, tr (W,) TorchRec's row, V (P, K) / vt (P,) the pieces' loads,
    R (P,) their ranks, M (P, T) memory, used (T, W), cap (T,), tab (P,) table ids, has (tables, W) blocks per
    rank. Returns (best ranks, best objective)."""
    np.random.seed(seed)
    K, W = A.shape
    P, T = R.shape[0], M.shape[1]
    cnt = np.zeros(W, np.int64)
    lst = np.zeros((W, P), np.int64)
    pos = np.zeros(P, np.int64)
    for i in range(P):
        r = R[i]
        lst[r, cnt[r]] = i
        pos[i] = cnt[r]
        cnt[r] += 1
    mx = np.zeros(K)
    for k in range(K):
        mx[k] = A[k].max()
    tmx = tr.max()
    cur = mx.sum() + pen * max(0.0, tmx - tcap)
    best, best_r = cur, R.copy()
    da, nmx = np.zeros(K), np.zeros(K)
    S = max(1, int(np.sqrt(W)))  # ranks per block of the row maxima `bm`, kept for `_rescan`
    bm = np.empty((K, (W + S - 1) // S))
    for k in range(K):
        for c in range(bm.shape[1]):
            _block_max(A, bm, S, k, c)
    hold = np.full(K, -1, np.int64)  # per row: the first rank holding its maximum, −1 until needed
    temp = t0
    for it in range(n):
        if (it & 1023) == 0:
            temp = t0 * (t1 / t0) ** (it / n)
        if np.random.random() < 0.3:  # a piece of a rank holding some row's maximum
            k = np.random.randint(K)
            a = hold[k]
            if a < 0:  # unknown: the first rank holding the maximum (loads are ≥ 0 > -1)
                a, m = 0, -1.0
                for r in range(W):
                    if A[k, r] > m:
                        m, a = A[k, r], r
                hold[k] = a
            if cnt[a] == 0:
                continue
            i = lst[a, np.random.randint(cnt[a])]
        else:
            i = np.random.randint(P)
            a = R[i]
        move = np.random.random() < 0.3
        j = -1
        if move:
            b = np.random.randint(W)
            if b == a or has[tab[i], b] > 0:
                continue
            ok = True
            for t in range(T):
                if M[i, t] > 0 and used[t, b] + M[i, t] > cap[t]:
                    ok = False
            if not ok:
                continue
            for k in range(K):
                da[k] = -V[i, k]
            dt = -vt[i]
        else:
            j = np.random.randint(P)
            b = R[j]
            if b == a or tab[i] == tab[j] or has[tab[i], b] > 0 or has[tab[j], a] > 0:
                continue
            ok = True
            for t in range(T):
                dm = M[j, t] - M[i, t]
                if used[t, a] + dm > cap[t] or used[t, b] - dm > cap[t]:
                    ok = False
            if not ok:
                continue
            for k in range(K):
                da[k] = V[j, k] - V[i, k]
            dt = vt[j] - vt[i]
        for k in range(K):  # rank a gains da, rank b loses it
            va, vb = A[k, a] + da[k], A[k, b] - da[k]
            hi = max(va, vb)
            if hi >= mx[k]:
                nmx[k] = hi
            elif A[k, a] >= mx[k] or A[k, b] >= mx[k]:
                nmx[k] = _rescan(A, bm, S, k, a, va, b, vb)
            else:
                nmx[k] = mx[k]
        ta, tb = tr[a] + dt, tr[b] - dt
        if max(ta, tb) >= tmx:
            ntmx = max(ta, tb)
        elif tr[a] >= tmx or tr[b] >= tmx:
            ntmx = -1e300
            for r in range(W):
                x = ta if r == a else (tb if r == b else tr[r])
                if x > ntmx:
                    ntmx = x
        else:
            ntmx = tmx
        new = nmx.sum() + pen * max(0.0, ntmx - tcap)
        if new <= cur or np.random.random() < np.exp((cur - new) / temp):
            for k in range(K):
                A[k, a] += da[k]
                A[k, b] -= da[k]
                hold[k] = _holder(A, k, hold[k], mx[k], a, b)
                mx[k] = nmx[k]
                _block_max(A, bm, S, k, a // S)
                if b // S != a // S:
                    _block_max(A, bm, S, k, b // S)
            tr[a] += dt
            tr[b] -= dt
            tmx, cur = ntmx, new
            if move:
                for t in range(T):
                    used[t, a] -= M[i, t]
                    used[t, b] += M[i, t]
                has[tab[i], a] -= 1
                has[tab[i], b] += 1
                q, last = pos[i], lst[a, cnt[a] - 1]
                lst[a, q] = last
                pos[last] = q
                cnt[a] -= 1
                lst[b, cnt[b]] = i
                pos[i] = cnt[b]
                cnt[b] += 1
                R[i] = b
            else:
                for t in range(T):
                    dm = M[j, t] - M[i, t]
                    used[t, a] += dm
                    used[t, b] -= dm
                has[tab[i], a] -= 1
                has[tab[i], b] += 1
                has[tab[j], b] -= 1
                has[tab[j], a] += 1
                qi, qj = pos[i], pos[j]
                lst[a, qi] = j
                pos[j] = qi
                lst[b, qj] = i
                pos[i] = qj
                R[i], R[j] = b, a
            if cur < best - 1e-16:
                best = cur
                best_r[:] = R
    return best_r, best


@numba.njit(cache=True)
def _replay(A: np.ndarray, tr: np.ndarray, used: np.ndarray, V: np.ndarray, vt: np.ndarray, M: np.ndarray,
            R: np.ndarray, to: np.ndarray) -> None:
    """The loads (A, tr, used) of the start `R` with each piece i that `to` places elsewhere moved from R[i] to
    to[i]: the numpy loop's operations in its order (`_replay_reference`), compiled (up to 739 pieces moved per
    stage on r1000, six numpy calls each)."""
    for i in range(R.shape[0]):
        a, b = R[i], to[i]
        if a == b:
            continue
        for k in range(A.shape[0]):
            A[k, a] -= V[i, k]
        for k in range(A.shape[0]):
            A[k, b] += V[i, k]
        tr[a] -= vt[i]
        tr[b] += vt[i]
        for t in range(used.shape[0]):
            used[t, a] -= M[i, t]
        for t in range(used.shape[0]):
            used[t, b] += M[i, t]


def _replay_reference(A: np.ndarray, tr: np.ndarray, used: np.ndarray, V: np.ndarray, vt: np.ndarray,
                      M: np.ndarray, R: np.ndarray, to: np.ndarray) -> None:
    """`_replay` in numpy (its reference, tests/sharding/test_anneal.py)."""
    for i in np.flatnonzero(to != R):
        A[:, R[i]] -= V[i]
        A[:, to[i]] += V[i]
        tr[R[i]] -= vt[i]
        tr[to[i]] += vt[i]
        used[:, R[i]] -= M[i]
        used[:, to[i]] += M[i]


_F2, _F1, _I1, _I2 = numba.float64[:, ::1], numba.float64[::1], numba.int64[::1], numba.int64[:, ::1]
_replay.compile((_F2, _F1, _F2, _F2, _F1, _F2, _I1, _I1))
_kernel.compile((_F2, _F1, _F2, _F1, _I1, _F2, _F2, _F1, _I1, _I2, numba.int64, numba.float64, numba.float64,
                 numba.int64, numba.float64, numba.float64))  # at import: from numba's disk cache, ≈ 0.15 s (compiled
# once per checkout, ≈ 4 s), so the optimizer's short anneal (step 6) starts at once


def anneal_plan(res: Resources, plan: ShardingPlan, proposals: int, t_cap: float | None = None, seed: int = 0,
                ) -> ShardingPlan | None:
    """`plan` with its movable pieces re-placed by `proposals` annealing proposals (see the module doc) keeping
    TorchRec's per-rank maximum ≤ `t_cap` where it can (default: the plan's); None if nothing improved, the
    topology has per-holder stage costs, or there is nothing to move."""
    if res.hold.any() or proposals <= 0:
        return None
    state, pieces = loads_of(res, plan)
    W = state.L.shape[1]
    if W < 2 or len(pieces) < 2:
        return None
    V = np.array([q.vec for q in pieces])
    act = np.flatnonzero(np.any(V[:, :-1] != 0, axis=0))
    if not len(act):
        return None
    tiers = list(state.tiers)
    A0, tr0 = np.ascontiguousarray(state.L[act]), state.L[-1].copy()
    Va, vt = np.ascontiguousarray(V[:, act]), V[:, -1].copy()
    R = np.array([q.rank for q in pieces], dtype=np.int64)
    M = np.array([[q.mem.get(t, 0.0) for t in tiers] for q in pieces]).reshape(len(pieces), len(tiers))
    used0 = np.array([state.used[t] for t in tiers]).reshape(len(tiers), W)
    cap = np.array([state.cap[t] * (1 + 1e-12) for t in tiers])
    ids: dict[str, int] = {}
    tab = np.array([ids.setdefault(q.table, len(ids)) for q in pieces], dtype=np.int64)
    tcap = float(tr0.max()) if t_cap is None else float(t_cap)
    step0 = float(A0.max(axis=1).sum())
    best_r, best = R.copy(), step0 + PENALTY * max(0.0, float(tr0.max()) - tcap)
    start = best
    for stage in range(STAGES):
        A, tr, used = A0.copy(), tr0.copy(), used0.copy()
        _replay(A, tr, used, Va, vt, M, R, best_r)  # the best placement so far
        has = np.zeros((len(ids), W), dtype=np.int64)
        np.add.at(has, (tab, best_r), 1)
        got_r, got = _kernel(A, tr, Va, vt, best_r.copy(), M, used, cap, tab, has, proposals // STAGES,
                             T_START * step0 / (1 + stage), T_END * step0, seed + stage, tcap, PENALTY)
        if got < best - 1e-16:
            best, best_r = got, got_r
    if best >= start * (1 - 1e-9):  # the kernel's running sums drift by rounding: below 1e-9 is no improvement
        return None
    ranks: dict[str, list[int]] = {}
    for q, r in zip(pieces, best_r, strict=True):
        ranks.setdefault(q.table, []).append(int(r))
    tables = dict(plan.tables)
    for name, rl in ranks.items():
        tp = plan.tables[name]
        tables[name] = table_plan(res.cost.tables[name], tp.sharding_type, rl, tp.shards[0].tier,
                                  tp.shards[0].cache_fraction)
    return ShardingPlan(plan.world_size, tables, optimizer=plan.optimizer)


def milp_types(res: Resources, node_limit: int = 2000) -> dict[str, tuple[ShardingType, int]] | None:
    """Each table's (type, pieces) in the lower bound's relaxation solved with integral options and groups (HiGHS,
    `node_limit` branch-and-bound nodes, no clock; its best integral point), or None if it finds none. All
    tables in the fast tier."""
    cost = res.cost
    topo = cost.topology
    m = _build(cost, _tier_penalty(cost))
    integral = np.zeros(len(m.c))
    integral[:m.n_x + m.G] = 1
    out = milp(m.c, integrality=integral, bounds=Bounds(m.lo, m.hi),
               constraints=[LinearConstraint(m.a_ub, -np.inf, m.b_ub), LinearConstraint(m.a_eq, m.b_eq, m.b_eq)],
               options={"node_limit": node_limit, "disp": False})
    if out.x is None:
        return None
    w, h = topo.world_size, min(topo.ranks_per_host, topo.world_size)
    counts = {ShardingType.ROW_WISE: w, ShardingType.TABLE_ROW_WISE: h, ShardingType.DATA_PARALLEL: w}
    choice, o = {}, 0
    for t in cost.workload.tables:
        for st, shards in _option_shards(cost, t):
            if out.x[o] > 0.5:
                choice[t.name] = (st, shards[0][2] if st == ShardingType.COLUMN_WISE else counts.get(st, 1))
            o += 1
    return choice if len(choice) == len(cost.workload.tables) else None


def seeded_builder(builder, choice: dict[str, tuple[ShardingType, int]]):  # noqa: ANN001, ANN201
    """A copy of `builder` whose packings use `choice`'s types (no sharding-type moves)."""
    b = copy.copy(builder)
    b.choose = lambda t, *args, **kwargs: choice[t.name]
    b.retype_rounds = 0
    return b
