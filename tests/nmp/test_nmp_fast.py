"""The FAST fidelity level against the detailed model: same bytes, same placement, speedups within 5%."""
import dataclasses

import numba
import numpy as np
import pytest

from benchmarks.nmp_bench import PAPER_SPEEDUP, sls_stream, speedup
from embedding.nmp import DramGeometry, LookupStream, NmpConfig, NmpConfigError, emulate_batch, emulate_streams
from embedding.nmp.dram import map_lookups
from embedding.nmp.fast import map_lookups_fast

SPEEDUP_TOLERANCE = 0.05  # fast vs detailed, relative; measured worst case 2.3% (benchmarks/nmp_bench.py)
EXACT = ("channel_data_bytes", "dram_bytes", "dram_accesses", "cache_hits", "cache_probes", "lookups")


def small_stream(pooling=20, vector_bytes=128, batch=8, tables=16, alpha=0.0, seed=0) -> LookupStream:
    """Uniform rows, or a bounded Zipf(alpha) over 100 k rows with the hot rows scattered (as embedding.generate)."""
    rng = np.random.default_rng(seed)
    n = tables * batch * pooling
    if alpha:
        p = np.arange(1, 100_001, dtype=float) ** -alpha
        rows = rng.permutation(100_000)[rng.choice(100_000, n, p=p / p.sum())]
    else:
        rows = rng.integers(0, 100_000, n)
    t = np.repeat(np.arange(tables), batch * pooling)
    bag = np.repeat(np.arange(tables * batch), pooling)
    return LookupStream.from_arrays(t, rows, (bag % batch) * tables + bag // batch, np.full(tables, 100_000),
                                    np.full(tables, vector_bytes))


def both(cfg: NmpConfig, streams: list[LookupStream]):
    return emulate_streams(cfg, streams), emulate_streams(dataclasses.replace(cfg, fidelity="fast"), streams)


@pytest.mark.parametrize("mapping", ["skylake", "random", "page_colour"])
def test_fast_address_decoding_equals_the_numpy_mapping(mapping):
    s = small_stream()
    cfg = NmpConfig(mapping=mapping, geometry=DramGeometry(dimms_per_channel=2))
    a, b = map_lookups(cfg, s.tables, s.rows, s.table_rows, s.row_bytes), map_lookups_fast(cfg, s)
    assert all(np.array_equal(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))


