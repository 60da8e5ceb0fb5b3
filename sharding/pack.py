"""One packing attempt of our optimizer: pick each table's sharding type, place the shards, search locally.
Shards are priced on the step's resources by `sharding.search.Resources` (both models, each over its bound).

Sharding-type moves (`retype`): After the moves and swaps of `sharding.search` settle, the largest
table-wise pieces on the ranks holding some row's maximum are re-cut column-wise (k ≤ MAX_SPLIT blocks),
table-row-wise (one host) or replicated data-parallel (small tables in the fast tier), the new shards placed
greedily on the ranks with the least (J, secondary); a column-wise table there may be merged back into one
table-wise shard. Then the data-parallel tables, largest replica first, are tried sharded again (one table-wise
piece, or table-row-wise on one host): a replica loads the hottest rank too, while a shard can go where there is
room (issue 16: on f14 and f34 of `sharding.family`, TorchRec's all-TWRW plans beat ours by 9-10% on its estimator
because our packings replicated half the tables). A change is kept only if it alone improves (J, secondary) (the
state is restored otherwise); the caller then runs the local search again.

Re-cutting changes which sharding groups are present, so the step's fixed cost (`Loads.const`) is recomputed on
every trial. At most RETYPE_ROUNDS changes, and a fixed set of trials per round (not the clock), end the phase,
so the plan is the same on any machine. (Tried and dropped: judging each re-cut after a short local search
instead of alone; it cost 0.2 s on 856 tables for 0.3% of step time.)
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from functools import partial
from itertools import compress
from operator import itemgetter

import numpy as np

from embedding.spec import TableSpec
from sharding.choose_kernel import choose_options
from sharding.layouts import column_splits, row_ranges, row_sizes, table_plan, torchrec_column_pieces
from sharding.lns import loads_of
from sharding.plan import ShardingPlan, ShardingType, TablePlan
from sharding.retype_kernel import best_cut, merge_trial, replicas_score
from sharding.search import (
    _TOL,
    GROUP,
    HOT_RANKS,
    STYPES,
    Loads,
    Piece,
    Resources,
    local_search,
    piece_bytes,
    table_ids,
)
from sharding.search_kernels import better, pairwise_sum, place_all, place_cut, place_groups, put_blocks, row_sums
from sharding.unreplicate_kernel import _lexmin_host as lexmin_host
from sharding.unreplicate_kernel import unreplicate_trial

__all__ = ["Builder", "NoFit", "repolish", "retype", "copy_placed", "Option", "RETYPE_ROUNDS"]

TW, CW, RW, TWRW, DP = (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.ROW_WISE,
                        ShardingType.TABLE_ROW_WISE, ShardingType.DATA_PARALLEL)
Option = tuple[ShardingType, int, np.ndarray, float]  # (type, pieces, summed (ours, TorchRec) work, largest piece)
RETYPE_ROUNDS, HOT_TABLES = 24, 3  # re-cuts (or merges) at most per packing; largest pieces tried per hot rank
MAX_SPLIT = 8  # column-wise re-cuts tried: k ≤ this
_PIECE = itemgetter(3)  # an option's largest piece


class NoFit(Exception):
    """This attempt's shards do not fit; another attempt (or the all-row-wise fallback) may."""


