#!/usr/bin/env bash
# The device check, for a machine with an NVIDIA GPU (sm_90 by default; set
# CUDA_ARCH to override): build with CUDA, run the test suite including the
# device tests, run compute-sanitizer memcheck on the device tests, and run
# the decode and replay benchmarks on the tiny and qwen2.5-0.5b presets in
# every mode. Logs and JSON go to $OUT when it is set, else ./device-check-out.
# Sized to finish within about 8 minutes on an H200.
#
# On a GPU machine with no package registry, first run here
#   ./scripts/fetch-device-debs.sh
# and carry .device-debs (the device tool's `carry`); this script unpacks it.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/device-check-out}"
mkdir -p "$out"
export XDG_CACHE_HOME="${XDG_CACHE_HOME:-/tmp/ortep-cache}"
status=0
step() { echo "=== $* ===" | tee -a "$out/summary.txt"; }
run() { # run NAME CMD...: log to $out/NAME.log, record pass/fail
  local name=$1; shift
  local t0=$SECONDS
  if "$@" >"$out/$name.log" 2>&1; then
    echo "ok   $name ($((SECONDS - t0)) s)" | tee -a "$out/summary.txt"
  else
    echo "FAIL $name ($((SECONDS - t0)) s, rc $?): see $name.log" | tee -a "$out/summary.txt"
    status=1
  fi
}

step "machine"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true; nvcc --version | tail -1; nproc; } \
  >"$out/machine.txt" 2>&1
cat "$out/machine.txt" | tee -a "$out/summary.txt"

step "install and build (Release, CUDA arch ${CUDA_ARCH:-90})"
if [ -d .device-debs ] && ls .device-debs/*.deb >/dev/null 2>&1; then
  # No registry on a GPU machine: unpack the packages carried from a machine
  # that has one (scripts/fetch-device-debs.sh), as the device README does.
  run deps bash -c 'for f in .device-debs/*.deb; do dpkg -x "$f" /; done; ldconfig'
else
  run deps ./scripts/install-deps.sh
fi
run configure cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DORTEP_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}"
run build cmake --build build-gpu -j"$(nproc)"

step "tests (device tests included)"
run ctest ctest --test-dir build-gpu --output-on-failure -j4 -E '^(valgrind_|install_consumer)'
run cuda_device ./build-gpu/tests/test_cuda_device

step "compute-sanitizer memcheck on the device tests"
if command -v compute-sanitizer >/dev/null || [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  CK_FORK=no run memcheck "$cs" --tool memcheck --error-exitcode 1 ./build-gpu/tests/test_cuda_device
else
  echo "compute-sanitizer not found: skipped" | tee -a "$out/summary.txt"
fi

step "benchmarks"
bench=./build-gpu/bench/ortep-bench
run bench_replay "$bench" replay --json "$out/replay.json"
run bench_tiny "$bench" decode --ep cuda --preset tiny --runs 5 --json "$out/decode_tiny.json"
run bench_tiny_cpu "$bench" decode --ep cpu --preset tiny --runs 5 --json "$out/decode_tiny_cpu.json"
run bench_qwen_bf16 "$bench" decode --ep cuda --preset qwen2.5-0.5b --dtype bf16 --tokens 64 --runs 3 \
  --json "$out/decode_qwen_bf16.json"
run bench_qwen_f16 "$bench" decode --ep cuda --preset qwen2.5-0.5b --dtype f16 --tokens 64 --runs 3 \
  --json "$out/decode_qwen_f16.json"
for f in bench_tiny bench_tiny_cpu bench_qwen_bf16 bench_qwen_f16 bench_replay; do
  [ -f "$out/$f.log" ] && { echo "--- $f"; grep -vE '^\s*$' "$out/$f.log" | tail -30; } >>"$out/summary.txt"
done
echo "device check: $([ $status = 0 ] && echo PASSED || echo FAILED)" | tee -a "$out/summary.txt"
exit $status
