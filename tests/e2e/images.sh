#!/usr/bin/env bash
# Builds every image the end-to-end tests run, with podman and no registry, and writes each as an
# OCI archive the node imports into containerd:
#
#   localhost/infergate/infergate-sidecar:e2e    docker/sidecar.Dockerfile
#   localhost/infergate/infergate-operator:e2e   docker/operator.Dockerfile
#   localhost/infergate/infergate-storage-initializer:e2e   docker/storage-initializer.Dockerfile
#   localhost/infergate-e2e/triton:2.51          Triton 2.51 (nvidia-pytriton wheel), CPU only
#   localhost/infergate-e2e/mlserver:1.7.1       MLServer with the project's test runtimes
#   localhost/infergate-e2e/client:2.71.0        tritonclient, perf_analyzer, the test clients
#   localhost/infergate-e2e/pause:1              the pods' sandbox (images/pause.c)
#
# The two Dockerfiles are built as users build them; only their base images differ (build
# arguments): a Rust builder and a glibc runtime assembled from Debian packages
# (images/debian-rootfs.sh) with this machine's Rust toolchain, since no registry is reachable.
# The model-server and client images copy the venvs the rest of the suite installs from PyPI
# (.venv-triton, .venv-mlserver, .venv) onto a Debian Python base.
#
# Everything is cached under $INFERGATE_CACHE/e2e (default ~/.cache/infergate/e2e): podman's
# storage with its layer cache, cargo's registry and target directories of the image builds, the
# Debian packages and the archives. A second run rebuilds only what changed.
#
#   tests/e2e/images.sh ARCHIVE_DIR     prints "IMAGE ARCHIVE IMAGE_ID" per image on stdout
#   tests/e2e/images.sh --prebuild      only the bases, the pause image and the project's three
#                                       images (the compiling part), into the layer cache; needs
#                                       none of the venvs; prints nothing (tests/run-all.sh runs it
#                                       in the background while the other suites run)
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO_ROOT"
log() { printf '[images] %s\n' "$*" >&2; }
# shellcheck source=lib.sh
source tests/e2e/lib.sh

prebuild=0
if [[ "${1:-}" == --prebuild ]]; then
  prebuild=1
else
  archives="${1:?usage: images.sh ARCHIVE_DIR | --prebuild}"
  mkdir -p "$archives"
fi

SIDECAR_IMAGE=localhost/infergate/infergate-sidecar:e2e
OPERATOR_IMAGE=localhost/infergate/infergate-operator:e2e
STORAGE_IMAGE=localhost/infergate/infergate-storage-initializer:e2e
TRITON_IMAGE=localhost/infergate-e2e/triton:2.51
MLSERVER_IMAGE=localhost/infergate-e2e/mlserver:1.7.1
CLIENT_IMAGE=localhost/infergate-e2e/client:2.71.0
PAUSE_IMAGE=localhost/infergate-e2e/pause:1

# ---------------------------------------------------------------- bases from Debian packages

# base_image NAME CONTEXT_HASH PKG... : a rootfs image, rebuilt only when its recipe changes.
base_image() {
  local name="$1" extra="$2"; shift 2
  local recipe tag
  recipe="$(sha256sum tests/e2e/images/debian-rootfs.sh | cut -c1-12)-$(printf '%s ' "$@" "$extra" | sha256sum | cut -c1-12)"
  tag="localhost/infergate-e2e/$name:$recipe"
  if ! pm image exists "$tag"; then
    log "assembling $tag from Debian packages: $*"
    local root
    root="$(mktemp -d "$E2E_CACHE/rootfs.XXXXXX")"
    tests/e2e/images/debian-rootfs.sh "$root" "$@"
    if [[ "$name" == rust-builder ]]; then add_rust_toolchain "$root"; fi
    local changes=()
    case "$name" in
      rust-builder) changes=(--change 'ENV PATH=/usr/local/cargo/bin:/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
                             --change 'ENV CARGO_HOME=/usr/local/cargo') ;;
      *) changes=(--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin') ;;
    esac
    tar -C "$root" -c . | pm import -q "${changes[@]}" - "$tag" >/dev/null
    rm -rf "$root"
  fi
  echo "$tag"
}

