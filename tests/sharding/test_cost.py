"""Cost-model pieces: the Zipf hot-set miss rate, measured miss curves, slow tiers cost more."""
from __future__ import annotations

import numpy as np

from embedding.spec import AccessSpec, TableSpec
from sharding import CostModel, PlanWorkload, zipf_miss_rate
from sharding.plan import ShardingPlan, ShardingType
from tests.sharding.conftest import topology


def test_zipf_miss_rate_falls_with_cache_and_skew() -> None:
    rates = [zipf_miss_rate(10_000_000, 1.05, f) for f in (0.0, 0.01, 0.1, 0.5, 1.0)]
    assert rates[0] == 1.0 and rates[-1] == 0.0 and all(a > b for a, b in zip(rates, rates[1:], strict=False))
    assert zipf_miss_rate(10_000_000, 1.2, 0.01) < zipf_miss_rate(10_000_000, 0.9, 0.01)
    exact = 1 - np.sum(np.arange(1, 50_001) ** -1.05) / np.sum(np.arange(1, 5_000_001) ** -1.05)
    assert abs(zipf_miss_rate(5_000_000, 1.05, 0.01) - exact) < 1e-4



def test_harmonic_memo_gives_the_bits_of_the_sum_it_replaces() -> None:
    """`_harmonic` memoises its exact head sum (`_head_sum`): the same float as summing it afresh, whatever was
    asked before (k below, at and above the 1,000-term head; int and float exponents)."""
    import math

    from sharding.cost import _harmonic, _head_sum

    def fresh(k: float, a: float) -> float:
        head = min(int(k), 1000)
        s = float(np.sum(np.arange(1, head + 1, dtype=np.float64) ** -a)) if head else 0.0
        if k <= 1000:
            return s
        integral = math.log(k / 1000.0) if abs(a - 1) < 1e-9 else (k ** (1 - a) - 1000.0 ** (1 - a)) / (1 - a)
        return s + integral + (k ** -a - 1000.0 ** -a) / 2

    _head_sum.cache_clear()
    _harmonic.cache_clear()
    cases = [(k, a) for a in (0.0, 0.6, 1, 1.0, 1.05, 1.3) for k in (0.5, 1.0, 7, 999.5, 1000, 1000.5, 4096.0, 1e7)]
    for k, a in cases + cases[::-1]:
        assert _harmonic(k, a).hex() == fresh(k, a).hex(), (k, a)

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


def _two_table_plan(on_rank_zero: bool) -> tuple[CostModel, ShardingPlan]:
    from dataclasses import replace

    from sharding.layouts import table_plan

    ts = (TableSpec("a", 100_000, 64), TableSpec("b", 50_000, 64))
    topo = replace(topology(1, 2, 8.0), stage_overhead={"base": {"input_dist": 1e-3}, "TW": {
        "input_dist": 2e-3, "lookup": 3e-4, "output_dist": 5e-4, "output_dist_bwd": 4e-4}})
    tw = ShardingType.TABLE_WISE
    plan = ShardingPlan(2, {t.name: table_plan(t, tw, [0 if on_rank_zero else i], "hbm")
                            for i, t in enumerate(ts)})
    return CostModel(PlanWorkload(ts, 512), topo), plan


def test_a_rank_without_shards_still_pays_every_collective_of_the_group() -> None:
    cost, plan = _two_table_plan(on_rank_zero=True)
    busy, idle = cost.breakdown(plan)
    assert idle.shards == 0 and idle.fwd_compute == 0 and idle.overhead == 0
    # the collectives: same bytes time and fixed cost on both ranks (base + TW input, output and backward stages)
    assert idle.comms == busy.comms > 0 and abs(idle.latency - (1e-3 + 2e-3 + 5e-4 + 4e-4)) < 1e-12
    assert busy.overhead == 3e-4  # the TW lookup's fixed cost, on the rank that runs the kernel only
    step = cost.plan_cost(plan)
    assert abs(busy.elapsed - step) < 1e-12 and abs(idle.elapsed - step) < 1e-12 and idle.wait > 0


