"""libCacheSim (PyPI `libcachesim`, a test/benchmark dependency) as the independent reference simulator.

The key stream is written as a libCacheSim oracleGeneral binary trace (per request: uint32 time, uint64 id,
uint32 size = 1, int64 next-access position or -1), so Belady gets its future knowledge and every object has
unit size: a cache of C bytes is a cache of C rows.
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

from embedding.cache import kernels
from embedding.cache.simulate import dense_ids

__all__ = ["ORACLE_DTYPE", "write_oracle_trace", "libcachesim_run", "LIBCACHESIM_POLICIES"]

ORACLE_DTYPE = np.dtype([("time", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
LIBCACHESIM_POLICIES = ("lru", "lfu", "belady")


def write_oracle_trace(keys: np.ndarray, path: str) -> None:
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    n = keys.size
    ids, uniq = dense_ids(keys)
    nxt = kernels.next_use(ids, uniq.size)
    rec = np.zeros(n, ORACLE_DTYPE)
    rec["time"] = np.arange(n, dtype=np.uint32)
    rec["id"] = keys.astype(np.uint64)
    rec["size"] = 1
    rec["next"] = np.where(nxt >= n, -1, nxt)
    rec.tofile(path)


class libcachesim_run:  # noqa: N801 - used like a function returning (misses, seconds)
    """Simulate `policy` with libCacheSim over `keys`; `.misses` exact count, `.seconds` of process_trace only
    (the trace file is written before timing; libCacheSim reads it from the page cache)."""

    def __init__(self, keys: np.ndarray, policy: str, capacity_rows: int, path: str | None = None) -> None:
        import libcachesim as lcs

        cls = {"lru": lcs.LRU, "lfu": lcs.LFU, "belady": lcs.Belady}[policy]
        own = path is None
        if own:
            fd, path = tempfile.mkstemp(suffix=".oracleGeneral.bin")
            os.close(fd)
        try:
            if own or not os.path.exists(path):
                write_oracle_trace(keys, path)
            reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
            cache = cls(int(capacity_rows))
            t0 = time.perf_counter()
            miss_ratio, _ = cache.process_trace(reader)
            self.seconds = time.perf_counter() - t0
        finally:
            if own:
                os.remove(path)
        self.requests = int(np.asarray(keys).size)
        self.misses = int(round(miss_ratio * self.requests))
