"""Serving: query sizes, splitting and batching, the server's bookkeeping, the M/D/c reference, the bisection, short
LoadGen runs and the CLI's bad input. LoadGen runs here carry well under a second of traffic; nothing is timed."""
from __future__ import annotations

import json
import subprocess
import threading
from collections import deque
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from embedding.generate import WorkloadGenerator
from embedding.spec import AccessSpec, PoolingSpec, TableSpec, WorkloadSpec
from serving.config import (
    LoadGenConfig,
    QueryConfig,
    SearchConfig,
    ServerConfig,
    ServingConfig,
    ServingError,
    check_serving,
)
from serving.queries import MLPERF_DLRM_QUANTILES, QuerySet, SamplePool, query_sizes
from serving.search import SearchResult, Setting, bisect_qps
from serving.server import Piece, Request, Server, form_batch, split_query
from serving.services import FixedService
from serving.theory import md1_mean_sojourn, simulate_mdc


def _spec() -> WorkloadSpec:
    tables = tuple(TableSpec(f"t{i}", 5000, 16, pooling=PoolingSpec("uniform", low=1, high=6),
                             access=AccessSpec("zipf", 1.05)) for i in range(3))
    return WorkloadSpec("tiny", tables, batch_size=8)


# --- queries -------------------------------------------------------------------------------------------------------

def test_query_size_rules_stay_in_their_ranges():
    rng = np.random.default_rng(0)
    assert set(query_sizes(QueryConfig(size="fixed", mean=7), 50, rng)) == {7}
    u = query_sizes(QueryConfig(size="uniform", low=3, high=9), 2000, rng)
    assert u.min() == 3 and u.max() == 9
    ln = query_sizes(QueryConfig(size="lognormal", mean=100, sigma=1.0, high=1024), 20000, rng)
    assert ln.min() >= 1 and ln.max() <= 1024 and 85 < ln.mean() < 105  # clipping pulls the mean a little down
    m = query_sizes(QueryConfig(size="mlperf"), 20000, rng)
    assert set(np.unique(m)) <= set(MLPERF_DLRM_QUANTILES.tolist()) and abs(m.mean() - 270) < 10


def test_queries_fit_inside_the_sample_pool():
    qs = QuerySet.build(QueryConfig(size="lognormal", mean=50, high=300, count=500), 300)
    assert (qs.starts >= 0).all() and (qs.starts + qs.sizes <= 300).all()


def test_pool_gather_returns_exactly_the_pieces_samples():
    spec = _spec()
    pool = SamplePool(spec, 40)
    full = WorkloadGenerator(replace(spec, batch_size=40, num_batches=1)).batch(0)
    got = pool.gather([(5, 3), (20, 4)])
    cols = [5, 6, 7, 20, 21, 22, 23]
    assert np.array_equal(got.lengths, full.lengths[:, cols])
    for t in range(spec.num_tables):
        want = np.concatenate([full.indices[full.offsets[t * 40 + b]:full.offsets[t * 40 + b + 1]] for b in cols])
        assert np.array_equal(got.table_indices(t), want)
    assert np.array_equal(got.dense, full.dense[cols])


# --- splitting, batching, server -------------------------------------------------------------------------------------

def test_split_query_covers_each_sample_once_in_pieces_of_at_most_split():
    for size, split in [(1, 0), (10, 0), (10, 3), (9, 3), (200, 64), (5, 64)]:
        parts = split_query(size, split)
        covered = np.concatenate([np.arange(o, o + n) for o, n in parts])
        assert np.array_equal(covered, np.arange(size))
        assert split == 0 or all(n <= split for _, n in parts)


def _pieces(sizes):
    return deque(Piece(Request(i, i, n, 0), 0, n) for i, n in enumerate(sizes))


def test_form_batch_fills_up_to_max_batch_in_arrival_order():
    q = _pieces([10, 20, 30, 5])
    assert [p.n for p in form_batch(q, 60)] == [10, 20, 30]
    assert [p.n for p in q] == [5]


def test_form_batch_sends_an_oversized_piece_alone_and_max_batch_zero_takes_one():
    q = _pieces([500, 10, 10])
    assert [p.n for p in form_batch(q, 64)] == [500]
    assert [p.n for p in form_batch(q, 0)] == [10]


def test_server_completes_each_query_once_after_all_its_pieces():
    done, seen = [], []
    lock = threading.Lock()

    def service(pieces):
        with lock:
            seen.extend((p.request.query, p.offset, p.n) for p in pieces)

    def complete(r):
        with lock:
            done.append(r.query)

    server = Server(ServerConfig(workers=2, max_batch=16, split=5, max_wait_ms=0.5), service, complete).start()
    sizes = [1, 7, 16, 40, 3]
    server.submit([Request(i, i, n, 0) for i, n in enumerate(sizes)])
    server.flush()
    while True:
        with lock:
            if len(done) == len(sizes):
                break
    server.stop()
    assert sorted(done) == list(range(len(sizes)))
    for q, n in enumerate(sizes):
        covered = sorted(o + k for qq, o, m in seen if qq == q for k in range(m))
        assert covered == list(range(n))
    s = server.stats.summary()
    assert s["batch_samples_max"] <= 16 and s["batches"] == len(server.stats.service_s)


def test_static_batching_waits_for_a_full_batch_until_flushed():
    done = []
    server = Server(ServerConfig(workers=1, max_batch=8, max_wait_ms=-1), lambda p: None,
                    lambda r: done.append(r.query)).start()
    server.submit([Request(i, i, 2, 0) for i in range(5)])  # 10 samples: one full batch of 8, then 2 left waiting
    server.flush()
    server.stop()
    assert sorted(done) == list(range(5))
    assert sorted(server.stats.batch_samples) == [2, 8]


