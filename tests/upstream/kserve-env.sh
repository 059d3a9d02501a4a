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

# shellcheck source=venv.sh
source "$REPO_ROOT/tests/upstream/venv.sh"
ensure_test_venv
# grpcio is checked too, so that a half-finished install is repaired.
ensure_server_venv "$KSERVE_VENV" "${INFERGATE_KSERVE_PYTHON:-$(default_python)}" \
  kserve "$KSERVE_VERSION" grpcio
KPY="$KSERVE_VENV/bin/python"
