"""A two-tier cached embedding that really runs: hot rows in a fast tensor, the whole table in a slow tier.

Slow tier: a numpy memmap file on disk (CPU; `slow="mmap"`) or a host tensor, pinned when CUDA is available
(`slow="host"`). Fast tier: a `(cache_rows, dim)` tensor on `device` (HBM on a GPU). Per batch the module finds
the batch's rows that are not cached, evicts as many cached rows (LRU or LFU, never a row the batch uses), writes
evicted dirty rows back, fetches the missing rows, then pools over the cached copies. `apply_gradients()` applies
SGD or row-wise Adagrad to the cached rows (marking them dirty); `flush()` writes every dirty row back, so the
slow tier ends equal to an uncached table trained the same way.

Counting: a lookup misses when its row is not cached at the start of its batch and it is the batch's first lookup
of that row (one fetch per missing row); the others hit.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

from embedding.cache.simulate import CacheInputError

__all__ = ["SlowTier", "TieredEmbeddingBag"]


class SlowTier:
    """The full table (and, for row-wise Adagrad, one momentum per row) in slow memory."""

    def __init__(self, weights: np.ndarray, kind: str = "mmap", path: str | None = None) -> None:
        if kind not in ("mmap", "host"):
            raise CacheInputError(f"slow tier kind {kind!r} is not one of ('mmap', 'host')")
        rows, dim = weights.shape
        self.kind = kind
        self._owned_path = None
        if kind == "mmap":
            if path is None:
                fd, path = tempfile.mkstemp(suffix=".emb")
                os.close(fd)
                self._owned_path = path
            self.weight = np.memmap(path, dtype=np.float32, mode="w+", shape=(rows, dim))
            self.weight[:] = weights
            self.weight.flush()
        else:
            t = torch.from_numpy(np.ascontiguousarray(weights, dtype=np.float32)).clone()
            self.weight = t.pin_memory() if torch.cuda.is_available() else t
        self.momentum = np.zeros(rows, np.float32)
        self.bytes_read = 0
        self.bytes_written = 0

    def read(self, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows and their momenta, as CPU tensors."""
        if self.kind == "mmap":
            w = torch.from_numpy(self.weight[rows])
        else:
            w = self.weight.index_select(0, torch.from_numpy(rows))
        self.bytes_read += w.numel() * 4
        return w, torch.from_numpy(self.momentum[rows])

    def write(self, rows: np.ndarray, values: torch.Tensor, momentum: torch.Tensor) -> None:
        if self.kind == "mmap":
            self.weight[rows] = values.cpu().numpy()
        else:
            self.weight.index_copy_(0, torch.from_numpy(rows), values.cpu())
        self.momentum[rows] = momentum.cpu().numpy()
        self.bytes_written += values.numel() * 4

    def to_numpy(self) -> np.ndarray:
        return np.array(self.weight) if self.kind == "mmap" else self.weight.numpy().copy()

    def close(self) -> None:
        if self._owned_path is not None:
            del self.weight
            os.remove(self._owned_path)
            self._owned_path = None


