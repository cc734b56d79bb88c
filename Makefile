# bakeoff — the README's commands. Each target installs what it needs on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PLAN ?= local-demo

export AIRFLOW_HOME := $(CURDIR)/airflow_home
export AIRFLOW__CORE__DAGS_FOLDER := $(CURDIR)/dags
export AIRFLOW__CORE__PLUGINS_FOLDER := $(CURDIR)/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__CORE__EXECUTOR := LocalExecutor
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN := sqlite:///$(CURDIR)/airflow_home/airflow.db
export AIRFLOW__CORE__DAGBAG_IMPORT_ERROR_TRACEBACK_DEPTH := 5
export BAKEOFF_DATA ?= $(CURDIR)/var
export PYTHONUNBUFFERED := 1

.PHONY: demo test ui venv system-deps airflow-db distributed clean

## demo: a whole bake-off on the local provider (emulated hardware), ending with a report; exits
## non-zero when the DAG run failed. PLAN is an installed plan's name or a plan file (its folder is
## then the DAG's plan folder for this run).
demo: venv airflow-db
	@start=$$(date +%s); plan='$(PLAN)'; \
	if [ -f "$$plan" ]; then export BAKEOFF_PLANS="$$(cd "$$(dirname "$$plan")" && pwd)"; plan="$$(basename "$$plan" .yaml)"; fi; \
	$(VENV)/bin/airflow dags test bakeoff --conf "{\"plan\": \"$$plan\"}" > $(BAKEOFF_DATA)/demo-dag-test.log 2>&1; rc=$$?; \
	echo "DAG run finished in $$(( $$(date +%s) - start )) s (log: $(BAKEOFF_DATA)/demo-dag-test.log)"; \
	$(PY) -m bakeoff summary --plan '$(PLAN)'; \
	if [ $$rc -ne 0 ]; then echo "the DAG run failed (exit $$rc): its failed tasks are in the log named above" >&2; fi; exit $$rc

## test: the whole test suite (installs Python and Debian test dependencies first)
test: venv system-deps
	$(PY) -m pytest -q

## ui: the Airflow UI on http://localhost:8080 (airflow standalone prints the admin password)
ui: venv airflow-db
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" airflow standalone

venv: $(STAMP)
$(STAMP): requirements.txt requirements-test.txt requirements.lock pyproject.toml
	@command -v uv >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet --disable-pip-version-check uv==0.13.8
	@test -x $(PY) || uv venv --quiet --python $(PYTHON) $(VENV)
	VIRTUAL_ENV=$(VENV) uv pip install --quiet -r requirements-test.txt -c requirements.lock
	VIRTUAL_ENV=$(VENV) uv pip install --quiet --no-deps -e .
	@touch $(STAMP)

airflow-db: venv
	@mkdir -p $(AIRFLOW_HOME) $(BAKEOFF_DATA)
	@$(VENV)/bin/airflow db migrate > $(BAKEOFF_DATA)/airflow-db-migrate.log 2>&1 || (cat $(BAKEOFF_DATA)/airflow-db-migrate.log; exit 1)
	@$(VENV)/bin/airflow pools import config/pools.json >> $(BAKEOFF_DATA)/airflow-db-migrate.log 2>&1 || (cat $(BAKEOFF_DATA)/airflow-db-migrate.log; exit 1)

# Debian packages the report tests drive: headless Chromium and poppler (pdftoppm/pdftotext).
system-deps:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null || ! command -v pdftoppm >/dev/null; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver poppler-utils >/dev/null; \
		else echo "note: chromium/poppler-utils missing and not root; their tests will be skipped"; fi; fi

distributed: venv
	bash scripts/distributed_run.sh

clean:
	rm -rf $(VENV) $(AIRFLOW_HOME) var