# The Rust toolchain this machine builds with (rustc, cargo and the standard library: no docs,
# no clippy or rustfmt), so the images are built by the same compiler as the rest of the suite.
add_rust_toolchain() {
  local root="$1" sysroot
  sysroot="$(rustc --print sysroot)"
  mkdir -p "$root/usr/local/rust/bin" "$root/usr/local/rust/lib/rustlib" "$root/usr/local/cargo"
  cp -a "$sysroot/bin/rustc" "$sysroot/bin/cargo" "$root/usr/local/rust/bin/"
  cp -a "$sysroot"/lib/*.so* "$root/usr/local/rust/lib/"
  cp -a "$sysroot/lib/rustlib/x86_64-unknown-linux-gnu" "$root/usr/local/rust/lib/rustlib/"
}

rust_version="$(rustc -V | cut -d' ' -f2)"
BUILDER="$(base_image rust-builder "rust-$rust_version" gcc libc6-dev dash coreutils)"
RUNTIME="$(base_image cc "" libc6 libgcc-s1 libstdc++6 --alone ca-certificates tzdata)"
PYTHON="$(base_image python "" python3 libpython3.11 libstdc++6 libb64-0d dash bash coreutils --alone ca-certificates)"
# The storage initializer's tools, so its Dockerfile finds them and installs nothing.
STORAGE_BASE="$(base_image storage "" rclone dash coreutils tar gzip unzip grep sed findutils --alone ca-certificates)"

# The pods' sandbox process: images/pause.c, linked statically.
if ! pm image exists "$PAUSE_IMAGE" || [[ tests/e2e/images/pause.c -nt "$E2E_CACHE/pause.stamp" ]]; then
  root="$(mktemp -d "$E2E_CACHE/rootfs.XXXXXX")"
  gcc -static -Os -s -o "$root/pause" tests/e2e/images/pause.c
  tar -C "$root" -c . | pm import -q --change 'ENTRYPOINT ["/pause"]' - "$PAUSE_IMAGE" >/dev/null
  rm -rf "$root"
  touch "$E2E_CACHE/pause.stamp"
fi

# ---------------------------------------------------------------- the project's two images

# The build steps reach crates.io; they run in the host's network with its trust store.
build_args=(--network host --volume /etc/ssl/certs:/etc/ssl/certs:ro
            --build-arg "BUILDER_IMAGE=$BUILDER" --build-arg "RUNTIME_IMAGE=$RUNTIME")
for which in sidecar operator; do
  image="$SIDECAR_IMAGE"; [[ "$which" == operator ]] && image="$OPERATOR_IMAGE"
  log "building $image (docker/$which.Dockerfile)"
  started=$SECONDS
  pm build -q "${build_args[@]}" -f "docker/$which.Dockerfile" -t "$image" . >/dev/null
  log "built $image in $((SECONDS - started)) s"
done

log "building $STORAGE_IMAGE (docker/storage-initializer.Dockerfile)"
pm build -q --build-arg "BASE_IMAGE=$STORAGE_BASE" -f docker/storage-initializer.Dockerfile \
  -t "$STORAGE_IMAGE" . >/dev/null
[[ "$prebuild" == 1 ]] && exit 0

# ---------------------------------------------------------------- model servers and the client

# A build context of hardlinks (copies across file systems) to the venv's packages.
venv_context() {
  local venv="$1" ctx="$2" site
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  rm -rf "$ctx"
  mkdir -p "$ctx"
  cp -al "$site" "$ctx/site-packages" 2>/dev/null || cp -a "$site" "$ctx/site-packages"
  find "$ctx/site-packages" -name __pycache__ -prune -exec rm -rf {} +
}

export REPO_ROOT
# shellcheck source=../upstream/triton-env.sh
source tests/upstream/triton-env.sh
# shellcheck source=../upstream/mlserver-env.sh
source tests/upstream/mlserver-env.sh

ctx="$E2E_CACHE/context"
venv_context "$TRITON_VENV" "$ctx/triton"
log "building $TRITON_IMAGE"
pm build -q --build-arg "BASE=$PYTHON" -f tests/e2e/images/triton.Dockerfile -t "$TRITON_IMAGE" "$ctx/triton" >/dev/null

venv_context "$MLSERVER_VENV" "$ctx/mlserver"
log "building $MLSERVER_IMAGE"
pm build -q --build-arg "BASE=$PYTHON" -f tests/e2e/images/mlserver.Dockerfile -t "$MLSERVER_IMAGE" "$ctx/mlserver" >/dev/null

venv_context "$TEST_VENV" "$ctx/client"
cp -a "$TEST_VENV"/libexec/perf_analyzer-*/perf_analyzer "$ctx/client/perf_analyzer"
log "building $CLIENT_IMAGE"
pm build -q --build-arg "BASE=$PYTHON" -f tests/e2e/images/client.Dockerfile -t "$CLIENT_IMAGE" "$ctx/client" >/dev/null
rm -rf "$ctx"

# ---------------------------------------------------------------- archives for containerd

for image in "$PAUSE_IMAGE" "$SIDECAR_IMAGE" "$OPERATOR_IMAGE" "$STORAGE_IMAGE" "$TRITON_IMAGE" "$MLSERVER_IMAGE" "$CLIENT_IMAGE"; do
  id="$(pm image inspect --format '{{.Id}}' "$image")"
  file="$archives/$(basename "${image%%:*}")-${id:0:12}.tar"
  if [[ ! -f "$file" ]]; then
    rm -f "$archives/$(basename "${image%%:*}")"-*.tar
    # A Docker archive: containerd names the image from its RepoTags.
    pm save -q --format docker-archive -o "$file.tmp" "$image"
    mv "$file.tmp" "$file"
  fi
  echo "$image $file $id"
done
