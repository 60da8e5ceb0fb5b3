"""Compiled (numba) inner loops of the exact cache simulators, fully associative.

Every kernel walks a stream of dense ids (0..n_ids-1, see `densify`) one request at a time and returns
`(hit, wb_per_id, dirty_end)`: a per-request hit flag (uint8), per id the number of dirty evictions (write-backs)
and whether the id is dirty in the cache when the stream ends (what a flush would write). `writes` is a per-request
uint8 flag (empty = read-only stream); a written row becomes dirty once it is in the cache.
A miss always inserts the requested row (demand fetch, no bypass), evicting one row when the cache is full.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["mix64", "densify", "densify_direct", "next_use", "lru", "lfu", "belady"]


@njit(cache=True, inline="always")
def mix64(key: int) -> np.uint64:
    """splitmix64 finalizer: a well-spread 64-bit hash of an integer key."""
    z = np.uint64(key)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def densify(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Map arbitrary int64 keys to dense ids in first-seen order (open addressing, grows at load 1/2).

    Returns (ids (n,), uniques (n_ids,)) with uniques[ids[i]] == keys[i]."""
    n = keys.size
    size = 1024
    mask = size - 1
    slot_key = np.empty(size, np.int64)
    slot_id = np.full(size, -1, np.int64)
    uniq = np.empty(max(n, 1), np.int64)
    ids = np.empty(n, np.int64)
    u = 0
    for i in range(n):
        k = keys[i]
        h = np.int64(mix64(k) & np.uint64(mask))
        while True:
            s = slot_id[h]
            if s < 0:
                slot_key[h] = k
                slot_id[h] = u
                uniq[u] = k
                ids[i] = u
                u += 1
                break
            if slot_key[h] == k:
                ids[i] = s
                break
            h = (h + 1) & mask
        if 2 * u > size:  # rehash into a table twice as large
            size *= 2
            mask = size - 1
            slot_key = np.empty(size, np.int64)
            slot_id = np.full(size, -1, np.int64)
            for j in range(u):
                h = np.int64(mix64(uniq[j]) & np.uint64(mask))
                while slot_id[h] >= 0:
                    h = (h + 1) & mask
                slot_key[h] = uniq[j]
                slot_id[h] = j
    return ids, uniq[:u].copy()


@njit(cache=True)
def densify_direct(keys: np.ndarray, key_bound: int) -> tuple[np.ndarray, np.ndarray]:
    """`densify` for keys known to lie in [0, key_bound): a direct int32 map instead of a hash table (one memory
    access per key; used when key_bound is small against the stream)."""
    n = keys.size
    first = np.full(key_bound, -1, np.int32)
    uniq = np.empty(max(n, 1), np.int64)
    ids = np.empty(n, np.int64)
    u = 0
    for i in range(n):
        k = keys[i]
        s = first[k]
        if s < 0:
            first[k] = u
            uniq[u] = k
            s = u
            u += 1
        ids[i] = s
    return ids, uniq[:u].copy()


@njit(cache=True)
def next_use(ids: np.ndarray, n_ids: int) -> np.ndarray:
    """Per request, the position of the next request of the same id; `n + id` when there is none (distinct, and
    later than every real position), by one backwards pass."""
    n = ids.size
    nxt = np.empty(n, np.int64)
    last = np.full(n_ids, -1, np.int64)
    for i in range(n - 1, -1, -1):
        k = ids[i]
        nxt[i] = last[k] if last[k] >= 0 else n + k
        last[k] = i
    return nxt


@njit(cache=True)
def lru(ids: np.ndarray, n_ids: int, capacity: int, writes: np.ndarray):
    """Exact LRU: doubly linked recency list over ids, O(1) per request."""
    n = ids.size
    has_w = writes.size > 0
    prev = np.full(n_ids, -1, np.int64)
    nxt = np.full(n_ids, -1, np.int64)
    inc = np.zeros(n_ids, np.bool_)
    dirty = np.zeros(n_ids, np.bool_)
    wb = np.zeros(n_ids, np.int64)
    hit = np.zeros(n, np.uint8)
    head = -1  # most recent
    tail = -1  # least recent
    size = 0
    for i in range(n):
        k = ids[i]
        if inc[k]:
            hit[i] = 1
            if head != k:  # unlink, then push at head
                p = prev[k]
                q = nxt[k]
                nxt[p] = q
                if q >= 0:
                    prev[q] = p
                else:
                    tail = p
                prev[k] = -1
                nxt[k] = head
                prev[head] = k
                head = k
        else:
            if size == capacity:
                v = tail
                tail = prev[v]
                if tail >= 0:
                    nxt[tail] = -1
                else:
                    head = -1
                inc[v] = False
                if dirty[v]:
                    wb[v] += 1
                    dirty[v] = False
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
        if has_w and writes[i]:
            dirty[k] = True
    return hit, wb, dirty


