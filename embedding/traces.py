"""Lookup traces in Meta's dlrm_datasets format, and statistics of any lookup stream.

A trace file holds `(indices, offsets, lengths)` as saved by `torch.save`, plain or gzip-compressed:
`lengths` (T, B), `offsets` (T·B + 1) running sums of `lengths.ravel()`, `indices` table-major. Files are read with
`torch.load(weights_only=True)`, which refuses to unpickle code, and validated before use.
"""
from __future__ import annotations

import gzip
import os
import tempfile
import warnings
import zlib
from pathlib import Path

import numpy as np
import torch

from .batch import Batch
from .files import umask_mode
from .spec import AccessSpec, PoolingSpec, SpecError, TableSpec, WorkloadSpec

__all__ = ["TraceError", "load_trace", "rows_per_table", "save_trace", "trace_batches", "trace_statistics",
           "validate_trace", "workload_from_trace"]


class TraceError(SpecError):
    """A trace file that cannot be read or is inconsistent; the message names the file and the problem."""


def rows_per_table(batch: Batch) -> np.ndarray:
    """Max index + 1 of each table in a lookup stream (0 for a table with no lookups)."""
    out = np.zeros(batch.num_tables, dtype=np.int64)
    for t in range(batch.num_tables):
        seg = batch.table_indices(t)
        out[t] = int(seg.max()) + 1 if seg.size else 0
    return out


def _open(path: Path):
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def load_trace(path: str | os.PathLike, rows: list[int] | None = None) -> Batch:
    """Read and validate a trace as one Batch of all its samples; `rows` (one per table) also checks every index is
    below its table's rows. The file's offsets are checked against the lengths, then derived from them again."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"trace {path}: no such file")
    try:
        with _open(path) as f, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's notes on pickle protocols are not the user's business
            obj = torch.load(f, weights_only=True, map_location="cpu")
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise TraceError(f"trace {path}: cannot be read ({type(e).__name__}: {_reason(e)}); corrupt or truncated "
                         "file?") from None
    except OSError as e:
        raise TraceError(f"trace {path}: cannot be read ({e.strerror or _reason(e)})") from None
    except Exception as e:  # pickle.UnpicklingError and others: the restricted unpickler refuses anything but tensors
        raise TraceError(f"trace {path}: not a dlrm_datasets trace: {_reason(e)} (expected a torch.save'd tuple "
                         "(indices, offsets, lengths) of integer tensors)") from None
    if not (isinstance(obj, (tuple, list)) and len(obj) == 3 and all(isinstance(x, torch.Tensor) for x in obj)):
        raise TraceError(f"trace {path}: not a dlrm_datasets trace: expected a tuple (indices, offsets, lengths) "
                         f"of tensors, got {type(obj).__name__}")
    for what, x in zip(("indices", "offsets", "lengths"), obj, strict=True):
        if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
            raise TraceError(f"trace {path}: {what} are {str(x.dtype).removeprefix('torch.')}, not integers (a "
                             "dlrm_datasets trace holds integer tensors; values are never truncated)")
    indices, offsets, lengths = (x.numpy().astype(np.int64, copy=False) for x in obj)
    return validate_trace(indices, offsets, lengths, str(path), rows)


def _reason(e: BaseException) -> str:
    """The gist of a load error in one line, without torch's advice on `weights_only` (never to be followed for a
    file of unknown origin): what the restricted unpickler refused, or the error's first line."""
    text = str(e)
    if "WeightsUnpickler error:" in text:
        detail = next((x.strip() for x in text.split("WeightsUnpickler error:", 1)[1].splitlines() if x.strip()), "")
        detail = detail.split(" was not an allowed global")[0].split(". Please")[0]
        if "global" in detail.lower():
            return f"it holds objects that cannot be loaded without code ({detail[:120]})"
        return f"not a torch.save file ({detail[:120] or type(e).__name__})"
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    first = lines[0][:160] if lines else type(e).__name__
    bad = ("weights_only", "weights only", "trust", "torch.load")
    return type(e).__name__ if any(w in first.lower() for w in bad) else first


