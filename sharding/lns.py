"""Large-neighbourhood step after the local search: exact two-rank re-splits of the movable shards.

The local search (`sharding.search`) moves or swaps one or two pieces at a time; a plan it cannot improve can
still be improved by re-dealing several pieces between two ranks at once (three small high-traffic pieces off a
compute-hot rank for one compute-light piece of a rank whose all-to-all is full). Each round takes the ranks
holding some uneven row's maximum, pairs each with the ranks that have the most room in the rows where it has
room too (where its pieces would go), and for every pair enumerates all 2^n splits of the pair's n largest
movable pieces (the rest stay) between the two ranks, exactly:
  primary   Σ_k max(max of row k outside the pair, max of the pair's two entries)   (the step less its constant)
  then      primary + ε · Σ_k (the pair's peak in row k)    (lowers the pair's peaks where the outside holds the
                                                              row maximum, so a later round finds room there)
subject to memory in every tier, a table's column blocks on distinct ranks, and TorchRec's per-rank perf no
higher than the plan's maximum when the step began (TorchRec's rating never rises). The best pair of a round is
applied when it lowers the second objective without raising the primary; the step as `CostModel.plan_cost`
prices it (the `Loads` decomposition) therefore never rises. A budget of pair evaluations, not the clock, ends
the step, so the plan is the same on any machine.

Before the pairs, on small instances, `flatten`: best-improvement moves and swaps of single pieces on a p-norm of
each row (p = 8 … 128) instead of its maximum, under the same constraints. Where one rank holds the compute row's
maximum by a single table and the other ranks share the all-to-all maxima, no single move or pair re-split lowers
the step (random100/16: the pairs alone end at 1.0620 of the bound); a p-norm still falls when one of several
ranks at a maximum sheds load, and leads to placements the pairs then finish (1.0585, TorchRec 0.6976 ms, no
slower: the pairs have less left to do). The best step seen is kept, so the step never rises.

Tried and dropped: the same kind of neighbourhood (2 ranks nearest a row maximum + 2 drawn from the least
loaded, up to 12 ranks) solved as a MILP with HiGHS (scipy.optimize.milp, node-limited, symmetry broken), with
the option to cut a hot table-wise shard column-wise over two of its ranks: 70–150 ms per neighbourhood, on the
100-table set 1.116 → 1.111 of the bound in 40 rounds (4.5 s), on 856 tables 1.131 → 1.130 in 2.7 s; no cut was
ever kept. This step reaches the same or better in 0.1–0.3 s. The whole placement solved by HiGHS for 120 s
(100 tables, the same sharding types) ends at 1.104 with a dual bound of 1.083: placement alone has ~1% left.
"""
from __future__ import annotations

from functools import cache

import numpy as np

from sharding.layouts import table_plan
from sharding.plan import ShardingPlan, ShardingType
from sharding.search import Loads, Piece, Resources
from sharding.split_kernel import fit_splits, pick_split, price_splits

__all__ = ["pair_refine", "refine_plan", "flatten", "loads_of", "PAIR_EVALS", "FLAT_POWERS"]

TW, CW = ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE
_NO_GROUPS, _NO_HOLD = np.zeros((0, 6), dtype=np.int64), np.zeros((0, 1))  # `price_splits` without holders

PAIR_EVALS = 1000  # pair evaluations per call (each enumerates ≤ 2^PAIR_PIECES splits)
PAIR_PIECES = 12  # a pair's largest pieces re-split exactly; the smaller ones stay where they are
HOT, PARTNERS = 12, 8  # per round: ranks holding a row's maximum (at most), partners tried for each
EPS = 0.05  # weight of the pair's own peaks (second objective)
FLAT_POWERS = (8, 16, 32, 64, 128)  # `flatten`: p-norm exponents, raised in turn towards the max
FLAT_ITERS = 200  # `flatten`: moves or swaps per exponent at most


