import json,sys
for fn in sys.argv[1:]:
    txt=open(fn).read(); out=json.loads(txt[txt.index("JSON")+4:].splitlines()[0])
    for o in out:
        print(fn, "round", o["round"], "total %.1f" % o["total"])
        for k in sorted(o["acc"]): print("  %-20s %7.2f s  calls %d" % (k, o["acc"][k], o["cnt"][k]))
        print("  %-9s %6s %6s %6s %6s %6s %6s" % ("plan","setup","warm","timed","swarm","stimed","step_ms"))
        tot=dict(setup=0,warm=0,timed=0,swarm=0,stimed=0)
        for k,v in o["per_case"].items():
            for kk in tot: tot[kk]+=v[kk]
            print("  %-9s %6.2f %6.2f %6.2f %6.2f %6.2f %6.1f" % (k,v["setup"],v["warm"],v["timed"],v["swarm"],v["stimed"],o["step"][k]*1e3))
        print("  %-9s %6.2f %6.2f %6.2f %6.2f %6.2f" % ("SUM",*tot.values()))