# --- queueing reference -----------------------------------------------------------------------------------------------

def test_md1_simulation_mean_matches_pollaczek_khinchine():
    lam, s = 120.0, 0.005  # rho 0.6
    sim = simulate_mdc(lam, s, 1, customers=400_000, seed=1)
    assert sim.mean() == pytest.approx(md1_mean_sojourn(lam, s), rel=0.02)
    assert sim.min() >= s - 1e-12


def test_mdc_with_one_server_is_lindleys_recursion():
    lam, s = 150.0, 0.005
    sim = simulate_mdc(lam, s, 1, customers=2000, seed=3, warmup=0)
    gaps = np.random.default_rng(3).exponential(1 / lam, size=2000)
    w, out = 0.0, []
    for i, g in enumerate(gaps):
        w = 0.0 if i == 0 else max(0.0, w + s - g)
        out.append(w + s)
    assert np.allclose(sim, out)


def test_more_servers_at_equal_utilisation_wait_less():
    s = 0.005
    p99 = [np.percentile(simulate_mdc(0.6 * c / s, s, c, customers=200_000), 99) for c in (1, 2, 4)]
    assert p99[0] > p99[1] > p99[2] >= s


# --- search ------------------------------------------------------------------------------------------------------------

def test_bisection_finds_the_boundary_of_a_monotone_verdict_and_counts_runs():
    boundary = 37.0
    result = bisect_qps(lambda q: {"verdict": "VALID" if q <= boundary else "INVALID"}, 10.0, steps=6,
                        bracket_runs=4, result=SearchResult(Setting("x", "ours", ServerConfig())))
    # bracket 10 → 20 → 40 (3 runs), then 6 halvings of [20, 40]: within 20/64 of the boundary, below it
    assert result.runs == 9
    assert boundary - 20 / 64 <= result.best_qps <= boundary


def test_search_probes_every_candidate_at_the_best_qps_and_bisects_the_one_with_most_headroom():
    from serving.search import our_candidates, search_all

    sc = SearchConfig(worker_kinds=["process", "thread"], workers=[2, 1], splits=[0], max_batches=[256],
                      static_batches=[128], bisection_steps=3, bracket_runs=4, max_settings=1)
    capacity = {"naive": 100.0, "static B=128": 120.0, "ours process w=2 split=0 B=256 wait=0": 200.0,
                "ours thread w=2 split=0 B=256 wait=0": 130.0, "ours thread w=1 split=0 B=256 wait=0": 90.0}
    calls = []

    def run(st, q):  # latency grows with load: the setting with more capacity has more headroom at a given QPS
        calls.append((st.label, q))
        return {"verdict": "VALID" if q <= capacity[st.label] else "INVALID", "p95_ms": 100 * q / capacity[st.label],
                "target_qps": q}

    results = search_all(run, ServerConfig(), sc, 50.0, cores=2, log=lambda m: None, rank_key="p95_ms")
    by = {r.setting.label: r for r in results}
    probe = by["static B=128"].best_qps
    assert all(by[st.label].points[0]["target_qps"] == probe for st in our_candidates(ServerConfig(), sc, 2))
    best = by["ours process w=2 split=0 B=256 wait=0"]
    assert best.runs > 1 and by["ours thread w=2 split=0 B=256 wait=0"].runs == 1  # only one bisected
    assert 0.8 * 200 <= best.best_qps <= 200
    assert len(calls) == sum(r.runs for r in results)  # every LoadGen run is counted


def test_bisection_reports_zero_when_nothing_is_valid():
    r = bisect_qps(lambda q: {"verdict": "INVALID"}, 8.0, 3, 3, SearchResult(Setting("x", "naive", ServerConfig())))
    assert r.best_qps == 0 and r.runs == 3


# --- LoadGen -----------------------------------------------------------------------------------------------------------

def test_short_loadgen_run_answers_every_query_and_keeps_its_logs(tmp_path):
    from serving.loadgen import run_loadgen

    qs = QuerySet.build(QueryConfig(size="fixed", mean=4, count=32, pool_samples=64), 64)
    cfg = LoadGenConfig(target_qps=200, latency_ms=50, percentile=90, min_duration_ms=200, min_query_count=20)
    server = Server(ServerConfig(workers=2, max_batch=0, service="fixed", fixed_ms=1.0), FixedService(1.0))
    p = run_loadgen(server, qs, cfg, tmp_path)
    assert p["verdict"] in ("VALID", "INVALID")
    assert p["p50_ms"] >= 1.0 and p["p99_ms"] >= p["p50_ms"]
    assert (tmp_path / "mlperf_log_summary.txt").is_file() and (tmp_path / "mlperf_log_detail.txt").is_file()
    assert p["batches"] >= 20 and p["batch_samples_mean"] == 4


def test_parse_summary_reads_verdict_and_percentiles():
    from serving.loadgen import parse_summary

    text = ("Result is : VALID\nCompleted samples per second    : 57.94\nScheduled samples per second : 58.08\n"
            "Mean latency (ns)               : 7257039\n50.00 percentile latency (ns)   : 5614119\n"
            "99.90 percentile latency (ns)   : 20219956\n")
    p = parse_summary(text)
    assert p["verdict"] == "VALID" and p["completed_qps"] == 57.94 and p["scheduled_qps"] == 58.08
    assert p["p50_ms"] == pytest.approx(5.614119) and p["p99.9_ms"] == pytest.approx(20.219956)


# --- config checks and CLI ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field,value,needle", [("latency_ms", 0.0, "latency bound"), ("target_qps", -1.0, "target_qps"),
                                                ("percentile", 100.0, "(0, 100)"), ("percentile", 0.0, "(0, 100)")])
