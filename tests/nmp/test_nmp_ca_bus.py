"""The command/address bus is a parameter that the timing honours, and no run beats its analytic bound."""
import itertools

import numpy as np
import pytest

from benchmarks.nmp_bench import sls_stream
from embedding.nmp import DramGeometry, NmpConfig, NmpConfigError, emulate_batch
from embedding.nmp.bounds import host_lower_bound, nmp_lower_bound
from embedding.nmp.fast import map_lookups_fast


@pytest.fixture(scope="module")
def sls():
    return sls_stream(batch=8, vector_bytes=128, seed=1)


def _geo(ranks: int) -> DramGeometry:
    return DramGeometry(dimms_per_channel=max(1, ranks // 2), ranks_per_dimm=min(ranks, 2))


def _cycles(cfg: NmpConfig, stream) -> tuple[int, int]:
    r = emulate_batch(cfg, stream)
    return r["host"].cycles, r["nmp"].cycles


@pytest.mark.parametrize("fidelity", ["fast", "detailed"])
def test_wider_ca_bus_speeds_nmp_where_ca_binds_and_plateaus_where_ranks_bind(sls, fidelity):
    cyc = [_cycles(NmpConfig(geometry=_geo(16), fidelity=fidelity, ca_bits_per_cycle=w), sls)[1]
           for w in (20, 40, 80, 160, 320, 640)]
    assert cyc[0] > cyc[1] > cyc[2] > cyc[3]  # 1/4, 1/2, 1, 2 instructions per cycle: C/A-bound at 16 ranks
    assert cyc[1] / cyc[0] == pytest.approx(0.5, rel=0.05)  # halving the instruction time halves the batch
    # past the knee the ranks bind: a wider bus changes only arrival order (FR-FCFS picks), by < 5%
    assert max(cyc[3:]) / min(cyc[3:]) < 1.05


def test_wide_ca_bus_lifts_the_one_instruction_per_cycle_ceiling(sls):
    narrow, wide = (np.divide(*_cycles(NmpConfig(geometry=_geo(16), fidelity="fast", ca_bits_per_cycle=w), sls))
                    for w in (80, 160))
    assert narrow < 8.3 < 10 < wide  # host: 8 data cycles per 128 B lookup; NMP: 1 cycle per instruction


def test_bit_serial_packing_gives_fractional_instruction_rates(sls):
    assert NmpConfig(ca_bits_per_cycle=120, ca_packing="bits").inst_cost == (79, 120)
    assert NmpConfig(ca_bits_per_cycle=120).inst_cost == (1, 1)  # whole instructions: one fits per cycle
    assert NmpConfig(ca_bits_per_cycle=40).inst_cost == (2, 1)
    assert NmpConfig(ca_bits_per_cycle=320).inst_per_cycle == 4
    geo = _geo(16)
    one, frac, two = (_cycles(NmpConfig(geometry=geo, fidelity="fast", ca_bits_per_cycle=w, ca_packing=p), sls)[1]
                      for w, p in ((80, "whole"), (120, "bits"), (160, "whole")))
    assert one > frac > two


def test_instruction_size_is_in_the_timing(sls):
    geo = _geo(16)
    small, large = (_cycles(NmpConfig(geometry=geo, fidelity="fast", inst_bits=b), sls)[1] for b in (40, 158))
    assert large > small


@pytest.mark.parametrize("fidelity", ["fast", "detailed"])
def test_host_commands_wider_than_the_bus_take_more_cycles(sls, fidelity):
    geo = _geo(4)
    one = _cycles(NmpConfig(geometry=geo, fidelity=fidelity), sls)[0]
    three = _cycles(NmpConfig(geometry=geo, fidelity=fidelity, ca_bits_per_command=161), sls)[0]  # 3 cycles each
    assert NmpConfig(ca_bits_per_command=161).cmd_cycles == 3
    assert three > one


@pytest.mark.parametrize(("field", "value"), [("ca_bits_per_cycle", 0), ("ca_bits_per_cycle", 40.5),
                                              ("ca_bits_per_cycle", True), ("ca_bits_per_cycle", "wide"),
                                              ("ca_bits_per_command", -1), ("inst_bits", 0), ("inst_bits", 5000)])
def test_bad_ca_values_are_refused_by_name(field, value):
    with pytest.raises(NmpConfigError, match=field):
        NmpConfig(**{field: value})
    with pytest.raises(NmpConfigError, match="ca_packing"):
        NmpConfig(ca_packing="serial")


GRID = list(itertools.product((1, 2, 4, 8, 16, 32), (40, 80, 160, 320), ("page_colour", "random"), (64, 256)))


@pytest.mark.parametrize("sync", ["off", "strict"])
def test_no_emulated_speedup_exceeds_its_analytic_bound(sync):
    streams = {vb: sls_stream(batch=4, vector_bytes=vb, seed=2) for vb in (64, 256)}
    for ranks, width, mapping, vb in GRID:
        cfg = NmpConfig(geometry=_geo(ranks), fidelity="fast", ca_bits_per_cycle=width, mapping=mapping,
                        packet_sync=sync)
        s = streams[vb]
        host, nmp = _cycles(cfg, s)
        d = map_lookups_fast(cfg, s)
        assert host >= host_lower_bound(cfg, d).cycles, (ranks, width, mapping, vb)
        assert nmp >= nmp_lower_bound(cfg, d, s.poolings, s.row_bytes, s.tables).cycles, (ranks, width, mapping, vb)


def test_detailed_model_respects_the_bound_too(sls):
    for ranks, width in ((2, 80), (8, 80), (16, 160)):
        cfg = NmpConfig(geometry=_geo(ranks), ca_bits_per_cycle=width)
        host, nmp = _cycles(cfg, sls)
        d = map_lookups_fast(cfg, sls)
        assert nmp >= nmp_lower_bound(cfg, d, sls.poolings, sls.row_bytes, sls.tables).cycles
        assert host >= host_lower_bound(cfg, d).cycles
