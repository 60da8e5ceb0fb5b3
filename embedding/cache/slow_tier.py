"""The slow tier of the two-tier cached embedding: the whole table, with measured bytes and seconds per direction.

Kinds:
  host    a host tensor (pinned when CUDA is available): the slow tier of a GPU cache (HBM over host memory).
  mmap    a numpy memmap file. On a machine with free RAM the file sits in the OS page cache, so this tier is
          RAM plus a copy, not a disk.
  direct  the same file read and written with O_DIRECT (no page cache): each missed row costs reading the
          aligned `block` bytes around it (rows in adjacent blocks coalesce into one request), issued by
          `io_depth` threads; a write-back reads, patches and rewrites the blocks. A real storage tier.
Counters: `bytes_read`/`bytes_written` count row bytes (rows × dim × 4); `device_bytes_read`/`_written` count
the bytes the tier actually moved (whole blocks for `direct`, whose write-backs also read their blocks);
`seconds_read`/`_written` are wall time inside the tier. Row-wise Adagrad momenta (4 B per row) live in host RAM for every kind and are not counted.
"""
from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from numba import njit

from embedding.cache.simulate import CacheInputError
from embedding.cache.tiered_kernels import copy_rows

__all__ = ["SlowTier", "SLOW_KINDS"]

SLOW_KINDS = ("host", "mmap", "direct")


@njit(cache=True)
def _plan_blocks(rows, row_bytes, block, max_run_blocks):
    """Runs of consecutive blocks covering sorted distinct rows: (first block, blocks, first staging block) per
    run, each row's byte offset in the staging buffer, and the staging blocks in all."""
    k = rows.size
    run_b0 = np.empty(k, np.int64)
    run_nb = np.empty(k, np.int64)
    run_buf = np.empty(k, np.int64)
    row_off = np.empty(k, np.int64)
    nr = 0
    total = 0
    for j in range(k):
        start = rows[j] * row_bytes
        b0 = start // block
        b1 = (start + row_bytes - 1) // block + 1  # exclusive
        if nr > 0 and b0 <= run_b0[nr - 1] + run_nb[nr - 1] and b1 - run_b0[nr - 1] <= max_run_blocks:
            end = run_b0[nr - 1] + run_nb[nr - 1]
            if b1 > end:
                total += b1 - end
                run_nb[nr - 1] = b1 - run_b0[nr - 1]
        else:
            run_b0[nr] = b0
            run_nb[nr] = b1 - b0
            run_buf[nr] = total
            total += b1 - b0
            nr += 1
        row_off[j] = run_buf[nr - 1] * block + start - run_b0[nr - 1] * block
    return run_b0[:nr], run_nb[:nr], run_buf[:nr], row_off, total


@njit(cache=True)
def _staging_rows(staging, row_off, dim, dst, dst_idx, to_staging):
    """Copy rows between the float32 staging buffer (row j at byte row_off[j]) and dst[dst_idx[j]]."""
    for j in range(row_off.size):
        o = row_off[j] // 4
        if to_staging:
            staging[o:o + dim] = dst[dst_idx[j], :]
        else:
            dst[dst_idx[j], :] = staging[o:o + dim]


