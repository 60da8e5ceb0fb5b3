# dlrmbench: `make bench` runs the default benchmark, `make test` the quick tests (`make test-all` adds the slow
# integration tests; CI runs `make test` and `make test-slow`). All create .venv when missing.
# Where nvidia-smi finds a GPU (or with GPU=1) the CUDA fbgemm-gpu of the same release replaces fbgemm-gpu-cpu.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install --disable-pip-version-check
GPU    ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1 || echo 0)
STACK  := requirements/$(if $(filter 1,$(GPU)),gpu,cpu).txt
STAMP  := $(VENV)/.installed-$(if $(filter 1,$(GPU)),gpu,cpu)
LOG    := $(VENV)/install.log
EXPECTED := ^torchrec [0-9.]* requires fbgemm-gpu, which is not installed
PYTEST_ARGS ?=

.PHONY: setup bench test test-all test-slow perf sample-report lint clean
COMPARE ?=
setup: $(STAMP)

# One install step: its output goes to $(LOG); on failure the step is named and the log's end is shown.
define step
	@echo "setup: $(1)"
	@{ echo "== $(1)"; $(2); } >>$(LOG) 2>&1 || { echo "setup: FAILED: $(1); the end of $(LOG):"; \
	  tail -n 30 $(LOG) | sed 's/^/  | /'; exit 1; }
endef

# The stack and every pin except torchrec go in through pip's resolver in one call; torchrec then goes in with
# --no-deps (its dependencies are pinned in requirements/common.txt; fbgemm-gpu-cpu stands in for its fbgemm-gpu,
# which is why pip check's one complaint about it is expected and filtered).
$(STAMP): requirements/cpu.txt requirements/gpu.txt requirements/common.txt pyproject.toml
	@test -x $(PY) || { echo "setup: creating $(VENV) (python3 -m venv); pip's output goes to $(LOG)"; \
	  python3 -m venv $(VENV) || { echo "setup: FAILED: python3 -m venv $(VENV)"; exit 1; }; }
	@: > $(LOG)
	$(call step,$(STACK) and the pins of requirements/common.txt,$(PIP) -r $(STACK) \
	  $$(grep -v -e '^torchrec' -e '^#' requirements/common.txt))
	$(call step,torchrec without its dependencies (pinned above),$(PIP) --no-deps torchrec==1.8.0)
	$(call step,dlrmbench itself (editable),$(PIP) --no-deps -e .)
	$(call step,the planner's numba kernels (compiled once into their cache: about a minute of CPU),$(PY) -c 'import sharding.optimizer')
	$(call step,pip check,$(PY) -m pip check | grep -v '$(EXPECTED)' | { ! grep .; })
	@rm -f $(VENV)/.installed-*
	@touch $@
	@echo "setup: $(VENV) is ready (pip's output: $(LOG))"

bench: $(STAMP)
	$(PY) -m benchmarks.run

# the quick tests (the README's test command); test-slow those marked slow (long integration tests), test-all both
test: $(STAMP)
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow $(PYTEST_ARGS)

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
