"""RecNMP's published figures, reproduced by the emulator with their tolerance (see benchmarks/nmp_bench.py)."""
import numpy as np
import pytest

from benchmarks.nmp_bench import PAPER_SPEEDUP, hit_rate, line_hit_rate, sls_stream, speedup
from embedding.batch import Batch
from embedding.nmp import DramGeometry, NmpConfig, emulate_streams, run_nmp
from embedding.spec import PoolingSpec, TableSpec, WorkloadSpec


@pytest.fixture(scope="module")
def sls():
    return sls_stream(batch=32, vector_bytes=128, seed=1)


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_page_coloured_sls_speedup_within_10_percent_of_recnmp(sls, ranks):
    got = speedup(NmpConfig(mapping="page_colour", geometry=DramGeometry(dimms_per_channel=ranks // 2)), sls)
    assert got == pytest.approx(PAPER_SPEEDUP[ranks], rel=0.10)


@pytest.mark.parametrize("ranks", [4, 8])
def test_random_placement_falls_below_page_colouring(sls, ranks):
    geo = DramGeometry(dimms_per_channel=ranks // 2)
    colour = speedup(NmpConfig(mapping="page_colour", geometry=geo), sls)
    random = speedup(NmpConfig(mapping="random", geometry=geo), sls)
    assert random < 0.9 * colour


def test_lru_rankcache_hit_rate_under_5_percent_on_uniform_trace():
    streams = [sls_stream(batch=8, vector_bytes=128, seed=s) for s in (5, 6)]
    res = emulate_streams(NmpConfig(rankcache_bytes=128 << 10), streams)
    rate = sum(r["nmp"].cache_hits for r in res) / sum(r["nmp"].cache_probes for r in res)
    assert rate < 0.05


def test_hit_rate_grows_with_cache_size_on_skewed_trace():
    streams = [sls_stream(batch=8, vector_bytes=128, seed=s, alpha=1.05) for s in (7, 8)]  # bounded Zipf
    rates = [hit_rate(NmpConfig(rankcache_bytes=size), streams) for size in (8 << 10, 128 << 10, 1 << 20)]
    assert 0.1 < rates[0] < rates[1] <= rates[2] < 0.6


def test_hit_rate_falls_as_the_cache_line_grows():
    streams = [sls_stream(batch=8, vector_bytes=128, seed=s, alpha=1.05) for s in (7, 8)]
    rates = [line_hit_rate(streams, line, 128 << 10) for line in (128, 512, 1024)]
    assert rates[0] > rates[1] > rates[2] > 0


@pytest.mark.parametrize("ranks", [4, 8])
def test_packet_barrier_costs_speed_overlap_recovers_part(sls, ranks):
    geo = DramGeometry(dimms_per_channel=ranks // 2)
    off, overlap, strict = (speedup(NmpConfig(packet_sync=m, geometry=geo), sls) for m in ("off", "overlap", "strict"))
    assert off > overlap > strict > 0.8 * off


def test_run_nmp_on_batches_returns_metric_dicts():
    spec = WorkloadSpec("t", tuple(TableSpec(f"t{i}", 10_000, 32, pooling=PoolingSpec("fixed", 10))
                                   for i in range(8)), batch_size=8, num_batches=2)
    rng = np.random.default_rng(0)
    lengths = np.full((8, 8), 10, np.int64)  # 8 tables: one per rank
    batches = [Batch(lengths, rng.integers(0, 10_000, 640)) for _ in range(2)]
    metrics = run_nmp(NmpConfig(rankcache_bytes=8 << 10), spec, batches)
    by_name = {m["name"]: m for m in metrics}
    assert by_name["host.channel_data_bytes"]["value"] == 2 * 640 * 128
    assert by_name["recnmp.channel_data_bytes"]["value"] == 2 * 64 * 128  # one psum per bag (page colouring)
    assert by_name["nmp.speedup_over_host"]["value"] > 1
    assert all({"name", "value", "unit", "method"} <= m.keys() for m in metrics)
    assert run_nmp(NmpConfig(enabled=False), spec, batches) == []
