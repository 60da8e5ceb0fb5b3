"""TorchRec side by side: its planner on the equivalent topology, its estimators on our plans, conversions.

- `torchrec_topology`: our Topology as TorchRec's (bandwidths in bytes/ms, per-rank capacities).
- `run_torchrec_planner`: `EmbeddingShardingPlanner` over a meta-device EmbeddingBagCollection with each table's
  pooling factor, restricted to the sharding types and kernels we model; its plan converted to ours.
- `to_torchrec_plan` / `to_constraints`: our plan as a TorchRec `ShardingPlan` (for DistributedModelParallel) and
  as `ParameterConstraints`; `from_torchrec_plan` converts back.
- `torchrec_estimate`: TorchRec's `EmbeddingPerfEstimator` and `EmbeddingStorageEstimator` applied to our shards
  (via sharding options enumerated with our type, kernel and column split), rated as TorchRec's planner rates
  (max over ranks of summed shard perf, in ms).
"""
from __future__ import annotations

import logging
import warnings
from typing import Any

import torch

from sharding.plan import Shard, ShardingPlan, ShardingType, TablePlan
from sharding.topology import Topology
from sharding.workload import PlanError, PlanWorkload

__all__ = ["torchrec_topology", "embedding_module", "to_constraints", "run_torchrec_planner", "from_torchrec_plan",
           "to_torchrec_plan", "torchrec_estimate", "kernel_of"]

_TYPES = [s.value for s in ShardingType]
_DTYPES = {"fp32": "FP32", "fp16": "FP16", "bf16": "BF16", "int8": "INT8", "int4": "INT4"}
for _name in ("torchrec", "torchrec.distributed", "torchrec.distributed.planner"):
    logging.getLogger(_name).setLevel(logging.ERROR)


def torchrec_topology(topo: Topology) -> Any:
    from torchrec.distributed.planner.types import (
        HardwareConfig,
        KernelConfig,
        TopologyFactory,
        TrainerConfig,
    )
    ms = 1e-3  # our bandwidths are bytes/s, TorchRec's bytes/ms
    slow = topo.tiers[1] if len(topo.tiers) > 1 else topo.tiers[0]
    cuda = topo.device == "cuda"
    hw = HardwareConfig(hbm_cap_bytes=int(topo.fast.capacity) if cuda else 0,
                        ddr_cap_bytes=int(slow.capacity if cuda else topo.fast.capacity), ssd_cap_bytes=0,
                        intra_host_bw=topo.intra_host.bandwidth * ms, inter_host_bw=topo.inter_host.bandwidth * ms,
                        hbm_mem_bw=topo.fast.bandwidth * ms, ddr_mem_bw=None if cuda else topo.fast.bandwidth * ms,
                        hbm_to_ddr_mem_bw=slow.bandwidth * ms)  # ddr_mem_bw: CPU kernels only (TorchRec default)
    trainer = TrainerConfig(world_size=topo.world_size, local_world_size=topo.ranks_per_host)
    kernel = KernelConfig(compute_device=topo.device, bwd_compute_multiplier=topo.bwd_compute_multiplier,
                          use_hardware_based_bandwidth=True)
    return TopologyFactory.create_topology(trainer, hw, kernel)


def embedding_module(workload: PlanWorkload) -> torch.nn.Module:
    """A meta-device EmbeddingBagCollection of the workload's tables (no memory allocated)."""
    from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
    from torchrec.optim import RowWiseAdagrad

    cfgs = [EmbeddingBagConfig(name=t.name, embedding_dim=t.dim, num_embeddings=t.rows, feature_names=[t.name],
                               data_type=getattr(DataType, _DTYPES[t.dtype])) for t in workload.tables]
    ebc = EmbeddingBagCollection(tables=cfgs, device=torch.device("meta"))
    if workload.train:
        opt = {"rowwise_adagrad": RowWiseAdagrad, "sgd": torch.optim.SGD, "adam": torch.optim.Adam,
               "adagrad": torch.optim.Adagrad}[workload.optimizer]
        for p in ebc.parameters():
            p._optimizer_classes = [opt]  # what TorchRec's storage estimator reads for optimizer state
    return ebc


