"""Bad input gets one clear NmpConfigError naming what is wrong."""
import pytest

from embedding.nmp import DramGeometry, DramTimings, LookupStream, NmpConfig, NmpConfigError, emulate_batch


def test_geometry_that_does_not_multiply_out_is_rejected():
    with pytest.raises(NmpConfigError, match="does not multiply out"):
        DramGeometry(capacity_gib=48)
    assert DramGeometry(capacity_gib=64).capacity_bytes == 64 * 2**30  # 4 ch × 2 ranks × 16 banks × 64 Ki × 8 KiB


def test_zero_ranks_is_rejected():
    with pytest.raises(NmpConfigError, match="ranks_per_dimm"):
        DramGeometry(ranks_per_dimm=0)


def test_non_power_of_two_geometry_is_rejected():
    with pytest.raises(NmpConfigError, match="power of two"):
        DramGeometry(channels=3)


def test_negative_timing_is_rejected():
    with pytest.raises(NmpConfigError, match="tRCD"):
        DramTimings(tRCD=-1)


def test_bad_mode_mapping_and_packet_size_are_rejected():
    with pytest.raises(NmpConfigError, match="mode"):
        NmpConfig(mode="pim")
    with pytest.raises(NmpConfigError, match="mapping"):
        NmpConfig(mapping="linear")
    with pytest.raises(NmpConfigError, match="packet_poolings"):
        NmpConfig(packet_poolings=17)
    with pytest.raises(NmpConfigError, match="packet_sync"):
        NmpConfig(packet_sync="sometimes")


def test_packet_sync_accepts_booleans_of_older_configs():
    assert NmpConfig(packet_sync=True).packet_sync == "strict"
    assert NmpConfig(packet_sync=False).packet_sync == "off"


def test_nested_dicts_are_validated_too():
    cfg = NmpConfig(geometry={"dimms_per_channel": 2}, timings={"tCL": 17})
    assert cfg.geometry.ranks_per_channel == 4 and cfg.timings.tCL == 17
    with pytest.raises(NmpConfigError, match="tFAW"):
        NmpConfig(timings={"tFAW": -3})


def _one_table(rows: int) -> LookupStream:
    return LookupStream.from_arrays([0, 0], [0, rows - 1], [0, 0], [rows], [128])


@pytest.mark.parametrize("mapping", ["skylake", "random", "page_colour"])
def test_mapping_beyond_capacity_is_rejected(mapping):
    cfg = NmpConfig(mapping=mapping, geometry=DramGeometry(channels=1, ranks_per_dimm=1, rows=1024))  # 128 MiB
    with pytest.raises(NmpConfigError, match="exceeds capacity"):
        emulate_batch(cfg, _one_table(2_000_000))  # 256 MB of 128 B rows


def test_lookup_outside_its_table_is_rejected():
    with pytest.raises(NmpConfigError, match="outside its table"):
        LookupStream.from_arrays([0], [10], [0], [10], [128])
