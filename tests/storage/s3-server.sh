#!/usr/bin/env bash
# Builds the S3 server the storage tests fetch from: rclone's `serve s3` (an S3-compatible server
# with signature-v4 authentication over a directory: each subdirectory is a bucket), from its Go
# module, cached by version. The fetcher under test is the Debian package's rclone, a different
# build and version than this server.
#
# The binary is rclone's own command line with only the `serve s3` command and the local
# backend linked in: the same server code as the release, without the other commands and the
# cloud backends (their SDKs are most of a full build: about 2 minutes here instead of 9).
#
# Prints the server binary's path on the last line of stdout.
#
#   RCLONE_SERVER_VERSION  module version (default v1.76.0)
#   INFERGATE_CACHE        cache root (default ~/.cache/infergate)
set -euo pipefail
VERSION="${RCLONE_SERVER_VERSION:-v1.76.0}"
CACHE="${INFERGATE_CACHE:-$HOME/.cache/infergate}"
BIN="$CACHE/storage/rclone-s3-$VERSION"
if [[ -x "$BIN/rclone" ]]; then
  echo "$BIN/rclone"
  exit 0
fi
if ! command -v go >/dev/null; then
  echo "s3-server.sh: Go is not installed; the S3 server is built from its Go module" >&2
  exit 2
fi
mkdir -p "$BIN"
echo "[storage] building rclone $VERSION (serve s3 and the local backend) from its Go module" >&2
start=$SECONDS
# The build's own caches and module go away afterwards: only the binary is kept.
work="$(mktemp -d "$CACHE/storage/build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export GOCACHE="$work/cache" GOMODCACHE="$work/mod" GOFLAGS="-modcacherw -buildvcs=false"
export CGO_ENABLED=0
mkdir "$work/src"
cat >"$work/src/main.go" <<'GO'
// rclone's command line with only `serve s3` and the local backend registered.
package main

import (
	_ "github.com/rclone/rclone/backend/local"
	"github.com/rclone/rclone/cmd"
	_ "github.com/rclone/rclone/cmd/serve/s3"
)

func main() { cmd.Main() }
GO
(
  cd "$work/src"
  go mod init infergate.test/s3-server >/dev/null 2>&1
  # rclone's own go.mod decides every other module's version: only the packages the build
  # imports are resolved (-mod=mod), nothing newer is asked for.
  go get "github.com/rclone/rclone@$VERSION" 2>/dev/null
  go build -mod=mod -trimpath -ldflags "-s -w" -o "$BIN/rclone.tmp" .
)
mv "$BIN/rclone.tmp" "$BIN/rclone"
echo "[storage] built in $((SECONDS - start)) s" >&2
echo "$BIN/rclone"
