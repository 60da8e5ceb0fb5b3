"""`perfmodel train` on the two pooled collections with their step tables from the cache /tmp/i19m/*.npz (the same
`step_table` output; the VM was too loaded to rebuild them twice). Everything else is `train()` as shipped."""
import sys, numpy as np
import benchmarks.perfmodel.train as T
from benchmarks.perfmodel.machine import fingerprint
CACHE = {"/work/notes/s13/pm/records.jsonl": "narrow", "/work/notes/s14/q2/pm.jsonl": "wide"}
real = T.step_table
def cached(records, hw):
    path = cached.next_path.pop(0)
    d = np.load(f"/tmp/i19m/{CACHE[path]}.npz")
    return {k: d[k] for k in d.files}
cached.next_path = list(CACHE)
T.step_table = cached
m = T.train(list(CACHE), ["/work/notes/s13/qv/cal.yaml", "/work/notes/s14/q2/cal.yaml"], sys.argv[1],
            {"git_sha": sys.argv[2], "machine": fingerprint(), "note": "step tables from cache, see train_cached.py"})
print({k: m[k] for k in ("step_lambda", "rank_lambda", "lambda_cv")})
print(m["heldout"]["step"], m["heldout"]["rank"])
print(m["importance"]["step"]); print(m["importance"]["rank"])