class Builder:
    """Packs the workload for fixed thresholds; `tiers` maps a table to (tier, cache fraction). `iters` is the
    local search's iteration budget per packing (it, not the clock, decides the plan)."""

    rw = RW

    def __init__(self, res: Resources, tiers: dict[str, tuple[str, float]], iters: int = 2000,
                 share: Builder | None = None) -> None:
        """`share`: a builder on the same `res` and tiers whose priced options this one reuses."""
        self.res, self.tiers, self.iters = res, tiers, iters
        self.retype_rounds = RETYPE_ROUNDS  # sharding-type moves after the first local search (0: none)
        self.least_loaded = False  # place pieces as TorchRec's greedy partitioner does (`place`)
        self.torchrec_columns = False  # `choose`: column-wise only in the blocks TorchRec's enumerator cuts
        self.cost = res.cost
        self.topo = res.cost.topology
        self.usable = {x.name: self.topo.usable(x.name) for x in self.topo.tiers}  # `Topology.usable`, per tier
        if share is not None and share.res is res and share.tiers is tiers:
            self._options, self._prices, self._groups, self.avg = share._options, share._prices, share._groups, share.avg
            self._batch, self._blocks = share._batch, share._blocks
            return
        self._blocks: dict[tuple, list] = {}  # `_fixed_blocks`
        self._options: dict[tuple[str, float, bool], tuple] = {}  # `_feasible`
        self._prices: dict[str, list] = {}
        self._batch: dict[str, object] = {}  # `_price_all`: every table's options as arrays, for `_mask`
        self._groups: dict[tuple, tuple[float, np.ndarray, np.ndarray]] = {}  # `_group`
        tables = self.cost.workload.tables
        vecs = np.array([v for v, _ in res.shard_many([(t, TW, t.rows, t.dim, *tiers[t.name]) for t in tables])])
        spread = np.array([self.shard_spread(t, TW, t.rows, t.dim) for t in tables]) if res.by_mean else 0.0
        tw = np.stack([res.s0 * (vecs[:, :-1].sum(axis=1) + spread), res.s1 * vecs[:, -1]], axis=1)  # `summary`
        self.avg = float((tw.sum(axis=0) / self.topo.world_size).max())  # average rank load, larger component

    def shard(self, t: TableSpec, st: ShardingType, rows: int, cols: int) -> tuple[np.ndarray, dict[str, float]]:
        return self.res.shard(t, st, rows, cols, *self.tiers[t.name])

    def shard_spread(self, t: TableSpec, st: ShardingType, rows: int, cols: int) -> float:
        return self.res.spread(t, st, rows, cols, *self.tiers[t.name]) if self.res.by_mean else 0.0

    def spread(self, t: TableSpec, st: ShardingType, k: int) -> float:
        """`Resources.spread` summed over table t's k shards of type st (`Loads.spread`'s share of the table):
        the sizes and summaries of options add it (it is the table's step time, wherever it sits)."""
        if not self.res.by_mean:
            return 0.0
        if st in (TW, CW, DP):
            return k * self.shard_spread(t, st, t.rows, t.dim // k if st == CW else t.dim)
        return sum(n * self.shard_spread(t, st, rows, t.dim) for rows, n in row_sizes(t.rows, k))

    def _feasible(self, t: TableSpec, mu: float, allow_dp: bool, torchrec: bool = False,
                  ) -> tuple[list[Option], list[float], int, int]:
        """Feasible options of table t (a piece must fit μ of a rank; RW always qualifies: it is the fallback that
        spreads memory evenly; `torchrec`: column-wise only in the blocks TorchRec's enumerator cuts, the
        references' own proposals), memoised with what `choose` reads of them on every attempt: each option's
        larger summed work (`float(o[2].max())`), the index of the table-wise option and of the first
        data-parallel one (−1 if absent). Which options qualify is decided for every table's options at once
        (`_mask`); `_feasible_reference` is the same one table at a time (the tests check them equal)."""
        key = (t.name, mu, allow_dp, "torchrec") if torchrec else (t.name, mu, allow_dp)
        got = self._options.get(key)
        if got is None:
            priced = self._priced(t)
            span = self._batch["span"].get(t.name)
            if span is None:  # a table outside the workload
                got = self._options[key] = self._feasible_reference(t, mu, allow_dp, torchrec)
                return got
            lo, hi = span
            idx = list(compress(range(hi - lo), self._mask(mu, allow_dp, torchrec)[lo:hi]))
            if self.topo.world_size == 1 and not any(self._mask(mu, allow_dp, False)[lo:hi]):
                idx.append(hi - lo - 1)  # the RW fallback (last), where no other option qualifies
            opts, most, tw, dp = [priced[i][:4] for i in idx], [priced[i][5] for i in idx], -1, -1
            for j, o in enumerate(opts):
                if o[0] is TW:
                    tw = j
                elif o[0] is DP and dp < 0:
                    dp = j
            got = self._options[key] = (opts, most, tw, dp)
        return got

    def _torchrec_feasible(self, t: TableSpec, mu: float, allow_dp: bool,
                           ) -> tuple[list[Option], list[float], int, int]:
        """`_feasible` with column-wise only in the blocks TorchRec's enumerator cuts."""
        return self._feasible(t, mu, allow_dp, True)

    def _mask(self, mu: float, allow_dp: bool, torchrec: bool) -> list[bool]:
        """Which of every table's options (`_price_all`'s order) qualify, as `_feasible_reference` decides:
        allowed (DP only with `allow_dp`, the others for μ > 0) and each tier's bytes of a piece ≤ μ of the
        rank's usable bytes (the same products and comparisons), column-wise only in TorchRec's blocks with
        `torchrec`; RW always on more than one rank (on one, `_feasible` adds it where nothing else qualifies);
        memoised per argument."""
        masks, key = self._batch["masks"], (mu, allow_dp, torchrec)
        if key not in masks:
            kind, mem = self._batch["kind"], self._batch["mem"]
            limit = np.array([mu * u for u in self.usable.values()])
            ok = (kind != GROUP[RW]) & np.where(kind == GROUP[DP], allow_dp, mu > 0) & (mem <= limit).all(axis=1)
            if torchrec:
                ok &= self._batch["trec_ok"]
            if self.topo.world_size > 1:
                ok |= kind == GROUP[RW]
            masks[key] = ok.tolist()
            masks[key, "array"] = ok
        return masks[key]

    def _feasible_reference(self, t: TableSpec, mu: float, allow_dp: bool, torchrec: bool = False,
                            ) -> tuple[list[Option], list[float], int, int]:
        """`_feasible` one table at a time, unmemoised (the reference the batched path is checked against)."""
        usable = self.usable
        out = [o for o in self._priced_one(t) if o[0] != RW and (allow_dp if o[0] == DP else mu > 0)
               and all(b <= mu * usable[k] for k, b in o[4].items())]
        if self.topo.world_size > 1 or not out:
            out.append(self._priced_one(t)[-1])
        if torchrec:
            out = [o for o in out if o[0] != CW or o[1] == torchrec_column_pieces(t.dim)]
        tw = [i for i, o in enumerate(out) if (o[0], o[1]) == (TW, 1)]
        dp = [i for i, o in enumerate(out) if o[0] == DP]
        return [o[:4] for o in out], [o[5] for o in out], tw[-1] if tw else -1, dp[0] if dp else -1

    def _priced(self, t: TableSpec) -> list[tuple[ShardingType, int, np.ndarray, float, dict[str, float], float]]:
        """Every option of table t (DP first, when its tier is the fast one; RW last), priced once for all μ: as
        `Option` plus the memory one piece needs and the larger summed work (the array's `max`); every table of
        the workload at once on the first call (`_price_all`)."""
        got = self._prices.get(t.name)
        if got is None:
            self._price_all()
            b = self._batch
            span = b["span"].get(t.name)
            if span is None:  # a table outside the workload
                got = self._prices[t.name] = self._priced_one(t)
                return got
            opts, work, largest, most = b["opts"], b["work"], b["largest"], b["most"]
            got = self._prices[t.name] = [(opts[j][0], opts[j][1], work[j], largest[j], opts[j][3], most[j])
                                          for j in range(*span)]
        return got

    def _price_all(self) -> None:
        """`_priced_one` of every table of the workload, numpy over all their options (issue 16: one table at a
        time, the first pricing took 6,000 `choose` calls and 30k shard look-ups on random:1000:1/256): the same
        IEEE operations in the same order (an option has ≤ 3 distinct pieces; the missing ones add 0.0), so the
        same floats (tests/sharding). Also keeps what `_mask` reads: each option's group, bytes of one piece per
        tier (−inf where it has none), whether TorchRec's enumerator cuts it, and each table's span; those and the
        masks do not depend on the scales, so builders of other scales share them (`Resources.option_arrays`)."""
        batch, tables = self._batch, self.cost.workload.tables
        if "span" in batch:
            return
        raws = self._raw_all(tables)
        key = tuple((t.name, *self.tiers[t.name]) for t in tables)
        shared = self.res.option_arrays.get(key)
        if shared is None:  # what does not depend on the scales: the same for the builders of other scales
            opts = [o for raw in raws for o in raw]
            tiers = list(self.usable)
            span, bounds, trec_ok, i = {}, [], [], 0
            for t, raw in zip(tables, raws, strict=True):
                span[t.name] = (i, i + len(raw))
                bounds.append(span[t.name])
                cut = torchrec_column_pieces(t.dim)
                trec_ok += [o[0] != CW or o[1] == cut for o in raw]
                i += len(raw)
            ends = np.array(bounds, dtype=np.int64).reshape(len(bounds), 2)
            shared = self.res.option_arrays[key] = dict(
                span=span, masks={}, opts=opts, picks=[(o[0], o[1]) for o in opts],
                blocks=np.array([[*o[2], *((0.0, 0.0, 0),) * (3 - len(o[2]))] for o in opts], dtype=np.float64),
                pad=np.arange(3)[None, :] >= np.array([len(o[2]) for o in opts])[:, None],
                lo=np.ascontiguousarray(ends[:, 0]), hi=np.ascontiguousarray(ends[:, 1]),
                kind=np.array([GROUP[o[0]] for o in opts], dtype=np.int64), trec_ok=np.array(trec_ok, dtype=bool),
                mem=np.array([o[3].get(x, -np.inf) for o in opts for x in tiers],
                             dtype=np.float64).reshape(len(opts), len(tiers)))
        blocks = shared["blocks"]
        x, y, n = self.res.s0 * blocks[:, :, 0], self.res.s1 * blocks[:, :, 1], blocks[:, :, 2]
        ours = (x[:, 0] * n[:, 0] + x[:, 1] * n[:, 1]) + x[:, 2] * n[:, 2]
        trec = (y[:, 0] * n[:, 0] + y[:, 1] * n[:, 1]) + y[:, 2] * n[:, 2]
        largest_array = np.where(shared["pad"], -np.inf, np.where(x >= y, x, y)).max(axis=1)
        most_array = np.where(ours >= trec, ours, trec)
        batch.update(shared, work=np.stack([ours, trec], axis=1), largest=largest_array.tolist(),
                     most=most_array.tolist(), largest_array=largest_array, most_array=most_array, chosen={})

    def _priced_one(self, t: TableSpec) -> list[tuple[ShardingType, int, np.ndarray, float, dict[str, float],
                                                      float]]:
        """`_priced` of table t alone (the reference `_price_all` is checked against). Each piece's summary is
        s0 × (its unscaled sum of ours) and s1 × (TorchRec's), as `Resources.summary` computes it; the unscaled
        sums are shared by every builder on the same shard prices (`_raw_options`), so the builders for other
        scales redo only the products."""
        s0, s1 = self.res.s0, self.res.s1
        out: list[tuple[ShardingType, int, np.ndarray, float, dict[str, float], float]] = []
        for st, k, blocks, mem in self._raw_options(t):
            ours = trec = 0  # `sum` of each piece's summary × its count, as numpy adds them
            largest = None
            for a, b, n in blocks:
                x, y = s0 * a, s1 * b
                ours, trec = ours + x * n, trec + y * n
                m = x if x >= y else y
                largest = m if largest is None or m > largest else largest
            out.append((st, k, np.array([ours, trec]), float(largest), mem, float(ours if ours >= trec else trec)))
        return out

    def _option_shards(self, t: TableSpec) -> list[tuple[ShardingType, int, list[tuple[int, int, int]]]]:
        """Every option of table t as (type, pieces, [(rows, cols, count)] of its distinct pieces)."""
        topo, w, h = self.topo, self.topo.world_size, min(self.topo.ranks_per_host, self.topo.world_size)
        out: list = []
        if self.tiers[t.name][0] == topo.fast.name:  # one rank too: a lone replica (DDP) is valid
            out.append((DP, w, [(t.rows, t.dim, w)]))  # a replica on every rank (`pack` drops those that overfill)
        for k in [1] + [k for k in column_splits(t.dim) if k <= w]:
            out.append((TW if k == 1 else CW, k, [(t.rows, t.dim // k, k)]))
        if h > 1 and topo.num_hosts > 1:
            out.append((TWRW, h, [(r, t.dim, k) for r, k in row_sizes(t.rows, h)]))
        out.append((RW, w, [(r, t.dim, k) for r, k in row_sizes(t.rows, w)]))
        return out

    def _raw_all(self, tables: list[TableSpec]) -> list[list]:
        """`_raw_options` of many tables, the missing ones' shards priced in one pass (`Resources.shard_many`)
        and each shard's unscaled sum of ours as `pairwise_sum` gives it (`row_sums`)."""
        raw, todo = self.res.raw_options, {}
        for t in tables:
            key = (t.name, *self.tiers[t.name])
            if key not in raw and key not in todo:
                todo[key] = (t, self._option_shards(t))
        if todo:
            keys = [(t, st, r, c, *self.tiers[t.name]) for t, opts in todo.values() for st, _, pieces in opts
                    for r, c, _ in pieces]
            got = self.res.shard_many(keys)
            vecs = np.array([v for v, _ in got])
            ours = row_sums(vecs[:, :-1])
            if self.res.by_mean:
                ours = ours + np.array([self.res.spread(*k) for k in keys])
            a, b, i = ours.tolist(), vecs[:, -1].tolist(), 0
            for key, (_, opts) in todo.items():
                out = []
                for st, k, pieces in opts:
                    out.append((st, k, [(a[j], b[j], n) for j, (_, _, n) in enumerate(pieces, i)],
                                {} if st == RW else got[i][1]))
                    i += len(pieces)
                raw[key] = out
        return [raw[(t.name, *self.tiers[t.name])] for t in tables]

    def _raw_options(self, t: TableSpec) -> list[tuple[ShardingType, int, list[tuple[float, float, int]],
                                                        dict[str, float]]]:
        """Every option of table t as (type, pieces, [(unscaled sum of ours, TorchRec's, count)] of its distinct
        pieces, memory of one piece); memoised on the shared `Resources.raw_options`."""
        key = (t.name, *self.tiers[t.name])
        raw = self.res.raw_options
        if key in raw:
            return raw[key]
        topo, w, h = self.topo, self.topo.world_size, min(self.topo.ranks_per_host, self.topo.world_size)

        def sums(v: np.ndarray, n: int, spread: float) -> tuple[float, float, int]:
            return pairwise_sum(v[:-1]) + spread, float(v[-1]), n

        out: list = []
        if self.tiers[t.name][0] == topo.fast.name:  # one rank too: a lone replica (DDP) is valid
            dv, dm = self.shard(t, DP, t.rows, t.dim)  # a replica on every rank (`pack` drops those that overfill)
            out.append((DP, w, [sums(dv, w, self.shard_spread(t, DP, t.rows, t.dim))], dm))
        for k in [1] + [k for k in column_splits(t.dim) if k <= w]:
            st = TW if k == 1 else CW
            v, m = self.shard(t, st, t.rows, t.dim // k)
            out.append((st, k, [sums(v, k, self.shard_spread(t, st, t.rows, t.dim // k))], m))
        if h > 1 and topo.num_hosts > 1:
            shards = [(self.shard(t, TWRW, r, t.dim), k, r) for r, k in row_sizes(t.rows, h)]
            out.append((TWRW, h, [sums(v, k, self.shard_spread(t, TWRW, r, t.dim)) for (v, _), k, r in shards],
                        shards[0][0][1]))
        shards = [(self.shard(t, RW, r, t.dim), k, r) for r, k in row_sizes(t.rows, w)]
        out.append((RW, w, [sums(v, k, self.shard_spread(t, RW, r, t.dim)) for (v, _), k, r in shards], {}))
        raw[key] = out
        return out

    def _group(self, t: TableSpec, tiers: list[str]) -> tuple[float, np.ndarray, np.ndarray]:
        """Table t table-row-wise on one host: (its shards' summed summary, the larger component; their vectors
        (h, K); their bytes per tier (h, tiers)), memoised per table and tier (the same for every packing)."""
        key = (t.name, *self.tiers[t.name])
        if key not in self._groups:
            raw_key = (*key, *tiers)  # vectors and bytes: the same for builders on other scales (`Resources.groups`)
            raw = self.res.groups.get(raw_key)
            if raw is None:
                h = min(self.topo.ranks_per_host, self.topo.world_size)
                shards = []  # as `row_ranges(t.rows, h)`: each distinct row count priced once
                for rows, n in row_sizes(t.rows, h) if t.rows else [(0, h)]:
                    v, m = self.shard(t, TWRW, rows, t.dim)
                    pair = (pairwise_sum(v[:-1]) + self.shard_spread(t, TWRW, rows, t.dim), float(v[-1]))
                    shards += [(pair, v, [m.get(x, 0.0) for x in tiers])] * n
                raw = self.res.groups[raw_key] = ([s[0] for s in shards], np.array([s[1] for s in shards]),
                                                  np.array([s[2] for s in shards]))
            s0, s1 = self.res.s0, self.res.s1
            ours = trec = 0.0  # Σ `summary` over the shards, as numpy adds their (ours, TorchRec) pairs in order
            for a, b in raw[0]:
                ours, trec = ours + s0 * a, trec + s1 * b
            self._groups[key] = (ours if ours >= trec else trec, raw[1], raw[2])
        return self._groups[key]

    def cuts(self, t: TableSpec) -> Cuts:
        """`Cuts` of table t on this builder's shards and spreads, memoised per table and tier: the same for
        every packing and every scale, so kept in `Resources.cuts`, shared by the resources on other scales)."""
        key = (t.name, *self.tiers[t.name])
        got = self.res.cuts.get(key)
        if got is None:
            got = self.res.cuts[key] = Cuts(self.topo, self.shard, self.spread, t)
        return got

    def choose_all(self, theta: float, mu: float, allow_dp: bool, least_work: bool | int = False,
                   twrw_first: bool = False, uniform: ShardingType | None = None,
                   ) -> dict[str, tuple[ShardingType, int]]:
        """`choose` of every table of the workload, {name: (type, pieces)} in the workload's order: one compiled
        pass over `_price_all`'s arrays (`choose_kernel.choose_options`; tests check it equals `choose` table by
        table), memoised per argument (a new dict each call: callers change it)."""
        self._price_all()
        b = self._batch
        trec = self.torchrec_columns
        key = (theta, mu, allow_dp, least_work, twrw_first, uniform, trec)
        got = b["chosen"].get(key)
        if got is None:
            self._mask(mu, allow_dp, trec)
            ok = b["masks"][(mu, allow_dp, trec), "array"]
            if self.topo.world_size == 1:  # `_feasible`'s RW fallback (last) where no option qualifies
                self._mask(mu, allow_dp, False)
                none = np.logical_or.reduceat(b["masks"][(mu, allow_dp, False), "array"], b["lo"]) == 0
                ok = ok.copy()
                ok[b["hi"][none] - 1] = True
            mode = least_work if least_work is not True and least_work in (2, 3) else 1 if least_work else 0
            idx = np.empty(len(b["lo"]), dtype=np.int64)
            choose_options(b["lo"], b["hi"], ok, b["kind"], b["work"], b["largest_array"], b["most_array"],
                           theta * self.avg, -1 if uniform is None else GROUP[uniform], mode, twrw_first,
                           GROUP[DP], GROUP[TW], GROUP[CW], GROUP[TWRW], idx)
            picks, last = b["picks"], (RW, self.topo.world_size)
            got = b["chosen"][key] = [picks[i] if i >= 0 else last for i in idx.tolist()]
        return dict(zip([t.name for t in self.cost.workload.tables], got, strict=True))

    def choose(self, t: TableSpec, theta: float, mu: float, allow_dp: bool, least_work: bool | int = False,
               twrw_first: bool = False, uniform: ShardingType | None = None) -> tuple[ShardingType, int]:
        """Sharding type and piece count for table t. Split mode: the first of DP (if replicas cost less in
        total), TW, CW by increasing k whose piece scores ≤ θ × average rank load, then
        TWRW, then RW (`twrw_first`: TWRW before CW: a column block still receives all of a table's ids).
        Least-work mode: among options whose pieces score ≤ θ × average, the least total work (as TorchRec's
        proposers rank options), else the option with the smallest piece. `least_work` = 2 or 3 (model 0: ours,
        1: TorchRec's, as `least_work` − 2): the option with the least total work by that model alone, whatever its
        pieces' size (TorchRec's greedy proposer starts from the same choice)."""
        opts, most, tw, dp = (self._torchrec_feasible if self.torchrec_columns else self._feasible)(t, mu, allow_dp)
        limit = theta * self.avg
        if uniform is not None:  # every table this type where it fits (as TorchRec's UniformProposer), else
            same = [o for o in opts if o[0] == uniform]  # the option with the smallest piece
            pick = same[0] if same else min(opts, key=lambda o: o[3])
            return pick[0], pick[1]
        if least_work is not True and least_work in (2, 3):
            pick = min(opts, key=lambda o: (float(o[2][least_work - 2]), o[3]))
            return pick[0], pick[1]
        if least_work:
            ok = [i for i, o in enumerate(opts) if o[3] <= limit]
            pick = opts[min(ok, key=most.__getitem__)] if ok else min(opts, key=_PIECE)
            return pick[0], pick[1]
        if dp >= 0 and tw >= 0 and most[dp] < most[tw]:  # by J's measure: the larger
            return DP, opts[dp][1]
        if tw >= 0 and opts[tw][3] <= limit:
            return TW, 1
        order = (TWRW, CW) if twrw_first else (CW, TWRW)
        for st in order:
            for o in opts:
                if o[0] == st and (st == TWRW or o[3] <= limit):
                    return o[0], o[1]
        return RW, self.topo.world_size

    def pack(self, theta: float, mu: float, allow_dp: bool, least_work: bool | int = False, twrw_first: bool = False,
             choice: dict[str, tuple[ShardingType, int]] | None = None, uniform: ShardingType | None = None,
             ) -> ShardingPlan:
        """One packing; `choice` (table -> type, pieces), if given, is what `choose` returns for these arguments
        (the caller already computed it)."""
        return self.finish(*self.placed(theta, mu, allow_dp, least_work, twrw_first, choice, uniform))

    def placed(self, theta: float, mu: float, allow_dp: bool, least_work: bool | int = False,
               twrw_first: bool = False, choice: dict[str, tuple[ShardingType, int]] | None = None,
               uniform: ShardingType | None = None) -> tuple[Loads, list[Piece], Layout]:
        """`pack` before `finish`: the shards placed greedily, as (loads, movable pieces, layout); raises `NoFit`."""
        topo = self.topo
        w, h = topo.world_size, min(topo.ranks_per_host, topo.world_size)
        choice = dict(choice) if choice is not None else {
            t.name: self.choose(t, theta, mu, allow_dp, least_work, twrw_first, uniform)
            for t in self.cost.workload.tables}
        self._fit_replicas(choice, theta, mu, least_work, twrw_first, uniform)
        spread = sum(self.spread(t, *choice[t.name]) for t in self.cost.workload.tables) if self.res.by_mean else 0.0
        state = Loads(self.res, topo, {st for st, _ in choice.values()}, spread)
        pieces, groups = [], []
        layout: dict[str, tuple[ShardingType, list[int]]] = {}
        blocks: list[tuple[int, int, int, np.ndarray, dict[str, float]]] = []  # (group, first rank, ranks, ...)
        for t in self.cost.workload.tables:
            st, k = choice[t.name]
            if st == DP or st == RW:
                blocks += self._fixed_blocks(t, st)
                layout[t.name] = (st, list(range(w)))
            elif st == TWRW:
                groups.append((*self._group(t, state.tiers), t.name))
            else:
                v, m = self.shard(t, st, t.rows, t.dim // k)
                pieces.extend([Piece(t.name, st, v, m) for _ in range(k)])
                layout[t.name] = (st, [])
        # bytes used (tiers, W) as the kernels take them, kept by them from here to `place`'s end (issue 16: stacked
        # from `state.used` and written back three times per placement)
        used, cap = np.stack([state.used[x] for x in state.tiers]), self._caps(state)
        if blocks:  # `put_all` (DP) and `put_ranks` (RW) in table order, in one compiled call
            g, first, n, vecs, mems = zip(*blocks, strict=True)
            g = np.array(g, dtype=np.int64)
            put_blocks(state.L, state.count, self.res.hold, used, g, np.array(first, dtype=np.int64),
                       np.array(n, dtype=np.int64), g == STYPES.index(DP), np.array(vecs), np.array(mems))
        if (used.max(axis=1) > cap).any():
            raise NoFit("row-wise and data-parallel shards alone overfill a rank")
        if groups:  # largest first, each on its best host (`_best_host`, then `put`), in one compiled call
            groups.sort(key=lambda g: -g[0])
            res = self.res
            hosts = np.full(len(groups), -1, dtype=np.int64)
            bad = place_groups(state.L, state.count, res.hold, res.s0, res.s1, state.const, STYPES.index(TWRW),
                               np.array([g[1] for g in groups]), np.array([g[2] for g in groups]), used, cap, hosts)
            if bad >= 0:
                raise NoFit(groups[bad][3])
            for (*_, name), best in zip(groups, hosts.tolist(), strict=True):
                layout[name] = (TWRW, list(range(best * h, best * h + h)))
        self.place(state, pieces, used)
        return state, pieces, layout

    @staticmethod
    def _caps(state: Loads) -> np.ndarray:
        """Each tier's usable bytes per rank, in `state.tiers`' order, as the kernels take them."""
        return np.array([state.cap[x] for x in state.tiers], dtype=np.float64)

    def _fixed_blocks(self, t: TableSpec, st: ShardingType) -> list[tuple[int, int, int, np.ndarray, list[float]]]:
        """Table t data-parallel (one replica on every rank) or row-wise (consecutive blocks: full ones, the tail,
        empty ones) as `placed` puts it: (group, first rank, ranks, vector, bytes per tier (0.0 where none)) per
        block, memoised per table, type and tier (issue 16: the same for every packing, but rebuilt on each: f88's
        35 placements, 16 tables each)."""
        key = (t.name, st, *self.tiers[t.name])
        got = self._blocks.get(key)
        if got is None:
            tiers, w = [x.name for x in self.topo.tiers], self.topo.world_size
            sizes, first, got = [(t.rows, w)] if st == DP else row_sizes(t.rows, w), 0, []
            for rows, n in sizes:
                v, m = self.shard(t, st, rows, t.dim)
                got.append((STYPES.index(st), 0 if st == DP else first, n, v, [m.get(x, 0.0) for x in tiers]))
                first += n
            self._blocks[key] = got
        return got

    def _fit_replicas(self, choice: dict[str, tuple[ShardingType, int]], theta: float, mu: float,
                      least_work: bool | int, twrw_first: bool, uniform: ShardingType | None = None) -> None:
        """Data-parallel replicas sit on every rank: while they fill more than μ of a rank's tier (the rest is for
        the shards that are placed), the largest goes back to its choice without data-parallel."""
        tables = [t for t in self.cost.workload.tables if choice[t.name][0] == DP]
        if not tables:
            return
        mem = {t.name: self.shard(t, DP, t.rows, t.dim)[1] for t in tables}
        used: dict[str, float] = {}
        for m in mem.values():
            for k, v in m.items():
                used[k] = used.get(k, 0.0) + v
        tables.sort(key=lambda t: -sum(mem[t.name].values()))
        for t in tables:
            if all(v <= mu * self.usable[k] for k, v in used.items()):
                break
            for k, v in mem[t.name].items():
                used[k] -= v
            choice[t.name] = self.choose(t, theta, mu, False, least_work, twrw_first, uniform)

    def place(self, state: Loads, pieces: list[Piece], used: np.ndarray | None = None) -> None:
        """Greedy: pieces by descending dominant share (largest v_k / row total of L) onto the rank minimising
        (J, secondary, ΔΣL²) after adding them (`least_loaded`: by descending TorchRec perf onto the rank with the
        least TorchRec perf, as TorchRec's greedy partitioner places them). `used`: the bytes used (tiers, W) where
        the caller holds them ahead of `state.used` (`placed`); written into `state.used` in any case."""
        if used is None:
            used = np.stack([state.used[t] for t in state.tiers])
        if not pieces:
            for i, t in enumerate(state.tiers):
                state.used[t][:] = used[i]
            return
        vecs = np.array([p.vec for p in pieces])
        if self.least_loaded:
            order = np.argsort(-vecs[:, -1], kind="stable")
        else:
            total = vecs.sum(axis=0) + state.L.sum(axis=1)
            share = (vecs / np.where(total > 0, total, 1.0)).max(axis=1)
            order = np.argsort(-share, kind="stable")
        tables = table_ids(pieces)
        groups = np.array([GROUP[p.st] for p in pieces], dtype=np.int64)
        mems = piece_bytes(pieces, state.tiers)
        cap = self._caps(state)
        ranks = np.full(len(pieces), -1, dtype=np.int64)
        res = state.res  # the greedy loop in one compiled call: `state.fits`, `place_best` and `put` per piece
        bad = place_all(state.L, state.count, res.hold, res.weight, res.s0, res.s1, state.const, order, groups,
                        tables, vecs, mems, used, cap, ranks, self.least_loaded)
        for i, t in enumerate(state.tiers):
            state.used[t][:] = used[i]
        for p, r in zip(pieces, ranks.tolist(), strict=True):
            p.rank = r
        if bad >= 0:
            raise NoFit(pieces[bad].table)

    def finish(self, state: Loads, pieces: list[Piece], layout: dict[str, tuple[ShardingType, list[int]]],
               ) -> ShardingPlan:
        local_search(state, pieces, self.iters)
        if self.retype_rounds:
            retyped = retype(state, pieces, layout, self.cost.tables, self.shard, self.retype_rounds, self.spread,
                             cuts=self.cuts)
            if retyped is not pieces:  # some table changed type: settle the moves and swaps again
                pieces = retyped
                local_search(state, pieces, self.iters)
        for p in pieces:
            layout[p.table][1].append(p.rank)
        return ShardingPlan(self.topo.world_size, self.table_plans(layout), optimizer="ours")

    def table_plans(self, layout: Layout) -> dict[str, TablePlan]:
        """Each table's plan for `layout`, in the workload's order, memoised in `Resources.table_plans` (a table's
        plan recurs across packings: RW, DP, many TW). Keyed by the ranks, except that ranks equal to all ranks in
        order (every DP and RW table `placed` lays out) key as None: issue 16, r1000 made and hashed a 256-tuple
        for each of ~2,000 such tables per `optimize`; a list comparison is cheaper (same plan objects)."""
        tables, made, every = {}, self.res.table_plans, list(range(self.topo.world_size))
        for t in self.cost.workload.tables:
            st, ranks = layout[t.name]
            key = (t.name, st, None if ranks == every else tuple(ranks), *self.tiers[t.name])
            if key not in made:
                made[key] = table_plan(t, st, ranks, *self.tiers[t.name])
            tables[t.name] = made[key]
        return tables


def repolish(builder: Builder, plan: ShardingPlan) -> ShardingPlan:
    """Local search over the movable (TW, CW) shards of any plan, keeping types and tiers."""
    saved = builder.tiers
    builder.tiers = {n: (tp.shards[0].tier, tp.shards[0].cache_fraction) for n, tp in plan.tables.items()}
    try:
        state, pieces = loads_of(builder.res, plan)
        layout = {name: (tp.sharding_type, [] if tp.sharding_type in (TW, CW) else [s.rank for s in tp.shards])
                  for name, tp in plan.tables.items()}
        return builder.finish(state, pieces, layout)
    finally:
        builder.tiers = saved


Shard = Callable[[TableSpec, ShardingType, int, int], tuple[np.ndarray, dict[str, float]]]
Spread = Callable[[TableSpec, ShardingType, int], float]  # `Builder.spread`
Layout = dict[str, tuple[ShardingType, list[int]]]
Merge = Callable[[Loads, list[Piece], np.ndarray, dict[str, float], float, float, float], int]  # `_merge`


class Cuts:
    """What `_try_split` and `_unreplicate` read of one table whatever the loads: the shards of each re-cut
    (vector, bytes by tier as a dict and as a row over the topology's tiers) and their `Spread` seconds (0 without
    `Spread`), from the same calls of `shard` and `spread` those made on every trial. They depend on the table,
    its tier and the topology only, so a builder makes them once per table (`Builder.cuts`); the column-wise
    re-cuts, which only `_try_split` reads, when first asked for (`column`)."""

    def __init__(self, topo, shard: Shard, spread: Spread | None, t: TableSpec) -> None:  # noqa: ANN001
        self.topo, self.shard, self.spread_of, self.t = topo, shard, spread, t
        self.tiers = [x.name for x in topo.tiers]
        w, h = topo.world_size, min(topo.ranks_per_host, topo.world_size)
        self.tw, self.dp = shard(t, TW, t.rows, t.dim), shard(t, DP, t.rows, t.dim)
        self.tw_bytes, self.dp_bytes = self._row(self.tw[1]), self._row(self.dp[1])
        self.sp_tw, self.sp_dp = self._sp(TW, 1), self._sp(DP, w)
        self.dp_fast = set(self.dp[1]) == {topo.fast.name}  # the replica's bytes all in the fastest tier
        self.twrw: list[tuple[np.ndarray, dict[str, float]]] = []  # one host's row blocks (`row_ranges`' order)
        self.sp_twrw = 0.0
        if h > 1 and topo.num_hosts > 1:
            for rows, n in row_sizes(t.rows, h) if t.rows else [(0, h)]:  # each distinct block priced once
                self.twrw += [shard(t, TWRW, rows, t.dim)] * n
            self.sp_twrw = self._sp(TWRW, h)
        self.twrw_vecs = np.array([v for v, _ in self.twrw])  # (h, K) and (h, tiers), as `Loads.host_scores`
        self.twrw_bytes = np.array([[m.get(x, 0.0) for x in self.tiers] for _, m in self.twrw])
        self._cw: list | None = None
        self._cw_arrays: tuple | None = None

    def _sp(self, st: ShardingType, k: int) -> float:
        return self.spread_of(self.t, st, k) if self.spread_of else 0.0

    def _row(self, m: dict[str, float]) -> np.ndarray:
        return np.array([m.get(x, 0.0) for x in self.tiers])

    def column(self) -> list[tuple[int, np.ndarray, dict[str, float], np.ndarray, float]]:
        """The column-wise re-cuts into k ≤ min(W, MAX_SPLIT) blocks: (k, vector, bytes, bytes by tier, spread)."""
        if self._cw is None:
            t, w = self.t, self.topo.world_size
            self._cw = []
            for k in column_splits(t.dim):
                if k <= min(w, MAX_SPLIT):
                    v, m = self.shard(t, CW, t.rows, t.dim // k)
                    self._cw.append((k, v, m, self._row(m), self._sp(CW, k)))
        return self._cw

    def column_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """`column()` stacked as `retype_kernel.best_cut` takes it: (spreads, vectors (n, K), bytes by tier (n,
        tiers), k per re-cut), made once per table (issue 16: `_best_cut` rebuilt these four arrays on every call,
        f88: 165 calls for 16 tables)."""
        if self._cw_arrays is None:
            self._cw_arrays = self.stack_column(self.column())
        return self._cw_arrays

    @staticmethod
    def stack_column(cw: list[tuple]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Re-cuts as `column()` lists them, stacked: (spreads, vectors, bytes by tier, k)."""
        return (np.array([x[4] for x in cw], dtype=np.float64), np.array([x[1] for x in cw]),
                np.array([x[3] for x in cw]), np.array([x[0] for x in cw], dtype=np.int64))


def _cuts_memo(topo, shard: Shard, spread: Spread | None) -> Callable[[TableSpec], Cuts]:  # noqa: ANN001
    """Each table's `Cuts` made once, for callers without `Builder.cuts` (the tests' direct calls)."""
    made: dict[str, Cuts] = {}

    def cuts(t: TableSpec) -> Cuts:
        if t.name not in made:
            made[t.name] = Cuts(topo, shard, spread, t)
        return made[t.name]
    return cuts


def _snapshot(state: Loads) -> tuple:
    return state.L.copy(), state.count.copy(), {k: v.copy() for k, v in state.used.items()}, state.const, \
        state.spread


def _restore(state: Loads, snap: tuple) -> None:
    state.L, state.count, used, state.const, state.spread = snap
    state.used = used


def copy_placed(state: Loads, pieces: list[Piece], layout: Layout) -> tuple[Loads, list[Piece], Layout]:
    """An independent copy of `Builder.placed`'s result (loads, pieces, layout), for a second `finish`."""
    other = copy.copy(state)
    other.L, other.count, other.load = state.L.copy(), state.count.copy(), state.load.copy()
    other.used = {k: v.copy() for k, v in state.used.items()}
    return (other, [Piece(p.table, p.st, p.vec, p.mem, p.rank) for p in pieces],
            {k: (st, list(ranks)) for k, (st, ranks) in layout.items()})


def _refresh_const(state: Loads) -> None:
    """`Loads.const` of the groups with a holder, from their bitmask (issue 16: a set of numpy ints built, sorted and
    hashed per call; `Resources.const_mask` gives the float of that set; tests check `_refresh_const_reference`)."""
    state.const = state.const_with_mask(_mask(state.count.sum(axis=1).tolist()))


def _refresh_const_reference(state: Loads) -> None:
    """`_refresh_const` from the set of groups (the form it had)."""
    state.const = state.const_with({STYPES[g] for g in np.flatnonzero(state.count.sum(axis=1) > 0)})


_BIT = {st: 1 << g for st, g in GROUP.items()}  # a group's bit in `_mask`'s masks


def _mask(sums: list[int]) -> int:
    """The groups with a holder as a bitmask (bit g: `STYPES[g]`), from the holders per group as Python ints."""
    mask = 0
    for g, n in enumerate(sums):
        if n > 0:
            mask |= 1 << g
    return mask


def _groups(mask: int) -> set[ShardingType]:
    """The set of groups in `mask` (for the reference paths, which price sets)."""
    return {st for g, st in enumerate(STYPES) if mask >> g & 1}


def _fits_everywhere(state: Loads, m: dict[str, float]) -> bool:
    """`state.fits(m).all()` from each tier's largest use: float addition is monotone, so every rank's use + b fits
    iff the largest's does (issue 16: one numpy call a tier instead of an array per tier and an `all`)."""
    return all(state.used[x].max() + b <= state.cap[x] * (1 + 1e-12) for x, b in m.items() if b > 0)


def _place_new(state: Loads, st: ShardingType, v: np.ndarray, m: dict[str, float], k: int) -> list[int] | None:
    """Put k pieces (one per distinct rank) greedily; the ranks, or None if they do not fit."""
    g, taken = STYPES.index(st), []
    for _ in range(k):
        ok = state.fits(m)
        ok[taken] = False
        r = state.place_best(g, v, ok)
        if r < 0:
            return None
        state.put(r, st, v, m)
        taken.append(r)
    return taken


def _try_split(state: Loads, c: Cuts, j0: float = np.inf,
               ) -> tuple[tuple[float, float], ShardingType, list[int], list[Piece]] | None:
    """The re-cut of table t (its table-wise piece already taken off) with the least (J, secondary) once its new
    shards are placed greedily, as (score, type, ranks, new movable pieces); None if no re-cut fits. Types whose
    re-cut cannot reach J ≤ `j0` are not tried: new shards only raise the maxima, so J with the type's group
    present and the maxima as they are now bounds every such re-cut from below (the caller keeps a re-cut only if
    it beats j0, so skipping changes nothing). `state.spread` still counts the table table-wise; each re-cut is
    priced with its own all-to-all seconds by the mean (`c`: the table's `Cuts`, which holds them)."""
    topo = state.topology
    t, w, h = c.t, topo.world_size, min(topo.ranks_per_host, topo.world_size)
    best: tuple | None = None
    pmask = _mask(state.count.sum(axis=1).tolist())  # the groups present (`_mask`; issue 16: not a set per trial)
    maxima = state.L.max(axis=1)
    msum, top = float(maxima[:-1].sum(axis=0)), float(maxima[-1])  # `_j_bound`'s sums, taken once
    was = c.sp_tw

    def hopeless(st: ShardingType, more: float) -> bool:  # more: the re-cut's all-to-all seconds by the mean, less TW's
        return _j_bound(state.res, msum, top, state.const_with_mask(pmask | _BIT[st], more)) > j0 * (1 + _TOL) + _TOL

    cw = c.column()
    if cw and not hopeless(CW, min((sp - was for *_, sp in cw))):  # each re-cut into k blocks placed
        best = _best_cut(state, t.name, cw, was, pmask, j0,  # in one compiled call on copies of the loads
                         c.column_arrays())
    v, m = c.dp
    if c.dp_fast and _fits_everywhere(state, m) and not hopeless(DP, c.sp_dp - was):
        # the score once a replica is on every rank (DP present), as `put_ranks` sums it and `_refresh_const`
        # prices it, in one compiled call (`_dp_score_reference`)
        const = state.res.const_mask(pmask | _BIT[DP]) + ((state.spread + (c.sp_dp - was)) + 0.0) / w
        best = _or_replicas(state, v, const, best)
    if c.twrw and not hopeless(TWRW, c.sp_twrw - was):
        best = _or_host(state, c, state.const_with_mask(pmask | _BIT[TWRW], c.sp_twrw - was), h, best)
    return best


def _try_split_reference(state: Loads, c: Cuts, j0: float = np.inf,
                         ) -> tuple[tuple[float, float], ShardingType, list[int], list[Piece]] | None:
    """`_try_split` with sets of groups, priced per call, and `fits(m).all()` (the form it had; tests check the two
    agree); its column-wise re-cuts by `_best_cut_reference`."""
    topo = state.topology
    t, w, h = c.t, topo.world_size, min(topo.ranks_per_host, topo.world_size)
    best: tuple | None = None
    sums = state.count.sum(axis=1)
    present = {STYPES[g] for g in np.flatnonzero(sums > 0)}
    maxima = state.L.max(axis=1)
    msum, top = float(maxima[:-1].sum(axis=0)), float(maxima[-1])  # `_j_bound`'s sums, taken once
    was = c.sp_tw

    def hopeless(st: ShardingType, more: float) -> bool:  # more: the re-cut's all-to-all seconds by the mean, less TW's
        return _j_bound(state.res, msum, top, state.const_with(present | {st}, more)) > j0 * (1 + _TOL) + _TOL

    cw = c.column()
    if cw and not hopeless(CW, min((sp - was for *_, sp in cw))):  # each re-cut into k blocks placed
        best = _best_cut_reference(state, t.name, cw, was, sum(_BIT[st] for st in present), j0)
    v, m = c.dp
    if c.dp_fast and state.fits(m).all() and not hopeless(DP, c.sp_dp - was):
        dsums = sums.copy()  # the score once a replica is on every rank, as `put_ranks` sums it
        dsums[GROUP[DP]] += w  # and `_refresh_const` prices it, in one compiled call (`_dp_score_reference`)
        const = state.res.const({STYPES[g] for g in np.flatnonzero(dsums > 0)}) + \
            ((state.spread + (c.sp_dp - was)) + 0.0) / w
        best = _or_replicas(state, v, const, best)
    if c.twrw and not hopeless(TWRW, c.sp_twrw - was):
        best = _or_host(state, c, state.const_with(present | {TWRW}, c.sp_twrw - was), h, best)
    return best


def _or_replicas(state: Loads, v: np.ndarray, const: float, best: tuple | None) -> tuple | None:
    """`best`, or the data-parallel re-cut (a replica of vector `v` on every rank, fixed cost `const`) where its
    (J, secondary) is less, scored in one compiled call (`_dp_score_reference`)."""
    res, w = state.res, state.L.shape[1]
    j, s = replicas_score(state.L, state.count, res.hold, res.s0, res.s1, GROUP[DP], v, const)
    return ((j, s), DP, list(range(w)), []) if best is None or (j, s) < best[0] else best


def _or_host(state: Loads, c: Cuts, const: float, h: int, best: tuple | None) -> tuple | None:
    """`best`, or the table-row-wise re-cut on its best host of h ranks (fixed cost `const`) where its (J,
    secondary) is less (`_lexmin`, compiled)."""
    ok, j, s = state.host_scores_arrays(STYPES.index(TWRW), c.twrw_vecs, c.twrw_bytes, const)
    host = lexmin_host(ok, j, s)
    if host >= 0 and (best is None or (float(j[host]), float(s[host])) < best[0]):
        return (float(j[host]), float(s[host])), TWRW, list(range(host * h, host * h + h)), []
    return best



def _cut_args(state: Loads, pmask: int) -> tuple:
    """What `_best_cut` and `_best_cut_reference` share: (group of CW, the groups once CW is present as a mask, bytes
    used (tiers, W), capacities per tier)."""
    used = np.array([state.used[x] for x in state.tiers])  # `np.stack`'s array, one call
    return GROUP[CW], pmask | _BIT[CW], used, np.array([state.cap[x] for x in state.tiers], dtype=np.float64)


def _best_cut(state: Loads, name: str, cw: list[tuple], was: float, pmask: int, j0: float,
              arrays: tuple | None = None) -> tuple | None:
    """`_try_split`'s best column-wise re-cut of table `name` (`cw`: `Cuts.column`; `was`: its table-wise spread),
    as `_try_split` keeps it, or None if none fits: every re-cut placed by `place_cut` in one compiled call
    (`retype_kernel.best_cut`; issue 16: the Python loop around `place_cut` was the largest part of `retype` on
    f88). The fixed costs are `Loads.const_with`'s sums and the pick `_best_cut_reference`'s tuple comparison, so
    the same re-cut, ranks and (J, secondary) bits (tests check the two agree). `pmask`: the groups present
    (`_mask`). `arrays`: `cw` stacked (`Cuts.column_arrays`, made once per table; None: stacked here)."""
    gcw, gmask, used, cap = _cut_args(state, pmask)
    res, w = state.res, state.topology.world_size
    sps, vecs, mems, ks = arrays if arrays is not None else Cuts.stack_column(cw)
    c = res.const_mask(gmask)  # the groups present with CW: both fixed costs `best_cut` takes
    i, ranks, j, s = best_cut(state.L, state.count, res.hold, res.weight, res.s0, res.s1, state.const, w,
                              state.spread, c, c, float(was), sps, gcw, vecs, mems, used, cap, ks, float(j0))
    if i < 0:
        return None
    _, v, m, _, _ = cw[i]
    return (j, s), CW, ranks.tolist(), [Piece(name, CW, v, m, r) for r in ranks.tolist()]


def _best_cut_reference(state: Loads, name: str, cw: list[tuple], was: float, pmask: int, j0: float,
                        arrays: tuple | None = None) -> tuple | None:
    """`_best_cut` as a Python loop over `place_cut` (the loop `_try_split` had), pricing sets of groups; `arrays`
    is not read."""
    present = {STYPES[g] for g in np.flatnonzero(state.count.sum(axis=1) > 0)}
    assert pmask == sum(_BIT[st] for st in present)
    gcw, _, used, cap = _cut_args(state, pmask)
    groups = {STYPES[g] for g in np.flatnonzero((state.count.sum(axis=1) > 0) | (np.arange(len(STYPES)) == gcw))}
    res, w, best = state.res, state.topology.world_size, None
    for k, v, m, mb, sp in cw:
        d = sp - was  # J of the first block on its best rank (`cw_const`) bounds the re-cut's J
        cw_const, after = state.const_with(present | {CW}, d), state.const_with(groups, d)
        ranks, j, s = place_cut(state.L, state.count, res.hold, res.weight, res.s0, res.s1,
                                state.const + d / w, cw_const, after, gcw, v, mb, used, cap, k, j0)
        if len(ranks) and (best is None or (j, s) < best[0]):
            best = ((j, s), CW, ranks.tolist(), [Piece(name, CW, v, m, r) for r in ranks.tolist()])
    return best


def _j_bound(res: Resources, msum: float, top: float, const: float) -> float:
    """J of `Resources.score(maxima, const)` from the maxima's sum but the last, `msum` (numpy's, as `score` takes
    it), and the last, `top`: the same float operations on Python floats, so the same bits (issue 16: `_try_split`
    scored the same maxima once per re-cut type, three numpy calls each; tests check the two agree)."""
    return max(res.s0 * (const + msum), res.s1 * top)


def _dp_score_reference(state: Loads, v: np.ndarray, m: dict[str, float], more: float) -> tuple[float, float]:
    """`_try_split`'s data-parallel re-cut scored in numpy on the loads, then restored (tests check
    `retype_kernel.replicas_score` against it): a replica on every rank, `Loads.spread` up by `more`."""
    w = state.L.shape[1]
    snap = _snapshot(state)
    state.put_ranks(slice(0, w), DP, v, m)  # `put` on every rank, the same sums
    state.spread += more
    _refresh_const(state)
    score = state.objective()
    _restore(state, snap)
    return score


def _lexmin(ok: np.ndarray, j: np.ndarray, s: np.ndarray) -> int:
    """The first index with the least (J, secondary) among `ok` ones; −1 if none. The reference paths
    (`_best_host`, `_unreplicate_reference`) call it; the planner calls its compiled form,
    `unreplicate_kernel._lexmin_host` (tests check they agree)."""
    if not ok.any():
        return -1
    j = np.where(ok, j, np.inf)
    first = j == j.min()
    return int(np.argmin(np.where(first, s, np.inf)))


def _best_host(state: Loads, shards: list[tuple[np.ndarray, dict[str, float]]], const: float) -> int:
    """The host whose ranks take a table-row-wise group (shards[i] on its i-th rank) with the least (J,
    secondary), the first on ties; −1 if it fits on no host (`search_kernels.place_groups` repeats it; the tests
    check the kernel against it)."""
    return _lexmin(*state.host_scores(STYPES.index(TWRW), shards, const))


def _apply(state: Loads, shard: Shard, t: TableSpec, st: ShardingType, ranks: list[int], spread: float = 0.0,
           ) -> None:
    """Put table t as type st on `ranks`; `spread`: the change of `Loads.spread` this brings."""
    if st == DP:  # on every rank
        state.put_ranks(slice(0, state.L.shape[1]), DP, *shard(t, DP, t.rows, t.dim))
    elif st == TWRW:
        for r, (a, b) in zip(ranks, row_ranges(t.rows, len(ranks)), strict=True):
            state.put(r, TWRW, *shard(t, TWRW, b - a, t.dim))
    else:
        v, m = shard(t, st, t.rows, t.dim // len(ranks))
        for r in ranks:
            state.put(r, st, v, m)
    state.spread += spread
    _refresh_const(state)


def _apply_cut(state: Loads, c: Cuts, st: ShardingType, ranks: list[int], new: list[Piece], spread: float) -> None:
    """`_apply` of `_try_split`'s re-cut from the table's `Cuts` (the shards `_try_split` priced, the same objects
    `shard` returns): the column-wise blocks as the new pieces hold them, `put` rank by rank; the replicas in
    one `put_ranks`; the table-row-wise group by `_put_cut`; then `_refresh_const` (issue 16: `_apply`'s `shard`
    look-ups and h `put`s, f88: 605 calls; tests check `_apply`)."""
    if st == CW:
        for p in new:
            state.put(p.rank, CW, p.vec, p.mem)
        state.spread += spread
    elif st == DP:
        state.put_ranks(slice(0, state.L.shape[1]), DP, *c.dp)
        state.spread += spread
    else:
        _put_cut(state, c, st, ranks[0], spread)
    _refresh_const(state)


def retype(state: Loads, pieces: list[Piece], layout: Layout, tables: dict[str, TableSpec], shard: Shard,
           rounds: int = RETYPE_ROUNDS, spread: Spread | None = None, merge: Merge | None = None,
           cuts: Callable[[TableSpec], Cuts] | None = None) -> list[Piece]:
    """Re-cut the largest table-wise pieces of the ranks holding some row's maximum (or merge a column-wise table
    back into one table-wise shard) whenever that alone improves (J, secondary); at most `rounds` re-cuts.
    `spread` (`Builder.spread`; None: no all-to-all priced by the mean) keeps `Loads.spread` that of the layout.
    `merge`: the merge trial (`_merge`, one compiled call; `_merge_reference`, numpy on the loads: the same).
    `cuts`: each table's `Cuts` from these `shard` and `spread` (`Builder.cuts`, memoised; None: made here)."""
    def sp(t: TableSpec, st: ShardingType, k: int) -> float:
        return spread(t, st, k) if spread else 0.0

    cuts = cuts or _cuts_memo(state.topology, shard, spread)
    merge = merge or partial(_merge, rows=_TierRows(state))  # the arrays `_merge` passes, kept for this call
    if state.L.shape[1] < 2:
        return pieces
    heavy = _piece_weights(state.res.weight)
    _refresh_const(state)
    for _ in range(rounds):
        j0, s0 = state.objective()
        trial = _round_memo(merge)  # the loads are as they were at each trial of a round
        top = state.top3()
        hot = [int(r) for r in dict.fromkeys(top[0][top[1][:, 0] > 0, 0].tolist()) if r >= 0]
        hot.sort(key=lambda r: -float((state.L[:, r] * state.res.weight).sum()))
        done = False
        for a in hot[:HOT_RANKS]:
            on_a = sorted([p for p in pieces if p.rank == a], key=heavy)  # a list: no generator step per piece
            for p in on_a[:HOT_TABLES]:
                t = tables[p.table]
                if p.st == TW:
                    snap = _snapshot(state)
                    state.take(a, TW, p.vec, p.mem)
                    c = cuts(t)
                    found = _try_split(state, c, j0)
                    if found is not None and better(*found[0], 0.0, j0, s0):
                        _, st, ranks, new = found
                        _apply_cut(state, c, st, ranks, new, sp(t, st, len(ranks)) - sp(t, TW, 1))
                        pieces = [q for q in pieces if q is not p] + new
                        layout[t.name] = (st, [] if st == CW else ranks)
                        done = True
                        break
                    _restore(state, snap)
                elif p.st == CW:
                    blocks = [q for q in pieces if q.table == p.table]
                    delta, v, m = _merged_shard(cuts(t), len(blocks), sp)
                    r = trial(state, blocks, v, m, delta, j0, s0)
                    if r >= 0:  # the trial's change, made on the loads as the numpy form makes it
                        for q in blocks:
                            state.take(q.rank, CW, q.vec, q.mem)
                        state.respread(delta)
                        state.put(r, TW, v, m)
                        _refresh_const(state)
                        pieces = [q for q in pieces if q.table != p.table] + [Piece(t.name, TW, v, m, r)]
                        layout[t.name] = (TW, [])
                        done = True
                        break
            if done:
                break
        if not done:
            break
    return _unreplicate(state, pieces, layout, tables, shard, rounds * HOT_TABLES, sp, cuts)


def _merged_shard(c: Cuts, blocks: int, sp: Callable[[TableSpec, ShardingType, int], float],
                  ) -> tuple[float, np.ndarray, dict[str, float]]:
    """A column-wise table of `blocks` blocks merged into one table-wise shard: (the change of `Loads.spread`, the
    shard's vector, its bytes), the shard and its spread from the table's `Cuts` (issue 16: `retype` asked
    `shard` and `sp` for them on every merge trial; tests check `_merged_shard_reference`)."""
    v, m = c.tw
    return c.sp_tw - sp(c.t, CW, blocks), v, m


def _merged_shard_reference(t: TableSpec, blocks: int, shard: Shard,
                            sp: Callable[[TableSpec, ShardingType, int], float],
                            ) -> tuple[float, np.ndarray, dict[str, float]]:
    """`_merged_shard` asked of `shard` and `sp` (the form `retype` had)."""
    v, m = shard(t, TW, t.rows, t.dim)
    return sp(t, TW, 1) - sp(t, CW, blocks), v, m


def _round_memo(merge: Merge) -> Merge:
    """`merge` answering once per table for one `retype` round (issue 16: a column-wise table with blocks on
    several hot ranks was tried once from each, f88: 66 of 405 trials repeats). Within a round every trial leaves
    the loads as they were (a failed re-cut is restored, the first change ends the round), and the table's blocks,
    its table-wise shard, `delta`, j0 and s0 are the same, so a repeat gives the same rank."""
    seen: dict[str, int] = {}

    def once(state: Loads, blocks: list[Piece], v: np.ndarray, m: dict[str, float], delta: float, j0: float,
             s0: float) -> int:
        name = blocks[0].table
        if name not in seen:
            seen[name] = merge(state, blocks, v, m, delta, j0, s0)
        return seen[name]
    return once


def _piece_weights(weight: np.ndarray) -> Callable[[Piece], float]:
    """`retype`'s sort key of a piece, −(its vector · `weight`) summed by numpy, kept by the vector's identity for
    one `retype` call (issue 16: the hot ranks' pieces were weighed again every round, f88: 873 numpy products and
    sums for a few dozen vectors). The vector is kept with its key, so no other vector can take its identity while
    the memo lives; a piece's vector is never changed in place (pieces of a table share it)."""
    seen: dict[int, tuple[np.ndarray, float]] = {}

    def key(p: Piece) -> float:
        got = seen.get(id(p.vec))
        if got is None or got[0] is not p.vec:
            got = seen[id(p.vec)] = (p.vec, -float((p.vec * weight).sum()))
        return got[1]
    return key


class _TierRows:
    """What `_merge` passes `merge_trial` of a state's capacities and of a shard's bytes (a dict by tier): as arrays
    over the tiers, the capacities once and each dict's row once, for one `retype` call (issue 16: three small arrays
    built on every merge trial, f88: 339 a call). A row is kept with its dict, so no other dict can take its identity
    while this lives; the shard dicts are never changed in place, and the kernel only reads the arrays."""

    def __init__(self, state: Loads) -> None:
        self.tiers = state.tiers
        self.cap = np.array([state.cap[x] for x in state.tiers], float)
        self._seen: dict[int, tuple[dict[str, float], np.ndarray]] = {}

    def row(self, m: dict[str, float]) -> np.ndarray:
        got = self._seen.get(id(m))
        if got is None or got[0] is not m:
            got = self._seen[id(m)] = (m, np.array([m.get(x, 0.0) for x in self.tiers]))
        return got[1]


def _merge(state: Loads, blocks: list[Piece], v: np.ndarray, m: dict[str, float], delta: float, j0: float,
           s0: float, rows: _TierRows | None = None) -> int:
    """`retype`'s merge trial in one compiled call (`retype_kernel.merge_trial`) on copies of the loads: the
    column-wise `blocks` off, `Loads.spread` changed by `delta`, one table-wise piece (v, m) on its best rank;
    that rank if (J, secondary) then beats (j0, s0), else −1. The fixed costs are `Loads.respread`'s and
    `_refresh_const`'s, from the same sets of groups. Blocks of one size (as every packing cuts them) in the
    kernel; others in `_merge_reference` (the same answer). `rows`: the arrays of capacities and bytes kept for
    one `retype` call (None: built here)."""
    b = blocks[0]
    for q in blocks:
        if q.vec is not b.vec or q.mem is not b.mem:
            return _merge_reference(state, blocks, v, m, delta, j0, s0)
    res, w = state.res, state.L.shape[1]
    rows = rows or _TierRows(state)
    c_after = res.const_mask(_merged_mask(state.count, len(blocks))) + ((state.spread + delta) + 0.0) / w
    return merge_trial(state.L, state.count, res.hold, res.weight, res.s0, res.s1,
                       np.array([state.used[x] for x in state.tiers]), rows.cap, GROUP[CW],
                       np.array([q.rank for q in blocks], dtype=np.int64), b.vec, rows.row(b.mem), GROUP[TW], v,
                       rows.row(m), state.const + delta / w, c_after, j0, s0)


def _merged_mask(count: np.ndarray, blocks: int) -> int:
    """The groups present once a column-wise table's `blocks` are off and one table-wise piece is on, as a bitmask
    (`_mask`), from the holders per group as Python ints (issue 16: three numpy calls fewer than
    `_merged_groups_reference`, and no set to build and sort, once per merge trial; tests check the two agree)."""
    sums = count.sum(axis=1).tolist()
    sums[GROUP[CW]] -= blocks
    sums[GROUP[TW]] += 1
    return _mask(sums)


def _merged_groups_reference(count: np.ndarray, blocks: int) -> set[ShardingType]:
    """`_merged_mask` as a set, in numpy (the form `_merge` had)."""
    sums = count.sum(axis=1)
    sums[GROUP[CW]] -= blocks
    sums[GROUP[TW]] += 1
    return {STYPES[g] for g in np.flatnonzero(sums > 0)}


def _merge_reference(state: Loads, blocks: list[Piece], v: np.ndarray, m: dict[str, float], delta: float,
                     j0: float, s0: float) -> int:
    """`_merge` in numpy, on the loads themselves, then restored (tests check the two agree)."""
    snap = _snapshot(state)
    for q in blocks:
        state.take(q.rank, CW, q.vec, q.mem)
    state.respread(delta)
    ranks = _place_new(state, TW, v, m, 1)
    r = -1
    if ranks is not None:
        _refresh_const(state)
        if better(*state.objective(), 0.0, j0, s0):
            r = ranks[0]
    _restore(state, snap)
    return r


def _unreplicate(state: Loads, pieces: list[Piece], layout: Layout, tables: dict[str, TableSpec], shard: Shard,
                 trials: int, spread: Spread, cuts: Callable[[TableSpec], Cuts] | None = None) -> list[Piece]:
    """A data-parallel table's replicas load every rank, the hottest too, while a sharded table can sit where
    there is room. The data-parallel tables, largest replica first (at most `trials` of them), are tried sharded
    instead (one table-wise piece on its best rank, or table-row-wise on its best host), each change kept if it alone
    improves (J, secondary). Returns the pieces, a new list if some table changed. Each trial is one compiled call
    on copies of the loads (`unreplicate_kernel.unreplicate_trial`; `_unreplicate_reference` is its numpy form,
    the same changes); the fixed costs it needs are computed here, from masks of the groups the numpy form
    prices as sets (`Resources.const_mask`: the same floats).
    `cuts`: each table's `Cuts` from these `shard` and `spread` (None: made here, once per table)."""
    cuts = cuts or _cuts_memo(state.topology, shard, spread)
    w = state.L.shape[1]
    dp = [n for n, (st, _) in layout.items() if st == DP]
    rep = {n: shard(tables[n], DP, tables[n].rows, tables[n].dim) for n in dp}
    if dp:  # largest replica first: each row summed as numpy sums one vector, the sort stable
        key = (-(np.array([rep[n][0] for n in dp]) * state.res.weight).sum(axis=1)).tolist()
        dp = [dp[i] for i in sorted(range(len(dp)), key=key.__getitem__)]
    res, topo, tiers = state.res, state.topology, state.tiers
    h = min(topo.ranks_per_host, w)
    rowwise = h > 1 and topo.num_hosts > 1
    cap = np.array([state.cap[x] for x in tiers], dtype=np.float64)
    gdp, gtw, gtwrw = GROUP[DP], GROUP[TW], GROUP[TWRW]
    no_vecs, no_mems = np.zeros((0, res.K)), np.zeros((0, len(tiers)))
    sums = state.count.sum(axis=1).tolist()  # holders per group: which groups are present (`_refresh_const`)

    def const(mask: int, sp: float) -> float:  # `Loads.const_with_mask` with `sp` as the spread
        return res.const_mask(mask) + (sp + 0.0) / w

    state.const = const(_mask(sums), state.spread)  # `_refresh_const`

    for name in dp[:trials]:
        t, (v, m) = tables[name], rep[name]
        c = cuts(t)
        off = _mask([n - (w if g == gdp else 0) for g, n in enumerate(sums)])  # groups present, replicas off
        sp_off = state.spread - c.sp_dp
        c_off = const(off, sp_off)
        tr_vecs, tr_mems, c_twrw = no_vecs, no_mems, 0.0
        if rowwise:
            tr_vecs, tr_mems = c.twrw_vecs, c.twrw_bytes
            c_twrw = res.const_mask(off | _BIT[TWRW]) + (sp_off + c.sp_twrw) / w
        tv, tm = c.tw
        sp_tw = c.sp_tw
        code, where = unreplicate_trial(
            state.L, state.count, res.hold, res.weight, res.s0, res.s1, np.stack([state.used[x] for x in tiers]),
            cap, state.const, gdp, v, c.dp_bytes, c_off, gtwrw, tr_vecs, tr_mems,
            c_twrw, gtw, tv, c.tw_bytes, c_off + sp_tw / w,
            const(off | _BIT[TW], sp_off + sp_tw))
        if code < 0:
            continue
        state.take_ranks(slice(0, w), DP, v, m)  # the change the trial found, applied as the numpy form applies it
        state.spread -= c.sp_dp
        st, ranks = (TWRW, list(range(where * h, where * h + h))) if code == 0 else (TW, [where])
        sums = _put_cut(state, c, st, where * h if code == 0 else where, spread(t, st, len(ranks)))
        state.const = const(_mask(sums), state.spread)  # `_refresh_const`'s
        layout[name] = (st, [] if st in (TW, CW) else ranks)
        pieces = pieces + ([Piece(t.name, TW, tv, tm, where)] if st == TW else [])  # a new list: `finish` reads it
    return pieces


def _put_cut(state: Loads, c: Cuts, st: ShardingType, first: int, spread: float) -> list[int]:
    """`_apply` of `_unreplicate`'s change, table-wise on rank `first` or table-row-wise on the host from rank
    `first`, but for `_refresh_const`: the holders per group, as Python ints, are returned for it (issue 16: f74's
    `_unreplicate` spent half its time in `_apply`'s h `put`s and its `shard` look-ups). The table-row-wise
    group goes on in three numpy steps with `Cuts`' shards (`_apply`'s, in `row_ranges`' order): the holder
    overheads on the ranks that held none of the group, then the vectors, then the bytes (+0.0 where a shard has
    none of a tier), the same additions `put` makes rank by rank (tests check the two agree)."""
    if st == TW:
        state.put(first, TW, *c.tw)
    else:
        g, ranks = GROUP[TWRW], slice(first, first + len(c.twrw))
        new = first + np.flatnonzero(state.count[g, ranks] == 0)
        state.L[:, new] += state.res.hold[g][:, None]
        state.L[:, ranks] += c.twrw_vecs.T
        state.count[g, ranks] += 1
        for i, x in enumerate(state.tiers):
            state.used[x][ranks] += c.twrw_bytes[:, i]
    state.spread += spread
    return state.count.sum(axis=1).tolist()


def _unreplicate_reference(state: Loads, pieces: list[Piece], layout: Layout, tables: dict[str, TableSpec],
                           shard: Shard, trials: int, spread: Spread) -> list[Piece]:
    """`_unreplicate` in numpy, trial by trial on the loads themselves (tests check the two agree)."""
    w = state.L.shape[1]
    dp = [n for n, (st, _) in layout.items() if st == DP]
    rep = {n: shard(tables[n], DP, tables[n].rows, tables[n].dim) for n in dp}
    dp.sort(key=lambda n: -float((rep[n][0] * state.res.weight).sum()))
    _refresh_const(state)
    for name in dp[:trials]:
        j0, s0 = state.objective()
        t, (v, m) = tables[name], rep[name]
        snap = _snapshot(state)
        state.take_ranks(slice(0, w), DP, v, m)  # every replica off
        state.spread -= spread(t, DP, w)
        _refresh_const(state)
        if not better(*state.objective(), 0.0, j0, s0):  # placing the table again only adds: no gain possible
            _restore(state, snap)
            continue
        best = None
        topo = state.topology
        h = min(topo.ranks_per_host, w)
        if h > 1 and topo.num_hosts > 1:  # table-row-wise on the best host
            shards = [shard(t, TWRW, b - a, t.dim) for a, b in row_ranges(t.rows, h)]
            present = {STYPES[g] for g in np.flatnonzero(state.count.sum(axis=1) > 0)}
            ok, j, s = state.host_scores(STYPES.index(TWRW), shards,
                                         state.const_with(present | {TWRW}, spread(t, TWRW, h)))
            host = _lexmin(ok, j, s)
            if host >= 0:
                best = ((float(j[host]), float(s[host])), TWRW, list(range(host * h, host * h + h)), [])
        tv, tm = shard(t, TW, t.rows, t.dim)
        inner = _snapshot(state)
        state.respread(spread(t, TW, 1))
        ranks = _place_new(state, TW, tv, tm, 1)
        if ranks is not None:
            _refresh_const(state)
            score = state.objective()
            if best is None or score < best[0]:
                best = (score, TW, ranks, [Piece(t.name, TW, tv, tm, ranks[0])])
        _restore(state, inner)
        if best is not None and better(*best[0], 0.0, j0, s0):
            _, st, ranks, new = best
            _apply(state, shard, t, st, ranks, spread(t, st, len(ranks)))
            layout[name] = (st, [] if st in (TW, CW) else ranks)
            pieces = pieces + new
        else:
            _restore(state, snap)
    return pieces
