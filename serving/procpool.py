"""Worker processes: each owns its own copy of the DLRM and of the sample pool, and serves batches sent to it.

Why processes as well as threads: torch's kernels release the GIL, but a DLRM forward on a serving-sized batch
(tens to hundreds of samples) is many short ops whose Python glue (gather, CSR cut, module calls) holds the GIL;
two worker threads then take turns on it. Processes each have their own interpreter.

How: the server's worker threads stay (they form batches exactly as for thread workers); with `worker_kind=process`
worker thread i hands each batch to process i over a pipe — only the batch's (pool start, samples) ranges travel,
a few bytes, since every process built the same pool and weights from the same seeds — and blocks (GIL released)
until the process answers. Processes are spawned (not forked: a fork of a process whose OpenMP pool is running
can hang) once per setup, before any LoadGen run, and reused by every run; their start-up is outside the timed run.
"""
from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

import numpy as np

from embedding.spec import WorkloadSpec

from .server import Piece

__all__ = ["ProcWorkers", "RemoteService"]


def _child(conn: Connection, spec: WorkloadSpec, pool_samples: int, backend: str) -> None:
    """A worker process: build pool and model from the seeds, then serve ('threads', n) and batches until None."""
    import torch

    from .queries import SamplePool
    from .services import build_model

    torch.set_num_threads(1)
    pool = SamplePool(spec, pool_samples)
    model = build_model(spec, backend, torch.device("cpu"))
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg is None:
            return
        if msg[0] == "threads":
            torch.set_num_threads(int(msg[1]))
            conn.send("ok")
            continue
        t0 = time.perf_counter()
        with torch.inference_mode():
            model.predict(model.prepare(pool.gather(msg[1])))
        conn.send(time.perf_counter() - t0)


class RemoteService:
    """What a worker thread calls for one batch: send the batch's sample ranges to its process, wait for it."""

    def __init__(self, conn: Connection, starts: np.ndarray) -> None:
        self.conn, self.starts = conn, starts
        self.inside_s: list[float] = []
        """seconds each batch took inside the process (the rest of the measured service time is the pipe)"""

    def __call__(self, pieces: list[Piece]) -> None:
        self.conn.send(("batch", [(int(self.starts[p.request.query]) + p.offset, p.n) for p in pieces]))
        self.inside_s.append(self.conn.recv())


@dataclass
class ProcWorkers:
    """A pool of worker processes grown on demand and kept across LoadGen runs; `close()` ends them."""

    spec: WorkloadSpec
    pool_samples: int
    backend: str
    starts: np.ndarray
    procs: list = field(default_factory=list)
    conns: list[Connection] = field(default_factory=list)

    def services(self, k: int, intra_threads: int) -> list[RemoteService]:
        """k remote services (one per worker thread), their processes set to `intra_threads` torch threads."""
        ctx = mp.get_context("spawn")
        new = []
        while len(self.procs) < k:  # start them all, then wait for each to have built its model
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_child, args=(child, self.spec, self.pool_samples, self.backend), daemon=True,
                            name=f"serve-proc-{len(self.procs)}")
            p.start()
            child.close()
            self.procs.append(p)
            self.conns.append(parent)
            new.append(parent)
        for parent in new:
            if parent.recv() != "ready":
                raise RuntimeError("serving worker process did not start")
        out = []
        for conn in self.conns[:k]:
            conn.send(("threads", intra_threads))
            conn.recv()
            out.append(RemoteService(conn, self.starts))
        return out

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
        self.procs, self.conns = [], []
