"""tc.py INST...: cProfile (second call) of optimizer._trec_search alone (model_space + search + to_plan): total_calls."""
import cProfile, pstats, sys, time
from sharding.family import instance
from sharding.cost import CostModel
from sharding.trec_cost import TorchRecCostModel
from sharding.optimizer import _trec_search, OptimizeStats, TREC_SEARCH_WORK
for name in sys.argv[1:]:
    i = instance(int(name[1:])); rt = i.topology.reserve_inputs(i.workload.ids_per_batch)
    cost, trec = CostModel(i.workload, rt), TorchRecCostModel(i.workload, rt)
    _trec_search(cost, trec, TREC_SEARCH_WORK, OptimizeStats())
    pr = cProfile.Profile(); c = time.process_time()
    pr.enable(); _trec_search(cost, trec, TREC_SEARCH_WORK, OptimizeStats()); pr.disable()
    el = time.process_time() - c
    c = time.process_time(); _trec_search(cost, trec, TREC_SEARCH_WORK, OptimizeStats()); el2 = time.process_time() - c
    print(f"{name}: calls {pstats.Stats(pr).total_calls} profiled {el:.3f}s unprofiled {el2:.3f}s", flush=True)
