#!/usr/bin/env bash
# End to end on a real cluster (kind): build the two images, load them into the cluster, install
# the chart, apply an InferenceService, wait for Ready, read its status, and call it with curl and
# tritonclient through a port-forward. Not part of CI (it needs Docker and pulls model-server
# images); run it where a container engine exists:
#
#   tests/e2e/kind.sh [EXAMPLE]        # default: examples/triton.yaml
#
# Needs: docker, kind, kubectl, helm (tests/helm/test-chart.sh caches one in .tools/), python3.
# Environment: CLUSTER (kind cluster name, default infergate-e2e; created when missing and kept),
# TIMEOUT (wait for Ready, default 20m), TAG (image tag, default e2e).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

EXAMPLE="${1:-examples/triton.yaml}"
CLUSTER="${CLUSTER:-infergate-e2e}"
TIMEOUT="${TIMEOUT:-20m}"
TAG="${TAG:-e2e}"
HELM="$(command -v helm || echo "$PWD/.tools/helm/helm")"
log() { printf '[e2e] %s\n' "$*" >&2; }

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { log "$tool is required"; exit 1; }
done
[ -x "$HELM" ] || { log "helm not found: run tests/helm/test-chart.sh once, or install helm"; exit 1; }

kind get clusters | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER"
kubectl config use-context "kind-$CLUSTER" >/dev/null

log "building images"
docker build -f docker/sidecar.Dockerfile -t "infergate/infergate-sidecar:$TAG" .
docker build -f docker/operator.Dockerfile -t "infergate/infergate-operator:$TAG" .
kind load docker-image --name "$CLUSTER" "infergate/infergate-sidecar:$TAG" "infergate/infergate-operator:$TAG"

log "installing the chart"
"$HELM" upgrade --install infergate charts/infergate --namespace infergate-system --create-namespace \
  --set image.repository=infergate/infergate-operator --set image.tag="$TAG" --set image.pullPolicy=Never \
  --set sidecarImage.repository=infergate/infergate-sidecar --set sidecarImage.tag="$TAG" --wait

name="$(python3 -c 'import sys,yaml; print(next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind")=="InferenceService")["metadata"]["name"])' "$EXAMPLE")"
log "applying $EXAMPLE (InferenceService $name)"
kubectl apply -f "$EXAMPLE"
kubectl wait --for=condition=Ready "infsvc/$name" --timeout="$TIMEOUT"
kubectl get infsvc "$name" -o wide
kubectl get infsvc "$name" -o jsonpath='{.status.extensions}' | python3 -m json.tool

log "calling it"
kubectl port-forward "svc/$name" 18000:8000 18001:8001 >/dev/null 2>&1 &
pf=$!
trap 'kill $pf 2>/dev/null || true' EXIT
sleep 3
curl -fsS localhost:18000/v2/health/ready && log "REST ready"
curl -fsS localhost:18000/v2 | python3 -m json.tool
python3 - <<'PY'
import tritonclient.grpc as grpcclient
client = grpcclient.InferenceServerClient("localhost:18001")
assert client.is_server_ready()
models = client.get_model_repository_index().models
print("models:", [m.name for m in models])
for m in models:
    if m.state == "READY":
        print(client.get_model_metadata(m.name))
        break
PY
log "ok"
