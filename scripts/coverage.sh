#!/usr/bin/env bash
# Line and branch coverage of the library and the programs by the CPU test
# suite, per folder, with gcov (gcc --coverage) and gcovr (Debian's package,
# installed when missing). The CPU suites include the emulated ones, which
# run the AVX-512 kernels on any x86-64 CPU, so the figure is of one kind on
# an AVX-512 machine and an AVX2-only one (docs/reliability.md, which gives
# both). Fails when the library's line or branch coverage is below the
# floors, which sit a few points under the measured figures, so a change in
# what the tests touch by chance does not fail CI, while a body of untested
# code does.
#   scripts/coverage.sh [BUILD_DIR]        (default build-cov)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-cov}
LINE_FLOOR=${ORTEP_COVERAGE_LINE_FLOOR:-90}
BRANCH_FLOOR=${ORTEP_COVERAGE_BRANCH_FLOOR:-72}
if ! command -v gcovr >/dev/null; then
  SUDO=""; if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends gcovr >/dev/null
fi
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DORTEP_COVERAGE=ON -DORTEP_CUDA=OFF -DORTEP_SYSTEM_ALLOCATOR=ON \
  -DORTEP_BUILD_BENCH=ON >/dev/null
cmake --build "$BUILD" -j"$(nproc)" >/dev/null
find "$BUILD" -name '*.gcda' -delete
ctest --test-dir "$BUILD" -j"$(nproc)" -L cpu --output-on-failure >/dev/null
gcovr -r . "$BUILD" --exclude 'tests/' --exclude "$BUILD/" --gcov-ignore-parse-errors --json-summary "$BUILD/coverage.json" \
  >/dev/null
python3 - "$BUILD/coverage.json" "$LINE_FLOOR" "$BRANCH_FLOOR" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
line_floor, branch_floor = float(sys.argv[2]), float(sys.argv[3])
folders = {}
known = ("runtime", "arena", "kernels", "graph", "llm", "text", "tools", "bench", "cli", "examples", "include")
for f in data["files"]:
    top = f["filename"].split("/")[0]
    if top not in known:
        continue  # generated files of the build
    a = folders.setdefault(top, [0, 0, 0, 0])
    a[0] += f["line_covered"]; a[1] += f["line_total"]; a[2] += f["branch_covered"]; a[3] += f["branch_total"]
pct = lambda c, t: 100.0 * c / t if t else 100.0
print(f"{'folder':10} {'lines':>16} {'line %':>7} {'branches':>16} {'branch %':>8}")
lib = [0, 0, 0, 0]
for top in sorted(folders):
    c = folders[top]
    print(f"{top:10} {c[0]:>7}/{c[1]:<8} {pct(c[0], c[1]):6.1f}% {c[2]:>7}/{c[3]:<8} {pct(c[2], c[3]):7.1f}%")
    if top in ("runtime", "arena", "kernels", "graph", "llm", "text"):
        lib = [x + y for x, y in zip(lib, c)]
lp, bp = pct(lib[0], lib[1]), pct(lib[2], lib[3])
print(f"{'library':10} {lib[0]:>7}/{lib[1]:<8} {lp:6.1f}% {lib[2]:>7}/{lib[3]:<8} {bp:7.1f}%")
if lp < line_floor or bp < branch_floor:
    print(f"coverage: the library's {lp:.1f}% of lines / {bp:.1f}% of branches is below the floor "
          f"{line_floor:.0f}% / {branch_floor:.0f}%", file=sys.stderr)
    sys.exit(1)
print(f"coverage: the library's lines {lp:.1f}% >= {line_floor:.0f}%, branches {bp:.1f}% >= {branch_floor:.0f}%")
PY
