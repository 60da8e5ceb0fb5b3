"""ph.py OUT: sha1 of repr(optimize plan) + stats.chosen on every admitted family instance."""
import hashlib, json, sys
from sharding.family import instance
from sharding.optimizer import optimize, OptimizeStats, TREC_SEARCH_WORK
out = {}
for s in range(120):
    i = instance(s); rt = i.topology.reserve_inputs(i.workload.ids_per_batch)
    if len(i.workload.tables) * (5 * rt.world_size + 4 * rt.ranks_per_host + 16) > TREC_SEARCH_WORK:
        continue
    st = OptimizeStats()
    try:
        p = optimize(i.workload, i.topology, stats=st)
    except Exception as e:  # noqa: BLE001
        out[s] = ["error", repr(e)]
        continue
    out[s] = [hashlib.sha1(repr(p).encode()).hexdigest(), st.chosen, repr(st.candidates), repr(st.trec_search)]
json.dump(out, open(sys.argv[1], "w"))
