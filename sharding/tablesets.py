"""Table sets for planning: workload presets (conf/workload/), a user's table list (CSV/YAML), random sets."""
from __future__ import annotations

from pathlib import Path

from embedding.spec import SpecError, TableSpec
from embedding.synthetic import random_tables
from embedding.tablelist import load_table_list

__all__ = ["load_tables", "WORKLOAD_DIR"]

WORKLOAD_DIR = Path(__file__).resolve().parent.parent / "conf" / "workload"


def _preset(path: Path) -> tuple[TableSpec, ...]:
    from omegaconf import OmegaConf

    from embedding.workload_config import WorkloadConfig, build_workload

    cfg = OmegaConf.merge(OmegaConf.structured(WorkloadConfig), OmegaConf.load(path))
    return build_workload(OmegaConf.to_object(cfg)).tables


def load_tables(spec: str) -> tuple[TableSpec, ...]:
    """`random:COUNT[:SEED]`, a workload preset name or YAML (conf/workload/NAME.yaml, full size), or a table
    list file (CSV, or YAML with name/rows/dim/pooling columns)."""
    if spec.startswith("random:"):
        parts = spec.split(":")
        try:
            count, seed = int(parts[1]), int(parts[2]) if len(parts) > 2 else 0
        except (IndexError, ValueError):
            raise SpecError(f"tables {spec!r}: expected random:COUNT[:SEED]") from None
        return random_tables(count, seed)
    path = Path(spec)
    if not path.suffix and (WORKLOAD_DIR / f"{spec}.yaml").is_file():
        return _preset(WORKLOAD_DIR / f"{spec}.yaml")
    if not path.is_file():
        presets = sorted(p.stem for p in WORKLOAD_DIR.glob("*.yaml"))
        raise SpecError(f"tables {spec!r}: no such file or workload preset (presets: {presets})")
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml
        from omegaconf.errors import OmegaConfBaseException
        try:
            data = yaml.safe_load(path.read_text())
            if isinstance(data, dict) and "tables" not in data:
                return _preset(path)
        except (yaml.YAMLError, UnicodeDecodeError, OmegaConfBaseException) as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise SpecError(f"tables {spec!r}: not a workload preset or table list ({first[:200]})") from None
    return load_table_list(path)
