"""The DDR5-4800 preset loads, carries its cited JEDEC / datasheet constants, and runs in host and NMP modes."""
import pytest

from benchmarks.nmp_bench import DDR5_PRESET, ddr5_config, sls_stream
from embedding.nmp import DramGeometry, DramTimings, NmpConfig, NmpConfigError, emulate_batch
from embedding.nmp.run import speedup_bounds

# the values the preset's comments cite: JESD79-5 / Micron DDR5 core datasheet, DDR5-4800B, 16 Gb x8 devices
CITED_TIMINGS = {"clock_mhz": 2400.0, "tCL": 40, "tRCD": 39, "tRP": 39, "tRC": 77 + 39, "burst_length": 16, "tBL": 8,
                 "tCCD_S": 8, "tCCD_L": 12, "tRRD_S": 8, "tRRD_L": 12, "tFAW": 32, "tRTP": 18}
CITED_GEOMETRY = {"channels": 8, "bank_groups": 8, "banks_per_group": 4, "rows": 65536, "columns": 1024,
                  "bus_bytes": 4}


def test_ddr5_preset_constants_match_the_cited_values():
    cfg = ddr5_config()
    assert {k: getattr(cfg.timings, k) for k in CITED_TIMINGS} == CITED_TIMINGS
    assert {k: getattr(cfg.geometry, k) for k in CITED_GEOMETRY} == CITED_GEOMETRY
    assert cfg.geometry.banks_per_rank == 32 and cfg.geometry.row_buffer_bytes == 4096
    assert cfg.cmd_cycles == 2 and cfg.inst_cost == (6, 1)  # 14 C/A bits per clock
    assert 5.0 / (1e3 / cfg.timings.clock_mhz) <= cfg.timings.tCCD_L  # max(8 nCK, 5 ns) rounded up
    assert cfg.timings.tRC - cfg.timings.tRP >= 32.0 * cfg.timings.clock_mhz / 1e3  # tRAS >= 32 ns


def test_ddr5_host_preset_is_the_same_dram_in_host_mode():
    host = ddr5_config(DDR5_PRESET.replace("recnmp_ddr5", "host_ddr5"))
    nmp = ddr5_config()
    assert host.mode == "host" and host.timings == nmp.timings and host.geometry == nmp.geometry


def test_a_burst_must_be_64_bytes():
    with pytest.raises(NmpConfigError, match="burst_length"):
        NmpConfig(geometry=DramGeometry(bus_bytes=4))  # 32-bit bus with DDR4's BL8: 32 B bursts
    with pytest.raises(NmpConfigError, match="tBL"):
        DramTimings(burst_length=16, tBL=4)


def test_ddr5_speedup_is_capped_by_its_ca_bus_and_lifts_with_one_instruction_per_cycle():
    s = sls_stream(batch=8, vector_bytes=128, seed=1)
    res = {ca: emulate_batch(ddr5_config(geometry={"dimms_per_channel": 4}, fidelity="fast", ca_bits_per_cycle=ca), s)
           for ca in (14, 80)}
    sp = {ca: r["host"].cycles / r["nmp"].cycles for ca, r in res.items()}
    assert sp[14] < 16 / 6 * 1.02  # one 79-bit instruction per 6 clocks vs 16 data clocks per 128 B lookup
    assert sp[80] > 2 * sp[14]
    cfg = ddr5_config(geometry={"dimms_per_channel": 4}, fidelity="fast")
    bound = speedup_bounds(cfg, [s], [res[14]])
    assert bound[2].term == "C/A bus" and sp[14] <= bound[0]
