"""Build what a serving run needs from its config: the sample pool, the queries, the service, a fresh server."""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from embedding.spec import WorkloadSpec

from .config import ServerConfig, ServingConfig
from .procpool import ProcWorkers
from .queries import QuerySet, SamplePool
from .server import Server
from .services import DlrmService, FixedService

__all__ = ["ServingSetup", "build_setup", "new_server"]


@dataclass
class ServingSetup:
    spec: WorkloadSpec
    queries: QuerySet
    pool: SamplePool | None
    dlrm: DlrmService | None
    backend: str = "torch"
    procs: ProcWorkers | None = None
    """worker processes, spawned on the first process-kind server and kept for every later run"""
    gpu: DlrmService | None = None
    """the DLRM copy on the GPU (built on the first server with a gpu_threshold)"""

    def services(self, server: ServerConfig) -> list:
        """One service per worker: the shared in-process DLRM, one worker process each, or the timed wait."""
        if server.service != "dlrm":
            return [FixedService(server.fixed_ms)] * server.workers
        if server.worker_kind == "process":
            if self.procs is None:
                self.procs = ProcWorkers(self.spec, self.pool.samples, self.backend, self.queries.starts)
            return self.procs.services(server.workers, server.intra_threads)
        return [self.dlrm] * server.workers

    def offload(self, server: ServerConfig) -> DlrmService | None:
        if server.gpu_threshold <= 0:
            return None
        if self.gpu is None:
            self.gpu = DlrmService(self.spec, self.pool, self.queries, self.backend, device="cuda")
        return self.gpu

    def close(self) -> None:
        """End the worker processes (if any were started)."""
        if self.procs is not None:
            self.procs.close()
            self.procs = None


def build_setup(spec: WorkloadSpec, cfg: ServingConfig) -> ServingSetup:
    """Pool and queries always; the DLRM model (weights, backend) only when the service is dlrm."""
    queries = QuerySet.build(cfg.query, cfg.query.pool_samples)
    if cfg.server.service != "dlrm":
        return ServingSetup(spec, queries, None, None)
    spec = replace(spec, mode="inference")
    pool = SamplePool(spec, cfg.query.pool_samples)
    backend = cfg.server.backend
    return ServingSetup(spec, queries, pool, DlrmService(spec, pool, queries, backend), backend)


def new_server(setup: ServingSetup, server: ServerConfig) -> Server:
    """A fresh server (threads not started) for one LoadGen run. Thread workers: torch's intra-op threads set per
    the config in this process; process workers: in each worker process (this process's dispatch stays at 1)."""
    services = setup.services(server)
    torch.set_num_threads(server.intra_threads if server.worker_kind == "thread" else 1)
    return Server(server, services, offload=setup.offload(server))
