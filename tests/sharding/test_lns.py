"""Exact two-rank re-splits (`sharding.lns`): never a worse or invalid plan, on both models; they do improve a
plan the local search leaves; the optimizer's pick keeps its guarantees with them."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sharding import CostModel, PlanWorkload, load_topology, lower_bound, validate_plan
from sharding.lns import loads_of, refine_plan
from sharding.pack import Builder, NoFit
from sharding.search import Resources
from sharding.tiers import assign_tiers
from sharding.trec_cost import TorchRecCostModel
from tests.sharding.conftest import tables, topologies


def _with_overheads(topo):  # noqa: ANN001, ANN202
    """The topology with fixed per-group stage costs, so holding a group's first shard on a rank costs extra."""
    per = {"lookup": 3e-5, "lookup_bwd": 5e-5, "input_dist": 2e-5, "output_dist": 2e-5, "output_dist_bwd": 2e-5}
    return replace(topo, stage_overhead={g: dict(per) for g in ("base", "TW", "CW", "RW", "TWRW", "DP")})


def _setup(wl: PlanWorkload, topo) -> tuple[CostModel, TorchRecCostModel, Builder]:  # noqa: ANN001
    cost, trec = CostModel(wl, topo), TorchRecCostModel(wl, topo)
    lb = (lower_bound(cost, relax=False).value, lower_bound(trec).value)
    return cost, trec, Builder(Resources(cost, trec, lb), assign_tiers(cost), 20)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(max_count=20), st.one_of(topologies(), topologies().map(_with_overheads)),
       st.sampled_from([0.25, 1.0]), st.booleans(), st.sampled_from([0, 30]))
def test_pair_resplits_never_worsen_a_plan_and_keep_it_valid(ts, topo, theta, dp, flat) -> None:  # noqa: ANN001
    wl = PlanWorkload(ts, 512, "train")
    cost, trec, b = _setup(wl, topo)
    try:
        plan = b.pack(theta, 0.5, dp, False)
    except NoFit:
        return
    state, _ = loads_of(b.res, plan)  # the decomposition the step prices is the plan's cost
    assert abs(float(state.const + state.L[:-1].max(axis=1).sum()) + topo.step_overhead - cost.plan_cost(plan)) \
        <= 1e-9 * cost.plan_cost(plan)
    refined = refine_plan(b.res, plan, 200, flat_iters=flat)  # flat > 0: p-norm moves and swaps first
    event("re-split" if refined is not None else "left as is")
    if refined is None:
        return
    validate_plan(refined, wl, topo, cost)
    assert cost.plan_cost(refined) <= cost.plan_cost(plan) * (1 + 1e-9)
    assert trec.plan_cost(refined) <= trec.plan_cost(plan) * (1 + 1e-9)
    assert {n: tp.sharding_type for n, tp in refined.tables.items()} == \
        {n: tp.sharding_type for n, tp in plan.tables.items()}


def test_pair_resplits_lower_the_step_of_the_100_table_packing() -> None:
    from sharding.tablesets import load_tables
    wl = PlanWorkload(load_tables("random:100:1"), 512)
    topo = load_topology("dgx_h100_x2", 16)
    cost, trec, b = _setup(wl, topo)
    b.iters = 100
    plan = b.pack(0.5, 0.5, True, False, twrw_first=True)
    refined = refine_plan(b.res, plan, 300)
    assert refined is not None
    validate_plan(refined, wl, topo, cost)
    assert cost.plan_cost(refined) < cost.plan_cost(plan) * (1 - 1e-3)
    assert trec.plan_cost(refined) <= trec.plan_cost(plan) * (1 + 1e-9)


def test_flatten_then_pairs_go_below_pairs_alone_on_the_100_table_pick() -> None:
    """random100/16's picked packing: the pairs alone stall (every move leaves some maximum in place); p-norm moves
    first reach a lower step, TorchRec's rating capped at the packing's."""
    from sharding.tablesets import load_tables
    wl = PlanWorkload(load_tables("random:100:1"), 512)
    topo = load_topology("dgx_h100_x2", 16)
    cost, trec, b = _setup(wl, topo)
    b.iters = 100
    plan = b.pack(0.5, 0.5, True, False, twrw_first=True)
    pairs, both = refine_plan(b.res, plan, 300), refine_plan(b.res, plan, 300, flat_iters=200)
    assert pairs is not None and both is not None
    validate_plan(both, wl, topo, cost)
    assert cost.plan_cost(both) < cost.plan_cost(pairs)
    assert trec.plan_cost(both) <= trec.plan_cost(plan) * (1 + 1e-9)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(max_count=20), st.one_of(topologies(), topologies().map(_with_overheads)),
       st.sampled_from([0.0, 0.25, 1.0]), st.booleans(), st.sampled_from([False, True, 2]))