def test_fixed_costs_come_once_per_group_and_collectives_from_the_busiest_rank() -> None:
    one, plan_one = _two_table_plan(on_rank_zero=True)
    spread, plan_spread = _two_table_plan(on_rank_zero=False)
    a, b = spread.breakdown(plan_spread)
    assert a.latency == one.breakdown(plan_one)[0].latency  # one TW group either way
    assert a.overhead == b.overhead == 3e-4  # each rank runs one TW kernel call
    # spreading the tables shrinks the busiest rank's lookups and messages, so the step
    assert spread.plan_cost(plan_spread) < one.plan_cost(plan_one)


def test_calibrated_fields_round_trip_and_bad_ones_are_named() -> None:
    from dataclasses import replace

    import pytest

    from sharding.topology import Link, Topology, TopologyError

    topo = replace(topology(1, 2, 8.0), collectives={"all_to_all": Link(2e9, 1.5e-4, "fit")},
                   stage_overhead={"TW": {"input_dist": 1e-3}}, optimizer_bandwidth=1.5e9)
    back = Topology.from_dict(topo.to_dict())
    assert back == topo and back.collective("all_to_all", False).latency == 1.5e-4
    assert back.collective("all_gather", False) == topo.intra_host  # not fitted: the link's figures
    with pytest.raises(TopologyError, match="unknown collective ops"):
        replace(topo, collectives={"broadcast": Link(1e9)})
    with pytest.raises(TopologyError, match="stages"):
        replace(topo, stage_overhead={"TW": {"lookups": 1e-3}})


def test_fitted_stage_bandwidths_price_their_stages_and_round_trip() -> None:
    from dataclasses import replace

    import pytest

    from sharding.layouts import table_plan
    from sharding.topology import Topology, TopologyError

    t = TableSpec("a", 100_000, 64)
    wl = PlanWorkload((t,), 512)
    topo = replace(topology(1, 2, 8.0), stage_overhead={"TW": {"input_dist": 1e-3}})
    plan = ShardingPlan(2, {"a": table_plan(t, ShardingType.TABLE_WISE, [0], "hbm")})
    unit = replace(topo, stage_bandwidth={"TW": {s: 1.0 for s in ("lookup", "lookup_bwd", "input_dist",
                                                                   "output_dist", "output_dist_bwd")}})
    nbytes = CostModel(wl, unit).stage_seconds(plan)["TW"]  # bandwidth 1: the stage's modelled bytes
    ids = 2 * 512 * t.pooling.expected
    assert nbytes["input_dist"] == pytest.approx((ids + 2 * 512) * 8 / 2)  # half of it leaves the rank
    assert nbytes["lookup"] == nbytes["lookup_bwd"] > 0 and nbytes["output_dist"] == nbytes["output_dist_bwd"]
    fitted = replace(topo, stage_bandwidth={"TW": {"input_dist": 1e8, "lookup": 2e9}})
    plain, slow = CostModel(wl, topo), CostModel(wl, fitted)
    s0, s1 = plain.stage_seconds(plan)["TW"], slow.stage_seconds(plan)["TW"]
    assert s1["input_dist"] == pytest.approx(nbytes["input_dist"] / 1e8)
    assert s1["lookup"] == pytest.approx(nbytes["lookup"] / 2e9)
    assert s1["output_dist"] == s0["output_dist"]  # not fitted: the op's bandwidth
    assert slow.plan_cost(plan) - plain.plan_cost(plan) == pytest.approx(
        sum(s1[k] - s0[k] for k in ("input_dist", "lookup", "lookup_bwd")), rel=1e-9)  # bwd: multiplier × fwd
    assert Topology.from_dict(fitted.to_dict()) == fitted
    with pytest.raises(TopologyError, match="stage bandwidths must be > 0"):
        replace(topo, stage_bandwidth={"TW": {"lookup": 0.0}})
    with pytest.raises(TopologyError, match="stages"):
        replace(topo, stage_bandwidth={"TW": {"gather": 1e9}})


