#!/usr/bin/env bash
# The production topology (see docker-compose.yml) as native processes on one machine:
# PostgreSQL (metadata DB + Celery results), Redis (Celery broker), Airflow's scheduler,
# dag-processor, api-server, triggerer and two Celery workers with their own hostnames.
# It triggers `bakeoff` through the REST API with the demo plan, waits for it, checks that targets
# ran on both workers in parallel and that the report exists, prints the wall time and which
# worker ran which target, and stops everything it started (trap on EXIT).
#
# Needs: root (to install Debian's postgresql and redis-server when missing, to run PostgreSQL as
# the postgres user, and to give each worker its own hostname with `unshare --uts`), and the
# project's virtualenv. Services listen on 127.0.0.1 only, on free ports.
#
# usage: scripts/distributed_run.sh
# env:   PLAN (local-demo)  TIMEOUT seconds for parse + run (600)  VENV (.venv)
#        DAGS_FOLDER (dags/)  KEEP_WORKDIR=1 keeps logs and data for inspection
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${VENV:-$ROOT/.venv}
PLAN=${PLAN:-local-demo}
TIMEOUT=${TIMEOUT:-600}
WORKERS=(worker-a worker-b)
T0=$(date +%s)

log() { printf '[distributed_run %3ds] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
die() { log "ERROR: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (installs packages, runs PostgreSQL as postgres, unshare --uts)"
[ -x "$VENV/bin/airflow" ] || die "no Airflow in $VENV; run 'make venv' first"

# --- system packages -----------------------------------------------------------------------------
pg_bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
if [ -z "$(pg_bindir)" ] || ! command -v redis-server >/dev/null; then
  log "installing postgresql and redis-server (apt)"
  # Keep the packages' own services (default cluster on 5432, redis on 6379) from starting: this
  # script runs its own instances and must leave nothing running behind it.
  policy=/usr/sbin/policy-rc.d created_policy=0
  [ -e "$policy" ] || { printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"; created_policy=1; }
  trap '[ $created_policy = 0 ] || rm -f "$policy"' EXIT
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql redis-server >/dev/null
  [ $created_policy = 0 ] || rm -f "$policy"
  trap - EXIT
fi
PG_BIN=$(pg_bindir)

# --- workspace, ports, secrets -------------------------------------------------------------------
WORK=$(mktemp -d -t bakeoff-distributed.XXXXXX)
chmod 755 "$WORK"
mkdir -p "$WORK/logs" "$WORK/data"
PIDS=()

free_port() { "$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PG_PORT=$(free_port); REDIS_PORT=$(free_port); API_PORT=$(free_port)
PG_PASSWORD=$("$VENV/bin/python" -c 'import secrets; print(secrets.token_hex(16))')
REDIS_PASSWORD=$("$VENV/bin/python" -c 'import secrets; print(secrets.token_hex(16))')
SECRETS="$WORK/secrets"
PYTHON="$VENV/bin/python" "$ROOT/scripts/init_secrets.sh" "$SECRETS" admin >/dev/null

stop_all() {  # TERM every process group started here, KILL what is left after 20 s
  local pid i alive
  for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for i in $(seq 40); do
    alive=0
    for pid in "${PIDS[@]}"; do kill -0 -- "-$pid" 2>/dev/null && alive=1; done
    [ $alive = 1 ] || return 0
    sleep 0.5
  done
  for pid in "${PIDS[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
}

cleanup() {
  local rc=$?
  set +e
  log "stopping everything started here"
  stop_all
  # Anything the DAG started (emulators) carries BAKEOFF_DATA in its environment; a clean run
  # leaves none, so finding one is a failure as well as something to stop.
  if "$VENV/bin/python" "$ROOT/scripts/stray_processes.py" --kill "BAKEOFF_DATA=$WORK/data"; then :; else
    [ $rc -ne 0 ] || rc=1
  fi
  [ -f "$WORK/pg/data/postmaster.pid" ] && runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$WORK/pg/data" -m fast -w stop >/dev/null
  if [ "${KEEP_WORKDIR:-0}" = 1 ] || [ $rc -ne 0 ]; then
    log "logs kept in $WORK/logs"
    for f in "$WORK"/logs/*.log "$WORK/pg/postgres.log"; do [ $rc -eq 0 ] || { echo "--- tail $f"; tail -n 25 "$f"; }; done
  else
    rm -rf "$WORK"
  fi
  log "exit $rc, total $(( $(date +%s) - T0 )) s"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start() {  # start NAME CMD...: run in its own session (so stop_all reaches all its children)
  local name=$1; shift
  setsid "$@" >"$WORK/logs/$name.log" 2>&1 < /dev/null &
  PIDS+=($!)
}

# --- PostgreSQL and Redis on loopback --------------------------------------------------------------
log "PostgreSQL on 127.0.0.1:$PG_PORT, Redis on 127.0.0.1:$REDIS_PORT"
mkdir -p "$WORK/pg/run"
printf '%s\n' "$PG_PASSWORD" > "$WORK/pg/pwfile"
chown -R postgres: "$WORK/pg"
runuser -u postgres -- "$PG_BIN/initdb" -D "$WORK/pg/data" -U airflow --pwfile="$WORK/pg/pwfile" \
  --auth=scram-sha-256 -E UTF8 >"$WORK/logs/initdb.log"
rm -f "$WORK/pg/pwfile"
runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$WORK/pg/data" -l "$WORK/pg/postgres.log" -w \
  -o "-p $PG_PORT -c listen_addresses=127.0.0.1 -k $WORK/pg/run -c fsync=off -c max_connections=200" start >/dev/null
PGPASSWORD=$PG_PASSWORD "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U airflow airflow

mkdir -p "$WORK/redis"
start redis redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$WORK/redis" --save '' \
  --appendonly no --requirepass "$REDIS_PASSWORD"

# --- Airflow configuration: the same settings as docker-compose.yml, by environment --------------
# Start from a clean slate: settings inherited from the caller (e.g. the Makefile's SQLite and
# LocalExecutor, or another BAKEOFF_REPORTS) must not leak into this deployment.
while read -r var; do unset "$var"; done < <(compgen -e | grep -E '^(AIRFLOW_|AIRFLOW__|BAKEOFF_)' || true)
export AIRFLOW_HOME="$WORK/airflow"
export AIRFLOW__CORE__EXECUTOR=CeleryExecutor
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="postgresql+psycopg2://airflow:$PG_PASSWORD@127.0.0.1:$PG_PORT/airflow"
export AIRFLOW__CELERY__RESULT_BACKEND="db+postgresql+psycopg2://airflow:$PG_PASSWORD@127.0.0.1:$PG_PORT/airflow"
export AIRFLOW__CELERY__BROKER_URL="redis://:$REDIS_PASSWORD@127.0.0.1:$REDIS_PORT/0"
export AIRFLOW__CORE__FERNET_KEY_CMD="cat $SECRETS/fernet_key"
export AIRFLOW__API__SECRET_KEY_CMD="cat $SECRETS/api_secret_key"
export AIRFLOW__API_AUTH__JWT_SECRET_CMD="cat $SECRETS/jwt_secret"
export AIRFLOW__CORE__AUTH_MANAGER=airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=admin:admin
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="$SECRETS/passwords.json"
export AIRFLOW__CORE__DAGS_FOLDER="${DAGS_FOLDER:-$ROOT/dags}"
export AIRFLOW__CORE__PLUGINS_FOLDER="$ROOT/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=True
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$API_PORT/execution/"
export AIRFLOW__CORE__HOSTNAME_CALLABLE=socket.gethostname
export AIRFLOW__API__WORKERS=1
export AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK=False
# Only the run triggered below: unpausing must not also start the @monthly schedule's latest run.
export AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE=False
export BAKEOFF_DATA="$WORK/data"
export PATH="$VENV/bin:$PATH"
export PYTHONUNBUFFERED=1

log "airflow db migrate"
airflow db migrate >"$WORK/logs/db-migrate.log" 2>&1 || die "db migrate failed (see $WORK/logs/db-migrate.log)"
# Pools, variables and placeholder connections, exactly as a deployment loads them.
"$ROOT/scripts/load_settings.sh" >"$WORK/logs/load-settings.log" 2>&1 || die "load_settings failed"
# Create the installation secret for per-run serving keys once, before two workers race for it.
python -c 'from bakeoff.secrets import api_key; api_key("init", "init")'

log "starting scheduler, dag-processor, api-server (:$API_PORT), triggerer and ${#WORKERS[@]} Celery workers"
start scheduler airflow scheduler
start dag-processor airflow dag-processor
start api-server airflow api-server --host 127.0.0.1 --port "$API_PORT"
start triggerer airflow triggerer --skip-serve-logs
for w in "${WORKERS[@]}"; do
  # Each worker gets its own UTS namespace, i.e. its own hostname: the name recorded on the task
  # instances it runs, as on separate machines. One task at a time each, so two parallel targets
  # must land on different workers. Task logs go to the shared AIRFLOW_HOME, where the api-server
  # reads them, so no log server (which would bind all interfaces) is started.
  start "$w" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$w" \
    airflow celery worker --concurrency 1 --without-mingle --without-gossip --skip-serve-logs
done

for i in $(seq 120); do
  curl -fsS "http://127.0.0.1:$API_PORT/api/v2/monitor/health" >/dev/null 2>&1 && break
  for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || die "a process exited early (see logs)"; done
  sleep 1
done
log "api-server is up; triggering $(basename "$AIRFLOW__CORE__DAGS_FOLDER")/bakeoff with plan $PLAN"

python "$ROOT/scripts/trigger_and_verify.py" --base-url "http://127.0.0.1:$API_PORT" --user admin \
  --password-file "$SECRETS/passwords.json" --dag bakeoff --conf "{\"plan\": \"$PLAN\"}" \
  --workers "$(IFS=,; echo "${WORKERS[*]}")" --reports "$BAKEOFF_DATA/reports" --timeout "$TIMEOUT"
