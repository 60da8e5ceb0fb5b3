"""The compiled kernels of the planner (`sharding.search_kernels`: moves, swaps, placement, column-wise re-cuts,
table-row-wise hosts, summaries) give bitwise the figures of the numpy code they replace, so plans do not change."""
from __future__ import annotations

import numpy as np
import pytest

from sharding import CostModel, load_topology
from sharding.layouts import row_ranges
from sharding.pack import _best_host, _place_new, _refresh_const, _restore, _snapshot
from sharding.plan import ShardingType
from sharding.search import STYPES, Loads, Resources, best_of
from sharding.search_kernels import (
    _best_of,
    move_scores,
    pairwise_sum,
    place_all,
    place_cut,
    place_groups,
    place_scores,
    put_blocks,
    summary,
    swap_scores,
    top3,
)
from sharding.tablesets import load_tables
from sharding.trec_cost import TorchRecCostModel
from sharding.workload import PlanWorkload

TW, CW, TWRW = ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.TABLE_ROW_WISE


@pytest.mark.parametrize("n", [*range(1, 20), 31, 64, 127])
def test_pairwise_sum_is_numpys_sum_bit_for_bit(n: int) -> None:
    rng = np.random.default_rng(n)
    for _ in range(20):
        x = rng.standard_normal(n) * 10.0 ** rng.integers(-6, 6, n)
        assert pairwise_sum(x) == x.sum()
        col = np.ascontiguousarray(np.tile(x[:, None], (1, 3)))[:, [1]]  # a (n, 1) column, as the swaps reduce
        assert pairwise_sum(x) == col.sum(axis=0)[0]


