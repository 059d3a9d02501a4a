#!/usr/bin/env bash
# Run Triton's own QA test modules (L0_http, L0_shared_memory, L0_grpc, L0_client_timeout,
# L0_decoupled, L0_trace, L0_logging, L0_secure_grpc, L0_https: Python parts; L0_simple_go_client,
# L0_simple_nodejs_client, L0_client_java: Triton's example clients in other languages;
# L0_batcher: the dynamic batcher's tests, python trial) against the sidecar with its built-in
# models and against a real Triton 2.51 serving the same catalog
# (tests/upstream/make_triton_repo.py, python backend), one server at a time on
# localhost:8000/8001 (the addresses the tests hard-code), and print the table that
# docs/compatibility.md ("Triton's QA tests") shows. Not part of CI or run-all.sh: it takes
# about 20 minutes on 2 CPUs (L0_batcher alone about as long again) and needs ports 8000-8004
# free, and 443 for L0_https (and 8100-8102, where a Triton runs behind the sidecar: for L0_http's generate test,
# whose mock_llm model is Triton's own, and for L0_batcher, whose models the sidecar batches
# in front of a Triton without batchers; tests/triton-qa/batcher_models.py).
#
# Triton's test code is not in this project. It is read from Triton's git repositories,
# branch r24.10 (Triton 2.51): set TRITON_SERVER_GIT, TRITON_CLIENT_GIT and TRITON_COMMON_GIT
# to local clones (bare or not) of github.com/triton-inference-server/server, .../client and
# .../common (the protos, for the other-language clients); when they are unset, the branches
# are cloned once, shallow, into $QA_CACHE (the only network access besides pip, apt, npm,
# Maven and the Go module proxy; see docs/compatibility.md). The files are extracted into
# $QA_CACHE/triton-qa-r24.10 and run from there.
#
# Usage: tests/triton-qa/run.sh [sidecar|triton|sidecar,triton]   (default: both)
#
# Environment (all optional):
#   QA_CACHE          work area (default ${TMPDIR:-/tmp}/infergate-triton-qa)
#   QA_MODULES        comma-separated subset, e.g. L0_http,L0_decoupled
#   QA_VENV           venv with tritonclient[all]==2.71.0, psutil, requests (made when missing)
#   SIDECAR_BIN       sidecar binary (default target/release/infergate-sidecar, built if missing)
#   HEALTH_PROBE      grpc-health-probe binary for L0_grpc's health check (skipped when unset)
#   TRITON_QA_BRANCH  branch of both repositories (default r24.10)
#   plus tests/upstream/triton-env.sh's (INFERGATE_TRITON_VENV, ...)
# Needs nginx and openssl for the basic-auth tests (apt-installed when missing).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO_ROOT"
log() { printf '[triton-qa] %s\n' "$*" >&2; }

TARGETS="${1:-sidecar,triton}"
BRANCH="${TRITON_QA_BRANCH:-r24.10}"
QA_CACHE="${QA_CACHE:-${TMPDIR:-/tmp}/infergate-triton-qa}"
QA_ROOT="$QA_CACHE/triton-qa-$BRANCH"
QA_VENV="${QA_VENV:-$QA_CACHE/venv}"
mkdir -p "$QA_CACHE"

source "$REPO_ROOT/tests/tools/lib.sh"
command -v nginx >/dev/null || apt_install nginx
command -v openssl >/dev/null || apt_install openssl

