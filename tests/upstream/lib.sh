# Shared by run-triton.sh, run-kserve.sh and run-mlserver.sh: the sidecar binary, process
# control, free ports, readiness, and the sidecar's bound addresses. Source it after defining
# `log` and SIDECAR_BIN; set LIB_PY (a Python 3 interpreter, standard library only) before
# calling the functions that run Python, and RC before `fail`.

ensure_sidecar() { # builds the sidecar when SIDECAR_BIN is the default path and missing
  [ -x "$SIDECAR_BIN" ] && return 0
  if [ -z "${INFERGATE_SIDECAR_BIN:-}" ] && command -v cargo >/dev/null 2>&1; then
    log "building the sidecar (cargo build -p infergate-sidecar)"
    cargo build -q -p infergate-sidecar
  else
    log "sidecar binary not found at $SIDECAR_BIN (build it: cargo build -p infergate-sidecar)"
    exit 1
  fi
}

stop_pid() { # pid, grace seconds: SIGTERM, then SIGKILL after the grace period
  local pid="$1" grace="$2" i=0
  [ -n "$pid" ] || return 0
  kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [ "$i" -lt $((grace * 10)) ]; do sleep 0.1; i=$((i + 1)); done
  if kill -0 "$pid" 2>/dev/null; then
    log "pid $pid still running after ${grace}s; SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

fail() { # message [log file to show]: exit status 4
  log "$1"
  if [ -n "${2:-}" ] && [ -f "$2" ]; then
    log "last lines of $2:"
    tail -n 40 "$2" >&2
  fi
  RC=4
  exit
}

free_ports() { # count: that many free ports, from below the kernel's ephemeral range (tests/tools/ports.py says why)
  PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/../tools" && pwd)" "$LIB_PY" -c \
    'import sys; from ports import free_ports; print(*free_ports(int(sys.argv[1])))' "$1"
}

# wait_ready URL PID SECONDS: 0 when URL answers 200, 2 when PID exited, 1 on timeout.
wait_ready() {
  "$LIB_PY" - "$1" "$2" "$3" <<'PY'
import os, sys, time, urllib.request
url, pid, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
deadline = time.monotonic() + limit
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit(2)
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            if r.status == 200:
                sys.exit(0)
    except Exception:
        pass
    time.sleep(0.2)
sys.exit(1)
PY
}

# sidecar_addrs LOG PID SECONDS: "http grpc metrics admin" (host:port each), read from the
# addresses the sidecar logs as JSON once bound; status 1 if they do not appear in time.
sidecar_addrs() {
  "$LIB_PY" - "$1" "$2" "$3" <<'PY'
import json, os, sys, time
path, pid, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
keys = ("http_addr", "grpc_addr", "metrics_addr", "admin_addr")
found = {}

def walk(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in keys and isinstance(v, str):
                found.setdefault(k, v)
            else:
                walk(v)
    elif isinstance(obj, list):
        for v in obj:
            walk(v)

def connectable(addr):
    host, _, port = addr.rpartition(":")
    if host in ("0.0.0.0", "[::]", "::", ""):
        host = "127.0.0.1"
    return f"{host}:{port}"

deadline = time.monotonic() + limit
while time.monotonic() < deadline and not all(k in found for k in keys):
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            start = line.find("{")
            if start >= 0:
                try:
                    walk(json.loads(line[start:]))
                except ValueError:
                    pass
    if all(k in found for k in keys):
        break
    try:
        os.kill(pid, 0)
    except OSError:
        break
    time.sleep(0.1)
if not all(k in found for k in keys):
    sys.exit(1)
print(*(connectable(found[k]) for k in keys))
PY
}