@cache
def _bits(n: int) -> np.ndarray:
    """(2^n, n): split s puts piece i on the partner iff bit i of s is set."""
    return ((np.arange(1 << n)[:, None] >> np.arange(n)[None, :]) & 1).astype(np.float64)


@cache
def _stays(n: int) -> np.ndarray:
    """1 − `_bits(n)` (piece i stays on the hot rank), made once per n (the same array each call made)."""
    return 1 - _bits(n)


def _fit(state: Loads, a: int, b: int, pieces: list[Piece], on_b: np.ndarray) -> np.ndarray:
    """`_fit_reference`'s mask, compiled (`split_kernel.fit_splits`: its numpy products, sums and masks cost
    ~60 µs a pair, most of a new pair's set-up); the numpy path where a split's bytes come so near a cap that the
    order of the sums could decide (each order's error is < 1e-14 of the magnitudes summed)."""
    tables: dict[str, list[int]] = {}
    for i, p in enumerate(pieces):
        tables.setdefault(p.table, []).append(i)
    blocks = [v for v in tables.values() if len(v) > 1]
    if any(len(v) > 2 for v in blocks):  # three column blocks of a table cannot go on two distinct ranks
        return np.zeros(1 << len(pieces), dtype=bool)
    tiers = state.tiers
    mem = np.array([[p.mem.get(t, 0.0) for p in pieces] for t in tiers], dtype=np.float64).reshape(len(tiers), -1)
    used_a = np.array([state.used[t][a] for t in tiers], dtype=np.float64)
    used_b = np.array([state.used[t][b] for t in tiers], dtype=np.float64)
    thr = np.array([state.cap[t] * (1 + 1e-12) for t in tiers], dtype=np.float64)
    tol = 1e-14 * float((np.abs(used_a) + np.abs(used_b) + 3 * np.abs(mem).sum(axis=1)).max(initial=0.0))
    fit, sure = fit_splits(mem, sum(1 << i for i, x in enumerate(on_b.tolist()) if x), used_a, used_b, thr,
                           np.array(blocks, dtype=np.int64).reshape(len(blocks), 2), tol)
    return fit if sure and np.isfinite(tol) else _fit_reference(state, a, b, pieces, on_b)


def _fit_reference(state: Loads, a: int, b: int, pieces: list[Piece], on_b: np.ndarray) -> np.ndarray:
    """(2^n,) bool: the splits that fit (memory, a table's column blocks one on each side), before any load."""
    bits = _bits(len(pieces))
    fit = np.ones(len(bits), dtype=bool)
    for tier in state.tiers:
        mem = np.array([p.mem.get(tier, 0.0) for p in pieces])
        if mem.any():
            cap = state.cap[tier] * (1 + 1e-12)
            to_b = bits @ mem
            fit &= (state.used[tier][a] - (1 - on_b) @ mem + mem.sum() - to_b <= cap)
            fit &= (state.used[tier][b] - on_b @ mem + to_b <= cap)
    tables: dict[str, list[int]] = {}
    for i, p in enumerate(pieces):
        tables.setdefault(p.table, []).append(i)
    for idx in (v for v in tables.values() if len(v) > 1):  # column blocks of one table: one on each side
        fit &= bits[:, idx].sum(axis=1) == 1 if len(idx) == 2 else False
    return fit


