"""The model a distributed run shards: TorchRec modules built from a workload, sharded by our plan through
`DistributedModelParallel`, with the same initial weights on every rank as the unsharded module has.

- embedding: an `EmbeddingBagCollection` of the workload's tables; training loss = mean of squared outputs.
- dlrm: TorchRec's `DLRM` (bottom MLP, the collection, dot interaction, top MLP); loss = BCE on the labels.
Sharded tables train with FBGEMM's fused optimizer (update inside the backward); dense parameters (MLPs,
data-parallel tables) are all-reduced by DDP inside the backward and stepped by a separate optimizer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from embedding.backends import init_weights
from embedding.batch import Batch
from embedding.spec import WorkloadSpec
from sharding.plan import ShardingPlan
from sharding.topology import Topology
from sharding.torchrec_adapter import to_torchrec_plan
from sharding.workload import PlanWorkload

__all__ = ["Inputs", "build_module", "reference_state", "shard_module", "load_state", "make_optimizer",
           "make_inputs", "loss_of", "compare_state", "EBC_PATH"]

EBC_PATH = {"embedding": "", "dlrm": "sparse_arch.embedding_bag_collection"}


@dataclass
class Inputs:
    """One rank's batch as TorchRec takes it."""

    kjt: Any  # KeyedJaggedTensor (keys = tables), batch_size bags per key
    dense: torch.Tensor  # (B, num_dense)
    labels: torch.Tensor  # (B,)
    samples: int


def _ebc(spec: WorkloadSpec, device: torch.device) -> nn.Module:
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig

    cfgs = [EmbeddingBagConfig(name=t.name, embedding_dim=t.dim, num_embeddings=t.rows, feature_names=[t.name])
            for t in spec.tables]
    return EmbeddingBagCollection(tables=cfgs, device=device)


def build_module(spec: WorkloadSpec, model: str, device: torch.device) -> nn.Module:
    """The unsharded module (embedding tables on `device`, e.g. meta for sharding; dense parts seeded on CPU)."""
    ebc = _ebc(spec, device)
    if model == "embedding":
        return ebc
    from torchrec.models.dlrm import DLRM

    dims = {t.dim for t in spec.tables}
    if dims != {spec.dense.bottom_mlp[-1]}:
        raise ValueError(f"dist.model=dlrm needs every table dim equal to the bottom MLP's last width "
                         f"{spec.dense.bottom_mlp[-1]}; workload {spec.name!r} has dims {sorted(dims)}")
    torch.manual_seed(spec.seed)
    return DLRM(ebc, spec.dense.num_dense_features, list(spec.dense.bottom_mlp), list(spec.dense.top_mlp),
                dense_device=torch.device("cpu"))


def reference_state(spec: WorkloadSpec, model: str) -> dict[str, torch.Tensor]:
    """Initial weights every rank loads: tables from `embedding.backends.init_weights` (as every local backend
    uses), dense layers from a CPU module seeded with the workload seed."""
    prefix = EBC_PATH[model] + "." if EBC_PATH[model] else ""
    state: dict[str, torch.Tensor] = {}
    if model == "dlrm":
        state.update(_dense_state(spec))
    for t, w in zip(spec.tables, init_weights(spec), strict=True):
        state[f"{prefix}embedding_bags.{t.name}.weight"] = w
    return state


def _dense_state(spec: WorkloadSpec) -> dict[str, torch.Tensor]:
    from torchrec.models.dlrm import DLRM

    torch.manual_seed(spec.seed)
    m = DLRM(_ebc(spec, torch.device("meta")), spec.dense.num_dense_features, list(spec.dense.bottom_mlp),
             list(spec.dense.top_mlp), dense_device=torch.device("cpu"))
    return {k: v.detach().clone() for k, v in m.state_dict().items() if v.device.type != "meta"}


