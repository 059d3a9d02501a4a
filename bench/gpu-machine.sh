#!/usr/bin/env bash
# The benchmark and the CUDA checks on a many-core machine with a GPU and no package registry,
# from a folder made by bench/bundle.sh (docs/performance.md, "16 cores and a GPU"). Each phase
# has a time limit, and what it measured is kept even when cut short. The phases, in this order
# (PHASES picks some; all by default):
#   machine      CPU, cores, GPU, and the GPU's copy bandwidth (the harness adds memcpy and
#                loopback TCP to each phase's machine.json)
#   correctness  Triton's own CUDA shared-memory example clients, unmodified, and this
#                repository's CUDA tests, against the sidecar alone, the sidecar in front of
#                Triton and Triton alone (bench/gpu_checks.py)
#   cuda         CUDA shared memory (perf_analyzer --shared-memory cuda, gRPC): Triton alone, the
#                sidecar in front of it (clients' handles passed through), the sidecar alone with
#                its built-in models; 16, 1M and 16M elements; c=1 and 8
#   pinned       pinned (PIN, default 0-3:4-7:8-15: client, front, Triton): Triton alone, through
#                the sidecar and through h2-relay (the floor of a gRPC front); 16 and 1M; HTTP
#                and gRPC; c=1 and 8
#   matrix       every system unpinned: the sidecar and the sidecar in front of Triton (each also
#                with a worker per CPU), Triton, the byte relay and h2-relay floors, the do-nothing
#                server; 16 and 1M elements; HTTP and gRPC; c=1, 8 and 64
#   profile      perf on the sidecar in front of Triton at 16 elements, c=1, gRPC and HTTP
#                (bench/gpu_checks.py): folded stacks for flame graphs
# Usage: [PHASES="machine correctness cuda pinned"] bench/gpu-machine.sh BUNDLE OUT
# (each phase's time limit: CORRECTNESS_S, CUDA_S, PINNED_S, MATRIX_S, PROFILE_S; the matrix's
# rows: MATRIX_CASES, MATRIX_PROTOCOLS)
# Writes into OUT: machine.txt, <phase>.md (each phase's summary), results.tgz (every phase's
# files) and run.log.
set -uo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -eq 2 ] || { echo "usage: $0 BUNDLE OUT" >&2; exit 2; }
BUNDLE="$(cd "$1" && pwd)"
OUT="$(mkdir -p "$2" && cd "$2" && pwd)"
PYTHON="${PYTHON:-python3}"
INTERVAL_MS="${INTERVAL_MS:-400}"
# perf_analyzer 2.45 stalls for good against the do-nothing server at HTTP c=8 and 64 on this
# machine: with 400 ms windows a row takes seconds, so a stall is given up after 30 s, not 60.
export PA_STALL_S="${PA_STALL_S:-30}"
H="${INFERGATE_OFFLINE_HOME:-/tmp/infergate-offline}"
RESULTS="$(mktemp -d)"
exec > >(tee -a "$OUT/run.log") 2>&1
log() { printf '[gpu-machine %s] %s\n' "$(date +%T)" "$*"; }
PHASES=" ${PHASES:-machine correctness cuda pinned matrix profile} "
wanted() { [[ "$PHASES" == *" $1 "* ]]; }
keep() { # keep PHASE: its summary beside the archive of everything so far
  [ -f "$RESULTS/$1/summary.md" ] && cp "$RESULTS/$1/summary.md" "$OUT/$1.md"
  tar -C "$RESULTS" -czf "$OUT/results.tgz.tmp" . && mv "$OUT/results.tgz.tmp" "$OUT/results.tgz"
}
harness() { # harness PHASE SECONDS [harness arguments]: one bench/offline-run.sh, time-boxed
  local phase=$1 seconds=$2
  shift 2
  log "$phase: $*"
  timeout --kill-after=20 "$seconds" "$REPO_ROOT/bench/offline-run.sh" "$BUNDLE" \
    --out "$RESULTS/$phase" --interval-ms "$INTERVAL_MS" "$@"
  local rc=$?
  keep "$phase"
  log "$phase: exit $rc"
  return $rc
}

