"""The SimPy server model: with a deterministic service it is the M/D/c queue; the service model resamples measured
batches by size and applies an embedding speedup only to the embedding share; the on-off arrivals keep their mean
rate and are burstier than Poisson; static batching in the model waits for a full batch."""
import numpy as np
import pytest

from serving.config import ServerConfig
from serving.desim import Arrivals, ServiceModel, bounded_qps, simulate, simulate_runs
from serving.theory import mdc_percentiles


@pytest.mark.parametrize("c", [1, 2])
def test_model_with_a_fixed_service_reproduces_md_c_percentiles(c):
    model = ServiceModel.fixed(0.005)
    lam = 0.6 * c / 0.005
    sim = simulate(ServerConfig(workers=c, max_batch=0), lam, np.array([1]), model, queries=30000, seed=2)
    ref = mdc_percentiles(lam, 0.005, c, customers=300_000)
    assert sim["p50_ms"] == pytest.approx(ref["p50_ms"], rel=0.05)
    assert sim["p99_ms"] == pytest.approx(ref["p99_ms"], rel=0.10)


def test_service_model_resamples_measured_batches_of_a_similar_size():
    n = np.repeat([16, 64, 256], 50).astype(float)
    t = np.concatenate([np.full(50, 0.001), np.linspace(0.002, 0.004, 50), np.full(50, 0.01)])
    model = ServiceModel.fit(n, t, neighbours=20)
    rng = np.random.default_rng(0)
    draws = np.array([model.draw(64, rng) for _ in range(500)])
    assert 0.002 - 1e-12 <= draws.min() and draws.max() <= 0.004 + 1e-12  # only the 64-sample batches' times
    assert np.unique(draws).size > 10  # their spread, not one fitted value
    assert all(model.draw(16, rng) == 0.001 for _ in range(20)) and model.draw(256, rng) == 0.01


def test_service_model_scales_a_neighbours_time_to_the_drawn_size_by_the_fitted_line():
    n = np.array([100.0, 200.0])
    model = ServiceModel.fit(n, 1e-5 * n, neighbours=1)
    assert model.draw(150, np.random.default_rng(0)) == pytest.approx(1.5e-3)


def test_embedding_speedup_scales_only_the_embedding_share():
    model = ServiceModel.fit(np.array([100.0]), np.array([0.1]))
    model.embedding_share, model.embedding_speedup = (lambda n: 0.5), 4.0
    t = model.draw(100, np.random.default_rng(0))
    assert t == pytest.approx(0.1 * (0.5 + 0.5 / 4))


def test_onoff_arrivals_keep_the_mean_rate_and_are_burstier_than_poisson():
    rng = np.random.default_rng(0)
    poisson = Arrivals().gaps(100.0, 100_000, rng)
    onoff = Arrivals("onoff", burst=4.0, on_fraction=0.2, on_ms=50.0).gaps(100.0, 100_000, rng)
    assert 1 / onoff.mean() == pytest.approx(100.0, rel=0.05) and 1 / poisson.mean() == pytest.approx(100.0, rel=0.02)
    counts = [np.histogram(np.cumsum(g), bins=np.arange(0, 900, 0.1))[0] for g in (poisson, onoff)]
    assert counts[1].var() / counts[1].mean() > 1.5 > counts[0].var() / counts[0].mean()  # index of dispersion


def test_onoff_arrivals_refuse_a_negative_off_rate():
    with pytest.raises(ValueError, match="burst × on_fraction < 1"):
        Arrivals("onoff", burst=6.0, on_fraction=0.2).gaps(10.0, 10, np.random.default_rng(0))


def test_bursty_arrivals_lower_the_model_latency_bounded_qps():
    model = ServiceModel.fixed(0.005)
    server = ServerConfig(workers=1, max_batch=0)
    base = bounded_qps(server, np.array([1]), model, 50.0, 95, start=50.0, steps=5, queries=4000)
    bursty = bounded_qps(server, np.array([1]), model, 50.0, 95, start=50.0, steps=5, queries=4000,
                         arrivals=Arrivals("onoff", burst=4.0, on_fraction=0.2, on_ms=200.0))
    assert 0 < bursty < base < 200  # 200 QPS is the service's capacity


