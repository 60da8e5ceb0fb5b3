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
