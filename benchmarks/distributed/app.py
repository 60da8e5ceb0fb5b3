"""Hydra app behind `dlrmbench dist -m ...`: each sweep job launches its ranks locally (on a Slurm node when
`hydra/launcher=submitit_dist`), with a run id made once per job by the launching process."""
from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from benchmarks.compose import CONF_DIR

from .config import register_dist_configs
from .launch import launch

__all__ = ["run_app"]


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _app(cfg: DictConfig) -> None:
    obj = OmegaConf.to_object(cfg)
    overrides = [o for o in HydraConfig.get().overrides.task if not o.startswith("hydra")]
    rc = launch(overrides, obj.dist.world_size, obj.dist.timeout_s)  # type: ignore[attr-defined]
    if rc:
        raise SystemExit(rc)


def run_app(argv: list[str]) -> int:
    register_dist_configs()
    sys.argv = ["dlrmbench dist", *argv]
    _app()
    return 0
