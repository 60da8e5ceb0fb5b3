"""Whole-table re-layouts of a finished plan (`sharding.relayout`): row-wise over all ranks, a table-row-wise table
moved or swapped between hosts; a change is kept only if it lowers our model's cost with TorchRec's rating capped.
The final polish (`pareto=True`) tries data-parallel too and keeps a change only when neither rating rises."""
from __future__ import annotations

from embedding.spec import PoolingSpec, TableSpec
from sharding import CostModel, PlanWorkload, ShardingPlan, validate_plan
from sharding.layouts import table_plan
from sharding.plan import ShardingType
from sharding.relayout import pareto_gain, relayout
from sharding.trec_cost import TorchRecCostModel
from tests.sharding.conftest import topology

TW, RW, TWRW, DP = ShardingType.TABLE_WISE, ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE, ShardingType.DATA_PARALLEL


def _case(hot: int, hosts: int = 2) -> tuple[PlanWorkload, CostModel, TorchRecCostModel, dict[str, TableSpec]]:
    """`hot` large tables with heavy pooling and 8 small ones, `hosts` hosts of 4 ranks."""
    ts = tuple(TableSpec(f"h{i}", 4_000_000, 128, pooling=PoolingSpec("fixed", 150.0)) for i in range(hot)) + tuple(
        TableSpec(f"s{i}", 20_000, 16, pooling=PoolingSpec("fixed", 2.0)) for i in range(8))
    wl = PlanWorkload(ts, 8192)
    topo = topology(hosts, 4, 16.0).reserve_inputs(wl.ids_per_batch)
    return wl, CostModel(wl, topo), TorchRecCostModel(wl, topo), {t.name: t for t in ts}


def _small_spread(tabs: dict[str, TableSpec]) -> dict:
    return {f"s{i}": table_plan(tabs[f"s{i}"], TW, [i], "hbm") for i in range(8)}


def _check(wl: PlanWorkload, cost: CostModel, trec: TorchRecCostModel, start: ShardingPlan,
           got: ShardingPlan | None) -> ShardingPlan:
    assert got is not None
    validate_plan(got, wl, cost.topology, cost)
    assert cost.plan_cost(got) < cost.plan_cost(start)
    assert trec.plan_cost(got) <= trec.plan_cost(start) * (1 + 1e-12)
    return got


