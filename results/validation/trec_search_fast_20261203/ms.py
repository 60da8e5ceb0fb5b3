"""ms.py OUT: pickle model_space(...) of every admitted family instance (0-119) with this tree's code."""
import pickle, sys
from sharding.family import instance
from sharding.cost import CostModel
from sharding.trec_cost import TorchRecCostModel
from sharding.optimizer import TREC_SEARCH_WORK
from sharding.trec_search import model_space
out = {}
for s in range(120):
    i = instance(s); rt = i.topology.reserve_inputs(i.workload.ids_per_batch)
    if len(i.workload.tables) * (5 * rt.world_size + 4 * rt.ranks_per_host + 16) > TREC_SEARCH_WORK:
        continue
    out[s] = model_space(CostModel(i.workload, rt), TorchRecCostModel(i.workload, rt))
pickle.dump(out, open(sys.argv[1], "wb"))
print(sorted(out))