def test_static_batching_in_the_model_waits_for_a_full_batch():
    seen = []

    class Spy(ServiceModel):
        def draw(self, n, rng):
            seen.append(n)
            return 1e-4

    spy = Spy.fixed(1e-4)
    simulate(ServerConfig(workers=1, max_batch=8, max_wait_ms=-1), 50.0, np.array([2]), spy, queries=40, warmup=0)
    assert seen == [8] * 10


def test_runs_like_loadgen_take_the_median_of_replications_with_a_band():
    r = simulate_runs(ServerConfig(workers=1, max_batch=0), 120.0, np.array([1]), ServiceModel.fixed(0.005), 500,
                      runs=9)
    lo, hi = r["p99_band_ms"]
    assert lo <= r["p99_ms"] <= hi and r["p50_ms"] >= 5.0


def test_batching_in_the_model_never_exceeds_max_batch_and_splits_queries():
    seen = []

    class Spy(ServiceModel):
        def draw(self, n, rng):
            seen.append(n)
            return 1e-4 * n

    spy = Spy.fixed(1e-4)
    simulate(ServerConfig(workers=2, max_batch=64, split=32, max_wait_ms=1.0), 200.0, np.array([10, 100]), spy,
             queries=500, warmup=0)
    assert max(seen) <= 64 and sum(seen) > 0


def test_a_short_runs_reference_matches_steady_state_at_low_load_and_sits_below_it_at_high_load():
    from serving.theory import finite_run_percentiles

    low = finite_run_percentiles(0.3 / 0.005, 0.005, 1, customers=2000, runs=100)
    steady_low = mdc_percentiles(0.3 / 0.005, 0.005, 1, customers=300_000)
    assert abs(low["p50_ms"] / steady_low["p50_ms"] - 1) < 0.03 and abs(low["p99_ms"] / steady_low["p99_ms"] - 1) < 0.1
    high = finite_run_percentiles(0.85 / 0.005, 0.005, 1, customers=2000, runs=100)
    steady_high = mdc_percentiles(0.85 / 0.005, 0.005, 1, customers=300_000)
    lo, hi = high["p99_band_ms"]
    assert lo < high["p99_ms"] < hi and high["p99_ms"] < steady_high["p99_ms"]  # the tail has not built up yet


# --- the path outside service, and the trust verdict ---------------------------------------------------------------

def test_model_with_a_zero_path_outside_service_still_reproduces_md_c():
    from serving.desim import PathModel

    zero = PathModel(dispatch=np.zeros(10), complete=np.zeros(10), issue=0.0)
    lam = 0.6 * 2 / 0.005
    sim = simulate(ServerConfig(workers=2, max_batch=0), lam, np.array([1]), ServiceModel.fixed(0.005),
                   queries=30000, seed=2, path=zero)
    ref = mdc_percentiles(lam, 0.005, 2, customers=300_000)
    assert sim["p50_ms"] == pytest.approx(ref["p50_ms"], rel=0.05)
    assert sim["p99_ms"] == pytest.approx(ref["p99_ms"], rel=0.10)


def test_path_outside_service_adds_dispatch_completion_and_issue_delay_to_each_query():
    from serving.desim import PathModel

    path = PathModel(dispatch=np.full(3, 0.001), complete=np.full(3, 0.002), issue=0.0005)
    sim = simulate(ServerConfig(workers=1, max_batch=0), 1.0, np.array([1]), ServiceModel.fixed(0.005),
                   queries=200, seed=0, warmup=0, percentiles=(50,), path=path)
    assert sim["p50_ms"] == pytest.approx(5 + 1 + 2 + 0.5)  # at 1 QPS nobody waits: service + the three terms


def test_path_terms_are_taken_from_the_servers_own_records():
    import time

    from serving.desim import PathModel
    from serving.server import Request, Server

    done = []
    server = Server(ServerConfig(workers=2, max_batch=8, split=4, max_wait_ms=0), lambda p: None,
                    lambda r: done.append(r.query)).start()
    server.submit([Request(i, i, n, time.perf_counter_ns()) for i, n in enumerate([3, 9, 4, 1, 12])])
    server.flush()
    while len(done) < 5:
        time.sleep(0.001)
    server.stop()
    st = server.stats
    assert len(st.dispatch_s) == len(st.batch_samples) and len(st.complete_s) == len(st.sojourn_s) == 5
    assert min(st.dispatch_s) >= 0 and min(st.complete_s) >= 0
    path = PathModel.from_stats([st], issue=-1.0)
    assert path.issue == 0.0  # a negative measured mean is clipped: the issue delay cannot be negative
    rng = np.random.default_rng(0)
    assert {path.draw_dispatch(rng) for _ in range(50)} <= set(st.dispatch_s)
    assert {path.draw_complete(rng) for _ in range(50)} <= set(st.complete_s)


