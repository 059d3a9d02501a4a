#!/usr/bin/env bash
# The whole test suite: formatting, lints, Rust unit and integration tests, then the black-box
# conformance suite (real tritonclient and perf_analyzer) against the built sidecar binary, and
# the operator's rendered manifests against Kubernetes' schemas, the Helm chart, and the operator,
# chart and examples against a real Kubernetes control plane (tests/cluster/run; needs Go), the
# user's whole path on a real node with real pods (tests/e2e/run; needs Go and root).
# Installs what it needs (Python venv with tritonclient, perf_analyzer, Debian's libb64).
# The fuzz targets' committed corpus and past findings are replayed by the rust suite
# (fuzz/harness/tests/replay.rs); exploring with libFuzzer is the fuzz suite, run by name.
#
# Usage: tests/run-all.sh                  every suite but fuzz, in order (what CI runs, through .ci/run)
#        tests/run-all.sh --quick          fmt, clippy, rust, conformance
#        tests/run-all.sh SUITE [SUITE...] only those suites (each does the setup it needs)
#        tests/run-all.sh --list           the suites, one a line
#        tests/run-all.sh --help
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# The suites, in the order the whole run takes them, each with a one-line description.
SUITES=(fmt clippy rust conformance upstream-triton-grpc upstream-triton-rest
  upstream-triton-both cuda-forwarding kserve mlserver soak security fuzz manifests helm storage
  cluster e2e)
QUICK=(fmt clippy rust conformance)
# Run only when named: a fuzzing campaign explores for as long as it is given (an instrumented
# build of about 9 minutes first), which is not a test with an end; what it found so far is
# replayed by the rust suite on every run. upstream-triton-both is the conformance suite's third
# pass through Triton (about 3 minutes); each of its two upstream protocols has its own pass in
# the whole run, and CI has no minutes to spare for the mix.
BY_NAME_ONLY=(fuzz upstream-triton-both)
declare -A ABOUT=(
  [fmt]="cargo fmt --check over the workspace"
  [clippy]="cargo clippy on every target, warnings are errors"
  [rust]="the Rust unit and integration tests (cargo test --workspace), with every fuzz seed and past finding replayed"
  [conformance]="the conformance suite (tests/conformance) against the sidecar's built-in models"
  [upstream-triton-grpc]="the conformance suite through the sidecar in front of a real Triton, over V2 gRPC"
  [upstream-triton-rest]="the same, the sidecar speaking V2 REST to Triton"
  [upstream-triton-both]="the same, gRPC and REST for calls with little tensor data (rest_url)"
  [cuda-forwarding]="clients' CUDA handles and ragged batches as a model server receives them (recording V2 servers; no GPU needed)"
  [kserve]="the conformance suite through the sidecar in front of KServe's ModelServer"
  [mlserver]="the conformance suite through the sidecar in front of MLServer"
  [soak]="30 s of mixed HTTP, gRPC, shared-memory and sequence load (no error, no leak)"
  [security]="the sidecar as its pod runs it: uid 65532, no capabilities, read-only root (needs root)"
  [fuzz]="every fuzz target explored with libFuzzer for FUZZ_SECONDS (default 30) s (fuzz/run.sh; only when named)"
  [manifests]="the operator's rendered manifests and the CRD against Kubernetes' schemas"
  [helm]="the Helm chart with real Helm: lint, template, schemas, RBAC, values schema"
  [storage]="the storage initializer against a real S3 server and HTTP (needs Go)"
  [cluster]="operator, chart and examples against a real control plane (needs Go)"
  [e2e]="the user's path on a real node with real pods (needs Go and root)"
)

usage() {
  cat <<EOF
Usage: tests/run-all.sh [--quick | --list | --help | SUITE...]

  (no argument)     every suite but ${BY_NAME_ONLY[*]}, in order: the whole test suite, as CI runs it
  --quick           ${QUICK[*]}
  SUITE [SUITE...]  only those suites, in the order of the whole run; each does the setup it
                    needs (the sidecar build, the Python venv, the operator build)
  --list            the suites with a line about each
  --help            this text

A suite that cannot run on this machine (no Go, not root) is reported as skipped, never as
passed. The run stops at the first failure. The suites:

EOF
  list
}

list() {
  local id
  for id in "${SUITES[@]}"; do
    printf '%-21s %s\n' "$id" "${ABOUT[$id]}"
  done
}

# What each suite ended as, for the summary at the end.
RESULTS=()
SKIP_REASON=""
CURRENT_SUITE=""

# skippable REASON COMMAND...: runs a suite that exits 2 where it cannot run here (it says why);
# that is reported as skipped, any other failure stops the run.
skippable() {
  local reason="$1" status
  shift
  set +e
  "$@"
  status=$?
  set -e
  if [ "$status" -eq 2 ]; then
    echo "SKIPPED: $1 cannot run here: $reason"
    SKIP_REASON="$reason"
  elif [ "$status" -ne 0 ]; then
    exit "$status"
  fi
}

