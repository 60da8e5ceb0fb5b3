# dlrmbench: `make bench` runs the default benchmark, `make test` runs the tests. Both create .venv when missing.
# Where nvidia-smi finds a GPU (or with GPU=1) the CUDA fbgemm-gpu of the same release replaces fbgemm-gpu-cpu.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install -q --disable-pip-version-check
GPU    ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1 || echo 0)
STACK  := requirements/$(if $(filter 1,$(GPU)),gpu,cpu).txt
STAMP  := $(VENV)/.installed-$(if $(filter 1,$(GPU)),gpu,cpu)
PYTEST_ARGS ?=

.PHONY: setup bench test perf sample-report lint clean
COMPARE ?=
setup: $(STAMP)

$(STAMP): requirements/cpu.txt requirements/gpu.txt requirements/common.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) -r $(STACK)
	$(PIP) --no-deps torchrec==1.8.0
	$(PIP) $$(grep -v -e '^torchrec' -e '^#' requirements/common.txt)
	$(PIP) --no-deps -e .
	rm -f $(VENV)/.installed-*
	touch $@

bench: $(STAMP)
	$(PY) -m benchmarks.run

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

# pytest-benchmark suite of the hot kernels; COMPARE=NNNN compares with a saved run (fails on a 25% median slowdown)
perf: $(STAMP)
	$(PY) -m pytest -q benchmarks/perf --benchmark-only --benchmark-autosave $(if $(COMPARE),--benchmark-compare=$(COMPARE) --benchmark-compare-fail=median:25%)

# The sample report committed in results/sample/report: four sweeps and the planner sweep, then the report.
SWEEP = $(PY) -m benchmarks.run -m output.progress=false output.records=results/sample/records.jsonl
sample-report: $(STAMP)
	rm -rf results/sample
	$(SWEEP) +sweep=backends_workloads hydra.sweep.dir=results/sample/sweep_backends_workloads
	$(SWEEP) +sweep=pooling_skew hydra.sweep.dir=results/sample/sweep_pooling_skew
	$(SWEEP) +sweep=cache_skew hydra.sweep.dir=results/sample/sweep_cache_skew
	$(SWEEP) +sweep=nmp_ranks hydra.sweep.dir=results/sample/sweep_nmp_ranks
	$(PY) -m benchmarks.sweep plans conf/plan_sweep/planners_ranks.yaml --out results/sample/records.jsonl
	$(PY) -m benchmarks.report results/sample/records.jsonl --out results/sample/report

lint: $(STAMP)
	$(PY) -m ruff check embedding sharding benchmarks serving tests

clean:
	rm -rf $(VENV)
