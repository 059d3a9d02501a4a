#!/usr/bin/env bash
# Run the conformance suite (tests/conformance) through the sidecar in front of KServe's Python
# ModelServer (kserve 0.21.0, tests/upstream/kserve/server.py) serving the same 23 model
# contracts as the sidecar's built-in catalog.
#
#   client (tritonclient, perf_analyzer) -> infergate-sidecar -> V2 gRPC -> kserve.ModelServer
#
# Idempotent: installs what is missing, then starts both servers on free loopback ports in a
# fresh temporary directory, runs pytest in mode B against the sidecar with
# INFERGATE_BACKEND=upstream-kserve, then the admin status test and the upstream restart check,
# stops both servers and exits with the first failing status. Extra arguments go to pytest
# (e.g. -k sequence, -x, -m "not perf_analyzer"); they skip the admin test and the restart check.
#
# Usage (from anywhere):  tests/upstream/run-kserve.sh [pytest args...]
#
# Environment (all optional):
#   INFERGATE_KSERVE_VENV    venv with kserve (default: <repo>/.venv-kserve)
#   INFERGATE_KSERVE_PYTHON  interpreter for that venv (default: python3.11, else python3)
#   INFERGATE_VENV           the conformance venv (default: <repo>/.venv, made by
#                            tests/tools/setup-python.sh when missing)
#   INFERGATE_SIDECAR_BIN    sidecar binary (default: target/debug/infergate-sidecar,
#                            built with cargo when missing)
#   INFERGATE_UPSTREAM_KEEP=1  keep the temporary directory (sidecar.yaml, labels, logs);
#                            it is always kept when something fails
#   INFERGATE_READY_TIMEOUT  seconds to wait for each server to be ready (180)
#   PIP_FLAGS                extra flags for pip install
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO_ROOT"

SIDECAR_BIN="${INFERGATE_SIDECAR_BIN:-$PWD/target/debug/infergate-sidecar}"
READY_TIMEOUT="${INFERGATE_READY_TIMEOUT:-180}"

log() { printf '[run-kserve] %s\n' "$*" >&2; }
# shellcheck source=lib.sh
source "$REPO_ROOT/tests/upstream/lib.sh"

# ------------------------------------------------------------------ install

# shellcheck source=kserve-env.sh
source "$REPO_ROOT/tests/upstream/kserve-env.sh"

ensure_sidecar

# ------------------------------------------------------------------ run
WORK="$(mktemp -d "${TMPDIR:-/tmp}/infergate-kserve.XXXXXX")"
KSERVE_PID=""
SIDECAR_PID=""
RC=1

LIB_PY="$KPY"

cleanup() {
  trap - EXIT INT TERM
  stop_pid "$SIDECAR_PID" 15
  stop_pid "$KSERVE_PID" 15
  if [ "$RC" -eq 0 ] && [ "${INFERGATE_UPSTREAM_KEEP:-0}" != "1" ]; then
    rm -rf "$WORK"
  else
    log "kept $WORK (sidecar.yaml, labels.txt, kserve.log, sidecar.log)"
  fi
  exit "$RC"
}
trap cleanup EXIT
trap 'RC=130; exit' INT
trap 'RC=143; exit' TERM

# Free loopback ports, chosen by the kernel (bound together so they differ).
read -r KSERVE_HTTP_PORT KSERVE_GRPC_PORT < <(free_ports 2)

start_kserve() {
  log "starting the KServe ModelServer (http $KSERVE_HTTP_PORT, grpc 127.0.0.1:$KSERVE_GRPC_PORT)"
  (
    cd "$WORK"
    exec "$KPY" "$REPO_ROOT/tests/upstream/kserve/server.py" \
      --http-port "$KSERVE_HTTP_PORT" --grpc-port "$KSERVE_GRPC_PORT"
  ) >>"$WORK/kserve.log" 2>&1 </dev/null &
  KSERVE_PID=$!
}
start_kserve

started=$SECONDS
wait_ready "http://127.0.0.1:$KSERVE_HTTP_PORT/v2/health/ready" "$KSERVE_PID" "$READY_TIMEOUT" ||
  fail "the ModelServer did not become ready" "$WORK/kserve.log"
log "ModelServer ready after $((SECONDS - started)) s"

