"""`pack.retype`'s fast paths (issue 16) give the bits of the paths they replace: the column-wise re-cuts of
`_try_split` in one compiled call (`_best_cut` against `_best_cut_reference`), the re-cut types' J bound on floats
(`_j_bound` against `Resources.score`), the pieces' sort key kept per vector (`_piece_weights`), and `retype` with
all three as before."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

import sharding.pack as pack
from sharding import CostModel
from sharding.family import instance
from sharding.pack import TW, Builder
from sharding.search import STYPES, Loads, Resources
from sharding.tiers import assign_tiers
from sharding.trec_cost import TorchRecCostModel
from tests.sharding.test_pack_fast_paths import _placed_states, _same_loads

SEEDS = (2, 7, 14, 34, 41, 73, 88)
_STAGES = ("input_dist", "lookup", "output_dist", "output_dist_bwd", "lookup_bwd", "optimizer")


def _overhead_states(seeds: tuple[int, ...]):  # noqa: ANN202
    """`_placed_states` on the instances' topologies with a distinct fixed cost per sharding group (stage overheads)
    and all-to-alls priced by the mean (CPU ranks): on the family's own topologies every group's fixed cost and
    every spread is 0, so a wrong set of groups or spread would price the same."""
    for seed in seeds:
        inst = instance(seed)
        topo = replace(inst.topology.reserve_inputs(inst.workload.ids_per_batch), device="cpu", stage_overhead={
            g: {s: 1e-5 * (1 + 3 * i + j) for j, s in enumerate(_STAGES)}
            for i, g in enumerate(("base", "TW", "CW", "RW", "TWRW", "DP"))})
        cost, trec = CostModel(inst.workload, topo), TorchRecCostModel(inst.workload, topo)
        for scale in ((1e-3, 1e-3), (1e-3, 1e6)):  # the second: J is ours, fixed cost included
            b = Builder(Resources(cost, trec, scale), assign_tiers(cost), 0)
            for args in ((0.5, 1.0, True, False, True), (1.0, 1.0, False, False, False)):
                try:
                    placed = b.placed(*args)
                except pack.NoFit:  # this setting packs nothing to compare
                    continue
                yield b, lambda placed=placed: pack.copy_placed(*placed)


def _both_states(seeds: tuple[int, ...]):  # noqa: ANN202
    yield from _placed_states(seeds)
    yield from _overhead_states(seeds)


def _tw_taken(states):  # noqa: ANN001, ANN202
    """For each packing of `states` after a local search, each table-wise piece taken off in turn: (loads without
    it, the piece, its table's `Cuts`, the packing's J); the loads are restored after each."""
    for b, fresh in states:
        state, pieces, _ = fresh()
        pack.local_search(state, pieces, 50)
        j = state.objective()[0]
        for p in [p for p in pieces if p.st == TW]:
            snap = pack._snapshot(state)
            state.take(p.rank, TW, p.vec, p.mem)
            yield state, p, b.cuts(b.cost.tables[p.table]), j
            pack._restore(state, snap)


def _pieces_key(got: tuple | None) -> tuple | None:
    if got is None:
        return None
    (j, s), st, ranks, new = got
    return (j, s), st, ranks, [(p.table, p.st, p.rank, id(p.vec), id(p.mem)) for p in new]


def test_the_compiled_column_wise_recuts_pick_as_the_python_loop() -> None:
    """For every table-wise piece of some packings, taken off as `retype` takes it: `_best_cut` returns the
    re-cut, ranks, (J, secondary) bits and pieces of `_best_cut_reference`, with no bound, the packing's J and a
    bound only some re-cuts pass; and both leave the loads as they were. Also with fixed costs per group, and with
    every column-wise piece off (the re-cut then adds the column-wise group)."""
    found = none = added = 0
    for (b, fresh), bare in [(x, False) for x in _both_states(SEEDS)] + [(x, True) for x in _overhead_states(SEEDS)]:
        state, pieces, _ = fresh()
        pack.local_search(state, pieces, 50)
        for q in [q for q in pieces if q.st == pack.CW and bare]:
            state.take(q.rank, pack.CW, q.vec, q.mem)
        pack._refresh_const(state)
        j = state.objective()[0]
        for p in [p for p in pieces if p.st == TW]:
            snap = pack._snapshot(state)
            before = pack._snapshot(state)
            state.take(p.rank, TW, p.vec, p.mem)
            c = b.cuts(b.cost.tables[p.table])
            cw = c.column()
            if cw:
                sums = state.count.sum(axis=1)
                pmask = sum(1 << int(g) for g in np.flatnonzero(sums > 0))
                for j0 in (math.inf, j, j * 0.999):
                    got = pack._best_cut(state, p.table, cw, c.sp_tw, pmask, j0)
                    want = pack._best_cut_reference(state, p.table, cw, c.sp_tw, pmask, j0)
                    assert _pieces_key(got) == _pieces_key(want)
                    found, none = found + (got is not None), none + (got is None)
                    added += got is not None and not pmask & 1 << pack.GROUP[pack.CW]
            pack._restore(state, snap)
            assert np.array_equal(state.L, before[0]) and np.array_equal(state.count, before[1])
    assert found > 20 and none > 20 and added > 20  # both answers, many times; re-cuts adding their group


def test_the_recut_types_bound_is_resources_score_bit_for_bit() -> None:
    """`_j_bound` from the maxima's sums taken once equals J of `Resources.score` on the maxima, for the loads of
    some packings and fixed costs across scales."""
    rng = np.random.default_rng(1)
    checked = 0
    for _, fresh in _placed_states(SEEDS[:4]):
        state = fresh()[0]
        res = state.res
        for maxima in (state.L.max(axis=1), state.L.max(axis=1) * rng.uniform(0.5, 2.0, state.L.shape[0])):
            msum, top = float(maxima[:-1].sum(axis=0)), float(maxima[-1])
            for const in (0.0, state.const, state.const * 3.7, float(rng.uniform(0, 1e-2))):
                assert pack._j_bound(res, msum, top, const) == float(res.score(maxima, const)[0])
                checked += 1
    assert checked > 50


def test_retype_retypes_as_before_with_the_reference_paths(monkeypatch) -> None:  # noqa: ANN001
    """`retype` with `_best_cut`, `_j_bound`, `_piece_weights`, the group masks and `_fits_everywhere` and with the
    paths they replace (the Python loop over `place_cut`, `Resources.score`, the key computed on every sort, sets
    of groups priced per call, `fits(m).all()`): the same loads, fixed cost, layout and pieces, bit for bit; some
    tables change type."""
    fast = []
    for b, fresh in _both_states(SEEDS):
        s, p, lay = fresh()
        pack.local_search(s, p, 50)
        fast.append((s, pack.retype(s, p, lay, b.cost.tables, b.shard, 8, b.spread, cuts=b.cuts), lay))
    monkeypatch.setattr(pack, "_best_cut", pack._best_cut_reference)
    monkeypatch.setattr(pack, "_try_split", pack._try_split_reference)
    _set_paths(monkeypatch)
    monkeypatch.setattr(pack, "_j_bound",  # `Resources.score` on (Σ maxima but the last, the last): the same J
                        lambda res, msum, top, const: float(res.score(np.array([msum, top]), const)[0]))
    monkeypatch.setattr(pack, "_piece_weights", lambda weight: lambda p: -float((p.vec * weight).sum()))
    changed = 0
    for (b, fresh), (s0, got, lay0) in zip(_both_states(SEEDS), fast, strict=True):
        s, p, lay = fresh()
        pack.local_search(s, p, 50)
        want = pack.retype(s, p, lay, b.cost.tables, b.shard, 8, b.spread, cuts=b.cuts)
        assert _same_loads(s0, s) and lay0 == lay
        assert [(q.table, q.st, q.rank) for q in got] == [(q.table, q.st, q.rank) for q in want]
        changed += lay != fresh()[2]
    assert changed > 3


def test_the_column_wise_recuts_stacked_once_per_table_pick_as_stacked_per_call() -> None:
    """`_best_cut` with `Cuts.column_arrays` (stacked once per table) returns the re-cut, ranks, (J, secondary)
    bits and pieces of `_best_cut` stacking `Cuts.column()` on the call and of `_best_cut_reference`; the arrays
    are made once and equal the stacked re-cuts."""
    found = 0
    for state, p, c, j in _tw_taken(_placed_states(SEEDS)):
        cw = c.column()
        if cw:
            arrays = c.column_arrays()
            assert c.column_arrays() is arrays
            want = (np.array([x[4] for x in cw]), np.array([x[1] for x in cw]), np.array([x[3] for x in cw]),
                    np.array([x[0] for x in cw], dtype=np.int64))
            for a, x in zip(arrays, want, strict=True):
                assert a.dtype == x.dtype and a.shape == x.shape and a.tobytes() == x.tobytes()
            sums = state.count.sum(axis=1)
            pmask = sum(1 << int(g) for g in np.flatnonzero(sums > 0))
            for j0 in (math.inf, j, j * 0.999):
                got = pack._best_cut(state, p.table, cw, c.sp_tw, pmask, j0, arrays)
                assert _pieces_key(got) == _pieces_key(pack._best_cut(state, p.table, cw, c.sp_tw, pmask, j0))
                assert _pieces_key(got) == _pieces_key(pack._best_cut_reference(state, p.table, cw, c.sp_tw,
                                                                               pmask, j0))
                found += got is not None
    assert found > 20


def test_retype_asks_each_merge_once_a_round_and_retypes_as_when_asking_every_time(monkeypatch) -> None:  # noqa: ANN001
    """`retype` with its merge trials answered once per table and round (`_round_memo`) and asked every time:
    the same loads, layout and pieces, bit for bit; the memo skips some trials, and each skipped one would have
    answered as the first (checked by asking it again on the loads of the skip)."""
    calls: list[int] = []
    mismatched: list[tuple] = []

    def counted(*args):  # noqa: ANN002, ANN202
        calls.append(pack._merge(*args))
        return calls[-1]

    def checking(merge):  # noqa: ANN001, ANN202  `_round_memo` that asks again and compares
        memo = pack_round_memo(merge)
        seen: dict[str, int] = {}

        def once(state, blocks, *rest):  # noqa: ANN001, ANN002, ANN202
            r = memo(state, blocks, *rest)
            if blocks[0].table in seen and pack._merge(state, blocks, *rest) != r:
                mismatched.append((blocks[0].table, r))
            seen[blocks[0].table] = r
            return r
        return once

    pack_round_memo = pack._round_memo
    fast, asked = [], []
    monkeypatch.setattr(pack, "_round_memo", checking)
    for b, fresh in _placed_states(SEEDS):
        s, p, lay = fresh()
        pack.local_search(s, p, 50)
        fast.append((s, pack.retype(s, p, lay, b.cost.tables, b.shard, 8, b.spread, counted, cuts=b.cuts), lay))
        asked.append(len(calls))
        calls.clear()
    assert not mismatched
    monkeypatch.setattr(pack, "_round_memo", lambda merge: merge)
    skipped = 0
    for (b, fresh), (s0, got, lay0), n in zip(_placed_states(SEEDS), fast, asked, strict=True):
        s, p, lay = fresh()
        pack.local_search(s, p, 50)
        want = pack.retype(s, p, lay, b.cost.tables, b.shard, 8, b.spread, counted, cuts=b.cuts)
        assert _same_loads(s0, s) and lay0 == lay
        assert [(q.table, q.st, q.rank) for q in got] == [(q.table, q.st, q.rank) for q in want]
        skipped += len(calls) - n
        calls.clear()
    assert skipped > 0


def test_the_merged_mask_holds_the_numpy_groups_and_prices_as_them() -> None:
    """`_merged_mask` (Python ints) holds the groups of `_merged_groups_reference` (numpy), and
    `Resources.const_mask` prices it with the bits of `Resources.const` of that set, for random holder counts with
    groups emptied and filled by the merge (the column-wise group left with none, the table-wise group gaining its
    first holder) and for the loads of some packings."""
    rng = np.random.default_rng(3)
    gcw, gtw = pack.GROUP[pack.CW], pack.GROUP[pack.TW]
    cases = []
    for _ in range(300):
        count = rng.integers(0, 3, size=(len(STYPES), int(rng.integers(2, 9)))) * (rng.random((len(STYPES), 1)) < 0.5)
        count[gtw] *= rng.random() < 0.7
        blocks = int(rng.integers(1, 4))
        count[gcw, :blocks] += 1 if rng.random() < 0.8 else 0
        cases.append((count.astype(np.int64), blocks))
    res = None
    for b, fresh in _both_states(SEEDS[:3]):
        count, res = fresh()[0].count, b.res
        cases += [(count, 1), (count, 2)]
    lost = gained = 0
    for count, blocks in cases:
        mask, want = pack._merged_mask(count, blocks), pack._merged_groups_reference(count, blocks)
        assert pack._groups(mask) == want and res.const_mask(mask) == res.const(want)
        lost += pack.STYPES[gcw] not in want
        gained += count[gtw].sum() == 0
    assert lost > 20 and gained > 20


def _set_paths(monkeypatch) -> None:  # noqa: ANN001
    """Patch in the paths the group masks and `_fits_everywhere` replace: every fixed cost priced from a set of
    groups (not kept per mask), groups found by numpy, the fit test on every rank."""
    monkeypatch.setattr(Resources, "const_mask", lambda self, mask: self.const(pack._groups(mask)))
    monkeypatch.setattr(Loads, "const_with_mask",
                        lambda self, mask, spread=0.0: self.const_with(pack._groups(mask), spread))
    monkeypatch.setattr(pack, "_mask", lambda sums: sum(1 << int(g) for g in np.flatnonzero(np.array(sums) > 0)))
    monkeypatch.setattr(pack, "_fits_everywhere", lambda state, m: bool(state.fits(m).all()))
    monkeypatch.setattr(pack, "_refresh_const", pack._refresh_const_reference)


def test_group_masks_price_as_sets_bit_for_bit() -> None:
    """`_mask` holds numpy's groups with a holder; `Resources.const_mask` (kept per mask) and
    `Loads.const_with_mask` give the bits of `const` / `const_with` of the set, for every mask (asked before and
    after the set); `_refresh_const` sets the fixed cost `_refresh_const_reference` sets."""
    rng = np.random.default_rng(5)
    for _ in range(500):
        sums = (rng.integers(0, 3, len(STYPES)) * (rng.random(len(STYPES)) < 0.5)).tolist()
        assert pack._mask(sums) == sum(1 << int(g) for g in np.flatnonzero(np.array(sums) > 0))
    checked = 0
    for b, fresh in _both_states(SEEDS[:4]):
        state = fresh()[0]
        res = Resources(b.res.cost, b.res.trec, (1.0, 1.0))  # nothing priced yet: masks first, then sets
        for mask in range(1 << len(STYPES)):
            assert res.const_mask(mask) == res.const(pack._groups(mask)) == b.res.const(pack._groups(mask))
            assert b.res.const_mask(mask) == b.res.const(pack._groups(mask))
            for more in (0.0, float(rng.uniform(0, 1e-3))):
                assert state.const_with_mask(mask, more) == state.const_with(pack._groups(mask), more)
            checked += 1
        other = fresh()[0]
        state.const = other.const = -1.0
        pack._refresh_const(state)
        pack._refresh_const_reference(other)
        assert state.const == other.const
    assert checked >= 8 << len(STYPES)


def test_the_fit_on_every_rank_from_the_largest_use_is_fits_all() -> None:
    """`_fits_everywhere` answers `Loads.fits(m).all()` on the loads of some packings, for bytes that fit on every
    rank, on none, and exactly up to the largest use's room (the tie)."""
    answers = set()
    for _, fresh in _placed_states(SEEDS[:4]):
        state = fresh()[0]
        for x in state.tiers:
            room = state.cap[x] * (1 + 1e-12) - state.used[x]
            for b in (0.0, float(room.min()), float(room.min()) * 1.000001, float(room.max()), float(room.mean()),
                      float(np.nextafter(room.min(), 0.0))):
                for m in ({x: b}, {x: b, state.tiers[0]: 1.0}):
                    got = pack._fits_everywhere(state, m)
                    assert got == bool(state.fits(m).all())
                    answers.add(got)
    assert answers == {True, False}


