#!/usr/bin/env bash
# Run the conformance suite (tests/conformance) through the sidecar in front of a
# real NVIDIA Triton Inference Server (2.51, from the nvidia-pytriton wheel, CPU only)
# serving this project's model repository (tests/upstream/make_triton_repo.py).
#
#   client (tritonclient, perf_analyzer) -> infergate-sidecar -> V2 gRPC -> tritonserver
#
# Idempotent: installs what is missing, then starts both servers on free loopback
# ports in a fresh temporary directory, runs pytest in mode B against the sidecar
# with INFERGATE_BACKEND=upstream-triton, stops both servers and exits with pytest's
# exit status. Extra arguments go to pytest (e.g. -k sequence, -x, -m "not perf_analyzer").
#
# Usage (from anywhere):  tests/upstream/run-triton.sh [pytest args...]
#
# Environment (all optional):
#   INFERGATE_TRITON_VENV    venv with nvidia-pytriton==0.7.0 (default: <repo>/.venv-triton)
#   INFERGATE_TRITON_PYTHON  interpreter for that venv (default: python3.11, else python3;
#                            3.8..3.13, the versions the wheel has python backend stubs for)
#   INFERGATE_VENV           the conformance venv (default: <repo>/.venv, made by
#                            tests/tools/setup-python.sh when missing)
#   INFERGATE_SIDECAR_BIN    sidecar binary (default: target/debug/infergate-sidecar,
#                            built with cargo when missing)
#   INFERGATE_UPSTREAM_KEEP=1  keep the temporary directory (repository, configs, logs);
#                            it is always kept when pytest fails
#   INFERGATE_READY_TIMEOUT  seconds to wait for each server to be ready (180)
#   INFERGATE_UPSTREAM_PROTOCOL  how the sidecar talks to Triton: grpc (default), http, or
#                            grpc+rest (gRPC, with calls of little tensor data over REST)
#   PIP_FLAGS                extra flags for pip install
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO_ROOT"

SIDECAR_BIN="${INFERGATE_SIDECAR_BIN:-$PWD/target/debug/infergate-sidecar}"
READY_TIMEOUT="${INFERGATE_READY_TIMEOUT:-180}"

log() { printf '[run-triton] %s\n' "$*" >&2; }
# shellcheck source=lib.sh
source "$REPO_ROOT/tests/upstream/lib.sh"

# ------------------------------------------------------------------ install

# shellcheck source=triton-env.sh
source "$REPO_ROOT/tests/upstream/triton-env.sh"

ensure_sidecar

# ------------------------------------------------------------------ run
WORK="$(mktemp -d "${TMPDIR:-/tmp}/infergate-upstream.XXXXXX")"
TRITON_PID=""
SIDECAR_PID=""
RC=1

LIB_PY="$TPY"

cleanup() {
  trap - EXIT INT TERM
  stop_pid "$SIDECAR_PID" 15
  stop_pid "$TRITON_PID" 30
  if [ "$RC" -eq 0 ] && [ "${INFERGATE_UPSTREAM_KEEP:-0}" != "1" ]; then
    rm -rf "$WORK"
  else
    log "kept $WORK (repository, sidecar.yaml, triton.log, sidecar.log)"
  fi
  exit "$RC"
}
trap cleanup EXIT
trap 'RC=130; exit' INT
trap 'RC=143; exit' TERM

# Free loopback ports, chosen by the kernel (bound together so they differ).
read -r TRITON_HTTP_PORT TRITON_GRPC_PORT OTLP_PORT < <(free_ports 3)

REPO="$WORK/models"
"$TPY" tests/upstream/make_triton_repo.py "$REPO"

# Triton: PATH must start with the venv's bin (the stub's embedded interpreter finds its
# prefix, and numpy, through the first python3 on PATH).
start_triton() {
  log "starting tritonserver (http 127.0.0.1:$TRITON_HTTP_PORT, grpc 127.0.0.1:$TRITON_GRPC_PORT)"
  (
    cd "$WORK"
    exec env PATH="$TRITON_VENV/bin:$PATH" LD_LIBRARY_PATH="$LD_PATH" \
      "$TRITON_BIN" \
      --model-repository="$REPO" \
      --backend-directory="$TRITON_HOME/backends" \
      --cache-directory="$TRITON_HOME/caches" \
      --http-address=127.0.0.1 --http-port="$TRITON_HTTP_PORT" \
      --grpc-address=127.0.0.1 --grpc-port="$TRITON_GRPC_PORT" \
      --allow-metrics=false --allow-gpu-metrics=false \
      --pinned-memory-pool-byte-size=0 \
      --trace-config mode=opentelemetry \
      --trace-config "opentelemetry,url=127.0.0.1:$OTLP_PORT/v1/traces" \
      --trace-config opentelemetry,bsp_schedule_delay=200 \
      --exit-timeout-secs=5
  ) >>"$WORK/triton.log" 2>&1 </dev/null &
  TRITON_PID=$!
}
start_triton

