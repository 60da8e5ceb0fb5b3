"""Every preset composes through Hydra's compose API and validates into a WorkloadSpec; presets match the
published shapes."""
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError

from benchmarks.compose import CONF_DIR, compose_config, compose_workload
from embedding.spec import SpecError

PRESETS = sorted(p.stem for p in (Path(CONF_DIR) / "workload").glob("*.yaml") if p.stem != "trace")


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_composes_and_validates(preset):
    spec = compose_workload([f"workload={preset}"])
    assert spec.num_tables > 0 and spec.batch_size > 0


def test_presets_have_the_published_shapes():
    kaggle = compose_workload(["workload=criteo_kaggle"])
    assert kaggle.num_tables == 26 and sum(t.rows for t in kaggle.tables) == 33_762_577
    tb = compose_workload(["workload=criteo_terabyte"])
    assert tb.num_tables == 26 and {t.dim for t in tb.tables} == {128}
    assert 95e9 < tb.total_bytes < 97e9  # ≈ 96 GB fp32
    dcn = compose_workload(["workload=dcnv2"])
    assert dcn.lookups_per_sample == 214 and sum(t.rows for t in dcn.tables) == pytest.approx(204.2e6, rel=1e-3)
    rm1, rm2, rm3 = (compose_workload([f"workload={m}"]) for m in ("rm1", "rm2", "rm3"))
    assert (rm1.num_tables, rm1.tables[0].rows, rm1.tables[0].dim, rm1.lookups_per_sample / 8) == (8, 4_000_000, 32, 80)
    assert (rm2.num_tables, rm2.tables[0].rows, rm2.tables[0].dim, rm2.lookups_per_sample / 32) == (32, 500_000, 64, 120)
    assert (rm3.num_tables, rm3.tables[0].rows, rm3.tables[0].dim, rm3.lookups_per_sample / 10) == (10, 2_000_000, 32, 20)
    t856 = compose_workload(["workload=dlrm_t856"])
    assert t856.num_tables == 856


def test_row_cap_is_explicit_and_reported():
    spec = compose_workload(["workload=criteo_terabyte", "workload.max_rows=1000"])
    assert max(t.rows for t in spec.tables) == 1000 and spec.row_cap == 1000
    assert len(spec.capped_tables) == sum(r > 1000 for r in spec.original_rows) > 0


def test_wrong_key_or_type_fails_at_start():
    with pytest.raises(ConfigCompositionException):
        compose_config(["workload=nope"])
    with pytest.raises((ConfigCompositionException, ConfigKeyError)):
        compose_config(["workload.bogus=1"])
    with pytest.raises((ConfigCompositionException, ValidationError)):
        compose_config(["workload.batch_size=abc"])


@pytest.mark.parametrize("override,message", [
    ("workload.rows=[0]", "rows must be a positive"), ("workload.dim=0", "dim must be a positive"),
    ("workload.batch_size=-1", "batch_size must be > 0"), ("workload.access.alpha=0", "alpha must be > 0"),
    ("workload.access.alpha=-1", "alpha must be > 0"), ("workload.pooling.kind=weird", "pooling.kind"),
    ("workload.mode=serve", "mode"),
])
def test_bad_workload_values_name_the_problem(override, message):
    with pytest.raises(SpecError, match=message):
        compose_workload([override])