class TieredEmbeddingBag(torch.nn.Module):
    """Sum-pooled embedding bag over a slow-tier table with a fast-tier row cache of `cache_rows` rows."""

    def __init__(self, weights: np.ndarray, cache_rows: int, policy: str = "lru", slow: str = "mmap",
                 path: str | None = None, device: str | torch.device = "cpu", optimizer: str = "sgd",
                 lr: float = 0.01, eps: float = 1e-8) -> None:
        super().__init__()
        weights = np.asarray(weights, dtype=np.float32)
        if weights.ndim != 2:
            raise CacheInputError(f"weights must be (rows, dim), got shape {weights.shape}")
        rows, dim = weights.shape
        if not 0 < cache_rows <= rows:
            raise CacheInputError(f"cache_rows must be in [1, {rows}] (the table's rows), got {cache_rows}")
        if policy not in ("lru", "lfu"):
            raise CacheInputError(f"cached execution runs policy 'lru' or 'lfu', not {policy!r}")
        if optimizer not in ("sgd", "rowwise_adagrad"):
            raise CacheInputError(f"optimizer {optimizer!r} is not one of ('sgd', 'rowwise_adagrad')")
        self.rows, self.dim, self.cache_rows = rows, dim, int(cache_rows)
        self.policy, self.optimizer, self.lr, self.eps = policy, optimizer, lr, eps
        self.device = torch.device(device)
        self.slow = SlowTier(weights, slow, path)
        self.cache = torch.nn.Parameter(torch.zeros(cache_rows, dim, device=self.device))
        self.cache_momentum = torch.zeros(cache_rows, device=self.device)
        self.slot_of_row = np.full(rows, -1, np.int64)
        self.row_of_slot = np.full(cache_rows, -1, np.int64)
        self.last_use = np.full(cache_rows, -1, np.int64)
        self.freq = np.zeros(cache_rows, np.int64)
        self.dirty = np.zeros(cache_rows, np.bool_)
        self.filled = 0
        self.clock = 0
        self.lookups = self.hits = self.misses = self.rows_written_back = 0

    @property
    def row_bytes(self) -> int:
        return self.dim * 4

    def forward(self, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """indices (L,) rows; offsets (B+1,) bag bounds. Returns (B, dim) sums over the cached rows."""
        slots = self.admit(indices.cpu().numpy())
        return F.embedding_bag(slots.to(self.device), self.cache, offsets.to(self.device), mode="sum",
                               sparse=True, include_last_offset=True)

    def admit(self, idx: np.ndarray) -> torch.Tensor:
        """Make every row of `idx` resident (evict, write back, fetch); returns each lookup's cache slot."""
        idx = np.asarray(idx, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.rows):
            raise CacheInputError(f"indices outside [0, {self.rows})")
        uniq, inv, counts = np.unique(idx, return_inverse=True, return_counts=True)
        if uniq.size > self.cache_rows:
            raise CacheInputError(f"a batch touches {uniq.size} distinct rows, more than the {self.cache_rows} "
                                  "cache rows; raise cache_rows or split the batch")
        t = self.clock
        self.clock += 1
        slots = self.slot_of_row[uniq]
        resident = slots >= 0
        self.last_use[slots[resident]] = t
        self.freq[slots[resident]] += counts[resident]
        missing = uniq[~resident]
        self.lookups += idx.size
        self.misses += missing.size
        self.hits += idx.size - missing.size
        if missing.size:
            slots[~resident] = self._fill(missing, counts[~resident], t)
        return torch.from_numpy(slots[inv])

    def _fill(self, missing: np.ndarray, counts: np.ndarray, t: int) -> np.ndarray:
        n_free = min(missing.size, self.cache_rows - self.filled)
        free = np.arange(self.filled, self.filled + n_free, dtype=np.int64)
        self.filled += n_free
        self.last_use[free] = t  # taken by this batch: not victims
        need = missing.size - n_free
        if need:
            victims = self._victims(need, t)
            self._write_back(victims)
            self.slot_of_row[self.row_of_slot[victims]] = -1
            free = np.concatenate([free, victims])
        w, m = self.slow.read(missing)
        free_t = torch.from_numpy(free).to(self.device)
        with torch.no_grad():
            self.cache.index_copy_(0, free_t, w.to(self.device, non_blocking=True))
            self.cache_momentum.index_copy_(0, free_t, m.to(self.device, non_blocking=True))
        self.row_of_slot[free] = missing
        self.slot_of_row[missing] = free
        self.last_use[free] = t
        self.freq[free] = counts
        self.dirty[free] = False
        return free

    def _victims(self, need: int, t: int) -> np.ndarray:
        """`need` cached slots not used by the current batch: least recent (lru) or fewest uses, then least
        recent (lfu)."""
        candidates = np.flatnonzero(self.last_use != t)
        if self.policy == "lru":
            pick = np.argpartition(self.last_use[candidates], need - 1)[:need] if need < candidates.size else None
        else:
            pick = np.lexsort((self.last_use[candidates], self.freq[candidates]))[:need]
        return candidates if pick is None else candidates[pick]

    def _write_back(self, slots: np.ndarray) -> None:
        slots = slots[self.dirty[slots]]
        if slots.size:
            s = torch.from_numpy(slots).to(self.device)
            self.slow.write(self.row_of_slot[slots], self.cache.detach().index_select(0, s),
                            self.cache_momentum.index_select(0, s))
            self.rows_written_back += slots.size
            self.dirty[slots] = False

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
        self.dirty[slots.cpu().numpy()] = True
        self.cache.grad = None

    def flush(self) -> None:
        """Write every dirty cached row back to the slow tier."""
        self._write_back(np.flatnonzero(self.dirty))

    def close(self) -> None:
        self.slow.close()
