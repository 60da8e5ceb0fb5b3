"""The tiering (`sharding.tiers.assign_tiers`): the greedy demotion steps, then the steps taken back where the
fast tier still fits (`_undo`)."""
from __future__ import annotations

import pytest

import sharding.tiers as tiers_mod
from embedding.spec import AccessSpec, PoolingSpec, TableSpec
from sharding import CostModel, PlanWorkload, ShardingPlan, load_topology, validate_plan
from sharding.family import instance
from sharding.layouts import table_plan
from sharding.plan import ShardingType
from sharding.tiers import CACHE_LEVELS, _held, assign_tiers, promote
from sharding.trec_cost import TorchRecCostModel
from tests.sharding.conftest import topology

TW, RW = ShardingType.TABLE_WISE, ShardingType.ROW_WISE


def _level(tiers: dict[str, tuple[str, float]], fast: str, name: str) -> int:
    tier, fraction = tiers[name]
    return 0 if tier == fast else CACHE_LEVELS.index(fraction)


def _greedy_only(cost: CostModel, monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[str, float]]:
    with monkeypatch.context() as m:
        m.setattr(tiers_mod, "_undo", lambda cost, levels, state, demand, cap: demand)
        return assign_tiers(cost)


def _overshoot_case() -> CostModel:
    """Small cold tables that are cheap to demote per byte, and one large hot table whose first steps free far
    more than the small ones did: the greedy demotes the small ones first, then needs the large one anyway."""
    small = tuple(TableSpec(f"s{i}", 2_000_000, 64, pooling=PoolingSpec("fixed", 1.0),
                            access=AccessSpec("zipf", 1.2)) for i in range(4))
    big = TableSpec("big", 60_000_000, 128, pooling=PoolingSpec("fixed", 40.0), access=AccessSpec("zipf", 1.0))
    wl = PlanWorkload((big, *small), 4096)
    topo = load_topology("torchrec_default", 4, 4, 6.0).reserve_inputs(wl.ids_per_batch)
    return CostModel(wl, topo)


@pytest.mark.parametrize("case", ["synthetic", 64, 54, 89, 6])
def test_taken_back_steps_never_demote_more_and_leave_no_step_that_fits(case, monkeypatch) -> None:  # noqa: ANN001
    if case == "synthetic":
        cost = _overshoot_case()
    else:
        inst = instance(case)
        cost = CostModel(inst.workload, inst.topology.reserve_inputs(inst.workload.ids_per_batch))
    topo, fast = cost.topology, cost.topology.fast.name
    greedy, got = _greedy_only(cost, monkeypatch), assign_tiers(cost)
    cap = topo.usable(fast) * topo.world_size * 0.92
    names = [t.name for t in cost.workload.tables]
    level = {n: _level(got, fast, n) for n in names}
    assert all(level[n] <= _level(greedy, fast, n) for n in names)  # only steps back up
    held = sum(_held(cost, n, level[n]) for n in names)
    greedy_held = sum(_held(cost, n, _level(greedy, fast, n)) for n in names)
    assert held <= max(cap, greedy_held) * (1 + 1e-12)  # the room the packings need is kept
    if held <= cap:  # maximal: no single step back up still fits
        for n in names:
            if level[n] > 0:
                assert held - _held(cost, n, level[n]) + _held(cost, n, level[n] - 1) > cap * (1 - 1e-12), n


def test_the_greedy_overshoot_is_taken_back(monkeypatch) -> None:  # noqa: ANN001
    cost = _overshoot_case()
    fast = cost.topology.fast.name
    greedy, got = _greedy_only(cost, monkeypatch), assign_tiers(cost)
    assert any(greedy[f"s{i}"][0] != fast for i in range(4))  # the case does what it says
    assert all(got[f"s{i}"][0] == fast for i in range(4))
    assert got["big"][0] != fast
    inst = instance(64)  # 87 tables × 8 ranks, memory-tight: TorchRec's plan keeps only t0 in DDR; so does ours now
    cost = CostModel(inst.workload, inst.topology.reserve_inputs(inst.workload.ids_per_batch))
    assert [n for n, (tier, _) in assign_tiers(cost).items() if tier != fast] == ["t0"]


