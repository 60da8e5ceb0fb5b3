"""A two-tier cached embedding that really runs: hot rows in a fast tensor, the whole table in a slow tier.

Fast tier: a `(cache_rows, dim)` tensor on `device` (HBM on a GPU). Slow tier: `SlowTier` (host tensor, memmap
file, or the same file through O_DIRECT; see `embedding.cache.slow_tier`). Per batch:
  1. one compiled call (`SlotMap.admit`) maps every lookup to a cache slot, updating the policy (LRU or LFU,
     rows of the batch pinned) and listing the missed rows with their slots and the dirty evicted rows;
  2. the dirty evicted rows are written back, then the missed rows are copied from the slow tier into their
     slots (one compiled row copy on CPU; a staged host copy + `index_copy_` on a GPU);
  3. one `embedding_bag` (sum) pools over the cache tensor.
`apply_gradients()` applies SGD or row-wise Adagrad to the cached rows and marks them dirty; `flush()` writes
every dirty row back, so the slow tier ends equal to an uncached table trained the same way.

Counting: a lookup misses when its row is not cached when it is looked up (the first lookup in a batch of a row
not cached at the batch's start); the others hit. Each miss fetches one row.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from embedding.cache.simulate import CacheInputError
from embedding.cache.slow_tier import SlowTier
from embedding.cache.tiered_kernels import SlotMap

__all__ = ["SlowTier", "TieredEmbeddingBag"]


class TieredEmbeddingBag(torch.nn.Module):
    """Sum-pooled embedding bag over a slow-tier table with a fast-tier row cache of `cache_rows` rows."""

    def __init__(self, weights: np.ndarray, cache_rows: int, policy: str = "lru", slow: str = "mmap",
                 path: str | None = None, device: str | torch.device = "cpu", optimizer: str = "sgd",
                 lr: float = 0.01, eps: float = 1e-8, io_depth: int = 8) -> None:
        super().__init__()
        weights = np.asarray(weights, dtype=np.float32)
        if weights.ndim != 2:
            raise CacheInputError(f"weights must be (rows, dim), got shape {weights.shape}")
        rows, dim = weights.shape
        if not 0 < cache_rows <= rows:
            raise CacheInputError(f"cache_rows must be in [1, {rows}] (the table's rows), got {cache_rows}")
        if optimizer not in ("sgd", "rowwise_adagrad"):
            raise CacheInputError(f"optimizer {optimizer!r} is not one of ('sgd', 'rowwise_adagrad')")
        self.rows, self.dim, self.cache_rows = rows, dim, int(cache_rows)
        self.policy, self.optimizer, self.lr, self.eps = policy, optimizer, lr, eps
        self.device = torch.device(device)
        self.map = SlotMap(rows, self.cache_rows, policy)
        self.slow = SlowTier(weights, slow, path, io_depth=io_depth)
        self.cache = torch.nn.Parameter(torch.zeros(cache_rows, dim, device=self.device))
        self.cache_momentum = torch.zeros(cache_rows, device=self.device)
        self.lookups = self.hits = self.misses = self.rows_written_back = 0
        self._staging: torch.Tensor | None = None  # pinned host rows on their way to a GPU fast tier
        self._staged: torch.cuda.Event | None = None

    @property
    def row_bytes(self) -> int:
        return self.dim * 4

    @property
    def dirty(self) -> np.ndarray:
        """(cache_rows,) uint8: 1 where the cached row differs from the slow tier's."""
        return self.map.dirty

    def forward(self, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """indices (L,) rows; offsets (B+1,) bag bounds. Returns (B, dim) sums over the cached rows."""
        slots = self.admit(indices.cpu().numpy())
        return F.embedding_bag(slots.to(self.device), self.cache, offsets.to(self.device), mode="sum",
                               sparse=True, include_last_offset=True)

    def admit(self, idx: np.ndarray) -> torch.Tensor:
        """Make every row of `idx` resident (evict, write back, fetch); returns each lookup's cache slot."""
        res = self.map.admit(idx)
        n_miss = res.miss_rows.size
        self.lookups += res.slots.size
        self.misses += n_miss
        self.hits += res.slots.size - n_miss
        if res.wb_rows.size:
            self._write_back(res.wb_rows, res.wb_slots)
        if n_miss:
            self._fetch(res.miss_rows, res.miss_slots)
        return torch.from_numpy(res.slots)

    @torch.no_grad()
    def _fetch(self, rows: np.ndarray, slots: np.ndarray) -> None:
        if self.device.type == "cpu":
            self.slow.read_into(rows, self.cache.data.numpy(), slots)
            if self.optimizer == "rowwise_adagrad":
                self.cache_momentum.numpy()[slots] = self.slow.momentum[rows]
            return
        slots_t = torch.from_numpy(slots).to(self.device)
        n = rows.size
        if self._staging is None or self._staging.shape[0] < n:  # one pinned buffer, grown, reused every batch
            self._staging = torch.empty(max(n, 2 * (0 if self._staging is None else self._staging.shape[0])),
                                        self.dim, pin_memory=torch.cuda.is_available())
        elif self._staged is not None:
            self._staged.synchronize()  # the previous batch's copy out of the buffer has finished
        self.slow.read_into(rows, self._staging.numpy(), np.arange(n))
        self.cache.index_copy_(0, slots_t, self._staging[:n].to(self.device, non_blocking=True))
        self._staged = torch.cuda.Event()
        self._staged.record()
        if self.optimizer == "rowwise_adagrad":
            m = torch.from_numpy(self.slow.momentum[rows])
            self.cache_momentum.index_copy_(0, slots_t, m.to(self.device))

    @torch.no_grad()
    def _write_back(self, rows: np.ndarray, slots: np.ndarray) -> None:
        if self.device.type == "cpu":
            self.slow.write_from(rows, self.cache.data.numpy(), slots)
            if self.optimizer == "rowwise_adagrad":
                self.slow.momentum[rows] = self.cache_momentum.numpy()[slots]
        else:
            slots_t = torch.from_numpy(slots).to(self.device)
            self.slow.write(rows, self.cache.index_select(0, slots_t).cpu())
            if self.optimizer == "rowwise_adagrad":
                self.slow.momentum[rows] = self.cache_momentum.index_select(0, slots_t).cpu().numpy()
        self.rows_written_back += rows.size

    @torch.no_grad()
    def apply_gradients(self) -> None:
        """Update the cached rows from `cache.grad` (SGD or row-wise Adagrad) and mark them dirty."""
        g = self.cache.grad
        if g is None:
            return
        g = g.coalesce() if g.is_sparse else g.to_sparse().coalesce()
        slots, vals = g.indices()[0], g.values()
        if self.optimizer == "sgd":
            self.cache.index_add_(0, slots, vals, alpha=-self.lr)
        else:
            m = self.cache_momentum.index_select(0, slots) + vals.pow(2).mean(dim=1)
            self.cache_momentum.index_copy_(0, slots, m)
            self.cache.index_add_(0, slots, vals / (m.sqrt() + self.eps).unsqueeze(1), alpha=-self.lr)
        self.map.dirty[slots.cpu().numpy()] = 1
        self.cache.grad = None

    def flush(self) -> None:
        """Write every dirty cached row back to the slow tier."""
        slots = np.flatnonzero(self.map.dirty)
        if slots.size:
            self._write_back(self.map.row_of_slot[slots], slots)
            self.map.dirty[slots] = 0

    def close(self) -> None:
        self.slow.close()
