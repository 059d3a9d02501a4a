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

# shellcheck source=venv.sh
source "$REPO_ROOT/tests/upstream/venv.sh"
ensure_test_venv
ensure_server_venv "$MLSERVER_VENV" "${INFERGATE_MLSERVER_PYTHON:-$(default_python)}" \
  mlserver "$MLSERVER_VERSION"
MPY="$MLSERVER_VENV/bin/python"
MLSERVER_BIN="$MLSERVER_VENV/bin/mlserver"
[ -x "$MLSERVER_BIN" ] || { log "no mlserver command in $MLSERVER_VENV"; exit 1; }