def test_loads_of_a_lazy_plan_are_bitwise_those_of_its_shards(ts, topo, theta, dp, lw) -> None:  # noqa: ANN001
    """`loads_of` reads a `table_plan` plan by its shapes (no shards made): the same loads, counts, memory and
    pieces, bit for bit, as from the same plan built from its `Shard`s."""
    import numpy as np

    from sharding.plan import ShardingPlan
    wl = PlanWorkload(ts, 512, "train")
    _, _, b = _setup(wl, topo)
    try:
        plan = b.pack(theta, 0.5, dp, lw)
    except NoFit:
        return
    lazy = {n for n, tp in plan.tables.items() if "shards" not in tp.__dict__}
    s1, p1 = loads_of(b.res, plan)
    assert all("shards" not in plan.tables[n].__dict__ for n in lazy)  # read by shapes only
    s2, p2 = loads_of(b.res, ShardingPlan.from_dict(plan.to_dict()))  # eager: one `put` per shard
    assert s1.L.tobytes() == s2.L.tobytes() and np.array_equal(s1.count, s2.count)
    assert all(s1.used[t].tobytes() == s2.used[t].tobytes() for t in s1.used)
    assert [(p.table, p.st, p.rank, p.vec.tobytes(), p.mem) for p in p1] == \
        [(p.table, p.st, p.rank, p.vec.tobytes(), p.mem) for p in p2]


def _split_reference(state, a, b, pieces, out, t_cap, limit):  # noqa: ANN001, ANN202
    """`lns._split` as it was before it priced only the splits that fit (every split's loads, then the masks)."""
    import numpy as np

    from sharding.lns import EPS, _bits
    res, cnt = state.res, state.count
    bits = _bits(len(pieces))
    vecs = np.array([p.vec for p in pieces])
    gis = np.array([p.gi for p in pieces])
    act = np.any(vecs != 0, axis=0) | res.hold[np.unique(gis)].any(axis=0)
    act[-1] = True
    L0 = state.L
    fixed = float(np.maximum(np.maximum(L0[:-1, a], L0[:-1, b]), out[:-1])[~act[:-1]].sum())
    L, vecs, out, hold = L0[act], vecs[:, act], out[act], res.hold[:, act]
    on_b = np.array([p.rank == b for p in pieces], dtype=np.float64)
    la, lb = L[:, a] - (1 - on_b) @ vecs + (1 - bits) @ vecs, L[:, b] - on_b @ vecs + bits @ vecs
    for g in np.unique(gis):
        if not hold[g].any():
            continue
        mine = (gis == g).astype(np.float64)
        for r, to_r, side, load in ((a, (1 - bits) @ mine, 1 - on_b, la), (b, bits @ mine, on_b, lb)):
            holds = (cnt[g, r] - side @ mine + to_r > 0).astype(np.float64)
            load += (holds - float(cnt[g, r] > 0))[:, None] * hold[g]
    peak = np.maximum(la, lb)
    primary = fixed + np.maximum(peak[:, :-1], out[None, :-1]).sum(axis=1)
    ok = (primary <= limit * (1 + 1e-12)) & (peak[:, -1] <= max(t_cap, out[-1]) * (1 + 1e-12))
    for tier in state.tiers:
        mem = np.array([p.mem.get(tier, 0.0) for p in pieces])
        if mem.any():
            cap = state.cap[tier] * (1 + 1e-12)
            to_b = bits @ mem
            ok &= (state.used[tier][a] - (1 - on_b) @ mem + mem.sum() - to_b <= cap)
            ok &= (state.used[tier][b] - on_b @ mem + to_b <= cap)
    tables: dict[str, list[int]] = {}
    for i, p in enumerate(pieces):
        tables.setdefault(p.table, []).append(i)
    for idx in (v for v in tables.values() if len(v) > 1):
        ok &= bits[:, idx].sum(axis=1) == 1 if len(idx) == 2 else False
    if not ok.any():
        return None
    rest = float(np.maximum(L0[:-1, a], L0[:-1, b])[~act[:-1]].sum())
    obj = np.where(ok, primary + EPS * (rest + peak[:, :-1].sum(axis=1)), np.inf)
    s = int(np.argmin(obj))
    return float(obj[s]), bits[s] > 0.5


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(min_count=3, max_count=24), st.one_of(topologies(), topologies().map(_with_overheads)),
       st.sampled_from([0.25, 1.0]), st.booleans())
