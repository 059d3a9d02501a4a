#!/usr/bin/env bash
# Validate the operator's output against Kubernetes' own OpenAPI schemas, offline, with
# kubernetes-validate in strict mode (unknown fields are errors):
#   - every object `infergate-operator render` prints for each InferenceService in examples/,
#   - the CRD in crds/ (as a CustomResourceDefinition),
# for the oldest Kubernetes the operator supports (1.29, native sidecars on by default) and the
# newest kubernetes-validate knows. Exits non-zero on any failure.
#
# Usage: tests/manifests/validate.sh
# Environment (optional):
#   INFERGATE_VENV          venv to install kubernetes-validate into (default: <repo>/.venv,
#                           created by tests/tools/setup-python.sh; created here when missing)
#   INFERGATE_OPERATOR_BIN  operator binary to use as it is (default: build
#                           target/debug/infergate-operator with cargo)
#   PIP_FLAGS               extra flags for pip install
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

VENV="${INFERGATE_VENV:-$PWD/.venv}"
KV_VERSION="1.37.0"
PIP_FLAGS="${PIP_FLAGS:-}"
OLDEST_K8S="1.29.0"
BIN="${INFERGATE_OPERATOR_BIN:-$PWD/target/debug/infergate-operator}"
CRD="crds/inferenceservices.infergate.dev.yaml"

log() { printf '[validate-manifests] %s\n' "$*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
  log "creating venv $VENV"
  python3 -m venv "$VENV"
fi
installed="$("$VENV/bin/python" -c 'from importlib import metadata
try: print(metadata.version("kubernetes-validate"))
except metadata.PackageNotFoundError: pass' 2>/dev/null || true)"
if [ "$installed" != "$KV_VERSION" ]; then
  log "pip install kubernetes-validate==$KV_VERSION"
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check $PIP_FLAGS "kubernetes-validate==$KV_VERSION"
fi
KV="$VENV/bin/kubernetes-validate"

# The newest Kubernetes version whose schemas this kubernetes-validate ships.
NEWEST_K8S="$("$VENV/bin/python" - <<'PY'
import os, re, kubernetes_validate
root = os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema")
versions = []
for d in os.listdir(root):
    m = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)-local-strict", d)
    if m:
        versions.append(tuple(int(x) for x in m.groups()))
print(".".join(map(str, max(versions))))
PY
)"

if [ -z "${INFERGATE_OPERATOR_BIN:-}" ]; then
  cargo build --locked -q -p infergate-operator   # quick when it is up to date
fi

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

examples=()
for example in examples/*.yaml; do
  if grep -q '^kind: InferenceService' "$example"; then examples+=("$example"); fi
done
[ ${#examples[@]} -gt 0 ] || { log "no InferenceService in examples/"; exit 1; }

# Strict mode must reject an unknown field, or the checks below prove nothing.
printf 'apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {ports: [{port: 1}], bogus: 1}\n' >"$out/bogus.yaml"
if "$KV" --strict --quiet -k "$NEWEST_K8S" "$out/bogus.yaml" >/dev/null 2>&1; then
  log "kubernetes-validate --strict accepted an unknown field; refusing to trust it"
  exit 1
fi

fail=0
for version in "$OLDEST_K8S" "$NEWEST_K8S"; do
  # Render for that version: the operator leaves out what the cluster lacks.
  mkdir -p "$out/$version"
  files=()
  for example in "${examples[@]}"; do
    rendered="$out/$version/$(basename "$example")"
    if ! "$BIN" render -f "$example" --kubernetes-version "$version" \
         --uid 3f6c1c9e-4a8e-4d6b-9a57-2f1d0c4b7e21 >"$rendered"; then
      log "render failed: $example"
      exit 1
    fi
    files+=("$rendered")
  done
  files+=("$CRD")
  log "Kubernetes $version: ${#files[@]} files (${files[*]##*/})"
  if ! "$KV" --strict --quiet -k "$version" "${files[@]}"; then
    fail=1
  fi
done
if [ "$fail" -ne 0 ]; then
  log "FAILED"
  exit 1
fi
log "all objects valid for Kubernetes $OLDEST_K8S and $NEWEST_K8S"
