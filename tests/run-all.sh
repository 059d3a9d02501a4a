#!/usr/bin/env bash
# The whole test suite: formatting, lints, Rust unit and integration tests, then the black-box
# conformance suite (real tritonclient and perf_analyzer) against the built sidecar binary, and
# the operator's rendered manifests against Kubernetes' schemas, the Helm chart, and the operator,
# chart and examples against a real Kubernetes control plane (tests/cluster/run; needs Go), the
# user's whole path on a real node with real pods (tests/e2e/run; needs Go and root), and every
# fuzz target for a bounded time (fuzz/run.sh; installs cargo-fuzz).
# Installs what it needs (Python venv with tritonclient, perf_analyzer, Debian's libb64).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

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
  elif [ "$status" -ne 0 ]; then
    exit "$status"
  fi
}

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "build the sidecar binary"
cargo build --locked -p infergate-sidecar
# The operator's probe tests and the conformance suite run this binary.
export INFERGATE_SIDECAR_BIN="$PWD/target/debug/infergate-sidecar"

step "cargo test"
cargo test --workspace --locked

step "python environment (tritonclient, perf_analyzer)"
tests/tools/setup-python.sh
venv="${INFERGATE_VENV:-$PWD/.venv}"

step "conformance suite against the sidecar"
"$venv/bin/python" -m pytest tests/conformance -q -p no:cacheprovider

step "conformance suite through the sidecar in front of a real Triton (upstream backend, gRPC)"
tests/upstream/run-triton.sh

step "the same through the sidecar speaking V2 REST to Triton (--upstream http://)"
INFERGATE_UPSTREAM_PROTOCOL=http tests/upstream/run-triton.sh

step "the same with both: gRPC, and REST for calls with little tensor data (rest_url)"
INFERGATE_UPSTREAM_PROTOCOL=grpc+rest tests/upstream/run-triton.sh

step "clients' CUDA handles passed to a model server (a recording V2 server; no GPU needed)"
"$venv/bin/python" -m pytest tests/upstream/test_cuda_forwarding.py -q -p no:cacheprovider

step "conformance suite through the sidecar in front of KServe's ModelServer (sequences emulated)"
tests/upstream/run-kserve.sh

step "conformance suite through the sidecar in front of MLServer (sequences emulated)"
tests/upstream/run-mlserver.sh

step "soak: 30 s of mixed HTTP, gRPC, shared-memory and sequence load (no error, no leak)"
"$venv/bin/python" tests/soak/soak.py --seconds 30

step "the sidecar as its pod runs it: uid 65532, no capabilities, read-only root (needs root)"
"$venv/bin/python" -m pytest tests/security -q -p no:cacheprovider

step "fuzzing: every target for ${FUZZ_SECONDS:-30} s over its committed corpus and past findings (fuzz/run.sh)"
fuzz/run.sh "${FUZZ_SECONDS:-30}"

step "operator manifests against Kubernetes' schemas (kubernetes-validate, 1.29 and newest)"
cargo build --locked -p infergate-operator
tests/manifests/validate.sh

step "Helm chart (real helm: lint, template per values file, kubernetes-validate, RBAC, schema)"
INFERGATE_OPERATOR_BIN="$PWD/target/debug/infergate-operator" tests/helm/test-chart.sh

step "the storage initializer against a real S3 server and HTTP (tests/storage/run)"
skippable "it needs Go (the S3 server is built from its Go module)" tests/storage/run

step "operator, chart and examples against a real control plane (tests/cluster/run)"
if command -v go >/dev/null 2>&1; then
  INFERGATE_OPERATOR_BIN="$PWD/target/debug/infergate-operator" tests/cluster/run
else
  echo "SKIPPED: Go is not installed, so the control plane (kube-apiserver, etcd, ...) cannot be built;"
  echo "install Go 1.24 or newer to run tests/cluster/run"
fi

step "the user's path on a real node: images, helm install, examples, calls, faults (tests/e2e/run)"
skippable "it needs Go and root (it says which above)" tests/e2e/run