def test_a_pair_split_is_bitwise_the_reference_on_tight_and_loose_memory(ts, topo, theta, dp) -> None:  # noqa: ANN001
    """`_split` prices only the splits that fit memory and column-block rules; its answer is bit for bit the
    reference's, which priced every split, for every pair of ranks of a packing (holder overheads too)."""
    import numpy as np

    from sharding.lns import PAIR_PIECES, _split
    wl = PlanWorkload(ts, 512, "train")
    _, _, b = _setup(wl, topo)
    try:
        plan = b.pack(theta, 0.5, dp, False)
    except NoFit:
        return
    state, pieces = loads_of(b.res, plan)
    w = state.L.shape[1]
    top = state.top3()
    limit = float(state.L[:-1].max(axis=1).sum())
    t_cap = float(state.L[-1].max())
    for a in range(w):
        for c in range(a + 1, w):
            ps = [p for p in pieces if p.rank in (a, c)][:PAIR_PIECES]
            if not ps:
                continue
            out = state._rest(top, a, np.array([c]))[:, 0]
            for lim in (limit, limit * 0.999):
                got, want = _split(state, a, c, ps, out, t_cap, lim), _split_reference(state, a, c, ps, out, t_cap, lim)
                assert (got is None) == (want is None)
                if got is not None:
                    assert got[0].hex() == want[0].hex() and np.array_equal(got[1], want[1])


def test_the_compiled_pair_split_is_bitwise_the_numpy_one_with_holder_overheads() -> None:
    """`_split` (TorchRec's row first, in `split_kernel`) against `_split_reference` (every split priced in numpy)
    on drawn pairs where groups have holder overheads that a split adds or removes, column blocks of one table,
    tight memory and a TorchRec cap that most splits exceed: the same (objective, mask) bit for bit."""
    from types import SimpleNamespace

    import numpy as np

    from sharding.lns import _split, _split_reference
    rng = np.random.default_rng(16)
    seen = {"holders": 0, "found": 0}
    for case in range(120):
        n, K, W, G = int(rng.integers(2, 11)), int(rng.integers(2, 9)), 4, 5
        hold = np.where(rng.random((G, K)) < 0.4, rng.random((G, K)) * 1e-3, 0.0)
        hold[rng.random(G) < 0.4] = 0.0
        pieces = [SimpleNamespace(table=f"t{min(i, int(rng.integers(0, n)))}", rank=int(rng.integers(0, 2)),
                                  vec=np.where(rng.random(K) < 0.7, rng.random(K) * 10.0 ** rng.integers(-4, 0), 0.0),
                                  mem={"hbm": float(rng.random() * 1e9)}, gi=int(rng.integers(0, G)))
                  for i in range(n)]
        state = _random_state(rng, pieces, K, W, G, hold)
        L = state.L
        out = rng.random(K) * 2e-2
        t_cap = float(L[-1, :2].max() + rng.random() * 1e-2)
        for limit in (1.0, float(np.maximum(L[:-1, :2].max(axis=1), out[:-1]).sum())):
            got, want = _split(state, 0, 1, pieces, out, t_cap, limit), _split_reference(state, 0, 1, pieces, out, t_cap, limit)
            assert (got is None) == (want is None), case
            if got is not None:
                assert got[0].hex() == want[0].hex() and np.array_equal(got[1], want[1]), case
                seen["found"] += 1
        seen["holders"] += bool(hold[[p.gi for p in pieces]].any())
    assert seen["holders"] > 30 and seen["found"] > 30, seen  # the draws did reach holder overheads and answers