def validate_trace(ind: np.ndarray, off: np.ndarray, lens: np.ndarray, name: str = "trace",
                   rows: list[int] | None = None) -> Batch:
    """Check a (indices, offsets, lengths) triple; the Batch it describes, or a TraceError naming the problem."""
    if ind.ndim != 1 or off.ndim != 1 or lens.ndim != 2:
        raise TraceError(f"{name}: shapes indices {ind.shape}, offsets {off.shape}, lengths {lens.shape}; "
                         "expected (N,), (T·B+1,), (T, B)")
    if lens.shape[0] == 0 or lens.shape[1] == 0:
        raise TraceError(f"{name}: lengths is {lens.shape}: a trace needs ≥ 1 table and ≥ 1 sample")
    if off.size != lens.size + 1:
        raise TraceError(f"{name}: offsets has {off.size} entries, lengths is {lens.shape} so T·B+1 = {lens.size + 1}")
    if off[0] != 0 or np.any(np.diff(off) < 0):
        raise TraceError(f"{name}: offsets must start at 0 and never decrease")
    if off[-1] != ind.size:
        raise TraceError(f"{name}: last offset {off[-1]} != number of indices {ind.size}")
    if not np.array_equal(np.diff(off), lens.ravel()):
        raise TraceError(f"{name}: offsets are not the running sums of lengths")
    if ind.size and ind.min() < 0:
        raise TraceError(f"{name}: negative index {int(ind.min())}")
    batch = Batch(lengths=lens, indices=ind)
    if rows is not None:
        if len(rows) != batch.num_tables:
            raise TraceError(f"{name}: {batch.num_tables} tables in the trace, {len(rows)} in the workload")
        have = rows_per_table(batch)
        bad = np.nonzero(have > np.asarray(rows))[0]
        if bad.size:
            t = int(bad[0])
            raise TraceError(f"{name}: table {t} has index {have[t] - 1}, out of range for {rows[t]} rows")
    return batch


def save_trace(path: str | os.PathLike, batch: Batch, compress: bool | None = None) -> None:
    """Write a batch as a dlrm_datasets trace (gzip when `compress` or the name ends in .gz), atomically."""
    path = Path(path)
    compress = path.suffix == ".gz" if compress is None else compress
    triple = (torch.from_numpy(np.ascontiguousarray(batch.indices)), torch.from_numpy(batch.offsets),
              torch.from_numpy(np.ascontiguousarray(batch.lengths)))
    fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.")
    os.fchmod(fd, umask_mode())  # mkstemp's 0600 → what open() would give
    try:
        with os.fdopen(fd, "wb") as raw:
            if compress:
                with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1) as f:
                    torch.save(triple, f)
            else:
                torch.save(triple, raw)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def workload_from_trace(path: str, batch_size: int, num_batches: int = 0, dim: int = 64, seed: int = 0,
                        mode: str = "inference", name: str | None = None,
                        tables: tuple[TableSpec, ...] | None = None) -> WorkloadSpec:
    """A workload whose tables are the trace's (rows = max index + 1, floor 1; pooling = mean length) and whose
    batches are the trace's samples cut into `batch_size` pieces (`num_batches` 0 = as many as fit).

    `tables` (a table list: one per trace table, in order) gives names, rows and dims instead; every index of the
    trace must be below its table's rows. Pooling always comes from the trace's lengths."""
    trace = load_trace(path)
    if batch_size < 1 or num_batches < 0:
        raise TraceError(f"trace {path}: batch_size must be ≥ 1 and num_batches ≥ 0 (0 = all that fit), got "
                         f"{batch_size} and {num_batches}")
    fit = trace.batch_size // batch_size
    if fit == 0:
        raise TraceError(f"trace {path}: {trace.batch_size} samples, fewer than batch_size {batch_size}")
    mean_len = trace.lengths.mean(axis=1)
    have = rows_per_table(trace)
    if tables is not None:
        if len(tables) != trace.num_tables:
            raise TraceError(f"trace {path}: {trace.num_tables} tables in the trace, {len(tables)} in the table list")
        for t, (spec, r) in enumerate(zip(tables, have, strict=True)):
            if r > spec.rows:
                raise TraceError(f"trace {path}: table {t} ({spec.name!r}) has index {r - 1}, out of range for the "
                                 f"table list's {spec.rows} rows")
        shapes = [(spec.name, spec.rows, spec.dim, spec.dtype) for spec in tables]
    else:
        shapes = [(f"t{t}", max(1, int(r)), dim, "fp32") for t, r in enumerate(have)]
    specs = tuple(TableSpec(name=n, rows=r, dim=d, dtype=dt,
                            pooling=PoolingSpec("skewed", max(1.0, float(mean_len[t]))), access=AccessSpec("trace"))
                  for t, (n, r, d, dt) in enumerate(shapes))
    return WorkloadSpec(name=name or Path(path).name, tables=specs, batch_size=batch_size,
                        num_batches=min(num_batches, fit) if num_batches else fit, seed=seed, mode=mode,
                        trace=str(path))


