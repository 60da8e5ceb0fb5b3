"""The packet-time breakdown behind the strict-sync finding (embedding/nmp/sync_study.py)."""
import pytest

from benchmarks.nmp_bench import sls_stream
from embedding.nmp import DramGeometry, NmpConfig
from embedding.nmp.sync_study import packet_breakdown


@pytest.fixture(scope="module")
def breakdowns():
    s = sls_stream(batch=8, vector_bytes=128, seed=1)
    return {m: packet_breakdown(NmpConfig(geometry=DramGeometry(dimms_per_channel=4), packet_sync=m), s)
            for m in ("off", "strict")}


def test_strict_packets_pay_the_row_opening_latency_after_every_barrier(breakdowns):
    t = NmpConfig().timings
    strict, off = breakdowns["strict"], breakdowns["off"]
    assert strict.fill >= t.tRCD + t.tCL
    assert off.fill < 0  # ranks run ahead into the next packet
    assert strict.duration >= t.tRCD + t.tCL + strict.work


def test_page_colouring_balances_rank_work_so_the_loss_is_fill_and_drain(breakdowns):
    strict, off = breakdowns["strict"], breakdowns["off"]
    assert strict.imbalance == 0 and strict.work == 1280  # 2 poolings × 80 reads × 2 bursts × tBL 4 per rank
    assert strict.drain > strict.steady_bubbles  # the packet's tail dominates its bubbles
    assert strict.speedup < off.speedup
