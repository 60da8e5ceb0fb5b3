"""Compiled per-batch bookkeeping of the two-tier cached embedding: `SlotMap.admit(idx)` in one numba call.

Policy (both): a lookup hits when its row is cached at that moment; the first lookup of an uncached row misses
and brings the row in (demand fetch). A row that the current batch uses is never evicted during that batch (the
pooled lookup after admission reads every row of the batch from the cache), so a batch may touch at most
`cache_rows` distinct rows. Apart from that pinning, the order is the simulators' (`kernels.lru`, `kernels.lfu`):
  lru  evict the least recently looked-up row (recency per lookup: a doubly linked list over slots, O(1));
  lfu  evict the row with the fewest lookups since it entered the cache, the least recent among equals (a lazy
       min-heap of (count, last lookup) per slot: stored keys only grow, so a stale top is re-pushed).
Slots fill in order 0, 1, 2, ... while free. Row → slot is a dense int32 array (4 B per table row).
One call runs three phases: scan the lookups (the only random access to the row → slot map; pins the batch's
cached rows, lists its missed rows), give the misses free slots then victims, then a pass that resolves the
misses' slots and updates recency (LRU: one list move per distinct row, at its last lookup) or counts (LFU).
The result equals processing the lookups one by one with pinning (tests check it against a Python reference).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from embedding.cache.simulate import CacheInputError

__all__ = ["SlotMap", "AdmitResult", "copy_rows", "distinct_rows"]

HEAD, TAIL, FILLED, STAMP, CLOCK, HEAP = range(6)  # fields of the int64 state vector `st`
OK, OUT_OF_RANGE, TOO_MANY = 0, 1, 2


@njit(cache=True)
def _scan(idx, slot_of_row, pin, touch_last, stamp, cap, slots, miss_rows, miss_last, miss_cnt):
    """Phase 1, one pass over the lookups: pin the batch's cached rows (touch_last[slot] = last position), list
    its uncached rows in first-seen order (marked -2-k in slot_of_row meanwhile; slots[i] = -2-k), count them.
    Returns (status, detail, misses). On bad input the marks are undone and only pins (harmless) remain."""
    n_rows = slot_of_row.size
    distinct = 0
    m = 0
    for i in range(idx.size):
        r = idx[i]
        if r < 0 or r >= n_rows:
            _unmark(slot_of_row, miss_rows, m)
            return OUT_OF_RANGE, r, 0
        s = slot_of_row[r]
        if s >= 0:
            if pin[s] != stamp:
                pin[s] = stamp
                distinct += 1
            touch_last[s] = i
        else:
            if s == -1:
                s = -2 - m
                slot_of_row[r] = s
                miss_rows[m] = r
                miss_cnt[m] = 0
                m += 1
            k = -2 - s
            miss_last[k] = i
            miss_cnt[k] += 1
        slots[i] = s
    if distinct + m > cap:
        _unmark(slot_of_row, miss_rows, m)
        return TOO_MANY, distinct + m, 0
    return OK, distinct + m, m


@njit(cache=True)
def _unmark(slot_of_row, miss_rows, m):
    for k in range(m):
        slot_of_row[miss_rows[k]] = -1


@njit(cache=True)
def _assign(k, s, slot_of_row, row_of_slot, pin, stamp, miss_rows, miss_slots):
    r = miss_rows[k]
    row_of_slot[s] = r
    slot_of_row[r] = s
    pin[s] = stamp
    miss_slots[k] = s


@njit(cache=True, inline="always")
def _unlink(s, prev, nxt, st):
    p = prev[s]
    q = nxt[s]
    if p >= 0:
        nxt[p] = q
    else:
        st[HEAD] = q
    if q >= 0:
        prev[q] = p
    else:
        st[TAIL] = p


@njit(cache=True, inline="always")
def _push_head(s, prev, nxt, st):
    h = st[HEAD]
    prev[s] = -1
    nxt[s] = h
    if h >= 0:
        prev[h] = s
    else:
        st[TAIL] = s
    st[HEAD] = s


@njit(cache=True, inline="always")
def _evict(s, slot_of_row, row_of_slot, dirty, wb_rows, wb_slots, w):
    """Unmap slot s's row; record it for write-back when dirty. Returns the new write-back count."""
    old = row_of_slot[s]
    slot_of_row[old] = -1
    if dirty[s]:
        wb_rows[w] = old
        wb_slots[w] = s
        dirty[s] = 0
        w += 1
    return w


