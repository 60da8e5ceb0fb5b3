"""The compiled slot map (`SlotMap.admit`) against a plain-Python reference of the same policy, batch by batch."""
from __future__ import annotations

import numpy as np
import pytest

from embedding.cache.simulate import CacheInputError, simulate
from embedding.cache.tiered_kernels import SlotMap, distinct_rows


class ReferenceSlotMap:
    """Plain Python: LRU evicts the least recently looked-up row, LFU the fewest lookups since entry then the
    least recent; never a row of the current batch; free slots in order 0, 1, ...; dirty rows written back."""

    def __init__(self, cache_rows: int, policy: str) -> None:
        self.cap, self.policy = cache_rows, policy
        self.slot: dict[int, int] = {}
        self.freq: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.dirty: set[int] = set()
        self.clock = 0
        self.pinned_would_be_victim = 0  # evictions where the batch-blind choice was a row of the batch

    def admit(self, idx: list[int]):
        batch = set(idx)
        slots, miss_rows, miss_slots, wb_rows = [], [], [], []
        for r in idx:
            self.clock += 1
            if r in self.slot:
                self.freq[r] += 1
            else:
                if len(self.slot) < self.cap:
                    s = len(self.slot)
                else:
                    def key(v):
                        return (self.freq[v], self.last[v]) if self.policy == "lfu" else self.last[v]
                    victim = min((v for v in self.slot if v not in batch), key=key)
                    self.pinned_would_be_victim += min(self.slot, key=key) != victim
                    s = self.slot.pop(victim)
                    if victim in self.dirty:
                        self.dirty.remove(victim)
                        wb_rows.append(victim)
                self.slot[r], self.freq[r] = s, 1
                miss_rows.append(r)
                miss_slots.append(s)
            self.last[r] = self.clock
            slots.append(self.slot[r])
        return slots, miss_rows, miss_slots, wb_rows


@pytest.mark.parametrize("policy", ["lru", "lfu"])
@pytest.mark.parametrize("cache_rows,max_batch", [(40, 30), (12, 12)])
def test_compiled_slot_map_equals_python_reference(policy, cache_rows, max_batch):
    rng = np.random.default_rng(7)
    fast, ref = SlotMap(300, cache_rows, policy), ReferenceSlotMap(cache_rows, policy)
    written_back = 0
    for step in range(400):
        idx = (rng.zipf(1.2, rng.integers(1, max_batch + 1)) % 300).astype(np.int64)
        while np.unique(idx).size > cache_rows:
            idx = idx[:-1]
        got = fast.admit(idx)
        slots, miss_rows, miss_slots, wb_rows = ref.admit(idx.tolist())
        assert got.slots.tolist() == slots, step
        assert got.miss_rows.tolist() == miss_rows and got.miss_slots.tolist() == miss_slots, step
        assert got.wb_rows.tolist() == wb_rows, step
        assert set(got.wb_slots.tolist()) <= set(miss_slots)  # a written-back slot was taken by a miss
        written_back += len(wb_rows)
        if step % 3 == 0:  # a training step: every row of the batch becomes dirty
            fast.dirty[got.slots] = 1
            ref.dirty |= set(idx.tolist())
    assert written_back > 0 and ref.pinned_would_be_victim > 0  # both write-back and pinning were exercised
    assert {int(fast.row_of_slot[s]) for s in range(cache_rows)} == set(ref.slot)
    assert {int(r) for r in fast.row_of_slot[fast.dirty == 1]} == ref.dirty


@pytest.mark.parametrize("policy", ["lru", "lfu"])
def test_one_lookup_per_batch_equals_the_exact_simulator(policy):
    keys = (np.random.default_rng(3).zipf(1.1, 5000) % 2000).astype(np.int64)
    m = SlotMap(2000, 100, policy)
    misses = sum(m.admit(keys[i:i + 1]).miss_rows.size for i in range(keys.size))
    assert misses == simulate(keys, policy, 100).misses


def test_bad_batch_leaves_the_map_unchanged():
    m = SlotMap(50, 4, "lru")
    m.admit(np.array([1, 2, 3]))
    before = (m.slot_of_row.copy(), m.row_of_slot.copy(), m.prev.copy(), m.nxt.copy(), m.st[:3].copy())
    with pytest.raises(CacheInputError, match="touches 5 distinct rows"):
        m.admit(np.array([1, 9, 8, 7, 6]))
    with pytest.raises(CacheInputError, match="index 50 outside"):
        m.admit(np.array([9, 50]))
    after = (m.slot_of_row, m.row_of_slot, m.prev, m.nxt, m.st[:3])
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    assert m.admit(np.array([9, 1])).miss_rows.tolist() == [9]


def test_distinct_rows_inverts():
    idx = np.array([5, 3, 5, 9, 3], np.int64)
    mark = np.full(10, -1, np.int32)
    uniq, inv = distinct_rows(idx, mark)
    assert uniq.tolist() == [5, 3, 9] and np.array_equal(uniq[inv], idx) and (mark == -1).all()
