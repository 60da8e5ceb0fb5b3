"""pytest-benchmark suite of the hot kernels and simulators (`make perf`); not collected by `make test`."""
