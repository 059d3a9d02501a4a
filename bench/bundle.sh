#!/usr/bin/env bash
# Packs what bench/harness.py needs into a folder for a machine that can reach no package
# registry (such as a lent GPU machine), to be run there by bench/offline-run.sh:
#   bin.tar.xz           release builds of the sidecar, bench/noop-server, bench/relay, bench/h2-relay
#   triton.tar.xz        tritonserver 2.51 from the nvidia-pytriton wheel: its libraries, the python
#                        backend and the stub for the target machine's Python (BUNDLE_PYTHON)
#   numpy.tar.xz         numpy 1.26 for that Python: the stub's pybind11 reads numpy 1's array
#                        layout, and with numpy 2 Triton answers "output tensor shape does not
#                        match size of output"
#   tools.tar.xz         perf_analyzer 2.45 and wrk, with the libraries they need beyond glibc,
#                        libstdc++, OpenSSL 3 and zlib (libb64, libcudart 12, LuaJIT)
#   tritonclient.tar.xz  tritonclient's Python package and python-rapidjson (the harness's gRPC
#                        readiness checks and the noop server's recorded answers; grpcio,
#                        protobuf and numpy come from the machine)
#   pyextra.tar.xz       what tritonclient.http needs beyond those (gevent, greenlet, zope.*,
#                        geventhttpclient, brotli), in the test venv's versions, for the CUDA
#                        clients and tests (bench/gpu_checks.py; cuda-python comes from the machine)
#   pkgres.tar.xz        setuptools 80 for its pkg_resources, which tritonclient's CUDA utilities
#                        import: used only where the machine's setuptools no longer has it
#   perf.tar.xz          Debian's perf with the libraries it needs beyond glibc and libstdc++
#   examples.tar.xz      simple_http_cudashm_client.py and simple_grpc_cudashm_client.py, unmodified,
#                        from TRITON_CLIENT_EXAMPLES (the client repository's src/python/examples;
#                        left out, with a warning, when unset)
# Usage: bench/bundle.sh DIR     (about 55 MB; BUNDLE_PYTHON=3.12 by default)
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
log() { printf '[bundle] %s\n' "$*" >&2; }
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
DEST="$(mkdir -p "$1" && cd "$1" && pwd)"
BUNDLE_PYTHON="${BUNDLE_PYTHON:-3.12}"

# shellcheck source=../tests/upstream/triton-env.sh
source tests/upstream/triton-env.sh
command -v wrk >/dev/null || apt_install wrk
command -v perf >/dev/null || apt_install linux-perf
cargo build --release --locked -q -p infergate-sidecar -p infergate-bench-noop-server \
  -p infergate-bench-relay -p infergate-bench-h2-relay

STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
pack() { # pack NAME DIR: DIR's contents as NAME.tar.xz
  tar -C "$2" -cf - . | xz -T0 -9 > "$DEST/$1.tar.xz"
  log "$1.tar.xz: $(du -h "$DEST/$1.tar.xz" | cut -f1)"
}

