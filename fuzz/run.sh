#!/usr/bin/env bash
# Fuzzes every target for a bounded time: fuzz/run.sh [seconds per target] [target...]
#
# Installs cargo-fuzz when missing, builds the targets once (libFuzzer with AddressSanitizer;
# the cargo-fuzz project is fuzz/libfuzzer), replays the committed corpus and every past finding
# (fuzz/regressions/<target>/), then explores for the given time (default 30 s, or
# FUZZ_SECONDS). New inputs go to target/fuzz-corpus/<target>/ (not into the repository); a
# crash, panic, leak or timeout fails the run and leaves the input in
# fuzz/libfuzzer/artifacts/<target>/ with the command to replay it.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-${FUZZ_SECONDS:-30}}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(http_infer generate grpc_infer json_tensor bytes_tensor shm_params operator_children tls_handshake)
fi

log() { printf '[fuzz] %s\n' "$*" >&2; }

if ! cargo fuzz --version >/dev/null 2>&1; then
  log "installing cargo-fuzz"
  cargo install --locked cargo-fuzz --version 0.13.2
fi
# libFuzzer's instrumentation and the sanitizer are unstable compiler flags; the stable
# toolchain of rust-toolchain.toml accepts them when told it is building itself.
export RUSTC_BOOTSTRAP=1

cargo fmt --manifest-path fuzz/libfuzzer/Cargo.toml -- --check
log "building the targets (release, AddressSanitizer)"
cargo fuzz build --fuzz-dir fuzz/libfuzzer

failed=()
for target in "${targets[@]}"; do
  work="target/fuzz-corpus/$target"
  mkdir -p "$work" "fuzz/corpus/$target" "fuzz/regressions/$target"
  log "$target: ${seconds}s over fuzz/corpus/$target ($(ls "fuzz/corpus/$target" | wc -l) seeds) and fuzz/regressions/$target ($(ls "fuzz/regressions/$target" | wc -l))"
  if cargo fuzz run --fuzz-dir fuzz/libfuzzer "$target" "$work" "fuzz/corpus/$target" "fuzz/regressions/$target" -- \
    -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=4096 \
    -print_final_stats=1 >"target/fuzz-$target.log" 2>&1; then
    grep -E "^Done|stat::number_of_executed_units|stat::peak_rss_mb" "target/fuzz-$target.log" | sed "s/^/[fuzz] $target: /" >&2
  else
    tail -n 60 "target/fuzz-$target.log" >&2
    log "$target: FAILED (input under fuzz/libfuzzer/artifacts/$target/; replay: RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir fuzz/libfuzzer $target <input>, or without libFuzzer: cargo test -p infergate-fuzz after copying it into fuzz/regressions/$target/)"
    failed+=("$target")
  fi
done

# FUZZ_CLEAN=1 removes the instrumented build (about 3 GB) afterwards.
if [ "${FUZZ_CLEAN:-0}" = 1 ]; then
  log "removing fuzz/libfuzzer/target (FUZZ_CLEAN=1)"
  rm -rf fuzz/libfuzzer/target
fi

if [ ${#failed[@]} -gt 0 ]; then
  log "failed: ${failed[*]}"
  exit 1
fi
log "all ${#targets[@]} targets ran ${seconds}s without a finding"
