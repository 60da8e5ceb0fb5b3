"""Shared trace makers for the cache tests: small, seeded Zipf and uniform key streams."""
from __future__ import annotations

import numpy as np
import pytest


def zipf_keys(n: int, num_keys: int, alpha: float, seed: int) -> np.ndarray:
    """Bounded Zipf(alpha) over num_keys keys, hot keys scattered by a permutation."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(1.0 / np.arange(1, num_keys + 1) ** alpha)
    ranks = np.searchsorted(cdf / cdf[-1], rng.random(n))
    return rng.permutation(num_keys)[ranks].astype(np.int64)


TRACES = {
    "zipf0.8": lambda: zipf_keys(6000, 800, 0.8, 1),
    "zipf1.2": lambda: zipf_keys(6000, 2000, 1.2, 2),
    "uniform": lambda: np.random.default_rng(3).integers(0, 400, 5000).astype(np.int64),
}


@pytest.fixture(params=sorted(TRACES))
def trace(request) -> np.ndarray:
    return TRACES[request.param]()


@pytest.fixture
def make_zipf():
    return zipf_keys
