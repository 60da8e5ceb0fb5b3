"""Cost-model pieces: the Zipf hot-set miss rate, measured miss curves, slow tiers cost more."""
from __future__ import annotations

import numpy as np

from embedding.spec import AccessSpec, TableSpec
from sharding import CostModel, PlanWorkload, zipf_miss_rate
from sharding.plan import ShardingType
from tests.sharding.conftest import topology


def test_zipf_miss_rate_falls_with_cache_and_skew() -> None:
    rates = [zipf_miss_rate(10_000_000, 1.05, f) for f in (0.0, 0.01, 0.1, 0.5, 1.0)]
    assert rates[0] == 1.0 and rates[-1] == 0.0 and all(a > b for a, b in zip(rates, rates[1:], strict=False))
    assert zipf_miss_rate(10_000_000, 1.2, 0.01) < zipf_miss_rate(10_000_000, 0.9, 0.01)
    exact = 1 - np.sum(np.arange(1, 50_001) ** -1.05) / np.sum(np.arange(1, 5_000_001) ** -1.05)
    assert abs(zipf_miss_rate(5_000_000, 1.05, 0.01) - exact) < 1e-4


def test_measured_miss_curve_replaces_the_estimate_and_uvm_costs_more() -> None:
    t = TableSpec("a", 1_000_000, 64, access=AccessSpec("zipf", 1.05))
    wl = PlanWorkload((t,), 1024)
    topo = topology(1, 2, 8.0)
    plain = CostModel(wl, topo)
    curve = CostModel(wl, topo, {"a": (np.array([0.0, 1.0]), np.array([1.0, 0.0]))})
    assert curve.miss_rate(t, 0.2) == 0.8 and plain.miss_rate(t, 0.2) < 0.8
    tw = ShardingType.TABLE_WISE
    hbm = plain.shard_cost(t, tw, t.rows, t.dim, "hbm").total
    cached = plain.shard_cost(t, tw, t.rows, t.dim, "ddr", 0.2).total
    uvm = plain.shard_cost(t, tw, t.rows, t.dim, "ddr").total
    assert hbm < cached < uvm
