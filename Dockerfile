# clipfn on CPU only (ONNX Runtime 1.31.1, CPU execution provider): CPU Cloud Run, any
# container host, and the AWS Lambda container image (docs/deploy.md).
#
#   DOCKER_BUILDKIT=1 docker build --platform linux/amd64 -t clipfn:cpu .
#
# For Cloud Run GPU use Dockerfile.cuda; see docs/deploy.md.
# The binary uses the `ort` crate's load-dynamic feature; any api-N feature
# with N <= 31 can load this library.
#
# Every base is Debian bookworm: rust:1.95.0-bookworm to build, debian:bookworm-slim for the
# rest. tools/image-check.sh builds this file unchanged on a machine without Docker Hub, from
# local stand-ins of those two bases.

############################################################################
# 1. Build the release binary. This stage is the same, word for word, in
#    Dockerfile and Dockerfile.cuda, so that BuildKit compiles the binary once
#    for every image built on one machine (tests/infra checks that they agree).
############################################################################
FROM rust:1.95.0-bookworm AS build

WORKDIR /src
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# What the image decoders build against (tools/setup-formats.sh): libjpeg-turbo and libheif are
# built from their bundled sources with cmake (nasm for libjpeg-turbo's SIMD); libheif decodes
# HEVC with libde265 and AV1 with dav1d. g++ comes with the rust image.
# A package Debian patches in bookworm-security is pinned to its upstream version and Debian
# revision with any security revision ('+deb12u*', '~deb12u*'): each security update removes the
# revision before it from the archive (tests/infra/test_infra_apt_pins.py).
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        cmake=3.25.1-1 nasm=2.16.01-1 pkg-config=1.8.1-1 \
        'libde265-dev=1.0.11-1+deb12u*' 'libdav1d-dev=1.0.0-2+deb12u*' \
    && rm -rf /var/lib/apt/lists/*

# HEIC and AVIF are cargo features, on in the images.
ARG CARGO_FEATURES=heif,avif

# Extra CA certificates for a network whose TLS goes through an inspecting proxy
# (tools/image-check.sh passes the host's: --secret id=extra_ca,src=FILE). Optional: without the
# secret (Cloud Build) the file is absent and Debian's bundle is used. The bundle that includes
# them lives in /tmp for the one RUN that downloads and is deleted there, so no layer keeps it.

# Compile the dependencies against a stub main first so that editing src/ does
# not rebuild every crate. The stub's fingerprint is deleted afterwards so the
# real sources are always recompiled, whatever their timestamps.
COPY Cargo.toml Cargo.lock ./
# Cargo.toml names the benchmark target, so its file must exist for any build.
COPY benches/ benches/
RUN --mount=type=secret,id=extra_ca \
    if [ -s /run/secrets/extra_ca ]; then \
        cat /etc/ssl/certs/ca-certificates.crt /run/secrets/extra_ca > /tmp/ca-bundle.pem; \
        export CARGO_HTTP_CAINFO=/tmp/ca-bundle.pem; \
    fi \
    && mkdir src \
    && echo 'fn main() {}' > src/main.rs \
    && cargo fetch --locked --target x86_64-unknown-linux-gnu \
    && rm -f /tmp/ca-bundle.pem \
    && cargo build --release --locked --offline --features "$CARGO_FEATURES" \
    && rm -rf src target/release/clipfn target/release/deps/clipfn-* target/release/.fingerprint/clipfn-*

COPY src/ src/
RUN touch src/main.rs \
    && cargo build --release --locked --offline --features "$CARGO_FEATURES" --bin clipfn \
    && install -D -m 0755 target/release/clipfn /out/clipfn

############################################################################
# 2. The tools that fetch wheels from PyPI: Debian's pip and the CA bundle of
#    Debian's ca-certificates (the runtime takes its bundle from here, never
#    from the build stage's base). Also the same in both Dockerfiles.
############################################################################
FROM debian:bookworm-slim AS wheels

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# ca-certificates: any security revision of 20250419 (as the build stage's pins).
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        'ca-certificates=20250419~deb12u*' python3-pip=23.0.1+dfsg-1 \
    && rm -rf /var/lib/apt/lists/*

############################################################################
# 3. The ONNX Runtime CPU shared library from the PyPI wheel, pinned by
#    version and sha256.
############################################################################
FROM wheels AS ort

ARG ORT_VERSION=1.31.1
# sha256 of onnxruntime-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl
ARG ORT_WHEEL_SHA256=1f3dea47f2f0e5117c2404cea7d21fd253ae7836a3bf167a501cdfbb2600d536

WORKDIR /tmp/ort
RUN --mount=type=secret,id=extra_ca \
    if [ -s /run/secrets/extra_ca ]; then \
        cat /etc/ssl/certs/ca-certificates.crt /run/secrets/extra_ca > /tmp/ca-bundle.pem; \
        export PIP_CERT=/tmp/ca-bundle.pem; \
    fi \
    && printf 'onnxruntime==%s --hash=sha256:%s\n' "${ORT_VERSION}" "${ORT_WHEEL_SHA256}" > requirements.txt \
    && pip3 download --no-cache-dir --disable-pip-version-check --no-deps --require-hashes \
        --only-binary=:all: --implementation cp --python-version 3.12 \
        --platform manylinux_2_28_x86_64 --dest wheel -r requirements.txt \
    && rm -f /tmp/ca-bundle.pem \
    && python3 -m zipfile -e wheel/onnxruntime-"${ORT_VERSION}"-*.whl unpacked \
    && install -d /opt/onnxruntime/lib \
    && install -m 0644 -t /opt/onnxruntime/lib \
        unpacked/onnxruntime/capi/libonnxruntime.so."${ORT_VERSION}" \
        unpacked/onnxruntime/capi/libonnxruntime_providers_shared.so \
    && install -m 0644 -t /opt/onnxruntime \
        unpacked/onnxruntime/LICENSE unpacked/onnxruntime/ThirdPartyNotices.txt \
    && ln -s libonnxruntime.so."${ORT_VERSION}" /opt/onnxruntime/lib/libonnxruntime.so.1 \
    && ln -s libonnxruntime.so.1 /opt/onnxruntime/lib/libonnxruntime.so \
    && rm -rf /tmp/ort

############################################################################
# 4. Runtime: Debian bookworm, the build stage's glibc. No apt packages are
#    installed: the CA bundle (rustls reads the system store) is Debian's
#    ca-certificates from the wheels stage.
############################################################################
FROM debian:bookworm-slim AS runtime

# Where the model is read from. The default points into the image, for images
# built with a model baked in (put it at infra/model/model.onnx before the
# build); otherwise set CLIPFN_MODEL to a gs://, s3:// or file:// URI at run time.
ARG CLIPFN_MODEL=/opt/clipfn/model/model.onnx

LABEL org.opencontainers.image.title="clipfn" \
      org.opencontainers.image.description="CLIP ViT-B/32 image embeddings over HTTP (ONNX Runtime 1.31.1, CPU)" \
      org.opencontainers.image.licenses="MIT OR Apache-2.0"

RUN useradd --system --uid 10001 --user-group --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin clipfn

COPY --from=ort /opt/onnxruntime /opt/onnxruntime
COPY --from=wheels /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/clipfn /usr/local/bin/clipfn
# The HEVC and AV1 decoders libheif was built against (bookworm's).
COPY --from=build /usr/lib/x86_64-linux-gnu/libde265.so.0* /usr/lib/x86_64-linux-gnu/libdav1d.so.6* /usr/local/lib/
# Every library the binary links must be in this image (libheif links what its build found).
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN ldconfig && ! ldd /usr/local/bin/clipfn | grep "not found"
COPY infra/model/ /opt/clipfn/model/

ENV ORT_DYLIB_PATH=/opt/onnxruntime/lib/libonnxruntime.so.1.31.1 \
    CLIPFN_MODEL=${CLIPFN_MODEL} \
    CLIPFN_PROVIDER=cpu \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    PORT=8080 \
    RUST_LOG=info

USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/clipfn"]
CMD ["serve"]