def _one_table(rows: int, access: AccessSpec, weights: dict, llc: float = 32 * 2**20) -> tuple[CostModel, TableSpec]:
    from dataclasses import replace

    t = TableSpec("a", rows, 64, access=access)
    topo = replace(topology(1, 2, 8.0), llc_bytes=llc, lookup_weights=weights)
    return CostModel(PlanWorkload((t,), 512), topo), t


def test_an_id_weight_adds_the_same_bytes_per_id_whatever_the_table() -> None:
    from dataclasses import replace

    import pytest

    tw, uni = ShardingType.TABLE_WISE, AccessSpec("uniform")
    plain, t = _one_table(100_000, uni, {})
    ided, _ = _one_table(100_000, uni, {"lookup": {"id_bytes": 500.0, "dram": 0.0}})
    unit = {s: 1.0 for s in ("lookup", "lookup_bwd")}
    for c in (plain, ided):  # bandwidth 1: the modelled bytes
        c.topology = replace(c.topology, stage_bandwidth={"TW": unit})
    ids = 2 * 512 * t.pooling.expected
    extra = ided.shard_cost(t, tw, t.rows, t.dim, "hbm").fwd_compute - plain.shard_cost(t, tw, t.rows, t.dim,
                                                                                          "hbm").fwd_compute
    assert extra == pytest.approx(500.0 * ids)
    # the backward has no weight of its own here: unchanged
    assert ided.shard_cost(t, tw, t.rows, t.dim, "hbm").bwd_compute == pytest.approx(
        plain.shard_cost(t, tw, t.rows, t.dim, "hbm").bwd_compute)


def test_a_dram_weight_prices_tables_beyond_the_cache_and_spares_small_or_hot_ones() -> None:
    tw, w = ShardingType.TABLE_WISE, {"lookup": {"id_bytes": 0.0, "dram": 3.0}}
    small, ts = _one_table(10_000, AccessSpec("uniform"), w)  # 2.5 MB: in a 32 MiB LLC
    big, tb = _one_table(10_000_000, AccessSpec("uniform"), w)
    hot, th = _one_table(10_000_000, AccessSpec("zipf", 1.2), w)
    assert small.llc_miss(ts) == 0.0 and 0.9 < big.llc_miss(tb) < 1.0 and hot.llc_miss(th) < big.llc_miss(tb)
    nodram, _ = _one_table(10_000_000, AccessSpec("uniform"), {})
    assert nodram.llc_miss(tb) == big.llc_miss(tb)  # the miss is the cache's; the weight prices it
    cost = {c: c.shard_cost(t, tw, t.rows, t.dim, "hbm").fwd_compute for c, t in ((big, tb), (hot, th),
                                                                                  (nodram, tb))}
    assert cost[big] > cost[hot] > cost[nodram]
    no_llc, _ = _one_table(10_000_000, AccessSpec("uniform"), w, llc=0.0)
    assert no_llc.llc_miss(tb) == 0.0


def test_lookup_weights_round_trip_and_bad_ones_are_named() -> None:
    from dataclasses import replace

    import pytest

    from sharding.topology import Topology, TopologyError

    topo = replace(topology(1, 2, 8.0), llc_bytes=2**25, lookup_weights={"lookup": {"id_bytes": 400.0,
                                                                                     "dram": 2.0}})
    assert Topology.from_dict(topo.to_dict()) == topo
    with pytest.raises(TopologyError, match="lookup_weights"):
        replace(topo, lookup_weights={"gather": {"id_bytes": 1.0}})
    with pytest.raises(TopologyError, match="lookup_weights"):
        replace(topo, lookup_weights={"lookup": {"id_bytes": -1.0}})


