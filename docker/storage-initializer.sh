#!/bin/sh
# infergate-fetch URI DESTINATION
# infergate-fetch --uri-from-env=NAME DESTINATION
#
# The storage-initializer init container of an InferenceService with spec.model.storageUri:
# copies the model at URI into DESTINATION (an emptyDir the model container mounts read-only),
# then exits. The same arguments as KServe's storage initializer. With --uri-from-env the URI is
# the variable NAME's value (spec.model.storage.uriFrom: a Secret's key, such as a presigned URL),
# so it shows in no argument. Messages never show a URL's user name, password or query.
#
#   s3://BUCKET[/PREFIX]   every object under PREFIX, keeping the layout (a Triton model
#                          repository stays one), or the one object PREFIX names
#   gs://BUCKET[/PREFIX]   the same, from Google Cloud Storage
#   https://HOST/PATH      one file; .tar, .tar.gz, .tgz and .zip are unpacked into DESTINATION
#   http://HOST/PATH       the same, unencrypted
#
# Credentials are files in $INFERGATE_STORAGE_SECRET_DIR (the Secret spec.model.storage.secretName,
# mounted into this container only), one per key:
#
#   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL (S3;
#   an endpoint means an S3-compatible server, path-style requests)
#   gcloud-application-credentials.json (GCS service account key)
#   HTTP_AUTHORIZATION (HTTP(S): the Authorization header's value)
#
# Without a key, S3 and GCS use the environment's own identity (instance or workload identity)
# and anonymous access where there is none. The copy is done by rclone.
#
# On failure the reason, with the storage's own error, is written to /dev/termination-log
# ($INFERGATE_TERMINATION_LOG elsewhere; the InferenceService's status.lastFailureInfo shows it)
# and the exit status is not 0:
#   1  the copy failed (credentials, network, missing bucket)
#   2  usage: a URI this script does not handle
#   3  the copy found nothing at URI
set -eu

usage='usage: infergate-fetch URI|--uri-from-env=NAME DESTINATION'
uri="${1:?$usage}"
dest="${2:?$usage}"
# The whole URI from an environment variable (model.storage.uriFrom: a Secret's key, such as a
# presigned URL), so that it is in no argument, which the process list and the pod spec show.
case "$uri" in
  --uri-from-env=*)
    name="${uri#--uri-from-env=}"
    case "$name" in
      '' | *[!A-Za-z0-9_]* | [0-9]*) printf 'infergate-fetch: bad variable name %s\n' "$name" >&2; exit 2 ;;
    esac
    eval "uri=\${$name:-}"
    unset "$name"
    [ -n "$uri" ] || { printf 'infergate-fetch: $%s is empty\n' "$name" >&2; exit 2; }
    ;;
esac
secrets="${INFERGATE_STORAGE_SECRET_DIR:-}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Text with its URLs' credentials taken out: the user name and password before the host, and
# every query (presigned URLs carry their signature there). Every message goes through it: they
# reach the log, the termination message, and from there the resource's status and Events.
redact() {
  sed -e 's#\(://\)[^/?#@[:space:]]*@#\1<redacted>@#g' \
      -e 's#\(://[^?[:space:]"]*\)?[^[:space:]"]*#\1?<redacted>#g'
}

# Says why and stops; the last words also go where the kubelet reads a termination message.
fail() {
  status="$1"
  shift
  said="$(printf '%s' "$*" | redact)"
  printf 'infergate-fetch: %s\n' "$said" >&2
  printf '%s\n' "$said" >"${INFERGATE_TERMINATION_LOG:-/dev/termination-log}" 2>/dev/null || true
  exit "$status"
}

# The Secret's value for KEY, or nothing.
secret() {
  if [ -n "$secrets" ] && [ -f "$secrets/$1" ]; then
    cat "$secrets/$1"
  fi
}

# rclone with no configuration file, a bounded number of retries, and its errors kept for the
# termination message.
fetch() {
  if ! rclone --config "" --retries 2 --low-level-retries 3 --contimeout 15s --stats 0 \
       "$@" 2>"$work/errors"; then
    redact <"$work/errors" >&2
    reason="$(grep -v '^\s*$' "$work/errors" | tail -n 2 | sed 's/^[0-9/]* [0-9:]* //' | tr '\n' ' ')"
    fail 1 "fetching $uri failed: ${reason:-rclone gave no reason}"
  fi
}

mkdir -p "$dest"
case "$uri" in
  s3://*)
    path="${uri#s3://}"
    key_id="$(secret AWS_ACCESS_KEY_ID)"
    if [ -n "$key_id" ]; then
      export RCLONE_S3_ACCESS_KEY_ID="$key_id"
      RCLONE_S3_SECRET_ACCESS_KEY="$(secret AWS_SECRET_ACCESS_KEY)"
      export RCLONE_S3_SECRET_ACCESS_KEY
      token="$(secret AWS_SESSION_TOKEN)"
      if [ -n "$token" ]; then export RCLONE_S3_SESSION_TOKEN="$token"; fi
    else
      export RCLONE_S3_ENV_AUTH=true
    fi
    region="$(secret AWS_REGION)"
    if [ -n "$region" ]; then export RCLONE_S3_REGION="$region"; fi
    endpoint="$(secret AWS_ENDPOINT_URL)"
    if [ -n "$endpoint" ]; then
      export RCLONE_S3_PROVIDER=Other RCLONE_S3_ENDPOINT="$endpoint" RCLONE_S3_FORCE_PATH_STYLE=true
    else
      export RCLONE_S3_PROVIDER=AWS
    fi
    fetch copy ":s3:$path" "$dest"
    ;;
  gs://*)
    path="${uri#gs://}"
    if [ -n "$secrets" ] && [ -f "$secrets/gcloud-application-credentials.json" ]; then
      export RCLONE_GCS_SERVICE_ACCOUNT_FILE="$secrets/gcloud-application-credentials.json"
    else
      export RCLONE_GCS_ENV_AUTH=true
    fi
    fetch copy ":gcs:$path" "$dest"
    ;;
  http://* | https://*)
    name="$(basename "${uri%%[?#]*}")"
    [ -n "$name" ] || name=model
    authorization="$(secret HTTP_AUTHORIZATION)"
    if [ -n "$authorization" ]; then
      # An environment variable, not an argument: arguments are visible in the process list.
      export RCLONE_HEADER="Authorization: $authorization"
    fi
    fetch copyurl "$uri" "$work/$name"
    case "$name" in
      *.tar.gz | *.tgz) tar -xzf "$work/$name" -C "$dest" || fail 1 "$uri is not a readable .tar.gz" ;;
      *.tar) tar -xf "$work/$name" -C "$dest" || fail 1 "$uri is not a readable .tar" ;;
      *.zip) unzip -q -o "$work/$name" -d "$dest" || fail 1 "$uri is not a readable .zip" ;;
      *) mv "$work/$name" "$dest/$name" ;;
    esac
    ;;
  *)
    fail 2 "$uri: unsupported scheme; use s3://, gs://, https:// or http://"
    ;;
esac

if [ -z "$(ls -A "$dest")" ]; then
  fail 3 "nothing found at $uri (no object under that bucket and prefix)"
fi
count="$(find "$dest" -type f | wc -l)"
printf 'infergate-fetch: %s files from %s in %s\n' "$count" "$uri" "$dest" | redact >&2
