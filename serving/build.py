"""Build what a serving run needs from its config: the sample pool, the queries, the service, a fresh server."""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from embedding.spec import WorkloadSpec

from .config import ServerConfig, ServingConfig
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

    def service(self, server: ServerConfig):
        return self.dlrm if server.service == "dlrm" else FixedService(server.fixed_ms)


def build_setup(spec: WorkloadSpec, cfg: ServingConfig) -> ServingSetup:
    """Pool and queries always; the DLRM model (weights, backend) only when the service is dlrm."""
    queries = QuerySet.build(cfg.query, cfg.query.pool_samples)
    if cfg.server.service != "dlrm":
        return ServingSetup(spec, queries, None, None)
    spec = replace(spec, mode="inference")
    pool = SamplePool(spec, cfg.query.pool_samples)
    return ServingSetup(spec, queries, pool, DlrmService(spec, pool, queries, cfg.server.backend))


def new_server(setup: ServingSetup, server: ServerConfig) -> Server:
    """A fresh server (threads not started) for one LoadGen run; torch's intra-op threads set per the config."""
    torch.set_num_threads(server.intra_threads)
    return Server(server, setup.service(server))
