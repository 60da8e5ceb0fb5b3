"""Inference serving: MLPerf LoadGen traffic → request queue → dynamic batching → a pool of DLRM workers.

Rooms: `config` (typed knobs and their checks), `queries` (query sizes and the sample pool), `server` (queue,
batcher, workers), `procpool` (worker processes), `services` (what a worker runs), `build` (setup and a fresh
server per run), `loadgen` (the LoadGen adapter and its logs), `search` (operating-point search), `theory`
(M/D/c reference by simulation), `desim` (SimPy model for what-ifs), `whatif` (cache hit rate × tier speed), `report` (QPS–latency plots).
"""
