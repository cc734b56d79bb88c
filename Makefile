# bakeoff — the README's commands. Each target installs what it needs on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
# VENV=/some/dir builds (and uses) a virtualenv elsewhere, e.g. to try a new lock beside .venv.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PLAN ?= local-demo
# uv resolves the lock and installs from it; make installs this version with pip when it is missing.
UV_VERSION := 0.13.8
UV = $(shell command -v uv 2>/dev/null || echo "$(PYTHON) -m uv")
# Airflow's constraints for the pinned release (see the file's header for its origin and refresh).
CONSTRAINTS := constraints/airflow-3.3.2-py3.11.txt
# The lock is for CPython 3.11 on Linux x86_64 (CI, the compose image): 3.11.5 is the oldest patch
# release every locked package accepts.
LOCK_PYTHON := 3.11.5
LOCK_PLATFORM := x86_64-manylinux_2_28

export AIRFLOW_HOME := $(CURDIR)/airflow_home
export AIRFLOW__CORE__DAGS_FOLDER := $(CURDIR)/dags
export AIRFLOW__CORE__PLUGINS_FOLDER := $(CURDIR)/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__CORE__EXECUTOR := LocalExecutor
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN := sqlite:///$(CURDIR)/airflow_home/airflow.db
export AIRFLOW__CORE__DAGBAG_IMPORT_ERROR_TRACEBACK_DEPTH := 5
export BAKEOFF_DATA ?= $(CURDIR)/var
export PYTHONUNBUFFERED := 1

.PHONY: demo test test-unit lint typecheck lock ui venv ensure-uv system-deps airflow-db distributed clean cloud-specs engine-flags node-rehearsal

## demo: a whole bake-off on the local provider (emulated hardware), ending with a report; exits
## non-zero when the DAG run failed. PLAN is an installed plan's name or a plan file (its folder is
## then the DAG's plan folder for this run).
demo: venv airflow-db
	@start=$$(date +%s); plan='$(PLAN)'; \
	if [ -f "$$plan" ]; then export BAKEOFF_PLANS="$$(cd "$$(dirname "$$plan")" && pwd)"; plan="$$(basename "$$plan" .yaml)"; fi; \
	echo "running the bakeoff DAG on plan $$plan: one line per step and per benchmark point (log: $(BAKEOFF_DATA)/demo-dag-test.log)"; \
	$(VENV)/bin/airflow dags test bakeoff --conf "{\"plan\": \"$$plan\"}" > $(BAKEOFF_DATA)/demo-dag-test.log 2>&1 & pid=$$!; \
	$(PY) scripts/demo_progress.py $(BAKEOFF_DATA)/demo-dag-test.log $$pid; wait $$pid; rc=$$?; \
	echo "DAG run finished in $$(( $$(date +%s) - start )) s (log: $(BAKEOFF_DATA)/demo-dag-test.log)"; \
	$(PY) -m bakeoff summary --plan '$(PLAN)'; \
	if [ $$rc -ne 0 ]; then echo "the DAG run failed (exit $$rc): its failed tasks are in the log named above" >&2; fi; exit $$rc

## test: the whole test suite (installs Python and Debian test dependencies first). The project's
## own modules are byte-compiled first, as the venv's are: the suite starts hundreds of Python
## processes (airflow, emulators, the CLI), and with PYTHONDONTWRITEBYTECODE set each one would
## otherwise compile every module it imports again.
test: venv system-deps
	$(PY) -m compileall -q include dags plugins > /dev/null
	$(PY) -m pytest -q

## test-unit: the fast tests, without the e2e, browser, sandbox and distributed ones (markers set by
## folder in tests/conftest.py) and without the slow ones (marked slow: tests/ui, the FAB migration,
## the reports' authentication against a live API server, the Great Expectations validations of whole
## runs, the Celery client workers, a whole sandbox deploy, the twin's hold-out refits, and each test
## that takes seconds on its own: a node agent's job, the bench CLI and worker processes end to end,
## the pipeline's waits on a local node, a report rendered to PDF in full). Its tests mostly wait on
## sockets and child processes, so pytest-xdist runs them in UNIT_WORKERS processes, a test file per
## process (--dist loadfile keeps a file's fixtures together); UNIT_WORKERS=0 runs them in one.
## Measured on a quiet 2-core machine (2026-12-05): 1 m 43 s with 3 workers, 2 m 59 s in one process.
UNIT_WORKERS ?= 3
test-unit: venv
	$(PY) -m pytest -q -n $(UNIT_WORKERS) $(if $(filter 0,$(UNIT_WORKERS)),,--dist loadfile) \
		-m "not e2e and not browser and not sandbox and not distributed and not slow"

## lint: ruff's rules and ruff format (pyproject.toml [tool.ruff]); typecheck: mypy on include/bakeoff
## (pyproject.toml [tool.mypy], strict on the modules it lists). CI runs both first.
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: venv
	$(VENV)/bin/mypy