def shard_module(module: nn.Module, plan: ShardingPlan, workload: PlanWorkload, topo: Topology, model: str,
                 device: torch.device, optimizer: str, learning_rate: float, pg: Any) -> nn.Module:
    """`DistributedModelParallel` with our plan converted by `sharding.torchrec_adapter.to_torchrec_plan`;
    sharded tables get FBGEMM's fused optimizer (EXACT_ROWWISE_ADAGRAD or EXACT_SGD)."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.types import ShardingEnv

    opt = {"rowwise_adagrad": EmbOptimType.EXACT_ROWWISE_ADAGRAD, "sgd": EmbOptimType.EXACT_SGD}[optimizer]
    fused = {"optimizer": opt, "learning_rate": learning_rate}
    if optimizer == "rowwise_adagrad":
        fused["eps"] = 1e-8
    sharder = EmbeddingBagCollectionSharder(fused_params=fused)
    trec_plan = to_torchrec_plan(plan, workload, topo, module_path=EBC_PATH[model])
    return DistributedModelParallel(module, env=ShardingEnv.from_process_group(pg), device=device,
                                    plan=trec_plan, sharders=[sharder], init_data_parallel=True)


def _local_pieces(value: Any) -> list[tuple[torch.Tensor, tuple[int, ...]]]:
    """(tensor, offsets) of what this rank holds of a state entry: local shards, or the whole replica."""
    if hasattr(value, "local_shards"):
        return [(s.tensor, tuple(s.metadata.shard_offsets)) for s in value.local_shards()]
    if hasattr(value, "to_local") and hasattr(value, "placements"):
        raise TypeError("DTensor state entries are not supported here")
    return [(value, (0,) * value.dim())]


def _slice(full: torch.Tensor, offsets: tuple[int, ...], shape: torch.Size) -> torch.Tensor:
    return full[tuple(slice(o, o + n) for o, n in zip(offsets, shape, strict=True))]


@torch.no_grad()
def load_state(dmp: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy full tensors into this rank's shards and replicas (DMP does not copy a real module's weights)."""
    target = dmp.state_dict()
    missing = [k for k in target if k not in state and "momentum" not in k and "state" not in k]
    if missing:
        raise KeyError(f"no initial weights for {missing[:3]}")
    for key, value in target.items():
        if key not in state:
            continue
        for tensor, offsets in _local_pieces(value):
            tensor.detach().copy_(_slice(state[key], offsets, tensor.shape).to(tensor.device))


@torch.no_grad()
def compare_state(dmp: nn.Module, ref: dict[str, torch.Tensor]) -> dict[str, float]:
    """Max |sharded − reference| per state entry, over the pieces this rank holds."""
    out = {}
    for key, value in dmp.state_dict().items():
        if key not in ref:
            continue
        diff = 0.0
        for tensor, offsets in _local_pieces(value):
            expect = _slice(ref[key], offsets, tensor.shape)
            diff = max(diff, float((tensor.detach().cpu().float() - expect.float()).abs().max()))
        out[key] = diff
    return out


def make_optimizer(dmp: nn.Module, optimizer: str, learning_rate: float) -> Any:
    """Dense optimizer over what the fused one does not update: data-parallel tables with the embedding
    optimizer (TorchRec's RowWiseAdagrad or SGD), DLRM's MLPs with SGD."""
    from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter
    from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

    params = dict(in_backward_optimizer_filter(dmp.named_parameters()))
    tables = {k: v for k, v in params.items() if ".embedding_bags." in f".{k}"}
    dense = {k: v for k, v in params.items() if k not in tables}
    opts: list[Any] = [dmp.fused_optimizer]
    if tables:
        table_opt = (lambda p: RowWiseAdagrad(p, lr=learning_rate, eps=1e-8)) if optimizer == "rowwise_adagrad" \
            else (lambda p: torch.optim.SGD(p, lr=learning_rate))
        opts.append(KeyedOptimizerWrapper(tables, table_opt))
    if dense:
        opts.append(KeyedOptimizerWrapper(dense, lambda p: torch.optim.SGD(p, lr=learning_rate)))
    return CombinedOptimizer(opts)


def make_inputs(spec: WorkloadSpec, batch: Batch, device: torch.device) -> Inputs:
    from torchrec import KeyedJaggedTensor

    kjt = KeyedJaggedTensor(keys=[t.name for t in spec.tables], values=torch.from_numpy(batch.indices),
                            lengths=torch.from_numpy(batch.lengths.ravel()))
    dense = torch.from_numpy(batch.dense) if batch.dense is not None else torch.zeros(batch.batch_size, 1)
    labels = torch.from_numpy(batch.labels) if batch.labels is not None else torch.zeros(batch.batch_size)
    return Inputs(kjt.to(device), dense.to(device), labels.to(device), batch.batch_size)


def forward(module: nn.Module, model: str, x: Inputs) -> Any:
    """KeyedTensor (embedding) or (B,) logits (dlrm); waits on TorchRec's lazy awaitable."""
    if model == "embedding":
        out = module(x.kjt)
        return out.wait() if hasattr(out, "wait") else out
    return module(x.dense, x.kjt).squeeze(-1)


def loss_of(out: Any, model: str, x: Inputs) -> torch.Tensor:
    if model == "embedding":
        return out.values().square().mean()
    return nn.functional.binary_cross_entropy_with_logits(out, x.labels)
