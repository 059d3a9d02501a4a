#!/usr/bin/env bash
# Prepare the Python environment used by the conformance suite
# (tests/conformance). Idempotent: run it again at any time; it only does
# what is missing.
#
# Creates a virtual environment with:
#   tritonclient[all]==2.71.0, pytest, numpy, requests, nvidia-cuda-runtime-cu12, h2,
#   opentelemetry-proto (the OTLP receiver of the trace tests, tests/tools/otlp_receiver.py)
# and installs perf_analyzer 2.45.0 (the last build shipped inside the
# tritonclient wheel that runs on glibc < 2.38) as <venv>/bin/perf_analyzer,
# a wrapper that points LD_LIBRARY_PATH at libcudart.so.12 from the
# nvidia-cuda-runtime-cu12 wheel. perf_analyzer also needs Debian's
# libb64-0d, installed with apt-get when missing.
#
# Usage (from anywhere):  tests/tools/setup-python.sh
#
# Environment (all optional):
#   INFERGATE_VENV     venv location (default: <repo root>/.venv)
#   INFERGATE_PYTHON   interpreter used to create the venv (default: python3.11,
#                      falling back to python3)
#   PIP_FLAGS          extra flags for pip install / pip download
#   SKIP_PERF_ANALYZER=1  do not install perf_analyzer (and skip apt-get)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO_ROOT"

VENV="${INFERGATE_VENV:-$PWD/.venv}"
PY="${INFERGATE_PYTHON:-}"
PIP_FLAGS="${PIP_FLAGS:-}"

TRITONCLIENT_VERSION="2.71.0"
PERF_ANALYZER_WHEEL_VERSION="2.45.0"

log() { printf '[setup-python] %s\n' "$*" >&2; }
# shellcheck source=lib.sh
source "$REPO_ROOT/tests/tools/lib.sh"

# ------------------------------------------------------------------ venv
if [ ! -x "$VENV/bin/python" ]; then
  if [ -z "$PY" ]; then
    if command -v python3.11 >/dev/null 2>&1; then PY=python3.11; else PY=python3; fi
  fi
  command -v "$PY" >/dev/null 2>&1 || { log "no Python interpreter '$PY' (set INFERGATE_PYTHON)"; exit 1; }
  log "creating venv $VENV with $PY"
  if ! "$PY" -m venv "$VENV"; then
    log "venv creation failed; on Debian install python3-venv (apt-get install python3-venv)"
    exit 1
  fi
fi
VPY="$VENV/bin/python"

# Installed version of distribution $1 in the venv, or empty.
dist_version() {
  "$VPY" - "$1" <<'PY' 2>/dev/null || true
import sys
from importlib import metadata
try:
    print(metadata.version(sys.argv[1]))
except metadata.PackageNotFoundError:
    pass
PY
}

want=()
[ "$(dist_version tritonclient)" = "$TRITONCLIENT_VERSION" ] || want+=("tritonclient[all]==$TRITONCLIENT_VERSION")
# The [all] extra brings grpcio/protobuf/aiohttp/etc.; check one of them so a
# half-finished install is repaired.
[ -n "$(dist_version grpcio)" ] || want+=("tritonclient[all]==$TRITONCLIENT_VERSION")
for dist in pytest numpy requests nvidia-cuda-runtime-cu12 h2 opentelemetry-proto; do
  [ -n "$(dist_version "$dist")" ] || want+=("$dist")