@njit(cache=True)
def _admit_begin(idx, slot_of_row, row_of_slot, pin, touch_last, st):
    """Phase 1 (scan the batch: hits, distinct misses, pins) and the start of phase 2 (misses take free slots),
    the same for every policy. Free slots are filled only when the scan succeeded."""
    n = idx.size
    cap = row_of_slot.size
    st[STAMP] += 1
    stamp = st[STAMP]
    slots = np.empty(n, np.int64)
    miss_rows = np.empty(n, np.int64)
    miss_slots = np.empty(n, np.int64)
    miss_last = np.empty(n, np.int64)
    miss_cnt = np.empty(n, np.int64)
    wb_rows = np.empty(n, np.int64)
    wb_slots = np.empty(n, np.int64)
    status, detail, m = _scan(idx, slot_of_row, pin, touch_last, stamp, cap, slots, miss_rows, miss_last, miss_cnt)
    free = 0
    if status == OK:
        free = min(m, cap - st[FILLED])
        for k in range(free):
            _assign(k, st[FILLED] + k, slot_of_row, row_of_slot, pin, stamp, miss_rows, miss_slots)
        st[FILLED] += free
    return status, detail, m, free, stamp, slots, miss_rows, miss_slots, miss_last, miss_cnt, wb_rows, wb_slots


@njit(cache=True)
def _lru_admit(idx, slot_of_row, row_of_slot, pin, dirty, touch_last, prev, nxt, st):
    (status, detail, m, free, stamp, slots, miss_rows, miss_slots, miss_last, miss_cnt, wb_rows,
     wb_slots) = _admit_begin(idx, slot_of_row, row_of_slot, pin, touch_last, st)
    if status != OK:
        return status, detail, slots[:0], miss_rows[:0], miss_slots[:0], wb_rows[:0], wb_slots[:0]
    n = idx.size
    # phase 2, continued: evict the least recent rows that the batch does not use, in order
    w = 0
    v = st[TAIL]
    for k in range(free, m):
        while pin[v] == stamp:
            v = prev[v]
        s = v
        v = prev[v]
        _unlink(s, prev, nxt, st)
        w = _evict(s, slot_of_row, row_of_slot, dirty, wb_rows, wb_slots, w)
        _assign(k, s, slot_of_row, row_of_slot, pin, stamp, miss_rows, miss_slots)
    # phase 3: resolve the misses' slots; each row becomes most recent at its last lookup of the batch
    for i in range(n):
        s = slots[i]
        if s < 0:
            k = -2 - s
            s = miss_slots[k]
            slots[i] = s
            if miss_last[k] == i:
                _push_head(s, prev, nxt, st)
        elif touch_last[s] == i and s != st[HEAD]:
            _unlink(s, prev, nxt, st)
            _push_head(s, prev, nxt, st)
    return OK, detail, slots, miss_rows[:m], miss_slots[:m], wb_rows[:w], wb_slots[:w]


@njit(cache=True, inline="always")
def _less(f1, t1, f2, t2):
    return f1 < f2 or (f1 == f2 and t1 < t2)


@njit(cache=True)
def _heap_push(hs, hf, ht, size, s, f, t):
    j = size
    while j > 0:
        p = (j - 1) >> 1
        if not _less(f, t, hf[p], ht[p]):
            break
        hs[j] = hs[p]
        hf[j] = hf[p]
        ht[j] = ht[p]
        j = p
    hs[j] = s
    hf[j] = f
    ht[j] = t
    return size + 1


@njit(cache=True)
def _heap_pop(hs, hf, ht, size):
    """Remove the minimum; returns the new size (the minimum was hs[0], hf[0], ht[0] before the call)."""
    size -= 1
    s, f, t = hs[size], hf[size], ht[size]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= size:
            break
        if c + 1 < size and _less(hf[c + 1], ht[c + 1], hf[c], ht[c]):
            c += 1
        if not _less(hf[c], ht[c], f, t):
            break
        hs[j] = hs[c]
        hf[j] = hf[c]
        ht[j] = ht[c]
        j = c
    hs[j] = s
    hf[j] = f
    ht[j] = t
    return size


@njit(cache=True)
def _lfu_admit(idx, slot_of_row, row_of_slot, pin, dirty, touch_last, freq, last, hs, hf, ht, st):
    (status, detail, m, free, stamp, slots, miss_rows, miss_slots, miss_last, miss_cnt, wb_rows,
     wb_slots) = _admit_begin(idx, slot_of_row, row_of_slot, pin, touch_last, st)
    if status != OK:
        return status, detail, slots[:0], miss_rows[:0], miss_slots[:0], wb_rows[:0], wb_slots[:0]
    n = idx.size
    cap = row_of_slot.size
    # phase 2, continued: evict the smallest (count, last lookup) rows the batch does not use
    deferred = np.empty(min(n, cap), np.int64)  # pinned slots taken off the heap during this batch
    d = 0
    size = st[HEAP]
    w = 0
    for k in range(free, m):
        while True:
            v = hs[0]
            stale = hf[0] != freq[v] or ht[0] != last[v]
            size = _heap_pop(hs, hf, ht, size)
            if stale:
                size = _heap_push(hs, hf, ht, size, v, freq[v], last[v])
            elif pin[v] == stamp:
                deferred[d] = v
                d += 1
            else:
                break
        w = _evict(v, slot_of_row, row_of_slot, dirty, wb_rows, wb_slots, w)
        _assign(k, v, slot_of_row, row_of_slot, pin, stamp, miss_rows, miss_slots)
    # phase 3: counts and last lookup times (a missed row enters with its count in the batch)
    clock = st[CLOCK]
    for i in range(n):
        s = slots[i]
        if s < 0:
            k = -2 - s
            s = miss_slots[k]
            slots[i] = s
            if miss_last[k] == i:
                freq[s] = miss_cnt[k]
                last[s] = clock + i + 1
                size = _heap_push(hs, hf, ht, size, s, freq[s], last[s])
        else:
            freq[s] += 1
            last[s] = clock + i + 1
    for j in range(d):
        v = deferred[j]
        size = _heap_push(hs, hf, ht, size, v, freq[v], last[v])
    st[HEAP] = size
    st[CLOCK] = clock + n
    return OK, detail, slots, miss_rows[:m], miss_slots[:m], wb_rows[:w], wb_slots[:w]