def kernel_of(st: ShardingType, s: Shard, topo: Topology) -> str:
    if st == ShardingType.DATA_PARALLEL:
        return "dense"
    if s.tier == topo.fast.name:
        return "fused"
    return "fused_uvm_caching" if s.cache_fraction > 0 else "fused_uvm"


def to_constraints(workload: PlanWorkload, topo: Topology, plan: ShardingPlan | None = None) -> dict[str, Any]:
    """Per-table ParameterConstraints: pooling factor always; with a plan, its sharding type, kernel, column
    split and cache load factor (TorchRec constraints cannot pin ranks: use `to_torchrec_plan` for that)."""
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.types import CacheParams

    out = {}
    for t in workload.tables:
        if plan is None:
            kernels = ["fused", "dense"] + (["fused_uvm", "fused_uvm_caching"] if len(topo.tiers) > 1
                                            and topo.device == "cuda" else [])
            out[t.name] = ParameterConstraints(sharding_types=list(_TYPES), compute_kernels=kernels,
                                               pooling_factors=[t.pooling.expected])
            continue
        tp = plan.tables[t.name]
        s0 = tp.shards[0]
        out[t.name] = ParameterConstraints(
            sharding_types=[tp.sharding_type.value], compute_kernels=[kernel_of(tp.sharding_type, s0, topo)],
            pooling_factors=[t.pooling.expected],
            min_partition=s0.cols if tp.sharding_type == ShardingType.COLUMN_WISE else None,
            cache_params=CacheParams(load_factor=s0.cache_fraction) if s0.cache_fraction > 0 else None)
    return out


def _sharders(workload: PlanWorkload) -> list[Any]:
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    return [EmbeddingBagCollectionSharder()]


def _reservation(topo: Topology, workload: PlanWorkload) -> Any:
    """TorchRec's `FixedPercentageStorageReservation(reserved_fraction)` less our `reserved_bytes` and input
    reservation (`Topology.reserve_inputs`), so TorchRec's planner has exactly the HBM ours has. For
    `torchrec_default` (and `Topology.from_torchrec`) this is what its default `HeuristicalStorageReservation(0.15)`
    leaves for a model of embedding tables alone."""
    from torchrec.distributed.planner.storage_reservations import FixedPercentageStorageReservation

    reserved = topo.reserve_inputs(workload.ids_per_batch)
    extra = int(reserved.reserved_bytes)

    class Reservation(FixedPercentageStorageReservation):
        def reserve(self, *args: Any, **kwargs: Any) -> Any:
            out = super().reserve(*args, **kwargs)
            for d in out.devices:
                d.storage.hbm = max(0, d.storage.hbm - extra) if topo.device == "cuda" else d.storage.hbm
                if topo.device == "cpu":
                    d.storage.ddr = max(0, d.storage.ddr - extra)
            self._last_reserved_topology = out
            return out

    return Reservation(topo.reserved_fraction)


