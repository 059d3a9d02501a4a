#!/usr/bin/env bash
# Build Triton's example clients in Go, JavaScript (Node.js) and Java/Scala, as the test.sh of
# Triton's QA modules L0_simple_go_client, L0_simple_nodejs_client and L0_client_java build them,
# from the client and common repositories' branch (Triton's test.sh take `common` from its main
# branch; here the same branch as the client's, so the protos match the server under test).
# Called by run.sh; the result is reused while its stamp is there.
#
# Usage: build-lang-clients.sh CLIENT_GIT COMMON_GIT BRANCH_REF_CLIENT BRANCH_REF_COMMON OUT
# Leaves in OUT:
#   go/grpc_simple_client          the Go example, built (grpc_generated/go, stubs by protoc)
#   javascript/                    client.js with its npm packages and the protos
#   java-grpc/examples/            SimpleJavaClient and the Scala SimpleClient, built by Maven
#   java-http/target/examples/     SimpleInferClient.jar and the other HTTP client examples
# Needs protoc (apt-installed when missing), go, node with npm, java and mvn; the code
# generators for Go come from the Go module proxy at the versions below.
set -euo pipefail
CLIENT_GIT="$1" COMMON_GIT="$2" CREF="$3" MREF="$4" OUT="$5"
log() { printf '[triton-qa] %s\n' "$*" >&2; }

[ -f "$OUT/.built" ] && exit 0
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../tools" && pwd)/lib.sh"
command -v protoc >/dev/null || apt_install protobuf-compiler
for tool in go node npm java mvn; do
  command -v "$tool" >/dev/null || { log "$tool is needed for the other-language clients"; exit 1; }
done

rm -rf "$OUT" && mkdir -p "$OUT/src" "$OUT/common"
git --git-dir="$CLIENT_GIT" archive "$CREF" src/grpc_generated src/java | tar -x -C "$OUT/src"
git --git-dir="$COMMON_GIT" archive "$MREF" protobuf | tar -x -C "$OUT/common"
PROTOS="$OUT/common/protobuf"

log "building the Go example client"
mv "$OUT/src/src/grpc_generated/go" "$OUT/go"
GOBIN="$OUT/go/bin" go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN="$OUT/go/bin" go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
(
  cd "$OUT/go"
  mkdir -p common && cp -r "$PROTOS" common/
  PATH="$OUT/go/bin:$PATH" bash gen_go_stubs.sh
  go build -o grpc_simple_client grpc_simple_client.go
)

log "installing the JavaScript example client's packages"
mv "$OUT/src/src/grpc_generated/javascript" "$OUT/javascript"
(
  cd "$OUT/javascript"
  mkdir -p proto && cp "$PROTOS"/*.proto proto/
  npm install --no-audit --no-fund --loglevel=error >/dev/null
)

log "building the Java and Scala gRPC example clients"
mv "$OUT/src/src/grpc_generated/java" "$OUT/java-grpc"
(
  cd "$OUT/java-grpc/library"
  cp "$PROTOS"/*.proto src/main/proto/
  mvn -q -B compile
  cp -R target/generated-sources/protobuf/java/inference ../examples/src/main/java/inference
  cp -r target/generated-sources/protobuf/grpc-java/inference/*.java ../examples/src/main/java/inference/
  cd ../examples
  mvn -q -B clean install
)

log "building the Java HTTP client and its examples"
mv "$OUT/src/src/java" "$OUT/java-http"
(cd "$OUT/java-http" && mvn -q -B clean install -Ddir="$OUT/java-http/target/examples")

rm -rf "$OUT/src"
touch "$OUT/.built"
