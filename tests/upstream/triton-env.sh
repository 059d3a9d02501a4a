# Installs (when missing) and locates Triton Inference Server 2.51 from the nvidia-pytriton wheel,
# CPU only, with its python backend working, plus the conformance venv (tritonclient, pytest,
# perf_analyzer). Source it from a script that has set REPO_ROOT and defined `log`; it sets:
#   TRITON_VENV TPY TRITON_HOME TRITON_BIN LD_PATH (the library path tritonserver needs)
#   TEST_VENV (the conformance venv)
# Run tritonserver with PATH starting with "$TRITON_VENV/bin" (the python backend stub finds its
# interpreter, and numpy, through the first python3 on PATH) and LD_LIBRARY_PATH="$LD_PATH".
#
# Environment (all optional):
#   INFERGATE_TRITON_VENV    venv with nvidia-pytriton==0.7.0 (default: <repo>/.venv-triton)
#   INFERGATE_TRITON_PYTHON  interpreter for that venv (default: python3.11, else python3)
#   INFERGATE_VENV           the conformance venv (default: <repo>/.venv)
#   PIP_FLAGS                extra flags for pip install

PYTRITON_VERSION="0.7.0" # ships tritonserver 2.51.0 with the python backend
TRITON_VENV="${INFERGATE_TRITON_VENV:-$REPO_ROOT/.venv-triton}"
TEST_VENV="${INFERGATE_VENV:-$REPO_ROOT/.venv}"
PIP_FLAGS="${PIP_FLAGS:-}"

# shellcheck source=venv.sh
source "$REPO_ROOT/tests/upstream/venv.sh"
ensure_test_venv
# numpy is checked too: the python backend's models need it.
ensure_server_venv "$TRITON_VENV" "${INFERGATE_TRITON_PYTHON:-$(default_python)}" \
  nvidia-pytriton "$PYTRITON_VERSION" numpy
TPY="$TRITON_VENV/bin/python"

SITE_PACKAGES="$("$TPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
TRITON_HOME="$SITE_PACKAGES/pytriton/tritonserver"
TRITON_BIN="$TRITON_HOME/bin/tritonserver"
TRITON_LIBS="$SITE_PACKAGES/nvidia_pytriton.libs"
PY_VER="$("$TPY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
PY_LIBDIR="$("$TPY" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')"
[ -x "$TRITON_BIN" ] || chmod +x "$TRITON_BIN"

# The python backend runs its stub from next to libtriton_python.so; the wheel keeps one
# stub per Python version aside (PyTriton copies the right one into its workspace).
STUB_SRC="$TRITON_HOME/python_backend_stubs/$PY_VER/triton_python_backend_stub"
STUB_DST="$TRITON_HOME/backends/python/triton_python_backend_stub"
[ -f "$STUB_SRC" ] || { log "the wheel has no python backend stub for Python $PY_VER (use 3.8..3.13: INFERGATE_TRITON_PYTHON)"; exit 1; }
if ! cmp -s "$STUB_SRC" "$STUB_DST"; then
  cp "$STUB_SRC" "$STUB_DST.tmp"
  chmod +x "$STUB_DST.tmp"
  mv -f "$STUB_DST.tmp" "$STUB_DST"
fi

# The stub embeds libpython of the venv's interpreter: its LIBDIR (pyenv, python.org
# builds) or Debian's libpython3.X package.
LD_PATH="$TRITON_LIBS"
if [ -n "$PY_LIBDIR" ] && [ -e "$PY_LIBDIR/libpython$PY_VER.so.1.0" ]; then
  LD_PATH="$PY_LIBDIR:$LD_PATH"
fi
LD_PATH="$LD_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if command -v ldd >/dev/null 2>&1 &&
   LD_LIBRARY_PATH="$LD_PATH" ldd "$STUB_DST" 2>/dev/null | grep -q "libpython$PY_VER.*not found"; then
  apt_install "libpython$PY_VER"
fi

