#!/usr/bin/env bash
# make ui: `airflow standalone` sized for this machine, listening on loopback only, its log in a file,
# and the address, user and password printed once the UI answers (not buried in the log).
#
# Sizing: the LocalExecutor starts one worker per task slot (core.parallelism, default 32) and the
# API server one worker per core it is told; on a small box most of them would sit idle. Each value
# already set in the environment wins.
set -euo pipefail

cores=$(nproc 2>/dev/null || echo 2)
export AIRFLOW__API__HOST="${AIRFLOW__API__HOST:-127.0.0.1}"  # loopback: the UI is for this machine
export AIRFLOW__API__PORT="${AIRFLOW__API__PORT:-8080}"
export AIRFLOW__API__WORKERS="${AIRFLOW__API__WORKERS:-$((cores >= 8 ? 2 : 1))}"
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-$((cores * 2 < 4 ? 4 : cores * 2))}"
export AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES="${AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES:-$((cores >= 4 ? 2 : 1))}"

log="${BAKEOFF_DATA:?}/ui.log"
url="http://${AIRFLOW__API__HOST}:${AIRFLOW__API__PORT}"
echo "starting Airflow on ${url}: ${AIRFLOW__CORE__PARALLELISM} task slots, ${AIRFLOW__API__WORKERS} API worker(s) for ${cores} cores (log: ${log})"
# its own process group, so that stopping this script (Ctrl-C, a TERM) stops every process it started
setsid airflow standalone >"$log" 2>&1 &
pid=$!
trap 'kill -TERM -- "-$pid" 2>/dev/null; wait "$pid" 2>/dev/null' INT TERM EXIT

for _ in $(seq 1 600); do
  if curl -sf -o /dev/null "${url}/api/v2/monitor/health"; then
    break
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "airflow standalone stopped before the UI answered; the end of its log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  sleep 1
done

passwords="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:-${AIRFLOW_HOME:?}/simple_auth_manager_passwords.json.generated}"
password=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("admin", "(see the file)"))' "$passwords" 2>/dev/null || echo "(not generated yet: see $passwords)")
echo
echo "Airflow UI: ${url}   user: admin   password: ${password}"
echo "(the password is kept in ${passwords}; Ctrl-C stops Airflow)"
wait "$pid"
