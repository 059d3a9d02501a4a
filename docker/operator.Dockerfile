# infergate-operator: build from the workspace root
#   docker build -f docker/operator.Dockerfile -t ghcr.io/infergate/infergate-operator:0.1.0 .
# Runtime: distroless, non-root (uid 65532), read-only root filesystem friendly (writes nothing).
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
 && install -D target/release/infergate-operator /out/infergate-operator

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/infergate-operator /usr/local/bin/infergate-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/infergate-operator"]
CMD ["run"]