## lock: compile requirements.txt, the one pinned install list (every extra, with hashes), from
## pyproject.toml under Airflow's constraints. Pins already in the lock are kept while they still satisfy pyproject.toml;
## UPGRADE=1 re-resolves everything to the newest allowed versions. Then `make venv`, and
## `python scripts/agent_requirements.py` if an agent package moved.
lock: ensure-uv
	$(UV) pip compile pyproject.toml --all-extras --generate-hashes --quiet \
		--constraints $(CONSTRAINTS) --python-version $(LOCK_PYTHON) --python-platform $(LOCK_PLATFORM) \
		--custom-compile-command "make lock" $(if $(UPGRADE),--upgrade) --output-file requirements.txt

## ui: the Airflow UI on http://127.0.0.1:8080 (airflow standalone, sized for this machine's cores; the
## admin password is printed once the UI answers, the log goes to $(BAKEOFF_DATA)/ui.log)
ui: venv airflow-db
	@PATH="$(abspath $(VENV))/bin:$$PATH" bash scripts/ui.sh

## venv: the virtualenv, exactly the lock (sync removes what the lock does not list; every wheel's
## hash is checked), then bakeoff itself as an editable install. --python names the venv's interpreter:
## `python -m uv` (the fallback when uv is not on PATH) would otherwise install into the Python that
## runs it, not into $(VENV), whatever VIRTUAL_ENV says. --compile-bytecode writes every module's
## .pyc at install time (pip does, uv does not by default): where PYTHONDONTWRITEBYTECODE is set no
## process could cache one, and each would spend seconds compiling Airflow, GX and pandas again.
venv: $(STAMP)
$(STAMP): requirements.txt pyproject.toml
	@$(MAKE) --no-print-directory ensure-uv
	@test -x $(PY) || $(UV) venv --quiet --python $(PYTHON) $(VENV)
	@echo "installing the $$(grep -c '^[A-Za-z0-9].*==' requirements.txt) locked packages into $(VENV) (the first time: a few minutes)"
	$(UV) pip sync --quiet --compile-bytecode --python $(PY) --require-hashes requirements.txt
	$(UV) pip install --quiet --compile-bytecode --python $(PY) --no-deps -e .
	@touch $(STAMP)
	@echo "installed"

ensure-uv:
	@command -v uv >/dev/null 2>&1 || $(PYTHON) -m uv --version >/dev/null 2>&1 || \
		$(PYTHON) -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

airflow-db: venv
	@mkdir -p $(AIRFLOW_HOME) $(BAKEOFF_DATA)
	@echo "preparing Airflow's database ($(AIRFLOW_HOME)/airflow.db)"
	@$(VENV)/bin/airflow db migrate > $(BAKEOFF_DATA)/airflow-db-migrate.log 2>&1 || (cat $(BAKEOFF_DATA)/airflow-db-migrate.log; exit 1)

# Debian packages the report tests drive: headless Chromium and poppler (pdftoppm/pdftotext).
system-deps:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null || ! command -v pdftoppm >/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver poppler-utils >/dev/null; \
		else echo "note: chromium/poppler-utils missing and not root; their tests will be skipped"; fi; fi

## cloud-specs: re-bundle the vendored cloud API definitions (include/bakeoff_sandbox/specs) from
## checkouts of digitalocean/openapi and vultr/vultr-python-client: DO_SPEC=path VULTR_SPEC=path
cloud-specs: venv
	$(PY) scripts/vendor_cloud_specs.py $(if $(DO_SPEC),--digitalocean $(DO_SPEC)) $(if $(VULTR_SPEC),--vultr $(VULTR_SPEC))

## engine-flags: re-vendor the flags each engine release's own parser accepts (catalog/engine_flags.json)
## from the package index (vLLM, SGLang wheels, downloaded not installed) and a git directory of
## ROCm/ATOM: ATOM_GIT=path [TRTLLM_DIR=dir holding tensorrt_llm/commands/serve.py TRTLLM_SOURCE=...]
engine-flags: venv
	$(PY) scripts/vendor_engine_flags.py --atom $(ATOM_GIT) $(if $(TRTLLM_DIR),--trtllm $(TRTLLM_DIR) --trtllm-source "$(TRTLLM_SOURCE)")

## node-rehearsal: boot the cloud boot script under cloud-init on a debootstrapped Debian (systemd, its
## own Docker) with local stand-ins around it (docs/production.md); root; every cloud with vLLM, a bare
## image and every engine family, side by side (about 12 minutes). CLOUD=vultr ENGINE=vllm narrow it
node-rehearsal: venv
	@if ! command -v debootstrap >/dev/null || ! command -v docker-registry >/dev/null || ! command -v dockerd >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap docker.io docker-registry >/dev/null; fi
	@docker info >/dev/null 2>&1 || { mkdir -p var; (dockerd >var/dockerd.log 2>&1 &); sleep 5; }
	$(PY) benchmarks/node_rehearsal.py $(if $(CLOUD),--cloud $(CLOUD)) $(if $(ENGINE),--engine $(ENGINE))

distributed: venv
	VENV="$(abspath $(VENV))" bash scripts/distributed_run.sh

clean:
	rm -rf $(VENV) $(AIRFLOW_HOME) var
