# clipfn on CPU only (ONNX Runtime 1.31.1, CPU execution provider).
#
#   docker build --platform linux/amd64 -t clipfn:cpu .
#
# For Cloud Run GPU use Dockerfile.cuda; see docs/deploy.md.
# The binary uses the `ort` crate's load-dynamic feature; any api-N feature
# with N <= 31 can load this library.

############################################################################
# 1. Build the release binary.
############################################################################
FROM rust:1.95.0-bookworm AS build

WORKDIR /src

# What the image decoders build against (tools/setup-formats.sh): libjpeg-turbo and libheif are
# built from their bundled sources with cmake (nasm for libjpeg-turbo's SIMD); libheif decodes
# HEVC with libde265 and AV1 with dav1d. g++ comes with the rust image.
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        cmake=3.25.1-1 nasm=2.16.01-1 pkg-config=1.8.1-1 \
        libde265-dev=1.0.11-1+deb12u3 libdav1d-dev=1.0.0-2+deb12u1 \
    && rm -rf /var/lib/apt/lists/*

# HEIC and AVIF are cargo features, on in the images.
ARG CARGO_FEATURES=heif,avif

# Compile the dependencies against a stub main first so that editing src/ does
# not rebuild every crate. The stub's fingerprint is deleted afterwards so the
# real sources are always recompiled, whatever their timestamps.
COPY Cargo.toml Cargo.lock ./
# Cargo.toml names the benchmark target, so its file must exist for any build.
COPY benches/ benches/
RUN mkdir src \
    && echo 'fn main() {}' > src/main.rs \
    && cargo build --release --locked --features "$CARGO_FEATURES" \
    && rm -rf src target/release/clipfn target/release/deps/clipfn-* target/release/.fingerprint/clipfn-*

COPY src/ src/
RUN touch src/main.rs \
    && cargo build --release --locked --features "$CARGO_FEATURES" --bin clipfn \
    && install -D -m 0755 target/release/clipfn /out/clipfn

############################################################################
# 2. Fetch the ONNX Runtime CPU shared library from the PyPI wheel, pinned by
#    version and sha256.
############################################################################
FROM python:3.12-slim-bookworm AS ort

ARG ORT_VERSION=1.31.1
# sha256 of onnxruntime-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl
ARG ORT_WHEEL_SHA256=1f3dea47f2f0e5117c2404cea7d21fd253ae7836a3bf167a501cdfbb2600d536

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /tmp/ort
RUN printf 'onnxruntime==%s --hash=sha256:%s\n' "${ORT_VERSION}" "${ORT_WHEEL_SHA256}" > requirements.txt \
    && pip download --no-cache-dir --disable-pip-version-check --no-deps --require-hashes \
        --only-binary=:all: --implementation cp --python-version 3.12 \
        --platform manylinux_2_28_x86_64 --dest wheel -r requirements.txt \
    && python -m zipfile -e wheel/onnxruntime-"${ORT_VERSION}"-*.whl unpacked \
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
# 3. Runtime: Debian bookworm, the build stage's glibc. No apt packages are
#    installed: the CA bundle (rustls reads the system store) is copied from
#    the build stage.
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
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/clipfn /usr/local/bin/clipfn
# The HEVC and AV1 decoders libheif was built against (bookworm's; fine on a newer glibc).
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
