# Installs (when missing) KServe's Python ModelServer in its own venv, plus the conformance venv
# (tritonclient, pytest, perf_analyzer). Source it from a script that has set REPO_ROOT and
# defined `log`; it sets:
#   KSERVE_VENV KPY (its interpreter) KSERVE_VERSION TEST_VENV (the conformance venv)
#
# Environment (all optional):
#   INFERGATE_KSERVE_VENV    venv with kserve (default: <repo>/.venv-kserve)
#   INFERGATE_KSERVE_PYTHON  interpreter for that venv (default: python3.11, else python3;
#                            kserve 0.21 wants Python 3.10..3.13)
#   INFERGATE_VENV           the conformance venv (default: <repo>/.venv)
#   PIP_FLAGS                extra flags for pip install

# The newest release at the time of writing; no extras (storage, logging, ray, llm), so the
# venv holds the ModelServer and its REST/gRPC stack only. tests/upstream/kserve/skips.py
# names the same version in its LABEL.
KSERVE_VERSION="0.21.0"
KSERVE_VENV="${INFERGATE_KSERVE_VENV:-$REPO_ROOT/.venv-kserve}"
TEST_VENV="${INFERGATE_VENV:-$REPO_ROOT/.venv}"
PIP_FLAGS="${PIP_FLAGS:-}"

# shellcheck source=../tools/lib.sh
source "$REPO_ROOT/tests/tools/lib.sh"

kserve_dist_version() { # venv, distribution
  "$1/bin/python" - "$2" <<'PY' 2>/dev/null || true
import sys
from importlib import metadata
try:
    print(metadata.version(sys.argv[1]))
except metadata.PackageNotFoundError:
    pass
PY
}

kserve_default_python() {
  if command -v python3.11 >/dev/null 2>&1; then echo python3.11; else echo python3; fi
}

# Debian's interpreters need python3-venv (ensurepip) to create venvs.
kserve_venv_support() {
  command -v "$1" >/dev/null 2>&1 || { log "no Python interpreter '$1'"; exit 1; }
  "$1" -c 'import ensurepip' >/dev/null 2>&1 || apt_install python3-venv
}

# The conformance venv (tritonclient, pytest, perf_analyzer); idempotent.
if [ ! -x "$TEST_VENV/bin/python" ]; then
  kserve_venv_support "${INFERGATE_PYTHON:-$(kserve_default_python)}"
fi
INFERGATE_VENV="$TEST_VENV" "$REPO_ROOT/tests/tools/setup-python.sh" >&2

# The ModelServer's venv.
if [ ! -x "$KSERVE_VENV/bin/python" ]; then
  PY="${INFERGATE_KSERVE_PYTHON:-$(kserve_default_python)}"
  kserve_venv_support "$PY"
  log "creating venv $KSERVE_VENV with $PY"
  "$PY" -m venv "$KSERVE_VENV"
fi
KPY="$KSERVE_VENV/bin/python"
# grpcio is checked too, so that a half-finished install is repaired.
if [ "$(kserve_dist_version "$KSERVE_VENV" kserve)" != "$KSERVE_VERSION" ] ||
   [ -z "$(kserve_dist_version "$KSERVE_VENV" grpcio)" ]; then
  log "pip install kserve==$KSERVE_VERSION into $KSERVE_VENV (under 1 minute)"
  # shellcheck disable=SC2086
  "$KPY" -m pip install -q --disable-pip-version-check $PIP_FLAGS "kserve==$KSERVE_VERSION"
fi
