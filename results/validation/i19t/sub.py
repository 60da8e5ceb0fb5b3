import json, numpy as np
txt = open('/tmp/i19t/dump.txt').read(); out = json.loads(txt[txt.index("JSON")+4:].splitlines()[0])
KEYS = ("input_dist","lookup","output_dist","output_dist_bwd","lookup_bwd","optimizer")
def terms(ranks, n):
    # as calibrate: per rank median over the first n steps, stage = max over ranks; step = max over ranks
    st = {k: max(np.median(r["stages"][k][:n]) for r in ranks) for k in KEYS}
    step = max(np.median(r["step_s"][:n]) for r in ranks)
    return st, step
print("plan      | step 10 vs 20 | step r0 vs r1 (20) | stage-sum 10 vs 20 | stage-sum r0 vs r1 | per-stage |10-20| median / |r0-r1| median")
rows = []
for plan in out[0]["raw"]:
    a10, s10 = terms(out[0]["raw"][plan], 10); a20, s20 = terms(out[0]["raw"][plan], 20)
    b20, t20 = terms(out[1]["raw"][plan], 20)
    d = lambda x, y: abs(x - y) / max(y, 1e-12)
    sub = [d(a10[k], a20[k]) for k in KEYS if a20[k] > 1e-4]
    rnd = [d(b20[k], a20[k]) for k in KEYS if a20[k] > 1e-4]
    rows.append((d(s10, s20), d(t20, s20), d(sum(a10.values()), sum(a20.values())), d(sum(b20.values()), sum(a20.values())), np.median(sub), np.median(rnd)))
    print(f"{plan:9s} | {rows[-1][0]:6.1%} | {rows[-1][1]:6.1%} | {rows[-1][2]:6.1%} | {rows[-1][3]:6.1%} | {rows[-1][4]:6.1%} / {rows[-1][5]:6.1%}")
r = np.array(rows); print("median    | " + " | ".join(f"{x:6.1%}" for x in np.median(r, axis=0)))