@njit(cache=True)
def lfu(ids: np.ndarray, n_ids: int, capacity: int, writes: np.ndarray, max_freq: int):
    """Exact LFU, O(1) per request: one recency list per access count; the victim is the least recently used id
    among those with the fewest accesses since they entered the cache (counts restart at 1 on re-insertion)."""
    n = ids.size
    has_w = writes.size > 0
    freq = np.zeros(n_ids, np.int64)
    prev = np.full(n_ids, -1, np.int64)
    nxt = np.full(n_ids, -1, np.int64)
    bhead = np.full(max_freq + 2, -1, np.int64)  # least recent in the bucket
    btail = np.full(max_freq + 2, -1, np.int64)  # most recent
    dirty = np.zeros(n_ids, np.bool_)
    wb = np.zeros(n_ids, np.int64)
    hit = np.zeros(n, np.uint8)
    size = 0
    min_f = 1
    for i in range(n):
        k = ids[i]
        f = freq[k]
        if f > 0:
            hit[i] = 1
            p = prev[k]  # unlink from bucket f
            q = nxt[k]
            if p >= 0:
                nxt[p] = q
            else:
                bhead[f] = q
            if q >= 0:
                prev[q] = p
            else:
                btail[f] = p
            if bhead[f] < 0 and min_f == f:
                min_f = f + 1
            f += 1
        else:
            if size == capacity:
                v = bhead[min_f]
                q = nxt[v]
                bhead[min_f] = q
                if q >= 0:
                    prev[q] = -1
                else:
                    btail[min_f] = -1
                freq[v] = 0
                if dirty[v]:
                    wb[v] += 1
                    dirty[v] = False
                size -= 1
            f = 1
            min_f = 1
            size += 1
        freq[k] = f  # append at the most-recent end of bucket f
        t = btail[f]
        prev[k] = t
        nxt[k] = -1
        if t >= 0:
            nxt[t] = k
        else:
            bhead[f] = k
        btail[f] = k
        if has_w and writes[i]:
            dirty[k] = True
    return hit, wb, dirty


@njit(cache=True, inline="always")
def _heap_pop(heap: np.ndarray, hs: int) -> int:
    """Remove the top of the max-heap heap[:hs]; returns the new size."""
    hs -= 1
    last = heap[hs]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= hs:
            break
        if c + 1 < hs and heap[c + 1] > heap[c]:
            c += 1
        if heap[c] <= last:
            break
        heap[j] = heap[c]
        j = c
    heap[j] = last
    return hs


@njit(cache=True)
def belady(ids: np.ndarray, n_ids: int, capacity: int, writes: np.ndarray, nxt: np.ndarray, bypass: bool = False):
    """Exact Belady/MIN: evict the cached id whose next use is farthest (lazy max-heap of next-use positions;
    an entry v names id ids[v], or v - n for 'never again'). With `bypass` a missed row whose next use is later
    than every cached row's is served from the slow tier and not cached (optimal over all policies, static
    included; a bypassed write goes straight to the slow tier and counts as a write-back)."""
    n = ids.size
    has_w = writes.size > 0
    inc = np.zeros(n_ids, np.bool_)
    cur = np.full(n_ids, -1, np.int64)
    dirty = np.zeros(n_ids, np.bool_)
    wb = np.zeros(n_ids, np.int64)
    hit = np.zeros(n, np.uint8)
    heap = np.empty(n, np.int64)
    hs = 0
    size = 0
    for i in range(n):
        k = ids[i]
        v = nxt[i]
        if inc[k]:
            hit[i] = 1
        else:
            if size == capacity:
                while True:  # drop stale entries until the top is a live one
                    top = heap[0]
                    kk = ids[top] if top < n else top - n
                    if inc[kk] and cur[kk] == top:
                        break
                    hs = _heap_pop(heap, hs)
                if bypass and v > top:
                    if has_w and writes[i]:
                        wb[k] += 1
                    continue
                hs = _heap_pop(heap, hs)
                inc[kk] = False
                if dirty[kk]:
                    wb[kk] += 1
                    dirty[kk] = False
                size -= 1
            inc[k] = True
            size += 1
        cur[k] = v
        j = hs  # push v
        hs += 1
        while j > 0:
            p = (j - 1) >> 1
            if heap[p] >= v:
                break
            heap[j] = heap[p]
            j = p
        heap[j] = v
        if has_w and writes[i]:
            dirty[k] = True
    return hit, wb, dirty