if wanted machine; then
log "machine"
{
  echo "cores: $(nproc)"
  grep -m1 'model name' /proc/cpuinfo
  uname -r
  free -g | head -2
  nvidia-smi -L 2>&1
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1
  timeout 120 "$PYTHON" - <<'PY' 2>&1
import time

import torch

def rate(copy, nbytes, n=20):
    for _ in range(3):
        copy()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        copy()
    torch.cuda.synchronize()
    return n * nbytes / (time.perf_counter() - start) / 1e9

size = 1 << 30
a = torch.empty(size, dtype=torch.uint8, device="cuda")
b = torch.empty_like(a)
print(f"GPU device-to-device copy: {rate(lambda: b.copy_(a), size):.0f} GB/s copied "
      "(read and write: twice that)")
host = torch.empty(256 << 20, dtype=torch.uint8, pin_memory=True)
dev = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
print(f"host to GPU, page-locked: {rate(lambda: dev.copy_(host, non_blocking=True), 256 << 20):.1f} GB/s")
print(f"GPU to host, page-locked: {rate(lambda: host.copy_(dev, non_blocking=True), 256 << 20):.1f} GB/s")
pageable = torch.empty(256 << 20, dtype=torch.uint8)
print(f"host to GPU, pageable: {rate(lambda: dev.copy_(pageable), 256 << 20, 5):.1f} GB/s")
PY
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
fi

checks() { # checks PHASE SECONDS WHAT: bench/gpu_checks.py, time-boxed, its files kept
  local phase=$1 seconds=$2 what=$3
  log "$phase: bench/gpu_checks.py $what"
  mkdir -p "$RESULTS/$phase"
  timeout --kill-after=20 "$seconds" "$REPO_ROOT/bench/offline-run.sh" "$BUNDLE" \
    bench/gpu_checks.py "$what" "$RESULTS/$phase"
  local rc=$?
  [ -f "$RESULTS/$phase/correctness.md" ] && cp "$RESULTS/$phase/correctness.md" "$OUT/$phase.md"
  keep "$phase"
  log "$phase: exit $rc"
}
wanted correctness && checks correctness "${CORRECTNESS_S:-130}" correctness

# The front as deployed: the staging pool, and REST for calls of at most 64 KiB of tensor data
# (the operator's spec.upstream.restPort).
FRONT="sidecar→triton+pool+rest"
wanted cuda && harness cuda "${CUDA_S:-100}" --systems "triton,$FRONT,sidecar" \
  --cases 'identity_fp32[16],identity_fp32[1M],identity_fp32[16M]' --protocols cuda \
  --concurrency 1,8
# tritonclient (with the machine's grpcio and protobuf) drives the relays' and the noop server's
# readiness checks.
client_ok=1
PYTHONPATH="$H/tritonclient" "$PYTHON" -c 'import tritonclient.grpc' ||
  { client_ok=0; log "tritonclient.grpc does not import: no relays and no noop server"; }
floors="" h2floor=""
[ $client_ok = 1 ] && floors=",relay→triton,h2relay→triton" h2floor=",h2relay→triton"
if wanted pinned; then
  PIN="${PIN:-0-3:4-7:8-15}" harness pinned "${PINNED_S:-80}" \
    --systems "triton,$FRONT$h2floor" \
    --cases 'identity_fp32[16],identity_fp32[1M]' --protocols http,grpc --concurrency 1,8
fi
if wanted matrix; then
  noop=""
  [ $client_ok = 1 ] && noop=",noop"
  # The front with a worker per CPU beside it: one worker, the default for pods that share
  # their cores, is full at 1M and c=64 on this machine.
  harness matrix "${MATRIX_S:-270}" --systems "sidecar,triton,$FRONT$floors$noop" \
    --variant 'w0=--worker-threads 0' --builtin-variant 'w0=--worker-threads 0' \
    --cases "${MATRIX_CASES:-identity_fp32[16],identity_fp32[1M]}" \
    --protocols "${MATRIX_PROTOCOLS:-http,grpc}" --concurrency 1,8,64
fi
wanted profile && checks profile "${PROFILE_S:-100}" profile
log "done"
