import pickle, time
from benchmarks.perfmodel.train import read_records, step_table
t=time.time()
tab = step_table(read_records('/work/notes/s13/pm/records.jsonl'), '/work/notes/s13/qv/cal.yaml')
pickle.dump(tab, open('/tmp/i19l/tab.pkl','wb'))
print(time.time()-t, tab['x'].shape, tab['xr'].shape)
