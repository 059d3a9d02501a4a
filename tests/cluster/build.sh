#!/usr/bin/env bash
# Builds the Kubernetes binaries the cluster and end-to-end tests run —
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, and the
# node's kubelet and kube-proxy (one Kubernetes release), etcd and kwok —
# from their Go modules, and caches them by version. A second call with the
# same versions returns at once.
#
# Prints the directory holding the binaries on its last line of stdout.
#
#   K8S_VERSION   Kubernetes release            (default v1.34.4)
#   ETCD_VERSION  etcd server module version     (default v3.6.7)
#   KWOK_VERSION  kwok release                   (default v0.7.0)
#   INFERGATE_CACHE  cache root                  (default ~/.cache/infergate); the Go caches
#                    of the build live under it too and are removed after a complete build
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.34.4}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.7}"
KWOK_VERSION="${KWOK_VERSION:-v0.7.0}"
CACHE="${INFERGATE_CACHE:-$HOME/.cache/infergate}"
BIN="$CACHE/cluster/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION/bin"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy etcd kwok)

complete() {
    for b in "${BINARIES[@]}"; do [[ -x "$BIN/$b" ]] || return 1; done
}

if complete; then
    echo "$BIN"
    exit 0
fi

if ! command -v go >/dev/null; then
    echo "build.sh: Go is not installed; the cluster tests need it to build the control plane" >&2
    exit 2
fi

log() { echo "[cluster-build] $*" >&2; }
work="$CACHE/cluster/src-$K8S_VERSION"
mkdir -p "$BIN" "$work"
# One build at a time: tests/run-all.sh starts one in the background (tests/e2e/run --prebuild)
# that the cluster suite may meet; the second waits, then finds the binaries built.
exec 9>"$CACHE/cluster/build.lock"
if ! flock -n 9; then
    log "another build of the Kubernetes binaries is running; waiting for it"
    flock 9
fi
if complete; then
    echo "$BIN"
    exit 0
fi
export GOFLAGS="-buildvcs=false -mod=mod" CGO_ENABLED=0
# Build and module caches of their own (about 5 GB here), removed once every binary is built:
# only the binaries (about 400 MB) stay. A failed build keeps them, so a retry is quicker.
export GOCACHE="$CACHE/cluster/go-build" GOMODCACHE="$CACHE/cluster/go-mod"
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
staging="v0.${K8S_VERSION#v1.}"

# --- Kubernetes: k8s.io/kubernetes points every staging module at ./staging,
# so a consumer module must map each one to its published v0.x tag.
k8s="$work/kubernetes"
mkdir -p "$k8s"
if [[ ! -f "$k8s/go.mod" ]]; then
    log "resolving k8s.io/kubernetes $K8S_VERSION (staging modules at $staging)"
    # The release's own go.mod, fetched through the Go toolchain's configured module proxy.
    gomod="$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
        | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
    mod="$(cat "$gomod")"
    {
        echo "module infergate.test/k8s-binaries"
        echo
        echo "go 1.24.0"
        echo
        echo "require k8s.io/kubernetes $K8S_VERSION"
        echo
        echo "replace ("
        grep -Eo '^\s*k8s\.io/[a-z0-9-]+ => \./staging' <<<"$mod" \
            | awk -v v="$staging" '{print "\t" $1 " => " $1 " " v}'
        echo ")"
    } >"$k8s/go.mod.tmp"
    cat >"$k8s/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
GO
    mv "$k8s/go.mod.tmp" "$k8s/go.mod"
fi
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
(
    cd "$k8s"
    go mod tidy -e >/dev/null 2>&1 || true
    for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy; do
        [[ -x "$BIN/$cmd" ]] && continue
        log "building $cmd $K8S_VERSION"
        go build -tags tools -trimpath -ldflags "$ldflags" -o "$BIN/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
        mv "$BIN/$cmd.tmp" "$BIN/$cmd"
    done
)

# --- etcd: the server module's etcdmain package is the whole binary.
etcd="$work/etcd"
mkdir -p "$etcd"
if [[ ! -x "$BIN/etcd" ]]; then
    log "building etcd $ETCD_VERSION"
    cat >"$etcd/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
    (
        cd "$etcd"
        [[ -f go.mod ]] || go mod init infergate.test/etcd >/dev/null 2>&1
        go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null
        go mod tidy >/dev/null
        go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" .
        mv "$BIN/etcd.tmp" "$BIN/etcd"
    )
fi

# --- kwok: makes the pods of fake nodes Running and Ready without containers.
kwok="$work/kwok"
mkdir -p "$kwok"
if [[ ! -x "$BIN/kwok" ]]; then
    log "building kwok $KWOK_VERSION"
    (
        cd "$kwok"
        GOBIN="$kwok/gobin" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
        mv "$kwok/gobin/kwok" "$BIN/kwok"
    )
fi

complete
log "removing the Go build and module caches ($(du -sh "$GOCACHE" "$GOMODCACHE" 2>/dev/null | awk '{print $1}' | paste -sd+))"
go clean -cache -modcache
echo "$BIN"
