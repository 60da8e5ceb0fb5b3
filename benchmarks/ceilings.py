"""Bandwidth ceilings measured in the same run as the backends: what this machine's memory can give.

sequential read: `torch.sum` over a buffer far larger than the last-level cache (bytes = buffer size).
random-row gather: `torch.index_select` of uniformly random rows of the workload's row size from a table far larger
than the cache, as many rows as one batch looks up (bytes = rows × row size + indices × 8 + gathered output).
Neither is a hard limit (prefetching kernels can beat plain index_select), but both say how close a backend comes.
"""
from __future__ import annotations

import torch

from .timing import rate_metric, time_calls

__all__ = ["measure_ceilings"]


def measure_ceilings(row_bytes: int, rows_per_batch: int, device: torch.device, buffer_mib: int = 1024,
                     warmup: int = 2, repeats: int = 7) -> list[dict]:
    elems = buffer_mib * (1 << 20) // 4
    buf = torch.ones(elems, dtype=torch.float32, device=device)
    t_seq = time_calls(lambda _: buf.sum(), 1, warmup, repeats, device)
    seq_bytes = elems * 4
    dim = max(1, row_bytes // 4)
    table = buf.view(-1)[: (elems // dim) * dim].view(-1, dim)
    g = torch.Generator(device="cpu").manual_seed(0)
    idx = [torch.randint(0, table.shape[0], (rows_per_batch,), generator=g).to(device) for _ in range(4)]
    t_gather = time_calls(lambda i: table.index_select(0, idx[i]), len(idx), warmup, repeats, device)
    gather_bytes = rows_per_batch * (dim * 4 * 2 + 8)
    out = [
        rate_metric("seq_read_bw", seq_bytes, t_seq, "GB/s",
                    f"torch.sum over {buffer_mib} MiB fp32 ({t_seq.clock}); bytes = buffer size", 1e9),
        rate_metric("gather_bw", gather_bytes, t_gather, "GB/s",
                    f"torch.index_select of {rows_per_batch} uniform random rows of {dim * 4} B from a {buffer_mib} "
                    "MiB table; bytes = rows × (row read + row written) + indices × 8", 1e9),
        rate_metric("gather_rows_bw", rows_per_batch * dim * 4, t_gather, "GB/s",
                    "same gather, counting only the rows read (compare with a backend's rows_bw)", 1e9),
    ]
    return out

