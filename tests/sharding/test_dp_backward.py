"""A data-parallel replica's backward (sharding.cost DP_BACKWARD): with a calibrated DP "lookup_bwd" stage
bandwidth the stage (dense gradient + DDP all-reduce) is priced per all-reduce byte, in proportion to the
replica's bytes, and the fused update's per-id / per-row weights do not enter it."""
from __future__ import annotations

from dataclasses import replace

import pytest

from embedding.spec import AccessSpec, PoolingSpec, TableSpec
from sharding import CostModel, PlanWorkload
from sharding.plan import ShardingType
from tests.sharding.conftest import topology

DP, TW = ShardingType.DATA_PARALLEL, ShardingType.TABLE_WISE
DP_BWD_BW, OPT_BW = 0.5e9, 2e9
# a calibration whose backward fit had no per-byte term: per-id and per-row weights in huge "near bytes"
HUGE = {"lookup": {"id_bytes": 200.0, "dram": 0.0},
        "lookup_bwd": {"id_bytes": 2.6e7, "dram": 0.0, "unique_rows": 1.0, "row_bytes": 8e8}}


def _model(t: TableSpec, ranks: int = 2, dp_fitted: bool = True) -> CostModel:
    stage = {"TW": {"lookup": 8e9, "lookup_bwd": 8.7e14}, "DP": {"lookup": 11e9, "optimizer": OPT_BW}}
    if dp_fitted:
        stage["DP"]["lookup_bwd"] = DP_BWD_BW
    topo = replace(topology(1, ranks, 8.0), lookup_weights=HUGE, stage_bandwidth=stage, bwd_compute_multiplier=4.8)
    return CostModel(PlanWorkload((t,), 512), topo)


def _table(rows: int, pooling: float = 4.0) -> TableSpec:
    return TableSpec("a", rows, 16, pooling=PoolingSpec("fixed", pooling), access=AccessSpec("uniform"))


def test_a_replica_s_backward_is_its_all_reduce_at_the_fitted_dp_bandwidth() -> None:
    t = _table(12_000)
    m = _model(t)
    c = m.shard_cost(t, DP, t.rows, t.dim, "hbm")
    nbytes = t.rows * t.dim * 4
    assert c.bwd_compute == 0.0  # no fused-update term: the stage is the all-reduce's
    assert c.bwd_comms == pytest.approx(2 * (2 - 1) / 2 * nbytes / DP_BWD_BW)  # ring bytes / fitted bandwidth
    assert c.optimizer == pytest.approx(nbytes / OPT_BW)
    # priced in proportion to the replica's bytes, not to its ids: 4× the ids cost the same backward
    busy = _table(12_000, pooling=16.0)
    assert _model(busy).shard_cost(busy, DP, busy.rows, busy.dim, "hbm").bwd_comms == pytest.approx(c.bwd_comms)
    big = _table(48_000)
    assert _model(big).shard_cost(big, DP, big.rows, big.dim, "hbm").bwd_comms == pytest.approx(4 * c.bwd_comms)


def test_a_dp_plan_s_step_stays_in_proportion_with_the_huge_fused_weights() -> None:
    t = _table(12_000)
    m = _model(t)
    c = m.shard_cost(t, DP, t.rows, t.dim, "hbm")
    assert c.total < 1.0  # seconds: the fused update's per-id weights once priced such a replica at hours
    # a table-wise shard still pays the fused update's per-id and per-row costs over its fitted stage bandwidth
    assert m.shard_cost(t, TW, t.rows, t.dim, "hbm").bwd_compute > 0.0


def test_one_rank_prices_the_dense_gradient_and_uncalibrated_files_as_before() -> None:
    t = _table(12_000)
    alone = _model(t, ranks=1).shard_cost(t, DP, t.rows, t.dim, "hbm")
    assert alone.bwd_compute == pytest.approx(t.rows * t.dim * 4 / DP_BWD_BW)  # no all-reduce: the dense gradient
    unfitted = _model(t, dp_fitted=False)
    c = unfitted.shard_cost(t, DP, t.rows, t.dim, "hbm")
    assert c.bwd_compute > 0.0  # without the DP stage figure: the backward multiplier's lookup term, as before
