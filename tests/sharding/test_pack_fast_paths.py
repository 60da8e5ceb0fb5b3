"""The packing's vectorised paths give the figures of the plain ones, and data-parallel tables are sharded again
where their replicas load the hottest rank (issue 16: f14/f34 of `sharding.family`)."""
from __future__ import annotations

import numpy as np
import pytest

from sharding import BASELINES, CostModel, load_topology
from sharding.family import instance
from sharding.layouts import row_ranges
from sharding.pack import TW, TWRW, Builder
from sharding.plan import Shard, ShardingType
from sharding.search import STYPES, Loads, Resources
from sharding.tablesets import load_tables
from sharding.tiers import assign_tiers
from sharding.trec_cost import TorchRecCostModel
from sharding.workload import PlanError, PlanWorkload


def _builder(wl: PlanWorkload, topo, scale: tuple[float, float] = (1e-3, 1e-3)) -> Builder:  # noqa: ANN001
    cost, trec = CostModel(wl, topo), TorchRecCostModel(wl, topo)
    return Builder(Resources(cost, trec, scale), assign_tiers(cost), 0)


def test_host_scores_match_putting_the_group_on_each_host_in_turn() -> None:
    wl = PlanWorkload(load_tables("random:30:2"), 2048)
    topo = load_topology("dgx_h100_x2", 16)  # 2 hosts × 8 ranks
    b = _builder(wl, topo)
    state = Loads(b.res, topo, {TW, TWRW})
    rng = np.random.default_rng(0)
    for t in wl.tables[:20]:  # some load first, so the hosts differ
        state.put(int(rng.integers(16)), TW, *b.shard(t, TW, t.rows, t.dim))
    t, h = wl.tables[25], topo.ranks_per_host
    shards = [b.shard(t, TWRW, hi - lo, t.dim) for lo, hi in row_ranges(t.rows, h)]
    ok, j, s = state.host_scores(STYPES.index(TWRW), shards, state.const)
    for host in range(topo.num_hosts):
        ranks = range(host * h, host * h + h)
        assert ok[host] == all(state.fits_rank(r, m) for r, (_, m) in zip(ranks, shards, strict=True))
        for r, (v, m) in zip(ranks, shards, strict=True):
            state.put(r, TWRW, v, m)
        assert (j[host], s[host]) == pytest.approx(state.objective(), rel=1e-12)
        for r, (v, m) in zip(ranks, shards, strict=True):
            state.take(r, TWRW, v, m)


def test_shard_fast_builds_the_same_immutable_shard() -> None:
    a, b = Shard(3, 0, 10, 4, 8, "hbm", 0.25), Shard.fast(3, 0, 10, 4, 8, "hbm", 0.25)
    assert a == b and hash(a) == hash(b) and b.rows == 10 and b.cols == 4
    with pytest.raises(AttributeError):
        b.rank = 1  # type: ignore[misc]


def test_plan_cost_is_the_step_every_rank_of_the_breakdown_reports() -> None:
    for tables, hw, ranks, mode in (("random:40:1", "dgx_h100_x2", 16, "train"), ("rm2", "dgx_h100", 8,
                                                                                      "inference")):
        wl = PlanWorkload(load_tables(tables), 1024, mode)
        topo = load_topology(hw, ranks)
        cost = CostModel(wl, topo)
        for fn in BASELINES.values():
            try:
                plan = fn(wl, topo)
            except PlanError:
                continue
            step = cost.plan_cost(plan)
            assert all(rc.elapsed == pytest.approx(step, rel=1e-12) for rc in cost.breakdown(plan))


