#!/usr/bin/env bash
# System packages the image decoders build against, and the tests' second EXIF reader (Debian
# bookworm); safe to re-run.
#
#   cmake, nasm       turbojpeg-sys builds its bundled libjpeg-turbo 3 (feature jpeg-turbo,
#                     on by default; nasm for its SIMD code, which the build requires)
#   cmake, g++        libheif-sys builds its bundled libheif 1.23 (features heif, avif)
#   libde265-dev      HEVC decoding inside libheif (HEIC); at run time: libde265-0
#   libdav1d-dev      AV1 decoding inside libheif (AVIF); at run time: libdav1d6
#   pkg-config        how both builds find those libraries
#   libimage-exiftool-perl  exiftool, whose reading of the photos' EXIF tests/it/analyze.rs holds
#                     clipfn's capture times and places to (tools/exif_reference.py exiftool)
#   fonts-dejavu-core  the fonts tools/ocr_photos.py renders the OCR tests' words with
#
# Without libde265-dev or libdav1d-dev libheif still builds, and HEIC or AVIF photos then get
# `unsupported_format` ("no decoder for the file's codec").
set -euo pipefail

packages=(cmake nasm g++ pkg-config libde265-dev libdav1d-dev libimage-exiftool-perl fonts-dejavu-core)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup-formats: ${packages[*]} already installed"
  exit 0
fi
echo "setup-formats: installing ${missing[*]}"
sudo=()
if [[ $(id -u) != 0 ]]; then sudo=(sudo); fi
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
