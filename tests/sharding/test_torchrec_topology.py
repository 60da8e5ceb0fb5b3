"""Like-for-like with TorchRec: `Topology.from_torchrec` and the `torchrec_default` preset reproduce every constant
TorchRec 1.8's `Topology` and its default storage reservation apply; table lists accept TorchRec's words."""
from __future__ import annotations

import warnings

import pytest
from torchrec.distributed.planner import constants as C
from torchrec.distributed.planner.storage_reservations import HeuristicalStorageReservation
from torchrec.distributed.planner.types import HardwareConfig, KernelConfig, TopologyFactory, TrainerConfig

from benchmarks.plan_cli import main
from embedding.spec import SpecError
from embedding.tablelist import load_table_list
from sharding import PlanWorkload, Topology, load_topology
from sharding.tablesets import load_tables
from sharding.torchrec_adapter import _reservation, _sharders, embedding_module, to_constraints, torchrec_topology

GIB = 1024**3


def _trec(world: int, local: int, hbm_gib: float | None = None):
    hw = HardwareConfig(hbm_cap_bytes=int(hbm_gib * GIB)) if hbm_gib else HardwareConfig()
    return TopologyFactory.create_topology(TrainerConfig(world_size=world, local_world_size=local), hw,
                                           KernelConfig(compute_device="cuda"))


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-12 * max(abs(a), abs(b))


def test_from_torchrec_reads_every_constant_of_torchrecs_default_topology() -> None:
    ours = Topology.from_torchrec(_trec(16, 8))
    assert (ours.world_size, ours.ranks_per_host, ours.num_hosts, ours.device) == (16, 8, 2, "cuda")
    hbm, ddr = ours.tiers
    assert (hbm.capacity, ddr.capacity) == (C.HBM_CAP, C.DDR_CAP)
    assert _same(hbm.bandwidth, C.HBM_MEM_BW * 1e3) and _same(ddr.bandwidth, C.HBM_TO_DDR_MEM_BW * 1e3)
    assert _same(ours.intra_host.bandwidth, C.INTRA_NODE_BANDWIDTH * 1e3)
    assert _same(ours.inter_host.bandwidth, C.CROSS_NODE_BANDWIDTH * 1e3)
    assert ours.intra_host.latency == ours.inter_host.latency == 0.0
    assert ours.bwd_compute_multiplier == C.BWD_COMPUTE_MULTIPLIER
    assert (ours.reserved_fraction, ours.input_copies) == (0.15, 20)


@pytest.mark.parametrize(("world", "local", "hbm_gib"), [(8, 8, None), (32, 4, 80.0), (16, 8, 24.0)])
def test_torchrec_default_preset_is_torchrecs_topology_and_round_trips(world: int, local: int,
                                                                        hbm_gib: float | None) -> None:
    trec = _trec(world, local, hbm_gib)
    preset = load_topology("torchrec_default", world, local, hbm_gib)
    assert preset.to_dict() | {"name": "", "sources": {}} == Topology.from_torchrec(trec).to_dict() | {
        "name": "", "sources": {}, "tiers": preset.to_dict()["tiers"], "intra_host": preset.to_dict()["intra_host"],
        "inter_host": preset.to_dict()["inter_host"]}
    for a, b in zip(preset.tiers, Topology.from_torchrec(trec).tiers, strict=True):
        assert a.name == b.name and a.capacity == b.capacity and _same(a.bandwidth, b.bandwidth)
    back = torchrec_topology(preset)  # ours handed to TorchRec: the same figures TorchRec started from
    for attr in ("world_size", "local_world_size", "compute_device", "hbm_mem_bw", "ddr_mem_bw", "hbm_to_ddr_mem_bw",
                 "intra_host_bw", "inter_host_bw", "bwd_compute_multiplier"):
        x, y = getattr(back, attr), getattr(trec, attr)
        assert x == y or (isinstance(x, float) and _same(x, y)), attr
    assert [(d.storage.hbm, d.storage.ddr) for d in back.devices] == [(d.storage.hbm, d.storage.ddr)
                                                                        for d in trec.devices]


@pytest.mark.parametrize(("tables", "batch"), [("random:30:2", 512), ("criteo_kaggle", 16384)])
def test_usable_hbm_is_what_torchrecs_default_reservation_leaves(tables: str, batch: int) -> None:
    wl = PlanWorkload(load_tables(tables), batch)
    trec = _trec(8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = HeuristicalStorageReservation(0.15).reserve(trec, batch, embedding_module(wl), _sharders(wl),
                                                              to_constraints(wl, Topology.from_torchrec(trec)))
        ours_for_trec = _reservation(Topology.from_torchrec(trec), wl).reserve(
            trec, batch, embedding_module(wl), _sharders(wl), to_constraints(wl, Topology.from_torchrec(trec)))
    usable = load_topology("torchrec_default", 8).reserve_inputs(wl.ids_per_batch).usable("hbm")
    assert usable == default.devices[0].storage.hbm == ours_for_trec.devices[0].storage.hbm
    assert usable < 0.85 * C.HBM_CAP  # the input reservation is there


def test_table_lists_accept_torchrecs_column_names(tmp_path) -> None:
    ours, trec, both = tmp_path / "ours.csv", tmp_path / "trec.csv", tmp_path / "both.yaml"
    ours.write_text("name,rows,dim,pooling\nt0,1000,64,3\nt1,50,8,1.5\n")
    trec.write_text("name,num_embeddings,embedding_dim,pooling_factor\nt0,1000,64,3\nt1,50,8,1.5\n")
    assert load_table_list(trec) == load_table_list(ours)
    both.write_text("- {name: t0, rows: 10, num_embeddings: 10, dim: 4, pooling: 1}\n")
    with pytest.raises(SpecError, match="num_embeddings"):
        load_table_list(both)


def test_plan_cli_on_torchrec_default_hardware_and_its_bad_budgets(tmp_path, capsys) -> None:
    out = tmp_path / "p.json"
    args = ["plan", "--tables", "random:10:1", "--hardware", "torchrec_default", "--ranks", "8", "--ranks-per-host",
            "4", "--hbm-gib", "24", "--out", str(out), "--no-torchrec-estimate"]
    assert main(args) == 0 and out.is_file()
    assert "planned in" in capsys.readouterr().out
    for bad in (["--search-iters", "0"], ["--search-iters", "-5"], ["--anneal", "-1"], ["--hbm-gib", "0"],
                ["--ranks-per-host", "0"]):
        out.unlink(missing_ok=True)
        assert main([*args, *bad]) == 2 and not out.exists()
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("dlrmbench plan: error:") and bad[1] in err[0]
