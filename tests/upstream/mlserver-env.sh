# Installs (when missing) MLServer in its own venv, plus the conformance venv (tritonclient,
# pytest, perf_analyzer). Source it from a script that has set REPO_ROOT and defined `log`; it sets:
#   MLSERVER_VENV MPY (its interpreter) MLSERVER_BIN (the `mlserver` command)
#   TEST_VENV (the conformance venv)
#
# Environment (all optional):
#   INFERGATE_MLSERVER_VENV    venv with mlserver (default: <repo>/.venv-mlserver)
#   INFERGATE_MLSERVER_PYTHON  interpreter for that venv (default: python3.11, else python3)
#   INFERGATE_VENV             the conformance venv (default: <repo>/.venv)
#   PIP_FLAGS                  extra flags for pip install

MLSERVER_VERSION="1.7.1" # the newest release; installs from wheels on Python 3.11
MLSERVER_VENV="${INFERGATE_MLSERVER_VENV:-$REPO_ROOT/.venv-mlserver}"
TEST_VENV="${INFERGATE_VENV:-$REPO_ROOT/.venv}"
PIP_FLAGS="${PIP_FLAGS:-}"

# shellcheck source=../tools/lib.sh
source "$REPO_ROOT/tests/tools/lib.sh"

dist_version() { # venv, distribution
  "$1/bin/python" - "$2" <<'PY' 2>/dev/null || true
import sys
from importlib import metadata
try:
    print(metadata.version(sys.argv[1]))
except metadata.PackageNotFoundError:
    pass
PY
}

default_python() {
  if command -v python3.11 >/dev/null 2>&1; then echo python3.11; else echo python3; fi
}

# Debian's interpreters need python3-venv (ensurepip) to create venvs.
ensure_venv_support() {
  command -v "$1" >/dev/null 2>&1 || { log "no Python interpreter '$1'"; exit 1; }
  "$1" -c 'import ensurepip' >/dev/null 2>&1 || apt_install python3-venv
}

# The conformance venv (tritonclient, pytest, perf_analyzer); idempotent.
if [ ! -x "$TEST_VENV/bin/python" ]; then
  ensure_venv_support "${INFERGATE_PYTHON:-$(default_python)}"
fi
INFERGATE_VENV="$TEST_VENV" "$REPO_ROOT/tests/tools/setup-python.sh" >&2

# The MLServer venv.
if [ ! -x "$MLSERVER_VENV/bin/python" ]; then
  PY="${INFERGATE_MLSERVER_PYTHON:-$(default_python)}"
  ensure_venv_support "$PY"
  log "creating venv $MLSERVER_VENV with $PY"
  "$PY" -m venv "$MLSERVER_VENV"
fi
MPY="$MLSERVER_VENV/bin/python"
if [ "$(dist_version "$MLSERVER_VENV" mlserver)" != "$MLSERVER_VERSION" ]; then
  log "pip install mlserver==$MLSERVER_VERSION into $MLSERVER_VENV (about 30 s)"
  # shellcheck disable=SC2086
  "$MPY" -m pip install -q --disable-pip-version-check $PIP_FLAGS "mlserver==$MLSERVER_VERSION"
fi
MLSERVER_BIN="$MLSERVER_VENV/bin/mlserver"
[ -x "$MLSERVER_BIN" ] || { log "no mlserver command in $MLSERVER_VENV"; exit 1; }
