#!/usr/bin/env bash
# Downloads (does not install) the Debian packages ortep builds with into
# .device-debs/, for a GPU machine that cannot reach a package registry:
# carry that folder to it and bench/device-check.sh unpacks it there
# (dpkg -x into /, then ldconfig). Run on a machine with apt (this one).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .device-debs
cd .device-debs
pkgs=(libmimalloc2.0 libmimalloc-dev check libsubunit0 libsubunit-dev libcjson1 libcjson-dev
      libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libgfortran5
      libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc2 libutf8proc-dev libsimde-dev
      pkg-config pkgconf pkgconf-bin libpkgconf3)
apt-get download "${pkgs[@]}"
ls -1 *.deb | wc -l | xargs echo "downloaded packages:"
