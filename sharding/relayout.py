"""Whole-table re-layouts of a finished plan: a table re-cut row-wise over all ranks, a table-row-wise table moved
to another host or swapped with one on another host, each priced exactly by both models (`plan_cost`).

Why: the packings choose each table's sharding type before placing it, and the later moves (`sharding.search`,
`sharding.pack.retype`, `sharding.lns`, `sharding.anneal`) move pieces between ranks or re-cut a hot rank's
table-wise pieces; none re-cuts a table row-wise over all ranks, and none moves a table-row-wise group between
hosts. Where the planner falls back on polished greedy plans (memory-tight instances on which no packing fits,
tables in the slow tier), the hottest table then stays on one host: on f54 of `sharding.family` (22 tables,
32 ranks) that plan cost 1.29× TorchRec's plan by our model, whose hottest table is row-wise over all ranks.

Tables are tried hottest first (pooled lookup volume: pooling × dim), each table's best change applied when it
lowers our model's cost and TorchRec's rating stays at or below `t_cap` (so the caller's guarantees hold), every
rank's memory in every tier within its usable capacity (or not raised). Passes repeat until one changes nothing
or `evals` plan evaluations are spent: a count, not the clock, ends the step. The optimizer's final polish of a
greedy plan (`pareto=True`) also tries each fast-tier table data-parallel and applies a change only when neither
rating rises and one falls (`pareto_gain`).

Most trials change nothing (issue 16: on the small instances of `sharding.family` the step took up to two thirds of
the planning time, nearly all in `CostModel.plan_cost` of trials that were then rejected). So each trial is first
priced incrementally (`_Delta`: the current plan's per-rank sums less the changed tables' terms plus the new ones');
only a trial whose incremental price could pass the test within a relative `_MARGIN` (far above the incremental
sums' rounding, ~1e-13) is priced exactly, and every decision is still taken on the exact prices, so the plans
are the same. The incremental price sums only the rows the changed tables touch (`relayout_kernel.price_change`,
compiled: the numpy reference, `_Delta.price_reference`, copied the whole table per trial), and gives TorchRec's
rating too (the plan's per-rank loads less the old tables' plus the new ones'), so a trial that TorchRec's cap or
the polish's `pareto_gain` would refuse is not priced exactly either (f41: 96 of 499 trials priced exactly, now 8).
The trials left are priced exactly in order of their incremental price, a lower bound of the exact one, until it
passes the best exact cost found (`_best`: the same choice as pricing each in turn; f54: 160 exact prices, now 6).
Each option's table plan is made once per call and its rows, loads and memory are kept by its identity. A table is not tried again once every table has been tried on the current plan without a change
(the last pass of a sweep repeated trials whose outcome was already known); the count of evaluations includes
the trials rejected by the incremental price.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from embedding.spec import TableSpec
from sharding.cost import CostModel
from sharding.layouts import table_plan
from sharding.plan import ShardingPlan, ShardingType, TablePlan
from sharding.relayout_kernel import over_cap, price_change, scatter_rows
from sharding.search import STYPES
from sharding.trec_cost import TorchRecCostModel

__all__ = ["relayout", "RELAYOUT_WORK", "pareto_gain"]

RW, TWRW, DP = ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE, ShardingType.DATA_PARALLEL
RELAYOUT_WORK = 4_000  # plan evaluations × tables per call (the evaluations shrink as tables grow)
_MARGIN = 1e-10  # a trial is priced exactly unless its incremental price misses the test by more than this
# (relative): 100× the 1e-12 the tests hold the incremental price to, and below the tests' own 1e-9, so a trial
# that leaves the cost as it was is ruled out (at 1e-7, 0.9999999 of the cost passed `< 1 - 1e-9`: f54 priced 150
# trials exactly, nearly all of them unchanged re-layouts of tables off every row's maximum)
_NONE = [np.zeros(0, dtype=np.int64), np.zeros((1, 1))] * 2  # `price_change`'s second table, unchanged


class _Delta:
    """`CostModel.plan_cost` of a plan that differs from the current one in a few tables, from the current plan's
    per-rank sums (one row per work phase, per group's shard count and per collective) less the changed tables'
    rows plus their new ones. The same terms as `CostModel._accumulate` and the same step formula as
    `CostModel._step`, summed in another order: equal to the exact price up to rounding (~W × 1e-16 of the step),
    so only to rule trials out. A table plan's rows, loads and memory are kept by its identity: `relayout` makes
    each option's table plan once per call, so the same re-layouts recurring over passes are the same objects."""

    def __init__(self, cost: CostModel, plan: ShardingPlan, trec: TorchRecCostModel | None = None) -> None:
        self.cost, self.trec, self.w, self.g = cost, trec, plan.world_size, len(STYPES)
        self.rows: dict[tuple, int] = {("n", g): 3 + g for g in range(self.g)}  # rows 0-2: fwd, bwd, optimizer work
        self.coll: list[tuple[int, bool]] = []  # per collective row: its group, priced by the mean
        self.latency: dict[tuple, float] = {}  # groups present -> latency (no stage overheads: no fixed work)
        self.outside = cost.outside()
        self.seen: dict[int, list] = {}  # id(table plan) -> `_entry`
        self.tiers = {x.name: i for i, x in enumerate(cost.topology.tiers)}  # `memory`'s rows
        self.masks: dict[int, float] = {}  # groups present (bits) -> latency
        self.fast = not cost.topology.stage_overhead  # `price_change` (no per-holder stage costs), else the reference
        self._rebase(plan)

    def _rebase(self, plan: ShardingPlan) -> None:
        """The current plan's sums, from `CostModel._accumulate` (one compiled call: a table's own rows are made
        only when it is changed, `price`) and its shards per group and rank."""
        self.tables, self.terms = dict(plan.tables), {}
        parts, _, coll, groups, _ = self.cost._accumulate(plan, memory=False)
        self.now = (parts, coll, groups)  # `step`'s
        rows = {k: self._row(k) for k in coll}
        held: list[list[int]] = [[] for _ in range(self.g)]
        for tp in plan.tables.values():
            add = held[STYPES.index(tp.sharding_type)].extend
            for where in tp.alike().values():
                add(where)
        self.sums = np.zeros((3 + self.g + len(self.coll), self.w))
        self.sums[:3] = parts
        for g, ranks in enumerate(held):
            if ranks:
                self.sums[3 + g] = np.bincount(ranks, minlength=self.w)
        for k, v in coll.items():
            self.sums[rows[k]] = v
        self.rmax, self.rsum = self.sums.max(axis=1), self.sums.sum(axis=1)
        self.plan, self.tload = plan, None  # TorchRec's per-rank loads: at the first `price` (most trials do not fit)
        self.cgroup, self.cmean = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.bool_)

    def step(self) -> float:
        """`CostModel.plan_cost` of the current plan: `_step` of `_rebase`'s `_accumulate`, as `plan_cost` takes it
        (the same bits; one `_accumulate` fewer per `relayout` call, ~50 µs on f41 of `sharding.family`)."""
        return self.cost._step(*self.now, self.w)[0]

    def rating(self) -> float:
        """TorchRec's `plan_cost` of the current plan (the maximum of its `rank_loads`), from the loads `price`
        reads (one `rank_loads` fewer per call of the polish)."""
        return float(self._tload().max())

    def _tload(self) -> np.ndarray:
        """TorchRec's per-rank loads of the current plan: made when first asked for (most trials do not fit)."""
        if self.tload is None:
            self.tload = self.trec.rank_loads(self.plan) if self.trec is not None else np.zeros(self.w)
        return self.tload

    def _of(self, tp: TablePlan) -> list:
        """`_entry` of one table plan, kept by its identity (`relayout` makes each option's table plan once; a cache
        by shards' shapes and ranks behind this one saved only the rare re-make of an input plan's table plan, for a
        key per table plan)."""
        got = self.seen.get(id(tp))
        if got is None or got[0] is not tp:
            got = self.seen[id(tp)] = self._entry(tp)
        return got

    def _entry(self, tp: TablePlan) -> list:
        """[tp, `_block` (None until priced), TorchRec's loads, `memory`, (collective keys, block on their rows and
        the loads), `_priced` (None until priced)] of one table plan, all summed in one compiled call
        (`relayout_kernel.scatter_rows`). Why: one `np.add.at` per shape for the loads and per shape and tier for the
        memory, and a kernel call for the block, took ~21 µs a table plan on f41 of `sharding.family` (67 a call),
        ~40% of `relayout`. Each (row, rank) gets the same
        additions in the same order as in `_entry_reference` (shape by shape, rank by rank, from 0), so the same
        bits; the block's collectives are kept by key and get their rows of the sums table when first priced
        (`_block`), as `_make_block_reference` gives them rows, so rows are numbered in the same order."""
        cost, st = self.cost, tp.sharding_type
        t, tiers, trec = cost.tables[tp.name], self.tiers, self.trec
        local: dict[tuple, int] = {}  # collective key -> its row, from 4 in first-seen order
        at, vals, where, starts, wstarts = [], [], [], [0], [0]  # rows < 0 from the end: the loads', the tiers'
        last = len(tiers)
        for (rows, cols, tier, cf), ranks in tp.alike().items():
            _, v, keys = cost._terms(t, st, rows, cols, tier, cf, False)
            at += [0, 1, 2, 3, *[local.setdefault(k, 4 + len(local)) for k, _ in keys]]
            vals += [v[0], v[1], v[2], 1.0, *v[4:]]
            if trec is not None:
                at.append(-1 - last)
                vals.append(trec.shard_cost(t, st, rows, cols, tier, cf).total)
            for k, m in cost.shard_memory(t, st, rows, cols, tier, cf).items():
                at.append(tiers[k] - last)
                vals.append(m)
            where += ranks
            starts.append(len(at))
            wstarts.append(len(where))
        c = 4 + len(local)
        out = scatter_rows(c + 1 + len(tiers), self.w, np.array(at + starts + where + wstarts, dtype=np.int64),
                           np.array(vals, dtype=np.float64), len(starts), len(where))
        return [tp, None, out[c], out[c + 1:], (tuple(local), out[:c + 1]), None]

    def _entry_reference(self, tp: TablePlan) -> list:
        """`_entry` by `np.add.at` (`_make_block_reference`, `_memory`, and TorchRec's loads shape by shape)."""
        loads = np.zeros(self.w)
        if self.trec is not None:
            t, st = self.cost.tables[tp.name], tp.sharding_type
            for (rows, cols, tier, cf), where in tp.alike().items():
                np.add.at(loads, np.asarray(where, dtype=np.int64),
                          self.trec.shard_cost(t, st, rows, cols, tier, cf).total)
        return [tp, None, loads, _memory(self.cost, tp, list(self.tiers)), None, None]

    def _block(self, tp: TablePlan) -> tuple[np.ndarray, np.ndarray]:
        """(rows of the sums table, their seconds or counts per rank) of one table plan (rows 0-3 of `_entry`'s block
        are the work rows and the group's shard count)."""
        got = self._of(tp)
        if got[1] is None:
            self._priced(got)
        return got[1]

    def _priced(self, e: list) -> tuple[np.ndarray, np.ndarray]:
        """`price_change`'s form of entry `e`'s table plan: `_block`'s rows, and its block with TorchRec's loads as
        a last row (`_entry`'s own array); fills `_block` too (the collectives' rows numbered here)."""
        tp = e[0]
        if e[4] is None:  # `_entry_reference`'s
            e[1] = self._make_block_reference(tp)
            e[5] = (e[1][0], np.vstack([e[1][1], e[2]]))
        else:
            keys, block = e[4]
            rows = np.array([0, 1, 2, 3 + STYPES.index(tp.sharding_type), *[self._row(k) for k in keys]],
                            dtype=np.int64)
            e[1], e[5] = (rows, block[:-1]), (rows, block)
        return e[5]

    def memory(self, tp: TablePlan) -> np.ndarray:
        """`_memory` of a table plan (read only; rows: the topology's tiers in order): trials that do not fit are
        not priced."""
        return self._of(tp)[3]

    def _make_block_reference(self, tp: TablePlan) -> tuple[np.ndarray, np.ndarray]:
        """`_block` by `np.add.at`, row by row and shape by shape, rows ascending (tests check `_entry` against it
        bit for bit)."""
        cost, w, st = self.cost, self.w, tp.sharding_type
        t, g = cost.tables[tp.name], STYPES.index(st)
        local: dict[int, np.ndarray] = {}
        for (rows, cols, tier, cf), where in tp.alike().items():
            _, vals, keys = cost._terms(t, st, rows, cols, tier, cf, False)
            idx = np.asarray(where, dtype=np.int64)
            for r, v in [(0, vals[0]), (1, vals[1]), (2, vals[2]), (3 + g, 1.0),
                         *((self._row(k), x) for (k, _), x in zip(keys, vals[4:], strict=True))]:
                np.add.at(local.setdefault(r, np.zeros(w)), idx, v)
        order = sorted(local)
        return np.array(order, dtype=np.int64), np.array([local[r] for r in order])

    def _row(self, k: tuple) -> int:
        if k not in self.rows:
            self.rows[k] = 3 + self.g + len(self.coll)
            self.coll.append((STYPES.index(k[0]), self.cost.prices_by_mean(k[2])))
        return self.rows[k]

    def price(self, change: dict[str, TablePlan]) -> tuple[float, float]:
        """About (`plan_cost`, TorchRec's `plan_cost`) of the current plan with `change` (one or two tables) applied:
        the touched rows only (`price_change`, compiled), or `price_reference` where ranks pay per-holder stage
        costs (TorchRec's rating from its per-rank loads either way)."""
        parts = []
        for name, tp in change.items():
            for x in (self.tables[name], tp):
                e = self._of(x)
                parts += e[5] or self._priced(e)
        if len(parts) == 4:
            parts += _NONE
        if len(self.sums) < 3 + self.g + len(self.coll):  # a collective first seen in this change: zero rows
            extra = 3 + self.g + len(self.coll) - len(self.sums)
            self.sums = np.concatenate([self.sums, np.zeros((extra, self.w))])
            self.rmax, self.rsum = np.append(self.rmax, np.zeros(extra)), np.append(self.rsum, np.zeros(extra))
        if len(self.cgroup) != len(self.coll):
            self.cgroup = np.array([c[0] for c in self.coll], dtype=np.int64)
            self.cmean = np.array([c[1] for c in self.coll], dtype=np.bool_)
        work, comms, mask, rating = price_change(self.sums, self.rmax, self.rsum, self._tload(), *parts, self.g,
                                                 self.cgroup, self.cmean)
        if not self.fast:
            return self.price_reference(change), rating
        latency = self.masks.get(mask)
        if latency is None:
            groups = {STYPES[i]: set() for i in range(self.g) if (mask >> i) & 1}
            latency = self.masks[mask] = self.cost._fixed(groups, self.w)[0]
        return comms + latency + work + self.outside, rating

    def price_reference(self, change: dict[str, TablePlan]) -> float:
        """About `plan_cost` of the current plan with `change` applied: numpy over the whole sums table (the
        reference of `price`, and its path where ranks pay per-holder stage costs)."""
        new = {name: self._block(tp) for name, tp in change.items()}
        s, g = self.sums, self.g
        n = 3 + g + len(self.coll)
        s = np.concatenate([s, np.zeros((n - len(s), self.w))]) if len(s) < n else s.copy()
        for name, (rows, block) in new.items():
            if name not in self.terms:
                self.terms[name] = self._block(self.tables[name])
            old_rows, old = self.terms[name]
            s[old_rows] -= old
            s[rows] += block
        present = s[3:3 + g].max(axis=1) > 0.5
        cost = self.cost
        if cost.topology.stage_overhead:
            held = {STYPES[i]: set(np.flatnonzero(s[3 + i] > 0.5).tolist()) for i in np.flatnonzero(present)}
            latency, fixed = cost._fixed(held, self.w)
            work = s[:3] + fixed
        else:
            groups = tuple(np.flatnonzero(present).tolist())
            if groups not in self.latency:
                self.latency[groups] = cost._fixed({STYPES[i]: set() for i in groups}, self.w)[0]
            latency, work = self.latency[groups], s[:3]
        comms = 0.0
        if self.coll:
            c = s[3 + g:]
            group, mean = (np.array(x) for x in zip(*self.coll, strict=True))
            price = np.where(mean, c.sum(axis=1) / self.w, c.max(axis=1))
            comms = float(price[present[group]].sum())
        return comms + latency + float(work.max(axis=1).sum()) + self.outside

    def apply(self, change: dict[str, TablePlan]) -> None:
        self._rebase(ShardingPlan(self.w, {**self.tables, **change}))  # from the plan again: no drift


