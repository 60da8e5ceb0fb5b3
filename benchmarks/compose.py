"""Compose the config tree outside the Hydra app (tests, other commands) with Hydra's compose API."""
from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from embedding.spec import WorkloadSpec
from embedding.workload_config import build_workload

from .config import Config, register_configs

__all__ = ["CONF_DIR", "compose_config", "compose_workload"]

CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")


def compose_config(overrides: list[str] | None = None) -> Config:
    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides or []))
    return OmegaConf.to_object(cfg)


def compose_workload(overrides: list[str] | None = None) -> WorkloadSpec:
    """e.g. compose_workload(["workload=rm1", "workload.max_rows=1000"])."""
    return build_workload(compose_config(overrides).workload)
