"""LOFO CV of learned-correction candidates on the cached step/rank tables (narrow + wide collections).
Error = |exp(-(y - yhat)) - 1| (y = log measured/analytic); median and p90 over out-of-fold records."""
import sys, json, numpy as np, warnings
warnings.filterwarnings("ignore")
from sklearn.ensemble import GradientBoostingRegressor
from sharding.learned_cost import STEP_FEATURES, RANK_FEATURES

def load(name, off):
    d = np.load(f"/tmp/i19m/{name}.npz")
    return {"x": d["x"], "y": d["y"], "g": d["groups"] + off, "xr": d["xr"], "yr": d["yr"], "gr": d["gr"] + off}
N, W = load("narrow", 0), load("wide", 1000)
POOL = {k: np.concatenate([N[k], W[k]]) for k in N}
SI = {n: i for i, n in enumerate(STEP_FEATURES)}
RI = {n: i for i, n in enumerate(RANK_FEATURES)}

SHARES = ("fwd_share", "bwd_share", "opt_share", "comms_share", "fixed_share", "kernel_share")
def scale_free(x, rank):
    """Shares and ratios only: the 6 step shares, log1p LLC ratios, imbalance, alpha, DRAM share of lookup bytes,
    busy/world, sharding-type shares; rank: + work share, load, shards/tables, rank/step analytic."""
    I = RI if rank else SI
    c = lambda n: x[:, I[n]]
    cols = [c(n) for n in SHARES] + [np.log1p(c("llc_ratio_max")), np.log1p(c("llc_ratio_mean")), c("imbalance"),
            c("alpha_mean"), np.exp(c("log_dram_mb") - c("log_lookup_mb")), c("busy_ranks") / c("world")]
    cols += [c(f"n_{t}") / c("tables") for t in ("TW", "RW", "CW", "TWRW", "DP")]
    if rank:
        cols += [c("rank_work_share"), c("rank_load"), c("rank_shards") / c("tables"),
                 np.exp(c("rank_log_analytic_ms") - c("log_analytic_ms"))]
    return np.column_stack(cols)

GBT = {"loss": "huber", "n_estimators": 150, "max_depth": 3, "learning_rate": 0.05, "subsample": 0.8,
       "min_samples_leaf": 3, "random_state": 0}
def gbt(**kw):
    p = dict(GBT, **kw)
    return lambda xt, yt: GradientBoostingRegressor(**p).fit(xt, yt).predict

def nn_dist(xt, xq, gt=None, gq=None):
    """Nearest-neighbour distance of each query row to the training rows in training-standardised features
    (rows of the same family excluded when groups are given: a family's own plans are not its support)."""
    mu, sd = xt.mean(0), xt.std(0) + 1e-9
    a, b = (xt - mu) / sd, (xq - mu) / sd
    d = np.sqrt(((b[:, None, :] - a[None, :, :]) ** 2).sum(-1))
    if gt is not None:
        d[gq[:, None] == gt[None, :]] = np.inf
    return d.min(1)

def gate_nn(q):
    """Correction kept in full within the q-quantile of training rows' leave-family-out NN distance, fading
    linearly to 0 at twice that, 0 beyond."""
    def g(xt, gt, xq):
        tau = np.quantile(nn_dist(xt, xt, gt, gt), q)
        d = nn_dist(xt, xq)
        return np.clip(2 - d / tau, 0, 1)
    return g

def gate_range(lo, hi):
    """Share of features inside the training's [lo, hi] quantile range, raised to the 4th (one feature out of
    range costs ~15% of the correction for 26 features; many cost most of it)."""
    def g(xt, gt, xq):
        a, b = np.quantile(xt, lo, axis=0), np.quantile(xt, hi, axis=0)
        inside = ((xq >= a) & (xq <= b)).mean(1)
        return inside ** 4
    return g

def gate_range_hard(xt, gt, xq):
    """1 if every feature lies within the training's min..max, else 0."""
    return ((xq >= xt.min(0)) & (xq <= xt.max(0))).all(1).astype(float)

def oof(x, y, g, fit, gate=None, lam=1.0):
    pred = np.zeros_like(y)
    for f in np.unique(g):
        te = g == f
        p = fit(x[~te], y[~te])(x[te])
        if gate is not None:
            p = p * gate(x[~te], g[~te], x[te])
        pred[te] = lam * p
    return pred

def inner_lambda(x, y, g, fit, lams=(0.0, 0.25, 0.5, 0.75, 1.0), k=4):
    """λ by inner group k-fold (families dealt to k folds by sorted id) on the training part of each outer fold."""
    pred = np.zeros_like(y)
    chosen = []
    for f in np.unique(g):
        te = g == f
        xt, yt, gt = x[~te], y[~te], g[~te]
        fam = np.unique(gt); fold = {v: i % k for i, v in enumerate(fam)}
        fg = np.array([fold[v] for v in gt])
        ip = np.zeros_like(yt)
        for j in range(k):
            m = fg == j
            ip[m] = fit(xt[~m], yt[~m])(xt[m])
        errs = [np.median(np.abs(np.exp(-(yt - l * ip)) - 1)) for l in lams]
        lam = lams[int(np.argmin(errs))]
        chosen.append(lam)
        pred[te] = lam * fit(xt, yt)(x[te])
    return pred, chosen

def err(y, p):
    e = np.abs(np.exp(-(y - p)) - 1)
    return np.median(e) * 100, np.quantile(e, 0.9) * 100

def report(name, y, g, p, extra=""):
    nar, wid = g < 1000, g >= 1000
    a, b, c = err(y, p), err(y[nar], p[nar]), err(y[wid], p[wid])
    return f"| {name} | {a[0]:.1f} / {a[1]:.0f} | {b[0]:.1f} / {b[1]:.0f} | {c[0]:.1f} / {c[1]:.0f} |{extra}"
