#!/usr/bin/env bash
# Fails, naming the files, when a tracked C or CUDA source differs from what
# clang-format makes of it (.clang-format: the house style). Debian's
# clang-format is installed when missing. Fix with:
#   git ls-files '*.c' '*.h' '*.cu' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  SUDO=""; if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends clang-format >/dev/null
fi
bad=()
while IFS= read -r f; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done < <(git ls-files '*.c' '*.h' '*.cu')
if [ ${#bad[@]} -ne 0 ]; then
  echo "check-format: ${#bad[@]} file(s) are not clang-format clean ($(clang-format --version)):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "fix: git ls-files '*.c' '*.h' '*.cu' | xargs clang-format -i" >&2
  exit 1
fi
echo "check-format: every C and CUDA source is clang-format clean ($(clang-format --version | head -1))"