class _Pair:
    """What `_split` reads of a pair (a, b) before the other ranks' loads: its pieces, the splits that fit, the
    rows they touch and the two ranks' loads without them. All of it stays as it is until a re-split moves a piece
    to or from a or b, so `pair_refine` keeps it across rounds (about half its pairs come back unchanged)."""

    def __init__(self, state: Loads, a: int, b: int, pieces: list[Piece]) -> None:
        self.a, self.b, self.pieces, self.n, self.ref = a, b, pieces, len(pieces), False
        res, cnt = state.res, state.count
        self.peaks = np.maximum(state.L[:-1, a], state.L[:-1, b])  # the pair's peaks now, and their ε-weighted sum
        self.eps_peaks = EPS * self.peaks.sum()  # (`pair_refine`'s `now`)
        self.last: tuple[tuple[bytes, float, float], tuple[float, np.ndarray] | None] | None = None
        side = [p.rank == b for p in pieces]  # each piece on b now
        on_b = np.array(side, dtype=np.float64)
        self.fit = fit = _fit(state, a, b, pieces, on_b)
        if not fit.any():
            self.fit = None
            return
        vecs = np.array([p.vec for p in pieces])  # (n, K)
        gis = [p.gi for p in pieces]
        groups = sorted(set(gis))  # (`np.unique`'s)
        # rows no piece (or holder overhead) of the pair touches keep their values: leave them out, keep their sums
        act = np.any(vecs != 0, axis=0) | res.hold[groups].any(axis=0)
        act[-1] = True  # TorchRec's row
        if act.sum() < 2:
            self.ref, self.state = True, state  # `_split_reference` (reads only ranks a and b of the state)
            return
        L0 = state.L
        self.act, self.rows, self.still = act, np.flatnonzero(act), np.flatnonzero(~act[:-1])  # rows left alone
        self.vecs = vecs = vecs[:, act]  # (a new C-contiguous array)
        self.base_a = L0[act, a] - (1 - on_b) @ vecs  # as `_split_reference`: vecs in the layout it has there
        self.base_b = L0[act, b] - on_b @ vecs  # (the sums of a matrix-vector product depend on it)
        self.grp, self.g_hold = _NO_GROUPS, _NO_HOLD  # groups with holder overheads, in `_split_reference`'s order
        held = res.hold[groups][:, act].any(axis=1).tolist()
        gs = [g for g, h in zip(groups, held, strict=True) if h]
        if gs:
            grp = np.zeros((len(gs), 6), dtype=np.int64)  # per group: its pieces' bits, their count, then per rank
            for j, g in enumerate(gs):  # (a, b) its count without them and whether it holds the group now
                mine = [i for i, x in enumerate(gis) if x == g]
                to_b = sum(side[i] for i in mine)
                grp[j] = (sum(1 << i for i in mine), len(mine), cnt[g, a] - (len(mine) - to_b), cnt[g, b] - to_b,
                          cnt[g, a] > 0, cnt[g, b] > 0)
            self.grp, self.g_hold = grp, np.ascontiguousarray(res.hold[gs][:, act])
        self.rest = float(self.peaks[~act[:-1]].sum())
        self.priced: dict[float, tuple[np.ndarray, np.ndarray]] = {}  # TorchRec's cap -> (splits, peak)

    def price(self, t_lim: float) -> tuple[np.ndarray, np.ndarray]:
        """(splits, peak): `price_splits` under TorchRec's cap `t_lim`, kept per cap (it rarely changes)."""
        got = self.priced.get(t_lim)
        if got is None:
            splits, la, lb = price_splits(self.fit, self.vecs, self.base_a, self.base_b, t_lim, self.grp,
                                          self.g_hold)
            got = self.priced[t_lim] = (splits, np.maximum(la, lb))
        return got


def _split(state: Loads, a: int, b: int, pieces: list[Piece], out: np.ndarray, t_cap: float, limit: float,
           ) -> tuple[float, np.ndarray] | None:
    """Best split of `pieces` (now on a or b) between ranks a and b as (second objective, on-b mask), among
    splits whose primary is ≤ `limit`; None if none is feasible. `out`: each row's max over the other ranks.
    `split_kernel.price_splits` prices TorchRec's row of every split that fits first and the other rows only of
    the splits within its cap; the result is `_split_reference`'s, float for float."""
    return _best(_Pair(state, a, b, pieces), out, t_cap, limit)