def test_data_parallel_tables_are_sharded_again_where_replicas_load_the_hottest_rank(monkeypatch) -> None:  # noqa: ANN001
    """f34 (38 tables, 64 ranks, inference): TorchRec-only packing; its splitting rule replicates the small tables,
    which puts every replica on the rank that a heavy table already makes the hottest."""
    import sharding.pack as pack
    inst = instance(34)
    topo = inst.topology.reserve_inputs(inst.workload.ids_per_batch)
    cost, trec = CostModel(inst.workload, topo), TorchRecCostModel(inst.workload, topo)
    res = Resources(cost, trec, (1e6, 1e-3))  # TorchRec's model alone
    b = Builder(res, assign_tiers(cost), 100)
    chosen = sum(b.choose(t, 0.5, 1.0, True, False, True)[0] == ShardingType.DATA_PARALLEL for t in inst.workload.tables)
    plan = b.pack(0.5, 1.0, True, False, True)
    kept = sum(tp.sharding_type == ShardingType.DATA_PARALLEL for tp in plan.tables.values())
    monkeypatch.setattr(pack, "_unreplicate", lambda state, pieces, *a: pieces)  # the same packing without it
    before = Builder(res, assign_tiers(cost), 100).pack(0.5, 1.0, True, False, True)
    assert chosen > 0 and kept < chosen
    assert trec.plan_cost(plan) < trec.plan_cost(before)


def _torchrec_options_inline(b: Builder, t, mu: float, allow_dp: bool) -> tuple:  # noqa: ANN001
    """The filter `choose` ran on every call before it was memoised (`Builder._torchrec_feasible`)."""
    from sharding.layouts import torchrec_column_pieces
    from sharding.pack import CW

    opts, most, tw, dp = b._feasible(t, mu, allow_dp)
    keep = [i for i, o in enumerate(opts) if o[0] != CW or o[1] == torchrec_column_pieces(t.dim)]
    opts, most = [opts[i] for i in keep], [most[i] for i in keep]
    tw, dp = (next((j for j, i in enumerate(keep) if i == x), -1) for x in (tw, dp))
    return opts, most, tw, dp


@pytest.mark.parametrize("seed", [4, 14, 44])
def test_torchrec_column_options_memo_matches_filtering_on_every_choose(seed: int) -> None:
    """Memoised TorchRec-column options and `choose` on them equal the former per-call filter, bit for bit, and
    do not disturb the unfiltered memo a sharing builder reads."""
    inst = instance(seed)
    b = _builder(inst.workload, inst.topology.reserve_inputs(inst.workload.ids_per_batch))
    b.torchrec_columns = True
    plain = Builder(b.res, b.tiers, 0, share=b)
    inline = Builder(b.res, b.tiers, 0, share=b)
    inline.torchrec_columns = True
    inline._torchrec_feasible = lambda t, mu, allow_dp: _torchrec_options_inline(inline, t, mu, allow_dp)
    for t in inst.workload.tables[:200]:
        for mu, allow_dp in ((1.0, True), (0.5, False), (0.0, True)):
            want = _torchrec_options_inline(b, t, mu, allow_dp)
            for _ in range(2):  # the first call fills the memo, the second reads it
                got = b._torchrec_feasible(t, mu, allow_dp)
                assert got[2:] == want[2:] and got[1] == want[1]
                assert [(o[0], o[1], o[2].tobytes(), o[3]) for o in got[0]] == \
                       [(o[0], o[1], o[2].tobytes(), o[3]) for o in want[0]]
            assert plain._feasible(t, mu, allow_dp) is b._feasible(t, mu, allow_dp)
            for theta, least, twrw, uniform in ((0.0, True, False, None), (1.5, False, False, None),
                                                (0.7, 2, False, None), (1.0, False, True, None),
                                                (1.0, 3, False, None), (1.0, False, True, TWRW)):
                assert b.choose(t, theta, mu, allow_dp, least, twrw, uniform) == \
                    inline.choose(t, theta, mu, allow_dp, least, twrw, uniform)


def _plan_json(plan) -> str:  # noqa: ANN001
    import json
    return json.dumps(plan.to_dict(), sort_keys=True)


@pytest.mark.parametrize("tables, hw, ranks", [("random:60:3", "dgx_h100_x2", 16), ("random:40:5", "dgx_h100", 8)])
def test_one_placement_finished_twice_is_two_fresh_packings(tables: str, hw: str, ranks: int) -> None:
    """`_smallest_piece` places once and finishes the placement without moves and a copy of it with moves
    (`copy_placed`): each plan is, byte for byte, the one a fresh `pack` with those settings makes."""
    from sharding.pack import copy_placed
    wl = PlanWorkload(load_tables(tables), 1024)
    topo = load_topology(hw, ranks).reserve_inputs(wl.ids_per_batch)
    for least_loaded in (True, False):
        for args in ((0.0, 1.0, True, True, False), (0.5, 1.0, True, False, True)):
            def fresh(rounds: int, least_loaded: bool = least_loaded) -> Builder:
                b = _builder(wl, topo)
                b.least_loaded, b.retype_rounds = least_loaded, rounds
                return b
            want_placed, want_moved = fresh(0).pack(*args), fresh(24).pack(*args)
            b = fresh(0)
            placed = b.placed(*args)
            again = copy_placed(*placed)
            got_placed = b.finish(*placed)  # no moves: must leave the copy as it was placed
            b.retype_rounds = 24
            got_moved = b.finish(*again)
            assert _plan_json(got_placed) == _plan_json(want_placed)
            assert _plan_json(got_moved) == _plan_json(want_moved)