def test_path_model_refuses_runs_without_records():
    from serving.desim import PathModel
    from serving.server import ServerStats

    with pytest.raises(ValueError, match="no dispatch or completion records"):
        PathModel.from_stats([ServerStats()])


def test_trust_verdict_needs_every_point_within_15_percent_and_says_when_a_miss_is_inside_the_band():
    from serving.desim import trust_verdict

    def point(measured, model, band):
        return {"measured_p99_ms": measured, "model_p99_ms": model, "model_p99_band_ms": band}

    ok = [point(10.0, 11.0, (9.0, 13.0)), point(20.0, 17.5, (15.0, 22.0)), point(50.0, 56.0, (40.0, 70.0))]
    assert trust_verdict(ok) == (True, ["within 15% (+10.0%)", "within 15% (-12.5%)", "within 15% (+12.0%)"])
    in_band = [*ok[:2], point(50.0, 40.0, (35.0, 55.0))]
    trusted, labels = trust_verdict(in_band)
    assert not trusted and "OUTSIDE 15% (-20.0%), but inside the model's 5–95% band" in labels[2]
    out = [*ok[:2], point(50.0, 80.0, (70.0, 90.0))]
    trusted, labels = trust_verdict(out)
    assert not trusted and labels[2] == "OUTSIDE 15% (+60.0%) and outside the model's band"
    assert trust_verdict([]) == (False, [])


def test_time_ordered_service_takes_the_slowdown_of_the_measured_batch_at_the_same_point_of_the_runs():
    n = np.full(4, 100.0)
    model = ServiceModel.fit(np.array([100.0, 200.0]), np.array([0.001, 0.002]))  # line: 10 us/sample
    run1 = (np.array([5.0, 5.1]), n[:2], np.array([0.003, 0.003]))  # slowdown 3 for 0.1 s (+ its 3 ms service)
    run2 = (np.array([9.0, 9.2]), n[2:], np.array([0.001, 0.001]))  # slowdown 1, laid after run 1
    model.with_trace([run1, run2])
    rng = np.random.default_rng(0)
    assert model.period == pytest.approx(0.103 + 0.201)
    assert model.draw(50, rng, at=0.05) == pytest.approx(3 * 0.0005)
    assert model.draw(50, rng, at=0.103 + 0.1) == pytest.approx(0.0005)
    assert model.draw(50, rng, at=model.period + 0.05) == pytest.approx(3 * 0.0005)  # wraps around
    t = model.draw(100, rng)  # without a time: the i.i.d. draw by size, a measured 100-sample batch scaled
    assert t == pytest.approx(0.001) or t == pytest.approx(0.002 * 100 / 200)


def test_time_ordered_model_with_constant_slowdown_reproduces_md_c():
    model = ServiceModel.fixed(0.005).with_trace([(np.arange(50) * 0.01, np.ones(50), np.full(50, 0.005))])
    lam = 0.6 * 2 / 0.005
    sim = simulate(ServerConfig(workers=2, max_batch=0), lam, np.array([1]), model, queries=30000, seed=2)
    ref = mdc_percentiles(lam, 0.005, 2, customers=300_000)
    assert sim["p50_ms"] == pytest.approx(ref["p50_ms"], rel=0.05)
    assert sim["p99_ms"] == pytest.approx(ref["p99_ms"], rel=0.10)


def test_replay_from_offset_zero_follows_the_measured_runs_own_timeline():
    spells = (np.array([0.0, 100.0, 1e4]), np.ones(3), np.array([0.015, 0.005, 0.005]))  # slow for the first 100 s
    model = ServiceModel.fixed(0.005).with_trace([spells])

    def p50(offset):
        return simulate(ServerConfig(workers=1, max_batch=0), 1.0, np.array([1]), model, queries=20, seed=0,
                        warmup=0, percentiles=(50,), trace_offset=offset)["p50_ms"]

    assert p50(0.0) == pytest.approx(15.0)  # the run's start: the measured slow spell (slowdown 3)
    assert p50(200.0) == pytest.approx(5.0)  # the same arrivals after the spell