def test_stage_breakdown_splits_the_step_into_what_the_harness_times() -> None:
    import pytest

    cost, plan = _two_table_plan(on_rank_zero=False)
    parts = cost.stage_breakdown(plan)
    assert set(parts) == {"lookup", "lookup_bwd", "optimizer", "input_dist", "output_dist", "output_dist_bwd",
                          "outside"}
    busy = cost.breakdown(plan)[0]
    assert parts["lookup"] == pytest.approx(busy.fwd_compute + 3e-4)  # the TW lookup's fixed cost
    assert parts["input_dist"] >= 1e-3 + 2e-3  # base + TW fixed parts
    assert sum(parts.values()) == pytest.approx(cost.plan_cost(plan), rel=0.02)


def test_pricing_many_shards_at_once_gives_the_floats_of_pricing_them_one_by_one() -> None:
    """`CostModel.price_many` (numpy over shards) memoises the same ShardCost, message seconds and bytes, bit for bit,
    as `shard_cost` one shard at a time, and `TorchRecCostModel.price_many` its ShardCost: random tables, every option's shards, both modes, one rank, one host,
    several hosts, fitted stage bandwidths and collectives; empty row-wise shards too (more ranks than rows)."""
    from dataclasses import replace

    from embedding.spec import PoolingSpec
    from sharding.bounds import _option_shards
    from sharding.topology import Link
    from sharding.trec_cost import TorchRecCostModel

    rng = np.random.default_rng(7)
    tables = tuple(TableSpec(f"t{i}", int(rng.integers(1, 3_000_000)), int(rng.choice([4, 8, 16, 64, 128, 256, 512])),
                             str(rng.choice(["fp32", "fp16", "int8", "int4"])),
                             pooling=PoolingSpec("skewed", float(rng.uniform(1.0, 80.0))),
                             access=AccessSpec("zipf", float(rng.uniform(0.8, 1.2)))) for i in range(40))
    fitted = {"TW": {"lookup": 7e11, "lookup_bwd": 3e11, "output_dist": 9e10}, "RW": {"lookup": 5e11},
              "TWRW": {"input_dist": 4e10}, "DP": {"optimizer": 2e11, "lookup_bwd": 1e10}}
    topos = [topology(1, 1, 16.0), topology(1, 8, 16.0), topology(4, 8, 16.0), topology(2, 4, 16.0),
             replace(topology(3, 4, 16.0), stage_bandwidth=fitted, collectives={"all_to_all": Link(2e11, 5e-6)})]
    checked = 0
    for topo in topos:
        for mode in ("train", "inference"):
            wl = PlanWorkload(tables, int(rng.choice([512, 4096])), mode)
            many, one = CostModel(wl, topo), CostModel(wl, topo)
            keys = [(t, st, rows, cols, topo.fast.name, cf) for t in tables for st, shards in _option_shards(many, t)
                    for rows, cols, _ in shards for cf in (0.0, 0.5)]
            keys.append((tables[0], ShardingType.ROW_WISE, 0, tables[0].dim, topo.fast.name, 0.0))
            many.price_many(keys)
            for t, st, rows, cols, tier, cf in keys:
                assert ("c", t.name, st, rows, cols, tier, cf) in many._memo  # filled at once, not on demand
                assert many.shard_cost(t, st, rows, cols, tier, cf) == one.shard_cost(t, st, rows, cols, tier, cf)
                assert many.message_times(t, st, rows, cols) == one.message_times(t, st, rows, cols)
                assert ("m", t.name, st, rows, cols, tier, cf) in many._memo
                assert many.shard_memory(t, st, rows, cols, tier, cf) == one.shard_memory(t, st, rows, cols, tier, cf)
                checked += 1
            trec_many, trec_one = TorchRecCostModel(wl, topo), TorchRecCostModel(wl, topo)
            trec_many.price_many(keys)
            for t, st, rows, cols, tier, cf in keys:
                assert (t.name, st, cols, tier, cf) in trec_many._memo
                assert trec_many.shard_cost(t, st, rows, cols, tier, cf) == trec_one.shard_cost(t, st, rows, cols,
                                                                                                 tier, cf)
    assert checked > 2000
