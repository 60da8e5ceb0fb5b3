exec(open('/tmp/i19l/cv.py').read().split("print(f\"{'candidate'")[0])
from sklearn.linear_model import HuberRegressor
class HubS(RidgeS):
    def fit(self,x,y):
        x=x[:,self.cols] if self.cols is not None else x
        self.m=x.mean(0); self.s=x.std(0)+1e-9; self.r=HuberRegressor(alpha=self.a, epsilon=1.35, max_iter=2000).fit((x-self.m)/self.s,y); return self
ns=len(S)
XP=XR[:,:ns]
def cv_pooled(mk, wrank=1.0):
    oof=np.zeros(len(y))
    for f in fams:
        t=g==f; tr=gr==f
        xx=np.vstack([X[~t],XP[~tr]]); yy=np.concatenate([y[~t],yr[~tr]])
        m=mk().fit(xx,yy); oof[t]=m.predict(X[t])
    return oof
# step via ranks: per step record, its ranks are consecutive rows in XR (2 each)
ri=R.index('rank_log_analytic_ms')
def cv_via_rank(mk):
    oofr=cv(mk,XR,yr,gr)
    base=np.exp(XR[:,ri]); pred=base*np.exp(oofr)
    n=len(y); o=np.zeros(n)
    assert len(yr)==2*n
    for i in range(n):
        b=base[2*i:2*i+2]; p=pred[2*i:2*i+2]
        o[i]=np.log(p.max()/b.max())
    return o
def rep(n,o):
    a=err(y-o); print(f"{n:34s} {a[0]*100:5.1f} {a[1]*100:5.1f}",flush=True)
for a in (3,10,30,100):
    rep(f'huber a{a}', cv(lambda a=a: HubS(a),X,y,g))
for a in (1,3,10,30):
    rep(f'huber few a{a}', cv(lambda a=a: HubS(a, idx(S,few)),X,y,g))
for a in (10,30,100):
    rep(f'pooled ridge a{a}', cv_pooled(lambda a=a: RidgeS(a)))
    rep(f'pooled huber a{a}', cv_pooled(lambda a=a: HubS(a)))
for n,mk in [('gbt d1 leaf8',gbt(max_depth=1,min_samples_leaf=8)),('gbt d2 leaf8',gbt(max_depth=2,min_samples_leaf=8)),('gbt d3',gbt())]:
    rep('pooled '+n, cv_pooled(mk))
for n,mk in [('ridge a30',lambda: RidgeS(30)),('ridge a100',lambda: RidgeS(100)),('huber a30',lambda: HubS(30)),('gbt d2 leaf8',gbt(max_depth=2,min_samples_leaf=8)),('gbt d3',gbt())]:
    rep('via rank '+n, cv_via_rank(mk))
exec(open('/tmp/i19l/cv2.py').read().split("def rep(")[0])
def rep(n,o):
    a=err(y-o); print(f"{n:34s} {a[0]*100:5.1f} {a[1]*100:5.1f}",flush=True)
for k in ('llc_ratio_max','llc_ratio_mean','imbalance','tables','pooling_mean','dim_mean','dim_max'):
    print(k, np.round(np.quantile(X[:,S.index(k)],[0,.5,1]),2))
LOGF=['llc_ratio_max','llc_ratio_mean','tables','pooling_mean','dim_mean','dim_max']
def tf(x):
    x=x.copy()
    for k in LOGF: x[:,S.index(k)]=np.log1p(x[:,S.index(k)])
    return x
Xt=tf(X)
for a in (10,30,100):
    rep(f'ridge log-tf a{a}', cv(lambda a=a: RidgeS(a),Xt,y,g))
# nested alpha: inner LOFO over training families
AL=(3,10,30,100,300)
class RidgeCV:
    def __init__(self, lams=(1.0,)): self.lams=lams
    def fit(self,x,yy,gg):
        best=None
        for a in AL:
            for lam in self.lams:
                o=np.zeros(len(yy))
                for f in np.unique(gg):
                    t=gg==f; o[t]=lam*RidgeS(a).fit(x[~t],yy[~t]).predict(x[t])
                s=np.median(np.abs(np.exp(-(yy-o))-1))
                if best is None or s<best[0]: best=(s,a,lam)
        self.a,self.lam=best[1],best[2]; self.m=RidgeS(self.a).fit(x,yy); return self
    def predict(self,x): return self.lam*self.m.predict(x)
def cv_nested(lams, Xs=X):
    oof=np.zeros(len(y)); ch=[]
    for f in fams:
        t=g==f
        m=RidgeCV(lams).fit(Xs[~t],y[~t],g[~t]); oof[t]=m.predict(Xs[t]); ch.append((m.a,m.lam))
    return oof, ch
o,ch=cv_nested((1.0,)); rep('nested ridge (alpha by inner CV)',o); print(ch)
o,ch=cv_nested((0.5,0.75,1.0)); rep('nested ridge (alpha,lam by inner CV)',o); print(ch)
o1=cv(lambda: RidgeS(30),X,y,g); o2=cv_pooled(gbt()); rep('avg ridge30+pooled gbt d3',(o1+o2)/2)
o3=cv_pooled(lambda: RidgeS(100)); rep('avg ridge30+pooled ridge100',(o1+o3)/2)
# learning curve: nested-ridge (alpha by inner LOFO) trained on k of the 11 other families, test on the held-out one
exec(open('/tmp/i19l/cv3.py').read().split("o,ch=cv_nested")[0].split("for k in ('llc")[0])
AL=(3,10,30,100,300)
from benchmarks.perfmodel.train import fit_ridge
from sharding.learned_cost import predict_model
rng=np.random.default_rng(0)
for k in (4,6,8,11):
    es=[]
    for rep_ in range(3 if k<11 else 1):
        oof=np.zeros(len(y))
        for f in fams:
            others=[h for h in fams if h!=f]; pick=rng.choice(others,k,replace=False)
            tr=np.isin(g,pick); t=g==f
            m,_=fit_ridge(X[tr],y[tr],tuple(S),g[tr]); oof[t]=predict_model(m,X[t])
        es.append(err(y-oof))
    print(k, 'train families: median', round(np.mean([e[0] for e in es])*100,1), 'p90', round(np.mean([e[1] for e in es])*100,1), flush=True)