def test_baselines_on_a_shared_model_are_the_plans_on_their_own() -> None:
    """The optimizer passes its own `CostModel` to the baselines (`cost=`); the plans are the same, and a model
    of another topology is not used."""
    for tables, hw, ranks in (("random:80:4", "dgx_h100_x2", 16), ("random:120:7", "dgx_h100", 8)):
        wl = PlanWorkload(load_tables(tables), 512)
        topo = load_topology(hw, ranks).reserve_inputs(wl.ids_per_batch)
        shared, other = CostModel(wl, topo), CostModel(wl, load_topology(hw, 4).reserve_inputs(wl.ids_per_batch))
        for fn in BASELINES.values():
            try:
                want = _plan_json(fn(wl, topo))
            except PlanError:
                continue
            assert _plan_json(fn(wl, topo, cost=shared)) == want
            assert _plan_json(fn(wl, topo, cost=other)) == want


def _placed_states(seeds: tuple[int, ...]):  # noqa: ANN202
    """(builder, a fresh copy of a placed state) of some family instances' packings: two scales, three settings each."""
    from sharding.pack import copy_placed
    for seed in seeds:
        inst = instance(seed)
        topo = inst.topology.reserve_inputs(inst.workload.ids_per_batch)
        cost, trec = CostModel(inst.workload, topo), TorchRecCostModel(inst.workload, topo)
        tiers = assign_tiers(cost)
        for scale in ((1e-3, 1e-3), (1e6, 1e-3)):
            b = Builder(Resources(cost, trec, scale), tiers, 0)
            for args in ((0.5, 1.0, True, False, True), (0.0, 1.0, True, True, False), (1.0, 1.0, False, False, False)):
                try:
                    placed = b.placed(*args)
                except Exception:  # noqa: BLE001  (`NoFit`: this setting packs nothing to compare)
                    continue
                yield b, lambda placed=placed: copy_placed(*placed)


def _same_loads(a, r) -> bool:  # noqa: ANN001
    return np.array_equal(a.L, r.L) and np.array_equal(a.count, r.count) and a.const == r.const and \
        a.spread == r.spread and all(np.array_equal(a.used[t], r.used[t]) for t in r.used)


def test_compiled_unreplicate_makes_the_changes_of_the_numpy_one() -> None:
    """`_unreplicate` (one compiled trial per table) and `_unreplicate_reference` (numpy on the loads): the same
    loads, fixed cost, layout and pieces, bit for bit, on packings where replicas are sharded again."""
    import sharding.pack as pack
    changed = 0
    for b, fresh in _placed_states((2, 7, 14, 34)):
        (sa, pa, la), (sr, pr, lr) = fresh(), fresh()
        pack.local_search(sa, pa, 50)
        pack.local_search(sr, pr, 50)
        got = pack._unreplicate(sa, pa, la, b.cost.tables, b.shard, 72, b.spread)
        want = pack._unreplicate_reference(sr, pr, lr, b.cost.tables, b.shard, 72, b.spread)
        assert _same_loads(sa, sr) and la == lr and (got is pa) == (want is pr)
        assert [(p.table, p.st, p.rank) for p in got] == [(p.table, p.st, p.rank) for p in want]
        changed += fresh()[2] != lr
    assert changed > 0  # some table left data-parallel, so the trials' acceptances are compared too


