"""The server: a request queue, dynamic batching, query splitting and a pool of inference workers.

A query of n samples becomes pieces of at most `split` samples (one piece when split = 0). Workers pull: a free
worker takes the batch-forming lock, takes pieces from the queue head while they fit `max_batch` samples (a piece
larger than max_batch goes alone), and, if the batch is not full, waits for more until `max_wait_ms` after the
batch's first piece arrived (max_wait < 0: until full, i.e. static batching; LoadGen's flush releases the rest).
max_batch = 0 takes exactly one piece: with split = 0 and one worker that is the naive server (one query at a
time). A query completes towards LoadGen when its last piece has been served.

Workers are threads that form batches; each runs its batch itself (`worker_kind=thread`: torch's kernels release
the GIL) or hands it to a worker process of its own (`worker_kind=process`, serving/procpool.py) and waits.

Besides each batch's service time the server records what a queue model leaves out (`ServerStats`): per batch the
dispatch lag, from the moment the batching rule lets the batch start (a worker free and the batch closed: its
first piece arrived, the next piece would not fit, or the wait deadline passed) to the start of its service (thread
wake-ups, the lock hand-over); per query the completion path, from the end of the batch (or the previous query's
completion in the same batch) to the return of `complete` (LoadGen's QuerySamplesComplete); and per query its
sojourn in the server, from the issue callback to that return.

GPU offload (`gpu_threshold` > 0, with an `offload` service on a CUDA device): queries of more than `gpu_threshold`
samples skip the CPU queue and go whole to a GPU lane served by one more thread (batched up to max_batch samples).
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .config import ServerConfig

__all__ = ["Request", "Piece", "split_query", "form_batch", "Server", "ServerStats", "Service"]


@dataclass
class Request:
    response_id: int
    query: int
    size: int
    arrived_ns: int
    pieces_left: int = 0


@dataclass
class Piece:
    request: Request
    offset: int
    n: int


Service = Callable[[list[Piece]], None]
"""Runs one batch of pieces (the real DLRM, a worker process's, the GPU's, or the validation's timed wait)."""


def split_query(size: int, split: int) -> list[tuple[int, int]]:
    """(offset, n) pieces of a query of `size` samples, each at most `split` (split = 0: one piece)."""
    if split <= 0 or size <= split:
        return [(0, size)]
    return [(o, min(split, size - o)) for o in range(0, size, split)]


def form_batch(queue: deque, max_batch: int) -> list[Piece]:
    """Take pieces from the head of `queue` while they fit max_batch samples (always at least one piece;
    max_batch = 0: exactly one piece)."""
    batch = [queue.popleft()]
    if max_batch <= 0:
        return batch
    total = batch[0].n
    while queue and total + queue[0].n <= max_batch:
        piece = queue.popleft()
        batch.append(piece)
        total += piece.n
    return batch


@dataclass
class ServerStats:
    """Per batch: samples, pieces, service seconds, dispatch lag; per piece: queue wait seconds; per query: the
    completion path (see the module docstring)."""

    batch_samples: list[int] = field(default_factory=list)
    batch_pieces: list[int] = field(default_factory=list)
    service_s: list[float] = field(default_factory=list)
    start_s: list[float] = field(default_factory=list)
    """each batch's service start (perf_counter seconds): when in the run the service times were measured"""
    wait_s: list[float] = field(default_factory=list)
    dispatch_s: list[float] = field(default_factory=list)
    complete_s: list[float] = field(default_factory=list)
    sojourn_s: list[float] = field(default_factory=list)
    offloaded_queries: int = 0
    queries: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def summary(self) -> dict:
        def q(a, p):
            return float(np.percentile(a, p)) if len(a) else float("nan")
        bs, sv, wt = np.asarray(self.batch_samples), np.asarray(self.service_s), np.asarray(self.wait_s)
        return {"batches": int(bs.size), "batch_samples_mean": float(bs.mean()) if bs.size else 0.0,
                "batch_samples_p50": q(bs, 50), "batch_samples_max": int(bs.max()) if bs.size else 0,
                "batch_pieces_mean": float(np.mean(self.batch_pieces)) if self.batch_pieces else 0.0,
                "service_ms_mean": 1e3 * float(sv.mean()) if sv.size else 0.0, "service_ms_p50": 1e3 * q(sv, 50),
                "service_ms_p99": 1e3 * q(sv, 99), "queue_wait_ms_mean": 1e3 * float(wt.mean()) if wt.size else 0.0,
                "queue_wait_ms_p50": 1e3 * q(wt, 50), "queue_wait_ms_p99": 1e3 * q(wt, 99),
                "dispatch_ms_mean": 1e3 * float(np.mean(self.dispatch_s)) if self.dispatch_s else 0.0,
                "complete_ms_mean": 1e3 * float(np.mean(self.complete_s)) if self.complete_s else 0.0,
                "sojourn_ms_mean": 1e3 * float(np.mean(self.sojourn_s)) if self.sojourn_s else 0.0,
                "offloaded_queries": self.offloaded_queries, "queries": self.queries}


class Server:
    """Queue + batching + workers around `service(pieces)`, which runs one batch (pieces of queries).

    `complete(request)` is called once per query when its last piece is done (from a worker thread)."""

    def __init__(self, cfg: ServerConfig, service: Service | list[Service],
                 complete: Callable[[Request], None] | None = None, offload: Service | None = None) -> None:
        self.cfg, self.complete = cfg, complete
        self.services = list(service) if isinstance(service, list) else [service] * cfg.workers
        if len(self.services) != cfg.workers:
            raise ValueError(f"{len(self.services)} services for {cfg.workers} workers")
        self.offload = offload if cfg.gpu_threshold > 0 else None
        self.gpu_queue: deque[Piece] = deque()
        self.queue: deque[Piece] = deque()
        self.cond = threading.Condition()
        self.form_lock = threading.Lock()
        self.flushing = False
        self.stopping = False
        self.stats = ServerStats()
        self.threads = [threading.Thread(target=self._work, args=(i,), name=f"serve-worker-{i}", daemon=True)
                        for i in range(cfg.workers)]
        if self.offload is not None:
            self.threads.append(threading.Thread(target=self._work_offload, name="serve-gpu", daemon=True))

    def start(self) -> Server:
        for t in self.threads:
            t.start()
        return self

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        for t in self.threads:
            t.join()

    def submit(self, requests: list[Request]) -> None:
        with self.cond:
            self.stats.queries += len(requests)
            for r in requests:
                if self.offload is not None and r.size > self.cfg.gpu_threshold:
                    r.pieces_left = 1
                    self.gpu_queue.append(Piece(r, 0, r.size))
                    continue
                parts = split_query(r.size, self.cfg.split)
                r.pieces_left = len(parts)
                self.queue.extend(Piece(r, o, n) for o, n in parts)
            self.cond.notify_all()

    def flush(self) -> None:
        with self.cond:
            self.flushing = True
            self.cond.notify_all()

    def _full(self, batch_samples: int) -> bool:
        return bool(self.queue) and batch_samples + self.queue[0].n > self.cfg.max_batch

    def _take(self) -> tuple[list[Piece], int] | None:
        """Form one batch (blocking): the batch and the time (ns) at which the batching rule let it start; None
        when stopping."""
        cfg = self.cfg
        ready = time.perf_counter_ns()
        with self.cond:
            while not self.queue:
                if self.stopping:
                    return None
                self.cond.wait()
            batch = form_batch(self.queue, cfg.max_batch)
            if cfg.max_batch <= 0 or cfg.max_wait_ms == 0:
                return batch, max(ready, batch[0].request.arrived_ns)
            samples = sum(p.n for p in batch)
            deadline = batch[0].request.arrived_ns + int(cfg.max_wait_ms * 1e6) if cfg.max_wait_ms > 0 else None
            closed = max(ready, max(p.request.arrived_ns for p in batch))
            while samples < cfg.max_batch and not self.stopping:
                if self.queue:
                    if self._full(samples):
                        closed = max(closed, self.queue[0].request.arrived_ns)
                        break
                    more = form_batch(self.queue, cfg.max_batch - samples)
                    if sum(p.n for p in more) > cfg.max_batch - samples:  # a lone oversized piece: put it back
                        self.queue.extendleft(reversed(more))
                        closed = max(closed, more[0].request.arrived_ns)
                        break
                    batch += more
                    samples += sum(p.n for p in more)
                    closed = max(closed, max(p.request.arrived_ns for p in more))
                    continue
                if deadline is None:
                    if self.flushing:
                        closed = time.perf_counter_ns()
                        break
                    self.cond.wait()
                else:
                    left = (deadline - time.perf_counter_ns()) / 1e9
                    if left <= 0:
                        closed = max(closed, deadline)
                        break
                    self.cond.wait(left)
            return batch, closed

    def _work(self, i: int) -> None:
        service = self.services[i]
        while True:
            with self.form_lock:
                taken = self._take()
            if taken is None:
                return
            self._serve(service, *taken)

    def _work_offload(self) -> None:
        """The GPU lane: whole large queries, batched up to max_batch samples, no waiting for more."""
        while True:
            with self.cond:
                while not self.gpu_queue:
                    if self.stopping:
                        return
                    self.cond.wait()
                batch = form_batch(self.gpu_queue, self.cfg.max_batch)
            self._serve(self.offload, batch, offloaded=True)

    def _serve(self, service: Service, batch: list[Piece], closed: int | None = None, offloaded: bool = False) -> None:
        t0 = time.perf_counter_ns()
        service(batch)
        t1 = time.perf_counter_ns()
        done = []
        with self.stats.lock:
            if offloaded:
                self.stats.offloaded_queries += len(batch)
            self.stats.batch_samples.append(sum(p.n for p in batch))
            self.stats.batch_pieces.append(len(batch))
            self.stats.service_s.append((t1 - t0) / 1e9)
            self.stats.start_s.append(t0 / 1e9)
            if closed is not None:
                self.stats.dispatch_s.append(max(0, t0 - closed) / 1e9)
            for p in batch:
                self.stats.wait_s.append((t0 - p.request.arrived_ns) / 1e9)
                p.request.pieces_left -= 1
                if p.request.pieces_left == 0:
                    done.append(p.request)
        mark, paths, sojourns = t1, [], []
        for r in done:
            self.complete(r)
            now = time.perf_counter_ns()
            paths.append((now - mark) / 1e9)
            sojourns.append((now - r.arrived_ns) / 1e9)
            mark = now
        if closed is not None:
            with self.stats.lock:
                self.stats.complete_s.extend(paths)
                self.stats.sojourn_s.extend(sojourns)
