# infergate-storage-initializer: the init container that fetches spec.model.storageUri
#   docker build -f docker/storage-initializer.Dockerfile -t ghcr.io/infergate/infergate-storage-initializer:0.1.0 .
# A Debian base with rclone (S3, GCS, HTTP), tar and unzip, and docker/storage-initializer.sh as
# the entrypoint: `infergate-fetch URI DESTINATION`, KServe's storage-initializer arguments.
# Non-root (uid 65532).
#
# BASE_IMAGE is a build argument: any Debian 12 base. One that already carries rclone, tar and
# unzip is used as it is (the end-to-end tests assemble such a base from Debian packages, with no
# registry); otherwise they are installed from the distribution's packages.
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${BASE_IMAGE}
RUN if ! command -v rclone >/dev/null || ! command -v unzip >/dev/null || ! command -v tar >/dev/null; then \
      apt-get update \
      && apt-get install -y --no-install-recommends rclone ca-certificates tar gzip unzip \
      && rm -rf /var/lib/apt/lists/*; \
    fi
COPY docker/storage-initializer.sh /usr/local/bin/infergate-fetch
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/infergate-fetch"]