def trace_batches(spec: WorkloadSpec) -> list[Batch]:
    """Cut the trace named by `spec.trace` into `spec.num_batches` batches of `spec.batch_size` samples."""
    trace = load_trace(spec.trace, rows=[t.rows for t in spec.tables])
    total, bs = trace.batch_size, spec.batch_size
    if spec.num_batches * bs > total:
        raise TraceError(f"trace {spec.trace}: {total} samples, fewer than {spec.num_batches} batches × {bs}")
    rng = np.random.default_rng([spec.seed, 0xDE])
    offsets = trace.offsets
    out = []
    for b in range(spec.num_batches):
        lo, hi = b * bs, (b + 1) * bs
        pieces = [trace.indices[offsets[t * total + lo]:offsets[t * total + hi]]
                  for t in range(trace.num_tables)]
        out.append(Batch(lengths=np.ascontiguousarray(trace.lengths[:, lo:hi]), indices=np.concatenate(pieces),
                         dense=rng.standard_normal((bs, spec.dense.num_dense_features), dtype=np.float32),
                         labels=(rng.random(bs) < 0.5).astype(np.float32)))
    return out


def trace_statistics(batches: list[Batch], num_tables: int) -> dict:
    """Locality of a lookup stream, per table and overall (keys = (table, row)).

    unique_fraction: distinct keys / lookups. reuse_histogram: keys by how often they were looked up, in log2 bins
    (bin i counts keys seen in [2^i, 2^(i+1)) lookups). hot1pct_share: share of lookups taken by the hottest 1% of
    the distinct keys.
    """
    per_table = []
    all_counts = []
    for t in range(num_tables):
        ids = np.concatenate([b.table_indices(t) for b in batches])
        counts = np.unique(ids, return_counts=True)[1] if ids.size else np.zeros(0, dtype=np.int64)
        all_counts.append(counts)
        per_table.append(_count_stats(counts))
    overall = _count_stats(np.concatenate(all_counts))
    return {"overall": overall, "per_table": per_table}


def _count_stats(counts: np.ndarray) -> dict:
    lookups = int(counts.sum())
    if lookups == 0:
        return {"lookups": 0, "unique": 0, "unique_fraction": 0.0, "reuse_histogram": [], "hot1pct_share": 0.0}
    bins = np.bincount(np.floor(np.log2(counts)).astype(np.int64))
    top = max(1, int(np.ceil(0.01 * counts.size)))
    hot = np.partition(counts, counts.size - top)[counts.size - top:].sum()
    return {"lookups": lookups, "unique": int(counts.size), "unique_fraction": counts.size / lookups,
            "reuse_histogram": bins.tolist(), "hot1pct_share": float(hot) / lookups}