class SlowTier:
    """The full table (and one momentum per row) in slow memory; see the module docstring for the kinds."""

    def __init__(self, weights: np.ndarray, kind: str = "mmap", path: str | None = None, io_depth: int = 8,
                 block: int = 4096) -> None:
        if kind not in SLOW_KINDS:
            raise CacheInputError(f"slow tier kind {kind!r} is not one of {SLOW_KINDS}")
        if io_depth < 1 or block < 512 or block & (block - 1):
            raise CacheInputError(f"io_depth must be ≥ 1 and block a power of two ≥ 512, got {io_depth}, {block}")
        weights = np.ascontiguousarray(weights, dtype=np.float32)
        self.rows, self.dim = weights.shape
        self.kind, self.block, self.io_depth = kind, block, io_depth
        self.row_bytes = self.dim * 4
        self._owned_path: str | None = None
        self._fd = -1
        if kind == "host":
            t = torch.from_numpy(weights).clone()
            self.weight = t.pin_memory() if torch.cuda.is_available() else t
            self._w = self.weight.numpy()
        else:
            if path is None:
                fd, path = tempfile.mkstemp(suffix=".emb")
                os.close(fd)
                self._owned_path = path
            self.path = path
            if kind == "mmap":
                self.weight = np.memmap(path, dtype=np.float32, mode="w+", shape=weights.shape)
                self.weight[:] = weights
                self.weight.flush()
                self._w = np.asarray(self.weight)
            else:
                self._open_direct(weights)
        self.momentum = np.zeros(self.rows, np.float32)
        self.bytes_read = self.bytes_written = 0
        self.device_bytes_read = self.device_bytes_written = 0
        self.seconds_read = self.seconds_written = 0.0

    def _open_direct(self, weights: np.ndarray) -> None:
        size = -(-weights.nbytes // self.block) * self.block
        with open(self.path, "wb") as f:
            weights.tofile(f)
            f.truncate(size)
            f.flush()
            os.fsync(f.fileno())
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # the writes leave nothing cached
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_DIRECT)
        except OSError as e:
            self.close()
            raise CacheInputError(f"O_DIRECT is not supported for {self.path} ({e.strerror}); give a path on a "
                                  "disk file system (not tmpfs)") from e
        self._pool = ThreadPoolExecutor(self.io_depth, thread_name_prefix="slow-tier-io")
        self._staging = np.zeros(0, np.uint8)

    def read_into(self, rows: np.ndarray, dst: np.ndarray, dst_idx: np.ndarray) -> None:
        """dst[dst_idx[j]] = row rows[j] (distinct rows; dst a 2-D float32 array, e.g. the fast tier's)."""
        t0 = time.perf_counter()
        if self.kind == "direct":
            self.device_bytes_read += self._direct(rows, dst, dst_idx, write=False)
        else:
            copy_rows(self._w, rows, dst, dst_idx)
            self.device_bytes_read += rows.size * self.row_bytes
        self.bytes_read += rows.size * self.row_bytes
        self.seconds_read += time.perf_counter() - t0

    def write_from(self, rows: np.ndarray, src: np.ndarray, src_idx: np.ndarray) -> None:
        """Row rows[j] = src[src_idx[j]] (distinct rows)."""
        t0 = time.perf_counter()
        if self.kind == "direct":  # read-modify-write of whole blocks
            moved = self._direct(rows, src, src_idx, write=True)
            self.device_bytes_read += moved
            self.device_bytes_written += moved
        else:
            copy_rows(src, src_idx, self._w, rows)
            self.device_bytes_written += rows.size * self.row_bytes
        self.bytes_written += rows.size * self.row_bytes
        self.seconds_written += time.perf_counter() - t0

    def read(self, rows: np.ndarray) -> torch.Tensor:
        """Rows (distinct) as a new (k, dim) CPU tensor."""
        out = np.empty((rows.size, self.dim), np.float32)
        self.read_into(rows, out, np.arange(rows.size))
        return torch.from_numpy(out)

    def write(self, rows: np.ndarray, values: torch.Tensor) -> None:
        v = np.ascontiguousarray(values.detach().cpu().numpy(), dtype=np.float32)
        self.write_from(rows, v, np.arange(rows.size))

    def _direct(self, rows: np.ndarray, arr: np.ndarray, arr_idx: np.ndarray, write: bool) -> int:
        """O_DIRECT transfer of the blocks holding `rows` (a write reads them first); returns the block bytes."""
        if rows.size == 0:
            return 0
        order = np.argsort(rows, kind="stable")
        b0, nb, buf, row_off, total = _plan_blocks(rows[order], self.row_bytes, self.block, 64)
        nbytes = total * self.block
        if self._staging.size < nbytes:
            raw = np.empty(nbytes + self.block, np.uint8)
            start = (-raw.ctypes.data) % self.block
            self._staging = raw[start:start + nbytes]
        staging = self._staging[:nbytes].view(np.float32)
        self._transfer(b0, nb, buf, write=False)
        if write:
            _staging_rows(staging, row_off, self.dim, arr, arr_idx[order], True)
            self._transfer(b0, nb, buf, write=True)
        else:
            _staging_rows(staging, row_off, self.dim, arr, arr_idx[order], False)
        return nbytes

    def _transfer(self, b0: np.ndarray, nb: np.ndarray, buf: np.ndarray, write: bool) -> None:
        """Read (or write) each run of blocks between the file and the staging buffer, io_depth at a time."""
        mv = memoryview(self._staging)
        op = os.pwritev if write else os.preadv
        blk, fd = self.block, self._fd
        runs = list(zip((b0 * blk).tolist(), (nb * blk).tolist(), (buf * blk).tolist(), strict=True))

        def work(part: list[tuple[int, int, int]]) -> None:
            for off, n, at in part:
                done = op(fd, [mv[at:at + n]], off)
                if done != n:
                    raise OSError(f"short {'write' if write else 'read'} of the slow tier: {done} of {n} bytes "
                                  f"at {off}")

        q = min(self.io_depth, len(runs))
        if q <= 1:
            work(runs)
            return
        step = -(-len(runs) // q)
        list(self._pool.map(work, [runs[i:i + step] for i in range(0, len(runs), step)]))

    def to_numpy(self) -> np.ndarray:
        """A copy of the whole table as the slow tier holds it (not counted)."""
        if self.kind == "host":
            return self.weight.numpy().copy()
        if self.kind == "mmap":
            return np.array(self.weight)
        out = np.empty((self.rows, self.dim), np.float32)
        self._direct(np.arange(self.rows), out, np.arange(self.rows), write=False)
        return out

    def close(self) -> None:
        if self._fd >= 0:
            self._pool.shutdown()
            os.close(self._fd)
            self._fd = -1
        if self._owned_path is not None:
            self.weight = self._w = None
            os.remove(self._owned_path)
            self._owned_path = None