started=$SECONDS
wait_ready "http://127.0.0.1:$TRITON_HTTP_PORT/v2/health/ready" "$TRITON_PID" "$READY_TIMEOUT" ||
  fail "tritonserver did not become ready" "$WORK/triton.log"
log "tritonserver ready after $((SECONDS - started)) s"

# Sidecar configuration: every model of the repository, with no labels: Triton lists the
# classification extension, so it classifies with its own label files
# (test_classification_upstream.py compares every answer with Triton's).
REST_URL=""
case "${INFERGATE_UPSTREAM_PROTOCOL:-grpc}" in
  http) UPSTREAM_URL="http://127.0.0.1:$TRITON_HTTP_PORT" ;;
  grpc) UPSTREAM_URL="grpc://127.0.0.1:$TRITON_GRPC_PORT" ;;
  grpc+rest)
    UPSTREAM_URL="grpc://127.0.0.1:$TRITON_GRPC_PORT"
    REST_URL="http://127.0.0.1:$TRITON_HTTP_PORT" ;;
  *) fail "INFERGATE_UPSTREAM_PROTOCOL must be grpc, http or grpc+rest" ;;
esac
"$TPY" - "$REPO" "$UPSTREAM_URL" "$REST_URL" >"$WORK/sidecar.yaml" <<'PY'
import json, os, sys
repo, url, rest_url = sys.argv[1], sys.argv[2], sys.argv[3]
print("server: {host: 127.0.0.1, http_port: 0, grpc_port: 0, metrics_port: 0, admin_port: 0, "
      "allow_client_shm: true, model_control_mode: explicit, log_format: json}")
print("backend:")
print("  kind: upstream")
print(f"  url: {url}")
if rest_url:
    print(f"  rest_url: {rest_url}")
print("  probe_interval_seconds: 1")
print(f"  staging_shm_bytes: {os.environ.get('INFERGATE_STAGING_SHM_BYTES', 64 << 20)}")
print(f"  staging_min_bytes: {os.environ.get('INFERGATE_STAGING_MIN_BYTES', 0)}")
print("  models:")
for name in sorted(os.listdir(repo)):
    entry = {'name': name}
    # Triton's simple has no dynamic_batching of its own: the sidecar batches it
    # (tests/conformance/test_dynamic_batching.py).
    if name == 'simple':
        entry['config'] = {'dynamic_batching': {}}
    print(f"    - {json.dumps(entry)}")
PY

"$SIDECAR_BIN" --config "$WORK/sidecar.yaml" >"$WORK/sidecar.log" 2>&1 </dev/null &
SIDECAR_PID=$!

# The sidecar logs the addresses it bound (http_addr, grpc_addr, metrics_addr) as JSON.
ADDRS="$(sidecar_addrs "$WORK/sidecar.log" "$SIDECAR_PID" 30)" || fail "the sidecar did not log its addresses" "$WORK/sidecar.log"
read -r SIDECAR_HTTP SIDECAR_GRPC SIDECAR_METRICS SIDECAR_ADMIN <<<"$ADDRS"

# Ready once it has discovered the upstream's models.
wait_ready "http://$SIDECAR_HTTP/v2/health/ready" "$SIDECAR_PID" "$READY_TIMEOUT" ||
  fail "the sidecar did not become ready" "$WORK/sidecar.log"
log "sidecar ready: http $SIDECAR_HTTP, grpc $SIDECAR_GRPC, metrics $SIDECAR_METRICS -> triton $UPSTREAM_URL"

set +e
INFERGATE_HTTP_URL="$SIDECAR_HTTP" \
INFERGATE_GRPC_URL="$SIDECAR_GRPC" \
INFERGATE_METRICS_URL="$SIDECAR_METRICS" \
INFERGATE_BACKEND=upstream-triton \
  "$TEST_VENV/bin/python" -m pytest tests/conformance -q -p no:cacheprovider "$@"
RC=$?
set -e
log "pytest exited with $RC"
[ "$RC" -eq 0 ] || exit "$RC"

