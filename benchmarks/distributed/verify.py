"""Check a sharded module against the unsharded one on every rank: forward per feature, then one training step.

Gradient semantics of `DistributedModelParallel` the reference reproduces: every gradient is the mean over the
ranks of each rank's gradient (DDP averages dense layers and data-parallel tables; TorchRec's backward all-to-all
and all-gather divide by the world size, `torchrec.distributed.comm_ops` gradient division, on by default). The
reference runs every rank's batch through one unsharded module on each rank, then applies the same update rules (SGD; FBGEMM / TorchRec row-wise Adagrad: s += mean(g²) per row,
w −= lr·g / (√s + eps); a column-wise table keeps one accumulator per row per column shard, as TorchRec does).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from embedding.generate import WorkloadGenerator

from .case import Case
from .model import (
    Inputs,
    build_module,
    compare_state,
    forward,
    loss_of,
    make_inputs,
    make_optimizer,
    reference_state,
)

__all__ = ["verify_case", "VERIFY_MAX_BYTES"]

VERIFY_MAX_BYTES = 256 * 2**20


def _reduce_max(values: dict[str, float]) -> dict[str, float]:
    keys = sorted(values)
    t = torch.tensor([values[k] for k in keys], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return dict(zip(keys, t.tolist(), strict=True))


def verify_case(case: Case, dmp: nn.Module, device: torch.device, world: int) -> dict[str, dict[str, float]]:
    """Max |sharded − unsharded| over all ranks: {"forward": per feature (or "logits"), "update": per weight}.
    `dmp` must hold the initial weights; it is trained one step here (build a fresh one for timing)."""
    spec, model, d = case.spec, case.cfg.dist.model, case.cfg.dist
    if spec.total_bytes > VERIFY_MAX_BYTES:
        raise ValueError(f"dist.verify needs tables ≤ {VERIFY_MAX_BYTES >> 20} MiB (every rank holds the unsharded "
                         f"module); workload {spec.name!r} has {spec.total_bytes / 2**20:.0f} MiB: lower max_rows")
    rank = dist.get_rank()
    state = reference_state(spec, model)
    ref = build_module(spec, model, torch.device("cpu"))
    ref.load_state_dict(state)
    gen = WorkloadGenerator(spec)
    inputs = [make_inputs(spec, gen.batch(r * spec.num_batches), device) for r in range(world)]
    mine = inputs[rank]
    out = forward(dmp, model, mine)
    expect = forward(ref, model, _cpu(mine))
    if model == "embedding":
        got, want = out.to_dict(), expect.to_dict()
        fwd = {k: float((got[k].detach().cpu() - want[k].detach()).abs().max()) for k in want}
    else:
        fwd = {"logits": float((out.detach().cpu() - expect.detach()).abs().max())}
    result = {"forward": _reduce_max(fwd)}
    if not case.train:
        return result
    opt = make_optimizer(dmp, d.optimizer, d.learning_rate)
    loss_of(out, model, mine).backward()
    opt.step()
    for x in inputs:
        loss_of(forward(ref, model, _cpu(x)), model, x).backward()
    _reference_update(ref, case, world)
    result["update"] = _reduce_max(compare_state(dmp, {k: v.detach() for k, v in ref.state_dict().items()}))
    return result


def _cpu(x: Inputs) -> Inputs:
    return Inputs(x.kjt.to(torch.device("cpu")), x.dense.cpu(), x.labels.cpu(), x.samples)


@torch.no_grad()
def _reference_update(ref: nn.Module, case: Case, world: int) -> None:
    d = case.cfg.dist
    for name, p in ref.named_parameters():
        if p.grad is None:
            continue
        table = ".embedding_bags." in f".{name}"
        g = p.grad / world
        if table and d.optimizer == "rowwise_adagrad":
            tp = case.plan.tables[name.rsplit("embedding_bags.", 1)[1].removesuffix(".weight")]
            for c0, c1 in sorted({(sh.col_start, sh.col_end) for sh in tp.shards}):  # one block unless CW
                gb = g[:, c0:c1]
                s = gb.square().mean(dim=1, keepdim=True)
                p[:, c0:c1] -= d.learning_rate * gb / (s.sqrt() + 1e-8)
        else:
            p -= d.learning_rate * g

