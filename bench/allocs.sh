#!/usr/bin/env bash
# Heap allocations per request in the sidecar with its built-in models, case by case.
#
#   bench/allocs.sh [SIDECAR_BIN...]      (default: target/release/infergate-sidecar)
#
# Counts the sidecar's calls to glibc's malloc, calloc and realloc with perf's user-space probes
# (uprobes: root, and `perf` from Debian's linux-perf) while perf_analyzer drives one case at a
# time, and divides by the requests the sidecar's statistics counted over the same time. The few
# other calls perf_analyzer makes (metadata, configuration, statistics, shared-memory
# registration) are counted too, which adds well under one allocation a request. Several binaries
# are measured one after the other, for a before/after comparison. Prints a Markdown table.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

command -v perf >/dev/null || { echo "bench/allocs.sh needs perf (apt install linux-perf)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "bench/allocs.sh needs root (user-space probes)" >&2; exit 2; }
tests/tools/setup-python.sh >/dev/null
VENV="${INFERGATE_VENV:-$REPO_ROOT/.venv}"
PA="${INFERGATE_PERF_ANALYZER:-$VENV/bin/perf_analyzer}"
# Requests per measurement window: perf_analyzer keeps every answer of a window in memory, and
# 1M-element answers are 4 MiB each.
SMALL_REQUESTS="${ALLOCS_REQUESTS:-2000}" LARGE_REQUESTS="${ALLOCS_LARGE_REQUESTS:-200}"
[ "$#" -gt 0 ] || { cargo build --release --locked -q -p infergate-sidecar; set -- target/release/infergate-sidecar; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/infergate-allocs.XXXXXX")"
SIDECAR_PID=""
cleanup() {
  [ -z "$SIDECAR_PID" ] || kill "$SIDECAR_PID" 2>/dev/null || true
  perf probe -q -d 'probe_libc:*' 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

HTTP_PORT=18700 GRPC_PORT=18701
# name | model | requests per window | perf_analyzer arguments
CASES=(
  "simple, gRPC|simple|$SMALL_REQUESTS|-i grpc -u 127.0.0.1:$GRPC_PORT"
  "simple, HTTP binary|simple|$SMALL_REQUESTS|-u 127.0.0.1:$HTTP_PORT"
  "simple, HTTP JSON|simple|$SMALL_REQUESTS|-u 127.0.0.1:$HTTP_PORT --input-tensor-format json --output-tensor-format json"
  "identity_fp32 16, gRPC|identity_fp32|$SMALL_REQUESTS|-i grpc -u 127.0.0.1:$GRPC_PORT --shape INPUT0:16"
  "identity_fp32 1M, gRPC|identity_fp32|$LARGE_REQUESTS|-i grpc -u 127.0.0.1:$GRPC_PORT --shape INPUT0:1048576"
  "identity_fp32 1M, HTTP binary|identity_fp32|$LARGE_REQUESTS|-u 127.0.0.1:$HTTP_PORT --shape INPUT0:1048576"
  "identity_fp32 1M, system shm (gRPC)|identity_fp32|$LARGE_REQUESTS|-i grpc -u 127.0.0.1:$GRPC_PORT --shape INPUT0:1048576 --shared-memory system --output-shared-memory-size 4194304"
)

successes() {
  curl -sf "127.0.0.1:$HTTP_PORT/v2/models/$1/stats" |
    "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["model_stats"][0]["inference_stats"]["success"]["count"])'
}

libc="$(ldd "$1" | awk '/libc\.so/ {print $3}')"
perf probe -q -d 'probe_libc:*' 2>/dev/null || true
perf probe -q -x "$libc" -a malloc -a calloc -a realloc

declare -A RESULT
for bin in "$@"; do
  "$bin" --host 127.0.0.1 --http-port "$HTTP_PORT" --grpc-port "$GRPC_PORT" --metrics-port 0 \
    --admin-port 0 --allow-client-shm --log-level warn >"$WORK/sidecar.log" 2>&1 &
  SIDECAR_PID=$!
  for _ in $(seq 100); do curl -sf "127.0.0.1:$HTTP_PORT/v2/health/ready" && break; sleep 0.1; done
  for case in "${CASES[@]}"; do
    IFS='|' read -r name model requests args <<<"$case"
    before=$(successes "$model")
    perf stat -x, -o "$WORK/stat.csv" -e probe_libc:malloc,probe_libc:calloc,probe_libc:realloc \
      -p "$SIDECAR_PID" &
    stat_pid=$!
    sleep 0.3
    # shellcheck disable=SC2086
    "$PA" -m "$model" $args --measurement-mode count_windows --measurement-request-count "$requests" \
      --max-trials 2 --stability-percentage 999 >"$WORK/pa.log" 2>&1 || true
    kill -INT "$stat_pid"; wait "$stat_pid" 2>/dev/null || true
    after=$(successes "$model")
    calls=$(awk -F, '/probe_libc/ {s += $1} END {print s + 0}' "$WORK/stat.csv")
    RESULT["$bin|$name"]=$(awk -v c="$calls" -v n="$((after - before))" 'BEGIN {printf "%.1f", (n > 0 ? c / n : 0)}')
  done
  kill "$SIDECAR_PID"; wait "$SIDECAR_PID" 2>/dev/null || true; SIDECAR_PID=""
done

header="| case |"; rule="|---|"
for bin in "$@"; do header+=" $bin |"; rule+="---|"; done
echo "$header"; echo "$rule"
for case in "${CASES[@]}"; do
  IFS='|' read -r name _ _ _ <<<"$case"
  row="| $name |"
  for bin in "$@"; do row+=" ${RESULT["$bin|$name"]} |"; done
  echo "$row"
done
