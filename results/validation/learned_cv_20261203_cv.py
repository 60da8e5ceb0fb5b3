import pickle, numpy as np, warnings
warnings.filterwarnings('ignore')
from sharding.learned_cost import STEP_FEATURES, RANK_FEATURES
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.linear_model import Ridge
tab = pickle.load(open('/tmp/i19l/tab.pkl','rb'))
X, y, g = tab['x'], tab['y'], tab['groups']
XR, yr, gr = tab['xr'], tab['yr'], tab['gr']
fams = np.unique(g)
def err(r): e=np.abs(np.exp(-r)-1); return np.median(e), np.quantile(e,.9)
def gbt(**kw):
    p=dict(loss='huber', n_estimators=150, max_depth=3, learning_rate=.05, subsample=.8, min_samples_leaf=3, random_state=0); p.update(kw)
    return lambda: GradientBoostingRegressor(**p)
class Const:
    def fit(self,x,y): self.c=np.median(y); return self
    def predict(self,x): return np.full(len(x), self.c)
class Zero:
    def fit(self,x,y): return self
    def predict(self,x): return np.zeros(len(x))
class RidgeS:
    def __init__(self,a, cols=None): self.a=a; self.cols=cols
    def fit(self,x,y):
        x=x[:,self.cols] if self.cols is not None else x
        self.m=x.mean(0); self.s=x.std(0)+1e-9; self.r=Ridge(alpha=self.a).fit((x-self.m)/self.s,y); return self
    def predict(self,x):
        x=x[:,self.cols] if self.cols is not None else x
        return self.r.predict((x-self.m)/self.s)
class Sub:
    def __init__(self,mk,cols): self.mk=mk; self.cols=cols
    def fit(self,x,y): self.m=self.mk().fit(x[:,self.cols],y); return self
    def predict(self,x): return self.m.predict(x[:,self.cols])
def idx(names, fs): return [names.index(f) for f in fs]
def cv(mk, X, y, g, lam=1.0):
    oof=np.zeros(len(y))
    for f in fams:
        t=g==f
        m=mk().fit(X[~t],y[~t]); oof[t]=lam*m.predict(X[t])
    return oof
def cv_step_via_rank(mk, lam=1.0):
    # rank model OOF -> step: analytic step + (max predicted rank - max analytic rank)? use ratio of maxes
    oofr=cv(mk, XR, yr, gr, lam)
    return oofr
S=list(STEP_FEATURES); R=list(RANK_FEATURES)
shares=['fwd_share','bwd_share','opt_share','comms_share','fixed_share','kernel_share']
few=['log_analytic_ms']+shares+['log_dram_mb','llc_ratio_max','imbalance','log_comm_mb']
cands={
 'analytic (0)': Zero, 'constant median': Const,
 'gbt d3 (current)': gbt(), 'gbt d2': gbt(max_depth=2), 'gbt d1': gbt(max_depth=1),
 'gbt d2 leaf8': gbt(max_depth=2, min_samples_leaf=8), 'gbt d1 leaf8': gbt(max_depth=1,min_samples_leaf=8),
 'gbt d2 leaf8 n50': gbt(max_depth=2, min_samples_leaf=8, n_estimators=50),
 'gbt d3 few': lambda: Sub(gbt(), idx(S,few)), 'gbt d2 leaf8 few': lambda: Sub(gbt(max_depth=2,min_samples_leaf=8), idx(S,few)),
 'gbt d1 shares': lambda: Sub(gbt(max_depth=1,min_samples_leaf=8), idx(S,shares)),
}
for a in (1,10,30,100,300): cands[f'ridge a{a}']=(lambda a=a: RidgeS(a))
for a in (1,10,30,100): cands[f'ridge few a{a}']=(lambda a=a: RidgeS(a, idx(S,few)))
for a in (1,10,30): cands[f'ridge shares a{a}']=(lambda a=a: RidgeS(a, idx(S,shares)))
print(f"{'candidate':24s} step med/p90 | lam .5 | rank med/p90")
res={}
for n,mk in cands.items():
    o=cv(mk,X,y,g); o5=0.5*o
    Sr = [idx(R,[R[i] for i in range(len(R))])]
    mkr = mk
    if 'few' in n or 'shares' in n:
        cols = few if 'few' in n else shares
        mkr = (lambda a=None,n=n,cols=cols: (Sub(gbt(max_depth=int(n.split('d')[1][0]), min_samples_leaf=8 if 'leaf8' in n else 3), idx(R,cols)) if n.startswith('gbt') else RidgeS(float(n.split('a')[-1]), idx(R,cols))))
    orr=cv(mkr,XR,yr,gr)
    a=err(y-o); b=err(y-o5); c=err(yr-orr)
    print(f"{n:24s} {a[0]*100:5.1f} {a[1]*100:5.1f} | {b[0]*100:5.1f} {b[1]*100:5.1f} | {c[0]*100:5.1f} {c[1]*100:5.1f}", flush=True)