mkdir -p "$STAGE/bin"
cp target/release/{infergate-sidecar,noop-server,relay,h2-relay} "$STAGE/bin/"
# Symbols stay (for profiles); debug information goes (a third of the bundle otherwise).
strip --strip-debug "$STAGE"/bin/*
pack bin "$STAGE/bin"

# The wheel's layout is kept: the stub and tritonserver find the libraries by relative RPATHs.
[ -f "$TRITON_HOME/python_backend_stubs/$BUNDLE_PYTHON/triton_python_backend_stub" ] ||
  { log "the wheel has no python backend stub for Python $BUNDLE_PYTHON"; exit 1; }
tar -C "$SITE_PACKAGES" -cf - --exclude=__pycache__ --exclude='libpython3-*' \
  nvidia_pytriton.libs pytriton/tritonserver/bin pytriton/tritonserver/backends \
  pytriton/tritonserver/caches "pytriton/tritonserver/python_backend_stubs/$BUNDLE_PYTHON" |
  xz -T0 -9 > "$DEST/triton.tar.xz"
log "triton.tar.xz: $(du -h "$DEST/triton.tar.xz" | cut -f1)"

mkdir -p "$STAGE/wheel" "$STAGE/numpy"
"$TEST_VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps \
  --only-binary=:all: --python-version "$BUNDLE_PYTHON" --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$STAGE/wheel" numpy==1.26.4
(cd "$STAGE/numpy" && "$TEST_VENV/bin/python" -m zipfile -e "$STAGE"/wheel/numpy-*.whl . &&
  find . -type d -name tests -prune -exec rm -rf {} + && rm -rf numpy/f2py numpy/distutils)
pack numpy "$STAGE/numpy"

mkdir -p "$STAGE/tools/lib"
PA_BIN="$(find "$TEST_VENV/libexec" -name perf_analyzer -type f | head -1)"
CUDART="$(find "$TEST_VENV" -name 'libcudart.so.12' | head -1)"
[ -n "$PA_BIN" ] && [ -n "$CUDART" ] || { log "perf_analyzer or libcudart.so.12 not found in $TEST_VENV"; exit 1; }
cp "$PA_BIN" "$(command -v wrk)" "$STAGE/tools/"
cp "$CUDART" "$STAGE/tools/lib/"
for lib in libb64.so.0d libluajit-5.1.so.2; do
  cp "$(ldconfig -p | awk -v l="$lib" '$1 == l { print $NF; exit }')" "$STAGE/tools/lib/"
done
pack tools "$STAGE/tools"

# tritonclient's own files, and python-rapidjson (it imports it) for the target Python.
SITE="$("$TEST_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
mkdir -p "$STAGE/tritonclient"
cp -r "$SITE/tritonclient" "$STAGE/tritonclient/"
find "$STAGE/tritonclient" -name __pycache__ -prune -exec rm -rf {} +
"$TEST_VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps \
  --only-binary=:all: --python-version "$BUNDLE_PYTHON" --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$STAGE/wheel" python-rapidjson
(cd "$STAGE/tritonclient" && "$TEST_VENV/bin/python" -m zipfile -e "$STAGE"/wheel/python_rapidjson-*.whl .)
pack tritonclient "$STAGE/tritonclient"

download() { # download DIR REQUIREMENT...: wheels for the target Python, their files unpacked
  local dir=$1
  shift
  mkdir -p "$STAGE/$dir" "$STAGE/wheel-$dir"
  "$TEST_VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps \
    --only-binary=:all: --python-version "$BUNDLE_PYTHON" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$STAGE/wheel-$dir" "$@"
  for wheel in "$STAGE/wheel-$dir"/*.whl; do
    (cd "$STAGE/$dir" && "$TEST_VENV/bin/python" -m zipfile -e "$wheel" .)
  done
  find "$STAGE/$dir" -name __pycache__ -prune -exec rm -rf {} +
}
# The versions the conformance suite runs with here.
pinned() {
  local name
  for name in "$@"; do
    printf '%s==%s\n' "$name" "$("$TEST_VENV/bin/python" -c \
      "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")"
  done
}
# shellcheck disable=SC2046  # one requirement per word
download pyextra $(pinned gevent greenlet zope.event zope.interface geventhttpclient brotli)
pack pyextra "$STAGE/pyextra"
download pkgres setuptools==80.9.0
pack pkgres "$STAGE/pkgres"

mkdir -p "$STAGE/perf/lib"
cp -L "$(command -v perf)" "$STAGE/perf/"
ldd "$(command -v perf)" | awk '$3 ~ /^\// { print $3 }' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*|ld-linux*) ;; # the machine's own
    *) cp -L "$lib" "$STAGE/perf/lib/" ;;
  esac
done
pack perf "$STAGE/perf"

if [ -n "${TRITON_CLIENT_EXAMPLES:-}" ]; then
  mkdir -p "$STAGE/examples"
  cp "$TRITON_CLIENT_EXAMPLES"/simple_{http,grpc}_cudashm_client.py "$STAGE/examples/"
  pack examples "$STAGE/examples"
else
  log "TRITON_CLIENT_EXAMPLES is unset: no example clients in the bundle"
fi
log "done: $(du -sh "$DEST" | cut -f1) in $DEST"
