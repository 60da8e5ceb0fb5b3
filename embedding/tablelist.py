"""A user's own tables as a workload: a CSV or YAML table list.

Columns (CSV header or YAML keys): name, rows, dim, pooling (mean lookups per bag), optional alpha (Zipf; absent or
0 = uniform access). TorchRec's words are accepted too (`ALIASES`): num_embeddings for rows, embedding_dim for
dim, pooling_factor for pooling; a table that gives both a word and its alias is refused. YAML may be a list of
mappings or a mapping with a `tables:` list.
"""
from __future__ import annotations

import csv
from pathlib import Path

import yaml

from .spec import AccessSpec, PoolingSpec, SpecError, TableSpec

__all__ = ["REQUIRED_COLUMNS", "ALIASES", "load_table_list", "table_from_row"]

REQUIRED_COLUMNS = ("name", "rows", "dim", "pooling")
ALIASES = {"num_embeddings": "rows", "embedding_dim": "dim", "pooling_factor": "pooling"}  # TorchRec's words


def _canonical(row: dict, where: str) -> dict:
    """The row with TorchRec's column names read as ours."""
    out = dict(row)
    for alias, col in ALIASES.items():
        if out.get(alias) in (None, ""):
            out.pop(alias, None)
            continue
        if out.get(col) not in (None, ""):
            raise SpecError(f"{where}: both {col!r} and its alias {alias!r} are given; keep one")
        out[col] = out.pop(alias)
    return out


def table_from_row(row: dict, where: str, dtype: str = "fp32") -> TableSpec:
    row = _canonical(row, where)
    missing = [c for c in REQUIRED_COLUMNS if row.get(c) in (None, "")]
    if missing:
        raise SpecError(f"{where}: missing column(s) {missing}; a table list needs {list(REQUIRED_COLUMNS)}")
    try:
        rows, dim = _integer(row["rows"], "rows"), _integer(row["dim"], "dim")
        pooling, alpha = float(row["pooling"]), float(row.get("alpha") or 0.0)
    except (TypeError, ValueError) as e:
        raise SpecError(f"{where}: table {row['name']!r} has a non-numeric value ({e})") from None
    if pooling < 1:
        raise SpecError(f"{where}: table {row['name']!r} pooling must be ≥ 1, got {pooling}")
    pool = PoolingSpec("fixed", pooling) if pooling.is_integer() else PoolingSpec("skewed", pooling)
    access = AccessSpec("zipf", alpha) if alpha else AccessSpec("uniform")
    return TableSpec(name=str(row["name"]), rows=rows, dim=dim, dtype=dtype, pooling=pool, access=access)


def _integer(value, column: str) -> int:
    """An integer column: 12, "12" or 12.0; refuses 1.5 (never truncated) and booleans."""
    if isinstance(value, bool):
        raise ValueError(f"{column} {value!r} is not an integer")
    if isinstance(value, int):
        return value
    number = float(value)
    if not number.is_integer():
        raise ValueError(f"{column} {value!r} is not an integer")
    return int(number)


def load_table_list(path: str | Path, dtype: str = "fp32") -> tuple[TableSpec, ...]:
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"table list {path}: no such file")
    try:
        return _load(path, dtype)
    except (UnicodeDecodeError, yaml.YAMLError, csv.Error) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SpecError(f"table list {path}: not a CSV or YAML table list ({first[:200]})") from None
    except OSError as e:
        raise SpecError(f"table list {path}: cannot be read ({e.strerror or e})") from None


def _load(path: Path, dtype: str) -> tuple[TableSpec, ...]:
    if path.suffix.lower() in (".yaml", ".yml"):
        data = yaml.safe_load(path.read_text())
        rows = data.get("tables") if isinstance(data, dict) else data
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise SpecError(f"table list {path}: expected a list of tables (mappings)")
        where = [f"table list {path}, entry {i}" for i in range(len(rows))]
    else:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            header = {ALIASES.get(c, c) for c in (reader.fieldnames or [])}
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            if missing:
                raise SpecError(f"table list {path}: missing column(s) {missing} (or TorchRec's "
                                f"{[a for a, c in ALIASES.items() if c in missing]}) in header {reader.fieldnames}")
            rows = list(reader)
        where = [f"table list {path}, line {i + 2}" for i in range(len(rows))]
    if not rows:
        raise SpecError(f"table list {path}: no tables")
    return tuple(table_from_row(r, w, dtype) for r, w in zip(rows, where, strict=True))
