#!/usr/bin/env bash
# Installs the Debian packages ortep builds and tests with, when missing.
# Runs apt-get as root, or through sudo when not root. The CUDA Toolkit is
# optional and not installed here: when /usr/local/cuda exists the CUDA parts
# are built too. --ci adds what CI's extra jobs use: clang and its libFuzzer
# runtime, and valgrind.
set -euo pipefail
packages=(build-essential cmake pkg-config git libmimalloc-dev check libcjson-dev libopenblas-dev libpcre2-dev libutf8proc-dev libsimde-dev libxxhash-dev)
if [ "${1:-}" = "--ci" ]; then packages+=(clang libclang-rt-dev valgrind); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "ortep: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
