"""The hot-table rule of the optimizer's extra packing (`Builder.cool`, `optimizer.HOT_SHARE`): a table whose
table-wise shard alone puts more than the average rank's load on some row is split; cooler tables are left alone;
the optimizer offers that packing as a candidate and its pick keeps every guarantee."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from embedding.spec import AccessSpec, PoolingSpec, TableSpec
from sharding import CostModel, PlanWorkload, lower_bound, optimize, validate_plan
from sharding.baselines import BASELINES
from sharding.optimizer import HOT_SHARE, OptimizeStats
from sharding.pack import TW, Builder
from sharding.search import Resources
from sharding.tiers import assign_tiers
from sharding.trec_cost import TorchRecCostModel
from tests.sharding.conftest import tables, topologies, topology


def _instance(hot_pooling: float) -> PlanWorkload:
    """80 wide tables of one lookup per bag (all-to-all heavy, little compute) and a narrow one with `hot_pooling`
    lookups per bag (compute ∝ lookups × dim), for 2 hosts of 4 ranks: the packing's load threshold, driven by the
    all-to-alls, keeps the narrow table whole even where its compute alone exceeds a rank's mean."""
    cool = [TableSpec(f"t{i}", 50_000, 128, "fp32", PoolingSpec("fixed", 1.0), AccessSpec("uniform"))
            for i in range(80)]
    return PlanWorkload((TableSpec("hot", 200_000, 32, "fp32", PoolingSpec("fixed", hot_pooling),
                                   AccessSpec("uniform")), *cool), 512, "train")


def _builder(wl: PlanWorkload, topo) -> Builder:  # noqa: ANN001
    cost, trec = CostModel(wl, topo), TorchRecCostModel(wl, topo)
    return Builder(Resources(cost, trec, (lower_bound(cost, relax=False).value, lower_bound(trec).value)),
                   assign_tiers(cost), 100)


def test_a_table_above_the_rank_mean_is_split_and_a_cooler_one_is_not() -> None:
    topo = topology(2, 4, 16.0)
    for pooling, split in ((150.0, True), (30.0, False)):  # the narrow table: ~1.6× / ~0.4× a rank's compute
        wl = _instance(pooling)
        b = _builder(wl, topo)
        hot = wl.tables[0]
        v = b.shard(hot, TW, hot.rows, hot.dim)[0][:-1]
        on = b.row_avg > 0
        assert (float((v[on] / b.row_avg[on]).max()) > HOT_SHARE) == split
        assert b.choose(hot, 0.5, 0.5, True, False, True) == (TW, 1)  # the plain rule keeps it whole
        assert (b.choose(hot, 0.5, 0.5, True, False, True, HOT_SHARE)[0] != TW) == split
        assert all(b.choose(t, 0.5, 0.5, True, False, True, HOT_SHARE) == b.choose(t, 0.5, 0.5, True, False, True)
                   for t in wl.tables[1:])


def test_the_optimizer_offers_the_hot_packing_and_keeps_its_guarantees(monkeypatch) -> None:  # noqa: ANN001
    import sharding.optimizer as opt
    monkeypatch.setattr(opt, "ATTEMPT_TABLES", 40)  # the instance counts as large: one packing, plus the hot one
    wl, topo = _instance(150.0), topology(2, 4, 16.0)
    stats = OptimizeStats()
    plan = optimize(wl, topo, stats=stats)
    cost, trec = CostModel(wl, topo), TorchRecCostModel(wl, topo)
    validate_plan(plan, wl, topo, cost)
    assert any("hot>1" in label for label, _, _ in stats.candidates)
    a, b = cost.plan_cost(plan), trec.plan_cost(plan)
    for fn in BASELINES.values():
        base = fn(wl, topo)
        assert a <= cost.plan_cost(base) * (1 + 1e-9) and b <= trec.plan_cost(base) * (1 + 1e-9)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(max_count=16), topologies(), st.sampled_from([0.5, 1.0, 2.0]))
def test_the_rule_only_ever_splits(ts, topo, share) -> None:  # noqa: ANN001
    """With any share, a table the plain rule replicates or cuts by rows keeps that choice; one it keeps whole or
    cuts by columns keeps it or is cut (a column block still receives all of a table's ids, so it can be too hot
    too), never kept whole or replicated instead."""
    wl = PlanWorkload(ts, 512, "train")
    b = _builder(wl, topo)
    for t in wl.tables:
        plain, hot = b.choose(t, 1.0, 0.5, True, False, True), b.choose(t, 1.0, 0.5, True, False, True, share)
        if plain[0].short in ("DP", "TWRW", "RW"):
            assert hot == plain
        else:
            assert hot == plain or hot[0].short not in ("TW", "DP")
