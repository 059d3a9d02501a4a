#!/usr/bin/env bash
# identity_fp32 with a 1,048,576-element FP32 input (4 MiB) through the release sidecar, driven by
# perf_analyzer over HTTP (binary tensor data), gRPC, and system shared memory (both protocols),
# concurrency 1, one run, alternating. Prints perf_analyzer's throughput and latency lines.
# Needs: cargo build --release -p infergate-sidecar; tests/tools/setup-python.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${INFERGATE_VENV:-$PWD/.venv}"
pa="$venv/bin/perf_analyzer"
bin="${INFERGATE_SIDECAR_BIN:-target/release/infergate-sidecar}"
port="${BENCH_PORT:-18900}"
"$bin" --host 127.0.0.1 --http-port "$port" --grpc-port $((port + 1)) --metrics-port $((port + 2)) \
  --allow-client-shm --log-level warn &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 50); do curl -sf "127.0.0.1:$port/v2/health/ready" >/dev/null && break; sleep 0.1; done
common=(-m identity_fp32 --shape INPUT0:1048576 --concurrency-range 1
        --measurement-mode time_windows --measurement-interval "${BENCH_INTERVAL_MS:-3000}" --max-trials 3 --stability-percentage 999)
run() {
  local label=$1; shift
  local out
  out=$("$pa" "${common[@]}" "$@" 2>&1)
  printf '%-22s %s | %s\n' "$label" "$(grep -m1 'Throughput:' <<<"$out" | sed 's/^ *//')" \
    "$(grep -m1 'p99 latency' <<<"$out" | sed 's/^ *//')"
}
for round in 1 2; do
  run "http binary" -u "127.0.0.1:$port" -i http
  run "grpc" -u "127.0.0.1:$((port + 1))" -i grpc
  run "http + system shm" -u "127.0.0.1:$port" -i http --shared-memory system --output-shared-memory-size 4194304
  run "grpc + system shm" -u "127.0.0.1:$((port + 1))" -i grpc --shared-memory system --output-shared-memory-size 4194304
done
