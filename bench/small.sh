#!/usr/bin/env bash
# One of the small benchmarks, each a script of its own in bench/: builds the release sidecar,
# installs perf_analyzer and the test tools' packages (tests/tools/setup-python.sh), then runs it.
#   bench/small.sh trace_overhead [--rounds 3]   what tracing costs (docs/tracing.md)
#   bench/small.sh sequence_peers [--rounds 3]   what a forwarded sequence request costs (docs/sequences.md)
#   bench/small.sh sidecar_rss [--rounds 3]      the sidecar's resident memory per setting (docs/e2e.md)
#   bench/small.sh canary_split [--rounds 3]     what a canary's split costs a call (docs/sidecar.md)
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
case "${1:-}" in
  trace_overhead | sequence_peers | sidecar_rss | canary_split) script="bench/$1.py"; shift ;;
  *) echo "usage: bench/small.sh trace_overhead|sequence_peers|sidecar_rss|canary_split [--rounds N] [--interval-ms MS]" >&2; exit 2 ;;
esac
tests/tools/setup-python.sh >&2
cargo build --release --locked -q -p infergate-sidecar
exec .venv/bin/python "$script" "$@"
