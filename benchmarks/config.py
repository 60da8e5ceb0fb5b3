"""The one typed config tree (Hydra structured configs). Each part receives only its own sub-config; a wrong key or
type fails at start with Hydra's message naming it."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore

from embedding.cache.config import CacheConfig
from embedding.nmp.config import NmpConfig
from embedding.workload_config import WorkloadConfig

from .errors import InputError

__all__ = ["BackendConfig", "PlacementConfig", "BenchConfig", "OutputConfig", "Config", "register_configs"]


@dataclass
class BackendConfig:
    names: list[str] = field(default_factory=lambda: ["torch", "fbgemm", "torchrec"])
    """lookup backends to run, one after another: torch | fbgemm | torchrec"""
    precision: str = "fp32"
    """fp32 | fp16 | int8 (fp16/int8 inference: fbgemm IntNBit TBE; fp16 also torch)"""
    learning_rate: float = 0.01

    def __post_init__(self) -> None:
        _check([(self.precision in PRECISIONS, f"backend.precision={self.precision!r} is not one of {PRECISIONS}"),
                (math.isfinite(self.learning_rate) and self.learning_rate > 0,
                 f"backend.learning_rate={self.learning_rate} must be a finite number > 0")])


@dataclass
class PlacementConfig:
    name: str = "cpu"
    device: str = "cpu"
    """cpu | cuda"""
    host_largest: int = 0
    """hybrid: keep the N largest tables in host memory"""
    host_tables: list[str] = field(default_factory=list)
    """hybrid: keep these tables in host memory (e.g. the ones a plan names)"""

    def __post_init__(self) -> None:
        _check([(self.device in DEVICES, f"placement.device={self.device!r} is not one of {DEVICES}"),
                (self.host_largest >= 0, f"placement.host_largest={self.host_largest} must be ≥ 0")])


@dataclass
class BenchConfig:
    warmup: int = 3
    """untimed calls before timing, per backend"""
    repeats: int = 30
    """timed calls per backend (cycling over the workload's batches)"""
    ceilings: bool = True
    """also measure sequential-read and random-gather bandwidth in the same run"""
    ceiling_buffer_mib: int = 512
    overhead: bool = True
    """measure the harness's own cost against a bare loop calling the kernel"""
    model: bool = True
    """also time the full DLRM step (needs equal table dims)"""
    threads: int = 0
    """torch intra-op threads (0 = torch's default)"""
    max_memory_fraction: float = 0.6
    """refuse workloads whose tables and batches need more than this share of the machine's memory"""

    def __post_init__(self) -> None:
        _check([(self.warmup >= 0, f"bench.warmup={self.warmup} must be ≥ 0 (untimed calls before timing)"),
                (self.repeats >= 1, f"bench.repeats={self.repeats} must be ≥ 1 (timed calls per backend)"),
                (self.threads >= 0, f"bench.threads={self.threads} must be ≥ 0 (0 = torch's default)"),
                (self.ceiling_buffer_mib >= 1, f"bench.ceiling_buffer_mib={self.ceiling_buffer_mib} must be ≥ 1"),
                (0 < self.max_memory_fraction <= 1,
                 f"bench.max_memory_fraction={self.max_memory_fraction} must be in (0, 1]")])


@dataclass
class OutputConfig:
    records: str = "results/records.jsonl"
    """JSONL file the run appends its records to (relative to the directory dlrmbench was started in)"""
    progress: bool = True
    resume: bool = True
    """multirun: skip jobs whose config (hashed without `output`) already has records; false forces a re-run"""


@dataclass
class Config:
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    """cache simulation or two-tier cached execution on the same batches (policy off = none)"""
    nmp: NmpConfig = field(default_factory=NmpConfig)
    """near-memory (RecNMP-style) emulation of the same batches (enabled false = none)"""


PRECISIONS = ("fp32", "fp16", "int8")
DEVICES = ("cpu", "cuda")


def _check(checks: list[tuple[bool, str]]) -> None:
    for ok, message in checks:
        if not ok:
            raise InputError(message)


def register_configs() -> None:
    ConfigStore.instance().store(name="dlrmbench_schema", node=Config)
