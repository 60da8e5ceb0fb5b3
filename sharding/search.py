"""Packing and local search on the step time the cost model charges (`CostModel.plan_cost`), TorchRec's rating
alongside.

`CostModel._assemble` makes a plan's step = const(groups present) + Σ_k max_r L[k, r]. The resources k are the
forward, backward and optimizer work (each rank's shards plus the per-holder lookup overheads of their groups) and
one per collective (group, pass, op); L[k, r] is what rank r's shards put on k; const is the collectives' fixed
latency plus the fixed work every rank does. Where an all-to-all costs its mean over ranks (CPU ranks, issue 19)
it has no row: that mean is the shards' total / W wherever they sit, so it is part of const (`Resources.spread`).
TorchRec's rating is max_r T[r] of summed per-shard perf, kept as one more row of L. The search minimises
J = max(step / lb_ours, T_max / lb_trec) (`Resources.scale`), then step / lb_ours + T_max / lb_trec, then Σ L²
(weighted as J is): the last spreads loads so a later move can lower a maximum that several ranks hold. A move
or swap changes two columns of L, so it is priced exactly from the top 3 entries of every row (the max over the
other ranks) in O(K) per target rank, vectorised over all targets.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embedding.spec import TableSpec
from sharding.cost import COLLECTIVE_CALLS, CostModel
from sharding.packing import Bins
from sharding.plan import ShardingType, TablePlan
from sharding.search_kernels import host_scores, place_best, search, summary, top3, try_rank
from sharding.trec_cost import TorchRecCostModel

__all__ = ["Resources", "Piece", "Loads", "local_search"]

STYPES = tuple(ShardingType)
GROUP = {st: i for i, st in enumerate(STYPES)}  # `STYPES.index` without a call per piece
_TOL = 1e-12
HOT_RANKS, TRY_PIECES = 4, 6  # per iteration: ranks holding a row's maximum tried, largest pieces tried on each


class Resources:
    """The rows of L for one cost model (plus TorchRec's), shard vectors and the fixed costs of groups."""

    def __init__(self, cost: CostModel, trec: TorchRecCostModel, scale: tuple[float, float],
                 share: Resources | None = None) -> None:
        """`share`: an instance for the same two models whose (unscaled) shard prices this one reuses."""
        self.cost, self.trec = cost, trec
        self.w = cost.topology.world_size
        coll = sorted({(st, p, op) for st in STYPES for p, op in COLLECTIVE_CALLS[st]
                       if cost.workload.train or p == "fwd"}, key=lambda k: (STYPES.index(k[0]), k[1], k[2]))
        if not any(p == "fwd" and op == "all_to_all" for _, p, op in coll):
            coll = []
        self.by_mean = cost.topology.all_to_all_by_mean  # all-to-alls priced by the mean over ranks: no rows
        coll = [k for k in coll if not cost.prices_by_mean(k[2])]  # (`spread`)
        self.keys: list = ["fwd", "bwd", "opt", *coll]
        self.index = {k: i for i, k in enumerate(self.keys)}
        self.K = len(self.keys) + 1  # last row: TorchRec's per-rank perf
        self.s0, self.s1 = 1.0 / max(scale[0], 1e-30), 1.0 / max(scale[1], 1e-30)
        self.weight = np.full(self.K, self.s0)
        self.weight[-1] = self.s1
        self.hold = np.zeros((len(STYPES), self.K))  # per group: fixed work on a rank holding any of its shards
        for i, st in enumerate(STYPES):
            _, w1 = cost._fixed({st: {0}}, self.w)
            _, w0 = cost._fixed({st: set()}, self.w)
            self.hold[i, :3] = w1[:, 0] - w0[:, 0]
        self._memo: dict[tuple, tuple[np.ndarray, dict[str, float]]] = {} if share is None else share._memo
        self._spread: dict[tuple, float] = {} if share is None else share._spread  # `spread`, by `_memo`'s keys
        self._consts: dict[tuple, float] = {} if share is None else share._consts
        self._mask_consts: list[float | None] = [None] * (1 << len(STYPES))  # `const_mask`, by mask
        self.table_plans: dict[tuple, TablePlan] = {} if share is None else share.table_plans  # immutable: shared
        self.raw_options: dict[tuple, list] = {} if share is None else share.raw_options  # `pack.Builder._priced`
        self.groups: dict[tuple, tuple] = {} if share is None else share.groups  # `pack.Builder._group`
        self.option_arrays: dict[tuple, dict] = {} if share is None else share.option_arrays  # `Builder._price_all`
        self.cuts: dict[tuple, object] = {} if share is None else share.cuts  # `pack.Builder.cuts`

    def const(self, groups: set[ShardingType]) -> float:
        """Fixed seconds of the step with these groups present (same on every rank), summed in `STYPES`' order: a
        set of `ShardingType`s (a str Enum) iterates in an order that changes with PYTHONHASHSEED, and with it the
        sum's last bit, from one process to the next."""
        key = tuple(sorted(groups, key=STYPES.index))
        if key not in self._consts:
            lat, work = self.cost._fixed({g: set() for g in key}, self.w)
            self._consts[key] = float(lat + work[:, 0].sum())
        return self._consts[key]

    def const_mask(self, mask: int) -> float:
        """`const` of the groups in `mask` (bit g: `STYPES[g]`), kept per mask in a list of 2^groups entries: the float
        `const` returns for that set (issue 16: `pack.retype` built, sorted and hashed a set of groups per trial)."""
        got = self._mask_consts[mask]
        if got is None:
            got = self._mask_consts[mask] = self.const({st for g, st in enumerate(STYPES) if mask >> g & 1})
        return got

    def shard(self, t: TableSpec, st: ShardingType, rows: int, cols: int, tier: str, cf: float,
              ) -> tuple[np.ndarray, dict[str, float]]:
        key = (t.name, st, rows, cols, tier, cf)
        got = self._memo.get(key)
        if got is None:
            c = self.cost.shard_cost(t, st, rows, cols, tier, cf)
            v = [c.fwd_compute, c.bwd_compute, c.optimizer] + [0.0] * (self.K - 3)  # the same float sums as in
            spread = 0.0  # an array, without numpy item adds
            for p, op, secs in self.cost.message_times(t, st, rows, cols):
                if self.cost.prices_by_mean(op):
                    spread += secs
                else:
                    v[self.index[(st, p, op)]] += secs
            v[-1] = self.trec.shard_cost(t, st, rows, cols, tier, cf).total
            self._spread[key] = spread
            got = self._memo[key] = (np.array(v), self.cost.shard_memory(t, st, rows, cols, tier, cf))
        return got

    def shard_many(self, keys: list[tuple[TableSpec, ShardingType, int, int, str, float]],
                   ) -> list[tuple[np.ndarray, dict[str, float]]]:
        """`shard` of many shards (t, type, rows, cols, tier, cache fraction), in order: the two models' memos of
        the missing ones filled at once first (their `price_many`: the same floats as their one-shard prices),
        then each missing vector built as `shard` builds it, all of them rows of one array (issue 16: the first
        pricing of every table's options was 30k `shard` calls on random:1000:1/256; nothing writes into a
        shard's vector). `spread` reads the memo as it is."""
        memo = self._memo
        names = [(t.name, st, rows, cols, tier, cf) for t, st, rows, cols, tier, cf in keys]
        todo = {key: k for key, k in zip(names, keys, strict=True) if key not in memo}
        if todo:
            args = list(todo.values())
            self.cost.price_many(args)
            self.trec.price_many(args)
            cost, trec, pad = self.cost, self.trec, [0.0] * (self.K - 4)
            slot: dict[tuple, int] = {}  # a message's row of the vector; −1: priced by the mean (`spread`)
            vecs: list = [None] * len(args)
            mems: list = [None] * len(args)
            spreads, index = self._spread, self.index
            cm, tm = cost._memo, trec._memo  # where their `price_many` put the shards of the fast tier (ours: without
            fast = None if cost.topology.lookup_weights else cost.topology.fast.name  # lookup weights): read there
            tfast = trec.topology.fast.name  # by their methods' own keys, with subscripts, not calls (issue 16:
            for j, (key, (t, st, rows, cols, tier, cf)) in enumerate(zip(todo, args, strict=True)):  # 10 per shard
                name = t.name
                ck, tk, mk = ("c", *key), ("t", name, st, rows, cols), ("m", *key)
                if tier == fast and ck in cm and tk in cm and mk in cm:
                    c, msgs, m = cm[ck], cm[tk], dict(cm[mk])  # a copy, as `shard_memory` returns
                else:
                    c, msgs = cost.shard_cost(t, st, rows, cols, tier, cf), cost.message_times(t, st, rows, cols)
                    m = cost.shard_memory(t, st, rows, cols, tier, cf)
                v = [c.fwd_compute, c.bwd_compute, c.optimizer, *pad, 0.0]  # as `shard`: the same float sums
                spread = 0.0
                for p, op, secs in msgs:
                    sk = (st, p, op)
                    if sk in slot:
                        i = slot[sk]
                    else:
                        i = slot[sk] = -1 if cost.prices_by_mean(op) else index[sk]
                    if i < 0:
                        spread += secs
                    else:
                        v[i] += secs
                tk = (name, st, cols, tier, cf)
                e = tm[tk] if tier == tfast and tk in tm else trec.shard_cost(t, st, rows, cols, tier, cf)
                v[-1] = e.fwd_compute + e.bwd_compute + e.fwd_comms + e.bwd_comms + e.optimizer  # `ShardCost.total`
                spreads[key] = spread
                vecs[j], mems[j] = v, m
            for key, v, m in zip(todo, np.array(vecs, dtype=np.float64), mems, strict=True):
                memo[key] = (v, m)
        return [memo[key] for key in names]

    def spread(self, t: TableSpec, st: ShardingType, rows: int, cols: int, tier: str, cf: float) -> float:
        """Seconds of the shard's all-to-all messages where the step pays an all-to-all's mean over ranks
        (`CostModel.collective_price` on CPU ranks, issue 19), 0 elsewhere. They are not rows of L: the mean is
        the shards' total / W wherever they sit, so moves and swaps leave it as it is, and the layout's total /
        W is part of `Loads.const` (J then prices the step as `CostModel.plan_cost` does)."""
        key = (t.name, st, rows, cols, tier, cf)
        if key not in self._spread:
            self.shard(t, st, rows, cols, tier, cf)
        return self._spread[key]

    def summary(self, v: np.ndarray) -> np.ndarray:
        """(ours, TorchRec) scaled seconds of a vector, as if it were alone on a rank (one compiled call)."""
        return summary(v, self.s0, self.s1)

    def score(self, maxima: np.ndarray, const: float) -> tuple[np.ndarray, np.ndarray]:
        """(J, ours + TorchRec) for row maxima `maxima` (K,) or (K, n)."""
        ours = self.s0 * (const + maxima[:-1].sum(axis=0))
        tr = self.s1 * maxima[-1]
        return np.maximum(ours, tr), ours + tr


@dataclass
class Piece:
    """A movable shard (TW, or one column block of CW) with its resource vector."""

    table: str
    st: ShardingType
    vec: np.ndarray  # (K,)
    mem: dict[str, float]
    rank: int = -1

    @property
    def gi(self) -> int:
        return GROUP[self.st]


class Loads(Bins):
    """`Bins` memory bookkeeping plus L (K, W) and per-group holder counts."""

    def __init__(self, res: Resources, topology, groups: set[ShardingType], spread: float = 0.0,  # noqa: ANN001
                 ) -> None:
        """`spread`: the layout's `Resources.spread` summed over its shards (placed or still to place)."""
        super().__init__(topology)
        self.res = res
        self.L = np.zeros((res.K, topology.world_size))
        self.count = np.zeros((len(STYPES), topology.world_size), dtype=np.int64)
        self.spread = spread
        self.const = self.const_with(groups)

    def const_with(self, groups: set[ShardingType], spread: float = 0.0) -> float:
        """The step's fixed seconds with these groups present and the layout's all-to-alls priced by the mean
        (`spread` more seconds of them): `Resources.const` + their mean over ranks."""
        return self.res.const(groups) + (self.spread + spread) / self.L.shape[1]

    def const_with_mask(self, mask: int, spread: float = 0.0) -> float:
        """`const_with` of the groups in `mask` (bit g: `STYPES[g]`, `Resources.const_mask`): the same float, without
        a set per call (issue 16: `pack.retype`'s trials)."""
        return self.res.const_mask(mask) + (self.spread + spread) / self.L.shape[1]

    def respread(self, delta: float) -> None:
        """The layout's `spread` changes by `delta` (a table changes type): so does `const`."""
        self.spread += delta
        self.const += delta / self.L.shape[1]

    def put(self, rank: int, st: ShardingType, vec: np.ndarray, mem: dict[str, float]) -> None:
        g = STYPES.index(st)
        if self.count[g, rank] == 0:
            self.L[:, rank] += self.res.hold[g]
        self.count[g, rank] += 1
        self.L[:, rank] += vec
        for t, b in mem.items():  # `Bins.add` without the load (unused here)
            self.used[t][rank] += b

    def put_all(self, st: ShardingType, vec: np.ndarray, mem: dict[str, float]) -> None:
        """`put` of one shard of this size on every rank (data-parallel replicas), vectorised."""
        g = STYPES.index(st)
        self.L += vec[:, None] + self.res.hold[g][:, None] * (self.count[g] == 0)[None, :]
        self.count[g] += 1
        for t, b in mem.items():
            self.used[t] += b

    def put_ranks(self, ranks: slice, st: ShardingType, vec: np.ndarray, mem: dict[str, float]) -> None:
        """`put` of one shard of this size on each of `ranks` (a slice: row-wise blocks of one size), vectorised."""
        g = STYPES.index(st)
        self.L[:, ranks] += self.res.hold[g][:, None] * (self.count[g, ranks] == 0)[None, :]  # as `put`: two sums
        self.L[:, ranks] += vec[:, None]
        self.count[g, ranks] += 1
        for t, b in mem.items():
            self.used[t][ranks] += b

    def take_ranks(self, ranks: slice, st: ShardingType, vec: np.ndarray, mem: dict[str, float]) -> None:
        """`take` of one shard of this size from each of `ranks`, vectorised."""
        g = STYPES.index(st)
        self.count[g, ranks] -= 1
        self.L[:, ranks] -= self.res.hold[g][:, None] * (self.count[g, ranks] == 0)[None, :]
        self.L[:, ranks] -= vec[:, None]
        for t, b in mem.items():
            self.used[t][ranks] -= b

    def take(self, rank: int, st: ShardingType, vec: np.ndarray, mem: dict[str, float]) -> None:
        g = STYPES.index(st)
        self.count[g, rank] -= 1
        if self.count[g, rank] == 0:
            self.L[:, rank] -= self.res.hold[g]
        self.L[:, rank] -= vec
        for t, b in mem.items():  # `Bins.remove` without the load (unused here)
            self.used[t][rank] -= b

    def objective(self) -> tuple[float, float]:
        j, s = self.res.score(self.L.max(axis=1), self.const)
        return float(j), float(s)

    def _added(self, g: int, vec: np.ndarray) -> np.ndarray:
        """(K, W): what adding `vec` of group g puts on each rank, its holder overhead included."""
        return vec[:, None] + self.res.hold[g][:, None] * (self.count[g] == 0)[None, :]

    def _ssq(self, cols: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """Change of the weighted Σ L² when columns `cols`' loads (K, n) change by `delta` (K, n)."""
        return (self.res.weight[:, None] * delta * (2 * cols + delta)).sum(axis=0)

    def place_scores(self, g: int, vec: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(J, secondary, Δ Σ L²) after adding `vec` to each rank."""
        add = self._added(g, vec)
        new = np.maximum(self.L.max(axis=1)[:, None], self.L + add)
        j, s = self.res.score(new, self.const)
        return j, s, self._ssq(self.L, add)

    def place_best(self, g: int, vec: np.ndarray, ok: np.ndarray) -> int:
        """`best_of(*self.place_scores(g, vec), ok)` in one compiled call (`search_kernels.place_best`)."""
        res = self.res
        return place_best(self.L, self.count, res.hold, res.weight, res.s0, res.s1, self.const, g, vec, ok)

    def host_scores(self, g: int, shards: list[tuple[np.ndarray, dict[str, float]]], const: float,
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(fits, J, secondary) per host after putting shards[i] (group g) on each host's i-th rank (a
        table-row-wise group), all hosts at once; `const` is the step's fixed cost with the group present. One
        compiled call (`search_kernels.host_scores`; `host_scores_reference` is its numpy form)."""
        vecs = np.array([v for v, _ in shards])
        return self.host_scores_arrays(g, vecs, np.array([[m.get(t, 0.0) for t in self.tiers] for _, m in shards]),
                                       const)

    def host_scores_arrays(self, g: int, vecs: np.ndarray, mems: np.ndarray, const: float,
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`host_scores` of shards given as arrays: vectors (h, K), bytes per tier (h, tiers) (a table's are the
        same on every trial: `pack.Cuts`)."""
        tiers = self.tiers
        return host_scores(self.L, self.count, self.res.hold, self.res.s0, self.res.s1, const, g, vecs, mems,
                           np.stack([self.used[t] for t in tiers]), np.array([self.cap[t] for t in tiers], float))

    def host_scores_reference(self, g: int, shards: list[tuple[np.ndarray, dict[str, float]]], const: float,
                              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`host_scores` in numpy (tests check the kernel against it)."""
        h = len(shards)
        n = self.L.shape[1] // h
        vec = np.stack([v for v, _ in shards], axis=1)[:, None, :]  # (K, 1, h)
        new = self.L.reshape(self.L.shape[0], n, h) + self.res.hold[g][:, None, None] * \
            (self.count[g].reshape(n, h) == 0)[None]
        new += vec
        maxima = np.maximum(self.L.max(axis=1)[:, None], new.max(axis=2))  # (K, n): adding only raises maxima
        j, s = self.res.score(maxima, const)
        ok = np.ones(n, dtype=bool)
        for i, (_, m) in enumerate(shards):
            for t, b in m.items():
                if b > 0:
                    ok &= self.used[t].reshape(n, h)[:, i] + b <= self.cap[t] * (1 + 1e-12)
        return ok, j, s

    def top3(self) -> tuple[np.ndarray, np.ndarray]:
        """Per row, the indices and values of its three largest entries (padded with rank −1, value 0); among equal
        loads the lower rank first, on every CPU (`search_kernels.top3`)."""
        return top3(self.L)

    @staticmethod
    def _rest(top: tuple[np.ndarray, np.ndarray], a: int, bs: np.ndarray) -> np.ndarray:
        """(K, n): per row, the max over ranks other than a and bs[j]."""
        idx, vals = top  # per row, the first two of its top three that are not rank a (ranks are distinct):
        a0, a01 = idx[:, 0] == a, (idx[:, 0] == a) | (idx[:, 1] == a)  # bs[j] is the first of them, or it is not
        first, v0 = np.where(a0, idx[:, 1], idx[:, 0]), np.where(a0, vals[:, 1], vals[:, 0])
        v1 = np.where(a01, vals[:, 2], vals[:, 1])
        return np.where(bs[None, :] == first[:, None], v1[:, None], v0[:, None])

    def move_scores(self, top: tuple[np.ndarray, np.ndarray], a: int, g: int, vec: np.ndarray,
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(J, secondary, Δ Σ L²) after moving `vec` (group g) from rank a to each rank (entry a: no move)."""
        bs = np.arange(self.L.shape[1])
        rem = vec + self.res.hold[g] * (self.count[g, a] == 1)
        add = self._added(g, vec)
        la = self.L[:, a] - rem
        new = np.maximum(np.maximum(self._rest(top, a, bs), la[:, None]), self.L + add)
        j, s = self.res.score(new, self.const)
        q = self._ssq(self.L, add) + self._ssq(self.L[:, [a]], -rem[:, None])[0]
        return j, s, q

    def swap_scores(self, top: tuple[np.ndarray, np.ndarray], a: int, gi: int, vi: np.ndarray,
                    bs: np.ndarray, gj: np.ndarray, vj: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Scores of swapping piece i (rank a) with each piece j (rank bs[j], group gj[j], vector vj[j])."""
        hold, cnt = self.res.hold, self.count
        diff = (gj != gi)[None, :]
        da = (vj - vi).T + diff * (hold[gj].T * (cnt[gj, a] == 0)[None, :] - hold[gi][:, None] * (cnt[gi, a] == 1))
        db = (vi - vj).T + diff * (hold[gi][:, None] * (cnt[gi, bs] == 0)[None, :]
                                   - hold[gj].T * (cnt[gj, bs] == 1)[None, :])
        la, lb = self.L[:, [a]], self.L[:, bs]
        new = np.maximum(np.maximum(self._rest(top, a, bs), la + da), lb + db)
        j, s = self.res.score(new, self.const)
        return j, s, self._ssq(la, da) + self._ssq(lb, db)


def best_of(j: np.ndarray, s: np.ndarray, q: np.ndarray, ok: np.ndarray) -> int:
    """Index minimising (J, secondary, ΔΣL²) lexicographically with a relative tolerance; −1 if none is ok."""
    if len(j) <= 32:  # the same selection in plain Python: numpy's per-call cost dominates on few ranks
        idx = [i for i, good in enumerate(ok.tolist()) if good]
        if not idx:
            return -1
        jl, sl, ql = j.tolist(), s.tolist(), q.tolist()
        jm = min(jl[i] for i in idx)
        idx = [i for i in idx if jl[i] <= jm * (1 + _TOL) + _TOL]
        sm = min(sl[i] for i in idx)
        idx = [i for i in idx if sl[i] <= sm * (1 + _TOL) + _TOL]
        return min(idx, key=lambda i: ql[i])
    if not ok.any():
        return -1
    j = np.where(ok, j, np.inf)
    cand = j <= j.min() * (1 + _TOL) + _TOL
    s = np.where(cand, s, np.inf)
    cand &= s <= s.min() * (1 + _TOL) + _TOL
    return int(np.argmin(np.where(cand, q, np.inf)))


def _search_arrays(state: Loads, pieces: list[Piece]) -> tuple:
    """The pieces as the search kernels take them: (resources, rank, vector, group, table id, weighted size,
    whether the table has other blocks, memory per tier, the tiers' used and capacity)."""
    res = state.res
    ranks = np.array([p.rank for p in pieces], dtype=np.int64)
    vecs = np.array([p.vec for p in pieces])
    groups = np.array([GROUP[p.st] for p in pieces], dtype=np.int64)
    tables = table_ids(pieces)
    size = (vecs * res.weight).sum(axis=1)
    multi = np.bincount(tables) > 1
    mems = piece_bytes(pieces, state.tiers)
    used = np.stack([state.used[t] for t in state.tiers])
    cap = np.array([state.cap[t] for t in state.tiers], dtype=np.float64)
    return res, ranks, vecs, groups, tables, size, multi, mems, used, cap


def table_ids(pieces: list[Piece]) -> np.ndarray:
    """Each piece's table as an index, tables numbered in order of first appearance; a fixed number of Python
    calls, not a few per piece (r1000 builds ~27k of these rows per plan)."""
    names = [p.table for p in pieces]
    ids = {n: i for i, n in enumerate(dict.fromkeys(names))}
    return np.array([ids[n] for n in names], dtype=np.int64)


def piece_bytes(pieces: list[Piece], tiers: list[str]) -> np.ndarray:
    """(pieces, tiers): each piece's bytes per tier (0 where it has none), built a tier at a time (the same
    floats as row by row, in a fixed number of Python calls)."""
    cols = [[p.mem[t] if t in p.mem else 0.0 for p in pieces] for t in tiers]
    return np.ascontiguousarray(np.array(cols, dtype=np.float64).reshape(len(tiers), len(pieces)).T)


def _write_back(state: Loads, pieces: list[Piece], ranks: np.ndarray, used: np.ndarray) -> None:
    """The search's result into the state's memory use and the pieces' ranks."""
    for i, t in enumerate(state.tiers):
        state.used[t][:] = used[i]
    for p, r in zip(pieces, ranks.tolist(), strict=True):
        p.rank = r


def local_search(state: Loads, pieces: list[Piece], max_iters: int) -> int:
    """Moves, then swaps, of pieces on the ranks that hold some row's maximum, first improvement of
    (J, secondary, Σ L²); a table's column blocks stay on distinct ranks. Returns the iterations used.
    `max_iters` ends it (counted work, not the clock: the same plan on any machine). The loop is one compiled call
    (`search_kernels.search`: per iteration the hot ranks, their largest pieces, and `try_rank`'s moves and swaps);
    `local_search_reference` is the same loop in Python, the hot ranks and their pieces ordered with numpy."""
    if not pieces or state.L.shape[1] < 2:
        return 0
    res, ranks, vecs, groups, tables, size, multi, mems, used, cap = _search_arrays(state, pieces)
    it = search(state.L, state.count, res.hold, res.weight, res.s0, res.s1, state.const, ranks, vecs, size, groups,
                tables, multi, mems, used, cap, max_iters, HOT_RANKS, TRY_PIECES)
    _write_back(state, pieces, ranks, used)
    return it


def local_search_reference(state: Loads, pieces: list[Piece], max_iters: int) -> int:
    """`local_search` with its loop in Python, hot ranks and their pieces ordered with numpy and `list.sort`
    (tests check the two agree, plan for plan)."""
    if not pieces or state.L.shape[1] < 2:
        return 0
    res, ranks, vecs, groups, tables, size, multi, mems, used, cap = _search_arrays(state, pieces)
    it = max_iters
    for n in range(max_iters):
        j0, s0 = state.objective()
        topi, topv = state.top3()
        hot = [int(r) for r in dict.fromkeys(topi[topv[:, 0] > 0, 0].tolist()) if r >= 0]
        hot.sort(key=lambda r: -float((state.L[:, r] * res.weight).sum()))
        for a in hot[:HOT_RANKS]:
            on_a = np.flatnonzero(ranks == a)
            order = on_a[np.argsort(-size[on_a], kind="stable")][:TRY_PIECES]
            if try_rank(state.L, state.count, res.hold, res.weight, res.s0, res.s1, state.const, topi, topv, a,
                        order, ranks, vecs, groups, tables, multi, mems, used, cap, j0, s0):
                break
        else:
            it = n
            break
    _write_back(state, pieces, ranks, used)
    return it