def _memory(cost: CostModel, tp: TablePlan, tiers: list[str]) -> np.ndarray:
    """Bytes per (tier, rank) that table plan `tp` takes (a rank holding two of its shards counts both:
    `np.add.at`, not `out[k, ranks] += v`, which adds once per distinct rank and let `tiers.promote` overfill a
    rank holding two column blocks of one table, a plan `validate_plan` rejects)."""
    t = cost.tables[tp.name]
    out = np.zeros((len(tiers), cost.topology.world_size))
    for (rows, cols, tier, fraction), ranks in tp.alike().items():
        for k, v in cost.shard_memory(t, tp.sharding_type, rows, cols, tier, fraction).items():
            np.add.at(out[tiers.index(k)], ranks, v)
    return out


def _options(cost: CostModel, plan: ShardingPlan, name: str, replicas: bool = False,
             make: Callable[..., TablePlan] = table_plan, twrw: dict[str, tuple] | None = None,
             ) -> Iterator[dict[str, TablePlan]]:
    """The re-layouts tried for table `name`: row-wise over all ranks (`replicas`: then data-parallel, where the
    table is in the fast tier); a table-row-wise table on each other host, and swapped with each table-row-wise
    table on another host (same tier and cache fraction as now). `make`: `table_plan`, or `relayout`'s memo of it
    (the same options recur over passes: one table plan each, priced once); `twrw`: `_twrw(cost, plan)`, which
    `relayout` keeps per plan."""
    topo, tp = cost.topology, plan.tables[name]
    t, w, h = cost.tables[name], topo.world_size, min(topo.ranks_per_host, topo.world_size)
    (_, _, tier, fraction), ranks = next(iter(tp.alike().items()))
    if tp.sharding_type != RW and w > 1:
        yield {name: make(t, RW, list(range(w)), tier, fraction)}
    if replicas and tp.sharding_type != DP and w > 1 and tier == topo.fast.name:
        yield {name: make(t, DP, list(range(w)), tier, 0.0)}
    if tp.sharding_type == TWRW and topo.num_hosts > 1:
        host = min(ranks) // h
        for other in range(topo.num_hosts):
            if other != host:
                yield {name: make(t, TWRW, list(range(other * h, other * h + h)), tier, fraction)}
        twrw = _twrw(cost, plan) if twrw is None else twrw
        mine = twrw[name][4]
        for m, (_, host_m, tier_m, fraction_m, ranks_m) in twrw.items():
            if host_m != host:
                yield {name: make(t, TWRW, ranks_m, tier, fraction),
                       m: make(cost.tables[m], TWRW, mine, tier_m, fraction_m)}


