"""Stand-in for benchmarks.run.main with the resume lines of benchmarks/sweep.py wired in (the lines the report asks
run.py to adopt): skip finished multirun jobs; in a multirun a bad-input job raises (Hydra marks it failed) instead
of exiting the whole sweep. Used by tests/report/test_sweep.py while run.py lacks them."""
from __future__ import annotations

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from benchmarks.compose import CONF_DIR
from benchmarks.records import append_records
from benchmarks.run import INPUT_ERRORS, execute
from benchmarks.sweep import SKIPPED, skip_finished_job


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> str | None:
    if skip_finished_job(cfg):
        return SKIPPED
    try:
        records = execute(OmegaConf.to_object(cfg))
    except INPUT_ERRORS:
        if HydraConfig.get().mode.name == "MULTIRUN":
            raise
        raise SystemExit(2) from None
    append_records(cfg.output.records, records)
    return None


if __name__ == "__main__":
    main()
