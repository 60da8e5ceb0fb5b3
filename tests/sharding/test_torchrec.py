"""TorchRec side: conversions round-trip, its planner's plan converts to a valid plan of ours, its estimator
rates ours. Planner runs are kept tiny (it is slow)."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from embedding.spec import PoolingSpec, TableSpec
from sharding import CostModel, PlanError, PlanWorkload, optimize, validate_plan
from sharding.torchrec_adapter import (
    from_torchrec_plan,
    run_torchrec_planner,
    to_constraints,
    to_torchrec_plan,
    torchrec_estimate,
)
from tests.sharding.conftest import tables, topologies, topology


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(max_count=10), topologies())
def test_torchrec_conversion_round_trip(ts, topo) -> None:
    wl = PlanWorkload(ts, 256)
    try:
        plan = optimize(wl, topo)
    except PlanError:
        return
    back = from_torchrec_plan(to_torchrec_plan(plan, wl, topo), wl, topo)
    assert back.tables == plan.tables
    cons = to_constraints(wl, topo, plan)
    assert all(cons[n].sharding_types == [tp.sharding_type.value] for n, tp in plan.tables.items())
    est = torchrec_estimate(plan, wl, topo)
    assert est["perf_ms"] == max(est["perf_ms_per_rank"]) > 0


def test_torchrec_planner_plan_is_valid_and_not_better_than_ours() -> None:
    ts = tuple(TableSpec(f"t{i}", r, d, pooling=PoolingSpec("fixed", p)) for i, (r, d, p) in
               enumerate([(1_000_000, 64, 4), (50_000, 128, 20), (300, 32, 1), (2_000_000, 16, 2)]))
    wl = PlanWorkload(ts, 512)
    topo = topology(1, 2, 8.0)
    trec = run_torchrec_planner(wl, topo)
    cost = CostModel(wl, topo)
    validate_plan(trec, wl, topo, cost)
    ours = optimize(wl, topo)
    assert cost.plan_cost(ours) <= cost.plan_cost(trec) * (1 + 1e-9)
    assert torchrec_estimate(ours, wl, topo)["perf_ms"] > 0


def test_converted_plan_passes_torchrec_plan_checks() -> None:
    """What DistributedModelParallel reads: every module planned, ranks in range, each table's sharding type and
    kernel among those the EmbeddingBagCollection sharder offers, shards tiling the table (torch's own check),
    and TorchRec's own plan types (no processes are launched)."""
    import torch
    from torch.distributed._shard.sharding_spec._internals import (
        check_tensor,
        validate_non_overlapping_shards_metadata,
    )
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner.planners import (
        validate_modules_inclusion_in_sharding_plan,
        validate_rank_assignment,
    )
    from torchrec.distributed.types import EnumerableShardingSpec, ParameterSharding, ShardingPlan

    from sharding.torchrec_adapter import embedding_module, torchrec_topology

    ts = tuple(TableSpec(f"t{i}", r, d, pooling=PoolingSpec("fixed", p)) for i, (r, d, p) in
               enumerate([(40_000_000, 128, 1), (50_000, 128, 20), (300, 32, 1), (2_000_000, 16, 2)]))
    wl = PlanWorkload(ts, 512)
    topo = topology(2, 2, 80.0)
    ours = optimize(wl, topo)
    trec_plan = to_torchrec_plan(ours, wl, topo)
    assert isinstance(trec_plan, ShardingPlan)
    module, sharder = embedding_module(wl), EmbeddingBagCollectionSharder()
    validate_modules_inclusion_in_sharding_plan(trec_plan, module, [sharder])
    validate_rank_assignment(trec_plan, torchrec_topology(topo))
    params = dict(module.named_parameters())
    for name, ps in trec_plan.plan[""].items():
        assert isinstance(ps, ParameterSharding)
        assert ps.sharding_spec is None or isinstance(ps.sharding_spec, EnumerableShardingSpec)
        assert ps.sharding_type in sharder.sharding_types("cuda")
        assert ps.compute_kernel in sharder.compute_kernels(ps.sharding_type, "cuda")
        if ps.sharding_spec is not None:
            shards = ps.sharding_spec.shards
            validate_non_overlapping_shards_metadata(shards)
            check_tensor(shards, torch.Size(params[f"embedding_bags.{name}.weight"].shape))
