"""The FAST fidelity level reproduces, bit for bit, every ModeResult field it gave before its speed-ups.

tests/nmp/data/fast_reference.npz holds the results of the fast model at commit 18f67da (before the batch-parallel
and booking rewrites); any later change to the fast path must leave them exactly as they are. Regenerate only
when the model is meant to change: `PYTHONPATH=. .venv/bin/python tests/nmp/test_nmp_fast_reference.py --write`.
"""
import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.nmp_bench import sls_stream
from embedding.nmp import DramGeometry, LookupStream, ModeResult, NmpConfig, emulate_streams

REFERENCE = Path(__file__).parent / "data" / "fast_reference.npz"
GEO = {r: DramGeometry(dimms_per_channel=r // 2) for r in (2, 4, 8)}
ZIPF = {"alpha": 1.05}
# name: (NmpConfig overrides, stream overrides); every case runs 2 batches through emulate_streams (RankCache warm)
CASES: dict[str, tuple[dict, dict]] = {
    "2 ranks, colour": ({"geometry": GEO[2]}, {}),
    "4 ranks, random": ({"geometry": GEO[4], "mapping": "random"}, {}),
    "8 ranks, colour": ({"geometry": GEO[8]}, {}),
    "64 B vectors": ({}, {"vector_bytes": 64}),
    "256 B vectors, pooling 80": ({}, {"vector_bytes": 256, "pooling": 80}),
    "RankCache, Zipf": ({"rankcache_bytes": 16 << 10}, ZIPF),
    "RecNMP-opt": ({"rankcache_bytes": 16 << 10, "table_aware": True, "hot_threshold": 1}, ZIPF),
    "TensorDIMM": ({"mode": "tensordimm", "mapping": "skylake"}, {}),
    "strict packet sync": ({"packet_sync": "strict", "geometry": GEO[4]}, {}),
    "overlap packet sync, random": ({"packet_sync": "overlap", "geometry": GEO[4], "mapping": "random"}, {}),
    "2 ranks, random": ({"geometry": GEO[2], "mapping": "random"}, {}),
    "4 ranks, colour": ({"geometry": GEO[4]}, {}),
    "8 ranks, random": ({"geometry": GEO[8], "mapping": "random"}, {}),
    "2 ranks, RankCache 8K, random, Zipf": ({"geometry": GEO[2], "mapping": "random", "rankcache_bytes": 8 << 10},
                                            ZIPF),
    "8 ranks, RankCache 64K, table-aware": ({"geometry": GEO[8], "rankcache_bytes": 64 << 10, "table_aware": True},
                                            ZIPF),
    "TensorDIMM, RankCache": ({"mode": "tensordimm", "mapping": "skylake", "rankcache_bytes": 16 << 10}, ZIPF),
    "host only": ({"mode": "host", "geometry": GEO[4], "mapping": "random"}, {}),
    "SLS batch 4, 4 ranks, colour": ({"geometry": GEO[4]}, {"sls": True}),
    "SLS batch 4, 8 ranks, random": ({"geometry": GEO[8], "mapping": "random"}, {"sls": True}),
}


def case_streams(pooling: int = 20, vector_bytes: int = 128, alpha: float = 0.0, sls: bool = False
                 ) -> list[LookupStream]:
    """Two batches: tests/nmp/test_nmp_fast.small_stream (seeds 1, 2), or the paper's SLS batch of 4 samples."""
    if sls:
        return [sls_stream(4, vector_bytes, seed=s) for s in (1, 2)]
    out = []
    for seed in (1, 2):
        rng = np.random.default_rng(seed)
        tables, batch = 16, 8
        n = tables * batch * pooling
        if alpha:
            p = np.arange(1, 100_001, dtype=float) ** -alpha
            rows = rng.permutation(100_000)[rng.choice(100_000, n, p=p / p.sum())]
        else:
            rows = rng.integers(0, 100_000, n)
        bag = np.repeat(np.arange(tables * batch), pooling)
        out.append(LookupStream.from_arrays(np.repeat(np.arange(tables), batch * pooling), rows,
                                            (bag % batch) * tables + bag // batch, np.full(tables, 100_000),
                                            np.full(tables, vector_bytes)))
    return out


def case_results(name: str) -> dict[str, np.ndarray]:
    """Every ModeResult field of the case, keyed 'case|batch|mode|field'."""
    cfg_kw, stream_kw = CASES[name]
    results = emulate_streams(NmpConfig(fidelity="fast", **cfg_kw), case_streams(**stream_kw))
    out = {}
    for b, res in enumerate(results):
        for mode, r in res.items():
            for f in dataclasses.fields(ModeResult):
                out[f"{name}|{b}|{mode}|{f.name}"] = np.asarray(getattr(r, f.name))
    return out


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    with np.load(REFERENCE) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("name", list(CASES))
def test_fast_model_is_bit_identical_to_the_stored_reference(reference, name):
    got = case_results(name)
    want = {k: v for k, v in reference.items() if k.split("|")[0] == name}
    assert want, f"no stored reference for case {name!r}"
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert got[k].dtype.kind == v.dtype.kind and np.array_equal(got[k], v), k


if __name__ == "__main__" and "--write" in sys.argv:
    REFERENCE.parent.mkdir(exist_ok=True)
    data = {k: v for name in CASES for k, v in case_results(name).items()}
    np.savez_compressed(REFERENCE, **data)
    print(f"wrote {len(data)} arrays to {REFERENCE}")
