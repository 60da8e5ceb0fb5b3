"""Gates and shrinkage on saved out-of-fold predictions. Nested choice (q or λ) per outer family: the value with
the least median error over the OTHER families' out-of-fold predictions (approximately nested: those predictions
came from models that had the outer family in training)."""
import sys, numpy as np
sys.path.insert(0, "/tmp/i19m")
from cv import *
which = sys.argv[1]; bases = sys.argv[2:]
rank = which == "rank"
X, Y, G = (POOL["xr"], POOL["yr"], POOL["gr"]) if rank else (POOL["x"], POOL["y"], POOL["g"])
nar = G < 1000

def fold_gates(x, gate):
    out = np.zeros(len(Y))
    for f in np.unique(G):
        te = G == f
        out[te] = gate(x[~te], G[~te], x[te])
    return out

def e(y, p):
    a, b = err(y, p); return f"{a:.1f} / {b:.0f}"

def line(name, p, cnw, cwn):
    return f"| {name} | {e(Y, p)} | {e(Y[nar], p[nar])} | {e(Y[~nar], p[~nar])} | {e(Y[~nar], cnw)} | {e(Y[nar], cwn)} |"

def nested(options):
    """options: list of full OOF prediction vectors; per outer family pick the one best on the other families."""
    out = np.zeros(len(Y)); picks = []
    for f in np.unique(G):
        te = G == f
        scores = [np.median(np.abs(np.exp(-(Y[~te] - o[~te])) - 1)) for o in options]
        k = int(np.argmin(scores)); picks.append(k); out[te] = options[k][te]
    return out, picks

print(f"| {which} candidate | pooled LOFO | narrow part | wide part | train narrow→wide | train wide→narrow |")
print("|---|---|---|---|---|---|")
z = np.zeros(len(Y))
print(line("analytic alone", z, z[~nar], z[nar]))
for b in bases:
    d = np.load(f"/tmp/i19m/oof_{which}_{b}.npz"); p, cnw, cwn = d["p"], d["c_nw"], d["c_wn"]
    x = scale_free(X, rank) if b.startswith("sf") else X
    print(line(f"{b}", p, cnw, cwn))
    lams = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)
    print(line(f"{b} × λ .5", 0.5 * p, 0.5 * cnw, 0.5 * cwn))
    pn, picks = nested([l * p for l in lams])
    cn = lams[nested([l * p[~nar] for l in lams])[1][0]] if False else None
    # cross: λ chosen by the training collection's own LOFO OOF is not available; use the pooled choice mode
    lam_mode = lams[np.bincount(picks, minlength=len(lams)).argmax()]
    print(line(f"{b} × λ nested (picks {np.bincount(picks, minlength=len(lams)).tolist()} of {lams})", pn, lam_mode * cnw, lam_mode * cwn))
    cross_g = {}
    for q in (0.1, 0.25, 0.5, 0.9):
        g = fold_gates(x, gate_nn(q))
        gnw = gate_nn(q)(x[nar], G[nar], x[~nar]); gwn = gate_nn(q)(x[~nar], G[~nar], x[nar])
        cross_g[q] = (g, gnw, gwn)
        print(line(f"{b} × NN gate q {q} (mean gate {g.mean():.2f})", g * p, gnw * cnw, gwn * cwn))
    opts = [z] + [cross_g[q][0] * p for q in (0.1, 0.25, 0.5, 0.9)] + [p]
    pn, picks = nested(opts)
    print(line(f"{b} × NN gate q nested (picks {np.bincount(picks, minlength=6).tolist()} of off/.1/.25/.5/.9/none)", pn, cross_g[0.9][1] * cnw, cross_g[0.9][2] * cwn))
    g = fold_gates(x, gate_range_hard)
    print(line(f"{b} × range gate min–max hard (mean {g.mean():.2f})", g * p, gate_range_hard(x[nar], None, x[~nar]) * cnw, gate_range_hard(x[~nar], None, x[nar]) * cwn))
    rg = gate_range(0.05, 0.95)
    g = fold_gates(x, rg)
    print(line(f"{b} × range gate 5–95% ^4 (mean {g.mean():.2f})", g * p, rg(x[nar], None, x[~nar]) * cnw, rg(x[~nar], None, x[nar]) * cwn))