def test_check_serving_names_the_bad_loadgen_value(field, value, needle):
    cfg = ServingConfig()
    setattr(cfg.loadgen, field, value)
    with pytest.raises(ServingError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        check_serving(cfg)


def test_check_serving_accepts_the_defaults():
    check_serving(ServingConfig(search=SearchConfig()))


def _cli(args, cwd, monkeypatch, capsys):
    """`dlrmbench serve ARGS` in this process (the console script's own entry), from `cwd`."""
    from benchmarks.cli import main

    monkeypatch.chdir(cwd)
    rc = main(["serve", *args])
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, rc, out.out, out.err)


@pytest.mark.parametrize("arg", ["serving.loadgen.latency_ms=0", "serving.loadgen.target_qps=0",
                                 "serving.loadgen.percentile=100", "serving.loadgen.percentile=-5",
                                 "serving.workload=no_such_workload", "serving.server.workers=0"])
def test_cli_bad_input_one_line_exit_2_nothing_written(arg, tmp_path, monkeypatch, capsys):
    r = _cli([arg, f"records={tmp_path / 'r.jsonl'}"], tmp_path, monkeypatch, capsys)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "error" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_cli_run_writes_a_record_with_verdict_percentiles_and_loadgen_logs(tmp_path, monkeypatch, capsys):
    out = tmp_path / "r.jsonl"
    r = _cli(["run", "serving.loadgen.min_duration_ms=300", "serving.loadgen.min_query_count=10",
              "serving.loadgen.target_qps=30", "serving.query.count=64", "serving.query.pool_samples=256",
              f"records={out}"], tmp_path, monkeypatch, capsys)
    assert r.returncode == 0, r.stderr[-2000:]

    rec = json.loads(out.read_text().splitlines()[0])
    assert rec["kind"] == "serving" and rec["verdict"] in ("VALID", "INVALID")
    names = {m["name"] for m in rec["metrics"]}
    assert {"qps_offered", "latency_p50", "latency_p99", "queue_wait_ms_mean", "service_ms_mean"} <= names
    assert Path(rec["point"]["log_dir"], "mlperf_log_summary.txt").is_file() or \
        (tmp_path / rec["point"]["log_dir"] / "mlperf_log_summary.txt").is_file()


def _found(best: float, kind: str = "ours") -> SearchResult:
    r = SearchResult(Setting("x", kind, ServerConfig()))
    r.best_qps, r.bracketed = best, True
    r.points = [{"target_qps": best, "verdict": "VALID"}, {"target_qps": best * 1.1, "verdict": "INVALID"}]
    return r


def test_confirm_keeps_the_best_qps_when_its_repeats_hold():
    from serving.search import confirm

    r, runs = _found(100.0), []
    confirm(lambda q, k: runs.append((q, k)) or {"verdict": "VALID"}, r, repeats=2)
    assert runs == [(100.0, 0), (100.0, 1)] and r.confirmed_qps == 100.0 and r.confirmed_fraction == 1.0
    assert r.confirm_runs == 2 and r.confirm_trail == [(100.0, 2, 2)]


def test_confirm_backs_off_down_the_ladder_until_the_repeats_hold():
    from serving.search import confirm

    r, runs = _found(100.0), []

    def run(q, k):  # the search's best was lucky; the server repeats VALID only up to 85 QPS
        runs.append(q)
        return {"verdict": "VALID" if q <= 85 else "INVALID"}

    confirm(run, r, repeats=2, ladder=(1.0, 0.95, 0.9, 0.8, 0.7))
    assert r.confirmed_qps == pytest.approx(80.0) and r.confirmed_fraction == 0.8
    assert runs == pytest.approx([100.0, 95.0, 90.0, 80.0, 80.0]) and r.confirm_runs == 5
    assert [ok for _, ok, _ in r.confirm_trail] == [0, 0, 0, 2]


def test_confirm_a_level_fails_when_any_repeat_is_invalid_and_each_run_is_counted():
    from serving.search import confirm

    r, verdicts = _found(200.0), iter(["VALID", "INVALID", "VALID", "VALID"])
    confirm(lambda q, k: {"verdict": next(verdicts)}, r, repeats=2, ladder=(1.0, 0.9))
    assert r.confirmed_qps == pytest.approx(180.0) and r.confirm_runs == 4
    assert r.confirm_trail == [(200.0, 1, 2), (pytest.approx(180.0), 2, 2)]


def test_confirm_reports_none_when_the_whole_ladder_fails_and_spends_at_most_ladder_times_repeats():
    from serving.search import confirm

    r = _found(50.0, kind="naive")
    confirm(lambda q, k: {"verdict": "INVALID"}, r, repeats=3, ladder=(1.0, 0.5))
    assert r.confirmed_qps == 0.0 and r.confirm_runs == 2  # each level stops at its first INVALID repeat
    r2 = _found(50.0)
    confirm(lambda q, k: {"verdict": "VALID" if k < 2 else "INVALID"}, r2, repeats=3, ladder=(1.0, 0.5))
    assert r2.confirmed_qps == 0.0 and r2.confirm_runs == 6  # worst case: len(ladder) × repeats


def test_confirm_runs_nothing_for_a_setting_never_valid():
    from serving.search import confirm

    r = SearchResult(Setting("x", "static", ServerConfig()))
    confirm(lambda q, k: pytest.fail("no run expected"), r, repeats=2)
    assert r.confirm_runs == 0 and r.confirmed_qps == 0.0


