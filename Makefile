# Two commands on a fresh machine: `make demo` and `make test`. Each installs what it needs into .venv
# from the pinned uv.lock (uv itself is installed with pip when missing).
SHELL := /bin/bash
UV ?= $(or $(shell command -v uv 2>/dev/null),.tools/bin/uv)
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# `make test` runs pytest in WORKERS pytest-xdist workers (6 on the 2-core machine: most tests wait on
# simulated clusters and Airflow processes rather than compute; docs/development.md, "Parallel runs");
# WORKERS=0 runs one test after another. `make test-fast` (no Airflow process) runs in FAST_WORKERS
# workers, for the same reason.
WORKERS ?= 6
FAST_WORKERS ?= 4
XDIST := -n $(WORKERS) --dist loadgroup
# The checkout's bytecode (the package's, and pytest's rewritten test modules) is written to its ignored
# __pycache__ folders even where the environment turns that off (PYTHONDONTWRITEBYTECODE): otherwise every
# pytest worker rewrites all test modules again (about 4 s of CPU each) and every Airflow process the
# suite starts compiles the package again.
pytest test-fast: export PYTHONDONTWRITEBYTECODE =
# The tiers `make test-fast` runs (tests/tiers.py): no Airflow database, no Airflow process, no browser.
FAST_TIERS := unit or property or sim

.PHONY: install test test-fast lint typecheck pytest demo demo-real bench clean soak soak-ci soak-sim soak-install testbed conformance

.tools/bin/uv:
	python3 -m venv .tools && .tools/bin/pip install --quiet 'uv>=0.13.9'

install: $(VENV)/.installed

# Bytecode compiled at install: without it every Airflow process compiles thousands of modules (seconds
# each) wherever bytecode cannot be written (PYTHONDONTWRITEBYTECODE, read-only installs).
$(VENV)/.installed: pyproject.toml devtools/pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen --compile-bytecode
	touch $@

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install
	$(VENV)/bin/mypy airflow_provider_fedsched

# Every tier but conformance and soak (pyproject's addopts leave those to their own targets).
pytest: install
	$(VENV)/bin/pytest $(XDIST) $(PYTEST_ARGS)

# The type check runs beside pytest, on the core pytest's workers leave idle while they wait on simulated
# clusters and Airflow processes; its output follows pytest's, and either failing fails the target.
test: lint install
	@$(VENV)/bin/mypy airflow_provider_fedsched > $(VENV)/typecheck.log 2>&1 & typecheck=$$!; \
	$(MAKE) --no-print-directory pytest; tests=$$?; \
	wait $$typecheck; typed=$$?; \
	echo "$(VENV)/bin/mypy airflow_provider_fedsched (beside pytest):"; cat $(VENV)/typecheck.log; \
	test $$tests -eq 0 -a $$typed -eq 0

# The inner loop: unit, property and simulator tests, no lint; PYTEST_ARGS narrows it further.
test-fast: install
	$(VENV)/bin/pytest -n $(FAST_WORKERS) --dist loadgroup -m "$(FAST_TIERS)" $(PYTEST_ARGS)

demo: install
	$(PY) -m airflow_provider_fedsched.demo

# The demo DAG on the test bed's real control planes, run by a multi-process Airflow (docs/testbed.md);
# KEEP=1 leaves the Airflow UI up until Ctrl-C.
demo-real: install testbed
	$(PY) -m airflow_provider_fedsched.testbed.demo

# About 10 minutes (docs/benchmarks.md); the throughput benchmark needs the soak's PostgreSQL driver.
bench: install soak-install
	$(PY) benchmarks/bench_engine.py
	$(PY) benchmarks/bench_gang.py
	$(PY) benchmarks/bench_sim.py
	$(PY) benchmarks/bench_hook.py
	$(PY) benchmarks/bench_operator.py
	$(PY) benchmarks/bench_plans.py
	$(PY) benchmarks/bench_history_api.py
	$(PY) benchmarks/bench_cli.py
	$(PY) benchmarks/bench_input_limits.py
	$(SOAK_VENV)/bin/python benchmarks/bench_throughput.py

# Real control planes (kube-apiserver, controller-manager, scheduler v1.36, etcd 3.6, kwok 0.8) built from
# the Go module proxy into .testbed/bin, once per machine (docs/testbed.md).
testbed:
	testbed/build.sh .testbed/bin

# The provider against real control planes: prints `conformance: passed=N failed=0 clusters=K kubernetes=v...`.
conformance: install testbed
	$(PY) -m tests.conformance.run $(PYTEST_ARGS)

# The soak (docs/reliability.md): a real multi-process Airflow on PostgreSQL (installed from Debian's
# packages and started on loopback when absent) runs a federated load on the test bed's real control planes
# (five members; the shipped deploy/ manifests as the provider's only permissions; the members as
# connections in Airflow's database) while faults are injected on their real parts; an auditor reads the
# API servers' audit logs. Each run ends with one `soak:` line. `soak-sim` runs the same load on the
# simulated clusters (no Go toolchain needed). It has a virtualenv of its own (the lock's `soak` group:
# celery provider, PostgreSQL drivers), so that `make test` never sees the Celery provider.
SOAK_VENV := .venv-soak

soak-install: $(SOAK_VENV)/.installed

$(SOAK_VENV)/.installed: pyproject.toml devtools/pyproject.toml uv.lock | $(UV)
	UV_PROJECT_ENVIRONMENT=$(SOAK_VENV) $(UV) sync --frozen --group soak --compile-bytecode
	touch $@

# >= 200 tasks, LocalExecutor, then CeleryExecutor (Redis broker, two workers), on the test bed.
soak: soak-install testbed
	@rc=0; for executor in local celery; do \
		$(SOAK_VENV)/bin/python -m soak --ground testbed --profile full --executor $$executor || rc=1; done; exit $$rc

# The CI-sized soak on the test bed: 46 tasks (two of them 3-pod gang Jobs, four of 150-180 s), LocalExecutor on PostgreSQL,
# seven faults (a kube-apiserver SIGSTOPped under a non-deferrable task's pod, etcd killed, a node NotReady,
# the metadata database restarted...).
soak-ci: soak-install testbed
	$(SOAK_VENV)/bin/python -m soak --ground testbed --profile ci --executor local

# The same soak on the simulated clusters (their journals are the record), both executors.
soak-sim: soak-install
	@rc=0; for executor in local celery; do \
		$(SOAK_VENV)/bin/python -m soak --ground sim --profile full --executor $$executor || rc=1; done; exit $$rc

clean:
	rm -rf $(VENV) $(SOAK_VENV) .tools .pytest_cache .mypy_cache .ruff_cache .soak