# ------------------------------------------------------------------ setup, done once per run
SIDECAR_BUILT=""
need_sidecar() {
  [ -z "$SIDECAR_BUILT" ] || return 0
  step "build the sidecar binary"
  # infergate-drain, the preStop hook, sits beside it as in the image (the sidecar copies it
  # into server.drain_hook_dir).
  cargo build --locked -p infergate-sidecar -p infergate-drain
  # The operator's probe tests and the conformance suite run this binary.
  export INFERGATE_SIDECAR_BIN="$PWD/target/debug/infergate-sidecar"
  SIDECAR_BUILT=1
}

venv=""
need_python() {
  [ -z "$venv" ] || return 0
  step "python environment (tritonclient, perf_analyzer)"
  tests/tools/setup-python.sh
  venv="${INFERGATE_VENV:-$PWD/.venv}"
}

OPERATOR_BUILT=""
need_operator() {
  [ -z "$OPERATOR_BUILT" ] || return 0
  cargo build --locked -p infergate-operator
  OPERATOR_BUILT=1
}

# ------------------------------------------------------------------ the suites
suite_fmt() {
  step "cargo fmt --check"
  cargo fmt --all -- --check
}

suite_clippy() {
  step "cargo clippy (all targets, warnings are errors)"
  cargo clippy --workspace --all-targets --locked -- -D warnings
}

suite_rust() {
  need_sidecar
  step "cargo test"
  cargo test --workspace --locked
}

suite_conformance() {
  need_sidecar
  need_python
  step "conformance suite against the sidecar"
  "$venv/bin/python" -m pytest tests/conformance -q -p no:cacheprovider
}

suite_upstream_triton_grpc() {
  need_sidecar
  step "conformance suite through the sidecar in front of a real Triton (upstream backend, gRPC)"
  tests/upstream/run-triton.sh
}

suite_upstream_triton_rest() {
  need_sidecar
  step "the same through the sidecar speaking V2 REST to Triton (--upstream http://)"
  INFERGATE_UPSTREAM_PROTOCOL=http tests/upstream/run-triton.sh
}

suite_upstream_triton_both() {
  need_sidecar
  step "the same with both: gRPC, and REST for calls with little tensor data (rest_url)"
  INFERGATE_UPSTREAM_PROTOCOL=grpc+rest tests/upstream/run-triton.sh
}

suite_cuda_forwarding() {
  need_sidecar
  need_python
  step "clients' CUDA handles and ragged batches as a model server receives them (recording V2 servers; no GPU needed)"
  "$venv/bin/python" -m pytest tests/upstream/test_cuda_forwarding.py \
    tests/upstream/test_ragged_batching.py -q -p no:cacheprovider
}

suite_kserve() {
  need_sidecar
  step "conformance suite through the sidecar in front of KServe's ModelServer (sequences emulated)"
  tests/upstream/run-kserve.sh
}

suite_mlserver() {
  need_sidecar
  step "conformance suite through the sidecar in front of MLServer (sequences emulated)"
  tests/upstream/run-mlserver.sh
}

suite_soak() {
  need_sidecar
  need_python
  step "soak: 30 s of mixed HTTP, gRPC, shared-memory and sequence load (no error, no leak)"
  "$venv/bin/python" tests/soak/soak.py --seconds 30
}

suite_security() {
  need_sidecar
  need_python
  step "the sidecar as its pod runs it: uid 65532, no capabilities, read-only root (needs root)"
  "$venv/bin/python" -m pytest tests/security -q -p no:cacheprovider
  # pytest skips these tests without root, unshare and setpriv (and exits 0): the same condition
  # here makes the suite count as skipped, not passed.
  if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null 2>&1 ||
    ! command -v setpriv >/dev/null 2>&1; then
    SKIP_REASON="it needs root with unshare and setpriv (util-linux)"
    echo "SKIPPED: tests/security cannot run here: $SKIP_REASON"
  fi
}

suite_fuzz() {
  step "fuzzing: every target for ${FUZZ_SECONDS:-30} s over its committed corpus and past findings (fuzz/run.sh)"
  fuzz/run.sh "${FUZZ_SECONDS:-30}"
}

suite_manifests() {
  step "operator manifests against Kubernetes' schemas (kubernetes-validate, 1.29 and newest)"
  need_operator
  tests/manifests/validate.sh
}

suite_helm() {
  step "Helm chart (real helm: lint, template per values file, kubernetes-validate, RBAC, schema)"
  need_operator
  INFERGATE_OPERATOR_BIN="$PWD/target/debug/infergate-operator" tests/helm/test-chart.sh
}

suite_storage() {
  step "the storage initializer against a real S3 server and HTTP (tests/storage/run)"
  skippable "it needs Go (the S3 server is built from its Go module)" tests/storage/run
}

