"""The `dist` config group (conf/dist/*.yaml): how a sharding plan runs across real ranks.

The root schema (`benchmarks.config.Config`) has no `dist` node yet, so distributed entry points compose with
`DistRunConfig`, the root schema plus `dist`, registered under the root schema's name in their own processes only.
Every rank composes the same overrides, so every rank sees the same config; nothing here reads the clock (the run
id is decided by rank 0 and broadcast, see `benchmarks.distributed.worker`).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from benchmarks.compose import CONF_DIR
from benchmarks.config import Config, register_configs

__all__ = ["DistConfig", "DistRunConfig", "DistConfigError", "register_dist_configs", "compose_dist",
           "PLAN_SOURCES", "MODELS"]

MODELS = ("embedding", "dlrm")
PLAN_SOURCES = ("ours", "torchrec", "greedy_size", "greedy_lookups", "greedy_size_lookups", "round_robin",
                "random", "best_greedy")
FAULTS = ("none", "raise", "kill", "hang")
TIMEOUT_MAX_S = 7 * 24 * 3600


class DistConfigError(ValueError):
    """A `dist` setting that cannot run; the message names the field."""


@dataclass
class DistConfig:
    world_size: int = 2
    """ranks the local spawner starts (torchrun sets its own: then this must match WORLD_SIZE or be 0)"""
    backend: str = "auto"
    """auto (gloo on CPU, nccl on CUDA) | gloo | nccl"""
    timeout_s: float = 120.0
    """collective timeout on every rank; the local launcher also ends a job when a rank spends longer than this in
    one phase (rendezvous, sharding, verify, steps)"""
    plan: str = "ours"
    """optimizer that plans (ours | torchrec | best_greedy | a sharding.baselines name) or a plan JSON file"""
    hardware: str = "dev_2core"
    """topology preset (conf/hardware) or YAML path the plan and the cost prediction use"""
    model: str = "embedding"
    """embedding (EmbeddingBagCollection alone) | dlrm (TorchRec DLRM: dense and sparse parts)"""
    mode: str = "train"
    """train (forward, backward, optimizer) | inference (forward only) | workload (take workload.mode)"""
    optimizer: str = "rowwise_adagrad"
    """embedding optimizer, fused into the backward for sharded tables: rowwise_adagrad | sgd"""
    learning_rate: float = 0.01
    warmup: int = 3
    """untimed steps before each timed phase"""
    repeats: int = 10
    """timed steps per phase (plain steps for step time, staged steps for the per-stage breakdown)"""
    threads: int = 0
    """torch intra-op threads per rank (0 = CPU count / local world size)"""
    verify: bool = False
    """check the sharded forward per feature and one training step against the unsharded module first"""
    output_dir: str = "results/dist"
    """each run writes plan, per-rank timings (and traces) to OUTPUT_DIR/RUN_ID, decided by rank 0"""
    profile: bool = False
    """also write a torch profiler trace per rank (of the staged phase) into the run's output dir"""
    run_id: str = ""
    """set by the spawner; empty = rank 0 makes one and broadcasts it"""
    cases: str = ""
    """JSON file of several cases (plan + workload overrides) to run in one job (validate/compare use it)"""
    fault: str = "none"
    """fault injection for tests: none | raise | kill (SIGKILL itself) | hang (sleep for ever) on `fault_rank` at
    step `fault_step`"""
    fault_rank: int = 1
    fault_step: int = 1

    def __post_init__(self) -> None:
        checks = [(self.world_size >= 0, f"dist.world_size must be ≥ 0, got {self.world_size}"),
                  (self.backend in ("auto", "gloo", "nccl"), f"dist.backend {self.backend!r} is not auto|gloo|nccl"),
                  (0 < self.timeout_s <= TIMEOUT_MAX_S,
                   f"dist.timeout_s must be > 0 and ≤ {TIMEOUT_MAX_S} s (a week), got {self.timeout_s}"),
                  (math.isfinite(self.learning_rate) and self.learning_rate > 0,
                   f"dist.learning_rate must be a finite number > 0, got {self.learning_rate}"),
                  (self.threads >= 0, f"dist.threads must be ≥ 0 (0 = CPUs / local ranks), got {self.threads}"),
                  (self.fault == "none" or self.fault_step >= 0 and 0 <= self.fault_rank < max(1, self.world_size),
                   f"dist.fault_rank {self.fault_rank} / fault_step {self.fault_step}: need a rank of the job and a "
                   "step ≥ 0"),
                  (self.model in MODELS, f"dist.model {self.model!r} is not one of {MODELS}"),
                  (self.mode in ("train", "inference", "workload"),
                   f"dist.mode {self.mode!r} is not train|inference|workload"),
                  (self.optimizer in ("rowwise_adagrad", "sgd"),
                   f"dist.optimizer {self.optimizer!r} is not rowwise_adagrad|sgd"),
                  (self.warmup >= 0 and self.repeats >= 1, "dist.warmup must be ≥ 0 and dist.repeats ≥ 1"),
                  (self.fault in FAULTS, f"dist.fault {self.fault!r} is not one of {FAULTS}"),
                  (bool(self.plan), "dist.plan is empty: name an optimizer or a plan file")]
        for ok, message in checks:
            if not ok:
                raise DistConfigError(message)


@dataclass
class DistRunConfig(Config):
    dist: DistConfig = field(default_factory=DistConfig)


def register_dist_configs() -> None:
    """Root schema plus `dist` under the root schema's name, and `dist/dist_schema` for conf/dist/*.yaml."""
    register_configs()
    cs = ConfigStore.instance()
    if "dist" not in {f.name for f in dataclasses.fields(Config)}:
        cs.store(name="dlrmbench_schema", node=DistRunConfig)
    cs.store(group="dist", name="dist_schema", node=DistConfig)


def compose_dist(overrides: list[str] | None = None) -> DistRunConfig:
    """Compose conf/config.yaml plus `dist` (e.g. ["workload=smoke", "+dist=dlrm", "dist.plan=torchrec"]).

    Raises DistConfigError (or Hydra's own error naming the key) for bad input."""
    register_dist_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides or []))
    return OmegaConf.to_object(cfg)  # type: ignore[return-value]
