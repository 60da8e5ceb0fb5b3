"""Bandwidth ceilings measured in the same run as the backends: what this machine's memory gives plain code.

seq_read_bw: `torch.sum` over a buffer far larger than the last-level cache (bytes = buffer size).
gather_uniform_bw: `torch.index_select` of uniformly random rows of the workload's mean row size from a buffer far
  larger than the cache, one batch's worth of rows, into a preallocated output (no page faults timed).
gather_workload_bw: `torch.index_select` of exactly the rows each table looks up in the workload's batches, from the
  same weights the backends use, into preallocated outputs: the same locality as the backends, no pooling.
Gather bytes count rows read only (Σ rows × row bytes), the figure a backend's rows_bw is compared with. None of these
is a hard limit (prefetching kernels can beat plain index_select) but they say how close a backend comes.
"""
from __future__ import annotations

import numpy as np
import torch

from embedding.batch import Batch

from .timing import rate_metric, time_calls

__all__ = ["measure_ceilings"]


def measure_ceilings(weights: list[torch.Tensor], batches: list[Batch], device: torch.device, buffer_mib: int = 512,
                     warmup: int = 2, repeats: int = 7) -> list[dict]:
    elems = buffer_mib * (1 << 20) // 4
    buf = torch.ones(elems, dtype=torch.float32, device=device)
    t_seq = time_calls(lambda _: buf.sum(), 1, warmup, repeats, device)
    out = [rate_metric("seq_read_bw", elems * 4, t_seq, "GB/s",
                       f"torch.sum over {buffer_mib} MiB fp32 ({t_seq.clock}); bytes = buffer size", 1e9)]

    lookups = sum(b.num_lookups for b in batches) // len(batches)
    row_bytes = sum(float(w.shape[1]) * b.lengths[t].sum() for b in batches for t, w in enumerate(weights)) * 4
    dim = max(1, int(round(row_bytes / sum(b.num_lookups for b in batches) / 4)))
    table = buf[: (elems // dim) * dim].view(-1, dim)
    g = torch.Generator().manual_seed(0)
    idx = [torch.randint(0, table.shape[0], (lookups,), generator=g).to(device) for _ in range(4)]
    dst = torch.empty(lookups, dim, device=device)
    t_uni = time_calls(lambda i: torch.index_select(table, 0, idx[i], out=dst), len(idx), warmup, repeats, device)
    out.append(rate_metric("gather_uniform_bw", lookups * dim * 4, t_uni, "GB/s",
                           f"torch.index_select of {lookups} uniform random rows of {dim * 4} B from a {buffer_mib} MiB "
                           "buffer into a preallocated output; bytes = rows × row bytes", 1e9))

    dev_w = [w.to(device) for w in weights]
    per_batch = []
    for b in batches:
        bounds = b.table_offsets
        per_batch.append([torch.from_numpy(b.indices[bounds[t]:bounds[t + 1]]).to(device) for t in range(len(dev_w))])
    outs = [torch.empty(max(int(b.lengths[t].sum()) for b in batches), w.shape[1], device=device)
            for t, w in enumerate(dev_w)]

    def gather(i: int) -> None:
        for w, ix, o in zip(dev_w, per_batch[i], outs, strict=True):
            torch.index_select(w, 0, ix, out=o[: ix.numel()])

    t_wl = time_calls(gather, len(batches), warmup, repeats, device)
    bytes_per_batch = np.array([sum(float(ix.numel() * w.shape[1] * 4) for ix, w in zip(p, dev_w, strict=True))
                                for p in per_batch])
    out.append(rate_metric("gather_workload_bw", bytes_per_batch, t_wl, "GB/s",
                           "torch.index_select of each table's looked-up rows of the same batches and weights, into "
                           "preallocated outputs, one call per table; bytes = rows × row bytes", 1e9))
    return out