suite_cluster() {
  step "operator, chart and examples against a real control plane (tests/cluster/run)"
  if command -v go >/dev/null 2>&1; then
    need_sidecar
    need_operator
    INFERGATE_OPERATOR_BIN="$PWD/target/debug/infergate-operator" tests/cluster/run
  else
    echo "SKIPPED: Go is not installed, so the control plane (kube-apiserver, etcd, ...) cannot be built;"
    echo "install Go 1.24 or newer to run tests/cluster/run"
    SKIP_REASON="Go is not installed"
  fi
}

# The Kubernetes binaries (cluster, e2e) and the e2e suite's images (two release builds inside
# podman) take most of a cold run's CPU, while the suites before them mostly wait: on servers,
# on pods, on the network. So a whole run starts building both at once, in the background at the
# lowest CPU and I/O priority. The cluster suite meets that build on the binaries' lock
# (tests/cluster/build.sh) and the e2e suite waits for the end of it; both find what they need
# already built.
PREBUILD_PID=""
PREBUILD_LOG=""
start_e2e_prebuild() {
  [ "$(id -u)" -eq 0 ] && command -v go >/dev/null 2>&1 || return 0
  PREBUILD_LOG="$(mktemp "${TMPDIR:-/tmp}/infergate-e2e-prebuild.XXXXXX")"
  step "building the e2e suite's images in the background (tests/e2e/run --prebuild; log $PREBUILD_LOG)"
  # A session of its own, so that it can be stopped whole. Where the kernel groups the scheduling
  # of each session (autogroup), a nice value counts only inside the group, so the group itself
  # is made nice too, or the build would take half the CPU from the suites.
  setsid -w bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null || true
    exec nice -n 19 ionice -c 2 -n 7 tests/e2e/run --prebuild' >"$PREBUILD_LOG" 2>&1 &
  PREBUILD_PID=$!
}

suite_e2e() {
  if [ -n "$PREBUILD_PID" ]; then
    step "waiting for the background build of the e2e images"
    local status=0
    wait "$PREBUILD_PID" || status=$?
    PREBUILD_PID=""
    cat "$PREBUILD_LOG"
    rm -f "$PREBUILD_LOG"
    # A failed prebuild is not the verdict: the run below builds again and says what failed.
    [ "$status" -eq 0 ] || echo "the background build exited with $status; building again in the foreground"
  fi
  step "the user's path on a real node: images, helm install, examples, calls, faults (tests/e2e/run)"
  skippable "it needs Go and root (it says which above)" tests/e2e/run
}

# ------------------------------------------------------------------ dispatcher
run_suite() {
  CURRENT_SUITE="$1"
  SKIP_REASON=""
  local began=$SECONDS
  "suite_${1//-/_}"
  # Each suite's wall time in the summary: the README's table of times comes from these lines.
  local took=$((SECONDS - began))
  if [ -n "$SKIP_REASON" ]; then
    RESULTS+=("$1: skipped after ${took} s, $SKIP_REASON")
  else
    RESULTS+=("$1: passed in ${took} s")
  fi
  CURRENT_SUITE=""
}

is_suite() {
  local id
  for id in "${SUITES[@]}"; do [ "$id" != "$1" ] || return 0; done
  return 1
}

declare -A WANTED=()
by_name_only() {
  local id
  for id in "${BY_NAME_ONLY[@]}"; do [ "$id" != "$1" ] || return 0; done
  return 1
}
if [ $# -eq 0 ]; then
  for id in "${SUITES[@]}"; do by_name_only "$id" || WANTED[$id]=1; done
fi
for arg in "$@"; do
  case "$arg" in
    -h | --help) usage; exit 0 ;;
    --list) list; exit 0 ;;
    --quick) for id in "${QUICK[@]}"; do WANTED[$id]=1; done ;;
    *)
      if ! is_suite "$arg"; then
        echo "tests/run-all.sh: unknown suite or option: $arg" >&2
        echo "valid suites: ${SUITES[*]} (or --quick, --list, --help)" >&2
        exit 2
      fi
      WANTED[$arg]=1
      ;;
  esac
done

trap 'status=$?; if [ -n "$PREBUILD_PID" ]; then kill -- -"$PREBUILD_PID" 2>/dev/null || true; fi
  if [ "$status" -ne 0 ] && [ -n "$CURRENT_SUITE" ]; then
  printf "\nFAILED: suite %s (exit status %s)\n" "$CURRENT_SUITE" "$status"; fi
  if [ "$status" -ne 0 ] && [ "${#RESULTS[@]}" -gt 0 ]; then printf "%s\n" "${RESULTS[@]}"; fi' EXIT

# Only worth it when other suites run first.
if [ -n "${WANTED[e2e]:-}" ] && [ "${#WANTED[@]}" -gt 1 ]; then start_e2e_prebuild; fi

for id in "${SUITES[@]}"; do
  if [ -n "${WANTED[$id]:-}" ]; then run_suite "$id"; fi
done

step "summary"
printf '%s\n' "${RESULTS[@]}"
echo "total: $SECONDS s"