# What travels through the staging pool, proven from Triton's side and the sidecar's counters;
# then the upstream dies and comes back while the sidecar keeps running: clients get clear
# UNAVAILABLE errors and readiness turns false, then service resumes without a sidecar restart,
# with the staging pool registered again. (Skipped when pytest arguments narrowed the run.)
export INFERGATE_HTTP_URL="$SIDECAR_HTTP" INFERGATE_GRPC_URL="$SIDECAR_GRPC" \
  INFERGATE_METRICS_URL="$SIDECAR_METRICS" INFERGATE_ADMIN_URL="$SIDECAR_ADMIN" \
  INFERGATE_TRITON_HTTP_URL="127.0.0.1:$TRITON_HTTP_PORT" \
  INFERGATE_TRITON_GRPC_URL="127.0.0.1:$TRITON_GRPC_PORT" \
  INFERGATE_OTLP_PORT="$OTLP_PORT" INFERGATE_SIDECAR_BIN="$SIDECAR_BIN"
if [ "$#" -eq 0 ]; then
  log "staging pool, call route, decoupled, generate, classification and tracing checks (tests/upstream/test_staging.py, test_routes.py, test_decoupled_upstream.py, test_generate_upstream.py, test_classification_upstream.py, test_trace_upstream.py)"
  set +e
  INFERGATE_UPSTREAM_PROTOCOL="${INFERGATE_UPSTREAM_PROTOCOL:-grpc}" \
    "$TEST_VENV/bin/python" -m pytest tests/upstream/test_staging.py tests/upstream/test_routes.py \
    tests/upstream/test_decoupled_upstream.py tests/upstream/test_generate_upstream.py \
    tests/upstream/test_classification_upstream.py \
    tests/upstream/test_trace_upstream.py -q -p no:cacheprovider
  RC=$?
  set -e
  if [ "$RC" -ne 0 ]; then
    # Triton's own complaints (an OTLP export it dropped, a model error) say which side failed.
    log "Triton's last errors and warnings (triton.log):"
    grep -E '^[EW][0-9]|\[Error\]|\[Warning\]|OTLP' "$WORK/triton.log" | tail -n 20 >&2 || true
    exit "$RC"
  fi
fi
if [ "$#" -eq 0 ]; then
  check() { "$TEST_VENV/bin/python" tests/upstream/restart_check.py "$1" "$SIDECAR_HTTP" "$SIDECAR_GRPC"; }
  set +e
  check serving && {
    log "stopping tritonserver"
    stop_pid "$TRITON_PID" 30
    check outage
  } && {
    start_triton
    wait_ready "http://127.0.0.1:$TRITON_HTTP_PORT/v2/health/ready" "$TRITON_PID" "$READY_TIMEOUT" &&
      check resumed
  }
  RC=$?
  set -e
  log "upstream restart check exited with $RC"
fi

# Faults with requests in flight (tests/upstream/fault_check.py, model slow_identity): the
# upstream is killed mid-request (clients get prompt 503/UNAVAILABLE, then service resumes),
# then the sidecar gets SIGTERM mid-request (every request in flight is answered, it exits 0).
sidecar_pid="$SIDECAR_PID"
if [ "$#" -eq 0 ] && [ "$RC" -eq 0 ]; then
  fault() { "$TEST_VENV/bin/python" tests/upstream/fault_check.py "$1" "$2" "$SIDECAR_HTTP" "$SIDECAR_GRPC"; }
  set +e
  log "fault: tritonserver killed (SIGKILL) with requests in flight"
  fault upstream-dies "$TRITON_PID" && {
    wait "$TRITON_PID" 2>/dev/null
    # A killed Triton cannot remove its python-backend regions; its stubs notice and exit.
    sleep 2
    rm -f /dev/shm/triton_python_backend_shm_region_* 2>/dev/null
    start_triton
    wait_ready "http://127.0.0.1:$TRITON_HTTP_PORT/v2/health/ready" "$TRITON_PID" "$READY_TIMEOUT" &&
      check resumed
  } && {
    log "fault: the sidecar gets SIGTERM with requests in flight through the upstream"
    fault sigterm "$SIDECAR_PID"
  } && {
    wait "$SIDECAR_PID"
    sidecar_rc=$?
    SIDECAR_PID=""
    [ "$sidecar_rc" -eq 0 ] || { log "the sidecar exited with $sidecar_rc after SIGTERM"; false; }
  }
  RC=$?
  set -e
  log "fault checks exited with $RC"
fi

# Nothing of the sidecar's may stay in /dev/shm once it has stopped.
if [ "$RC" -eq 0 ]; then
  stop_pid "$SIDECAR_PID" 15
  SIDECAR_PID=""
  left="$(find /dev/shm -maxdepth 1 -name "infergate_staging_${sidecar_pid}_*" -print -quit)"
  if [ -n "$left" ]; then
    log "the sidecar left $left behind"
    RC=5
  else
    log "no staging object left in /dev/shm"
  fi
fi
exit "$RC"