# ------------------------------------------------------------------ Triton's test files
git_dir() { # NAME VAR: a git dir holding BRANCH
  local name="$1" given="$2"
  if [ -n "$given" ]; then echo "$given"; return; fi
  local dir="$QA_CACHE/$name.git"
  if [ ! -d "$dir" ]; then
    log "cloning triton-inference-server/$name ($BRANCH, shallow) into $dir"
    git clone -q --bare --depth 1 --branch "$BRANCH" \
      "https://github.com/triton-inference-server/$name" "$dir"
  fi
  echo "$dir"
}
ref_of() { # GIT_DIR: BRANCH as the clone names it
  local g="$1" r
  for r in "$BRANCH" "refs/heads/$BRANCH" "origin/$BRANCH" "refs/remotes/origin/$BRANCH"; do
    if git --git-dir="$g" rev-parse -q --verify "$r^{commit}" >/dev/null; then echo "$r"; return; fi
  done
  log "$g has no $BRANCH"; exit 1
}
if [ ! -d "$QA_ROOT/qa/clients" ] || [ ! -d "$QA_ROOT/qa/L0_secure_grpc" ] ||
  [ ! -d "$QA_ROOT/qa/L0_batcher" ]; then
  SERVER_GIT="$(git_dir server "${TRITON_SERVER_GIT:-}")"
  CLIENT_GIT="$(git_dir client "${TRITON_CLIENT_GIT:-}")"
  rm -rf "$QA_ROOT.tmp" && mkdir -p "$QA_ROOT.tmp/qa/clients"
  sref="$(ref_of "$SERVER_GIT")"
  cref="$(ref_of "$CLIENT_GIT")"
  git --git-dir="$SERVER_GIT" archive "$sref" qa/common qa/python_models/execute_delayed_model \
    qa/python_models/add_sub qa/L0_http qa/L0_shared_memory qa/L0_grpc qa/L0_client_timeout \
    qa/L0_decoupled qa/L0_trace qa/L0_logging qa/L0_secure_grpc qa/L0_batcher |
    tar -x -C "$QA_ROOT.tmp"
  git --git-dir="$CLIENT_GIT" archive "$cref" src/python/examples | tar -x -C "$QA_ROOT.tmp"
  mv "$QA_ROOT.tmp"/src/python/examples/*.py "$QA_ROOT.tmp/qa/clients/"
  rm -rf "$QA_ROOT.tmp/src"
  printf 'server %s\nclient %s\n' "$(git --git-dir="$SERVER_GIT" rev-parse "$sref")" \
    "$(git --git-dir="$CLIENT_GIT" rev-parse "$cref")" >"$QA_ROOT.tmp/COMMITS"
  rm -rf "$QA_ROOT" && mv "$QA_ROOT.tmp" "$QA_ROOT"
fi
log "Triton QA files: $QA_ROOT ($(tr '\n' ' ' <"$QA_ROOT/COMMITS"))"

# ------------------------------------------------------------------ other-language clients
export LANG_CLIENTS="$QA_CACHE/lang-clients-$BRANCH"
wanted_any() { # MODULE...: whether QA_MODULES (default: all) names one of them
  local m
  for m in "$@"; do [[ -z "${QA_MODULES:-}" || ",$QA_MODULES," == *",$m,"* ]] && return 0; done
  return 1
}
if wanted_any L0_simple_go_client L0_simple_nodejs_client L0_client_java &&
  [ ! -f "$LANG_CLIENTS/.built" ]; then
  CLIENT_GIT="$(git_dir client "${TRITON_CLIENT_GIT:-}")"
  COMMON_GIT="$(git_dir common "${TRITON_COMMON_GIT:-}")"
  bash "$REPO_ROOT/tests/triton-qa/build-lang-clients.sh" "$CLIENT_GIT" "$COMMON_GIT" \
    "$(ref_of "$CLIENT_GIT")" "$(ref_of "$COMMON_GIT")" "$LANG_CLIENTS"
fi

# ------------------------------------------------------------------ client venv
if [ ! -x "$QA_VENV/bin/python" ]; then
  log "creating $QA_VENV"
  "${INFERGATE_PYTHON:-python3.11}" -m venv "$QA_VENV"
fi
if ! "$QA_VENV/bin/python" -c 'import tritonclient.grpc, tritonclient.http, psutil, requests, sseclient, pytest' 2>/dev/null; then
  "$QA_VENV/bin/python" -m pip install -q --disable-pip-version-check \
    'tritonclient[all]==2.71.0' psutil requests 'numpy<2' sseclient-py pytest
fi

# ------------------------------------------------------------------ servers
export SIDECAR_BIN="${SIDECAR_BIN:-$REPO_ROOT/target/release/infergate-sidecar}"
if [[ "$TARGETS" == *sidecar* ]] && [ ! -x "$SIDECAR_BIN" ]; then
  cargo build --release -p infergate-sidecar
fi
# Triton runs for the triton target, and behind the sidecar for L0_http's generate test
# (Triton's own mock_llm model) and for L0_batcher (python models that the sidecar batches).
if [[ "$TARGETS" == *triton* ]] || [[ ",${QA_MODULES:-L0_http}," == *,L0_http,* ]] ||
  [[ ",${QA_MODULES:-L0_batcher}," == *,L0_batcher,* ]]; then
  # shellcheck source=../upstream/triton-env.sh
  source "$REPO_ROOT/tests/upstream/triton-env.sh"
  export TRITON_BIN TRITON_BACKENDS="$TRITON_HOME/backends"
  export TRITON_PATH="$TRITON_VENV/bin:$PATH" TRITON_LD_PATH="$LD_PATH"
  export TRITON_REPO="$QA_CACHE/triton-repo"
  "$TPY" tests/upstream/make_triton_repo.py "$TRITON_REPO"
fi

export QA_ROOT QA_TARGETS="$TARGETS" QA_PY="$QA_VENV/bin/python"
export QA_OUT="${QA_OUT:-$QA_CACHE/out}"
mkdir -p "$QA_OUT"
exec "$QA_PY" "$REPO_ROOT/tests/triton-qa/run.py"
