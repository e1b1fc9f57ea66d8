# s3-operator image: built with the Rust toolchain, shipped on distroless (no shell, non-root).
#
#   docker build -t ghcr.io/s3-operator/s3-operator:0.1.0 --build-arg VERSION=0.1.0 \
#     --build-arg GIT_COMMIT="$(git rev-parse --short=7 HEAD)" .
#
# The build context is an allowlist (.dockerignore): only what the cargo build below reads.
#
# The base images are build arguments so a machine that cannot pull them can pass its own
# (hack/images/build.sh operator). BINARY_FROM names the stage or image the binary is copied from:
# the build stage below, or an image holding a binary already built by the same command at
# /src/target/release/s3-operator (the build stage is then skipped). buildah up to 1.28 resolves
# a stage named through an argument only when the argument is passed (`--build-arg BINARY_FROM=build`).
ARG BUILD_IMAGE=rust:1.95-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot
ARG BINARY_FROM=build

FROM ${BUILD_IMAGE} AS build
# The context has no .git: build.rs stamps this commit into `s3-operator --version`.
ARG GIT_COMMIT=unknown
ENV S3OP_GIT_COMMIT=${GIT_COMMIT}
WORKDIR /src
# The workspace: the root package and every member listed in Cargo.toml ([workspace] members),
# which cargo must find even though only the operator binary is built.
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
COPY xtask ./xtask
RUN cargo build --release --locked --bin s3-operator

FROM ${BINARY_FROM} AS binary

# cc: glibc and libgcc, which the binary links against; CA certificates included.
FROM ${RUNTIME_IMAGE}
ARG VERSION=0.1.0
ARG GIT_COMMIT=unknown
LABEL org.opencontainers.image.title="s3-operator" \
      org.opencontainers.image.description="Kubernetes operator for self-service S3 buckets and least-privilege IAM access" \
      org.opencontainers.image.source="https://github.com/s3-operator/s3-operator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${GIT_COMMIT}"
COPY --from=binary /src/target/release/s3-operator /usr/local/bin/s3-operator
USER 65532:65532
# 8080: /metrics; 8081: /healthz and /readyz.
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/s3-operator"]
CMD ["run"]