def test_try_split_picks_as_with_sets_of_groups() -> None:
    """`_try_split` (group masks, `_fits_everywhere`, the compiled column-wise re-cuts) and `_try_split_reference`
    (sets of groups priced per call, `fits(m).all()`, the Python loop over `place_cut`): the same re-cut, ranks,
    (J, secondary) bits and pieces for every table-wise piece of some packings taken off, with no bound, the
    packing's J and a bound only some re-cuts pass, also where groups have fixed costs; every re-cut type found."""
    kinds, absent = set(), set()
    for state, _, c, j in _tw_taken(_both_states(SEEDS)):
        for j0 in (math.inf, j, j * 0.999):
            got = pack._try_split(state, c, j0)
            assert _pieces_key(got) == _pieces_key(pack._try_split_reference(state, c, j0))
            kinds.add(got and got[1])
            if got and not state.count[pack.GROUP[got[1]]].any() and state.res.const_mask(0) > 0:
                absent.add(got[1])  # a type picked while its group was absent, with fixed costs
    assert kinds == {None, pack.CW, pack.DP, pack.TWRW} and absent >= {pack.TWRW}


def test_merge_with_its_arrays_kept_per_call_answers_as_built_per_trial() -> None:
    """`_merge` with one `_TierRows` for many trials (capacities once, each bytes dict's row once) gives the rank
    (or −1) of `_merge` building them per trial and of `_merge_reference`, for every column-wise table of some
    packings, as is and against a target every fitting merge beats; the kept rows are the rows built per trial."""
    seen, kept = set(), 0
    for b, fresh in _both_states(SEEDS[:5]):
        state, pieces, _ = fresh()
        rows = pack._TierRows(state)
        assert rows.cap.tobytes() == np.array([state.cap[x] for x in state.tiers], float).tobytes()
        j0, s0 = state.objective()
        for name in sorted({p.table for p in pieces if p.st == pack.CW}):
            t = b.cost.tables[name]
            blocks = [p for p in pieces if p.table == name]
            v, m = b.shard(t, TW, t.rows, t.dim)
            delta = b.spread(t, TW, 1) - b.spread(t, pack.CW, len(blocks))
            for jj, ss in ((j0, s0), (j0 * 2, s0 * 2)):
                r = pack._merge(state, blocks, v, m, delta, jj, ss, rows)
                assert r == pack._merge(state, blocks, v, m, delta, jj, ss)
                assert r == pack._merge_reference(state, blocks, v, m, delta, jj, ss)
                seen.add(r >= 0)
            for d in (m, blocks[0].mem):
                got = rows.row(d)
                assert got is rows.row(d) and got.tobytes() == np.array([d.get(x, 0.0) for x in state.tiers]).tobytes()
                kept += 1
    assert seen == {True, False} and kept > 20


