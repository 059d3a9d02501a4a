#!/usr/bin/env bash
# The checks that need a CUDA device, for a machine with one (CI has none):
#   1. the conformance files that touch shared memory, with tritonclient's cuda_shared_memory and
#      perf_analyzer --shared-memory cuda (test_cuda_shared_memory.py runs only where a device is);
#   2. the CUDA forwarding tests: most hide the device from their sidecar, two need it;
#   3. perf_analyzer, identity_fp32 with 1,048,576 elements over CUDA and over system shared
#      memory, HTTP and gRPC, concurrency 1 and 8, alternating, ROUNDS times (default 2; 0 skips
#      the measurements).
#
# Needs: a release build of the sidecar (INFERGATE_SIDECAR_BIN, default target/release/...), a
# Python (PYTHON, default python3) with tritonclient[all] and cuda-python, and perf_analyzer
# (INFERGATE_PERF_ANALYZER, or found as the conformance suite finds it). Writes into OUT (default
# a new temporary folder): conformance.log, forwarding.log, perf.csv (one line per measurement,
# perf_analyzer's columns behind case, shm kind, protocol and round) and sidecar.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
PYTHON=${PYTHON:-python3}
ROUNDS=${ROUNDS:-2}
[[ $ROUNDS =~ ^[0-9]+$ ]] || { echo "ROUNDS must be a whole number, not '$ROUNDS'" >&2; exit 2; }
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export INFERGATE_SIDECAR_BIN=${INFERGATE_SIDECAR_BIN:-$REPO/target/release/infergate-sidecar}
export PYTHONUNBUFFERED=1
[ -x "$INFERGATE_SIDECAR_BIN" ] || { echo "no sidecar binary at $INFERGATE_SIDECAR_BIN" >&2; exit 2; }
PA=$(cd tests/conformance && "$PYTHON" -c 'from support import find_perf_analyzer; print(find_perf_analyzer() or "")')
[ -n "$PA" ] || { echo "perf_analyzer not found: set INFERGATE_PERF_ANALYZER" >&2; exit 2; }
export INFERGATE_PERF_ANALYZER=$PA
failed=0

nvidia-smi -L 2>/dev/null || echo "nvidia-smi not found"
echo "== conformance (shared memory, health and metadata, perf_analyzer)"
(cd tests/conformance && "$PYTHON" -m pytest -q -p no:cacheprovider -rs \
  test_cuda_shared_memory.py test_shared_memory.py test_health_metadata.py test_perf_analyzer.py) \
  > "$OUT/conformance.log" 2>&1 || failed=1
tail -12 "$OUT/conformance.log"
skipped_for_want_of_cuda() {
  if grep -q "no CUDA device\|cuda-python is not usable" "$1"; then
    echo "tests in $1 were skipped: no usable device or client library" >&2
    failed=1
  fi
}
skipped_for_want_of_cuda "$OUT/conformance.log"

echo "== CUDA forwarding (a model server that opens clients' handles)"
"$PYTHON" -m pytest -q -p no:cacheprovider -rs tests/upstream/test_cuda_forwarding.py > "$OUT/forwarding.log" 2>&1 || failed=1
tail -2 "$OUT/forwarding.log"
skipped_for_want_of_cuda "$OUT/forwarding.log"
[ "$ROUNDS" -gt 0 ] || { echo "results in $OUT"; exit $failed; }

echo "== perf_analyzer: CUDA against system shared memory"
http=18700 grpc=18701
"$INFERGATE_SIDECAR_BIN" --host 127.0.0.1 --http-port $http --grpc-port $grpc --metrics-port 0 \
  --admin-port 0 --allow-client-shm --log-level warn > "$OUT/sidecar.log" 2>&1 &
sidecar=$!
csv=/tmp/infergate-gpu-pa.$$.csv
trap 'kill $sidecar 2>/dev/null; rm -f "$csv"' EXIT
for _ in $(seq 100); do curl -sf "localhost:$http/v2/health/ready" > /dev/null && break; sleep 0.1; done
if ! kill -0 $sidecar 2>/dev/null || ! curl -sf "localhost:$http/v2/health/ready" > /dev/null; then
  echo "the sidecar did not become ready on ports $http/$grpc:" >&2; tail -5 "$OUT/sidecar.log" >&2; exit 1
fi
header=""
for round in $(seq "$ROUNDS"); do
  for concurrency in 1 8; do
    for shm in cuda system; do
      for protocol in grpc http; do
        port=$([ $protocol = http ] && echo $http || echo $grpc)
        rm -f "$csv"
        timeout 120 "$PA" -m identity_fp32 --shape INPUT0:1048576 -u "localhost:$port" -i $protocol \
          --concurrency-range $concurrency --measurement-mode time_windows --measurement-interval 1500 \
          --max-trials 3 --stability-percentage 999 --shared-memory $shm \
          --output-shared-memory-size 4194304 -f "$csv" > "$OUT/pa.log" 2>&1
        if [ $? -ne 0 ] || [ ! -s "$csv" ]; then
          echo "perf_analyzer failed: $shm $protocol c=$concurrency" >&2; tail -5 "$OUT/pa.log" >&2; failed=1
          continue
        fi
        if [ -z "$header" ]; then
          header="case,shm,protocol,round,$(head -1 "$csv")"
          echo "$header" > "$OUT/perf.csv"
        fi
        line="identity_fp32[1M],$shm,$protocol,$round,$(tail -1 "$csv")"
        echo "$line" >> "$OUT/perf.csv"
        echo "$line"
      done
    done
  done
done
kill $sidecar; wait $sidecar || { echo "the sidecar did not stop cleanly" >&2; failed=1; }
trap - EXIT
rm -f "$csv"
echo "results in $OUT"
exit $failed
