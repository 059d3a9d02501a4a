#!/usr/bin/env bash
# Run the conformance suite (tests/conformance) through the sidecar in front of a real
# MLServer (Seldon's V2 inference server, CPU only) serving this project's model repository
# (tests/upstream/mlserver/make_repo.py: the built-in catalog's 23 contracts as custom runtimes).
#
#   client (tritonclient, perf_analyzer) -> infergate-sidecar -> V2 gRPC -> mlserver
#
# Idempotent: installs what is missing, then starts both servers on free loopback ports in a
# fresh temporary directory, runs pytest in mode B against the sidecar with
# INFERGATE_BACKEND=upstream-mlserver (skips in tests/upstream/mlserver/skips.py), then the
# sidecar's admin status test and an upstream restart check, stops both servers and exits with
# the first failing status. Extra arguments go to pytest (e.g. -k sequence, -x); they also
# skip the admin test and the restart check.
#
# Usage (from anywhere):  tests/upstream/run-mlserver.sh [pytest args...]
#
# Environment (all optional):
#   INFERGATE_MLSERVER_VENV    venv with mlserver (default: <repo>/.venv-mlserver)
#   INFERGATE_MLSERVER_PYTHON  interpreter for that venv (default: python3.11, else python3)
#   INFERGATE_VENV             the conformance venv (default: <repo>/.venv, made by
#                              tests/tools/setup-python.sh when missing)
#   INFERGATE_SIDECAR_BIN      sidecar binary (default: target/debug/infergate-sidecar,
#                              built with cargo when missing)
#   INFERGATE_UPSTREAM_KEEP=1  keep the temporary directory (repository, configs, logs);
#                              it is always kept when something fails
#   INFERGATE_READY_TIMEOUT    seconds to wait for each server to be ready (180)
#   PIP_FLAGS                  extra flags for pip install
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO_ROOT"

SIDECAR_BIN="${INFERGATE_SIDECAR_BIN:-$PWD/target/debug/infergate-sidecar}"
READY_TIMEOUT="${INFERGATE_READY_TIMEOUT:-180}"

log() { printf '[run-mlserver] %s\n' "$*" >&2; }
# shellcheck source=lib.sh
source "$REPO_ROOT/tests/upstream/lib.sh"

# ------------------------------------------------------------------ install

# shellcheck source=mlserver-env.sh
source "$REPO_ROOT/tests/upstream/mlserver-env.sh"

ensure_sidecar

# ------------------------------------------------------------------ run
WORK="$(mktemp -d "${TMPDIR:-/tmp}/infergate-mlserver.XXXXXX")"
MLSERVER_PID=""
SIDECAR_PID=""
RC=1

LIB_PY="$MPY"

cleanup() {
  trap - EXIT INT TERM
  stop_pid "$SIDECAR_PID" 15
  stop_pid "$MLSERVER_PID" 30
  if [ "$RC" -eq 0 ] && [ "${INFERGATE_UPSTREAM_KEEP:-0}" != "1" ]; then
    rm -rf "$WORK"
  else
    log "kept $WORK (repository, sidecar.yaml, mlserver.log, sidecar.log)"
  fi
  exit "$RC"
}
trap cleanup EXIT
trap 'RC=130; exit' INT
trap 'RC=143; exit' TERM

# Free loopback ports, chosen by the kernel (bound together so they differ).
read -r MLSERVER_HTTP_PORT MLSERVER_GRPC_PORT OTLP_GRPC_PORT < <(free_ports 3)

# The repository (its settings.json holds the ports; MLServer's metrics server is off) and the
# sidecar's configuration (every model with its built-in configuration, the classifier's labels,
# sequences run by the sidecar, no staging pool).
REPO="$WORK/models"
"$MPY" tests/upstream/mlserver/make_repo.py "$REPO" \
  --http-port "$MLSERVER_HTTP_PORT" --grpc-port "$MLSERVER_GRPC_PORT" \
  --sidecar-config "$WORK/sidecar.yaml"

# MLServer runs from $WORK so that its working files (.metrics, .envs) stay there. It traces with
# OpenTelemetry to 127.0.0.1:$OTLP_GRPC_PORT, where tests/upstream/mlserver/test_trace.py listens
# (nothing does before: MLServer's exporter gives up on those spans, as it would on a collector
# that is down).
start_mlserver() {
  log "starting mlserver $MLSERVER_VERSION (http 127.0.0.1:$MLSERVER_HTTP_PORT, grpc 127.0.0.1:$MLSERVER_GRPC_PORT)"
  (cd "$WORK" && MLSERVER_TRACING_SERVER="127.0.0.1:$OTLP_GRPC_PORT" exec "$MLSERVER_BIN" start "$REPO") \
    >>"$WORK/mlserver.log" 2>&1 </dev/null &
  MLSERVER_PID=$!
}
start_mlserver