def _slow_case() -> tuple[PlanWorkload, CostModel, TorchRecCostModel, dict[str, TableSpec]]:
    """Four ranks of 16 GB HBM; a hot table row-wise over all ranks and small ones table-wise, room to spare."""
    ts = (TableSpec("hot", 4_000_000, 128, pooling=PoolingSpec("fixed", 80.0)),
          *(TableSpec(f"s{i}", 200_000, 64, pooling=PoolingSpec("fixed", 4.0)) for i in range(4)))
    wl = PlanWorkload(ts, 4096)
    topo = topology(1, 4, 16.0).reserve_inputs(wl.ids_per_batch)
    return wl, CostModel(wl, topo), TorchRecCostModel(wl, topo), {t.name: t for t in ts}


def test_promote_moves_slow_tier_tables_up_where_a_rank_has_room_and_never_worsens_either_model() -> None:
    wl, cost, trec, tabs = _slow_case()
    start = ShardingPlan(4, {"hot": table_plan(tabs["hot"], RW, [0, 1, 2, 3], "ddr", 0.0),
                             **{f"s{i}": table_plan(tabs[f"s{i}"], TW, [i], "ddr", 0.2) for i in range(4)}})
    got = promote(cost, trec, start, 1000, trec.plan_cost(start))
    assert got is not None
    validate_plan(got, wl, cost.topology, cost)
    assert cost.plan_cost(got) <= cost.plan_cost(start) * (1 + 1e-12)
    assert trec.plan_cost(got) <= trec.plan_cost(start) * (1 + 1e-12)
    assert cost.plan_cost(got) < cost.plan_cost(start) or trec.plan_cost(got) < trec.plan_cost(start)
    assert got.tables["hot"].shards[0].tier == "hbm"  # 4 GB over four ranks of 16 GB: it fits whole
    assert all(tp.sharding_type == start.tables[n].sharding_type for n, tp in got.tables.items())  # types kept
    assert promote(cost, trec, start, 0, trec.plan_cost(start)) is None  # no evaluation: no change


def test_promote_respects_each_ranks_fast_tier_and_the_torchrec_cap() -> None:
    ts = (TableSpec("big", 10_000_000, 128, pooling=PoolingSpec("fixed", 20.0)),
          TableSpec("filler", 10_000_000, 128, pooling=PoolingSpec("fixed", 1.0)))
    wl = PlanWorkload(ts, 4096)
    topo = topology(1, 2, 4.0).reserve_inputs(wl.ids_per_batch)  # a 5.1 GB table whole fits no rank
    cost, trec = CostModel(wl, topo), TorchRecCostModel(wl, topo)
    tabs = {t.name: t for t in ts}
    start = ShardingPlan(2, {"big": table_plan(tabs["big"], TW, [0], "ddr", 0.0),
                             "filler": table_plan(tabs["filler"], TW, [1], "ddr", 0.0)})
    got = promote(cost, trec, start, 1000, trec.plan_cost(start))
    if got is not None:
        validate_plan(got, wl, cost.topology, cost)
        assert all(tp.shards[0].tier == "ddr" for tp in got.tables.values())  # only cache levels fit
        assert any(tp.shards[0].cache_fraction > 0 for tp in got.tables.values())
    capped = promote(cost, trec, start, 1000, trec.plan_cost(start) * 0.5)
    assert capped is None or trec.plan_cost(capped) <= trec.plan_cost(start) * 0.5 * (1 + 1e-12)


def test_optimize_packs_the_greedy_tiering_too_where_taking_steps_back_changed_it() -> None:
    from sharding import optimize
    from sharding.optimizer import OptimizeStats
    from sharding.tiers import tierings
    for seed, differs in ((73, True), (2, False)):  # f73: 11 tables × 8 ranks, one table's tier taken back
        inst = instance(seed)
        cost = CostModel(inst.workload, inst.topology.reserve_inputs(inst.workload.ids_per_batch))
        taken, greedy = tierings(cost)
        assert (taken != greedy) == differs
        stats = OptimizeStats()
        plan = optimize(inst.workload, inst.topology, stats=stats)
        validate_plan(plan, inst.workload, inst.topology)
        assert any("(greedy tiers)" in c[0] for c in stats.candidates) == differs


def test_the_greedy_tierings_pass_packs_the_budgets_attempt_alone_where_the_budget_is_one_packing() -> None:
    """f64 (87 tables: a one-attempt budget; its greedy tiering differs): the greedy tiering's pass adds one
    packing, the budget's attempt (no reference, smallest-piece or extra packing), and the plan is valid."""
    from sharding import optimize
    from sharding.optimizer import ATTEMPT_WORK, REF_TAGS, OptimizeStats
    inst = instance(64)
    assert ATTEMPT_WORK // len(inst.workload.tables) <= 1
    stats = OptimizeStats()
    plan = optimize(inst.workload, inst.topology, stats=stats)
    validate_plan(plan, inst.workload, inst.topology)
    second = [c[0] for c in stats.candidates if "(greedy tiers)" in c[0] and " + " not in c[0]]
    assert len(second) == 1
    assert not any(tag in second[0] for tag in (*REF_TAGS, "TorchRec-only", "least-work(TorchRec)", "finest"))


