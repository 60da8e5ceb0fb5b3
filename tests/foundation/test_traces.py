"""dlrm_datasets traces: round trip, statistics, and every invalid-trace case."""
import gzip

import numpy as np
import pytest
import torch

from embedding.batch import Batch
from embedding.generate import generate_batches
from embedding.spec import AccessSpec, PoolingSpec, TableSpec, WorkloadSpec
from embedding.traces import (
    TraceError,
    load_trace,
    save_trace,
    trace_batches,
    trace_statistics,
    workload_from_trace,
)


def _batch():
    tables = (TableSpec("a", 1000, 8, pooling=PoolingSpec("skewed", 4), access=AccessSpec("zipf", 1.1)),
              TableSpec("b", 300, 8, pooling=PoolingSpec("fixed", 2)))
    return generate_batches(WorkloadSpec("w", tables, batch_size=64, num_batches=1))[0]


@pytest.mark.parametrize("name", ["t.pt", "t.pt.gz"])
def test_round_trip_plain_and_gzip(tmp_path, name):
    batch = _batch()
    path = tmp_path / name
    save_trace(path, batch)
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == name.endswith(".gz")
    trace = load_trace(path, rows=[1000, 300])
    assert np.array_equal(trace.indices, batch.indices)
    assert np.array_equal(trace.lengths, batch.lengths)
    assert np.array_equal(trace.offsets, batch.offsets)


def test_reads_files_written_the_dlrm_datasets_way(tmp_path):
    """The release's files are `torch.save((indices, offsets, lengths))` then gzip, with int32 tensors allowed."""
    batch = _batch()
    path = tmp_path / "fbgemm_t2_bs64.pt.gz"
    with gzip.open(path, "wb") as f:
        torch.save((torch.from_numpy(batch.indices).int(), torch.from_numpy(batch.offsets).int(),
                    torch.from_numpy(batch.lengths).int()), f)
    trace = load_trace(path)
    assert np.array_equal(trace.indices, batch.indices) and trace.num_tables == 2 and trace.batch_size == 64


def test_trace_workload_cuts_batches(tmp_path):
    batch = _batch()
    save_trace(tmp_path / "t.pt", batch)
    spec = workload_from_trace(str(tmp_path / "t.pt"), batch_size=16)
    assert spec.num_batches == 4 and spec.num_tables == 2
    batches = trace_batches(spec)
    assert np.array_equal(np.concatenate([b.lengths for b in batches], axis=1), batch.lengths)
    assert np.array_equal(np.concatenate([b.table_indices(1) for b in batches]), batch.table_indices(1))


def _write(path, indices, offsets, lengths):
    torch.save(tuple(torch.as_tensor(x) for x in (indices, offsets, lengths)), path)


@pytest.mark.parametrize("case,message", [
    ("offsets_not_monotonic", "never decrease"),
    ("offsets_wrong_count", "offsets has 4 entries"),
    ("last_offset", "last offset"),
    ("negative_index", "negative index"),
    ("out_of_range", "out of range"),
    ("lengths_mismatch", "running sums"),
    ("not_a_triple", "tuple"),
    ("corrupt_gzip", "cannot be read"),
    ("code_pickle", "without code"),
])
def test_invalid_traces_raise_a_clear_error(tmp_path, case, message):
    path = tmp_path / "bad.pt"
    ind, off, lens = np.array([1, 2, 3, 4]), np.array([0, 2, 2, 4, 4]), np.array([[2, 0], [2, 0]])
    rows = None
    if case == "offsets_not_monotonic":
        _write(path, ind, np.array([0, 3, 2, 4, 4]), np.array([[3, -1], [2, 0]]))
    elif case == "offsets_wrong_count":
        _write(path, ind, off[:-1], lens)
    elif case == "last_offset":
        _write(path, ind[:3], off, lens)
    elif case == "negative_index":
        _write(path, np.array([1, -2, 3, 4]), off, lens)
    elif case == "out_of_range":
        _write(path, ind, off, lens)
        rows = [10, 3]
    elif case == "lengths_mismatch":
        _write(path, ind, off, np.array([[1, 1], [2, 0]]))
    elif case == "not_a_triple":
        torch.save({"indices": torch.tensor(ind)}, path)
    elif case == "corrupt_gzip":
        save_trace(tmp_path / "ok.pt.gz", _batch())
        data = (tmp_path / "ok.pt.gz").read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif case == "code_pickle":
        torch.save((np.array([1]), torch.tensor(off), torch.tensor(lens)), path)  # a numpy object needs unpickling
    with pytest.raises(TraceError, match=message):
        load_trace(path, rows=rows)


def test_statistics_of_a_known_stream():
    # table 0: row 5 looked up 6 times, rows 1..4 once each → 10 lookups, 5 unique
    lengths = np.array([[5, 5]])
    batch = Batch(lengths=lengths, indices=np.array([5, 5, 5, 5, 5, 5, 1, 2, 3, 4]))
    s = trace_statistics([batch], 1)["overall"]
    assert s["lookups"] == 10 and s["unique"] == 5 and s["unique_fraction"] == 0.5
    assert s["reuse_histogram"] == [4, 0, 1]  # four keys seen once (bin 0), one seen 6 times (bin 2: [4, 8))
    assert s["hot1pct_share"] == 0.6  # the hottest 1% (rounded up to one key) takes 6 of 10 lookups