def test_confirm_bisects_between_the_held_level_and_the_failed_one_above_by_the_same_repeats_rule():
    from serving.search import confirm

    r, runs = _found(100.0), []

    def run(q, k):  # repeats VALID up to 87 QPS: the ladder holds at 80, bisection moves up towards 87
        runs.append(q)
        return {"verdict": "VALID" if q <= 87 else "INVALID"}

    confirm(run, r, repeats=2, ladder=(1.0, 0.9, 0.8), bisect_steps=3)
    # 90 failed, 80 held: 85 holds, 87.5 fails, 86.25 holds
    assert r.confirmed_qps == pytest.approx(86.25) and r.confirmed_fraction == pytest.approx(0.8625)
    assert runs == pytest.approx([100.0, 90.0, 80.0, 80.0, 85.0, 85.0, 87.5, 86.25, 86.25])
    assert r.confirm_runs == 9 and [round(q, 2) for q, _, _ in r.confirm_trail] == [100.0, 90.0, 80.0, 85.0, 87.5,
                                                                                     86.25]


def test_confirm_bisection_needs_every_repeat_of_a_midpoint_and_spends_at_most_steps_times_repeats_more():
    from serving.search import confirm

    r = _found(100.0)
    # each level: repeat 0 VALID, repeat 1 VALID only at ≤ 80: midpoints 85 and 82.5 fail on their second repeat
    confirm(lambda q, k: {"verdict": "VALID" if k == 0 or q <= 80 else "INVALID"}, r, repeats=2,
            ladder=(1.0, 0.9, 0.8), bisect_steps=2)
    assert r.confirmed_qps == pytest.approx(80.0) and r.confirmed_fraction == 0.8
    assert r.confirm_runs == (3 + 2) * 2  # worst case: (len(ladder) + bisect_steps) × repeats
    assert r.confirm_trail[-2:] == [(pytest.approx(85.0), 1, 2), (pytest.approx(82.5), 1, 2)]


def test_confirm_bisects_nothing_when_the_top_level_holds_or_no_level_holds():
    from serving.search import confirm

    r = _found(100.0)
    confirm(lambda q, k: {"verdict": "VALID"}, r, repeats=2, bisect_steps=3)
    assert r.confirmed_qps == 100.0 and r.confirm_runs == 2
    r2 = _found(100.0)
    confirm(lambda q, k: {"verdict": "INVALID"}, r2, repeats=2, ladder=(1.0, 0.5), bisect_steps=3)
    assert r2.confirmed_qps == 0.0 and r2.confirm_runs == 2


def test_confirm_above_walks_up_the_mirrored_ladder_from_a_top_that_holds_then_bisects_below_the_failed_level():
    from serving.search import confirm

    r, runs = _found(100.0), []

    def run(q, k):  # the 10 s runs hold up to 115 QPS, above the search's best of 100
        runs.append(q)
        return {"verdict": "VALID" if q <= 115 else "INVALID"}

    confirm(run, r, repeats=2, ladder=(1.0, 0.9, 0.8), bisect_steps=2, above=True)
    # 100 holds, 100/0.9 = 111.1 holds, 100/0.8 = 125 fails; bisect: 118.06 fails, 114.58 holds
    assert runs == pytest.approx([100.0, 100.0, 111.111, 111.111, 125.0, 118.056, 114.583, 114.583], rel=1e-4)
    assert r.confirmed_qps == pytest.approx(114.583, rel=1e-4) and r.confirmed_fraction > 1
    assert r.confirm_runs == 8 and not r.confirm_unbounded
    assert all(q <= 115 for q, ok, _ in r.confirm_trail if ok == 2)


def test_confirm_above_is_a_lower_bound_when_every_level_up_holds_and_runs_nothing_above_when_the_top_fails():
    from serving.search import confirm

    r = _found(100.0)
    confirm(lambda q, k: {"verdict": "VALID"}, r, repeats=2, ladder=(1.0, 0.9, 0.5), bisect_steps=3, above=True)
    assert r.confirmed_qps == pytest.approx(200.0) and r.confirm_unbounded
    assert r.confirm_runs == 3 * 2  # top, 1/0.9, 1/0.5: (len(ladder) - 1) levels up, no bisection without a failure
    r2, runs = _found(100.0), []
    confirm(lambda q, k: runs.append(q) or {"verdict": "VALID" if q <= 85 else "INVALID"}, r2, repeats=2,
            ladder=(1.0, 0.9, 0.8), above=True)
    assert max(runs) == 100.0 and r2.confirmed_qps == pytest.approx(80.0) and not r2.confirm_unbounded


def test_confirm_above_stops_at_a_disturbed_run_on_the_way_up_keeping_the_level_that_held():
    from serving.search import confirm

    r = _found(100.0)
    points = iter([{"verdict": "VALID"}, {"verdict": "VALID"}, {"verdict": "INVALID", "disturbed": True}])
    confirm(lambda q, k: next(points), r, repeats=2, ladder=(1.0, 0.9), bisect_steps=2, above=True)
    assert r.confirm_disturbed and r.confirmed_qps == 100.0 and r.confirm_runs == 3 and not r.confirm_unbounded


def test_confirm_stops_at_a_disturbed_run_instead_of_walking_down_the_ladder_on_it():
    from serving.search import confirm

    r = _found(100.0)
    points = iter([{"verdict": "INVALID"}, {"verdict": "INVALID", "disturbed": True}])
    confirm(lambda q, k: next(points), r, repeats=2, ladder=(1.0, 0.9, 0.8))
    assert r.confirm_disturbed and r.confirmed_qps == 0.0 and r.confirm_runs == 2
    # in the bisection: the level that held stays the figure, no further midpoint is run
    r2 = _found(100.0)
    verdicts = iter([{"verdict": "INVALID"}, {"verdict": "VALID"}, {"verdict": "VALID", "disturbed": True},
                     {"verdict": "INVALID", "disturbed": True}])
    confirm(lambda q, k: next(verdicts), r2, repeats=2, ladder=(1.0, 0.8), bisect_steps=3)
    assert r2.confirm_disturbed and r2.confirmed_qps == pytest.approx(80.0) and r2.confirm_runs == 4


