#!/usr/bin/env bash
# The production topology (see docker-compose.yml) as native processes on one machine, run the way
# it scales out: PostgreSQL (metadata DB), Redis (Celery broker and results), Airflow's
# scheduler, dag-processor, api-server and triggerer, and two Celery workers with their own
# hostnames, one task at a time each, that share NO data folder (each has its own BAKEOFF_DATA), NO
# loopback (each runs in its own network namespace, made here: see "Network" below) and hold no
# database password (as in docker-compose.yml: tasks reach Airflow through the api-server), and
# results and reports live in S3 (a bucket in the sandbox's moto server, through the aws
# connection bakeoff_s3). The plan (distributed-sandbox-cluster) has two EC2 targets on the sandbox
# clouds (started here as their own process) and a local disaggregated cluster (two emulator nodes
# and a router on the provisioning worker's namespace address, which the other worker benchmarks
# and tears down), each benchmarked for about 80 s (the EC2 nodes co-located, the cluster from an
# Airflow worker), so the benchmarks can only all run at once if the waits free their worker slots.
#
# Two of bakeoff's own Celery client workers (bench/fleet/fleet_celery.py, their own hostnames and network
# namespaces, one member slot each) serve the client fleet (client_fleet: 2) of the target
# benchmarked from an Airflow worker: its members are sent through Redis database 2.
#
# Network: a bridge on this host with an address in a private /24 chosen here (one no route or
# interface on the machine uses), and one namespace per worker and client worker, joined to it by a
# veth pair. Nothing routes out of the namespaces: traffic goes only between them and the bridge's
# host address, where Redis, the api-server and the sandbox's APIs and nodes listen (PostgreSQL
# stays on loopback: no worker connects to it). Each worker's emulated nodes, cluster router and
# fleet coordinator listen on its own namespace address (BAKEOFF_NODE_ADDRESS, BAKEOFF_FLEET_BIND),
# as a compose worker's listen on its container address. Where bridged frames pass through iptables
# (br_netfilter loaded, as Docker leaves it, with a FORWARD policy of DROP), one rule accepts what
# goes from the bridge to the bridge, or namespace-to-namespace connections vanish unanswered; before
# anything starts, the first worker's namespace must connect to a port in the last client worker's.
# The namespaces, the bridge and that rule are removed on exit.
#
# It triggers `bakeoff` through the REST API, waits, and fails unless: the run succeeded, targets
# ran on both workers, all three targets' benchmark windows overlap, the fleet's members ran on both
# client workers, the report is read back from S3, and no worker's data folder holds a result; then,
# before anything is stopped, that no node outlived its teardown (scripts/surviving_nodes.py: no
# emulator, router or node agent of the run still runs, no local node is left unterminated in the
# registry). PLANT_SURVIVOR=1 starts a local node from a worker's namespace that no teardown will
# stop, to see that check fail the run.
# It prints the DAG run's wall time, each target's step timeline, and the worker-slot seconds each target held against its wall and wait time.
# The goal is that pokes hold at most 10 % of the waiting time: the table says PASS/FAIL against
# it, but the script fails only above 25 %, so that a slow, shared CI machine does not turn a
# correct run red (scripts/run_timeline.py).
#
# What the processes still share, and why:
#   AIRFLOW_HOME/logs   Airflow's task logs: the api-server reads them from there, so no log server
#                       (which would bind all interfaces) is started; a deployment ships them to
#                       remote logging instead
#   BAKEOFF_SECRET_KEY  the installation secret per-run serving keys derive from, by environment
#                       (as a secrets manager would pass it): a node provisioned on one worker is
#                       deployed and benchmarked from the other
#   BAKEOFF_LOCAL_STATE the local provider's registry of emulator nodes (the "cloud account" of the
#                       local cluster target; a real cloud keeps it off the workers): it records each
#                       node's address and owning worker, and a node another worker started is
#                       stopped through its key-opened stop route, then seen gone
#
# Needs: root (to install Debian's postgresql, redis-server and iproute2 when missing, to run
# PostgreSQL as the postgres user, to make the network namespaces and to give each worker its own
# hostname with `unshare --uts`), and the project's virtualenv with the sandbox extra. Services
# listen on 127.0.0.1 and the bridge's private address only, on free ports.
#
# usage: scripts/distributed_run.sh
# env:   PLAN (distributed-sandbox-cluster)  PLANT_SURVIVOR=1 (the run must then fail)  TIMEOUT seconds for parse + run (600)  VENV (.venv)
#        DAGS_FOLDER (dags/)  KEEP_WORKDIR=1 keeps logs and data for inspection
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${VENV:-$ROOT/.venv}
PLAN=${PLAN:-distributed-sandbox-cluster}
TIMEOUT=${TIMEOUT:-600}
WORKERS=(worker-a worker-b)
CLIENT_WORKERS=(clients-a clients-b)
BUCKET=bakeoff-results
T0=$(date +%s)

