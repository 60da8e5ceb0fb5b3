"""`pack.retype`'s re-cut applied from the table's `Cuts` (issue 16) gives the bits of the path it replaces
(`_apply_cut` against `_apply`), and `retype` with it as before."""
from __future__ import annotations

import copy

import numpy as np

import sharding.pack as pack
from sharding.pack import CW, DP, TW, TWRW
from tests.sharding.test_retype_fast_paths import SEEDS, _both_states


def _bits(s) -> tuple:  # noqa: ANN001
    return (s.L.tobytes(), s.count.tobytes(), np.float64(s.const).tobytes(), np.float64(s.spread).tobytes(),
            tuple((x, s.used[x].tobytes()) for x in sorted(s.used)))


def _copy(s):  # noqa: ANN001, ANN202
    return pack.copy_placed(s, [], {})[0]


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


def test_retype_with_the_recut_from_the_cuts_retypes_as_with_apply(monkeypatch) -> None:  # noqa: ANN001
    """`retype` with `_apply_cut` and with `_apply`: the same loads, fixed cost, spread, layout and pieces, bit for
    bit; some tables change type."""
    def run() -> list:
        out = []
        for b, fresh in _both_states(SEEDS):
            s, p, lay = fresh()
            pack.local_search(s, p, 50)
            got = pack.retype(s, p, lay, b.cost.tables, b.shard, 8, b.spread, cuts=b.cuts)
            out.append((_bits(s), copy.deepcopy(lay), [(q.table, q.st, q.rank) for q in got], lay != fresh()[2]))
        return out

    fast = run()
    monkeypatch.setattr(pack, "_apply_cut", lambda state, c, st, ranks, new, spread:
                        pack._apply(state, c.shard, c.t, st, ranks, spread))
    want = run()
    assert fast == want
    assert sum(x[3] for x in fast) > 3
    assert any(DP in {st for st, _ in lay.values()} for _, lay, _, _ in fast)
