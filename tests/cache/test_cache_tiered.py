"""Two-tier cached embedding: same pooled output as torch EmbeddingBag, no lost update after training + flush."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from embedding.cache.simulate import CacheInputError
from embedding.cache.tiered import SlowTier, TieredEmbeddingBag

ROWS, DIM, LR = 400, 8, 0.1


def _batches(seed: int, steps: int = 15, bags: int = 8):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        lengths = rng.integers(1, 6, bags)
        idx = (rng.zipf(1.3, lengths.sum()) % ROWS).astype(np.int64)
        yield torch.from_numpy(idx), torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)]))


def _reference_step(ref: torch.nn.EmbeddingBag, mom: torch.Tensor, idx: torch.Tensor, optimizer: str) -> None:
    """Uncached update of the same rows: SGD, or row-wise Adagrad (momentum += mean(g²); w -= lr g / √momentum)."""
    g = ref.weight.grad.to_dense()
    ref.weight.grad = None
    rows = torch.unique(idx)
    with torch.no_grad():
        if optimizer == "sgd":
            ref.weight[rows] -= LR * g[rows]
        else:
            mom[rows] += g[rows].pow(2).mean(dim=1)
            ref.weight[rows] -= LR * g[rows] / (mom[rows].sqrt() + 1e-8).unsqueeze(1)


@pytest.mark.parametrize("policy", ["lru", "lfu"])
@pytest.mark.parametrize("optimizer", ["sgd", "rowwise_adagrad"])
@pytest.mark.parametrize("slow", ["mmap", "host", "direct"])
def test_training_matches_uncached_and_keeps_every_update(policy, optimizer, slow):
    w0 = np.random.default_rng(0).standard_normal((ROWS, DIM)).astype(np.float32)
    cached = TieredEmbeddingBag(w0, 40, policy=policy, slow=slow, optimizer=optimizer, lr=LR)
    ref = torch.nn.EmbeddingBag(ROWS, DIM, mode="sum", sparse=True)
    ref.weight.data.copy_(torch.from_numpy(w0))
    mom = torch.zeros(ROWS)
    try:
        for idx, off in _batches(1):
            out, want = cached(idx, off), ref(idx, off[:-1])
            torch.testing.assert_close(out, want)
            grad = torch.randn_like(out)
            (out * grad).sum().backward()
            (want * grad).sum().backward()
            cached.apply_gradients()
            _reference_step(ref, mom, idx, optimizer)
        assert cached.rows_written_back > 0  # evictions happened before the flush
        resident = cached.map.row_of_slot[cached.map.row_of_slot >= 0]
        evicted = np.setdiff1d(np.arange(ROWS), resident)  # their updates must be in the slow tier already
        torch.testing.assert_close(torch.from_numpy(cached.slow.to_numpy()[evicted]), ref.weight.detach()[evicted])
        cached.flush()
        torch.testing.assert_close(torch.from_numpy(cached.slow.to_numpy()), ref.weight.detach())
        assert cached.slow.bytes_written == cached.rows_written_back * DIM * 4
        if optimizer == "rowwise_adagrad":
            torch.testing.assert_close(torch.from_numpy(cached.slow.momentum), mom)
        assert cached.hits + cached.misses == cached.lookups
    finally:
        cached.close()


def test_inference_counts_compulsory_misses_when_table_fits():
    w0 = np.random.default_rng(2).standard_normal((ROWS, DIM)).astype(np.float32)
    cached = TieredEmbeddingBag(w0, ROWS)
    seen = set()
    for idx, off in _batches(3):
        cached(idx, off)
        seen |= set(idx.tolist())
    assert cached.misses == len(seen) and cached.slow.bytes_read == len(seen) * DIM * 4
    assert cached.slow.bytes_written == 0
    cached.close()


def test_direct_tier_reads_whole_blocks_and_round_trips_writes():
    w0 = np.random.default_rng(6).standard_normal((ROWS, DIM)).astype(np.float32)  # 32 B rows: 128 per block
    tier = SlowTier(w0, "direct")
    try:
        torch.testing.assert_close(tier.read(np.array([300, 0, 1])), torch.from_numpy(w0[[300, 0, 1]]))
        assert (tier.bytes_read, tier.device_bytes_read) == (3 * 32, 2 * 4096)  # blocks 0 and 2
        tier.read(np.array([0, 200]))  # blocks 0 and 1: adjacent, one request, two blocks
        assert tier.device_bytes_read == 4 * 4096
        new = np.full((2, DIM), 7.0, np.float32)
        tier.write(np.array([399, 5]), torch.from_numpy(new))
        want = w0.copy()
        want[[399, 5]] = 7.0
        np.testing.assert_array_equal(tier.to_numpy(), want)
        assert (tier.bytes_written, tier.device_bytes_written) == (2 * 32, 2 * 4096)
        assert tier.seconds_read > 0 and tier.seconds_written > 0
    finally:
        tier.close()


def test_bad_inputs_are_named():
    w0 = np.zeros((10, 4), np.float32)
    with pytest.raises(CacheInputError, match="cache_rows must be in"):
        TieredEmbeddingBag(w0, 0)
    with pytest.raises(CacheInputError, match="cache_rows must be in"):
        TieredEmbeddingBag(w0, 11)
    with pytest.raises(CacheInputError, match="policy 'lru' or 'lfu'"):
        TieredEmbeddingBag(w0, 4, policy="belady")
    with pytest.raises(CacheInputError, match="slow tier kind 'ssd'"):
        TieredEmbeddingBag(w0, 4, slow="ssd")
    m = TieredEmbeddingBag(w0, 2)
    with pytest.raises(CacheInputError, match="touches 3 distinct rows"):
        m(torch.tensor([1, 2, 3]), torch.tensor([0, 3]))
    with pytest.raises(CacheInputError, match="outside"):
        m(torch.tensor([10]), torch.tensor([0, 1]))
    m.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_fast_tier_over_pinned_host_matches_cpu():
    w0 = np.random.default_rng(4).standard_normal((ROWS, DIM)).astype(np.float32)
    gpu = TieredEmbeddingBag(w0, 40, slow="host", device="cuda", lr=LR)
    ref = torch.nn.EmbeddingBag(ROWS, DIM, mode="sum", sparse=True)
    ref.weight.data.copy_(torch.from_numpy(w0))
    for idx, off in _batches(5):
        out, want = gpu(idx, off), ref(idx, off[:-1])
        torch.testing.assert_close(out.cpu(), want)
        out.sum().backward()
        want.sum().backward()
        gpu.apply_gradients()
        _reference_step(ref, torch.zeros(ROWS), idx, "sgd")
    gpu.flush()
    torch.testing.assert_close(torch.from_numpy(gpu.slow.to_numpy()), ref.weight.detach())