def test_a_hot_table_on_one_host_is_recut_or_moved_where_that_lowers_both_models() -> None:
    wl, cost, trec, tabs = _case(2)
    start = ShardingPlan(8, {"h0": table_plan(tabs["h0"], TWRW, [0, 1, 2, 3], "hbm"),
                             "h1": table_plan(tabs["h1"], TWRW, [0, 1, 2, 3], "hbm"), **_small_spread(tabs)})
    got = _check(wl, cost, trec, start, relayout(cost, trec, start, 1000, trec.plan_cost(start)))
    hosts = [{r // 4 for r in got.tables[n].ranks} for n in ("h0", "h1")]
    assert hosts[0] | hosts[1] == {0, 1}  # the two hot tables no longer load one host alone
    assert all(got.tables[n].sharding_type in (RW, TWRW) for n in ("h0", "h1"))


def test_a_hot_table_wise_table_is_recut_row_wise_over_all_ranks() -> None:
    wl, cost, trec, tabs = _case(1, hosts=1)
    start = ShardingPlan(4, {"h0": table_plan(tabs["h0"], TW, [0], "hbm"),
                             **{f"s{i}": table_plan(tabs[f"s{i}"], TW, [i % 4], "hbm") for i in range(8)}})
    got = _check(wl, cost, trec, start, relayout(cost, trec, start, 1000, trec.plan_cost(start)))
    assert got.tables["h0"].sharding_type == RW and sorted(got.tables["h0"].ranks) == [0, 1, 2, 3]


def test_relayout_keeps_a_plan_no_change_improves_and_spends_no_more_than_its_evaluations() -> None:
    wl, cost, trec, tabs = _case(2)
    balanced = ShardingPlan(8, {"h0": table_plan(tabs["h0"], RW, list(range(8)), "hbm"),
                                "h1": table_plan(tabs["h1"], RW, list(range(8)), "hbm"), **_small_spread(tabs)})
    before = cost.plan_cost(balanced)
    got = relayout(cost, trec, balanced, 1000, trec.plan_cost(balanced))
    assert got is None or cost.plan_cost(got) < before
    unbalanced = ShardingPlan(8, {**balanced.tables, "h0": table_plan(tabs["h0"], TWRW, [0, 1, 2, 3], "hbm"),
                                  "h1": table_plan(tabs["h1"], TWRW, [0, 1, 2, 3], "hbm")})
    assert relayout(cost, trec, unbalanced, 0, trec.plan_cost(unbalanced)) is None  # no evaluation: no change


def test_a_change_that_raises_torchrecs_rating_above_the_cap_is_not_taken() -> None:
    wl, cost, trec, tabs = _case(2)
    start = ShardingPlan(8, {"h0": table_plan(tabs["h0"], TWRW, [0, 1, 2, 3], "hbm"),
                             "h1": table_plan(tabs["h1"], TWRW, [0, 1, 2, 3], "hbm"), **_small_spread(tabs)})
    free = relayout(cost, trec, start, 1000, float("inf"))
    assert free is not None
    cap = trec.plan_cost(free) * (1 - 1e-6)  # the uncapped result is out of reach
    got = relayout(cost, trec, start, 1000, cap)
    assert got is None or trec.plan_cost(got) <= cap


def test_pareto_gain_takes_a_change_only_when_neither_rating_rises_past_its_limit() -> None:
    old = (1.0, 1.0)
    assert pareto_gain((0.9, 1.0), old, 1.0)  # less by ours, TorchRec's the same
    assert pareto_gain((0.9, 1.05), old, 1.1)  # less by ours, TorchRec's within the cap
    assert not pareto_gain((0.9, 1.05), old, 1.0)  # ... above it
    assert pareto_gain((1.0, 0.9), old, 1.0)  # TorchRec's lower, ours the same
    assert not pareto_gain((1.01, 0.5), old, 1.0)  # ours higher: never
    assert not pareto_gain((1.0, 1.0), old, 1.0)  # nothing falls
    assert not pareto_gain((1.0 - 1e-10, 1.0), old, 1.0)  # within the tolerance
    assert pareto_gain((1.0 - 1e-10, 1.0), old, 1.0, tol=1e-12)


def test_the_final_polish_may_make_a_small_table_data_parallel_and_no_rating_rises() -> None:
    ts = (TableSpec("big", 2_000_000, 64, pooling=PoolingSpec("fixed", 20.0)),
          TableSpec("tiny", 200, 8, pooling=PoolingSpec("fixed", 40.0)))
    wl = PlanWorkload(ts, 8192, "inference")
    topo = topology(1, 4, 16.0).reserve_inputs(wl.ids_per_batch)
    cost, trec = CostModel(wl, topo), TorchRecCostModel(wl, topo)
    start = ShardingPlan(4, {"big": table_plan(ts[0], RW, [0, 1, 2, 3], "hbm"), "tiny": table_plan(ts[1], TW, [0], "hbm")})
    plain = relayout(cost, trec, start, 100, trec.plan_cost(start))
    assert plain is None or plain.tables["tiny"].sharding_type != DP  # the default step never tries replicas
    got = relayout(cost, trec, start, 100, trec.plan_cost(start), pareto=True)
    assert got is not None
    validate_plan(got, wl, topo, cost)
    assert got.tables["tiny"].sharding_type == DP and sorted(got.tables["tiny"].ranks) == [0, 1, 2, 3]
    assert pareto_gain((cost.plan_cost(got), trec.plan_cost(got)), (cost.plan_cost(start), trec.plan_cost(start)),
                       trec.plan_cost(start))


def test_the_final_polish_never_raises_either_rating_and_stops_at_its_evaluations() -> None:
    wl, cost, trec, tabs = _case(2)
    start = ShardingPlan(8, {"h0": table_plan(tabs["h0"], TWRW, [0, 1, 2, 3], "hbm"),
                             "h1": table_plan(tabs["h1"], TWRW, [0, 1, 2, 3], "hbm"), **_small_spread(tabs)})
    a, b = cost.plan_cost(start), trec.plan_cost(start)
    got = relayout(cost, trec, start, 1000, float("inf"), pareto=True)  # the cap: the current rating in any case
    assert got is not None
    validate_plan(got, wl, cost.topology, cost)
    assert pareto_gain((cost.plan_cost(got), trec.plan_cost(got)), (a, b), b)
    assert relayout(cost, trec, start, 0, b, pareto=True) is None


def test_optimize_polishes_a_greedy_pick_and_never_a_packing() -> None:
    from sharding import optimize
    from sharding.family import instance
    from sharding.optimizer import OptimizeStats
    for seed, polished in ((77, True), (30, False)):  # f77's pick is a polished greedy plan, f30's a packing (f25's
        # pick is now TorchRec's search's plan, `optimizer._bounded`)
        inst = instance(seed)
        st = OptimizeStats()
        plan = optimize(inst.workload, inst.topology, stats=st)
        assert st.chosen.endswith(" + polish") == polished
        if polished:
            before, after = st.candidates[-2], st.candidates[-1]
            assert after[0] == st.chosen and pareto_gain(after[1:], before[1:], before[2])
            topo = inst.topology.reserve_inputs(inst.workload.ids_per_batch)
            validate_plan(plan, inst.workload, inst.topology)
            assert abs(CostModel(inst.workload, topo).plan_cost(plan) - after[1]) <= 1e-12 * after[1]


def test_the_incremental_price_of_a_trial_equals_plan_cost_with_and_without_stage_overheads() -> None:
    """`_Delta` only rules trials out (within `_MARGIN`): its price of every re-layout tried must equal the exact
    `plan_cost` to rounding, also where groups appear or vanish and on a topology with per-holder stage costs and
    all-to-alls priced by the mean (CPU ranks)."""
    from dataclasses import replace

    from sharding.relayout import _Delta, _options
    stages = ("input_dist", "lookup", "output_dist", "output_dist_bwd", "lookup_bwd", "optimizer")
    for calibrated in (False, True):
        wl, cost, trec, tabs = _case(2)
        if calibrated:
            topo = replace(cost.topology, device="cpu", stage_overhead={
                g: {s: 1e-5 * (1 + i + j) for j, s in enumerate(stages)}
                for i, g in enumerate(("base", "TW", "CW", "RW", "TWRW", "DP"))})
            cost, trec = CostModel(wl, topo), TorchRecCostModel(wl, topo)
        plan = ShardingPlan(8, {"h0": table_plan(tabs["h0"], TWRW, [0, 1, 2, 3], "hbm"),
                                "h1": table_plan(tabs["h1"], TWRW, [4, 5, 6, 7], "hbm"), **_small_spread(tabs)})
        delta, tried = _Delta(cost, plan, trec), 0
        for name in plan.tables:
            for change in _options(cost, plan, name, replicas=True):
                _check_price(cost, trec, delta, plan, change)
                tried += 1
        assert tried > 10
        change = {"h0": table_plan(tabs["h0"], RW, list(range(8)), "hbm")}  # a change applied, then priced on
        delta.apply(change)
        plan = ShardingPlan(8, {**plan.tables, **change})
        _check_price(cost, trec, delta, plan, {"s0": table_plan(tabs["s0"], DP, list(range(8)), "hbm")})


def _check_price(cost: CostModel, trec: TorchRecCostModel, delta, plan: ShardingPlan, change: dict) -> None:  # noqa: ANN001
    trial = ShardingPlan(8, {**plan.tables, **change})
    exact, rating = cost.plan_cost(trial), trec.plan_cost(trial)
    ours, theirs = delta.price(change)  # compiled over the touched rows (the reference with stage costs)
    assert abs(ours - exact) <= 1e-12 * exact and abs(theirs - rating) <= 1e-12 * rating
    assert abs(delta.price_reference(change) - exact) <= 1e-12 * exact


def test_relayout_makes_the_same_plans_with_the_reference_price(monkeypatch) -> None:  # noqa: ANN001
    """The compiled price (`relayout_kernel`) and TorchRec's incremental rating only rule trials out: on seeded
    random plans, with and without the final polish, `relayout` returns the same plan as with the numpy
    reference price and no TorchRec filter."""
    from sharding.relayout import _Delta
    wl, cost, trec, tabs = _case(3)
    starts = _random_starts(tabs)
    fast = [relayout(cost, trec, p, 200, trec.plan_cost(p) * cap, pareto) for p in starts
            for cap in (1.0, 1.5) for pareto in (False, True)]
    monkeypatch.setattr(_Delta, "price", lambda self, change: (self.price_reference(change), float("-inf")))
    slow = [relayout(cost, trec, p, 200, trec.plan_cost(p) * cap, pareto) for p in starts
            for cap in (1.0, 1.5) for pareto in (False, True)]
    assert sum(x is not None for x in fast) >= 6
    assert [x and x.to_dict() for x in fast] == [x and x.to_dict() for x in slow]


def _random_starts(tabs: dict[str, TableSpec]) -> list[ShardingPlan]:
    """Seeded random plans of `_case(3)`'s tables: hot tables table-wise or table-row-wise, small ones mostly
    table-wise."""
    import random

    starts = []
    for seed in range(6):
        rng = random.Random(seed)
        tables = {}
        for name, t in tabs.items():
            st = rng.choice([TW, TWRW] if name.startswith("h") else [TW, TW, RW])
            host = rng.randrange(2)
            ranks = [rng.randrange(8)] if st == TW else list(range(8)) if st == RW else list(range(4 * host, 4 * host + 4))
            tables[name] = table_plan(t, st, ranks, "hbm")
        starts.append(ShardingPlan(8, tables))
    return starts


def test_relayout_prices_exactly_in_incremental_order_and_picks_as_pricing_every_trial(monkeypatch) -> None:  # noqa: ANN001
    """A table's trials are priced exactly in order of their incremental price until it passes the best exact cost
    (`_best`): with the incremental price made -inf (no trial ruled out, all priced exactly in option order, the
    former loop), every call returns the same plan, with and without the final polish, with fewer exact prices."""
    from sharding.relayout import _Delta
    wl, cost, trec, tabs = _case(3)
    starts = _random_starts(tabs)
    calls = [0]
    exact = CostModel.plan_cost

    def counted(self, plan):  # noqa: ANN001, ANN202
        calls[0] += 1
        return exact(self, plan)
    monkeypatch.setattr(CostModel, "plan_cost", counted)
    runs = [(p, 200, trec.plan_cost(p) * cap, pareto) for p in starts for cap in (1.0, 1.5) for pareto in (False, True)]
    fast = [relayout(cost, trec, *r) for r in runs]
    fast_calls, calls[0] = calls[0], 0
    monkeypatch.setattr(_Delta, "price", lambda self, change: (float("-inf"), float("-inf")))
    every = [relayout(cost, trec, *r) for r in runs]
    assert sum(x is not None for x in fast) >= 6
    assert [x and x.to_dict() for x in fast] == [x and x.to_dict() for x in every]
    assert fast_calls < calls[0]


def _relayout_inputs(seeds: tuple[int, ...]) -> list[tuple]:
    """The arguments (cost, TorchRec's model, plan, evaluations, cap, pareto) of each `relayout` call `optimize`
    makes on family instances `seeds`."""
    import sharding.optimizer as opt
    from sharding import optimize
    from sharding.family import instance
    got, real = [], opt.relayout

    def spy(cost, trec, plan, evals, t_cap, pareto=False):  # noqa: ANN001, ANN202
        got.append((cost, trec, plan, evals, t_cap, pareto))
        return real(cost, trec, plan, evals, t_cap, pareto)
    opt.relayout = spy
    try:
        for s in seeds:
            optimize(instance(s).workload, instance(s).topology)
    finally:
        opt.relayout = real
    return got


def test_the_compiled_entries_and_memory_test_equal_their_numpy_references_bit_for_bit() -> None:
    """`_Delta._entry` (block, TorchRec's loads and memory of a table plan in one `relayout_kernel.scatter_rows`
    call) gives the bits of `_entry_reference` (`np.add.at` shape by shape: `_make_block_reference`, `_memory`) for
    every table plan `relayout` tries on family instances and for shapes with a rank repeated (added twice), with
    the collectives' rows numbered alike, and so the same incremental prices, bit for bit; `_over`
    (`relayout_kernel.over_cap`) answers as `_over_reference` for every one- and two-table change tried there, also
    with the capacity moved onto the trial's own bytes (ties)."""
    import numpy as np

    from sharding.plan import TablePlan
    from sharding.relayout import _Delta, _memory, _options, _over, _over_reference
    checked, over, asked, priced = 0, 0, 0, 0
    for cost, trec, plan, *_ in _relayout_inputs((41, 54, 73)):
        fast, ref = _Delta(cost, plan, trec), _Delta(cost, plan, trec)
        ref._entry = ref._entry_reference
        tiers = [x.name for x in cost.topology.tiers]
        mem = {n: _memory(cost, tp, tiers) for n, tp in plan.tables.items()}
        used = sum(mem.values())
        tp = next(iter(plan.tables.values()))
        twice = TablePlan(tp.name, tp.sharding_type, (*tp.shards, *tp.shards))  # every shard on its rank twice
        for name in [*plan.tables, None]:
            for change in (_options(cost, plan, name, True) if name else [{tp.name: twice}]):
                for x in [plan.tables[n] for n in change] + list(change.values()):
                    _same_entry(fast, ref, x)
                    checked += 1
                if name is None:
                    continue
                a, b = fast.price(change), ref.price(change)
                assert np.float64(a[0]).tobytes() == np.float64(b[0]).tobytes() and a[1] == b[1]
                priced += 1
                new = {n: fast.memory(tp) for n, tp in change.items()}
                after = used + sum(new.values()) - sum(mem[n] for n in new)
                for cap in (after.max(axis=1), after.max(axis=1) * (1 - 1e-9), after.min(axis=1), used.max(axis=1)):
                    assert _over(used, cap, new, mem) == _over_reference(used, cap, new, mem)
                    over, asked = over + _over_reference(used, cap, new, mem), asked + 1
        assert fast.coll == ref.coll and fast.rows == ref.rows
        assert np.array_equal(fast._block(twice)[1][np.argsort(fast._block(twice)[0])],
                              2 * ref._make_block_reference(tp)[1])
    assert checked > 300 and priced > 300 and 50 < over < asked - 50  # both answers, many times


def _same_entry(fast, ref, tp) -> None:  # noqa: ANN001
    """`fast`'s and `ref`'s block (rows sorted), TorchRec's loads and memory of `tp`, bit for bit, and each one's
    block with the loads that `price_change` reads."""
    import numpy as np
    rows, block = fast._block(tp)
    want_rows, want = ref._block(tp)
    order = np.argsort(rows)
    assert rows[order].tolist() == want_rows.tolist() and block[order].tobytes() == want.tobytes()
    e, r = fast._of(tp), ref._of(tp)
    assert e[2].tobytes() == r[2].tobytes() and e[3].tobytes() == r[3].tobytes() and fast.memory(tp) is e[3]
    for x, d in ((e, fast), (r, ref)):  # `price_change`'s form: the block, then TorchRec's loads as a last row
        got_rows, got = d._priced(x)
        assert got_rows is d._block(tp)[0] and got[:-1].tobytes() == d._block(tp)[1].tobytes()
        assert got[-1].tobytes() == x[2].tobytes() and got.flags.c_contiguous


def test_relayout_makes_the_same_plans_with_the_numpy_block_and_memory_test(monkeypatch) -> None:  # noqa: ANN001
    """`relayout`'s calls in `optimize` on family instances, and on seeded random plans with and without the final
    polish, return the same plans (and None alike) with `_entry_reference` and `_over_reference` in place of the
    compiled forms."""
    import sharding.relayout as rl
    _, cost, trec, tabs = _case(3)
    runs = _relayout_inputs((41, 54, 74, 88)) + [(cost, trec, p, 200, trec.plan_cost(p) * cap, pareto)
                                                 for p in _random_starts(tabs) for cap in (1.0, 1.5)
                                                 for pareto in (False, True)]
    fast = [relayout(*r) for r in runs]
    monkeypatch.setattr(rl._Delta, "_entry", rl._Delta._entry_reference)
    monkeypatch.setattr(rl, "_over", lambda used, cap, new, mem: rl._over_reference(used, cap, new, mem))
    slow = [relayout(*r) for r in runs]
    assert sum(x is not None for x in fast) >= 8
    assert [x and x.to_dict() for x in fast] == [x and x.to_dict() for x in slow]


def _options_reference(cost, plan, name, replicas=False):  # noqa: ANN001, ANN202
    """`_options` as it was, reading every table-row-wise table's host, tier and ranks for each table tried."""
    topo, tp = cost.topology, plan.tables[name]
    t, w, h = cost.tables[name], topo.world_size, min(topo.ranks_per_host, topo.world_size)
    (_, _, tier, fraction), ranks = next(iter(tp.alike().items()))
    if tp.sharding_type != RW and w > 1:
        yield {name: table_plan(t, RW, list(range(w)), tier, fraction)}
    if replicas and tp.sharding_type != DP and w > 1 and tier == topo.fast.name:
        yield {name: table_plan(t, DP, list(range(w)), tier, 0.0)}
    if tp.sharding_type == TWRW and topo.num_hosts > 1:
        host = min(ranks) // h
        for other in range(topo.num_hosts):
            if other != host:
                yield {name: table_plan(t, TWRW, list(range(other * h, other * h + h)), tier, fraction)}
        mine = tp.ranks
        for m, tq in plan.tables.items():
            if tq.sharding_type == TWRW:
                (_, _, tier_m, fraction_m), ranks_m = next(iter(tq.alike().items()))
                if min(ranks_m) // h != host:
                    yield {name: table_plan(t, TWRW, tq.ranks, tier, fraction),
                           m: table_plan(cost.tables[m], TWRW, mine, tier_m, fraction_m)}


def test_the_options_from_the_plans_table_row_wise_view_and_the_delta_ratings_are_the_direct_ones() -> None:
    """`_options` with `_twrw` (each table-row-wise table's host, tier and ranks read once per plan) yields the
    options of the former generator, in order, on `relayout`'s inputs in `optimize` on family instances and on
    seeded random plans (two hosts, swaps); `_Delta.step` and `_Delta.rating` are `plan_cost` of both models bit
    for bit, also after a change is applied."""
    import numpy as np

    from sharding.relayout import _Delta, _options, _twrw
    _, cost0, trec0, tabs = _case(3)
    runs = [(c, r, p) for c, r, p, *_ in _relayout_inputs((41, 54, 73, 118))] + [
        (cost0, trec0, p) for p in _random_starts(tabs)]
    yielded, swaps = 0, 0
    for cost, trec, plan in runs:
        twrw = _twrw(cost, plan)
        for name in plan.tables:
            for replicas in (False, True):
                got = list(_options(cost, plan, name, replicas, twrw=twrw))
                want = list(_options_reference(cost, plan, name, replicas))
                assert [list(c) for c in got] == [list(c) for c in want]
                assert [[(x.sharding_type, x.alike(), x.ranks) for x in c.values()] for c in got] == [
                    [(x.sharding_type, x.alike(), x.ranks) for x in c.values()] for c in want]
                yielded, swaps = yielded + len(got), swaps + sum(len(c) == 2 for c in got)
        delta = _Delta(cost, plan, trec)
        bits = [np.float64(x).tobytes() for x in (delta.step(), delta.rating())]
        assert bits == [np.float64(x).tobytes() for x in (cost.plan_cost(plan), trec.plan_cost(plan))]
        name, change = next((n, c) for n in plan.tables for c in _options(cost, plan, n, True))
        delta.apply(change)
        after = ShardingPlan(plan.world_size, {**plan.tables, **change})
        bits = [np.float64(x).tobytes() for x in (delta.step(), delta.rating())]
        assert bits == [np.float64(x).tobytes() for x in (cost.plan_cost(after), trec.plan_cost(after))]
    assert yielded > 500 and swaps > 100