def _best(pair: _Pair, out: np.ndarray, t_cap: float, limit: float) -> tuple[float, np.ndarray] | None:
    """`_split` of a pair's set-up under the other ranks' row maxima `out` and the caps `t_cap`, `limit`."""
    if pair.fit is None:
        return None
    key = (out.tobytes(), t_cap, limit)
    if pair.last is None or pair.last[0] != key:  # the answer to the same question as last time is known
        pair.last = key, _answer(pair, out, t_cap, limit)
    return pair.last[1]


def _answer(pair: _Pair, out: np.ndarray, t_cap: float, limit: float) -> tuple[float, np.ndarray] | None:
    """`_best` of a pair with splits that fit, computed."""
    if pair.ref:
        return _split_reference(pair.state, pair.a, pair.b, pair.pieces, out, t_cap, limit)
    splits, peak = pair.price(max(t_cap, out[-1]) * (1 + 1e-12))
    if not len(splits):
        return None
    # `_answer_numpy`'s pick, compiled (its dozen numpy calls were most of a kept pair's cost), the same floats
    q, obj = pick_split(peak, out, pair.rows, pair.still, pair.peaks, limit * (1 + 1e-12), pair.rest, EPS)
    return None if q < 0 else (float(obj), _bits(pair.n)[splits[q]] > 0.5)


def _answer_numpy(pair: _Pair, out: np.ndarray, t_cap: float, limit: float) -> tuple[float, np.ndarray] | None:
    """`_answer` in numpy (its check in tests/sharding/test_lns.py)."""
    if pair.ref:
        return _split_reference(pair.state, pair.a, pair.b, pair.pieces, out, t_cap, limit)
    act = pair.act
    fixed = float(np.maximum(pair.peaks, out[:-1])[~act[:-1]].sum())
    out = out[act]
    splits, peak = pair.price(max(t_cap, out[-1]) * (1 + 1e-12))
    if not len(splits):
        return None
    primary = fixed + np.maximum(peak[:, :-1], out[None, :-1]).sum(axis=1)
    ok = primary <= limit * (1 + 1e-12)
    if not ok.any():
        return None
    obj = np.where(ok, primary + EPS * (pair.rest + peak[:, :-1].sum(axis=1)), np.inf)
    s = int(np.argmin(obj))  # the first least: `splits` ascends, so the same split as over all of them
    return float(obj[s]), _bits(pair.n)[splits[s]] > 0.5


def _split_reference(state: Loads, a: int, b: int, pieces: list[Piece], out: np.ndarray, t_cap: float, limit: float,
           ) -> tuple[float, np.ndarray] | None:
    """Best split of `pieces` (now on a or b) between ranks a and b as (second objective, on-b mask), among
    splits whose primary is ≤ `limit`; None if none is feasible. `out`: each row's max over the other ranks.
    The numpy version of `_split` (every split priced in full): its check, and its path where the pieces touch
    TorchRec's row alone (a (n, 1) product is a matrix-vector one, whose sums OpenBLAS orders otherwise)."""
    res, cnt = state.res, state.count
    n = len(pieces)
    bits, stays = _bits(n), _stays(n)
    on_b = np.array([p.rank == b for p in pieces], dtype=np.float64)
    fit = _fit_reference(state, a, b, pieces, on_b)  # known before any load is priced
    if not fit.any():
        return None
    vecs = np.array([p.vec for p in pieces])  # (n, K)
    gis = np.array([p.gi for p in pieces])
    groups = np.unique(gis)
    # rows no piece (or holder overhead) of the pair touches keep their values: leave them out, keep their sums
    act = np.any(vecs != 0, axis=0) | res.hold[groups].any(axis=0)
    act[-1] = True  # TorchRec's row
    L0 = state.L
    fixed = float(np.maximum(np.maximum(L0[:-1, a], L0[:-1, b]), out[:-1])[~act[:-1]].sum())
    L, vecs, out, hold = L0[act], vecs[:, act], out[act], res.hold[:, act]
    base_a = L[:, a] - (1 - on_b) @ vecs
    base_b = L[:, b] - on_b @ vecs
    la, lb = base_a + stays @ vecs, base_b + bits @ vecs  # (2^n, K), every split (the products' shapes fixed)
    for g in groups:  # per-holder overheads of a group on a rank that holds none of it before or after
        if not hold[g].any():
            continue
        mine = (gis == g).astype(np.float64)
        for r, to_r, side, load in ((a, stays @ mine, 1 - on_b, la), (b, bits @ mine, on_b, lb)):
            holds = (cnt[g, r] - side @ mine + to_r > 0).astype(np.float64)  # (2^n,): after the split
            load += (holds - float(cnt[g, r] > 0))[:, None] * hold[g]
    rows = None if fit.all() else np.flatnonzero(fit)  # price only the splits that fit (each row alike either way)
    if rows is not None:
        la, lb = la[rows], lb[rows]
    peak = np.maximum(la, lb)
    primary = fixed + np.maximum(peak[:, :-1], out[None, :-1]).sum(axis=1)
    ok = (primary <= limit * (1 + 1e-12)) & (peak[:, -1] <= max(t_cap, out[-1]) * (1 + 1e-12))
    if not ok.any():
        return None
    rest = float(np.maximum(L0[:-1, a], L0[:-1, b])[~act[:-1]].sum())
    obj = np.where(ok, primary + EPS * (rest + peak[:, :-1].sum(axis=1)), np.inf)
    s = int(np.argmin(obj))  # the first least: `rows` ascends, so the same split as over all of them
    return float(obj[s]), bits[s if rows is None else rows[s]] > 0.5


