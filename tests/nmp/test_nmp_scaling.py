"""The rank × C/A-width sweep follows its analytic bound (embedding/nmp/scaling.py).

Slow: 25 emulations of the paper-validation batch (81,920 lookups); a smaller batch is not enough, since at the
knee (32 ranks, 2 instructions per cycle) fill and drain of the packet pipeline then cost > 10%.
"""
import pytest

from benchmarks.nmp_bench import sls_stream
from embedding.nmp.scaling import scaling_sweep

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sweep():
    return scaling_sweep(sls_stream(batch=32, vector_bytes=128, seed=1))  # the paper-validation batch


def test_every_point_is_within_10_percent_of_the_efficiency_scaled_bound_and_never_above_it(sweep):
    points, _, _ = sweep
    assert len(points) == 18
    for p in points:
        assert p.speedup <= p.bound, (p.ranks, p.ca_per_cycle)
        assert p.ratio == pytest.approx(1, abs=0.10), (p.ranks, p.ca_per_cycle)


def test_one_instruction_per_cycle_caps_the_speedup_and_wider_buses_lift_it(sweep):
    points, _, _ = sweep
    at = {(p.ranks, p.ca_per_cycle): p for p in points}
    assert at[(16, 1)].term == "C/A bus" and at[(16, 1)].speedup < 8.3
    assert at[(32, 4)].speedup > 2 * at[(32, 1)].speedup
    assert at[(2, 1)].term == "rank data path"


def test_speedup_grows_with_ranks_while_the_ranks_bind(sweep):
    points, _, _ = sweep
    wide = [p.speedup for p in points if p.ca_per_cycle == 4]
    assert all(a < b for a, b in zip(wide, wide[1:], strict=False))
