#!/usr/bin/env bash
# Builds the three images users deploy (Dockerfile for CPU and Lambda, Dockerfile.cuda for CUDA 12
# and CUDA 13) with the real Dockerfiles, unchanged, and runs each one the way Cloud Run and Lambda
# run it (tools/image_check.py holds the checks). Needs root, apt-get and the package registries;
# no Docker Hub, no NVIDIA registry, no GPU:
#   1. installs docker.io (Debian's daemon and its BuildKit client), mmdebstrap and shellcheck;
#   2. starts a dockerd of its own (own socket, data root and PID file; --network=host builds);
#   3. makes the bases the Dockerfiles name, from Debian bookworm: debian:bookworm-slim from
#      `mmdebstrap --variant=minbase`, and rust:1.95.0-bookworm from that plus the C toolchain
#      from Debian and the machine's own Rust 1.95.0 (rustup's download host is out of reach);
#   4. builds clipfn-check:cpu, clipfn-check:cuda12 and clipfn-check:cuda13; BuildKit shares the
#      build stage, so the release binary is compiled once;
#   5. runs tools/image_check.py against them and the test build (target/debug/clipfn), Schemathesis
#      (tools/schemathesis.toml) against the CPU image among them;
#   6. stops dockerd by its PID and removes the images and the build cache.
#
#   tools/image-check.sh                  everything (tools/test.sh runs it)
#   CLIPFN_IMAGES_KEEP=1 tools/image-check.sh   keep dockerd's data (images, cache) for a rerun
#   CLIPFN_IMAGES_ONLY=cpu tools/image-check.sh  only some of the images (none: the bases only)
#   tools/image-check.sh --then CMD [ARG...]     steps 1-4 and 6, with CMD in place of the checks
#                                               (run with DOCKER_HOST set to this dockerd;
#                                               infra/soak.sh --image uses it)
#   tools/image-check.sh --prepare              step 1 only, the Debian packages (tools/test.sh
#                                               runs it in the background during the Rust steps)
#
# Settings: CLIPFN_BIN (the test build, default target/debug/clipfn), the .cache/clipfn.env
# variables from tools/setup.sh (ORT_DYLIB_PATH, CLIPFN_FAKE_GCS_BIN, CLIPFN_TEST_MODEL,
# CLIPFN_TEST_FOLDER, CLIPFN_PHOTOS_DIR, CLIPFN_PYTHON, the real faces and OCR with their photos),
# CLIPFN_IMAGES_ONLY=cpu,cuda12,cuda13.
#
# The host's extra CA certificates (/usr/local/share/ca-certificates, where an inspecting proxy's
# CA is installed) reach the downloading RUN steps as a build secret only; no layer of any image
# holds them, and the checks prove the runtime's CA bundle is Debian's.
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
THEN=()
PREPARE=0
if [[ ${1:-} == --then ]]; then
  shift
  (($#)) || { echo "image-check: --then needs a command" >&2; exit 2; }
  THEN=("$@")
elif [[ ${1:-} == --prepare ]]; then
  (($# == 1)) || { echo "image-check: --prepare takes no other argument" >&2; exit 2; }
  PREPARE=1
elif (($#)); then
  echo "image-check: unknown argument $1 (see the comment at the top)" >&2
  exit 2
fi

# Settings from tools/setup.sh, for variables not already set.
# shellcheck disable=SC1091 # linted on its own (tests/infra)
source tools/setup-env.sh
export CLIPFN_BIN=${CLIPFN_BIN:-${CARGO_TARGET_DIR:-target}/debug/clipfn}
ONLY=${CLIPFN_IMAGES_ONLY:-cpu,cuda12,cuda13}
KEEP=${CLIPFN_IMAGES_KEEP:-0}
RUST_VERSION=1.95.0
STATE=/run/clipfn-image-check
DATA_ROOT=/var/lib/clipfn-image-check
export DOCKER_HOST=unix://$STATE/docker.sock
export DOCKER_BUILDKIT=1
# Debian's docker client: it has BuildKit (the one under /usr/local/bin may not).
DOCKER=/usr/bin/docker

log() { echo "image-check: $*"; }
took() { echo "$(($(date +%s) - $1))"; }

# 1. What it needs, from Debian.
need=()
[[ -x /usr/bin/docker && -x /usr/sbin/dockerd ]] || need+=(docker.io)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v shellcheck >/dev/null || need+=(shellcheck)
command -v pigz >/dev/null || need+=(pigz)
if ((${#need[@]})); then
  log "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if ((PREPARE)); then
  log "prepared in $(took "$T0") s: ${need[*]:-nothing} installed"
  exit 0
fi
for v in CLIPFN_FAKE_GCS_BIN ORT_DYLIB_PATH CLIPFN_TEST_MODEL CLIPFN_TEST_FOLDER CLIPFN_PHOTOS_DIR \
  CLIPFN_TEST_FACES_REAL CLIPFN_TEST_OCR CLIPFN_TEST_FACE_PHOTOS CLIPFN_TEST_OCR_PHOTOS; do
  [[ -n ${!v:-} ]] || { echo "image-check: $v is not set: run tools/setup.sh first" >&2; exit 1; }
done
# The test build is the checks' reference; a --then command does without it.
((${#THEN[@]})) || [[ -x $CLIPFN_BIN ]] || { echo "image-check: no test build at $CLIPFN_BIN: run cargo test first" >&2; exit 1; }

work=$(mktemp -d /tmp/clipfn-image-check.XXXXXX)
dockerd_pid=
cleanup() {
  local rc=$?
  set +e  # every step of the clean-up runs, whatever fails
  if [[ -n $dockerd_pid ]]; then
    # Containers the checks left (they remove their own), then images and cache unless kept.
    mapfile -t left < <($DOCKER ps -aq --filter label=clipfn-image-check 2>/dev/null)
    ((${#left[@]})) && $DOCKER rm -f "${left[@]}" >/dev/null 2>&1
    if [[ $KEEP != 1 ]]; then
      $DOCKER image rm -f clipfn-check:cpu clipfn-check:cuda12 clipfn-check:cuda13 \
        rust:$RUST_VERSION-bookworm debian:bookworm-slim >/dev/null 2>&1
      $DOCKER builder prune -af >/dev/null 2>&1
    fi
    kill "$dockerd_pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$dockerd_pid" 2>/dev/null && kill -9 "$dockerd_pid"
    if [[ $KEEP != 1 ]]; then
      umount "$STATE/exec/netns/default" 2>/dev/null  # dockerd's own network namespace mount
      rm -rf "$DATA_ROOT" "$STATE"
    fi
  fi
  rm -rf "$work"
  log "finished in $(took "$T0") s (rc=$rc)"
  exit $rc
}
trap cleanup EXIT

# 2. dockerd of its own. A daemon left running by an interrupted run is stopped first.
mkdir -p "$STATE" "$DATA_ROOT"
if [[ -f $STATE/docker.pid ]] && kill -0 "$(cat "$STATE/docker.pid")" 2>/dev/null; then
  log "stopping a dockerd left by an earlier run"
  kill "$(cat "$STATE/docker.pid")"
  for _ in $(seq 100); do kill -0 "$(cat "$STATE/docker.pid")" 2>/dev/null || break; sleep 0.2; done
fi
dockerd --iptables=false --ip6tables=false --bridge=none --storage-driver=overlay2 \
  --host "$DOCKER_HOST" --data-root "$DATA_ROOT" --exec-root "$STATE/exec" \
  --pidfile "$STATE/docker.pid" >"$work/dockerd.log" 2>&1 &
dockerd_pid=$!
for _ in $(seq 150); do $DOCKER version >/dev/null 2>&1 && break; sleep 0.2; done
$DOCKER version --format 'image-check: dockerd {{.Server.Version}}, pid '"$dockerd_pid" \
  || { cat "$work/dockerd.log" >&2; exit 1; }

# 3. The bases, tagged as the Dockerfiles name them.
t=$(date +%s)
if ! $DOCKER image inspect debian:bookworm-slim >/dev/null 2>&1; then
  # As Debian's slim images: minbase, merged /usr without the usrmerge package (and its perl),
  # without documentation, manual pages or translations.
  mmdebstrap --quiet --variant=minbase --format=tar \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    bookworm "$work/bookworm.tar" \
    "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main" >"$work/mmdebstrap.log" 2>&1 \
    || { tail -n 40 "$work/mmdebstrap.log" >&2; echo "image-check: mmdebstrap failed" >&2; exit 1; }
  $DOCKER import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' -c 'CMD ["bash"]' \
    "$work/bookworm.tar" debian:bookworm-slim >/dev/null
  rm -f "$work/bookworm.tar"
fi
if ! $DOCKER image inspect rust:$RUST_VERSION-bookworm >/dev/null 2>&1; then
  sysroot=$(rustc --print sysroot)
  version=$("$sysroot/bin/rustc" --version)
  [[ $version == "rustc $RUST_VERSION "* ]] || {
    echo "image-check: the Rust base needs Rust $RUST_VERSION (Dockerfiles pin rust:$RUST_VERSION-bookworm), this machine has $version" >&2
    exit 1
  }
  # The toolchain's compiler, cargo and target libraries; no documentation.
  mkdir -p "$work/rust/toolchain/bin"
  cp -a "$sysroot/bin/rustc" "$sysroot/bin/cargo" "$sysroot/bin/rustdoc" "$work/rust/toolchain/bin/"
  cp -a "$sysroot/lib" "$work/rust/toolchain/"
  cat >"$work/rust/Dockerfile" <<EOF
FROM debian:bookworm-slim
RUN apt-get update \\
    && apt-get install -y --no-install-recommends ca-certificates gcc g++ libc6-dev make \\
    && rm -rf /var/lib/apt/lists/*
COPY toolchain/ /usr/local/rust/
ENV CARGO_HOME=/usr/local/cargo \\
    PATH=/usr/local/cargo/bin:/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    RUST_VERSION=$RUST_VERSION
RUN mkdir -p /usr/local/cargo/bin && chmod -R a+w /usr/local/cargo && rustc --version && cargo --version
EOF
  $DOCKER build -q --network=host -t rust:$RUST_VERSION-bookworm "$work/rust" >/dev/null
  rm -rf "$work/rust"
fi
log "bases ready in $(took "$t") s: $($DOCKER image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | tr '\n' ' ')"

# 4. The images. The host's extra CAs, if any, as a build secret.
secret=()
extra=(/usr/local/share/ca-certificates/*.crt)
if [[ -e ${extra[0]} ]]; then
  cat "${extra[@]}" >"$work/extra-ca.pem"
  secret=(--secret "id=extra_ca,src=$work/extra-ca.pem")
fi
build() {  # build TAG ARGS...
  local tag=$1 t
  shift
  t=$(date +%s)
  log "building $tag"
  if ! $DOCKER build --network=host --progress=plain "${secret[@]}" -t "$tag" "$@" . >"$work/build-${tag#*:}.log" 2>&1; then
    tail -n 60 "$work/build-${tag#*:}.log" >&2
    echo "image-check: building $tag failed" >&2
    return 1
  fi
  log "built $tag in $(took "$t") s"
  echo "${tag#*:} $(took "$t")" >>"$work/build-times.txt"
}
images=()
[[ ,$ONLY, == *,cpu,* ]] && { build clipfn-check:cpu -f Dockerfile; images+=(cpu); }
[[ ,$ONLY, == *,cuda12,* ]] && { build clipfn-check:cuda12 -f Dockerfile.cuda --build-arg CUDA=12; images+=(cuda12); }
[[ ,$ONLY, == *,cuda13,* ]] && { build clipfn-check:cuda13 -f Dockerfile.cuda --build-arg CUDA=13; images+=(cuda13); }
log "images built in $(took "$t") s; dockerd's data root holds $(du -sh "$DATA_ROOT" 2>/dev/null | cut -f1)"

if ((${#THEN[@]})); then
  log "running ${THEN[*]} (DOCKER_HOST=$DOCKER_HOST)"
  "${THEN[@]}"
  exit
fi
((${#images[@]})) || { log "no image selected (CLIPFN_IMAGES_ONLY=$ONLY): bases only"; exit 0; }

# 5. The checks.
PY=${CLIPFN_PYTHON:-python3}
[[ -x $PY ]] || PY=python3
"$PY" tools/image_check.py --docker "$DOCKER" --images "${images[@]}" \
  --extra-ca "$work/extra-ca.pem" --build-times "$work/build-times.txt" --deploy-doc docs/deploy.md