def pair_refine(state: Loads, pieces: list[Piece], evals: int = PAIR_EVALS, t_cap: float | None = None) -> int:
    """Re-split pairs of ranks exactly (see the module doc) in place; returns the pairs applied. TorchRec's
    per-rank perf stays ≤ `t_cap` (default: its maximum now)."""
    w = state.L.shape[1]
    if w < 2 or not pieces or evals <= 0:
        return 0
    res = state.res
    size = {id(p): float((p.vec * res.weight).sum()) for p in pieces}
    t_cap = float(state.L[-1].max()) if t_cap is None else max(t_cap, float(state.L[-1].max()))
    applied = 0
    pairs: dict[tuple[int, int], _Pair] = {}  # set-ups of the pairs whose ranks no re-split has changed since
    while evals > 0:
        L = state.L
        mx, mn = L.max(axis=1), L.min(axis=1)
        uneven = np.flatnonzero(mx > mn * (1 + 1e-9))  # rows all ranks share alike (data-parallel's) decide nothing
        if not len(uneven):
            break
        hot = list(dict.fromkeys(int(r) for r in np.argmax(L[uneven], axis=1)))[:HOT]
        load = (L * res.weight[:, None]).sum(axis=0)
        on: dict[int, list[Piece]] = {}
        for p in pieces:
            on.setdefault(p.rank, []).append(p)
        top = state.top3()
        limit = float(mx[:-1].sum())
        best: tuple[float, int, int, list[Piece], np.ndarray] | None = None
        for a in hot:
            # partners: most room (relative to the row maximum) in the rows where a has room too, i.e. the
            # rows that a's pieces would load elsewhere
            rows = uneven[L[uneven, a] < mx[uneven] * (1 - 1e-9)]
            slack = ((mx[rows, None] - L[rows]) / mx[rows, None]).min(axis=0) if len(rows) else -load
            partners = [int(r) for r in np.argsort(-slack, kind="stable")[:PARTNERS + 1]]
            bs = [r for r in partners if r != a][:PARTNERS]
            outs = np.ascontiguousarray(state._rest(top, a, np.array(bs)).T)  # row j: `_rest(top, a, [bs[j]])`
            for j, b in enumerate(bs):
                if evals <= 0:
                    break
                pair = pairs.get((a, b))
                if pair is None:
                    ps = sorted(on.get(a, []) + on.get(b, []), key=lambda p: -size[id(p)])[:PAIR_PIECES]
                    if not ps:
                        continue
                    pair = pairs[a, b] = _Pair(state, a, b, ps)
                evals -= 1
                out = outs[j]
                now = float(np.maximum(pair.peaks, out[:-1]).sum() + pair.eps_peaks)
                found = _best(pair, out, t_cap, limit)
                if found is not None and found[0] < now - 1e-12 * abs(now) and (best is None or found[0] - now < best[0]):
                    best = (found[0] - now, a, b, pair.pieces, found[1])
        if best is None:
            break
        _, a, b, ps, side = best
        pairs = {k: v for k, v in pairs.items() if a not in k and b not in k}  # their pieces or loads changed
        for p, s in zip(ps, side, strict=True):
            r = b if s else a
            if r != p.rank:
                state.take(p.rank, p.st, p.vec, p.mem)
                state.put(r, p.st, p.vec, p.mem)
                p.rank = r
        applied += 1
    return applied


