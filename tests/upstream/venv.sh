# Shared by triton-env.sh, kserve-env.sh and mlserver-env.sh: the conformance venv and one venv
# per model server. Source it after setting REPO_ROOT and TEST_VENV and defining `log`.

# shellcheck source=../tools/lib.sh
source "$REPO_ROOT/tests/tools/lib.sh"

dist_version() { # venv, distribution: its installed version, or nothing
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
ensure_test_venv() {
  if [ ! -x "$TEST_VENV/bin/python" ]; then
    ensure_venv_support "${INFERGATE_PYTHON:-$(default_python)}"
  fi
  INFERGATE_VENV="$TEST_VENV" "$REPO_ROOT/tests/tools/setup-python.sh" >&2
}

# ensure_server_venv VENV INTERPRETER DISTRIBUTION VERSION [ALSO]: creates VENV with INTERPRETER
# when missing, and installs DISTRIBUTION==VERSION when another version is there or when the
# distribution ALSO is missing (a half-finished install is repaired).
ensure_server_venv() {
  local venv="$1" py="$2" dist="$3" version="$4" also="${5:-}"
  if [ ! -x "$venv/bin/python" ]; then
    ensure_venv_support "$py"
    log "creating venv $venv with $py"
    "$py" -m venv "$venv"
  fi
  if [ "$(dist_version "$venv" "$dist")" != "$version" ] ||
     { [ -n "$also" ] && [ -z "$(dist_version "$venv" "$also")" ]; }; then
    log "pip install $dist==$version into $venv (about a minute)"
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q --disable-pip-version-check ${PIP_FLAGS:-} "$dist==$version"
  fi
}
