"""Per-stage timing of the sharded EmbeddingBagCollection inside `DistributedModelParallel`, and the bytes each
collective moves, read from the tensors' shapes.

How the stages are timed (each rank, its own clock): the sharded collection's `forward` is replaced by the same
three calls TorchRec's `ShardedModule.forward` makes, run one after another with a clock read between them:
  input_dist   `input_dist(ctx, kjt).wait().wait()`: the lengths/splits and the ids all-to-all
  lookup       `compute(ctx, dist_input)`: the embedding kernels (FBGEMM TBE) on this rank's shards
  output_dist  `output_dist(ctx, embs).wait()`: pooled-embedding all-to-all (TW/CW), reduce-scatter (RW/TWRW)
In training, autograd hooks stamp the backward: when the gradient of the collection's output is ready (the dense
part's backward is done: `dense_backward`), when the gradients of the lookup outputs are ready (`output_dist_bwd`:
the reverse all-to-all / all-gather), and the end of `loss.backward()` (`lookup_bwd`: the TBE backward with the
fused optimizer update, DDP's all-reduce of dense and data-parallel gradients, and any dense work autograd runs
after the embedding gradients). `optimizer` is the separate step of what the fused optimizer does not update.
A collective's time includes waiting for the slowest peer: that wait is where imbalance shows. On CUDA each
boundary synchronises the device (the stages then no longer overlap); each region is also a torch profiler
`record_function("dlrmbench.<stage>")`.

Bytes (from shapes, per rank per step):
  input_dist_bytes   Σ over sharding groups of the received KJT: ids·8 + lengths·itemsize (+ weights)
  output_dist_bytes  Σ over non-DP groups of the lookup output sent: numel·4 (the same moves back in backward)
  allreduce_bytes    2·(W−1)/W · Σ bytes of DDP-reduced gradients (ring all-reduce, sent per rank)
The share a rank exchanges with itself is counted (it does not cross a link).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.autograd.profiler import record_function

__all__ = ["STAGES", "StageTimer", "find_sharded_ebc", "allreduce_bytes"]

STAGES = ("input_dist", "lookup", "output_dist", "dense_backward", "output_dist_bwd", "lookup_bwd", "optimizer")


def find_sharded_ebc(dmp: nn.Module) -> nn.Module:
    from torchrec.distributed.embeddingbag import ShardedEmbeddingBagCollection

    found = [m for m in dmp.modules() if isinstance(m, ShardedEmbeddingBagCollection)]
    if len(found) != 1:
        raise RuntimeError(f"expected one sharded EmbeddingBagCollection, found {len(found)}")
    return found[0]


def _nbytes(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()


def allreduce_bytes(dmp: nn.Module, world: int) -> float:
    """Bytes a rank sends in a ring all-reduce of the gradients DDP reduces (dense parameters, DP tables)."""
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    size = sum(_nbytes(p) for _, p in in_backward_optimizer_filter(dmp.named_parameters()) if p.requires_grad)
    return 2 * (world - 1) / world * size


class StageTimer:
    """Patches one sharded collection so each step's stages are timed; `mark`/`stop` bracket a step."""

    def __init__(self, sebc: nn.Module, device: torch.device, train: bool) -> None:
        self.sebc, self.device, self.train = sebc, device, train
        self.enabled = False
        self.steps: list[dict[str, float]] = []
        self.bytes: dict[str, float] = {"input_dist_bytes": 0.0, "output_dist_bytes": 0.0}
        self._cur: dict[str, float] = {}
        self._stamp: dict[str, float] = {}
        self._orig = sebc.forward
        sebc.forward = self._forward  # instance attribute: nn.Module.__call__ finds it first

    def _now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def _forward(self, features: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.enabled:
            return self._orig(features, *args, **kwargs)
        m = self.sebc
        ctx = m.create_context()
        t0 = self._now()
        with record_function("dlrmbench.input_dist"):
            dist_input = m.input_dist(ctx, features).wait().wait()
        t1 = self._now()
        with record_function("dlrmbench.lookup"):
            embs = m.compute(ctx, dist_input)
        t2 = self._now()
        with record_function("dlrmbench.output_dist"):
            out = m.output_dist(ctx, embs).wait()
        t3 = self._now()
        self._cur.update(input_dist=t1 - t0, lookup=t2 - t1, output_dist=t3 - t2)
        self.bytes["input_dist_bytes"] = float(sum(_nbytes(k.values()) + _nbytes(k.lengths())
                                                   + _nbytes(k.weights_or_none()) for k in dist_input))
        self.bytes["output_dist_bytes"] = float(sum(_nbytes(e) for e, st in zip(embs, m._sharding_types,
                                                                                 strict=True)
                                                    if st != "data_parallel"))
        if self.train and torch.is_grad_enabled():
            values = out.values()
            if values.requires_grad:
                values.register_hook(self._hook("values"))
            for e in embs:
                if isinstance(e, torch.Tensor) and e.requires_grad:
                    e.register_hook(self._hook("embs"))
        return out

    def _hook(self, name: str) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            self._stamp[name] = max(self._stamp.get(name, 0.0), self._now())
        return hook

    def backward(self, loss: torch.Tensor) -> None:
        """loss.backward() with the backward split at the hook stamps."""
        self._stamp = {}
        t0 = self._now()
        with record_function("dlrmbench.backward"):
            loss.backward()
        t1 = self._now()
        tv = self._stamp.get("values", t0)
        te = self._stamp.get("embs", tv)
        self._cur.update(dense_backward=tv - t0, output_dist_bwd=te - tv, lookup_bwd=t1 - te)

    def optimizer_step(self, opt: Any) -> None:
        t0 = self._now()
        with record_function("dlrmbench.optimizer"):
            opt.step()
            opt.zero_grad()
        self._cur["optimizer"] = self._now() - t0

    def end_step(self) -> None:
        self.steps.append({k: self._cur.get(k, 0.0) for k in STAGES})
        self._cur = {}
