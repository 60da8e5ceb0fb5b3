"""The server: a request queue, dynamic batching, query splitting and a pool of inference workers.

A query of n samples becomes pieces of at most `split` samples (one piece when split = 0). Workers pull: a free
worker takes the batch-forming lock, takes pieces from the queue head while they fit `max_batch` samples (a piece
larger than max_batch goes alone), and, if the batch is not full, waits for more until `max_wait_ms` after the
batch's first piece arrived (max_wait < 0: until full, i.e. static batching; LoadGen's flush releases the rest).
max_batch = 0 takes exactly one piece: with split = 0 and one worker that is the naive server (one query at a
time). A query completes towards LoadGen when its last piece has been served.

Workers are threads: torch's kernels release the GIL, so two workers use both cores of the development machine.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .config import ServerConfig

__all__ = ["Request", "Piece", "split_query", "form_batch", "Server", "ServerStats"]


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
    """Per batch: samples, pieces, service seconds; per piece: queue wait seconds."""

    batch_samples: list[int] = field(default_factory=list)
    batch_pieces: list[int] = field(default_factory=list)
    service_s: list[float] = field(default_factory=list)
    wait_s: list[float] = field(default_factory=list)
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
                "queue_wait_ms_p50": 1e3 * q(wt, 50), "queue_wait_ms_p99": 1e3 * q(wt, 99)}


class Server:
    """Queue + batching + workers around `service(pieces)`, which runs one batch (pieces of queries).

    `complete(request)` is called once per query when its last piece is done (from a worker thread)."""

    def __init__(self, cfg: ServerConfig, service: Callable[[list[Piece]], None],
                 complete: Callable[[Request], None] | None = None) -> None:
        self.cfg, self.service, self.complete = cfg, service, complete
        self.queue: deque[Piece] = deque()
        self.cond = threading.Condition()
        self.form_lock = threading.Lock()
        self.flushing = False
        self.stopping = False
        self.stats = ServerStats()
        self.threads = [threading.Thread(target=self._work, name=f"serve-worker-{i}", daemon=True)
                        for i in range(cfg.workers)]

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
            for r in requests:
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

    def _take(self) -> list[Piece] | None:
        """Form one batch (blocking); None when stopping."""
        cfg = self.cfg
        with self.cond:
            while not self.queue:
                if self.stopping:
                    return None
                self.cond.wait()
            batch = form_batch(self.queue, cfg.max_batch)
            if cfg.max_batch <= 0 or cfg.max_wait_ms == 0:
                return batch
            samples = sum(p.n for p in batch)
            deadline = batch[0].request.arrived_ns + int(cfg.max_wait_ms * 1e6) if cfg.max_wait_ms > 0 else None
            while samples < cfg.max_batch and not self.stopping:
                if self.queue:
                    if self._full(samples):
                        break
                    more = form_batch(self.queue, cfg.max_batch - samples)
                    if sum(p.n for p in more) > cfg.max_batch - samples:  # a lone oversized piece: put it back
                        self.queue.extendleft(reversed(more))
                        break
                    batch += more
                    samples += sum(p.n for p in more)
                    continue
                if deadline is None:
                    if self.flushing:
                        break
                    self.cond.wait()
                else:
                    left = (deadline - time.perf_counter_ns()) / 1e9
                    if left <= 0:
                        break
                    self.cond.wait(left)
            return batch

    def _work(self) -> None:
        while True:
            with self.form_lock:
                batch = self._take()
            if batch is None:
                return
            t0 = time.perf_counter_ns()
            self.service(batch)
            t1 = time.perf_counter_ns()
            done = []
            with self.stats.lock:
                self.stats.batch_samples.append(sum(p.n for p in batch))
                self.stats.batch_pieces.append(len(batch))
                self.stats.service_s.append((t1 - t0) / 1e9)
                for p in batch:
                    self.stats.wait_s.append((t0 - p.request.arrived_ns) / 1e9)
                    p.request.pieces_left -= 1
                    if p.request.pieces_left == 0:
                        done.append(p.request)
            for r in done:
                self.complete(r)