def test_extend_bracket_doubles_above_a_lower_bound_until_invalid_and_bisects():
    from serving.search import extend_bracket

    r = SearchResult(Setting("x", "ours", ServerConfig()))
    r.best_qps, r.points = 100.0, [{"target_qps": 100.0, "verdict": "VALID"}]
    runs = []

    def run(q):
        runs.append(q)
        return {"target_qps": q, "verdict": "VALID" if q <= 300 else "INVALID"}

    extend_bracket(run, r, steps=2, bracket_runs=4)
    assert r.bracketed and runs[:2] == [200.0, 400.0] and runs[2:] == [300.0, 350.0]
    assert r.best_qps == 300.0 and r.runs == 5
    before = list(runs)
    extend_bracket(run, r, steps=2, bracket_runs=4)  # already bracketed: no run
    assert runs == before


def _capped(kind: str, best: float, runs: int = 2) -> SearchResult:
    """A searched setting whose 3 s best was `best` (bracketed, `runs` search runs)."""
    r = SearchResult(Setting(f"{kind} {best:g}", kind, ServerConfig()))
    r.best_qps, r.bracketed = best, True
    r.points = [{"target_qps": best, "verdict": "VALID"}] * runs
    return r


def test_confirm_top_confirms_each_kinds_top_k_reports_the_best_confirmed_one_and_counts_every_run():
    from serving.config import SearchConfig
    from serving.search import confirm_top

    caps = {"naive 100": 80.0, "static 300": 150.0, "static 250": 220.0, "static 200": 199.0,
            "ours 600": 300.0, "ours 500": 450.0, "ours 700": 700.0}  # what each really holds for 10 s
    results = [_capped("naive", 100.0), _capped("static", 300.0), _capped("static", 250.0),
               _capped("static", 200.0), _capped("ours", 600.0), _capped("ours", 500.0),
               _capped("ours", 700.0, runs=1)]  # ours 700: VALID at the probe only, never bisected: not confirmed
    calls = []

    def run(st, q, k=None):
        calls.append((st.label, q, k))
        return {"verdict": "VALID" if q <= caps[st.label] else "INVALID"}

    cfg = SearchConfig(confirm_top=2, confirm_repeats=2, confirm_bisect_steps=1)
    tops, best = confirm_top(run, results, cfg, log=lambda m: None)
    assert [r.setting.label for r in tops["static"]] == ["static 300", "static 250"]
    assert [r.setting.label for r in tops["ours"]] == ["ours 600", "ours 500"]
    assert best["naive"].setting.label == "naive 100" and best["static"].setting.label == "static 250"
    assert best["ours"].setting.label == "ours 500" and best["ours"].confirmed_qps > best["static"].confirmed_qps
    assert {lab for lab, _, _ in calls} == {"naive 100", "static 300", "static 250", "ours 600", "ours 500"}
    assert all(k is not None for _, _, k in calls)  # all bracketed: confirmation runs only
    assert len(calls) == sum(r.confirm_runs for r in results)
    assert all(q <= caps[lab] for r in results for lab in [r.setting.label] if r.confirmed_qps
               for q in [r.confirmed_qps])


def test_confirm_top_skips_a_runner_up_whose_best_run_cannot_beat_what_its_kind_confirmed():
    from serving.config import SearchConfig
    from serving.search import confirm_top

    results = [_capped("naive", 10.0), _capped("static", 30.0), _capped("static", 29.0), _capped("ours", 40.0),
               _capped("ours", 29.5)]
    calls = []

    def run(st, q, k=None):  # everything holds up to its best: static 30 confirms 30, ours 40 confirms 40
        calls.append(st.label)
        return {"verdict": "VALID"}

    tops, best = confirm_top(run, results, SearchConfig(confirm_top=2, confirm_above=False), log=lambda m: None)
    assert "static 29" not in calls and "ours 29.5" not in calls and len(calls) == 3 * 2
    assert best["static"].setting.label == "static 30" and best["ours"].setting.label == "ours 40"


def test_confirm_top_walks_every_kind_above_its_search_best_alike_when_confirm_above_is_on():
    from serving.config import SearchConfig
    from serving.search import confirm_top

    caps = {"naive 10": 12.0, "static 30": 33.0, "ours 40": 50.0}  # each holds above its 3 s best for 10 s
    results = [_capped("naive", 10.0), _capped("static", 30.0), _capped("ours", 40.0)]

    def run(st, q, k=None):
        return {"verdict": "VALID" if q <= caps[st.label] else "INVALID"}

    cfg = SearchConfig(confirm_top=1, confirm_repeats=2, confirm_bisect_steps=2)
    _, best = confirm_top(run, results, cfg, log=lambda m: None)
    for kind in ("naive", "static", "ours"):
        r = best[kind]
        assert r.best_qps < r.confirmed_qps <= caps[r.setting.label] and not r.confirm_unbounded
    off = [_capped("naive", 10.0), _capped("static", 30.0), _capped("ours", 40.0)]
    _, best = confirm_top(run, off, SearchConfig(confirm_top=1, confirm_above=False), log=lambda m: None)
    assert [best[k].confirmed_qps for k in ("naive", "static", "ours")] == [10.0, 30.0, 40.0]


