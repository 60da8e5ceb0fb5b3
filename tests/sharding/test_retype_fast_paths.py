"""`pack.retype`'s fast paths (issue 16) give the bits of the paths they replace: the column-wise re-cuts of
`_try_split` in one compiled call (`_best_cut` against `_best_cut_reference`), the re-cut types' J bound on floats
(`_j_bound` against `Resources.score`), the pieces' sort key kept per vector (`_piece_weights`), and `retype` with
all three as before."""
from __future__ import annotations

import math

import numpy as np

import sharding.pack as pack
from sharding.pack import TW
from sharding.search import STYPES
from tests.sharding.test_pack_fast_paths import _placed_states, _same_loads

SEEDS = (2, 7, 14, 34, 41, 73, 88)


def _pieces_key(got: tuple | None) -> tuple | None:
    if got is None:
        return None
    (j, s), st, ranks, new = got
    return (j, s), st, ranks, [(p.table, p.st, p.rank, id(p.vec), id(p.mem)) for p in new]


def test_the_compiled_column_wise_recuts_pick_as_the_python_loop() -> None:
    """For every table-wise piece of some packings, taken off as `retype` takes it: `_best_cut` returns the
    re-cut, ranks, (J, secondary) bits and pieces of `_best_cut_reference`, with no bound, the packing's J and a
    bound only some re-cuts pass; and both leave the loads as they were."""
    found = none = 0
    for b, fresh in _placed_states(SEEDS):
        state, pieces, _ = fresh()
        pack.local_search(state, pieces, 50)
        j = state.objective()[0]
        for p in [p for p in pieces if p.st == TW]:
            snap = pack._snapshot(state)
            before = pack._snapshot(state)
            state.take(p.rank, TW, p.vec, p.mem)
            c = b.cuts(b.cost.tables[p.table])
            cw = c.column()
            if cw:
                sums = state.count.sum(axis=1)
                present = {STYPES[g] for g in np.flatnonzero(sums > 0)}
                for j0 in (math.inf, j, j * 0.999):
                    got = pack._best_cut(state, p.table, cw, c.sp_tw, sums, present, j0)
                    want = pack._best_cut_reference(state, p.table, cw, c.sp_tw, sums, present, j0)
                    assert _pieces_key(got) == _pieces_key(want)
                    found, none = found + (got is not None), none + (got is None)
            pack._restore(state, snap)
            assert np.array_equal(state.L, before[0]) and np.array_equal(state.count, before[1])
    assert found > 20 and none > 20  # both answers, many times


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
    """`retype` with `_best_cut`, `_j_bound` and `_piece_weights` and with the paths they replace (the Python loop
    over `place_cut`, `Resources.score`, the key computed on every sort): the same loads, fixed cost, layout and
    pieces, bit for bit; some tables change type."""
    fast = []
    for b, fresh in _placed_states(SEEDS):
        s, p, lay = fresh()
        pack.local_search(s, p, 50)
        fast.append((s, pack.retype(s, p, lay, b.cost.tables, b.shard, 8, b.spread, cuts=b.cuts), lay))
    monkeypatch.setattr(pack, "_best_cut", pack._best_cut_reference)
    monkeypatch.setattr(pack, "_j_bound",  # `Resources.score` on (Σ maxima but the last, the last): the same J
                        lambda res, msum, top, const: float(res.score(np.array([msum, top]), const)[0]))
    monkeypatch.setattr(pack, "_piece_weights", lambda weight: lambda p: -float((p.vec * weight).sum()))
    changed = 0
    for (b, fresh), (s0, got, lay0) in zip(_placed_states(SEEDS), fast, strict=True):
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
    for b, fresh in _placed_states(SEEDS):
        state, pieces, _ = fresh()
        pack.local_search(state, pieces, 50)
        j = state.objective()[0]
        for p in [p for p in pieces if p.st == TW]:
            snap = pack._snapshot(state)
            state.take(p.rank, TW, p.vec, p.mem)
            c = b.cuts(b.cost.tables[p.table])
            cw = c.column()
            if cw:
                arrays = c.column_arrays()
                assert c.column_arrays() is arrays
                want = (np.array([x[4] for x in cw]), np.array([x[1] for x in cw]), np.array([x[3] for x in cw]),
                        np.array([x[0] for x in cw], dtype=np.int64))
                for a, x in zip(arrays, want, strict=True):
                    assert a.dtype == x.dtype and a.shape == x.shape and a.tobytes() == x.tobytes()
                sums = state.count.sum(axis=1)
                present = {STYPES[g] for g in np.flatnonzero(sums > 0)}
                for j0 in (math.inf, j, j * 0.999):
                    got = pack._best_cut(state, p.table, cw, c.sp_tw, sums, present, j0, arrays)
                    assert _pieces_key(got) == _pieces_key(pack._best_cut(state, p.table, cw, c.sp_tw, sums,
                                                                         present, j0))
                    assert _pieces_key(got) == _pieces_key(pack._best_cut_reference(state, p.table, cw, c.sp_tw,
                                                                                   sums, present, j0))
                    found += got is not None
            pack._restore(state, snap)
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


def test_the_merged_groups_are_the_numpy_ones_in_the_same_order() -> None:
    """`_merged_groups` (Python ints) gives the set of `_merged_groups_reference` (numpy), iterated in the same
    order, for random holder counts with groups emptied and filled by the merge (the column-wise group left with
    none, the table-wise group gaining its first holder) and for the loads of some packings."""
    rng = np.random.default_rng(3)
    gcw, gtw = pack.GROUP[pack.CW], pack.GROUP[pack.TW]
    cases = []
    for _ in range(300):
        count = rng.integers(0, 3, size=(len(STYPES), int(rng.integers(2, 9)))) * (rng.random((len(STYPES), 1)) < 0.5)
        count[gtw] *= rng.random() < 0.7
        blocks = int(rng.integers(1, 4))
        count[gcw, :blocks] += 1 if rng.random() < 0.8 else 0
        cases.append((count.astype(np.int64), blocks))
    for _, fresh in _placed_states(SEEDS[:3]):
        count = fresh()[0].count
        cases += [(count, 1), (count, 2)]
    lost = gained = 0
    for count, blocks in cases:
        got, want = pack._merged_groups(count, blocks), pack._merged_groups_reference(count, blocks)
        assert got == want and list(got) == list(want)
        lost += pack.STYPES[gcw] not in got
        gained += count[gtw].sum() == 0
    assert lost > 20 and gained > 20
