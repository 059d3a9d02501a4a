# infergate-sidecar: build from the workspace root
#   docker build -f docker/sidecar.Dockerfile -t ghcr.io/infergate/infergate-sidecar:0.1.0 .
# Runtime: distroless with glibc (the CUDA driver, when the NVIDIA container runtime injects it,
# is loaded at run time), non-root (uid 65532), nothing but the sidecar and its preStop hook,
# `infergate-drain`: linked statically, because the sidecar copies it into a volume where the
# model server's container, of any base image, runs it (drain/src/lib.rs).
#
# Both base images are build arguments: BUILDER_IMAGE needs cargo and a C linker (the Rust image
# by default); RUNTIME_IMAGE needs glibc and libgcc (distroless cc by default). The end-to-end
# tests build with bases assembled from Debian packages (tests/e2e/images.sh).
# The build stage compiles the sidecar and the operator together, in both Dockerfiles, with the
# same command: one feature resolution, so the dependencies they share (tokio, hyper, tonic,
# rustls, serde...) are compiled once, and the second image's build finds everything in the
# shared target cache (id=infergate-target) and takes seconds.
ARG BUILDER_IMAGE=docker.io/library/rust:1-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${BUILDER_IMAGE} AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,id=infergate-cargo-registry,target=/usr/local/cargo/registry \
    --mount=type=cache,id=infergate-target,target=/src/target \
    cargo build --release --locked -p infergate-sidecar -p infergate-operator \
 && install -D target/release/infergate-sidecar /out/infergate-sidecar \
 && host="$(rustc --print host-tuple)" \
 && RUSTFLAGS="-C target-feature=+crt-static -C strip=debuginfo" CARGO_TARGET_DIR=/src/target/static \
    cargo build --release --locked -p infergate-drain --target "$host" \
 && install -D "target/static/$host/release/infergate-drain" /out/infergate-drain

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/infergate-sidecar /out/infergate-drain /usr/local/bin/
USER 65532:65532
EXPOSE 8000 8001 8002 8003
ENTRYPOINT ["/usr/local/bin/infergate-sidecar"]
