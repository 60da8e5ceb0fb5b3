"""LOFO within each collection alone (narrow: 12 families, wide: 20): main's trees (d3), unshrunk and × λ nested
(per outer family, λ best on the other families' out-of-fold predictions)."""
import sys, numpy as np
sys.path.insert(0, "/tmp/i19m")
from cv import *
lams = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)
which = sys.argv[1]
for name, C in (("narrow", N), ("wide", W)):
    X, Y, G = (C["xr"], C["yr"], C["gr"]) if which == "rank" else (C["x"], C["y"], C["g"])
    p = oof(X, Y, G, gbt())
    pn = np.zeros_like(Y); picks = []
    for f in np.unique(G):
        te = G == f
        k = int(np.argmin([np.median(np.abs(np.exp(-(Y[~te] - l * p[~te])) - 1)) for l in lams]))
        picks.append(lams[k]); pn[te] = lams[k] * p[te]
    a, d, s = err(Y, 0 * Y), err(Y, p), err(Y, pn)
    print(f"| {which} {name}-only LOFO | analytic {a[0]:.1f} / {a[1]:.0f} | d3 {d[0]:.1f} / {d[1]:.0f} | d3 × λ nested {s[0]:.1f} / {s[1]:.0f} (λ picks {sorted(set(picks))}, mode {max(set(picks), key=picks.count)}) |", flush=True)