def test_retype_with_its_merge_arrays_kept_retypes_as_the_numpy_merge() -> None:
    """`retype` with its default merge trial (`_merge` with `_TierRows` kept for the call) and with
    `_merge_reference`: the same loads, layout and pieces, bit for bit; some tables change type."""
    changed = 0
    for b, fresh in _both_states(SEEDS[:5]):
        (sa, pa, la), (sr, pr, lr) = fresh(), fresh()
        pack.local_search(sa, pa, 50)
        pack.local_search(sr, pr, 50)
        got = pack.retype(sa, pa, la, b.cost.tables, b.shard, 8, b.spread, cuts=b.cuts)
        want = pack.retype(sr, pr, lr, b.cost.tables, b.shard, 8, b.spread, pack._merge_reference, cuts=b.cuts)
        assert _same_loads(sa, sr) and la == lr
        assert [(p.table, p.st, p.rank) for p in got] == [(p.table, p.st, p.rank) for p in want]
        changed += la != fresh()[2]
    assert changed > 3


def test_the_merged_shard_from_the_cuts_is_what_retype_asked_for() -> None:
    """`_merged_shard` (the table-wise shard and spread from the table's `Cuts`) gives `_merged_shard_reference`'s
    (asked of `shard` and `sp`): the same vector and bytes objects and the spread change's bits, for every table of
    some packings and 1, 2, 4, 8 blocks, with the builder's `Cuts` (shared across scales) and `retype`'s own
    (`_cuts_memo`), with and without spreads."""
    checked = 0
    for b, _ in _both_states(SEEDS[:4]):
        own = pack._cuts_memo(b.topo, b.shard, b.spread)
        for t in b.cost.workload.tables:
            for n in (1, 2, 4, 8):
                for cuts, sp in ((b.cuts, b.spread), (own, b.spread), (pack._cuts_memo(b.topo, b.shard, None),
                                                                      lambda t, st, k: 0.0)):
                    got, want = pack._merged_shard(cuts(t), n, sp), pack._merged_shard_reference(t, n, b.shard, sp)
                    assert got[0] == want[0] and got[1] is want[1] and got[2] is want[2]
                    checked += got[0] != 0.0
    assert checked > 100