def test_best_confirmed_lets_ours_fall_back_to_a_static_setting_that_held_higher():
    from serving.search import best_confirmed

    naive, st, ours = _capped("naive", 10.0), _capped("static", 30.0), _capped("ours", 40.0)
    naive.confirmed_qps, st.confirmed_qps, ours.confirmed_qps = 9.0, 27.0, 20.0
    best = best_confirmed({"naive": [naive], "static": [st], "ours": [ours]})
    assert best["naive"] is naive and best["static"] is st and best["ours"] is st
    ours.confirmed_qps = 28.0
    assert best_confirmed({"naive": [naive], "static": [st], "ours": [ours]})["ours"] is ours
    assert best_confirmed({"naive": [naive], "static": [st], "ours": []})["ours"] is st


@pytest.mark.parametrize("field,value,needle", [("confirm_top", 0, "confirm_top=0"), ("confirm_top", -1, "confirm_top=-1"),
                                                ("batch_headroom", 0.5, "batch_headroom=0.5")])
def test_check_serving_refuses_a_bad_confirmation_choice(field, value, needle):
    from serving.config import ServingConfig, ServingError, check_serving

    cfg = ServingConfig()
    setattr(cfg.search, field, value)
    with pytest.raises(ServingError, match=needle):
        check_serving(cfg)


@pytest.mark.parametrize("ladder", [[], [1.0, 1.0], [0.9, 0.95], [1.2, 0.9], [1.0, 0.0]])
def test_check_serving_refuses_a_confirm_ladder_that_is_not_decreasing_fractions(ladder):
    from serving.config import ServingConfig, check_serving

    cfg = ServingConfig()
    cfg.search.confirm_ladder = ladder
    with pytest.raises(ServingError, match="confirm_ladder"):
        check_serving(cfg)


def test_check_serving_refuses_a_negative_confirm_bisection_count():
    from serving.config import ServingConfig, check_serving

    cfg = ServingConfig()
    cfg.search.confirm_bisect_steps = -1
    with pytest.raises(ServingError, match="confirm_bisect_steps=-1"):
        check_serving(cfg)


def test_parse_summary_takes_offline_and_single_stream_throughput():
    from serving.loadgen import parse_summary

    offline = parse_summary("Samples per second: 3081.46\nResult is : INVALID\n50.00 percentile latency (ns) : 1000\n")
    single = parse_summary("QPS w/ loadgen overhead         : 1123.69\nResult is : VALID\n")
    assert offline["completed_qps"] == 3081.46 and offline["verdict"] == "INVALID" and offline["p50_ms"] == 0.001
    assert single["completed_qps"] == 1123.69 and single["verdict"] == "VALID"


# --- worker kinds, search space, GPU offload --------------------------------------------------------------------------

def _dlrm_spec() -> WorkloadSpec:
    """A DLRM-sized tiny workload (table dim = the bottom MLP's last width)."""
    from embedding.spec import DenseArch

    tables = tuple(TableSpec(f"t{i}", 2000, 8, pooling=PoolingSpec("uniform", low=1, high=4),
                             access=AccessSpec("zipf", 1.05)) for i in range(3))
    return WorkloadSpec("tiny_dlrm", tables, batch_size=8, dense=DenseArch(num_dense_features=4, bottom_mlp=(16, 8),
                                                                           top_mlp=(16, 1)))


def test_a_worker_process_loop_serves_batches_sent_as_sample_ranges():
    """The worker process's loop and the remote service's protocol, run in a thread here (no spawn: quick)."""
    import multiprocessing as mp

    import torch

    from serving.procpool import RemoteService, _child

    threads = torch.get_num_threads()
    parent, child = mp.Pipe()
    t = threading.Thread(target=_child, args=(child, _dlrm_spec(), 64, "torch"))
    t.start()
    try:
        assert parent.recv() == "ready"
        parent.send(("threads", 1))
        assert parent.recv() == "ok"
        remote = RemoteService(parent, np.array([0, 10, 40]))
        reqs = [Request(0, 1, 12, 0), Request(1, 2, 20, 0)]
        remote([Piece(reqs[0], 0, 12), Piece(reqs[1], 4, 16)])  # pool samples 10..21 and 44..59
        remote([Piece(reqs[1], 0, 4)])
        assert len(remote.inside_s) == 2 and all(s > 0 for s in remote.inside_s)
    finally:
        parent.send(None)
        t.join()
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_process_workers_serve_every_query_with_their_own_model_copy(tmp_path):
    from serving.build import build_setup, new_server
    from serving.loadgen import run_loadgen

    cfg = ServingConfig(query=QueryConfig(size="fixed", mean=8, count=32, pool_samples=64),
                        server=ServerConfig(workers=2, worker_kind="process", max_batch=32),
                        loadgen=LoadGenConfig(target_qps=100, latency_ms=1000, percentile=90, min_duration_ms=100,
                                              min_query_count=20))
    setup = build_setup(_dlrm_spec(), cfg)
    try:
        server = new_server(setup, cfg.server)
        p = run_loadgen(server, setup.queries, cfg.loadgen, tmp_path)
        pids = {proc.pid for proc in setup.procs.procs}
        assert len(pids) == 2 and all(proc.is_alive() for proc in setup.procs.procs)
        assert p["queries"] >= 20 and sum(server.stats.batch_samples) == 8 * p["queries"]
        inside = [len(s.inside_s) for s in server.services]
        assert sum(inside) == p["batches"]  # every batch ran in a worker process
        again = new_server(setup, cfg.server)  # the next run reuses the same processes
        assert {proc.pid for proc in setup.procs.procs} == pids and again.services[0].conn is server.services[0].conn
    finally:
        setup.close()
    assert setup.procs is None