def _norm_change(S: np.ndarray, p: float, scale: np.ndarray, S_new: np.ndarray) -> np.ndarray:
    """Change of Σ_k scale_k · S_k^(1/p) when the rows' sums of p-th powers go from S (k,) to S_new (..., k)."""
    return ((np.maximum(S_new, 0.0) ** (1 / p) - S ** (1 / p)) * scale).sum(axis=-1)


def flatten(state: Loads, pieces: list[Piece], iters: int = FLAT_ITERS, t_cap: float | None = None) -> int:
    """Moves and swaps of single pieces by best improvement of Σ_k ‖L[k, :]‖_p (each row scaled by its maximum
    when the step began), p raised through `FLAT_POWERS`: unlike the step's Σ_k max_r L[k, r], a p-norm falls
    when any rank near a row's maximum sheds load, so the search crosses the plateaus where several ranks share
    a maximum (or one rank holds it by a single piece) and the max-based moves stop. Constraints as
    `pair_refine`'s: memory, a table's column blocks on distinct ranks, TorchRec's per-rank perf ≤ `t_cap`
    (default: its maximum now). The state ends at the placement with the least step seen (the start if none is
    lower), so the step never rises. Returns the moves and swaps applied; `iters` per exponent, not the clock,
    ends the step."""
    res, L = state.res, state.L
    W, P = L.shape[1], len(pieces)
    if W < 2 or P < 2 or iters <= 0:
        return 0
    V = np.array([p.vec for p in pieces])
    gi = np.array([p.gi for p in pieces])
    ids: dict[str, int] = {}
    tab = np.array([ids.setdefault(p.table, len(ids)) for p in pieces])
    R = np.array([p.rank for p in pieces])
    has = np.zeros((len(ids), W), dtype=np.int64)  # column blocks of each table per rank
    np.add.at(has, (tab, R), 1)
    tiers = [t for t in state.tiers if any(p.mem.get(t, 0.0) for p in pieces)]
    mem = {t: np.array([p.mem.get(t, 0.0) for p in pieces]) for t in tiers}
    rows = np.flatnonzero(np.any(V[:, :-1] != 0, axis=0))
    if not len(rows):
        return 0
    scale = np.maximum(L[rows].max(axis=1), 1e-30)
    cap = (float(L[-1].max()) if t_cap is None else max(t_cap, float(L[-1].max()))) * (1 + 1e-12)
    hold, cnt = res.hold, state.count
    same_g = gi[:, None] == gi[None, :]
    other_t = tab[:, None] != tab[None, :]
    idx = np.arange(P)

    def step() -> float:
        return float(state.L[:-1].max(axis=1).sum())

    def snapshot() -> tuple:
        return (state.L.copy(), state.count.copy(), {k: v.copy() for k, v in state.used.items()}, R.copy(),
                has.copy())

    start_step = best_step = step()
    best = snapshot()
    applied = 0
    for p_exp in FLAT_POWERS:
        for _ in range(iters):
            L = state.L
            X = L[rows] / scale[:, None]  # (k, W)
            Xp = X ** p_exp
            S = Xp.sum(axis=1)
            tr = L[-1]
            # moves: piece i from R[i] to every rank b (per-holder overheads of its group included)
            rem = V + hold[gi] * (cnt[gi, R] == 1)[:, None]
            add = V[:, None, :] + hold[gi][:, None, :] * (cnt[gi] == 0)[:, :, None]  # (P, W, K)
            xa = X[:, R].T  # (P, k): each piece's rank, scaled
            xa_new = np.maximum(xa - rem[:, rows] / scale, 0.0)
            xb_new = X.T[None] + add[:, :, rows] / scale  # (P, W, k)
            dm = _norm_change(S, p_exp, scale, S - (xa ** p_exp)[:, None, :] + (xa_new ** p_exp)[:, None, :]
                              - Xp.T[None] + xb_new ** p_exp)
            ok = (tr[None, :] + add[:, :, -1] <= cap) & (has[tab] == 0)
            ok[idx, R] = False
            for t in tiers:
                ok &= state.used[t][None, :] + mem[t][:, None] <= state.cap[t] * (1 + 1e-12)
            dm = np.where(ok, dm, np.inf)
            # swaps of pieces of one group (no holder overhead changes) and of two tables
            d = V[None, :, :] - V[:, None, :]  # (P, P, K): v_j − v_i, what rank R[i] gains
            xi = np.maximum(xa[:, None, :] + d[:, :, rows] / scale, 0.0)
            xj = np.maximum(xa[None, :, :] - d[:, :, rows] / scale, 0.0)
            ds = _norm_change(S, p_exp, scale, S - (xa ** p_exp)[:, None, :] - (xa ** p_exp)[None, :, :]
                              + xi ** p_exp + xj ** p_exp)
            oks = same_g & other_t & (R[:, None] != R[None, :]) & (has[tab][:, R] == 0) & (has[tab][:, R].T == 0)
            oks &= (tr[R][:, None] + d[:, :, -1] <= cap) & (tr[R][None, :] - d[:, :, -1] <= cap)
            for t in tiers:
                dmem = mem[t][None, :] - mem[t][:, None]
                u = state.used[t][R]
                room = state.cap[t] * (1 + 1e-12)
                oks &= (u[:, None] + dmem <= room) & (u[None, :] - dmem <= room)
            ds = np.where(oks, ds, np.inf)
            mi, si = np.unravel_index(np.argmin(dm), dm.shape), np.unravel_index(np.argmin(ds), ds.shape)
            tol = -1e-12 * float(scale.sum())
            if min(dm[mi], ds[si]) >= tol:
                break
            if dm[mi] <= ds[si]:
                moves = [(int(mi[0]), int(mi[1]))]
            else:
                i, j = int(si[0]), int(si[1])
                moves = [(i, int(R[j])), (j, int(R[i]))]
            for i, b in moves:
                p = pieces[i]
                state.take(p.rank, p.st, p.vec, p.mem)
                has[tab[i], p.rank] -= 1
                state.put(b, p.st, p.vec, p.mem)
                has[tab[i], b] += 1
                p.rank = R[i] = b
            applied += 1
            now = step()
            if now < best_step * (1 - 1e-12):
                best_step, best = now, snapshot()
    if applied:  # back to the least step seen (the start if none was lower)
        state.L, state.count, state.used = best[0], best[1], best[2]
        for p, r in zip(pieces, best[3], strict=True):
            p.rank = int(r)
    return applied if best_step < start_step * (1 - 1e-12) else 0