started=$SECONDS
wait_ready "http://127.0.0.1:$MLSERVER_HTTP_PORT/v2/health/ready" "$MLSERVER_PID" "$READY_TIMEOUT" ||
  fail "mlserver did not become ready" "$WORK/mlserver.log"
log "mlserver ready after $((SECONDS - started)) s"

"$SIDECAR_BIN" --config "$WORK/sidecar.yaml" >"$WORK/sidecar.log" 2>&1 </dev/null &
SIDECAR_PID=$!

# The sidecar logs the addresses it bound (http_addr, grpc_addr, metrics_addr, admin_addr) as JSON.
ADDRS="$(sidecar_addrs "$WORK/sidecar.log" "$SIDECAR_PID" 30)" || fail "the sidecar did not log its addresses" "$WORK/sidecar.log"
read -r SIDECAR_HTTP SIDECAR_GRPC SIDECAR_METRICS SIDECAR_ADMIN <<<"$ADDRS"

# Ready once it has discovered the upstream's models.
wait_ready "http://$SIDECAR_HTTP/v2/health/ready" "$SIDECAR_PID" "$READY_TIMEOUT" ||
  fail "the sidecar did not become ready" "$WORK/sidecar.log"
log "sidecar ready: http $SIDECAR_HTTP, grpc $SIDECAR_GRPC, metrics $SIDECAR_METRICS, admin $SIDECAR_ADMIN -> mlserver grpc 127.0.0.1:$MLSERVER_GRPC_PORT"

export INFERGATE_HTTP_URL="$SIDECAR_HTTP" INFERGATE_GRPC_URL="$SIDECAR_GRPC" \
  INFERGATE_METRICS_URL="$SIDECAR_METRICS" INFERGATE_ADMIN_URL="$SIDECAR_ADMIN" \
  INFERGATE_BACKEND=upstream-mlserver INFERGATE_MLSERVER_HTTP_URL="127.0.0.1:$MLSERVER_HTTP_PORT" \
  INFERGATE_SIDECAR_CONFIG="$WORK/sidecar.yaml" INFERGATE_OTLP_GRPC_PORT="$OTLP_GRPC_PORT" \
  INFERGATE_SIDECAR_BIN="$SIDECAR_BIN"
# restart_check.py's staging step applies to Triton only (MLServer has no shared memory).
unset INFERGATE_TRITON_HTTP_URL

set +e
"$TEST_VENV/bin/python" -m pytest tests/conformance -q -p no:cacheprovider "$@"
RC=$?
set -e
log "pytest exited with $RC"
[ "$RC" -eq 0 ] || exit "$RC"

# What the sidecar says it implements in front of MLServer (admin status).
if [ "$#" -eq 0 ]; then
  log "admin status and tracing checks (tests/upstream/mlserver/test_admin.py, test_trace.py)"
  set +e
  "$TEST_VENV/bin/python" -m pytest tests/upstream/mlserver/test_admin.py \
    tests/upstream/mlserver/test_trace.py -q -p no:cacheprovider
  RC=$?
  set -e
  [ "$RC" -eq 0 ] || exit "$RC"
fi

# MLServer dies and comes back while the sidecar keeps running: clients get clear UNAVAILABLE
# errors and readiness turns false, then service resumes without a sidecar restart.
if [ "$#" -eq 0 ]; then
  check() { "$TEST_VENV/bin/python" tests/upstream/restart_check.py "$1" "$SIDECAR_HTTP" "$SIDECAR_GRPC"; }
  set +e
  check serving && {
    log "stopping mlserver"
    stop_pid "$MLSERVER_PID" 30
    check outage
  } && {
    start_mlserver
    wait_ready "http://127.0.0.1:$MLSERVER_HTTP_PORT/v2/health/ready" "$MLSERVER_PID" "$READY_TIMEOUT" &&
      check resumed
  }
  RC=$?
  set -e
  log "upstream restart check exited with $RC"
fi

# Nothing of the sidecar's may stay in /dev/shm once it has stopped (it makes no staging pool
# here, and clients' regions are theirs to remove).
if [ "$RC" -eq 0 ]; then
  sidecar_pid="$SIDECAR_PID"
  stop_pid "$SIDECAR_PID" 15
  SIDECAR_PID=""
  left="$(find /dev/shm -maxdepth 1 -name "infergate_staging_${sidecar_pid}_*" -print -quit)"
  if [ -n "$left" ]; then
    log "the sidecar left $left behind"
    RC=5
  fi
fi
exit "$RC"