@njit(cache=True)
def copy_rows(src, src_idx, dst, dst_idx):
    """dst[dst_idx[j]] = src[src_idx[j]] for every j: one compiled row gather-scatter (2-D float arrays)."""
    for j in range(src_idx.size):
        dst[dst_idx[j], :] = src[src_idx[j], :]


@njit(cache=True)
def distinct_rows(idx, mark):
    """(distinct rows in first-seen order, each lookup's position among them); `mark` (rows,) int32 all -1 on
    entry and on return."""
    uniq = np.empty(idx.size, np.int64)
    inv = np.empty(idx.size, np.int64)
    u = 0
    for i in range(idx.size):
        r = idx[i]
        p = mark[r]
        if p < 0:
            p = u
            mark[r] = u
            uniq[u] = r
            u += 1
        inv[i] = p
    for j in range(u):
        mark[uniq[j]] = -1
    return uniq[:u], inv


class AdmitResult:
    """One batch's admission: each lookup's slot, the rows to fetch into which slots, the dirty evicted rows
    to write back from which slots (write back before fetching: a fetched row may take an evicted slot)."""

    __slots__ = ("slots", "miss_rows", "miss_slots", "wb_rows", "wb_slots", "distinct")

    def __init__(self, slots, miss_rows, miss_slots, wb_rows, wb_slots, distinct) -> None:
        self.slots, self.miss_rows, self.miss_slots = slots, miss_rows, miss_slots
        self.wb_rows, self.wb_slots, self.distinct = wb_rows, wb_slots, distinct


class SlotMap:
    """Which table row sits in which cache slot, with the policy's bookkeeping and per-slot dirty flags."""

    def __init__(self, rows: int, cache_rows: int, policy: str) -> None:
        if policy not in ("lru", "lfu"):
            raise CacheInputError(f"cached execution runs policy 'lru' or 'lfu', not {policy!r}")
        if rows >= 2**31:
            raise CacheInputError(f"the slot map indexes rows with int32; {rows} rows is too many")
        self.rows, self.cache_rows, self.policy = rows, cache_rows, policy
        self.slot_of_row = np.full(rows, -1, np.int32)
        self.row_of_slot = np.full(cache_rows, -1, np.int64)
        self.pin = np.zeros(cache_rows, np.int64)
        self.dirty = np.zeros(cache_rows, np.uint8)
        self.touch_last = np.zeros(cache_rows, np.int64)  # scratch: a pinned slot's last position in the batch
        self.st = np.array([-1, -1, 0, 0, 0, 0], np.int64)
        if policy == "lru":
            self.prev = np.full(cache_rows, -1, np.int32)
            self.nxt = np.full(cache_rows, -1, np.int32)
        else:
            self.freq = np.zeros(cache_rows, np.int64)
            self.last = np.zeros(cache_rows, np.int64)
            self.heap = (np.zeros(cache_rows, np.int64), np.zeros(cache_rows, np.int64),
                         np.zeros(cache_rows, np.int64))

    def admit(self, idx: np.ndarray) -> AdmitResult:
        """Make every row of idx (int64, 1-D) resident; raises CacheInputError (state unchanged) on bad input."""
        idx = np.ascontiguousarray(idx, dtype=np.int64)
        if self.policy == "lru":
            out = _lru_admit(idx, self.slot_of_row, self.row_of_slot, self.pin, self.dirty, self.touch_last,
                             self.prev, self.nxt, self.st)
        else:
            out = _lfu_admit(idx, self.slot_of_row, self.row_of_slot, self.pin, self.dirty, self.touch_last,
                             self.freq, self.last, *self.heap, self.st)
        status, detail = out[0], out[1]
        if status == OUT_OF_RANGE:
            raise CacheInputError(f"index {detail} outside [0, {self.rows}) (the table's rows)")
        if status == TOO_MANY:
            raise CacheInputError(f"a batch touches {detail} distinct rows, more than the {self.cache_rows} "
                                  "cache rows; raise cache_rows or split the batch")
        return AdmitResult(*out[2:], distinct=detail)

    @property
    def filled(self) -> int:
        return int(self.st[FILLED])