def run_torchrec_planner(workload: PlanWorkload, topo: Topology, timeout_s: int | None = None) -> ShardingPlan:
    """TorchRec's own planner (default proposers and partitioner, the same reservation as ours: `_reservation`)."""
    from torchrec.distributed.planner import EmbeddingShardingPlanner
    from torchrec.distributed.planner.types import PlannerError

    trec_topo = torchrec_topology(topo)
    planner = EmbeddingShardingPlanner(
        topology=trec_topo, batch_size=workload.batch_size, constraints=to_constraints(workload, topo),
        storage_reservation=_reservation(topo, workload), debug=False, timeout_seconds=timeout_s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            trec_plan = planner.plan(embedding_module(workload), _sharders(workload))
        except PlannerError as e:
            raise PlanError(f"TorchRec planner found no plan: {str(e).splitlines()[0][:300]}") from None
    plan = from_torchrec_plan(trec_plan, workload, topo)
    plan.optimizer = "torchrec"
    return plan


def from_torchrec_plan(trec_plan: Any, workload: PlanWorkload, topo: Topology) -> ShardingPlan:
    """TorchRec ShardingPlan (one EmbeddingBagCollection) -> ours."""
    params: dict[str, Any] = {}
    for module_plan in trec_plan.plan.values():
        params.update(dict(module_plan))
    tables = {}
    for t in workload.tables:
        if t.name not in params:
            raise PlanError(f"TorchRec plan misses table {t.name!r}")
        ps = params[t.name]
        st = ShardingType(ps.sharding_type)
        kernel = ps.compute_kernel
        tier = topo.fast.name if kernel in ("fused", "dense") else topo.tiers[min(1, len(topo.tiers) - 1)].name
        cf = 0.0
        if kernel == "fused_uvm_caching":
            cf = ps.cache_params.load_factor if ps.cache_params and ps.cache_params.load_factor else 0.2
        if st == ShardingType.DATA_PARALLEL:
            shards = tuple(Shard(r, 0, t.rows, 0, t.dim, tier, cf) for r in range(topo.world_size))
        else:
            shards = tuple(Shard(m.placement.rank(), m.shard_offsets[0], m.shard_offsets[0] + m.shard_sizes[0],
                                 m.shard_offsets[1], m.shard_offsets[1] + m.shard_sizes[1], tier, cf)
                           for m in ps.sharding_spec.shards)
        tables[t.name] = TablePlan(t.name, st, shards)
    return ShardingPlan(topo.world_size, tables)


def to_torchrec_plan(plan: ShardingPlan, workload: PlanWorkload, topo: Topology, module_path: str = "") -> Any:
    """Our plan as a TorchRec ShardingPlan for an EmbeddingBagCollection at `module_path`."""
    from torchrec.distributed.sharding_plan import placement
    from torchrec.distributed.types import (
        CacheParams,
        EmbeddingModuleShardingPlan,
        EnumerableShardingSpec,
        ParameterSharding,
        ShardMetadata,
    )
    from torchrec.distributed.types import ShardingPlan as TrecPlan

    module_plan = EmbeddingModuleShardingPlan()
    for t in workload.tables:
        tp = plan.tables[t.name]
        s0 = tp.shards[0]
        spec = None
        if tp.sharding_type != ShardingType.DATA_PARALLEL:
            spec = EnumerableShardingSpec([
                ShardMetadata(shard_sizes=[s.rows, s.cols], shard_offsets=[s.row_start, s.col_start],
                              placement=placement(topo.device, s.rank, topo.ranks_per_host)) for s in tp.shards])
        module_plan[t.name] = ParameterSharding(
            sharding_type=tp.sharding_type.value, compute_kernel=kernel_of(tp.sharding_type, s0, topo),
            ranks=[s.rank for s in tp.shards], sharding_spec=spec,
            cache_params=CacheParams(load_factor=s0.cache_fraction) if s0.cache_fraction > 0 else None)
    return TrecPlan({module_path: module_plan})


def torchrec_estimate(plan: ShardingPlan, workload: PlanWorkload, topo: Topology) -> dict[str, Any]:
    """TorchRec's perf (ms) and storage (bytes) estimates of our plan, per rank and as its planner rates."""
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator

    trec_topo = torchrec_topology(topo)
    enum = EmbeddingEnumerator(topology=trec_topo, batch_size=workload.batch_size,
                               constraints=to_constraints(workload, topo, plan))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        options = enum.enumerate(embedding_module(workload), _sharders(workload))
    perf = [0.0] * topo.world_size
    hbm = [0] * topo.world_size
    ddr = [0] * topo.world_size
    for so in options:
        ours = plan.tables[so.name].shards
        if len(so.shards) != len(ours):
            raise PlanError(f"table {so.name!r}: TorchRec builds {len(so.shards)} {so.sharding_type} shards, the "
                            f"plan has {len(ours)} (shard layouts must follow TorchRec's)")
        for trec_shard, s in zip(sorted(so.shards, key=lambda x: (x.offset[1], x.offset[0])), ours, strict=False):
            perf[s.rank] += trec_shard.perf.total
            hbm[s.rank] += trec_shard.storage.hbm
            ddr[s.rank] += trec_shard.storage.ddr
    return {"perf_ms": max(perf), "perf_ms_per_rank": perf, "hbm_bytes_per_rank": hbm, "ddr_bytes_per_rank": ddr,
            "method": "TorchRec 1.8 EmbeddingPerfEstimator + EmbeddingStorageEstimator on our shards, summed per "
                      "rank; rating = max over ranks of Perf.total (ms), as NoopPerfModel rates"}
