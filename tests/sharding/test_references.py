"""The reference packings (TorchRec's own first proposals) are built from TorchRec's options: its column blocks."""
from __future__ import annotations

import warnings

from torchrec.distributed.sharding_plan import _get_block_size_for_cw_shard

from embedding.spec import PoolingSpec, TableSpec
from sharding import CostModel, PlanWorkload
from sharding.bounds import lower_bound
from sharding.layouts import column_splits, torchrec_column_pieces
from sharding.pack import CW, Builder
from sharding.search import Resources
from sharding.tiers import assign_tiers
from sharding.trec_cost import TorchRecCostModel
from tests.sharding.conftest import topology


def test_torchrec_column_pieces_match_torchrecs_default_column_blocks() -> None:
    for dim in range(4, 1025, 4):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TorchRec warns where no block divides the dim (one block then)
            width = _get_block_size_for_cw_shard(dim, None)
        assert torchrec_column_pieces(dim) == dim // width, dim


def test_a_builder_on_torchrecs_options_cuts_columns_only_into_torchrecs_blocks() -> None:
    """Every table's smallest-piece choice (the GreedyProposer's start): with `torchrec_columns` a column-wise
    choice has TorchRec's block count; without it, finer blocks are chosen where they exist."""
    ts = tuple(TableSpec(f"t{i}", 200_000 * (i + 1), dim, pooling=PoolingSpec("fixed", 8.0))
               for i, dim in enumerate((32, 64, 128, 256, 512, 512, 256, 192)))
    wl, topo = PlanWorkload(ts, 4096), topology(1, 8, 16.0)
    cost, trec = CostModel(wl, topo), TorchRecCostModel(wl, topo)
    lb = (lower_bound(cost, relax=False).value, lower_bound(trec).value)
    res = Resources(cost, trec, (lb[0] * 1e6, lb[1]))
    free = Builder(res, assign_tiers(cost), 0)
    ours = {t.name: free.choose(t, 0.0, 1.0, True, True) for t in ts}
    faithful = Builder(res, free.tiers, 0, share=free)
    faithful.torchrec_columns = True
    theirs = {t.name: faithful.choose(t, 0.0, 1.0, True, True) for t in ts}
    for t in ts:
        st, k = theirs[t.name]
        assert st != CW or k == torchrec_column_pieces(t.dim), (t.dim, st, k)
    finer = [t for t in ts if ours[t.name][0] == CW and ours[t.name][1] > torchrec_column_pieces(t.dim)]
    assert finer and all(ours[t.name][1] in column_splits(t.dim) for t in finer)