def loads_of(res: Resources, plan: ShardingPlan) -> tuple[Loads, list[Piece]]:
    """`Loads` of a plan and its movable (table- and column-wise) pieces, column blocks in column order."""
    cost, topo = res.cost, res.cost.topology
    state = Loads(res, topo, {tp.sharding_type for tp in plan.tables.values()})
    pieces: list[Piece] = []
    spread = 0.0  # `Resources.spread` of the plan's shards
    for name, tp in plan.tables.items():
        t, st = cost.tables[name], tp.sharding_type
        if "_build" in tp.__dict__ and (got := _put_alike(res, state, pieces, t, tp)) is not None:
            spread += got
            continue
        if st == ShardingType.DATA_PARALLEL and len(tp.shards) == topo.world_size:
            s = tp.shards[0]
            state.put_all(st, *res.shard(t, st, s.rows, s.cols, s.tier, s.cache_fraction))
            if res.by_mean:
                spread += topo.world_size * res.spread(t, st, s.rows, s.cols, s.tier, s.cache_fraction)
            continue
        for s in sorted(tp.shards, key=lambda s: s.col_start):
            v, m = res.shard(t, st, s.rows, s.cols, s.tier, s.cache_fraction)
            state.put(s.rank, st, v, m)
            if res.by_mean:
                spread += res.spread(t, st, s.rows, s.cols, s.tier, s.cache_fraction)
            if st in (TW, CW):
                pieces.append(Piece(name, st, v, m, s.rank))
    if spread:
        state.respread(spread)
    return state, pieces