def test_search_space_has_process_and_thread_workers_and_static_waits_for_b():
    from serving.search import naive_setting, our_candidates, static_settings

    sc = SearchConfig(worker_kinds=["process", "thread"], workers=[2, 1], splits=[0, 64], max_batches=[256])
    ours = our_candidates(ServerConfig(), sc, cores=2)
    kinds = {(s.server.worker_kind, s.server.workers) for s in ours}
    assert kinds == {("process", 2), ("thread", 2), ("thread", 1)}  # one process worker = one thread plus a pipe
    assert all(s.server.workers * s.server.intra_threads <= 2 for s in ours)
    assert all(s.server.max_wait_ms == -1 and s.server.workers == 1 for s in static_settings(ServerConfig(), sc, 2))
    naive = naive_setting(ServerConfig(), 2).server
    assert naive.max_batch == 0 and naive.split == 0 and naive.worker_kind == "thread"


def test_static_searches_every_batch_size_ours_may_use():
    from serving.search import static_settings

    sc = SearchConfig(static_batches=[128, 256, 512], max_batches=[256, 512, 1024])
    sizes = lambda batches: [s.server.max_batch for s in static_settings(ServerConfig(), sc, 2, batches)]  # noqa: E731
    assert sizes(None) == [128, 256, 512]
    assert sizes([256]) == [128, 256, 512]
    assert sizes([256, 512, 1024]) == [128, 256, 512, 1024]  # ours' admitted 1024: static gets it too


def test_admitted_batches_keeps_the_smallest_and_a_larger_one_only_well_under_the_bound():
    from serving.search import admitted_batches

    ms = {512: 30.0, 1024: 60.0}
    assert admitted_batches([1024, 256, 512], ms, bound_ms=400, headroom=4) == [256, 512, 1024]  # 60 × 4 ≤ 400
    assert admitted_batches([256, 512, 1024], ms, bound_ms=200, headroom=4) == [256, 512]  # 240 > 200
    assert admitted_batches([256, 512, 1024], ms, bound_ms=100, headroom=4) == [256]
    assert admitted_batches([256, 1024], {}, bound_ms=1e9, headroom=4) == [256]  # not measured: not admitted
    assert admitted_batches([256, 1024], {1024: 25.0}, bound_ms=100, headroom=4) == [256, 1024]  # boundary: ≤
    assert admitted_batches([256, 256], {}, bound_ms=1, headroom=4) == [256]
    # the rule reads only the ratio of batch time to bound: the same answer for any model and bound scaled alike
    for scale in (0.01, 1.0, 37.0):
        assert admitted_batches([256, 512, 1024], {b: t * scale for b, t in ms.items()}, 200 * scale, 4) == [256, 512]


def test_our_candidates_and_the_search_take_only_the_admitted_batch_sizes():
    from serving.search import our_candidates, search_all

    sc = SearchConfig(worker_kinds=["process", "thread"], workers=[2, 1], splits=[0, 64], max_batches=[256, 1024],
                      static_batches=[128], bisection_steps=1, bracket_runs=2, max_settings=1)
    every = our_candidates(ServerConfig(), sc, cores=2)
    assert {s.server.max_batch for s in every} == {256, 1024} and len(every) == 2 * 6  # 6 per batch size
    only = our_candidates(ServerConfig(), sc, cores=2, batches=[256])
    assert {s.server.max_batch for s in only} == {256} and len(only) == 6
    probed = []

    def run(st, q):
        if st.kind == "ours":
            probed.append(st.server.max_batch)
        return {"verdict": "VALID" if q <= 100 else "INVALID", "p95_ms": q, "target_qps": q}

    search_all(run, ServerConfig(), sc, 50.0, cores=2, log=lambda m: None, rank_key="p95_ms", batches=[256])
    assert set(probed) == {256}  # a size not admitted costs no LoadGen run


def test_queries_above_the_gpu_threshold_go_whole_to_the_offload_lane():
    cpu, gpu, done = [], [], []
    lock = threading.Lock()

    def on(where):
        def service(pieces):
            with lock:
                where.extend((p.request.query, p.n) for p in pieces)
        return service

    server = Server(ServerConfig(workers=1, max_batch=64, split=8, gpu_threshold=20), on(cpu),
                    lambda r: done.append(r.query), offload=on(gpu)).start()
    server.submit([Request(i, i, n, 0) for i, n in enumerate([5, 30, 20, 100])])
    server.flush()
    while len(done) < 4:
        pass
    server.stop()
    assert sorted(gpu) == [(1, 30), (3, 100)]  # whole, unsplit
    assert sorted(q for q, _ in cpu) == [0, 2, 2, 2] and server.stats.summary()["offloaded_queries"] == 2


def test_gpu_threshold_without_cuda_is_refused_and_zero_is_off():
    cfg = ServingConfig(server=ServerConfig(gpu_threshold=256))
    with pytest.raises(ServingError, match="needs a CUDA device"):
        check_serving(cfg, cuda=False)
    check_serving(cfg, cuda=True)
    check_serving(ServingConfig(server=ServerConfig(gpu_threshold=0)), cuda=False)


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_gpu_offload_serves_large_queries_on_the_cuda_copy(tmp_path):
    from serving.build import build_setup, new_server
    from serving.loadgen import run_loadgen

    cfg = ServingConfig(query=QueryConfig(size="uniform", low=1, high=64, count=64, pool_samples=256),
                        server=ServerConfig(workers=1, max_batch=64, gpu_threshold=32),
                        loadgen=LoadGenConfig(target_qps=100, latency_ms=1000, percentile=90, min_duration_ms=100,
                                              min_query_count=30))
    setup = build_setup(_dlrm_spec(), cfg)
    server = new_server(setup, cfg.server)
    p = run_loadgen(server, setup.queries, cfg.loadgen, tmp_path)
    assert p["offloaded_queries"] > 0 and setup.gpu.device.type == "cuda"
    assert next(setup.gpu.model.parameters()).is_cuda


