"""Per base model: pooled LOFO out-of-fold predictions and the two cross-collection predictions, saved; gates and
λ are applied afterwards (post.py) since they only scale a fold's predictions."""
import sys, os, numpy as np
sys.path.insert(0, "/tmp/i19m")
from cv import *
which, base = sys.argv[1], sys.argv[2]
rank = which == "rank"
X, Y, G = (POOL["xr"], POOL["yr"], POOL["gr"]) if rank else (POOL["x"], POOL["y"], POOL["g"])
bases = {"d3": (False, {}), "d2l8": (False, dict(max_depth=2, min_samples_leaf=8)),
         "d1l8": (False, dict(max_depth=1, min_samples_leaf=8)), "sf_d3": (True, {}),
         "sf_d2l8": (True, dict(max_depth=2, min_samples_leaf=8)), "sf_d1l8": (True, dict(max_depth=1, min_samples_leaf=8))}
center = base.endswith("_c")
sf, kw = bases[base.removesuffix("_c")]
if center:  # (e) each collection's median log ratio taken out: the correction learns only what is relative
    for m in (G < 1000, G >= 1000):
        Y = Y.copy(); Y[m] = Y[m] - np.median(Y[m])
x = scale_free(X, rank) if sf else X
fit = gbt(**kw)
p = oof(x, Y, G, fit)
nar = G < 1000
c_nw = fit(x[nar], Y[nar])(x[~nar])
c_wn = fit(x[~nar], Y[~nar])(x[nar])
np.savez(f"/tmp/i19m/oof_{which}_{base}.npz", p=p, c_nw=c_nw, c_wn=c_wn)
print(which, base, "done", flush=True)
