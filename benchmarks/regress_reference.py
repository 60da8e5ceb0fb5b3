"""Frozen reference kernels for `regress timed`: the LRU simulation as it was when the check was built.

A timed probe is a ratio of CPU times, kernel / reference, in one process. The ratio is stable under load only when
the reference does the same kind of work as the kernel: np.unique (a sort) beside the LRU simulation (pointer
chasing over per-id arrays) moved by ~9% between loaded runs, which hid a planted 25% slowdown. These kernels are
a deliberate frozen copy of `embedding.cache.kernels.densify_direct` and `lru` (hit counting only): the same memory
traffic, so load moves both alike, while a change to the live simulator (in `embedding/cache/`) moves only the
kernel. Never edit them to follow the live code: a probe must be compared with a reference that does not change.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit

__all__ = ["frozen_lru_hits"]


@njit(cache=True)
def _dense(keys: np.ndarray, key_bound: int) -> tuple[np.ndarray, int]:
    first = np.full(key_bound, -1, np.int32)
    ids = np.empty(keys.size, np.int64)
    u = 0
    for i in range(keys.size):
        s = first[keys[i]]
        if s < 0:
            s = u
            first[keys[i]] = u
            u += 1
        ids[i] = s
    return ids, u


@njit(cache=True)
def _lru_hits(ids: np.ndarray, n_ids: int, capacity: int) -> int:
    prev = np.full(n_ids, -1, np.int64)
    nxt = np.full(n_ids, -1, np.int64)
    inc = np.zeros(n_ids, np.bool_)
    hit = np.zeros(ids.size, np.uint8)
    head = tail = -1
    size = 0
    for i in range(ids.size):
        k = ids[i]
        if inc[k]:
            hit[i] = 1
            if head != k:
                p, q = prev[k], nxt[k]
                nxt[p] = q
                if q >= 0:
                    prev[q] = p
                else:
                    tail = p
                prev[k] = -1
                nxt[k] = head
                prev[head] = k
                head = k
            continue
        if size == capacity:
            v = tail
            tail = prev[v]
            if tail >= 0:
                nxt[tail] = -1
            else:
                head = -1
            inc[v] = False
            size -= 1
        inc[k] = True
        prev[k] = -1
        nxt[k] = head
        if head >= 0:
            prev[head] = k
        head = k
        if tail < 0:
            tail = k
        size += 1
    return int(hit.sum())


def frozen_lru_hits(streams: Sequence[np.ndarray], capacities: Sequence[int]) -> int:
    """Total LRU hits over per-table key streams (non-negative keys), one cache of `capacities[t]` rows per table."""
    total = 0
    for keys, cap in zip(streams, capacities, strict=True):
        if keys.size:
            ids, u = _dense(keys, int(keys.max()) + 1)
            total += _lru_hits(ids, u, int(cap)) if cap < u else int(keys.size - u)
    return total
