#!/usr/bin/env bash
# Runs bench/harness.py from a folder made by bench/bundle.sh, on a machine with no package
# registry: it needs bash, taskset and a Python 3 whose version matches the bundle's stub (with
# grpcio and protobuf for tritonclient, and libpython of that version for Triton's python backend).
#   bench/offline-run.sh BUNDLE [harness arguments...]
#   bench/offline-run.sh BUNDLE SCRIPT.py [arguments...]   another script in that environment
#                                                          (bench/gpu_checks.py)
# Environment (optional):
#   PYTHON   the interpreter (default python3)
#   PIN      CLIENT:FRONT:UPSTREAM CPU lists for taskset, e.g. 0-3:4-7:8-15: perf_analyzer and
#            wrk on the first; the sidecar, the relays and the noop server on the second; Triton
#            on the third. Unset: nothing pinned.
#   INFERGATE_OFFLINE_HOME  where the bundle is unpacked (default /tmp/infergate-offline; once)
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -ge 1 ] || { echo "usage: $0 BUNDLE [harness arguments...]" >&2; exit 2; }
BUNDLE="$(cd "$1" && pwd)"
shift
H="${INFERGATE_OFFLINE_HOME:-/tmp/infergate-offline}"
PYTHON="${PYTHON:-python3}"
log() { printf '[offline] %s\n' "$*" >&2; }

if [ ! -e "$H/.unpacked" ]; then
  # Python's tarfile, not xz(1), which such a machine may lack.
  "$PYTHON" - "$BUNDLE" "$H" <<'PY'
import sys
import tarfile

bundle, home = sys.argv[1:]
safe = {"filter": "tar"} if hasattr(tarfile, "data_filter") else {}
for part in ("bin", "triton", "numpy", "tools", "tritonclient"):
    with tarfile.open(f"{bundle}/{part}.tar.xz") as archive:
        archive.extractall(f"{home}/{part}", **safe)
# Parts added for the GPU machine's checks, absent from older bundles.
for part in ("pyextra", "pkgres", "perf", "examples"):
    try:
        with tarfile.open(f"{bundle}/{part}.tar.xz") as archive:
            archive.extractall(f"{home}/{part}", **safe)
    except FileNotFoundError:
        print(f"[offline] the bundle has no {part}", file=sys.stderr)
PY
  touch "$H/.unpacked"
fi

PY_VER="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
TRITON_HOME="$H/triton/pytriton/tritonserver"
STUB="$TRITON_HOME/python_backend_stubs/$PY_VER/triton_python_backend_stub"
[ -f "$STUB" ] || { log "the bundle has no python backend stub for Python $PY_VER"; exit 1; }
install -m 0755 "$STUB" "$TRITON_HOME/backends/python/triton_python_backend_stub"
# The stub embeds libpython$PY_VER: the interpreter's LIBDIR, or wherever the loader knows it.
PY_LIBDIR="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')"
if [ ! -e "$PY_LIBDIR/libpython$PY_VER.so.1.0" ]; then
  found="$(ldconfig -p | awk -v l="libpython$PY_VER.so.1.0" '$1 == l { print $NF; exit }')"
  PY_LIBDIR="${found:+$(dirname "$found")}"
fi
[ -n "$PY_LIBDIR" ] || log "libpython$PY_VER.so.1.0 not found: Triton's python backend will not start"

# Each program through a wrapper: its libraries, and its CPUs when PIN is set.
IFS=: read -r CLIENT_CPUS FRONT_CPUS UPSTREAM_CPUS <<< "${PIN:-::}"
W="$H/wrap"
mkdir -p "$W"
wrap() { # wrap NAME CPUS PROGRAM [ENV...]
  local name=$1 cpus=$2 program=$3
  shift 3
  {
    echo '#!/bin/sh'
    for setting in "$@"; do echo "export $setting"; done
    if [ -n "$cpus" ]; then echo "exec taskset -c $cpus $program \"\$@\""; else echo "exec $program \"\$@\""; fi
  } > "$W/$name"
  chmod +x "$W/$name"
}
TOOLS_LD="LD_LIBRARY_PATH=$H/tools/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
wrap perf_analyzer "$CLIENT_CPUS" "$H/tools/perf_analyzer" "$TOOLS_LD"
wrap wrk "$CLIENT_CPUS" "$H/tools/wrk" "$TOOLS_LD"
for program in infergate-sidecar noop-server relay h2-relay; do
  wrap "$program" "$FRONT_CPUS" "$H/bin/$program"
done
wrap tritonserver "$UPSTREAM_CPUS" "$TRITON_HOME/bin/tritonserver"

export INFERGATE_SIDECAR_BIN="$W/infergate-sidecar" NOOP_SERVER="$W/noop-server" RELAY="$W/relay" \
  H2_RELAY="$W/h2-relay" PERF_ANALYZER="$W/perf_analyzer" WRK="$W/wrk" TRITON_BIN="$W/tritonserver" \
  TRITON_HOME
# The stub finds its interpreter, and so its site-packages, through the first python3 on PATH;
# it ignores PYTHONPATH. Its own venv, made by hand (the machine may lack ensurepip), holds numpy
# 1.26 alone (see bench/bundle.sh).
STUB_VENV="$H/stub-venv"
if [ ! -e "$STUB_VENV/pyvenv.cfg" ]; then
  BASE_PYTHON="$("$PYTHON" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')"
  BASE_PYTHON="$(readlink -f "$BASE_PYTHON")"
  mkdir -p "$STUB_VENV/bin" "$STUB_VENV/lib/python$PY_VER"
  ln -sfn "$BASE_PYTHON" "$STUB_VENV/bin/python3"
  ln -sfn "$H/numpy" "$STUB_VENV/lib/python$PY_VER/site-packages"
  printf 'home = %s\ninclude-system-site-packages = false\nversion = %s\n' \
    "$(dirname "$BASE_PYTHON")" "$PY_VER" > "$STUB_VENV/pyvenv.cfg"
fi
export TRITON_VENV="$STUB_VENV" TRITON_LD_PATH="$H/triton/nvidia_pytriton.libs${PY_LIBDIR:+:$PY_LIBDIR}"
# tritonclient for the harness, and what its HTTP client needs for the CUDA checks.
export PYTHONPATH="$H/tritonclient:$H/pyextra${PYTHONPATH:+:$PYTHONPATH}"
# tritonclient's CUDA utilities import pkg_resources, which recent setuptools dropped.
if ! "$PYTHON" -c 'import pkg_resources' 2>/dev/null && [ -d "$H/pkgres" ]; then
  export PYTHONPATH="$PYTHONPATH:$H/pkgres"
fi
if [ -x "$H/perf/perf" ]; then
  wrap perf "" "$H/perf/perf" "LD_LIBRARY_PATH=$H/perf/lib"
  export PERF="$W/perf"
fi
[ -d "$H/examples" ] && export TRITON_CLIENT_EXAMPLES="$H/examples"
cd "$REPO_ROOT"
if [[ "${1:-}" == *.py ]]; then
  script=$1
  shift
  exec "$PYTHON" "$script" "$@"
fi
exec "$PYTHON" bench/harness.py "$@"