CASES = {
    "2 ranks, colour": dict(geometry=DramGeometry(dimms_per_channel=1)),
    "4 ranks, random": dict(geometry=DramGeometry(dimms_per_channel=2), mapping="random"),
    "8 ranks, colour": dict(geometry=DramGeometry(dimms_per_channel=4)),
    "64 B vectors": dict(vector_bytes=64),
    "256 B vectors, pooling 80": dict(vector_bytes=256, pooling=80),
    "RankCache, Zipf": dict(rankcache_bytes=16 << 10, alpha=1.05),
    "RecNMP-opt": dict(rankcache_bytes=16 << 10, table_aware=True, hot_threshold=1, alpha=1.05),
    "TensorDIMM": dict(mode="tensordimm", mapping="skylake"),
    "strict packet sync": dict(packet_sync="strict", geometry=DramGeometry(dimms_per_channel=2)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_fast_matches_detailed_bytes_exactly_and_speedup_within_tolerance(case):
    kw = dict(CASES[case])
    stream_kw = {k: kw.pop(k) for k in ("vector_bytes", "pooling", "alpha") if k in kw}
    streams = [small_stream(seed=s, **stream_kw) for s in (1, 2)]
    detailed, fast = both(NmpConfig(**kw), streams)
    for d, f in zip(detailed, fast, strict=True):
        for mode in ("host", "nmp"):
            assert {k: getattr(d[mode], k) for k in EXACT} == {k: getattr(f[mode], k) for k in EXACT}
        assert f["nmp"].channel_cmd_bytes == d["nmp"].channel_cmd_bytes
    s_det = sum(r["host"].cycles for r in detailed) / sum(r["nmp"].cycles for r in detailed)
    s_fast = sum(r["host"].cycles for r in fast) / sum(r["nmp"].cycles for r in fast)
    assert s_fast == pytest.approx(s_det, rel=SPEEDUP_TOLERANCE)
    for mode in ("host", "nmp"):
        cycles = [(d[mode].cycles, f[mode].cycles) for d, f in zip(detailed, fast, strict=True)]
        assert all(f == pytest.approx(d, rel=SPEEDUP_TOLERANCE) for d, f in cycles)


@pytest.fixture(scope="module")
def sls():
    return sls_stream(batch=32, vector_bytes=128, seed=1)


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_recnmp_validation_holds_in_fast_mode(sls, ranks):
    cfg = NmpConfig(fidelity="fast", geometry=DramGeometry(dimms_per_channel=ranks // 2))
    assert speedup(cfg, sls) == pytest.approx(PAPER_SPEEDUP[ranks], rel=0.10)


def test_fast_physical_invariants():
    s = small_stream(pooling=40)
    r = emulate_batch(NmpConfig(fidelity="fast", geometry=DramGeometry(dimms_per_channel=2)), s)
    assert r["host"].dram_bytes == r["nmp"].dram_bytes == s.num_lookups * 128
    assert r["host"].channel_data_bytes == s.num_lookups * 128
    assert r["nmp"].channel_data_bytes == np.unique(s.poolings).size * 128  # page colouring: one psum per pooling
    assert 1.0 < r["host"].cycles / r["nmp"].cycles <= 4
    cycles = [emulate_batch(NmpConfig(fidelity="fast"), small_stream(pooling=p))["nmp"].cycles for p in (5, 20, 80)]
    assert cycles[0] < cycles[1] < cycles[2]


def test_fast_results_do_not_depend_on_thread_count():
    s = small_stream()
    cfg = NmpConfig(fidelity="fast", mapping="random", rankcache_bytes=8 << 10)
    numba.set_num_threads(1)
    one = emulate_batch(cfg, s)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    many = emulate_batch(cfg, s)
    for mode in ("host", "nmp"):
        a, b = vars(one[mode]), vars(many[mode])
        assert all(np.array_equal(a[k], b[k]) for k in a)


def test_unknown_fidelity_is_rejected():
    with pytest.raises(NmpConfigError, match="fidelity"):
        NmpConfig(fidelity="approximate")


def test_run_nmp_at_fast_fidelity_reports_the_same_bytes():
    from embedding.batch import Batch
    from embedding.nmp import run_nmp
    from embedding.spec import PoolingSpec, TableSpec, WorkloadSpec

    spec = WorkloadSpec("t", tuple(TableSpec(f"t{i}", 10_000, 32, pooling=PoolingSpec("fixed", 10))
                                   for i in range(8)), batch_size=8, num_batches=2)
    rng = np.random.default_rng(0)
    batches = [Batch(np.full((8, 8), 10, np.int64), rng.integers(0, 10_000, 640)) for _ in range(2)]
    metrics = {f: {m["name"]: m["value"] for m in run_nmp(NmpConfig(fidelity=f), spec, batches)}
               for f in ("detailed", "fast")}
    for name in ("host.channel_data_bytes", "recnmp.channel_data_bytes", "recnmp.channel_cmd_bytes",
                 "recnmp.dram_internal_bytes"):
        assert metrics["fast"][name] == metrics["detailed"][name]
    assert metrics["fast"]["nmp.speedup_over_host"] == pytest.approx(metrics["detailed"]["nmp.speedup_over_host"],
                                                                      rel=SPEEDUP_TOLERANCE)


def test_packed_min_pick_equals_the_first_wins_scan_on_random_bank_heads():
    """fast_kernels.pick_head (SIMD min of packed keys) picks exactly the bank the reference argmin scan picks,
    with row hits, empty banks, idle ranks, NEVER floors and ties on the key in the mix."""
    from embedding.nmp.fast_kernels import AGE_BITS, EMPTY, HIT, pick_head, pick_head_scan
    from embedding.nmp.timing import NEVER

    rng = np.random.default_rng(0)
    picks = set()
    for _ in range(3000):
        ranks, nbank = int(rng.choice([1, 2, 4, 8])), int(rng.choice([4, 16]))
        n = ranks * nbank
        part = rng.integers(0, 50, n)  # few distinct cycles: many ties on the bank part
        age = rng.integers(0, 40, n)
        head = (part << AGE_BITS) | age
        kind = rng.random(n)
        head[kind < 0.2] = HIT << AGE_BITS
        head[kind > 0.7] = EMPTY
        in_rank = (head != EMPTY).reshape(ranks, nbank).sum(axis=1)
        if not in_rank.any():
            continue
        rank_ready = np.where(rng.random(ranks) < 0.3, NEVER, rng.integers(0, 50, ranks))
        now = NEVER if rng.random() < 0.3 else int(rng.integers(0, 50))
        lo = int(rng.integers(0, ranks))
        hi = ranks if rng.random() < 0.5 else lo + 1
        if not in_rank[lo:hi].any():
            continue
        ub = max(int(n - 1).bit_length(), 0)
        want = pick_head_scan(head, in_rank, rank_ready, now, lo, hi, nbank)
        assert pick_head(head, in_rank, rank_ready, now, lo, hi, nbank, ub, (1 << (62 - ub)) - 1) == want
        picks.add(want)
    assert len(picks) > 32  # the cases exercised many different banks


def test_serving_leaves_the_scoreboard_queues_empty_for_the_next_packet():
    """serve_fast drains every bank queue, queued count and row tally it fills, so that only DRAM timing state
    carries from one packet's call to the next; rows repeat so that the row-hit search and tally are exercised."""
    from embedding.nmp.fast_kernels import B_QHEAD, B_QTAIL, EMPTY, R_QUEUED, _new_state, serve_fast
    from embedding.nmp.timing import NEVER

    rng = np.random.default_rng(3)
    ranks, banks, window, n = 2, 16, 8, 400
    rank, bank = rng.integers(0, ranks, n), rng.integers(0, banks, n)
    row = rng.integers(0, 4, n) * 64 + rng.integers(0, 2, n)  # few rows, equal modulo the tally width in pairs
    bursts, earliest, finish = np.full(n, 2), np.zeros(n, np.int64), np.zeros(n, np.int64)
    tp = np.asarray(NmpConfig().timings.as_array(), np.int64)
    st = _new_state(ranks, banks, 4, window)
    stats = np.zeros(4, np.int64)
    lasts = []
    for lo, hi in ((0, n // 2), (n // 2, n)):
        lasts.append(serve_fast(np.arange(n), lo, hi, rank, bank, row, bursts, earliest, NEVER, window, tp, 4, False,
                                st, finish, stats))
        bank_st, rank_st, _, head, _, _, tally = st
        assert (bank_st[:, B_QHEAD] == -1).all() and (head == EMPTY).all()
        assert (rank_st[:, R_QUEUED] == 0).all() and (tally == 0).all()
        assert (bank_st[:, B_QTAIL] >= 0).sum() > 0  # queues were used
    assert (finish > 0).all() and lasts[1] > lasts[0]
    assert 0 < stats[0] < n and stats[1] + stats[0] == n  # row hits and misses; every request hit or opened a row
