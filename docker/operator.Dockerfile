# infergate-operator: build from the workspace root
#   docker build -f docker/operator.Dockerfile -t ghcr.io/infergate/infergate-operator:0.1.0 .
# Runtime: distroless, non-root (uid 65532), read-only root filesystem friendly (writes nothing).
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p infergate-operator \
 && install -D target/release/infergate-operator /out/infergate-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/infergate-operator /usr/local/bin/infergate-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/infergate-operator"]
CMD ["run"]
