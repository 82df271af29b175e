#!/usr/bin/env bash
# Unpacks the Debian packages carried in .device-debs/ (scripts/fetch-device-debs.sh)
# into a private prefix inside the work tree, for a GPU machine that has no
# package registry and may not run Debian 12. Nothing is written outside the
# prefix: unpacking into / would overwrite the image's own libraries, and
# dpkg -x runs no maintainer scripts, so the alternatives symlinks those
# create (openblas.pc, libopenblas.so.0 in the multiarch directory) never
# appear there. Here every consumer is pointed at the packages' own
# directories instead, and the absolute /usr paths in their pkg-config and
# CMake files are rewritten to the prefix.
#
#   source <(scripts/device-prefix.sh [PREFIX])
#
# prints the environment to use (PATH, PKG_CONFIG_LIBDIR, PKG_CONFIG,
# CMAKE_PREFIX_PATH, LD_LIBRARY_PATH) as export lines on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(realpath -m "${1:-.device-prefix}")
ls .device-debs/*.deb >/dev/null 2>&1 || {
  echo "device-prefix: no .device-debs/*.deb; run scripts/fetch-device-debs.sh on a machine with apt" >&2
  exit 1
}
rm -rf "$prefix"
mkdir -p "$prefix"
for f in .device-debs/*.deb; do
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$f" "$prefix"
  else # a .deb is an ar archive holding data.tar.*
    tmp=$(mktemp -d)
    (cd "$tmp" && ar x "$OLDPWD/$f" && tar -xf data.tar.* -C "$prefix")
    rm -rf "$tmp"
  fi
done
multi=usr/lib/x86_64-linux-gnu
# /usr in the packages' metadata -> the prefix ("prefix=/usr", "/usr/include", "/usr/lib/...")
grep -rlE '(^|[="[:space:]])/usr(/|"|$)' "$prefix/$multi" --include='*.pc' --include='*.cmake' 2>/dev/null |
  while read -r f; do
    sed -i -E "s#(^|[=\"[:space:]])/usr(/|\"|\$)#\\1$prefix/usr\\2#g" "$f"
  done
libdirs="$prefix/$multi:$prefix/$multi/openblas-pthread"
pcdirs="$prefix/$multi/pkgconfig:$prefix/$multi/openblas-pthread/pkgconfig:$prefix/usr/share/pkgconfig"
pkgconfig=$(command -v pkg-config || true)
[ -n "$pkgconfig" ] || pkgconfig="$prefix/usr/bin/pkgconf"
echo "export LD_LIBRARY_PATH=\"$libdirs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
echo "export PKG_CONFIG_LIBDIR=\"$pcdirs\""
echo "export PKG_CONFIG=\"$pkgconfig\""
echo "export CMAKE_PREFIX_PATH=\"$prefix/usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}\""
