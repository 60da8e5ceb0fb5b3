"""A discrete-event model (SimPy) of the server: LoadGen-like Poisson arrivals (or a bursty on-off process), the
same splitting and batching rules (`serving.server.split_query`, `form_batch`), `workers` servers, and service
times resampled from *measured* batches.

Service model (`ServiceModel.fit`): the measured (batch samples, seconds) pairs are kept; a batch of n samples
draws the service time of a measured batch from n's neighbourhood (the `neighbours` measured batches nearest in
size), scaled from that batch's size to n by a least-squares line a + b·n. The spread, contention with the other
workers and the machine's load included, is the measured one; the line only bridges sizes. It is trusted for
what-ifs only after `simulate_runs` reproduces measured p99 at several loads.

Time order (`ServiceModel.with_trace`): on a shared 2-core machine slow batches come in spells (another process
holds a core for a while), and i.i.d. draws break those spells up, which shortens the queue's tail. With the
measured batches' start times, each measured batch gives a slowdown, its time ÷ the line at its size, on the
runs' own timeline (the runs laid end to end); a simulated batch starting at time t takes the slowdown of the
measured batch last started before (offset + t) on that timeline, offset uniform at random per simulated run
(a block bootstrap of the measured slowdown process), times the line at its own size.

Like a LoadGen run, `simulate_runs` serves a run of the measured run's length from an empty queue and takes the
percentile over all its queries (no warm-up dropped), the median over replications.

Path outside service (`PathModel.from_stats`): what the queue leaves out, taken from the server's own records of the
runs the model is fitted to, each resampled with replacement: per batch a dispatch lag between the moment the
batching rule lets a batch start and the start of its service (thread wake-ups, the lock hand-over; the worker is
held meanwhile), and per completed query the completion path from the end of its batch, or of the previous
query's completion in the same batch, to the return of LoadGen's QuerySamplesComplete (the worker is held too, as
the real worker calls it before it takes the next batch). The server cannot see LoadGen's own delay between a
query's scheduled time and the SUT's issue callback query by query; its mean is measured per run as LoadGen's mean
latency minus the server's mean sojourn and added to every query's latency (`issue`, a measured mean, not a
distribution). With no path (or all-zero records) the model is the bare queue (M/D/c for a fixed service).

Arrivals: `poisson` (what LoadGen's Server scenario makes: it has no other arrival process) or `onoff`, a two-state
Markov-modulated Poisson process (MMPP-2): an on state at `burst` × the mean rate for a fraction `on_fraction` of
the time (exponential periods of mean `on_ms`), an off state at the rate that keeps the mean at `qps`.

What-if: the embedding stage's share e(n) of a batch's service time (measured by timing the lookups alone against
the whole DLRM forward) is divided by a speedup s — service × (1 − e + e/s); s comes from the NMP emulator or from
a cache's hit rate and the measured tier speeds (s < 1: slower); the rest of the service time stays measured.
Only that embedding share is emulated.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import simpy

from .config import ServerConfig
from .server import Piece, Request, form_batch, split_query

__all__ = ["Arrivals", "ServiceModel", "PathModel", "simulate", "simulate_runs", "bounded_qps", "trust_verdict"]


@dataclass
class Arrivals:
    """The arrival process of the model (see the module docstring)."""

    kind: str = "poisson"
    burst: float = 4.0
    """onoff: rate in the on state ÷ the mean rate (> 1)"""
    on_fraction: float = 0.2
    """onoff: long-run share of time in the on state (burst × on_fraction must be < 1)"""
    on_ms: float = 50.0
    """onoff: mean length of an on period"""

    def gaps(self, qps: float, n: int, rng: np.random.Generator) -> np.ndarray:
        """n inter-arrival times (s) with mean rate qps."""
        if self.kind == "poisson":
            return rng.exponential(1 / qps, size=n)
        if self.burst * self.on_fraction >= 1 or self.burst <= 1 or not 0 < self.on_fraction < 1:
            raise ValueError(f"onoff arrivals need burst > 1, 0 < on_fraction < 1 and burst × on_fraction < 1 "
                             f"(got {self.burst}, {self.on_fraction})")
        rate = {True: self.burst * qps, False: (1 - self.burst * self.on_fraction) / (1 - self.on_fraction) * qps}
        mean_len = {True: self.on_ms / 1e3, False: self.on_ms / 1e3 * (1 - self.on_fraction) / self.on_fraction}
        out, t, last, on = np.empty(n), 0.0, 0.0, bool(rng.random() < self.on_fraction)
        switch = rng.exponential(mean_len[on])
        i = 0
        while i < n:
            step = rng.exponential(1 / rate[on]) if rate[on] > 0 else np.inf
            if t + step < switch:  # memoryless: an arrival before the state changes
                t += step
                out[i], last, i = t - last, t, i + 1
            else:
                t, on = switch, not on
                switch = t + rng.exponential(mean_len[on])
        return out


@dataclass
class ServiceModel:
    a: float
    b: float
    sizes: np.ndarray
    """measured batch sizes (samples), ascending"""
    seconds: np.ndarray
    """their measured service times"""
    neighbours: int = 32
    embedding_share: Callable[[int], float] | None = None
    embedding_speedup: float = 1.0
    trace_t: np.ndarray | None = None
    """time order: measured batches' start times on the runs' joint timeline (s), ascending"""
    trace_f: np.ndarray | None = None
    """their slowdowns: measured time ÷ the line at their size"""
    period: float = 0.0
    """the joint timeline's length (s)"""

    @classmethod
    def fit(cls, samples: np.ndarray, seconds: np.ndarray, neighbours: int = 32) -> ServiceModel:
        samples, seconds = np.asarray(samples, float), np.asarray(seconds, float)
        if np.unique(samples).size > 1:
            b, a = np.polyfit(samples, seconds, 1)
        else:
            a, b = 0.0, float(np.median(seconds / samples))
        if a < 0 or b < 0:  # keep the line physical: proportional, through the origin
            a, b = 0.0, float(np.sum(seconds * samples) / np.sum(samples ** 2))
        order = np.argsort(samples, kind="stable")
        return cls(a=float(a), b=float(b), sizes=samples[order], seconds=seconds[order], neighbours=neighbours)

    @classmethod
    def fixed(cls, seconds: float) -> ServiceModel:
        """A deterministic service of `seconds` per batch whatever its size (for checks against M/D/c)."""
        return cls(a=seconds, b=0.0, sizes=np.ones(1), seconds=np.full(1, seconds))

    def with_trace(self, runs: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> ServiceModel:
        """Time order from measured runs, each (batch start times s, batch samples, service seconds)."""
        ts, fs, shift = [], [], 0.0
        for start, n, sec in runs:
            start, n, sec = (np.asarray(x, float) for x in (start, n, sec))
            if start.size == 0:
                continue
            order = np.argsort(start, kind="stable")
            t = start[order] - start[order][0]
            ts.append(t + shift)
            fs.append(sec[order] / np.maximum(self.a + self.b * n[order], 1e-12))
            shift += float(t[-1] + sec[order][-1])
        if not ts:
            raise ValueError("no measured batches to take the time order from")
        self.trace_t, self.trace_f, self.period = np.concatenate(ts), np.concatenate(fs), shift
        return self

    def _line(self, n: float) -> float:
        return self.a + self.b * n

    def draw(self, n: int, rng: np.random.Generator, at: float | None = None) -> float:
        """A service time for a batch of n samples; `at`: its start on the joint timeline (time order)."""
        if self.trace_t is not None and at is not None:
            j = max(0, int(np.searchsorted(self.trace_t, at % self.period, side="right")) - 1)
            t = float(self.trace_f[j]) * self._line(n)
        else:
            k = self.sizes.size
            m = min(self.neighbours, k)
            i = int(np.searchsorted(self.sizes, n))
            lo = min(max(0, i - m // 2), k - m)
            j = lo + int(rng.integers(m))
            t = float(self.seconds[j]) * self._line(n) / max(self._line(self.sizes[j]), 1e-12)
        if self.embedding_share is not None and self.embedding_speedup != 1.0:
            e = self.embedding_share(n)
            t *= 1 - e + e / self.embedding_speedup
        return t


@dataclass
class PathModel:
    """Measured per-batch dispatch lags and per-query completion paths (seconds), resampled (module docstring)."""

    dispatch: np.ndarray
    complete: np.ndarray
    issue: float = 0.0
    """seconds added to every query's latency: LoadGen's mean issue delay (measured mean, see the docstring)"""

    @classmethod
    def from_stats(cls, stats: list, issue: float = 0.0) -> PathModel:
        """From the `ServerStats` of measured runs (their `dispatch_s` and `complete_s` records)."""
        d = np.concatenate([np.asarray(x.dispatch_s, float) for x in stats]) if stats else np.zeros(0)
        c = np.concatenate([np.asarray(x.complete_s, float) for x in stats]) if stats else np.zeros(0)
        if d.size == 0 or c.size == 0:
            raise ValueError("no dispatch or completion records in the measured runs")
        return cls(dispatch=d, complete=c, issue=max(0.0, issue))

    def draw_dispatch(self, rng: np.random.Generator) -> float:
        return float(self.dispatch[rng.integers(self.dispatch.size)])

    def draw_complete(self, rng: np.random.Generator) -> float:
        return float(self.complete[rng.integers(self.complete.size)])


def simulate(server: ServerConfig, qps: float, sizes: np.ndarray, service: ServiceModel, queries: int = 20000,
             seed: int = 0, warmup: int = 500, percentiles: tuple[float, ...] = (50, 90, 95, 99, 99.9),
             arrivals: Arrivals | None = None, path: PathModel | None = None,
             trace_offset: float | None = None) -> dict:
    """Latency percentiles (ms) of `queries` simulated queries (the first `warmup` dropped); `path`: the measured
    path outside service, added per batch and per query (None: the bare queue); `trace_offset`: where on the
    time order's timeline the run starts (None: at random; 0: a replay of the measured run's own timeline)."""
    env = simpy.Environment()
    rng = np.random.default_rng(seed)
    gaps = (arrivals or Arrivals()).gaps(qps, queries, rng)
    offset = float(rng.uniform(0, service.period)) if service.trace_t is not None else 0.0
    offset = offset if trace_offset is None else trace_offset
    dq: deque[Piece] = deque()
    arrived = [env.event()]
    finished = [False]
    latency = np.full(queries, np.nan)
    born = np.zeros(queries)
    form = simpy.Resource(env, capacity=1)
    max_wait = server.max_wait_ms / 1e3

    def arrivals():
        for i in range(queries):
            yield env.timeout(gaps[i])
            n = int(sizes[rng.integers(sizes.size)])
            r = Request(i, i, n, 0)
            born[i] = env.now
            parts = split_query(n, server.split)
            r.pieces_left = len(parts)
            dq.extend(Piece(r, o, m) for o, m in parts)
            if i == queries - 1:
                finished[0] = True
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
                        if deadline is None:  # static: wait until full; the last arrival flushes, as LoadGen
                            if finished[0]:
                                break
                            yield arrived[0]
                            continue
                        left = deadline - env.now
                        if left <= 0:
                            break
                        yield arrived[0] | env.timeout(left)
            if path is not None:
                yield env.timeout(path.draw_dispatch(rng))
            n = sum(p.n for p in batch)
            yield env.timeout(service.draw(n, rng) if service.trace_t is None else service.draw(n, rng, offset + env.now))
            for p in batch:
                p.request.pieces_left -= 1
                if p.request.pieces_left == 0:
                    if path is not None:
                        yield env.timeout(path.draw_complete(rng))
                    latency[p.request.query] = env.now - born[p.request.query] + (path.issue if path else 0.0)

    env.process(arrivals())
    for _ in range(server.workers):
        env.process(worker())
    env.run()
    lat = latency[warmup:]
    lat = lat[~np.isnan(lat)]
    return {f"p{p:g}_ms": 1e3 * float(np.percentile(lat, p)) for p in percentiles} | {
        "completed": int(lat.size)}


def simulate_runs(server: ServerConfig, qps: float, sizes: np.ndarray, service: ServiceModel, queries: int,
                  runs: int = 21, seed: int = 0, percentiles: tuple[float, ...] = (50, 99),
                  arrivals: Arrivals | None = None, path: PathModel | None = None,
                  trace_offset: float | None = None) -> dict:
    """Like LoadGen: runs of `queries` queries from an empty queue, percentiles over all of a run's queries; the
    median over `runs` replications, and each percentile's 5–95% band of single runs."""
    per = [simulate(server, qps, sizes, service, queries, seed=seed + r, warmup=0, percentiles=percentiles,
                    arrivals=arrivals, path=path, trace_offset=trace_offset) for r in range(runs)]
    out: dict = {}
    for p in percentiles:
        vals = np.array([x[f"p{p:g}_ms"] for x in per])
        out[f"p{p:g}_ms"] = float(np.median(vals))
        out[f"p{p:g}_band_ms"] = (float(np.percentile(vals, 5)), float(np.percentile(vals, 95)))
    return out


def bounded_qps(server: ServerConfig, sizes: np.ndarray, service: ServiceModel, bound_ms: float, percentile: float,
                start: float, steps: int = 12, queries: int = 20000, arrivals: Arrivals | None = None,
                path: PathModel | None = None) -> float:
    """Highest QPS whose simulated percentile meets the bound: bracket by doubling (or halving, at most 20 times:
    0 if none meets it), then `steps` bisections."""
    key = f"p{percentile:g}_ms"

    def ok(q: float) -> bool:
        return simulate(server, q, sizes, service, queries, percentiles=(percentile,), arrivals=arrivals,
                        path=path)[key] <= bound_ms

    lo, hi = start, start
    if ok(start):
        for _ in range(20):
            hi = lo * 2
            if not ok(hi):
                break
            lo = hi
    else:
        for _ in range(20):
            lo = hi / 2
            if ok(lo):
                break
            hi = lo
        else:
            return 0.0
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def trust_verdict(points: list[dict], tolerance: float = 0.15) -> tuple[bool, list[str]]:
    """The model is trusted when its p99 is within `tolerance` of the measured p99 at every point (each point:
    measured_p99_ms, model_p99_ms, model_p99_band_ms). Also one label per point; a point outside the tolerance
    but inside the model's 5–95% band of single runs is said to be so (the verdict stays: not trusted)."""
    if not points:
        return False, []
    labels, ok = [], []
    for p in points:
        err = p["model_p99_ms"] / p["measured_p99_ms"] - 1
        lo, hi = p["model_p99_band_ms"]
        ok.append(abs(err) <= tolerance)
        if ok[-1]:
            labels.append(f"within {100 * tolerance:g}% ({100 * err:+.1f}%)")
        elif lo <= p["measured_p99_ms"] <= hi:
            labels.append(f"OUTSIDE {100 * tolerance:g}% ({100 * err:+.1f}%), but inside the model's 5–95% band "
                          "of single runs")
        else:
            labels.append(f"OUTSIDE {100 * tolerance:g}% ({100 * err:+.1f}%) and outside the model's band")
    return all(ok), labels