@pytest.mark.parametrize("seed", [5, 94, 110, 115])
def test_kept_pair_set_ups_answer_bitwise_as_fresh_reference_splits(seed, monkeypatch) -> None:  # noqa: ANN001
    """`pair_refine` keeps each pair's set-up (`lns._Pair`, with its priced splits) across rounds until a re-split
    moves a piece to or from either rank: on family instances, every answer it uses is bit for bit that of
    `_split_reference` on the loads and pieces of that moment, and set-ups were kept (the fast path ran)."""
    import numpy as np

    from sharding import lns, optimize
    from sharding.family import instance
    live, kept, seen = {}, [], {"pairs": 0, "kept": 0, "found": 0}
    refine, best = lns.pair_refine, lns._best

    def pair_refine(state, pieces, evals=lns.PAIR_EVALS, t_cap=None):  # noqa: ANN001, ANN202
        live["state"] = state
        return refine(state, pieces, evals, t_cap)

    def checked(pair, out, t_cap, limit):  # noqa: ANN001, ANN202
        got = best(pair, out, t_cap, limit)
        state = live["state"]
        assert all(p.rank in (pair.a, pair.b) for p in pair.pieces)
        want = lns._split_reference(state, pair.a, pair.b, pair.pieces, np.array(out), t_cap, limit)
        assert (got is None) == (want is None)
        if got is not None:
            assert got[0].hex() == want[0].hex() and np.array_equal(got[1], want[1])
            seen["found"] += 1
        seen["pairs"] += 1
        seen["kept"] += any(q is pair for q in kept)
        kept.append(pair)
        return got

    monkeypatch.setattr(lns, "pair_refine", pair_refine)
    monkeypatch.setattr(lns, "_best", checked)
    inst = instance(seed)
    optimize(inst.workload, inst.topology)
    assert seen["pairs"] > 50 and seen["kept"] > 10 and seen["found"] > 10, seen


def test_one_pair_set_up_answers_bitwise_under_changing_caps_and_other_ranks() -> None:
    """One `lns._Pair` (what `pair_refine` keeps across rounds) asked again: the same question (its last answer is
    kept), then other limits, row maxima of the other ranks and TorchRec caps (its priced splits are kept per cap):
    each answer bit for bit `_split_reference`'s on the same loads."""
    from types import SimpleNamespace

    import numpy as np

    from sharding.lns import _answer_numpy, _best, _Pair, _split_reference
    rng = np.random.default_rng(61)
    seen = {"found": 0, "none": 0}
    for case in range(60):
        n, K, W, G = int(rng.integers(2, 11)), int(rng.integers(2, 9)), 4, 5
        hold = np.where(rng.random((G, K)) < 0.4, rng.random((G, K)) * 1e-3, 0.0)
        pieces = [SimpleNamespace(table=f"t{i}", rank=int(rng.integers(0, 2)), mem={"hbm": float(rng.random() * 1e9)},
                                  vec=np.where(rng.random(K) < 0.7, rng.random(K) * 1e-2, 0.0), gi=int(rng.integers(0, G)))
                  for i in range(n)]
        state = _random_state(rng, pieces, K, W, G, hold)
        L = state.L
        pair = _Pair(state, 0, 1, pieces)
        for _ in range(4):  # the same question twice in a row, then other limits, caps and row maxima
            out = rng.random(K) * 2e-2
            t_cap = float(L[-1, :2].max() + rng.random() * 1e-2)
            for f in (1.02, 1.02, 0.98, 1.0):
                limit = float(np.maximum(L[:-1, :2].max(axis=1), out[:-1]).sum()) * f
                got, want = _best(pair, out, t_cap, limit), _split_reference(state, 0, 1, pieces, out, t_cap, limit)
                numpy = _answer_numpy(pair, out, t_cap, limit) if pair.fit is not None else None
                assert (got is None) == (want is None) == (numpy is None), case
                if got is not None:
                    assert got[0].hex() == want[0].hex() == numpy[0].hex(), case
                    assert np.array_equal(got[1], want[1]) and np.array_equal(got[1], numpy[1]), case
                seen["found" if got is not None else "none"] += 1
    assert seen["found"] > 60 and seen["none"] > 20, seen


def test_the_compiled_pairwise_sum_is_numpys_float_for_float() -> None:
    """`split_kernel._pairwise` (what `pick_split` sums with) against numpy's sums of 1-D arrays and of the rows of
    (m, k) arrays, contiguous or a column slice as `lns._answer_numpy` sums them, lengths across numpy's blocks."""
    import numpy as np

    from sharding.split_kernel import _pairwise
    rng = np.random.default_rng(7)
    for n in [*range(0, 40), 127, 128, 129, 255, 300]:
        for _ in range(20):
            x = rng.random(n) * 10.0 ** rng.integers(-8, 4, n)
            assert _pairwise(x, n) == x.sum() or n == 0  # (no rows: `pick_split` takes 0.0 itself)
            X = rng.random((5, n + 1)) * 10.0 ** rng.integers(-8, 4, (5, n + 1))
            want = X[:, :-1].sum(axis=1)
            assert [_pairwise(X[r], n) for r in range(5)] == want.tolist() or n == 0


def test_the_compiled_fit_is_the_numpy_one_near_and_far_from_the_caps() -> None:
    """`lns._fit` (compiled sums, the numpy path where a split's bytes come within its tolerance of a cap) against
    `_fit_reference` on drawn pairs: two tiers, caps at a split's exact bytes (the fallback) and between, column
    blocks of one table in twos and threes; the same mask."""
    from types import SimpleNamespace

    import numpy as np

    from sharding import lns
    rng = np.random.default_rng(23)
    seen = {"fallback": 0, "mixed": 0}
    calls = []
    ref = lns._fit_reference

    def counted(*args):  # noqa: ANN002, ANN202
        calls.append(1)
        return ref(*args)

    for case in range(300):
        n = int(rng.integers(1, 13))
        pieces = [SimpleNamespace(table=f"t{int(rng.integers(0, n + 3))}", rank=int(rng.integers(0, 2)),
                                  mem={"hbm": float(rng.random() * 1e9), "ddr": float(rng.random() * 3e9) * (i % 2)})
                  for i in range(n)]
        used = {"hbm": rng.random(4) * 4e9, "ddr": rng.random(4) * 8e9}
        cap = {"hbm": float(rng.random() * 8e9 + 1e9), "ddr": float(rng.random() * 2e10 + 1e9)}
        if case % 3 == 0:  # a cap at one split's bytes exactly (as the reference sums them)
            mem = np.array([p.mem["hbm"] for p in pieces])
            s = int(rng.integers(0, 1 << n))
            bits = lns._bits(n)
            on_b = np.array([p.rank == 1 for p in pieces], dtype=np.float64)
            cap["hbm"] = float(used["hbm"][1] - on_b @ mem + bits[s] @ mem) / (1 + 1e-12)
        state = SimpleNamespace(tiers=["hbm", "ddr"], used=used, cap=cap)
        on_b = np.array([p.rank == 1 for p in pieces], dtype=np.float64)
        calls.clear()
        lns._fit_reference = counted
        try:
            got = lns._fit(state, 0, 1, pieces, on_b)
        finally:
            lns._fit_reference = ref
        want = ref(state, 0, 1, pieces, on_b)
        assert got.dtype == want.dtype and np.array_equal(got, want), case
        seen["fallback"] += bool(calls)
        seen["mixed"] += bool(want.any() and not want.all())
    assert seen["fallback"] > 20 and seen["mixed"] > 50, seen


def _random_state(rng, pieces: list, K: int, W: int, G: int, hold):  # noqa: ANN001, ANN202
    """A random `Loads` stand-in for `_split` on ranks 0 and 1: loads (K, W), group counts holding `pieces`, one
    tier with room drawn above the fullest rank."""
    from types import SimpleNamespace
    L = rng.random((K, W)) * 1e-2
    cnt = rng.integers(0, 3, (G, W))
    for p in pieces:
        cnt[p.gi, p.rank] += 1
    used = rng.random(W) * 4e9
    return SimpleNamespace(L=L, count=cnt, tiers=["hbm"], cap={"hbm": float(used.max() + rng.random() * 6e9)},
                           used={"hbm": used}, res=SimpleNamespace(hold=hold))