log() { printf '[distributed_run %3ds] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
die() { log "ERROR: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (installs packages, runs PostgreSQL as postgres, ip netns, unshare --uts)"
[ -x "$VENV/bin/airflow" ] || die "no Airflow in $VENV; run 'make venv' first"
"$VENV/bin/python" -c 'import bakeoff_sandbox, moto' 2>/dev/null || die "no sandbox in $VENV; install the sandbox extra"

# --- system packages -----------------------------------------------------------------------------
pg_bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
if [ -z "$(pg_bindir)" ] || ! command -v redis-server >/dev/null || ! command -v ip >/dev/null; then
  log "installing postgresql, redis-server and iproute2 (apt)"
  # Keep the packages' own services (default cluster on 5432, redis on 6379) from starting: this
  # script runs its own instances and must leave nothing running behind it.
  policy=/usr/sbin/policy-rc.d created_policy=0
  [ -e "$policy" ] || { printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"; created_policy=1; }
  trap '[ $created_policy = 0 ] || rm -f "$policy"' EXIT
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql redis-server iproute2 >/dev/null
  [ $created_policy = 0 ] || rm -f "$policy"
  trap - EXIT
fi
PG_BIN=$(pg_bindir)

# --- workspace, ports, secrets -------------------------------------------------------------------
WORK=$(mktemp -d -t bakeoff-distributed.XXXXXX)
chmod 755 "$WORK"
# One data folder per process: each worker's, the sandbox's, and one for the other Airflow services.
DATA_DIRS=(control sandbox "${WORKERS[@]}" "${CLIENT_WORKERS[@]}")
mkdir -p "$WORK/logs" "$WORK/sandbox" "$WORK/local-cloud"
for d in "${DATA_DIRS[@]}"; do mkdir -p "$WORK/data/$d"; done
PIDS=()
NETNS=()
FORWARD_RULE=
NET_ID=$(printf '%04x' $(( $$ % 65536 )))
BRIDGE=bkd$NET_ID

free_port() { "$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
token() { "$VENV/bin/python" -c 'import secrets; print(secrets.token_hex(32))'; }
PG_PORT=$(free_port); REDIS_PORT=$(free_port); API_PORT=$(free_port)
PG_PASSWORD=$(token); REDIS_PASSWORD=$(token)
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
  local rc=$? d
  set +e
  log "stopping everything started here"
  stop_all
  # Anything the run started (emulators, node agents) carries its process's BAKEOFF_DATA in its
  # environment; the sandbox stops its nodes when it stops, so finding one is a failure as well as
  # something to stop.
  for d in "${DATA_DIRS[@]}"; do
    if "$VENV/bin/python" "$ROOT/scripts/stray_processes.py" --kill "BAKEOFF_DATA=$WORK/data/$d"; then :; else
      [ $rc -ne 0 ] || rc=1
    fi
  done
  for d in "${NETNS[@]}"; do ip netns del "$d"; done  # their veth pairs go with them
  [ -z "$FORWARD_RULE" ] || iptables -D FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
  ip link del "$BRIDGE" 2>/dev/null
  [ -f "$WORK/pg/data/postmaster.pid" ] && runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$WORK/pg/data" -m fast -w stop >/dev/null
  rm -f "$WORK/sandbox.env"  # the sandbox's throwaway credentials
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

# --- Network: a bridge, and one namespace per worker ----------------------------------------------
in_use() { ip -4 addr show | grep -qF " $1." || ip -4 route show | grep -qE "^$1\.|^10\.0\.0\.0/8|^default via $1\."; }
SUBNET=
for i in $(seq 40); do
  s="10.$(( 200 + RANDOM % 50 )).$(( RANDOM % 250 ))"
  in_use "$s" || { SUBNET=$s; break; }
done
[ -n "$SUBNET" ] || die "no free private /24 in 10.200-249.x.0 for the namespaces"
HOST_IP=$SUBNET.1
ip link add "$BRIDGE" type bridge
ip addr add "$HOST_IP/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
declare -A NS_OF ADDR_OF
n=0
for w in "${WORKERS[@]}" "${CLIENT_WORKERS[@]}"; do
  n=$((n + 1)); ns="$BRIDGE-$w"
  ip netns add "$ns"; NETNS+=("$ns")
  ip link add "${BRIDGE}h$n" type veth peer name "${BRIDGE}n$n"
  ip link set "${BRIDGE}n$n" netns "$ns"
  ip link set "${BRIDGE}h$n" master "$BRIDGE" up
  ip -n "$ns" addr add "$SUBNET.$((10 + n))/24" dev "${BRIDGE}n$n"
  ip -n "$ns" link set "${BRIDGE}n$n" up
  ip -n "$ns" link set lo up
  NS_OF[$w]=$ns; ADDR_OF[$w]=$SUBNET.$((10 + n))
done
log "network: bridge $BRIDGE at $HOST_IP/24; $(for w in "${!ADDR_OF[@]}"; do printf '%s %s  ' "$w" "${ADDR_OF[$w]}"; done)"
# Bridged frames go through iptables' FORWARD chain when br_netfilter says so; Docker's DROP policy
# there would swallow every SYN from one namespace to another (the host's own address still answers).
if [ "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null || echo 0)" = 1 ]; then
  command -v iptables >/dev/null || die "bridged traffic passes through iptables here (net.bridge.bridge-nf-call-iptables=1) and there is no iptables to accept the namespaces' traffic on $BRIDGE"
  iptables -I FORWARD 1 -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
  FORWARD_RULE=1
  log "network: bridged traffic passes through iptables here; FORWARD accepts $BRIDGE to $BRIDGE for this run"
fi
# One namespace connects to another before anything starts: a node, router or fleet coordinator on
# one worker's address must answer the others, or the run would wait on connections that vanish.
first=${WORKERS[0]}; last=${CLIENT_WORKERS[-1]}
ip netns exec "${NS_OF[$last]}" "$VENV/bin/python" -c '
import socket, sys
s = socket.create_server((sys.argv[1], 0)); print(s.getsockname()[1], flush=True); s.settimeout(10); s.accept()
' "${ADDR_OF[$last]}" >"$WORK/netcheck.port" 2>&1 &
probe=$!
for _ in $(seq 100); do [ -s "$WORK/netcheck.port" ] && break; sleep 0.05; done
ip netns exec "${NS_OF[$first]}" "$VENV/bin/python" -c '
import socket, sys
socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
' "${ADDR_OF[$last]}" "$(head -n 1 "$WORK/netcheck.port")" 2>/dev/null \
  || { kill "$probe" 2>/dev/null; die "network: $first (${ADDR_OF[$first]}) cannot connect to $last (${ADDR_OF[$last]}) over $BRIDGE: something on this host filters bridged traffic (iptables -S FORWARD; sysctl net.bridge)"; }
wait "$probe" || die "network: the probe listener in $last's namespace failed: $(cat "$WORK/netcheck.port")"
rm -f "$WORK/netcheck.port"
# in_ns WORKER: IN_NS becomes the prefix that runs a command in the worker's namespace, under its
# own hostname (an array, not a function, so that `env` can run it)
in_ns() { IN_NS=(ip netns exec "${NS_OF[$1]}" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$1"); }

# --- PostgreSQL on loopback, Redis on loopback and the bridge --------------------------------------
log "PostgreSQL on 127.0.0.1:$PG_PORT, Redis on $HOST_IP:$REDIS_PORT"
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
start redis redis-server --bind 127.0.0.1 "$HOST_IP" --port "$REDIS_PORT" --dir "$WORK/redis" --save '' \
  --appendonly no --requirepass "$REDIS_PASSWORD"

# --- Airflow configuration: the same settings as docker-compose.yml, by environment --------------
# Start from a clean slate: settings inherited from the caller (e.g. the Makefile's SQLite and
# LocalExecutor, or another BAKEOFF_REPORTS) must not leak into this deployment.
while read -r var; do unset "$var"; done < <(compgen -e | grep -E '^(AIRFLOW_|AIRFLOW__|BAKEOFF_)' || true)
export AIRFLOW_HOME="$WORK/airflow"
export AIRFLOW__CORE__EXECUTOR=CeleryExecutor
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="postgresql+psycopg2://airflow:$PG_PASSWORD@127.0.0.1:$PG_PORT/airflow"
export AIRFLOW__CELERY__BROKER_URL="redis://:$REDIS_PASSWORD@$HOST_IP:$REDIS_PORT/0"
# Celery's task results in Redis, not the database: the workers get no database connection string.
export AIRFLOW__CELERY__RESULT_BACKEND="redis://:$REDIS_PASSWORD@$HOST_IP:$REDIS_PORT/1"
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
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://$HOST_IP:$API_PORT/execution/"
export AIRFLOW__CORE__HOSTNAME_CALLABLE=socket.gethostname
export AIRFLOW__API__WORKERS=1
export AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK=False
# Only the run triggered below: unpausing must not also start the @monthly schedule's latest run.
export AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE=False
export BAKEOFF_DATA="$WORK/data/control"  # each worker and the sandbox get their own below
export BAKEOFF_SECRET_KEY
BAKEOFF_SECRET_KEY=$(token)
export BAKEOFF_LOCAL_STATE="$WORK/local-cloud"
export PATH="$VENV/bin:$PATH"
export PYTHONUNBUFFERED=1

# --- the sandbox clouds, and the results bucket in its moto S3 ----------------------------------
log "starting the sandbox clouds"
umask 077  # the sandbox's environment file holds its throwaway credentials
# Its APIs and nodes listen on the bridge's address, which every namespace reaches.
setsid env BAKEOFF_DATA="$WORK/data/sandbox" BAKEOFF_NODE_ADDRESS="$HOST_IP" TMPDIR="$WORK/sandbox" python -m bakeoff_sandbox \
  >"$WORK/sandbox.env" 2>"$WORK/logs/sandbox.log" < /dev/null &
PIDS+=($!)
umask 022
for i in $(seq 120); do
  grep -q '^export AIRFLOW_CONN_AWS_DEFAULT=' "$WORK/sandbox.env" && break
  kill -0 "${PIDS[-1]}" 2>/dev/null || die "the sandbox exited early (see $WORK/logs/sandbox.log)"
  sleep 0.5
done
grep -q '^export AIRFLOW_CONN_AWS_DEFAULT=' "$WORK/sandbox.env" || die "the sandbox did not start in 60 s"
# AIRFLOW_CONN_* for every cloud (pointing at the fakes), the credentials the node agents use,
# and the client bundle's bucket.
# shellcheck disable=SC1091
. "$WORK/sandbox.env"
# Results and reports: the bucket in moto's S3, reached through the aws connection bakeoff_s3.
export AIRFLOW_CONN_BAKEOFF_S3
AIRFLOW_CONN_BAKEOFF_S3=$(python - "$BUCKET" <<'PY'
import json, os, sys

import boto3

aws = json.loads(os.environ["AIRFLOW_CONN_AWS_DEFAULT"])
extra = {"endpoint_url": aws["extra"]["endpoint_url"], "region_name": aws["extra"]["region_name"]}
boto3.client("s3", aws_access_key_id=aws["login"], aws_secret_access_key=aws["password"], **extra).create_bucket(
    Bucket=sys.argv[1]
)
print(json.dumps({"conn_type": "aws", "login": aws["login"], "password": aws["password"], "extra": extra}))
PY
)
export BAKEOFF_RESULTS="s3://bakeoff_s3@$BUCKET/results"
export BAKEOFF_REPORTS="s3://bakeoff_s3@$BUCKET/reports"
log "results in $BAKEOFF_RESULTS, reports in $BAKEOFF_REPORTS"

log "airflow db migrate"
airflow db migrate >"$WORK/logs/db-migrate.log" 2>&1 || die "db migrate failed (see $WORK/logs/db-migrate.log)"
# Variables and placeholder connections, exactly as a deployment loads them.
"$ROOT/scripts/load_settings.sh" >"$WORK/logs/load-settings.log" 2>&1 || die "load_settings failed"
# The sandbox account has no GPU quota: a run may hold three EC2 nodes at once.
airflow variables set bakeoff_provider_node_limits '{"aws": 3}' >>"$WORK/logs/load-settings.log" 2>&1

# A client fleet's members: Celery tasks on the client workers, through Redis database 2; the
# coordinator (the benchmark step on an Airflow worker) listens on that worker's namespace address.
FLEET_BROKER="redis://:$REDIS_PASSWORD@$HOST_IP:$REDIS_PORT/2"
log "starting scheduler, dag-processor, api-server (:$API_PORT), triggerer, ${#WORKERS[@]} Celery workers and ${#CLIENT_WORKERS[@]} client workers"
start scheduler airflow scheduler
start dag-processor airflow dag-processor
start api-server airflow api-server --host "$HOST_IP" --port "$API_PORT"
start triggerer airflow triggerer --skip-serve-logs
for w in "${WORKERS[@]}"; do
  in_ns "$w"
  # Each worker gets its own UTS namespace, i.e. its own hostname: the name recorded on the task
  # instances it runs, as on separate machines, and its own data folder. One task at a time each,
  # so parallel targets land on different workers, and a third target only progresses while the
  # others wait in sensors that gave their slot back.
  # celery_warm loads the library in the worker before tasks fork from it, so a poke holds its slot
  # for its check rather than for imports. No database connection string (env -u): the run proves
  # that workers need none.
  start "$w" env -u AIRFLOW__DATABASE__SQL_ALCHEMY_CONN BAKEOFF_DATA="$WORK/data/$w" PYTHONPATH="$ROOT/scripts" \
    AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS=celery_warm.CELERY_CONFIG BAKEOFF_FLEET_BROKER="$FLEET_BROKER" \
    BAKEOFF_NODE_ADDRESS="${ADDR_OF[$w]}" BAKEOFF_FLEET_BIND="${ADDR_OF[$w]}" \
    "${IN_NS[@]}" airflow celery worker --concurrency 1 --without-mingle --without-gossip --skip-serve-logs
done
for w in "${CLIENT_WORKERS[@]}"; do
  in_ns "$w"
  # bakeoff's own client workers: no Airflow setting at all, only the broker and the installation
  # secret (exported above), from which each member derives its channel and serving keys.
  start "$w" env -u AIRFLOW__DATABASE__SQL_ALCHEMY_CONN -u AIRFLOW__CELERY__BROKER_URL -u AIRFLOW__CELERY__RESULT_BACKEND \
    BAKEOFF_DATA="$WORK/data/$w" BAKEOFF_FLEET_BROKER="$FLEET_BROKER" \
    "${IN_NS[@]}" celery -A bakeoff.bench.fleet.fleet_celery worker -Q bakeoff-clients -n "$w@%h" --concurrency 1 \
    --without-mingle --without-gossip
done

for i in $(seq 120); do
  curl -fsS "http://$HOST_IP:$API_PORT/api/v2/monitor/health" >/dev/null 2>&1 && break
  for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || die "a process exited early (see logs)"; done
  sleep 1
done
log "api-server is up; triggering $(basename "$AIRFLOW__CORE__DAGS_FOLDER")/bakeoff with plan $PLAN"

if [ "${PLANT_SURVIVOR:-0}" = 1 ]; then
  log "PLANT_SURVIVOR=1: starting a local node from ${WORKERS[0]}'s namespace that no teardown stops; the run must fail"
  in_ns "${WORKERS[0]}"
  env BAKEOFF_DATA="$WORK/data/${WORKERS[0]}" BAKEOFF_NODE_ADDRESS="${ADDR_OF[${WORKERS[0]}]}" "${IN_NS[@]}" \
    python -c 'import secrets, time
from bakeoff.plan import load_plan
from bakeoff.providers.local import LocalProvider
p = LocalProvider()
spec = {"expires_at": time.time() + 900, "api_key": secrets.token_hex(20)}  # off loopback a node needs a key
p.wait_ready(p.create(load_plan("local-demo").targets[0], "planted-survivor", tags={}, spec=spec), 60)' \
    >"$WORK/logs/planted.log" 2>&1 || die "could not plant the surviving node (see $WORK/logs/planted.log)"
fi

python "$ROOT/scripts/trigger_and_verify.py" --base-url "http://$HOST_IP:$API_PORT" --user admin \
  --password-file "$SECRETS/passwords.json" --dag bakeoff --conf "{\"plan\": \"$PLAN\"}" \
  --workers "$(IFS=,; echo "${WORKERS[*]}")" --client-workers "$(IFS=,; echo "${CLIENT_WORKERS[*]}")" \
  --results "$BAKEOFF_RESULTS" --reports "$BAKEOFF_REPORTS" --timeout "$TIMEOUT" \
  --worker-data "$(IFS=,; for w in "${WORKERS[@]}" "${CLIENT_WORKERS[@]}"; do printf '%s,' "$WORK/data/$w"; done)"

log "checking that no node outlived its teardown"
# shellcheck disable=SC2046
python "$ROOT/scripts/surviving_nodes.py" --local-state "$BAKEOFF_LOCAL_STATE" \
  $(for d in sandbox "${WORKERS[@]}" "${CLIENT_WORKERS[@]}"; do printf -- '--data %s ' "$WORK/data/$d"; done) ||
  die "a node outlived its teardown (named above)"