done
if [ ${#want[@]} -gt 0 ]; then
  # de-duplicate
  mapfile -t want < <(printf '%s\n' "${want[@]}" | awk '!seen[$0]++')
  log "pip install ${want[*]}"
  # shellcheck disable=SC2086
  "$VPY" -m pip install -q --disable-pip-version-check $PIP_FLAGS "${want[@]}"
fi

SITE_PACKAGES="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

# ------------------------------------------------------------------ perf_analyzer
PA_WRAPPER="$VENV/bin/perf_analyzer"
PA_DIR="$VENV/libexec/perf_analyzer-$PERF_ANALYZER_WHEEL_VERSION"
PA_BIN="$PA_DIR/perf_analyzer"

if [ "${SKIP_PERF_ANALYZER:-0}" != "1" ]; then
  case "$(uname -m)" in
    x86_64) PA_PLATFORM=manylinux1_x86_64 ;;
    aarch64) PA_PLATFORM=manylinux2014_aarch64 ;;
    *) PA_PLATFORM="" ;;
  esac
  if [ -z "$PA_PLATFORM" ]; then
    log "no perf_analyzer build for $(uname -m); skipping it"
  else
    apt_install libb64-0d
    if [ ! -x "$PA_BIN" ]; then
      dl="$(mktemp -d)"
      trap 'rm -rf "$dl"' EXIT
      log "downloading tritonclient==$PERF_ANALYZER_WHEEL_VERSION ($PA_PLATFORM) for its perf_analyzer"
      # shellcheck disable=SC2086
      "$VPY" -m pip download -q --disable-pip-version-check $PIP_FLAGS --no-deps \
        --only-binary=:all: --platform "$PA_PLATFORM" \
        -d "$dl" "tritonclient==$PERF_ANALYZER_WHEEL_VERSION"
      mkdir -p "$PA_DIR"
      "$VPY" - "$dl" "$PA_BIN" "$PERF_ANALYZER_WHEEL_VERSION" <<'PY'
import glob, os, sys, zipfile
dl, dest, ver = sys.argv[1:]
wheels = glob.glob(os.path.join(dl, f"tritonclient-{ver}-*.whl"))
if not wheels:
    sys.exit(f"no tritonclient {ver} wheel in {dl}")
member = f"tritonclient-{ver}.data/data/bin/perf_analyzer"
with zipfile.ZipFile(wheels[0]) as zf, open(dest + ".tmp", "wb") as out:
    out.write(zf.read(member))
os.chmod(dest + ".tmp", 0o755)
os.replace(dest + ".tmp", dest)
PY
    fi
    CUDART_LIB="$(find "$SITE_PACKAGES/nvidia" -name 'libcudart.so.12*' -print -quit 2>/dev/null || true)"
    if [ -z "$CUDART_LIB" ]; then
      log "libcudart.so.12 not found under $SITE_PACKAGES/nvidia (nvidia-cuda-runtime-cu12)"
      exit 1
    fi
    CUDART_DIR="$(dirname "$CUDART_LIB")"
    # The wheel ships libcudart.so.12 (no unversioned name), which is what
    # perf_analyzer links against.
    tmp_wrapper="$PA_WRAPPER.tmp.$$"
    cat >"$tmp_wrapper" <<EOF
#!/bin/sh
# perf_analyzer $PERF_ANALYZER_WHEEL_VERSION (from the tritonclient wheel), written by tests/tools/setup-python.sh
LD_LIBRARY_PATH="$CUDART_DIR\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
exec "$PA_BIN" "\$@"
EOF
    chmod 0755 "$tmp_wrapper"
    if cmp -s "$tmp_wrapper" "$PA_WRAPPER"; then rm -f "$tmp_wrapper"; else mv -f "$tmp_wrapper" "$PA_WRAPPER"; fi
    if command -v ldd >/dev/null 2>&1 &&
       LD_LIBRARY_PATH="$CUDART_DIR" ldd "$PA_BIN" 2>/dev/null | grep -q 'not found'; then
      log "warning: perf_analyzer has unresolved libraries:"
      LD_LIBRARY_PATH="$CUDART_DIR" ldd "$PA_BIN" | grep 'not found' >&2 || true
    fi
  fi
fi

# ------------------------------------------------------------------ summary
echo "venv:           $VENV"
echo "python:         $VPY ($("$VPY" -c 'import sys; print(sys.version.split()[0])'))"
echo "tritonclient:   $(dist_version tritonclient)"
echo "pytest:         $(dist_version pytest)"
if [ -x "$PA_WRAPPER" ]; then
  echo "perf_analyzer:  $PA_WRAPPER (binary $PA_BIN)"
else
  echo "perf_analyzer:  not installed"
fi
echo
echo "run the conformance suite:"
echo "  $VPY -m pytest tests/conformance"