def _twrw(cost: CostModel, plan: ShardingPlan) -> dict[str, tuple]:
    """Per table-row-wise table of `plan`, in plan order: (its table plan, its host (that of its first shape's
    least rank), tier and cache fraction (its first shape's), its shards' ranks). Why: `_options` read these of
    every table-row-wise table for each table tried (f41 of `sharding.family`: 14 × 13 a call); `relayout` makes
    them once per plan, when it first tries a table-row-wise table on it."""
    h = min(cost.topology.ranks_per_host, cost.topology.world_size)
    out = {}
    for m, tq in plan.tables.items():
        if tq.sharding_type == TWRW:
            (_, _, tier_m, fraction_m), ranks_m = next(iter(tq.alike().items()))
            out[m] = (tq, min(ranks_m) // h, tier_m, fraction_m, tq.ranks)
    return out


def relayout(cost: CostModel, trec: TorchRecCostModel, plan: ShardingPlan, evals: int, t_cap: float,
             pareto: bool = False) -> ShardingPlan | None:
    """`plan` after whole-table re-layouts (module doc), or None if none was applied. `pareto` (the final polish,
    `optimizer` step 6): data-parallel is tried too, and a change is applied only when neither model's rating rises
    and one falls (`pareto_gain` against the current plan): the result is no worse than `plan` on either model."""
    topo = cost.topology
    tiers = [x.name for x in topo.tiers]
    cap = np.array([[topo.usable(x)] for x in tiers]) * (1 + 1e-12)
    cap_row = np.ascontiguousarray(cap[:, 0])  # `_over`'s form of it, the same values
    delta = _Delta(cost, plan, trec)
    mem = {n: _memory(cost, tp, tiers) for n, tp in plan.tables.items()}  # not `delta.memory`: an entry is ~5× the
    # bytes (its block too), ~20 µs more a table on r1000's 256 ranks (fresh pages), and few of the tables are priced
    used = sum(mem.values())
    ours, tr = delta.step(), (delta.rating() if pareto else 0.0)  # `plan_cost` of both; tr: read only in the polish
    order = sorted(plan.tables, key=lambda n: -cost.tables[n].pooling.expected * cost.tables[n].dim)
    made: dict[tuple, TablePlan] = {}
    twrw = None  # `_options`' view of the plan: made when a table-row-wise table is first tried on it

    def make(t: TableSpec, st: ShardingType, ranks: list[int], tier: str, fraction: float) -> TablePlan:
        key = (t.name, st, tuple(ranks), tier, fraction)
        got = made.get(key)
        if got is None:
            got = made[key] = table_plan(t, st, ranks, tier, fraction)
        return got
    spent, moved, quiet = 0, False, 0  # quiet: tables tried in a row on the current plan without a change
    while spent < evals and quiet < len(order):  # passes over `order`, each table tried once per plan
        for name in order:
            if quiet >= len(order) or spent >= evals:  # every table tried on this plan: a further pass would
                break  # repeat their trials; or no evaluation left (the rest would be tried on none)
            trials = []  # (incremental prices, option index, change, its memory) of the trials that could pass
            if twrw is None and plan.tables[name].sharding_type == TWRW:
                twrw = _twrw(cost, plan)
            for i, change in enumerate(_options(cost, plan, name, pareto, make, twrw)):
                if spent >= evals:
                    break
                new = {n: delta.memory(tp) for n, tp in change.items()}
                if _over(used, cap_row, new, mem):
                    continue
                spent += 1
                near, near_t = (x / (1 + _MARGIN) for x in delta.price(change))  # at most the exact prices
                if pareto:  # TorchRec's rating only where it can decide: a gain needs ours no higher than now
                    if near > ours * (1 + 1e-12) or near_t > min(tr, t_cap) * (1 + 1e-12) or (
                            near >= ours * (1 - 1e-9) and near_t >= tr * (1 - 1e-9)):
                        continue  # `pareto_gain` false on the exact prices too
                elif near >= ours * (1 - 1e-9) or near_t > t_cap * (1 + 1e-12):
                    continue
                trials.append((near, i, near_t, change, new))
            best = _best(cost, trec, plan, trials, ours, tr, t_cap, pareto)
            if best is not None:
                ours, tr, plan, change, new = best
                used = used + sum(new.values()) - sum(mem[n] for n in new)
                mem.update(new)
                delta.apply(change)
                twrw = None
                moved, quiet = True, 0  # this table too was tried on the plan before its change only
            else:
                quiet += 1
    return plan if moved else None


def _over(used: np.ndarray, cap: np.ndarray, new: dict[str, np.ndarray], mem: dict[str, np.ndarray]) -> bool:
    """Whether a change (its tables' bytes per (tier, rank) `new`, theirs now in `mem`) puts a rank's tier over
    its capacity `cap` (per tier) and above its bytes now `used`: `_over_reference` in one compiled call
    (`relayout_kernel.over_cap`; issue 16: eight numpy operations on a few dozen bytes per trial), the same
    operations on each element, so the same answer."""
    (n1, *n2), (m1, *m2) = new.values(), [mem[n] for n in new]
    return bool(over_cap(used, cap, n1, n2[0] if n2 else n1, m1, m2[0] if m2 else m1, bool(n2)))


def _over_reference(used: np.ndarray, cap: np.ndarray, new: dict[str, np.ndarray], mem: dict[str, np.ndarray],
                    ) -> bool:
    """`_over` in numpy, as `relayout`'s loop had it (`cap` per tier)."""
    after = used + sum(new.values()) - sum(mem[n] for n in new)
    return bool(((after > cap[:, None]) & (after > used)).any())


def _best(cost: CostModel, trec: TorchRecCostModel, plan: ShardingPlan, trials: list[tuple], ours: float, tr: float,
          t_cap: float, pareto: bool) -> tuple[float, float, ShardingPlan, dict[str, TablePlan], dict] | None:
    """The best of one table's trials (near, option index, near TorchRec, change, its memory), as (ours, TorchRec's
    rating, plan, change, its memory), or None: the least exact cost by our model among those that lower it and
    TorchRec rates at most `t_cap` (`pareto`: the least (ours, TorchRec's) among those with a `pareto_gain`), the
    first option on ties. The trials are priced exactly in order of their incremental price, a lower bound of the
    exact one, until it exceeds the best exact cost found: the same choice as pricing every trial in option order,
    with fewer exact prices (f54 of `sharding.family`: 160 exact prices in relayout, most of trials whose
    incremental price already lay above another trial's exact cost)."""
    best: tuple | None = None  # (ours, TorchRec's, option index, plan, change, memory)
    for near, i, near_t, change, new in sorted(trials, key=lambda x: x[:2]):
        if best is not None and (near > best[0] or (pareto and near >= best[0] and near_t > best[1])):
            if near > best[0]:
                break  # the rest cost more by ours than the best, exactly too
            continue  # no better on either model than the best (ties may remain: priced)
        trial = ShardingPlan(plan.world_size, {**plan.tables, **change}, optimizer=plan.optimizer)
        a = cost.plan_cost(trial)
        if best is not None and (a > best[0] or (a == best[0] and not pareto and i > best[2])):
            continue
        if pareto:
            if a > ours * (1 + 1e-12):
                continue
            b = trec.plan_cost(trial)
            if pareto_gain((a, b), (ours, tr), min(tr, t_cap)) and (
                    best is None or (a, b, i) < (best[0], best[1], best[2])):
                best = (a, b, i, trial, change, new)
        elif a < ours * (1 - 1e-9) and trec.plan_cost(trial) <= t_cap * (1 + 1e-12):
            best = (a, tr, i, trial, change, new)
    return None if best is None else (best[0], best[1], best[3], best[4], best[5])


def pareto_gain(new: tuple[float, float], old: tuple[float, float], t_cap: float, tol: float = 1e-9) -> bool:
    """Whether (ours, TorchRec's) `new` improves on `old`: TorchRec's rating at or below `t_cap`, and less cost by
    our model, or no more cost by ours and a lower TorchRec rating (each by more than `tol`, relative)."""
    if new[1] > t_cap * (1 + 1e-12):
        return False
    return new[0] < old[0] * (1 - tol) or (new[0] <= old[0] * (1 + 1e-12) and new[1] < old[1] * (1 - tol))