@pytest.mark.parametrize("case", ["synthetic", 64, 54, 89, 6, 94])
def test_tierings_priced_in_one_pass_are_the_tierings_priced_one_table_at_a_time(case, monkeypatch) -> None:  # noqa: ANN001
    """`tierings` prices every table's level 0 in one `price_many` pass (`_price_fast`): the same tierings and
    the same level-0 figures, bit for bit, as one `shard_cost` per table; and the pass fills the memo `_level`
    reads (else it is no fast path)."""
    def made() -> CostModel:
        if case == "synthetic":
            return _overshoot_case()
        inst = instance(case)
        return CostModel(inst.workload, inst.topology.reserve_inputs(inst.workload.ids_per_batch))

    def bits(cost: CostModel) -> list:
        return [(tier, cf, c.hex(), sorted((k, v.hex()) for k, v in m.items()))
                for tier, cf, c, m in (tiers_mod._level(cost, t.name, 0) for t in cost.workload.tables)]

    fast_cost = made()
    tiers_mod._price_fast(fast_cost)
    fast = fast_cost.topology.fast.name
    assert all(("c", t.name, TW, t.rows, t.dim, fast, 0.0) in fast_cost._memo for t in fast_cost.workload.tables)
    assert all(("m", t.name, TW, t.rows, t.dim, fast, 0.0) in fast_cost._memo for t in fast_cost.workload.tables)
    got = (tiers_mod.tierings(fast_cost), bits(fast_cost))
    with monkeypatch.context() as m:
        m.setattr(tiers_mod, "_price_fast", lambda cost: None)
        slow_cost = made()
        want = (tiers_mod.tierings(slow_cost), bits(slow_cost))
    assert got == want


def test_a_plan_with_two_column_blocks_on_one_rank_is_promoted_within_memory() -> None:
    """Hypothesis found it (2026-12-03): on one rank, TorchRec's search re-stated put t2's two column blocks on rank
    0; `relayout._memory` counted them once (`out[k, ranks] += v` with a repeated rank), so `promote` raised t0
    from DDR into HBM past its capacity and `optimize` returned a plan `validate_plan` rejects."""
    from embedding.spec import AccessSpec, PoolingSpec, TableSpec
    from sharding import CostModel, optimize, validate_plan
    from sharding.relayout import _memory
    from sharding.topology import Link, MemoryTier, Topology
    from sharding.workload import PlanWorkload
    pool, uni = PoolingSpec(kind="fixed", mean=1.0, low=1, high=0), AccessSpec(kind="uniform", alpha=1.05)
    spec = [(690965, 64, uni), (3, 4, uni), (237432, 256, AccessSpec(kind="zipf", alpha=0.9))] + [(3, 4, uni)] * 5
    ts = tuple(TableSpec(name=f"t{i}", rows=r, dim=d, dtype="fp32", pooling=pool, access=a)
               for i, (r, d, a) in enumerate([*spec, (3, 256, uni)]))
    topo = Topology(name="test", device="cuda", num_hosts=1, ranks_per_host=1,
                    tiers=(MemoryTier("hbm", 5e8, 1.5e12, ""), MemoryTier("ddr", 6.4e10, 1.6e10, "")),
                    intra_host=Link(3e11, 1e-5, ""), inter_host=Link(4e10, 2e-5, ""), reserved_fraction=0.15,
                    bwd_compute_multiplier=2.0)
    wl = PlanWorkload(ts, 512, "train")
    plan = optimize(wl, topo)
    validate_plan(plan, wl, topo, CostModel(wl, topo))
    cost = CostModel(wl, topo.reserve_inputs(wl.ids_per_batch))
    tp = table_plan(cost.tables["t2"], ShardingType.COLUMN_WISE, [0, 0], "hbm", 0.0)
    each = [cost.shard_memory(cost.tables["t2"], ShardingType.COLUMN_WISE, s.row_end - s.row_start,
                              s.col_end - s.col_start, "hbm", 0.0)["hbm"] for s in tp.shards]
    assert len(each) == 2 and _memory(cost, tp, ["hbm", "ddr"])[0, 0] == each[0] + each[1]
