#!/usr/bin/env bash
# Builds the S3 server the storage tests fetch from: rclone's `serve s3` (an S3-compatible server
# with signature-v4 authentication over a directory: each subdirectory is a bucket), from its Go
# module, cached by version. The fetcher under test is the Debian package's rclone, a different
# build and version than this server.
#
# Prints the server binary's path on the last line of stdout.
#
#   RCLONE_SERVER_VERSION  module version (default v1.76.0)
#   INFERGATE_CACHE        cache root (default ~/.cache/infergate)
set -euo pipefail
VERSION="${RCLONE_SERVER_VERSION:-v1.76.0}"
CACHE="${INFERGATE_CACHE:-$HOME/.cache/infergate}"
BIN="$CACHE/storage/rclone-$VERSION"
if [[ -x "$BIN/rclone" ]]; then
  echo "$BIN/rclone"
  exit 0
fi
if ! command -v go >/dev/null; then
  echo "s3-server.sh: Go is not installed; the S3 server is built from its Go module" >&2
  exit 2
fi
mkdir -p "$BIN"
echo "[storage] building rclone $VERSION (S3 server) from its Go module" >&2
start=$SECONDS
# The build's own caches go away afterwards: only the binary is kept.
gocache="$(mktemp -d "$CACHE/storage/gocache.XXXXXX")"
GOBIN="$BIN" GOCACHE="$gocache/build" GOMODCACHE="$gocache/mod" GOFLAGS=-modcacherw \
  go install "github.com/rclone/rclone@$VERSION" >&2
rm -rf "$gocache"
echo "[storage] built in $((SECONDS - start)) s" >&2
echo "$BIN/rclone"
