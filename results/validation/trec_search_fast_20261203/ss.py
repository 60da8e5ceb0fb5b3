"""ss.py OUT: the search's result on every admitted family instance (0-119) with this tree's code."""
import pickle, sys
from sharding.family import instance
from sharding.cost import CostModel
from sharding.trec_cost import TorchRecCostModel
from sharding.optimizer import TREC_SEARCH_WORK
from sharding.trec_search import model_space, search, SearchStats, to_plan
out = {}
for s in range(120):
    i = instance(s); rt = i.topology.reserve_inputs(i.workload.ids_per_batch)
    if len(i.workload.tables) * (5 * rt.world_size + 4 * rt.ranks_per_host + 16) > TREC_SEARCH_WORK:
        continue
    space, cap, local = model_space(CostModel(i.workload, rt), TorchRecCostModel(i.workload, rt))
    st = SearchStats(); best = search(space, cap, local, TREC_SEARCH_WORK, st)
    out[s] = (None if best is None else (best[0], best[1], repr(to_plan(best, rt))), st)
pickle.dump(out, open(sys.argv[1], "wb"))
print(len(out), sum(v[0] is not None for v in out.values()), "with a plan")
