"""Packing and local search over two cost models at once.

Every shard has a cost vector (our model's seconds / our lower bound, TorchRec's seconds / TorchRec's lower bound);
a rank's load is the sum of its shards' vectors and the objective is the largest component over all ranks, i.e.
the larger of the plan's two ratios to their lower bounds. Minimising it keeps a plan good on both grounds.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from embedding.spec import TableSpec
from sharding.cost import CostModel
from sharding.packing import Bins
from sharding.plan import ShardingType
from sharding.trec_cost import TorchRecCostModel

__all__ = ["Scorer", "Piece", "VecBins", "local_search"]


class Scorer:
    """Cost vectors and memory of shards under both models, scaled by `scale` (one divisor per model)."""

    def __init__(self, cost: CostModel, trec: TorchRecCostModel, scale: tuple[float, float]) -> None:
        self.cost, self.trec = cost, trec
        self.scale = np.array([1.0 / max(scale[0], 1e-30), 1.0 / max(scale[1], 1e-30)])
        self._memo: dict[tuple, tuple[np.ndarray, dict[str, float]]] = {}

    def shard(self, t: TableSpec, st: ShardingType, rows: int, cols: int, tier: str, cf: float,
              ) -> tuple[np.ndarray, dict[str, float]]:
        key = (t.name, st, rows, cols, tier, cf)
        if key not in self._memo:
            v = np.array([self.cost.shard_cost(t, st, rows, cols, tier, cf).total,
                          self.trec.shard_cost(t, st, rows, cols, tier, cf).total]) * self.scale
            self._memo[key] = (v, self.cost.shard_memory(t, st, rows, cols, tier, cf))
        return self._memo[key]


@dataclass
class Piece:
    """A movable shard (TW, or one column block of CW) with its scaled cost vector."""

    table: str
    vec: np.ndarray  # (2,)
    mem: dict[str, float]
    rank: int = -1

    @property
    def score(self) -> float:
        return float(self.vec.max())


class VecBins(Bins):
    """`Bins` memory bookkeeping plus a (ranks, 2) vector load."""

    def __init__(self, topology) -> None:  # noqa: ANN001 (Topology; avoids an import cycle in type checkers)
        super().__init__(topology)
        self.vload = np.zeros((topology.world_size, 2))

    def put(self, rank: int, vec: np.ndarray, mem: dict[str, float]) -> None:
        self.vload[rank] += vec
        self.add(rank, 0.0, mem)

    def take(self, rank: int, vec: np.ndarray, mem: dict[str, float]) -> None:
        self.vload[rank] -= vec
        self.remove(rank, 0.0, mem)

    def best_rank(self, vec: np.ndarray, mem: dict[str, float], exclude: set[int] | None = None) -> int:
        """Rank with room whose load after adding `vec` has the smallest largest component; -1 if none."""
        ok = self.fits(mem)
        if exclude:
            ok[list(exclude)] = False
        if not ok.any():
            return -1
        after = (self.vload + vec).max(axis=1)
        return int(np.argmin(np.where(ok, after + 1e-9 * self.vload.sum(axis=1), np.inf)))

    def objective(self) -> float:
        return float(self.vload.max())


def local_search(bins: VecBins, pieces: list[Piece], deadline: float, max_iters: int = 20000) -> None:
    """Move or swap pieces off the rank holding the largest load component while that component drops.
    A table's column blocks stay on distinct ranks."""
    if not pieces:
        return
    vecs = np.array([p.vec for p in pieces])  # (P, 2)
    ranks = np.array([p.rank for p in pieces])
    ids: dict[str, int] = {}
    tables = np.array([ids.setdefault(p.table, len(ids)) for p in pieces])
    load = bins.vload
    for it in range(max_iters):
        if it % 8 == 0 and time.perf_counter() > deadline:
            break
        per_rank = load.max(axis=1)
        r = int(np.argmax(per_rank))
        top = per_rank[r]
        on_r = np.flatnonzero(ranks == r)
        order = on_r[np.argsort(-vecs[on_r].max(axis=1))]
        done = False
        for i in order:
            p = pieces[i]
            ok = bins.fits(p.mem)
            ok[r] = False
            ok[ranks[tables == tables[i]]] = False
            after = (load + vecs[i]).max(axis=1)
            cand = np.where(ok, after, np.inf)
            s = int(np.argmin(cand))
            if cand[s] < top * (1 - 1e-9):
                bins.take(r, p.vec, p.mem)
                bins.put(s, p.vec, p.mem)
                ranks[i] = p.rank = s
                done = True
                break
        if done:
            continue
        for i in order:
            delta = vecs[i] - vecs  # (P, 2): what the other rank gains, r loses
            new_other = (load[ranks] + delta).max(axis=1)
            new_r = (load[r] - delta).max(axis=1)
            obj = np.maximum(new_other, new_r)
            bad = (ranks == r) | (tables == tables[i]) | (delta.max(axis=1) <= 0)
            obj[bad] = np.inf
            for j in np.argsort(obj)[:8]:
                if obj[j] >= top * (1 - 1e-9):
                    break
                s, pi, pj = int(ranks[j]), pieces[i], pieces[j]
                if np.any(ranks[(tables == tables[j]) & (np.arange(len(pieces)) != j)] == r) or \
                        np.any(ranks[(tables == tables[i]) & (np.arange(len(pieces)) != i)] == s):
                    continue
                bins.take(r, pi.vec, pi.mem)
                bins.take(s, pj.vec, pj.mem)
                if bins.fits_rank(s, pi.mem) and bins.fits_rank(r, pj.mem):
                    bins.put(s, pi.vec, pi.mem)
                    bins.put(r, pj.vec, pj.mem)
                    ranks[i], ranks[j] = pi.rank, pj.rank = s, r
                    done = True
                    break
                bins.put(r, pi.vec, pi.mem)
                bins.put(s, pj.vec, pj.mem)
            if done:
                break
        if not done:
            break