def _state(seed: int, ranks: int, mode: str) -> tuple[Loads, list]:
    wl = PlanWorkload(load_tables(f"random:{ranks * 3}:{seed}"), 1024, mode)
    topo = load_topology("dgx_h100", ranks)
    res = Resources(CostModel(wl, topo), TorchRecCostModel(wl, topo), (1e-3, 2e-3))
    state = Loads(res, topo, {TW, CW})
    rng = np.random.default_rng(seed)
    pieces = []
    for t in wl.tables:
        st = TW if rng.random() < 0.7 else CW
        v, m = res.shard(t, st, t.rows, t.dim if st is TW else max(t.dim // 2, 1), "hbm", 1.0)
        r = int(rng.integers(ranks // 2 + 1))  # some ranks stay empty: ties and zero rows
        state.put(r, st, v, m)
        pieces.append((r, STYPES.index(st), v))
    return state, pieces


def _args(state: Loads) -> tuple:
    res = state.res
    topi, topv = state.top3()
    return state.L, state.count, res.hold, res.weight, res.s0, res.s1, state.const, topi, topv


@pytest.mark.parametrize(("seed", "ranks", "mode"), [(1, 2, "train"), (2, 3, "inference"), (3, 8, "train"),
                                                     (4, 16, "inference"), (5, 40, "train")])
def test_move_and_swap_scores_are_the_numpy_scores_bit_for_bit(seed: int, ranks: int, mode: str) -> None:
    state, pieces = _state(seed, ranks, mode)
    top = state.top3()
    rng = np.random.default_rng(seed)
    for i, (a, g, v) in enumerate(pieces):
        want = state.move_scores(top, a, g, v)
        got = move_scores(*_args(state), a, g, v)
        for x, y in zip(got, want, strict=True):
            assert np.array_equal(x, y)
        for n in (1, 2, 5):  # one partner is reduced pairwise by numpy, several row by row
            js = rng.choice(len(pieces), size=min(n, len(pieces)), replace=False)
            bs = np.array([pieces[j][0] for j in js])
            gj = np.array([pieces[j][1] for j in js])
            vj = np.array([pieces[j][2] for j in js])
            want = state.swap_scores(top, a, g, v, bs, gj, vj)
            got = swap_scores(*_args(state), a, g, v, bs, gj, vj)
            for x, y in zip(got, want, strict=True):
                assert np.array_equal(x, y), (i, n)


def test_the_kernels_pick_the_candidate_best_of_picks_ties_included() -> None:
    rng = np.random.default_rng(0)
    for _ in range(2000):
        n = int(rng.integers(1, 60))
        j, s, q = (rng.integers(0, 3, n) * 1.0 for _ in range(3))
        ok = rng.random(n) < 0.7
        assert _best_of(j, s, q, ok) == best_of(j, s, q, ok)


@pytest.mark.parametrize(("seed", "ranks", "mode"), [(6, 1, "train"), (7, 2, "inference"), (8, 8, "train"),
                                                     (9, 40, "inference")])
def test_place_scores_and_the_pick_are_the_numpy_ones_bit_for_bit(seed: int, ranks: int, mode: str) -> None:
    state, pieces = _state(seed, ranks, mode)
    rng = np.random.default_rng(seed)
    for _, g, v in pieces:
        want = state.place_scores(g, v)
        got = place_scores(*_args(state)[:7], g, v)
        for x, y in zip(got, want, strict=True):
            assert np.array_equal(x, y)
        ok = rng.random(ranks) < 0.8
        assert state.place_best(g, v, ok) == best_of(*want, ok)


@pytest.mark.parametrize(("seed", "ranks", "mode"), [(10, 2, "train"), (11, 8, "inference"), (12, 16, "train")])
def test_a_column_wise_cut_trial_places_and_scores_as_the_numpy_greedy(seed: int, ranks: int, mode: str) -> None:
    state, pieces = _state(seed, ranks, mode)
    res, g = state.res, STYPES.index(CW)
    used = np.stack([state.used[x] for x in state.tiers])
    cap = np.array([state.cap[x] for x in state.tiers])
    after = res.const({STYPES[i] for i in np.flatnonzero((state.count.sum(axis=1) > 0) | (np.arange(len(STYPES)) == g))})
    for t in state.res.cost.workload.tables[:6]:
        for k in (1, 2, min(4, ranks)):
            v, m = res.shard(t, CW, t.rows, max(t.dim // k, 1), "hbm", 1.0)
            got, j, s = place_cut(state.L, state.count, res.hold, res.weight, res.s0, res.s1, state.const,
                                  state.const, after, g, v, np.array([m.get(x, 0.0) for x in state.tiers]), used,
                                  cap, k, np.inf)
            snap = _snapshot(state)
            want = _place_new(state, CW, v, m, k)
            assert got.tolist() == (want or [])
            if want is not None:
                _refresh_const(state)
                assert (j, s) == state.objective()
            _restore(state, snap)


@pytest.mark.parametrize(("seed", "ranks", "least_loaded", "room"), [
    (16, 2, False, 3.0), (17, 8, False, 3.0), (18, 16, False, 0.8), (19, 8, True, 3.0), (20, 16, True, 0.8)])
def test_the_greedy_placement_kernel_places_as_the_numpy_loop(seed: int, ranks: int, least_loaded: bool,
                                                             room: float) -> None:
    """`place_all` against `Builder.place`'s former loop (`fits`, the table's taken ranks, `place_best` or the
    least TorchRec perf, `put`): the same ranks and bitwise the same loads and bytes. Capacities are `room` times
    what the pieces need: below 1, some piece fits nowhere."""
    state, _ = _state(seed, ranks, "train")
    res, rng = state.res, np.random.default_rng(seed)
    pieces = []
    for t in res.cost.workload.tables:
        st, k = (TW, 1) if rng.random() < 0.6 else (CW, min(2 + int(rng.integers(3)), ranks))
        v, m = res.shard(t, st, t.rows, max(t.dim // k, 1), "hbm", 1.0)
        pieces += [(t.name, st, v, m)] * k
    for x in state.tiers:
        state.cap[x] = (state.used[x].sum() + sum(m.get(x, 0.0) for *_, m in pieces)) * room / ranks
    order = rng.permutation(len(pieces))
    ids: dict[str, int] = {}
    tables = np.array([ids.setdefault(n, len(ids)) for n, *_ in pieces], dtype=np.int64)
    used = np.stack([state.used[x] for x in state.tiers])
    cap = np.array([state.cap[x] for x in state.tiers])
    L, count, got = state.L.copy(), state.count.copy(), np.full(len(pieces), -1, dtype=np.int64)
    bad = place_all(L, count, res.hold, res.weight, res.s0, res.s1, state.const, order,
                    np.array([STYPES.index(st) for _, st, *_ in pieces], dtype=np.int64), tables,
                    np.array([v for *_, v, _ in pieces]), np.array([[m.get(x, 0.0) for x in state.tiers]
                                                                     for *_, m in pieces]), used, cap, got,
                    least_loaded)
    want, taken, stop = np.full(len(pieces), -1), {}, -1
    for i in order:
        name, st, v, m = pieces[i]
        ok = state.fits(m)
        ok[taken.setdefault(name, [])] = False
        if least_loaded:
            r = int(np.argmin(np.where(ok, state.L[-1], np.inf))) if ok.any() else -1
        else:
            r = state.place_best(STYPES.index(st), v, ok)
        if r < 0:
            stop = int(i)
            break
        state.put(r, st, v, m)
        want[i] = r
        taken[name].append(r)
    assert (stop >= 0) == (room < 1)
    assert bad == stop
    assert got.tolist() == want.tolist()
    assert np.array_equal(L, state.L) and np.array_equal(count, state.count)
    assert all(np.array_equal(used[i], state.used[x]) for i, x in enumerate(state.tiers))


def _half_placed(seed: int, hardware: str, ranks: int) -> tuple[PlanWorkload, object, Resources, Loads]:
    """2·ranks random tables; the first `ranks` placed table-wise on random ranks, the rest left to place."""
    wl = PlanWorkload(load_tables(f"random:{ranks * 2}:{seed}"), 2048)
    topo = load_topology(hardware, ranks)
    res = Resources(CostModel(wl, topo), TorchRecCostModel(wl, topo), (1e-3, 2e-3))
    state = Loads(res, topo, {TW, TWRW})
    rng = np.random.default_rng(seed)
    for t in wl.tables[:ranks]:
        state.put(int(rng.integers(ranks)), TW, *res.shard(t, TW, t.rows, t.dim, "hbm", 1.0))
    return wl, topo, res, state


@pytest.mark.parametrize(("seed", "hardware", "ranks"), [(13, "dgx_h100", 8), (14, "dgx_h100_x2", 16),
                                                         (15, "dgx_h100_x8", 32)])
def test_host_scores_are_the_numpy_ones_bit_for_bit(seed: int, hardware: str, ranks: int) -> None:
    wl, topo, res, state = _half_placed(seed, hardware, ranks)
    h = topo.ranks_per_host
    for t in wl.tables[ranks:]:
        shards = [res.shard(t, TWRW, hi - lo, t.dim, "hbm", 1.0) for lo, hi in row_ranges(t.rows, h)]
        got = state.host_scores(STYPES.index(TWRW), shards, state.const)
        want = state.host_scores_reference(STYPES.index(TWRW), shards, state.const)
        for x, y in zip(got, want, strict=True):
            assert np.array_equal(x, y)


@pytest.mark.parametrize(("seed", "hardware", "ranks", "room"), [(21, "dgx_h100_x2", 16, 3.0),
                                                                 (22, "dgx_h100_x8", 32, 3.0),
                                                                 (23, "dgx_h100_x8", 32, 0.8)])
def test_the_table_row_wise_kernel_places_groups_as_the_numpy_loop(seed: int, hardware: str, ranks: int,
                                                                  room: float) -> None:
    """`place_groups` against the loop it replaced (`pack._best_host`, then `put` of each shard): the same hosts
    and bitwise the same loads and bytes; capacities `room` times what is placed (below 1: some group fits on no
    host)."""
    wl, topo, res, state = _half_placed(seed, hardware, ranks)
    h = topo.ranks_per_host
    groups = [[res.shard(t, TWRW, hi - lo, t.dim, "hbm", 1.0) for lo, hi in row_ranges(t.rows, h)]
              for t in wl.tables[ranks:]]
    for x in state.tiers:
        state.cap[x] = (state.used[x].sum() + sum(m.get(x, 0.0) for g in groups for _, m in g)) * room / ranks
    used = np.stack([state.used[x] for x in state.tiers])
    L, count, hosts = state.L.copy(), state.count.copy(), np.full(len(groups), -1, dtype=np.int64)
    bad = place_groups(L, count, res.hold, res.s0, res.s1, state.const, STYPES.index(TWRW),
                       np.array([[v for v, _ in g] for g in groups]),
                       np.array([[[m.get(x, 0.0) for x in state.tiers] for _, m in g] for g in groups]), used,
                       np.array([state.cap[x] for x in state.tiers]), hosts)
    want, stop = np.full(len(groups), -1), -1
    for i, shards in enumerate(groups):
        best = _best_host(state, shards, state.const)
        if best < 0:
            stop = i
            break
        for r, (v, m) in zip(range(best * h, best * h + h), shards, strict=True):
            state.put(r, TWRW, v, m)
        want[i] = best
    assert (stop >= 0) == (room < 1)
    assert bad == stop
    assert hosts.tolist() == want.tolist()
    assert np.array_equal(L, state.L) and np.array_equal(count, state.count)
    assert all(np.array_equal(used[i], state.used[x]) for i, x in enumerate(state.tiers))


@pytest.mark.parametrize(("seed", "ranks"), [(24, 4), (25, 16)])
def test_the_block_kernel_puts_replicas_and_row_blocks_as_put_all_and_put_ranks(seed: int, ranks: int) -> None:
    """`put_blocks` against `Loads.put_all` (data-parallel) and `Loads.put_ranks` (row-wise blocks), mixed in
    one order on loads that already hold pieces: bitwise the same loads, holder counts and bytes."""
    state, _ = _state(seed, ranks, "train")
    res, rng = state.res, np.random.default_rng(seed)
    dp, rw = STYPES.index(ShardingType.DATA_PARALLEL), STYPES.index(ShardingType.ROW_WISE)
    blocks = []
    for t in res.cost.workload.tables:
        if rng.random() < 0.4:
            blocks.append((dp, 0, ranks, *res.shard(t, ShardingType.DATA_PARALLEL, t.rows, t.dim, "hbm", 1.0)))
        else:
            first = int(rng.integers(ranks))
            n = int(rng.integers(ranks - first + 1))
            blocks.append((rw, first, n, *res.shard(t, ShardingType.ROW_WISE, t.rows // 3, t.dim, "hbm", 1.0)))
    used = np.stack([state.used[x] for x in state.tiers])
    L, count = state.L.copy(), state.count.copy()
    g = np.array([b[0] for b in blocks], dtype=np.int64)
    put_blocks(L, count, res.hold, used, g, np.array([b[1] for b in blocks], dtype=np.int64),
               np.array([b[2] for b in blocks], dtype=np.int64), g == dp, np.array([b[3] for b in blocks]),
               np.array([[b[4].get(x, 0.0) for x in state.tiers] for b in blocks]))
    for gi, first, n, v, m in blocks:
        if gi == dp:
            state.put_all(STYPES[gi], v, m)
        else:
            state.put_ranks(slice(first, first + n), STYPES[gi], v, m)
    assert np.array_equal(L, state.L) and np.array_equal(count, state.count)
    assert all(np.array_equal(used[i], state.used[x]) for i, x in enumerate(state.tiers))


def test_the_summary_kernel_is_numpys_sum_bit_for_bit() -> None:
    rng = np.random.default_rng(1)
    for k in range(2, 40):
        v = rng.standard_normal(k) * 10.0 ** rng.integers(-6, 6, k)
        assert np.array_equal(summary(v, 0.3, 0.7), np.array([0.3 * v[:-1].sum(), 0.7 * v[-1]]))


@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 8, 33, 256])
def test_top3_breaks_ties_towards_the_lower_rank_as_a_stable_sort(ranks: int) -> None:
    """Plans must not depend on the CPU: `top3` gives what a stable sort gives (lower rank first among equal loads),
    where `argpartition` leaves ties to numpy's SIMD path."""
    rng = np.random.default_rng(ranks)
    for _ in range(200):
        L = rng.integers(0, 3, size=(6, ranks)).astype(np.float64)  # few distinct values: ties everywhere
        idx, vals = top3(L)
        want = np.argsort(-L, axis=1, kind="stable")[:, :3]
        n = want.shape[1]
        assert (idx[:, :n] == want).all() and (vals[:, :n] == np.take_along_axis(L, want, axis=1)).all()
        assert (idx[:, n:] == -1).all() and (vals[:, n:] == 0).all()
