"""`pack.retype`'s per-round fast paths (issue 16) give the bits of the paths they replace: the hot ranks' keys
as one numpy product (`_hot_ranks` against `_hot_ranks_reference`), rank `a`'s snapshot around a table-wise trial
(`_rank_snapshot` against `_snapshot`), the re-cut applied from the table's `Cuts` (`_apply_cut` against
`_apply`), and `retype` with all of them as before."""
from __future__ import annotations

import copy

import numpy as np

import sharding.pack as pack
from sharding.pack import CW, DP, TW, TWRW
from tests.sharding.test_pack_fast_paths import _placed_states
from tests.sharding.test_retype_fast_paths import SEEDS, _both_states


def _bits(s) -> tuple:  # noqa: ANN001
    return (s.L.tobytes(), s.count.tobytes(), np.float64(s.const).tobytes(), np.float64(s.spread).tobytes(),
            tuple((x, s.used[x].tobytes()) for x in sorted(s.used)))


def _copy(s):  # noqa: ANN001, ANN202
    return pack.copy_placed(s, [], {})[0]


def test_the_hot_ranks_sort_as_one_product_per_rank() -> None:
    """`_hot_ranks` orders the hot ranks as `_hot_ranks_reference`, its keys with the bits of a sum per rank, on
    packings, on random loads (10 rows: numpy's pairwise sum is not a left-to-right one) with many hot ranks, and
    with every key equal (a zero weight: the stable order)."""
    rng, checked, ties = np.random.default_rng(3), 0, 0
    for _, fresh in _placed_states(SEEDS):
        state, pieces, _ = fresh()
        pack.local_search(state, pieces, 50)
        assert pack._hot_ranks(state) == pack._hot_ranks_reference(state)
        k, w = state.L.shape
        for _ in range(6):
            state.L = rng.random((k, w)) * 10.0 ** rng.integers(-6, 2, size=(k, 1))
            state.L[:, rng.integers(0, w, size=w // 3)] = state.L[:, [0]]  # ties of whole columns
            got = pack._hot_ranks(state)
            assert got == pack._hot_ranks_reference(state)
            checked += len(got) > 2
            ranks = list(range(w))
            want = [-float((state.L[:, r] * state.res.weight).sum()) for r in ranks]
            assert np.array(pack._rank_keys(state, ranks)).tobytes() == np.array(want).tobytes()
        weight = state.res.weight.copy()  # all keys −0.0: the hot ranks in the order they were found
        try:
            state.res.weight[:] = 0.0
            got = pack._hot_ranks(state)
            assert got == pack._hot_ranks_reference(state) and got != sorted(got, reverse=True)
            ties += len(got) > 2
        finally:
            state.res.weight[:] = weight
    assert checked > 10 and ties > 3


def test_a_rank_snapshot_restores_a_take_as_the_full_snapshot() -> None:
    """After `take` of a table-wise piece and `_try_split`, `_rank_restore` leaves the bits `_restore` leaves."""
    tried = 0
    for b, fresh in _both_states(SEEDS[:4]):
        state, pieces, _ = fresh()
        pack.local_search(state, pieces, 50)
        for p in [p for p in pieces if p.st == TW][:6]:
            other = _copy(state)
            full, part = pack._snapshot(other), pack._rank_snapshot(state, p.rank)
            for s in (state, other):
                s.take(p.rank, TW, p.vec, p.mem)
                pack._try_split(s, b.cuts(b.cost.tables[p.table]))
            pack._restore(other, full)
            pack._rank_restore(state, p.rank, part)
            assert _bits(state) == _bits(other)
            tried += 1
    assert tried > 20


def test_a_recut_applied_from_the_cuts_puts_as_apply() -> None:
    """`_apply_cut` of `_try_split`'s re-cut (column-wise, replicas, table-row-wise) leaves the loads, holders,
    bytes, fixed cost and spread of `_apply`, bit for bit; with random holder overheads (the family's topologies
    have none) so a holder counted on the wrong ranks would show."""
    rng, kinds = np.random.default_rng(5), set()
    for b, fresh in _both_states(SEEDS):
        shape = b.res.hold.shape
        b.res.hold[:] = np.where(rng.random(shape) < 0.5, rng.random(shape) * 1e-3, 0.0)
        state, pieces, _ = fresh()
        pack._refresh_const(state)
        for p in [p for p in pieces if p.st == TW][:8]:
            t = b.cost.tables[p.table]
            c = b.cuts(t)
            state.take(p.rank, TW, p.vec, p.mem)
            found = pack._try_split(state, c)
            if found is not None:
                _, st, ranks, new = found
                sp = b.spread(t, st, len(ranks)) - b.spread(t, TW, 1)
                a, r = _copy(state), _copy(state)
                pack._apply_cut(a, c, st, ranks, new, sp)
                pack._apply(r, b.shard, t, st, ranks, sp)
                assert _bits(a) == _bits(r)
                kinds.add(st)
            state.put(p.rank, TW, p.vec, p.mem)
    assert kinds >= {CW, TWRW}, kinds


def test_retype_with_its_round_paths_retypes_as_with_the_paths_they_replace(monkeypatch) -> None:  # noqa: ANN001
    """`retype` with `_hot_ranks`, `_rank_snapshot` and `_apply_cut`, and with the forms they replace (a product
    per hot rank, the full snapshot, `_apply`): the same loads,
    fixed cost, spread, layout and pieces, bit for bit; some tables change type."""
    def run() -> list:
        out = []
        for b, fresh in _both_states(SEEDS):
            s, p, lay = fresh()
            pack.local_search(s, p, 50)
            got = pack.retype(s, p, lay, b.cost.tables, b.shard, 8, b.spread, cuts=b.cuts)
            out.append((_bits(s), copy.deepcopy(lay), [(q.table, q.st, q.rank) for q in got], lay != fresh()[2]))
        return out

    fast = run()
    monkeypatch.setattr(pack, "_hot_ranks", pack._hot_ranks_reference)
    monkeypatch.setattr(pack, "_rank_snapshot", lambda state, a: pack._snapshot(state))
    monkeypatch.setattr(pack, "_rank_restore", lambda state, a, snap: pack._restore(state, snap))
    monkeypatch.setattr(pack, "_apply_cut", lambda state, c, st, ranks, new, spread:
                        pack._apply(state, c.shard, c.t, st, ranks, spread))
    want = run()
    assert fast == want
    assert sum(x[3] for x in fast) > 3
    assert any(DP in {st for st, _ in lay.values()} for _, lay, _, _ in fast)