@pytest.mark.parametrize("arg,needle", [("serving.server.worker_kind=fiber", "worker_kind"),
                                        ("serving.server.gpu_threshold=256", "CUDA"),
                                        ("serving.whatif.cache_fraction=0", "cache_fraction"),
                                        ("serving.search.worker_kinds=[thread,green]", "worker_kinds")])
def test_cli_bad_worker_mode_and_whatif_knobs_one_line_exit_2(arg, needle, tmp_path, monkeypatch, capsys):
    if "gpu" in arg and __import__("torch").cuda.is_available():
        pytest.skip("a CUDA device is present: the threshold is accepted")
    r = _cli([arg, f"records={tmp_path / 'r.jsonl'}"], tmp_path, monkeypatch, capsys)
    assert r.returncode == 2 and needle in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_whatif_with_repeats_compares_the_median_of_each_loads_runs_and_counts_those_in_the_model_band(
        tmp_path, monkeypatch, capsys):
    out = tmp_path / "r.jsonl"
    r = _cli(["whatif", "serving=deeprecsys_rm1", "serving.loadgen.target_qps=80", "serving.loadgen.repeats=2",
              "serving.loadgen.min_query_count=40", "serving.loadgen.min_duration_ms=300", "serving.max_rows=20000",
              "serving.loadgen.percentile=90", "serving.query.pool_samples=2048", f"records={out}"],
             tmp_path, monkeypatch, capsys)
    assert r.returncode == 0, r.stderr
    summary = [json.loads(x) for x in out.read_text().splitlines()][-1]
    assert summary["kind"] == "serving_whatif" and len(summary["comparison"]) == 3
    for row in summary["comparison"]:
        assert row["runs"] == 2 and len(row["measured_p99_runs_ms"]) == 2
        assert row["measured_p99_ms"] == pytest.approx(float(np.median(row["measured_p99_runs_ms"])))
        lo, hi = row["model_p99_band_ms"]
        assert row["runs_in_band"] == sum(lo <= v <= hi for v in row["measured_p99_runs_ms"])
    assert "inside the model's band" in r.stdout and "median of 2 runs per load" in r.stdout


def _fake_proc(root, cpu: list[int], procs: dict[int, tuple[str, int, int, int]]):
    """A /proc with /proc/stat's cpu line and, per pid, (command name, ppid, utime, stime)."""
    root.mkdir(exist_ok=True)
    (root / "stat").write_text("cpu  " + " ".join(map(str, cpu)) + "\ncpu0 0\ncpu1 0\nintr 0\n")
    for pid, (name, ppid, ut, st) in procs.items():
        (root / str(pid)).mkdir(exist_ok=True)
        rest = ["S", str(ppid)] + ["0"] * 9 + [str(ut), str(st)] + ["0"] * 5
        (root / str(pid) / "stat").write_text(f"{pid} ({name}) " + " ".join(rest) + "\n")


def test_others_cores_counts_busy_cpu_outside_this_process_tree(tmp_path):
    from serving.interference import others_cores, read_counters

    proc = tmp_path / "proc"
    # user nice system idle iowait irq softirq steal; pid 10 = us, 11 our worker (name with ') ('), 20 another job
    _fake_proc(proc, [100, 0, 0, 100, 0, 0, 0, 0], {10: ("py", 1, 50, 0), 11: ("w) (x", 10, 10, 0),
                                                    20: ("job", 1, 0, 0)})
    before = read_counters(10, proc)
    assert before.busy == 100 and before.total == 200 and before.own == 60 and before.cpus == 2
    # 200 jiffies pass on 2 CPUs (100 per CPU): ours used 60, the other job 90, idle 50
    _fake_proc(proc, [250, 0, 0, 150, 0, 0, 0, 0], {10: ("py", 1, 80, 0), 11: ("w) (x", 10, 40, 0),
                                                    20: ("job", 1, 90, 0)})
    after = read_counters(10, proc)
    assert after.own == 120 and others_cores(before, after) == pytest.approx(0.9)
    assert others_cores(None, after) is None and read_counters(10, tmp_path / "nothing") is None


def test_run_guarded_reruns_a_disturbed_invalid_run_at_most_reruns_times_and_keeps_every_run():
    from serving.interference import CpuCounters, run_guarded

    def counters_from(shares):  # successive readings such that the k-th run sees shares[k] cores of others
        readings, busy, total = [], 0, 0
        for sh in shares:
            readings.append(CpuCounters(busy, total, 0, 2))
            busy, total = busy + int(100 * sh), total + 200
            readings.append(CpuCounters(busy, total, 0, 2))
        return iter(readings).__next__

    calls = []
    runs = run_guarded(lambda: calls.append(1) or {"verdict": "INVALID"}, counters_from([0.9, 0.5, 0.1]), 0.25, 2)
    assert len(calls) == 3 and [r["disturbed"] for r in runs] == [True, True, False]
    assert [r["others_cpu_cores"] for r in runs] == pytest.approx([0.9, 0.5, 0.1])
    runs = run_guarded(lambda: {"verdict": "INVALID"}, counters_from([0.9, 0.9]), 0.25, 1)
    assert len(runs) == 2 and runs[-1]["disturbed"]  # reruns spent: the last run is kept, marked disturbed
    runs = run_guarded(lambda: {"verdict": "VALID"}, counters_from([0.9]), 0.25, 2)
    assert len(runs) == 1 and runs[0]["disturbed"]  # VALID with less CPU: kept, no rerun
    runs = run_guarded(lambda: {"verdict": "INVALID"}, lambda: None, 0.25, 2)
    assert len(runs) == 1 and runs[0]["others_cpu_cores"] is None and not runs[0]["disturbed"]
