"""Count of term medians (over rounds) of calibration X inside calibration Y's [min, max] over rounds."""
import sys, yaml, numpy as np
STAGE = ("stage_overhead", "stage_bandwidth", "step_overhead", "fixed_tw_s", "stacked", "step_overhead_per_value")
def leaves(x, p=()):
    if isinstance(x, dict):
        for k, v in x.items():
            if k != "residuals": yield from leaves(v, p + (k,))
    elif isinstance(x, list) and len(x) == 2 and all(isinstance(v, (int, float)) for v in x):
        yield p, x
def get(d, p):
    for k in p:
        if not isinstance(d, dict) or k not in d: return None
        d = d[k]
    return d
cals = {f.split("/")[-1].removesuffix(".yaml"): yaml.safe_load(open(f))["calibration"] for f in sys.argv[1:]}
med = {}
for n, c in cals.items():
    med[n] = {}
    for p, _ in leaves(c["term_spread"]):
        vals = [get(r, p) for r in c["round_fits"]]
        vals = [v for v in vals if isinstance(v, (int, float))]
        if vals: med[n][p] = float(np.median(vals))
names = list(cals)
for subset, sel in (("all", lambda p: True), ("stage terms", lambda p: p[0] in STAGE)):
    print(f"\n{subset}: row = medians of, column = spread of (inside/total)")
    print("| | " + " | ".join(names) + " |\n|---|" + "---|" * len(names))
    for a in names:
        row = []
        for b in names:
            if a == b: row.append("-"); continue
            inside = tot = 0
            for p, (lo, hi) in leaves(cals[b]["term_spread"]):
                if not sel(p) or p not in med[a]: continue
                tot += 1; inside += lo * (1 - 1e-9) <= med[a][p] <= hi * (1 + 1e-9) + 1e-15
            row.append(f"{inside}/{tot}")
        print(f"| {a} | " + " | ".join(row) + " |")
