"""Queries like production: a query is a set of samples (user–item pairs) for one request.

Sizes come from one of four rules:
- fixed: every query has `mean` samples.
- uniform: an integer in [low, high] (MLPerf DLRM's `--samples-to-aggregate-min/max` option).
- lognormal: DeepRecInfra's heavy-tailed sizes (harvard-acc/DeepRecSys, loadGenerator.py: numpy lognormal, then
  clipped to [1, max_mini_batch_size]); here parametrised by the mean size and sigma (mu = log(mean) - sigma²/2).
  The per-model parameters of the DeepRecSys paper are not reproduced here (not verified): presets pick a mean
  and sigma and say so.
- mlperf: MLPerf DLRM's aggregation rule (mlcommons/inference, recommendation/dlrm/pytorch/python/criteo.py:
  each LoadGen sample aggregates `quantile[randint(0, len(quantile))]` consecutive user–item pairs, inverse
  transform sampling of the quantile file `tools/dist_quantile.txt`). The quantiles below are the 20-entry list
  at 0.05 granularity quoted by mlcommons/inference_policies (issue mlcommons/inference#1975) and used as the
  example in criteo.py; mean 270, range 100–700 (issue mlcommons/inference#784: "100–700 ... average around 270").
  The shipped dist_quantile.txt itself could not be read from here; if it is finer grained the sizes differ in
  detail, not in range or mean.

Each sample's sparse features come from the project's workload generator (`embedding.generate`): one pool of
`pool_samples` samples, and a query is a contiguous run of the pool, so its CSR slice is one cut per table.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from embedding.batch import Batch
from embedding.generate import WorkloadGenerator
from embedding.spec import WorkloadSpec

from .config import QueryConfig

__all__ = ["MLPERF_DLRM_QUANTILES", "query_sizes", "QuerySet", "SamplePool"]

MLPERF_DLRM_QUANTILES = np.array([100, 100] + [200] * 12 + [300, 300, 400, 500, 600, 700], dtype=np.int64)


def query_sizes(cfg: QueryConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """n query sizes (samples per query) drawn by the configured rule."""
    if cfg.size == "fixed":
        return np.full(n, int(cfg.mean), dtype=np.int64)
    if cfg.size == "uniform":
        return rng.integers(cfg.low, cfg.high + 1, size=n, dtype=np.int64)
    if cfg.size == "lognormal":
        mu = np.log(cfg.mean) - cfg.sigma ** 2 / 2
        return np.clip(np.rint(rng.lognormal(mu, cfg.sigma, size=n)), 1, cfg.high).astype(np.int64)
    return MLPERF_DLRM_QUANTILES[rng.integers(0, MLPERF_DLRM_QUANTILES.size, size=n)]


@dataclass(frozen=True)
class QuerySet:
    """The queries LoadGen draws from: query i covers pool samples [starts[i], starts[i] + sizes[i])."""

    sizes: np.ndarray
    starts: np.ndarray

    @classmethod
    def build(cls, cfg: QueryConfig, pool_samples: int) -> QuerySet:
        rng = np.random.default_rng([cfg.seed, 0x5E4E])
        sizes = np.minimum(query_sizes(cfg, cfg.count, rng), pool_samples)
        starts = rng.integers(0, pool_samples - sizes + 1)
        return cls(sizes=sizes, starts=starts.astype(np.int64))


class SamplePool:
    """`samples` generated samples of a workload (sparse ids, dense features) and cheap gathers of runs of them."""

    def __init__(self, spec: WorkloadSpec, samples: int) -> None:
        self.spec = replace(spec, batch_size=samples, num_batches=1)
        self.batch = WorkloadGenerator(self.spec).batch(0)
        self.samples = samples
        self._off = self.batch.offsets

    def gather(self, pieces: list[tuple[int, int]]) -> Batch:
        """One Batch holding the pool samples [start, start + n) of each (start, n) piece, in order."""
        b, B, off = self.batch, self.samples, self._off
        T = b.num_tables
        lengths = np.concatenate([b.lengths[:, s:s + n] for s, n in pieces], axis=1)
        idx = [b.indices[off[t * B + s]:off[t * B + s + n]] for t in range(T) for s, n in pieces]
        dense = np.concatenate([b.dense[s:s + n] for s, n in pieces])
        labels = np.concatenate([b.labels[s:s + n] for s, n in pieces])
        return Batch(lengths=lengths, indices=np.concatenate(idx), dense=dense, labels=labels)