# Sidecar configuration: every model listed, with its catalog configuration, the sequence
# models scheduled by the sidecar, the classifier's labels (see kserve/make_config.py).
"$KPY" tests/upstream/kserve/make_config.py --grpc-port "$KSERVE_GRPC_PORT" --workdir "$WORK" \
  >"$WORK/sidecar.yaml"

"$SIDECAR_BIN" --config "$WORK/sidecar.yaml" >"$WORK/sidecar.log" 2>&1 </dev/null &
SIDECAR_PID=$!

# The sidecar logs the addresses it bound (http_addr, grpc_addr, metrics_addr, admin_addr) as JSON.
ADDRS="$(sidecar_addrs "$WORK/sidecar.log" "$SIDECAR_PID" 30)" || fail "the sidecar did not log its addresses" "$WORK/sidecar.log"
read -r SIDECAR_HTTP SIDECAR_GRPC SIDECAR_METRICS SIDECAR_ADMIN <<<"$ADDRS"

# Ready once it has discovered the upstream's models.
wait_ready "http://$SIDECAR_HTTP/v2/health/ready" "$SIDECAR_PID" "$READY_TIMEOUT" ||
  fail "the sidecar did not become ready" "$WORK/sidecar.log"
log "sidecar ready: http $SIDECAR_HTTP, grpc $SIDECAR_GRPC, metrics $SIDECAR_METRICS, admin $SIDECAR_ADMIN -> kserve grpc 127.0.0.1:$KSERVE_GRPC_PORT"

set +e
INFERGATE_HTTP_URL="$SIDECAR_HTTP" \
INFERGATE_GRPC_URL="$SIDECAR_GRPC" \
INFERGATE_METRICS_URL="$SIDECAR_METRICS" \
INFERGATE_BACKEND=upstream-kserve \
  "$TEST_VENV/bin/python" -m pytest tests/conformance -q -p no:cacheprovider "$@"
RC=$?
set -e
log "pytest exited with $RC"
[ "$RC" -eq 0 ] || exit "$RC"

export INFERGATE_HTTP_URL="$SIDECAR_HTTP" INFERGATE_GRPC_URL="$SIDECAR_GRPC" \
  INFERGATE_METRICS_URL="$SIDECAR_METRICS" INFERGATE_ADMIN_URL="$SIDECAR_ADMIN" \
  INFERGATE_KSERVE_GRPC_URL="127.0.0.1:$KSERVE_GRPC_PORT" \
  INFERGATE_KSERVE_VERSION="$(dist_version "$KSERVE_VENV" kserve)"
# restart_check.py checks the staging pool's re-registration only when given a Triton to ask;
# the ModelServer has no shared memory, so there is no pool.
unset INFERGATE_TRITON_HTTP_URL

# What the sidecar reports about this upstream (skipped when pytest arguments narrowed the run).
if [ "$#" -eq 0 ]; then
  log "admin status checks (tests/upstream/kserve/test_admin.py)"
  set +e
  "$TEST_VENV/bin/python" -m pytest tests/upstream/kserve/test_admin.py -q -p no:cacheprovider
  RC=$?
  set -e
  [ "$RC" -eq 0 ] || exit "$RC"
fi

# KServe's own Python client, unmodified, against the sidecar (run with the ModelServer's venv,
# where the kserve package is).
if [ "$#" -eq 0 ]; then
  log "KServe's client (tests/upstream/kserve/client_check.py)"
  "$KPY" tests/upstream/kserve/client_check.py "$SIDECAR_HTTP" "$SIDECAR_GRPC" || { RC=$?; exit "$RC"; }
fi

# The upstream dies and comes back while the sidecar keeps running: clients get clear
# UNAVAILABLE errors and readiness turns false, then service resumes without a sidecar restart.
if [ "$#" -eq 0 ]; then
  check() { "$TEST_VENV/bin/python" tests/upstream/restart_check.py "$1" "$SIDECAR_HTTP" "$SIDECAR_GRPC"; }
  set +e
  check serving && {
    log "stopping the ModelServer"
    stop_pid "$KSERVE_PID" 15
    check outage
  } && {
    start_kserve
    wait_ready "http://127.0.0.1:$KSERVE_HTTP_PORT/v2/health/ready" "$KSERVE_PID" "$READY_TIMEOUT" &&
      check resumed
  }
  RC=$?
  set -e
  log "upstream restart check exited with $RC"
fi
exit "$RC"
