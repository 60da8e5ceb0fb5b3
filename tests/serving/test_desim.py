"""The SimPy server model: with a deterministic service it is the M/D/c queue; the service model fits measured
pairs and applies an embedding speedup only to the embedding share."""
import numpy as np
import pytest

from serving.config import ServerConfig
from serving.desim import ServiceModel, simulate
from serving.theory import mdc_percentiles


@pytest.mark.parametrize("c", [1, 2])
def test_model_with_a_fixed_service_reproduces_md_c_percentiles(c):
    model = ServiceModel(a=0.005, b=0.0, ratios=np.ones(1))
    lam = 0.6 * c / 0.005
    sim = simulate(ServerConfig(workers=c, max_batch=0), lam, np.array([1]), model, queries=30000, seed=2)
    ref = mdc_percentiles(lam, 0.005, c, customers=300_000)
    assert sim["p50_ms"] == pytest.approx(ref["p50_ms"], rel=0.05)
    assert sim["p99_ms"] == pytest.approx(ref["p99_ms"], rel=0.10)


def test_service_model_fit_recovers_a_linear_cost_and_its_spread():
    n = np.repeat([16, 64, 256], 50).astype(float)
    ratio = np.tile(np.linspace(0.9, 1.1, 50), 3)
    model = ServiceModel.fit(n, (0.001 + 2e-5 * n) * ratio)
    assert model.a == pytest.approx(0.001, rel=0.05) and model.b == pytest.approx(2e-5, rel=0.05)
    assert 0.85 < model.ratios.min() and model.ratios.max() < 1.15


def test_embedding_speedup_scales_only_the_embedding_share():
    model = ServiceModel(a=0.0, b=1e-3, ratios=np.ones(1), embedding_share=lambda n: 0.5, embedding_speedup=4.0)
    t = model.draw(100, np.random.default_rng(0))
    assert t == pytest.approx(0.1 * (0.5 + 0.5 / 4))


def test_batching_in_the_model_never_exceeds_max_batch_and_splits_queries():
    seen = []

    class Spy(ServiceModel):
        def draw(self, n, rng):
            seen.append(n)
            return 1e-4 * n

    spy = Spy(a=0.0, b=1e-4, ratios=np.ones(1))
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