def _put_alike(res: Resources, state: Loads, pieces: list[Piece], t, tp) -> float | None:  # noqa: ANN001
    """`loads_of`'s loop for one table plan made by `layouts.table_plan`, from its shapes (`TablePlan.alike`)
    without making its shards: their ranks are listed in shard order (column order for column-wise), so each
    shape's shards on distinct ranks go in at once (`Loads.put_ranks`: on every rank the same additions, in
    table order, as one `put` per shard). Returns the shards' summed `Resources.spread`, or None (nothing done)
    where a table repeats a rank: the loop handles it."""
    st, alike = tp.sharding_type, tp.alike()
    if len({r for ranks in alike.values() for r in ranks}) != sum(len(ranks) for ranks in alike.values()):
        return None
    spread = 0.0
    for (rows, cols, tier, cf), ranks in alike.items():
        v, m = res.shard(t, st, rows, cols, tier, cf)
        if res.by_mean:
            spread += len(ranks) * res.spread(t, st, rows, cols, tier, cf)
        if st == ShardingType.DATA_PARALLEL and len(ranks) == state.L.shape[1]:
            state.put_all(st, v, m)
        elif len(ranks) == 1:
            state.put(ranks[0], st, v, m)
        else:
            state.put_ranks(np.array(ranks, dtype=np.int64), st, v, m)
        if st in (TW, CW):
            pieces.extend(Piece(t.name, st, v, m, r) for r in ranks)
    return spread


def refine_plan(res: Resources, plan: ShardingPlan, evals: int = PAIR_EVALS, flat_iters: int = 0,
                ) -> ShardingPlan | None:
    """`plan` after `flatten` (`flat_iters` per exponent; 0: none), then `pair_refine` under the plan's TorchRec
    rating; None when no piece moved for the better."""
    state, pieces = loads_of(res, plan)
    before = {id(p): p.rank for p in pieces}
    t_cap = float(state.L[-1].max())
    flat = flatten(state, pieces, flat_iters, t_cap) if flat_iters > 0 else 0
    if not pair_refine(state, pieces, evals, t_cap) and not flat:
        return None
    ranks: dict[str, list[int]] = {}
    for p in pieces:
        ranks.setdefault(p.table, []).append(p.rank)
    tables = dict(plan.tables)
    for name in {p.table for p in pieces if p.rank != before[id(p)]}:
        tp = plan.tables[name]
        tables[name] = table_plan(res.cost.tables[name], tp.sharding_type, ranks[name], tp.shards[0].tier,
                                  tp.shards[0].cache_fraction)
    return ShardingPlan(plan.world_size, tables, optimizer=plan.optimizer)