def test_compiled_local_search_moves_as_the_python_loop() -> None:
    """`local_search` (its loop one compiled call) and `local_search_reference`: the same iterations, loads and
    ranks, bit for bit, with a short and a long budget."""
    from sharding.search import local_search, local_search_reference
    moved = 0
    for _, fresh in _placed_states((2, 7, 14, 34)):
        for iters in (3, 2000):
            (sa, pa, _), (sr, pr, _) = fresh(), fresh()
            n = local_search(sa, pa, iters)
            assert n == local_search_reference(sr, pr, iters)
            assert _same_loads(sa, sr) and [p.rank for p in pa] == [p.rank for p in pr]
            moved += n > 0
    assert moved > 0


def test_compiled_merge_trial_retypes_as_the_numpy_one() -> None:
    """`retype` with its column-wise merge trial one compiled call (`_merge`) and with the numpy one
    (`_merge_reference`): the same loads, fixed cost, layout and pieces, bit for bit; some trials merge a table."""
    import sharding.pack as pack
    merged, tried = 0, 0
    calls = []

    def counted(*args):  # noqa: ANN002, ANN202
        calls.append(pack._merge(*args))
        return calls[-1]

    for b, fresh in _placed_states((2, 7, 14, 34, 41)):
        (sa, pa, la), (sr, pr, lr) = fresh(), fresh()
        pack.local_search(sa, pa, 50)
        pack.local_search(sr, pr, 50)
        got = pack.retype(sa, pa, la, b.cost.tables, b.shard, 4, b.spread, counted)
        want = pack.retype(sr, pr, lr, b.cost.tables, b.shard, 4, b.spread, pack._merge_reference)
        assert _same_loads(sa, sr) and la == lr
        assert [(p.table, p.st, p.rank) for p in got] == [(p.table, p.st, p.rank) for p in want]
        tried += len(calls)
        merged += sum(r >= 0 for r in calls)
        calls.clear()
    assert tried > 0 and merged > 0  # trials made, and some accepted: both answers of the trial are compared


def test_merge_trial_answers_as_the_numpy_one_on_every_column_wise_table() -> None:
    """`_merge` and `_merge_reference` give the same rank (or −1) for every column-wise table of some packings,
    and neither changes the loads."""
    import sharding.pack as pack
    from sharding.pack import CW
    seen = set()
    for b, fresh in _placed_states((2, 7, 14, 34, 41)):
        state, pieces, _ = fresh()
        j0, s0 = state.objective()
        before = fresh()[0]
        for name in {p.table for p in pieces if p.st == CW}:
            t = b.cost.tables[name]
            blocks = [p for p in pieces if p.table == name]
            v, m = b.shard(t, TW, t.rows, t.dim)
            delta = b.spread(t, TW, 1) - b.spread(t, CW, len(blocks))
            for jj, ss in ((j0, s0), (j0 * 2, s0 * 2)):  # as is, and a target every fitting merge beats
                r = pack._merge(state, blocks, v, m, delta, jj, ss)
                assert r == pack._merge_reference(state, blocks, v, m, delta, jj, ss)
                seen.add(r >= 0)
        assert _same_loads(state, before)
    assert seen == {True, False}


def test_compiled_replica_score_and_host_pick_match_the_numpy_ones() -> None:
    """`_try_split`'s data-parallel re-cut (`replicas_score`) scores as `_dp_score_reference` (put, price, restore)
    does, bit for bit, and `lexmin_host` picks `_lexmin`'s host, on every table of some packings."""
    import sharding.pack as pack
    from sharding.retype_kernel import replicas_score
    from sharding.search import GROUP
    from sharding.unreplicate_kernel import _lexmin_host as lexmin_host
    scored, hosts = 0, set()
    for b, fresh in _placed_states((2, 7, 14, 34, 41)):
        state, _, _ = fresh()
        before, res, w = fresh()[0], state.res, state.L.shape[1]
        h = min(state.topology.ranks_per_host, w)
        for t in b.cost.workload.tables[:40]:
            v, m = b.shard(t, pack.DP, t.rows, t.dim)
            more = b.spread(t, pack.DP, w) - b.spread(t, TW, 1)
            sums = state.count.sum(axis=1)
            sums[GROUP[pack.DP]] += w
            c = res.const({STYPES[g] for g in np.flatnonzero(sums > 0)}) + ((state.spread + more) + 0.0) / w
            got = replicas_score(state.L, state.count, res.hold, res.s0, res.s1, GROUP[pack.DP], v, c)
            assert got == pack._dp_score_reference(state, v, m, more)
            scored += 1
            if h > 1 and state.topology.num_hosts > 1:
                shards = [b.shard(t, TWRW, y - x, t.dim) for x, y in row_ranges(t.rows, h)]
                ok, j, s = state.host_scores(STYPES.index(TWRW), shards, state.const)
                assert lexmin_host(ok, j, s) == pack._lexmin(ok, j, s)
                hosts.add(pack._lexmin(ok, j, s))
        assert _same_loads(state, before)
    assert scored > 0 and len(hosts) > 1


