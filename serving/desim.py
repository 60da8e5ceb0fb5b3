"""A discrete-event model (SimPy) of the server: LoadGen-like Poisson arrivals, the same splitting and batching
rules (`serving.server.split_query`, `form_batch`), `workers` servers, and service times drawn from a model fitted
to *measured* service times.

Service model: batch service time = (a + b·samples) × r, with a, b a least-squares fit to measured (samples,
seconds) pairs from real LoadGen runs and r drawn from the measured ratios seconds / fit (the spread, contention
included). It is trusted for what-ifs only after `simulate` reproduces measured p99 at several loads.

What-if: the embedding stage's share e(n) of a batch's service time (measured by timing the lookups alone against
the whole DLRM forward) is divided by a speedup s (the NMP emulator's) — service × (1 − e + e/s); the rest of the
service time stays measured. Only that embedding share is emulated.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import simpy

from .config import ServerConfig
from .server import Piece, Request, form_batch, split_query

__all__ = ["ServiceModel", "simulate", "bounded_qps"]


@dataclass
class ServiceModel:
    a: float
    b: float
    ratios: np.ndarray
    embedding_share: Callable[[int], float] | None = None
    embedding_speedup: float = 1.0

    @classmethod
    def fit(cls, samples: np.ndarray, seconds: np.ndarray) -> ServiceModel:
        samples, seconds = np.asarray(samples, float), np.asarray(seconds, float)
        if np.unique(samples).size > 1:
            b, a = np.polyfit(samples, seconds, 1)
        else:
            a, b = 0.0, float(np.median(seconds / samples))
        if a < 0 or b < 0:  # keep the fit physical: a proportional model through the origin
            a, b = 0.0, float(np.sum(seconds * samples) / np.sum(samples ** 2))
        return cls(a=float(a), b=float(b), ratios=seconds / (a + b * samples))

    def draw(self, n: int, rng: np.random.Generator) -> float:
        t = (self.a + self.b * n) * float(self.ratios[rng.integers(self.ratios.size)])
        if self.embedding_share is not None and self.embedding_speedup != 1.0:
            e = self.embedding_share(n)
            t *= 1 - e + e / self.embedding_speedup
        return t


def simulate(server: ServerConfig, qps: float, sizes: np.ndarray, service: ServiceModel, queries: int = 20000,
             seed: int = 0, warmup: int = 500, percentiles: tuple[float, ...] = (50, 90, 95, 99, 99.9)) -> dict:
    """Latency percentiles (ms) of `queries` simulated queries (the first `warmup` dropped)."""
    env = simpy.Environment()
    rng = np.random.default_rng(seed)
    dq: deque[Piece] = deque()
    arrived = [env.event()]
    latency = np.full(queries, np.nan)
    born = np.zeros(queries)
    form = simpy.Resource(env, capacity=1)
    max_wait = server.max_wait_ms / 1e3

    def arrivals():
        for i in range(queries):
            yield env.timeout(rng.exponential(1 / qps))
            n = int(sizes[rng.integers(sizes.size)])
            r = Request(i, i, n, 0)
            born[i] = env.now
            parts = split_query(n, server.split)
            r.pieces_left = len(parts)
            dq.extend(Piece(r, o, m) for o, m in parts)
            ev, arrived[0] = arrived[0], env.event()
            ev.succeed()

    def worker():
        while True:
            with form.request() as lock:
                yield lock
                while not dq:
                    yield arrived[0]
                batch = form_batch(dq, server.max_batch)
                if server.max_batch > 0 and server.max_wait_ms != 0:
                    deadline = born[batch[0].request.query] + max_wait if max_wait > 0 else None
                    samples = sum(p.n for p in batch)
                    while samples < server.max_batch:
                        if dq:
                            if samples + dq[0].n > server.max_batch:
                                break
                            more = form_batch(dq, server.max_batch - samples)
                            batch += more
                            samples += sum(p.n for p in more)
                            continue
                        if deadline is None:
                            break  # static batching never idles forever in the model: a flush at the queue's end
                        left = deadline - env.now
                        if left <= 0:
                            break
                        yield arrived[0] | env.timeout(left)
            yield env.timeout(service.draw(sum(p.n for p in batch), rng))
            for p in batch:
                p.request.pieces_left -= 1
                if p.request.pieces_left == 0:
                    latency[p.request.query] = env.now - born[p.request.query]

    env.process(arrivals())
    for _ in range(server.workers):
        env.process(worker())
    env.run()
    lat = latency[warmup:]
    lat = lat[~np.isnan(lat)]
    return {f"p{p:g}_ms": 1e3 * float(np.percentile(lat, p)) for p in percentiles} | {
        "completed": int(lat.size)}


def bounded_qps(server: ServerConfig, sizes: np.ndarray, service: ServiceModel, bound_ms: float, percentile: float,
                start: float, steps: int = 12, queries: int = 20000) -> float:
    """Highest QPS whose simulated percentile meets the bound: bracket by doubling, then `steps` bisections."""
    key = f"p{percentile:g}_ms"

    def ok(q: float) -> bool:
        return simulate(server, q, sizes, service, queries, percentiles=(percentile,))[key] <= bound_ms

    lo, hi = 0.0, start
    for _ in range(20):
        if not ok(hi):
            break
        lo, hi = hi, hi * 2
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo
