"""The backward's fused row-wise update touches each distinct row once: `expected_unique_rows` against the
generator's own batches, and how a calibrated file's `lookup_weights.lookup_bwd.unique_rows` prices it."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from embedding.generate import WorkloadGenerator
from embedding.spec import AccessSpec, PoolingSpec, TableSpec, WorkloadSpec
from sharding import CostModel, PlanWorkload
from sharding.cost import expected_unique_rows
from sharding.plan import ShardingType
from sharding.topology import Topology, TopologyError
from tests.sharding.conftest import topology

TW, RW = ShardingType.TABLE_WISE, ShardingType.ROW_WISE
UNIT = {"lookup": 1.0, "lookup_bwd": 1.0}  # stage bandwidth 1: the priced figures are the modelled bytes


@pytest.mark.parametrize(("rows", "kind", "alpha"), [(50_000, "uniform", 1.05), (50_000, "zipf", 1.05),
                                                     (300_000, "zipf", 1.25), (300_000, "uniform", 1.05)])
def test_expected_distinct_rows_match_the_generators_batches(rows: int, kind: str, alpha: float) -> None:
    t = TableSpec("t", rows, 16, pooling=PoolingSpec("fixed", 16), access=AccessSpec(kind, alpha))
    batch = WorkloadGenerator(WorkloadSpec("u", (t,), 1024, 1)).batch(0)
    measured = np.unique(batch.indices).size
    assert expected_unique_rows(rows, kind, alpha, batch.num_lookups) == pytest.approx(measured, rel=0.03)


def test_distinct_rows_never_exceed_the_ids_or_the_rows() -> None:
    assert expected_unique_rows(1000, "uniform", 1.0, 10**6) == pytest.approx(1000.0)
    assert expected_unique_rows(10**6, "zipf", 1.25, 10) <= 10.0
    assert expected_unique_rows(10**6, "trace", 1.0, 500) == 500.0  # unknown spread: every id its own row
    assert expected_unique_rows(0, "zipf", 1.1, 10) == 0.0


def _model(t: TableSpec, unique: float | None, groups: tuple[str, ...] = ("TW",)) -> CostModel:
    bwd = {"id_bytes": 0.0, "dram": 0.0} if unique is None else {"id_bytes": 0.0, "dram": 0.0, "unique_rows": unique}
    topo = replace(topology(1, 2, 8.0), lookup_weights={"lookup": {"id_bytes": 0.0, "dram": 0.0}, "lookup_bwd": bwd},
                   stage_bandwidth={g: dict(UNIT) for g in groups})
    return CostModel(PlanWorkload((t,), 512), topo)


def test_a_hot_table_s_backward_is_priced_per_distinct_row_and_its_forward_per_id() -> None:
    t = TableSpec("a", 400_000, 64, access=AccessSpec("zipf", 1.25))
    per_id, per_row = _model(t, None), _model(t, 1.0)
    a, b = (m.shard_cost(t, TW, t.rows, t.dim, "hbm") for m in (per_id, per_row))
    ids = 2 * 512 * t.pooling.expected
    share = expected_unique_rows(t.rows, "zipf", 1.25, ids) / ids
    assert share < 0.5  # a hot table updates far fewer rows than it looks up
    assert a.bwd_compute - b.bwd_compute == pytest.approx(ids * t.dim * 4 * (1 - share))
    assert a.fwd_compute == b.fwd_compute  # the forward gathers a row per id either way


def test_a_file_without_the_weight_prices_exactly_as_before() -> None:
    t = TableSpec("a", 400_000, 64, access=AccessSpec("zipf", 1.25))
    old, zero = _model(t, None), _model(t, 0.0)
    assert old.shard_cost(t, TW, t.rows, t.dim, "hbm") == zero.shard_cost(t, TW, t.rows, t.dim, "hbm")


def test_a_uniform_table_far_larger_than_the_batch_costs_about_a_row_per_id() -> None:
    t = TableSpec("a", 10_000_000, 64, access=AccessSpec("uniform"))
    a, b = (m.shard_cost(t, TW, t.rows, t.dim, "hbm").bwd_compute for m in (_model(t, None), _model(t, 1.0)))
    assert b == pytest.approx(a, rel=1e-3) and b <= a


def test_row_wise_shards_split_the_distinct_rows_as_they_split_the_ids() -> None:
    t = TableSpec("a", 400_000, 64, access=AccessSpec("zipf", 1.25))
    per_id, per_row = _model(t, None, ("TW", "RW")), _model(t, 1.0, ("TW", "RW"))

    def saved(st: ShardingType, rows: int) -> float:
        return (per_id.shard_cost(t, st, rows, t.dim, "hbm").bwd_compute
                - per_row.shard_cost(t, st, rows, t.dim, "hbm").bwd_compute)

    # what counting distinct rows saves is additive over the shards: the planner's per-shard sums still hold
    assert saved(RW, 150_000) + saved(RW, 250_000) == pytest.approx(saved(TW, t.rows))
    assert saved(RW, 150_000) == pytest.approx(saved(TW, t.rows) * 150_000 / t.rows)


def test_the_weight_round_trips_and_a_share_above_one_is_named() -> None:
    t = TableSpec("a", 1000, 16)
    topo = _model(t, 1.0).topology
    assert Topology.from_dict(topo.to_dict()) == topo
    with pytest.raises(TopologyError, match="unique_rows in"):
        replace(topo, lookup_weights={"lookup_bwd": {"id_bytes": 0.0, "unique_rows": 1.5}})


def test_a_per_distinct_row_cost_is_priced_per_distinct_row_the_backward_touches() -> None:
    t = TableSpec("a", 400_000, 64, access=AccessSpec("zipf", 1.25))
    base = _model(t, 1.0)
    lw = {**base.topology.lookup_weights, "lookup_bwd": {**base.topology.lookup_weights["lookup_bwd"],
                                                         "row_bytes": 1000.0}}
    rowed = CostModel(base.workload, replace(base.topology, lookup_weights=lw))
    a, b = (m.shard_cost(t, TW, t.rows, t.dim, "hbm") for m in (base, rowed))
    ids = 2 * 512 * t.pooling.expected
    distinct = expected_unique_rows(t.rows, "zipf", 1.25, ids)
    assert b.bwd_compute - a.bwd_compute == pytest.approx(1000.0 * distinct)
    assert a.fwd_compute == b.fwd_compute
    with pytest.raises(TopologyError):
        replace(base.topology, lookup_weights={**lw, "lookup_bwd": {**lw["lookup_bwd"], "row_bytes": -1.0}})