def test_table_cuts_are_the_shards_each_trial_made() -> None:
    """`Cuts` (a table's re-cuts, made once per table) holds what `_try_split` and `_unreplicate` built on every
    trial: the same shard objects in `row_ranges`' order, the same bytes rows and spreads, bit for bit; and
    `retype` with the builder's memo (`Builder.cuts`, shared across scales) changes what it changes without it."""
    import sharding.pack as pack
    from sharding.layouts import column_splits
    seen = 0
    for b, fresh in _placed_states((2, 14, 34)):
        topo, tiers = b.topo, [x.name for x in b.topo.tiers]
        w, h = topo.world_size, min(topo.ranks_per_host, topo.world_size)
        for t in b.cost.workload.tables[:12]:
            c = b.cuts(t)
            assert c is b.cuts(t) and c.tw is b.shard(t, TW, t.rows, t.dim)
            assert c.dp is b.shard(t, ShardingType.DATA_PARALLEL, t.rows, t.dim)
            assert np.array_equal(c.tw_bytes, [c.tw[1].get(x, 0.0) for x in tiers])
            assert (c.sp_tw, c.sp_dp) == (b.spread(t, TW, 1), b.spread(t, ShardingType.DATA_PARALLEL, w))
            if h > 1 and topo.num_hosts > 1:
                want = [b.shard(t, TWRW, hi - lo, t.dim) for lo, hi in row_ranges(t.rows, h)]
                assert all(x is y for x, y in zip(c.twrw, want, strict=True)) and c.sp_twrw == b.spread(t, TWRW, h)
                assert np.array_equal(c.twrw_vecs, np.array([v for v, _ in want]))
                assert np.array_equal(c.twrw_bytes, np.array([[m.get(x, 0.0) for x in tiers] for _, m in want]))
            else:
                assert c.twrw == []
            ks = [k for k in column_splits(t.dim) if k <= min(w, pack.MAX_SPLIT)]
            assert [k for k, *_ in c.column()] == ks
            for k, v, m, mb, sp in c.column():
                cut = b.shard(t, ShardingType.COLUMN_WISE, t.rows, t.dim // k)
                assert v is cut[0] and m is cut[1]
                assert np.array_equal(mb, [m.get(x, 0.0) for x in tiers]) and sp == b.spread(t, ShardingType.COLUMN_WISE, k)
            seen += 1
        (sa, pa, la), (sr, pr, lr) = fresh(), fresh()
        got = pack.retype(sa, pa, la, b.cost.tables, b.shard, 4, b.spread, cuts=b.cuts)
        want = pack.retype(sr, pr, lr, b.cost.tables, b.shard, 4, b.spread)
        assert _same_loads(sa, sr) and la == lr
        assert [(p.table, p.st, p.rank) for p in got] == [(p.table, p.st, p.rank) for p in want]
    assert seen > 0


def test_table_plans_keyed_by_all_ranks_are_the_plans_of_those_ranks() -> None:
    """`Builder.table_plans` keys ranks equal to all ranks in order as None: each plan it returns has the shards
    and `alike` of `table_plan` on the layout's own ranks, whether they are all ranks in order, in another order
    (after the in-order ones are memoised), or some ranks; and the memo returns the same objects again."""
    from sharding.layouts import table_plan
    rng = np.random.default_rng(3)
    for tables, hw, ranks in (("random:30:2", "dgx_h100_x2", 16), ("random:24:5", "torchrec_default", 32)):
        b = _builder(PlanWorkload(load_tables(tables), 2048), load_topology(hw, ranks))
        w, names = b.topo.world_size, [t.name for t in b.cost.workload.tables]
        every = list(range(w))
        types = [ShardingType.DATA_PARALLEL, ShardingType.ROW_WISE, TWRW, TW, ShardingType.COLUMN_WISE]
        sts = {n: types[i % len(types)] for i, n in enumerate(names)}
        layouts = [{n: (st, list(every)) for n, st in sts.items()},
                   {n: (st, [int(r) for r in rng.permutation(w)]) for n, st in sts.items()},
                   {n: (st, every[::-1]) for n, st in sts.items()},
                   {n: (st, sorted(int(r) for r in rng.choice(w, 8, replace=False))) for n, st in sts.items()},
                   {n: (st, list(every)) for n, st in sts.items()}]
        first = None
        for layout in layouts:
            got = b.table_plans(layout)
            assert list(got) == names
            for t in b.cost.workload.tables:
                st, rs = layout[t.name]
                want = table_plan(t, st, rs, *b.tiers[t.name])
                assert got[t.name].sharding_type == want.sharding_type and got[t.name].shards == want.shards
                assert got[t.name].alike() == want.alike()
            first = first or got
        assert all(got[n] is first[n] for n in names)  # the last layout is the first again: the memo's objects


def test_unreplicate_puts_a_cut_as_apply_puts_it() -> None:
    """`_put_cut` (`_unreplicate`'s change: the table's `Cuts` shards table-wise on a rank, or table-row-wise on a
    host in three numpy steps) leaves the loads, holder counts, bytes and spread of `_apply`, bit for bit, and
    returns the holders per group; tables are put one after another on the same hosts and ranks, so the holder
    overheads (random ones here: the family's topologies have none) go on ranks that hold the group and on ranks
    that do not."""
    import sharding.pack as pack
    hosts, rng = 0, np.random.default_rng(0)
    for b, fresh in _placed_states((2, 7, 14, 34)):
        topo, shape = b.topo, b.res.hold.shape
        b.res.hold[:] = np.where(rng.random(shape) < 0.5, rng.random(shape) * 1e-3, 0.0)
        w, h = topo.world_size, min(topo.ranks_per_host, topo.world_size)
        (sa, _, _), (sr, _, _) = fresh(), fresh()
        for i, t in enumerate(b.cost.workload.tables[:10]):
            c = b.cuts(t)
            kinds = [(TW, i % w)] + ([(TWRW, (i % (w // h)) * h)] if c.twrw else [])
            for st, first in kinds:
                ranks = list(range(first, first + h)) if st == TWRW else [first]
                sp = b.spread(t, st, len(ranks))
                sums = pack._put_cut(sa, c, st, first, sp)
                pack._apply(sr, b.shard, t, st, ranks, sp)
                assert sums == sr.count.sum(axis=1).tolist()
                pack._refresh_const(sa)
                assert _same_loads(sa, sr)
                hosts += st == TWRW
    assert hosts > 0


def _placed_reference(b: Builder, theta: float, mu: float, dp: bool, lw: bool, tf: bool, un) -> tuple:  # noqa: ANN001
    """`Builder.placed` as it was before `_fixed_blocks` and the bytes kept in one array: each data-parallel and
    row-wise block priced by `shard` on every placement, bytes written back to `state.used` after each kernel."""
    from sharding.layouts import row_sizes
    from sharding.pack import DP, RW, NoFit, Piece
    from sharding.search_kernels import place_groups, put_blocks
    topo = b.topo
    w, h = topo.world_size, min(topo.ranks_per_host, topo.world_size)
    choice = b.choose_all(theta, mu, dp, lw, tf, un)
    b._fit_replicas(choice, theta, mu, lw, tf, un)
    spread = sum(b.spread(t, *choice[t.name]) for t in b.cost.workload.tables) if b.res.by_mean else 0.0
    state = Loads(b.res, topo, {st for st, _ in choice.values()}, spread)
    pieces, groups, layout, blocks = [], [], {}, []
    for t in b.cost.workload.tables:
        st, k = choice[t.name]
        if st == DP:
            blocks.append((STYPES.index(DP), 0, w, *b.shard(t, st, t.rows, t.dim)))
            layout[t.name] = (st, list(range(w)))
        elif st == RW:
            first = 0
            for rows, n in row_sizes(t.rows, w):
                blocks.append((STYPES.index(RW), first, n, *b.shard(t, st, rows, t.dim)))
                first += n
            layout[t.name] = (st, list(range(w)))
        elif st == TWRW:
            groups.append((*b._group(t, state.tiers), t.name))
        else:
            v, m = b.shard(t, st, t.rows, t.dim // k)
            pieces.extend([Piece(t.name, st, v, m) for _ in range(k)])
            layout[t.name] = (st, [])
    if blocks:
        used = np.stack([state.used[x] for x in state.tiers])
        g = np.array([x[0] for x in blocks], dtype=np.int64)
        put_blocks(state.L, state.count, b.res.hold, used, g, np.array([x[1] for x in blocks], dtype=np.int64),
                   np.array([x[2] for x in blocks], dtype=np.int64), g == STYPES.index(DP),
                   np.array([x[3] for x in blocks]), np.array([[x[4].get(y, 0.0) for y in state.tiers] for x in blocks]))
        for i, x in enumerate(state.tiers):
            state.used[x][:] = used[i]
    if any(state.used[k].max() > state.cap[k] for k in state.tiers):
        raise NoFit("row-wise and data-parallel shards alone overfill a rank")
    if groups:
        groups.sort(key=lambda g: -g[0])
        used = np.stack([state.used[x] for x in state.tiers])
        hosts = np.full(len(groups), -1, dtype=np.int64)
        bad = place_groups(state.L, state.count, b.res.hold, b.res.s0, b.res.s1, state.const, STYPES.index(TWRW),
                           np.array([g[1] for g in groups]), np.array([g[2] for g in groups]), used,
                           np.array([state.cap[x] for x in state.tiers], dtype=np.float64), hosts)
        for i, x in enumerate(state.tiers):
            state.used[x][:] = used[i]
        if bad >= 0:
            raise NoFit(groups[bad][3])
        for (*_, name), best in zip(groups, hosts.tolist(), strict=True):
            layout[name] = (TWRW, list(range(best * h, best * h + h)))
    b.place(state, pieces)
    return state, pieces, layout


@pytest.mark.parametrize("seed", [2, 7, 14, 34, 41, 74, 88])
def test_placed_with_memoised_blocks_is_the_placement_priced_each_time(seed: int) -> None:
    """`Builder.placed` (data-parallel and row-wise blocks from `_fixed_blocks`, bytes kept in one array through
    the kernels) and `_placed_reference` (the blocks priced and the bytes written back on every placement): the
    same loads, holder counts, bytes, fixed cost, pieces and layout bit for bit, or the same `NoFit`, on both
    models' scales and the settings `_packings` tries (TorchRec's uniform row-wise and table-row-wise ones too),
    each twice (the second from the memo)."""
    from sharding.pack import RW, NoFit
    inst = instance(seed)
    topo = inst.topology.reserve_inputs(inst.workload.ids_per_batch)
    cost, trec = CostModel(inst.workload, topo), TorchRecCostModel(inst.workload, topo)
    tiers, kinds = assign_tiers(cost), set()
    for scale in ((1e-3, 1e-3), (1e6, 1e-3)):
        b = Builder(Resources(cost, trec, scale), tiers, 0)
        for un in (None, RW, TWRW):
            b.least_loaded = b.torchrec_columns = un is not None
            for args in ((0.5, 1.0, True, False, True), (0.0, 1.0, True, True, False), (1.0, 0.25, False, False, False),
                         (0.25, 0.1, True, True, False)):
                for _ in range(2):
                    try:
                        want = _placed_reference(b, *args, un)
                    except NoFit as e:
                        with pytest.raises(NoFit, match=f"^{e}$"):
                            b.placed(*args, None, un)
                        kinds.add("NoFit")
                        continue
                    got = b.placed(*args, None, un)
                    assert _same_loads(got[0], want[0]) and got[2] == want[2]
                    assert [(p.table, p.st, p.rank, p.vec is q.vec) for p, q in zip(got[1], want[1], strict=True)] == \
                        [(p.table, p.st, p.rank, True) for p in want[1]]
                    kinds |= {st for st, _ in got[2].values()}
    assert {ShardingType.ROW_WISE, ShardingType.DATA_PARALLEL} <= kinds
    assert TWRW in kinds or min(topo.num_hosts, topo.ranks_per_host) == 1
