"""Compiled N-way set-associative cache simulator (as FBGEMM's GPU cache: 32 ways, set = hash(row) mod sets).

Each request scans the `ways` slots of its set; on a miss it fills an empty slot or evicts the slot the policy
ranks last: LRU the least recent, LFU the fewest accesses since insertion (ties: least recent), Belady the
farthest next use. Returns the same `(hit, wb_per_id, dirty_end)` as the fully associative kernels.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from embedding.cache.kernels import mix64

__all__ = ["set_of", "set_associative", "POLICY_CODES"]

POLICY_CODES = {"lru": 0, "lfu": 1, "belady": 2}


@njit(cache=True)
def set_of(uniques: np.ndarray, num_sets: int) -> np.ndarray:
    """The set of every dense id: splitmix64(original key) mod num_sets."""
    out = np.empty(uniques.size, np.int64)
    for j in range(uniques.size):
        out[j] = np.int64(mix64(uniques[j]) % np.uint64(num_sets))
    return out


@njit(cache=True)
def set_associative(ids: np.ndarray, n_ids: int, sets: np.ndarray, num_sets: int, ways: int, policy: int,
                    writes: np.ndarray, nxt: np.ndarray):
    n = ids.size
    has_w = writes.size > 0
    slot_id = np.full(num_sets * ways, -1, np.int64)
    slot_time = np.zeros(num_sets * ways, np.int64)  # last use (lru, lfu tie) or next use (belady)
    slot_count = np.zeros(num_sets * ways, np.int64)
    slot_dirty = np.zeros(num_sets * ways, np.bool_)
    wb = np.zeros(n_ids, np.int64)
    dirty_end = np.zeros(n_ids, np.bool_)
    hit = np.zeros(n, np.uint8)
    for i in range(n):
        k = ids[i]
        base = sets[k] * ways
        found = -1
        empty = -1
        for w in range(base, base + ways):
            s = slot_id[w]
            if s == k:
                found = w
                break
            if s < 0 and empty < 0:
                empty = w
        if found >= 0:
            hit[i] = 1
            slot_count[found] += 1
        else:
            found = empty
            if found < 0:
                found = base
                for w in range(base + 1, base + ways):
                    if policy == 0:
                        worse = slot_time[w] < slot_time[found]
                    elif policy == 1:
                        worse = slot_count[w] < slot_count[found] or (
                            slot_count[w] == slot_count[found] and slot_time[w] < slot_time[found])
                    else:
                        worse = slot_time[w] > slot_time[found]
                    if worse:
                        found = w
                if slot_dirty[found]:
                    wb[slot_id[found]] += 1
            slot_id[found] = k
            slot_count[found] = 1
            slot_dirty[found] = False
        slot_time[found] = nxt[i] if policy == 2 else i
        if has_w and writes[i]:
            slot_dirty[found] = True
    for w in range(num_sets * ways):
        if slot_id[w] >= 0 and slot_dirty[w]:
            dirty_end[slot_id[w]] = True
    return hit, wb, dirty_end
