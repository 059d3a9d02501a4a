# infergate-sidecar: build from the workspace root
#   docker build -f docker/sidecar.Dockerfile -t ghcr.io/infergate/infergate-sidecar:0.1.0 .
# Runtime: distroless with glibc (the CUDA driver, when the NVIDIA container runtime injects it,
# is loaded at run time), non-root (uid 65532), nothing but the binary.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p infergate-sidecar \
 && install -D target/release/infergate-sidecar /out/infergate-sidecar

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/infergate-sidecar /usr/local/bin/infergate-sidecar
USER 65532:65532
EXPOSE 8000 8001 8002 8003
ENTRYPOINT ["/usr/local/bin/infergate-sidecar"]
