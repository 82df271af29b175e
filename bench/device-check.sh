#!/usr/bin/env bash
# The device check, for a machine with an NVIDIA GPU (sm_90 by default; set
# CUDA_ARCH to override). It builds with CUDA; runs the CPU suites and the
# device suite, which compares CUDA against the CPU EP (tiny in f32, bf16 and
# f16, and the Qwen2.5-0.5B shape in bf16: 32 tokens, near-ties printed with
# their margins); runs compute-sanitizer memcheck and racecheck on the device
# suite where the runtime allows it ("not available" otherwise: a sandbox that
# refuses the tool is no failure of ortep); runs the decode benchmark on the
# tiny and 0.5B presets (and K tokens per launch) and prints graph mode's
# speed-up over eager; profiles a 0.5B decode (Nsight Systems: per-kernel
# time; Nsight Compute: DRAM throughput and occupancy per kernel) where the
# tools run; and ends with one summary table. Logs and JSON go to $OUT when it is set, else
# ./device-check-out. Sized for about 6 minutes on an H200.
#
# On a GPU machine with no package registry, first run here
#   ./scripts/fetch-device-debs.sh
# and carry .device-debs (the device tool's `carry`): this script unpacks it
# into a private prefix (scripts/device-prefix.sh) and touches nothing else.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/device-check-out}"
mkdir -p "$out"
export XDG_CACHE_HOME="${XDG_CACHE_HOME:-/tmp/ortep-cache}"
status=0
rows=()
row() { rows+=("$(printf '%-28s %-15s %s' "$1" "$2" "$3")"); echo "$1: $2 $3"; }
refused='not supported|permission|ERR_NVGPUCTRPERM|unable to|not available|no such file'
run() { # run NAME TIMEOUT CMD...: log to $out/NAME.log, one summary row; with TOOL=1 a refusal of the tool is no failure
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS rc=0
  timeout "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
  if [ $rc = 0 ]; then
    row "$name" "ok" "$((SECONDS - t0)) s"
  elif [ $rc = 77 ]; then
    row "$name" "skipped" "$(tail -1 "$out/$name.log")"
  elif [ "${TOOL:-0}" = 1 ] && grep -qiE "$refused" "$out/$name.log"; then
    row "$name" "not available" "$(grep -m1 -iE "$refused" "$out/$name.log" | cut -c1-70)"
  else
    row "$name" "FAIL (rc $rc)" "$((SECONDS - t0)) s, see $name.log"
    status=1
  fi
  return $rc
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  nvcc --version | tail -1; echo "cores: $(nproc)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  echo "avx-512: $(grep -m1 -ow 'avx512[a-z0-9_]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"; } >"$out/machine.txt" 2>&1
cat "$out/machine.txt"

# --- dependencies and build ---------------------------------------------------
if ls .device-debs/*.deb >/dev/null 2>&1; then
  if run deps 120 bash -c 'scripts/device-prefix.sh "$0" >"$1"' "$PWD/.device-prefix" "$out/deps.env"; then
    # shellcheck disable=SC1091
    source "$out/deps.env"
  fi
else
  run deps 600 ./scripts/install-deps.sh
fi
gen=()
command -v make >/dev/null || gen=(-G Ninja)
run configure 300 cmake -S . -B build-gpu "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DORTEP_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" || { printf '%s\n' "${rows[@]}"; exit 1; }
run build 600 cmake --build build-gpu -j"$(nproc)" || { printf '%s\n' "${rows[@]}"; exit 1; }

# --- tests ----------------------------------------------------------------------
run ctest_cpu 400 ctest --test-dir build-gpu --output-on-failure -j8 -E '^(valgrind_|install_consumer|cuda_device)'
run cuda_device 400 env ORTEP_DEVICE_CHECK_LARGE=1 ./build-gpu/tests/test_cuda_device
grep -E '^(tiny|qwen|chunked|sampler|K tokens)' "$out/cuda_device.log" >"$out/cuda_vs_cpu.txt" 2>/dev/null || true

# --- compute-sanitizer ----------------------------------------------------------
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  if [ ! -x "$cs" ]; then
    row "sanitizer_$tool" "not available" "compute-sanitizer not found"
    continue
  fi
  t0=$SECONDS rc=0
  CK_RUN_CASE=core timeout 300 "$cs" --tool "$tool" --error-exitcode 99 ./build-gpu/tests/test_cuda_device \
    >"$out/sanitizer_$tool.log" 2>&1 || rc=$?
  if grep -qiE 'device not supported|not supported on this|unable to (attach|initialize)|target application terminated before first instrumented' \
      "$out/sanitizer_$tool.log" && [ $rc != 99 ]; then
    row "sanitizer_$tool" "not available" "the runtime refused the tool: $(grep -im1 'not supported\|unable' "$out/sanitizer_$tool.log" | cut -c1-60)"
  elif [ $rc = 0 ]; then
    row "sanitizer_$tool" "ok" "$((SECONDS - t0)) s, $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer_$tool.log" | sed 's/=* *//')"
  else
    row "sanitizer_$tool" "FAIL (rc $rc)" "$((SECONDS - t0)) s, see sanitizer_$tool.log"
    status=1
  fi
done

# --- benchmarks -------------------------------------------------------------------
bench=./build-gpu/bench/ortep-bench
run bench_tiny_cuda 120 "$bench" decode --ep cuda --preset tiny --runs 5 --json "$out/decode_tiny_cuda.json"
run bench_tiny_cpu 120 "$bench" decode --ep cpu --preset tiny --runs 5 --json "$out/decode_tiny_cpu.json"
# decode also times K tokens per launch (the step in a conditional WHILE node)
run bench_qwen_bf16 300 "$bench" decode --ep cuda --preset qwen2.5-0.5b --dtype bf16 --tokens 64 --runs 3 \
  --tokens-per-launch 1,4,8,16 --json "$out/decode_qwen_bf16.json"
run bench_qwen_f16 300 "$bench" decode --ep cuda --preset qwen2.5-0.5b --dtype f16 --tokens 64 --runs 3 \
  --json "$out/decode_qwen_f16.json"
run bench_prefill_qwen 300 "$bench" prefill --ep cuda --preset qwen2.5-0.5b --dtype bf16 --lengths 16,128,512 --runs 3 \
  --json "$out/prefill_qwen_bf16.json"
# the KV caches on the CUDA virtual allocator: committed memory by positions,
# whole context vs a short cache, forks sharing a prefix (never run on a GPU yet)
run bench_kv_qwen 300 "$bench" kv --ep cuda --preset qwen2.5-0.5b --dtype bf16 --only memory,speed,forks --runs 3 \
  --json "$out/kv_qwen_bf16.json"
# The CPU EP's AVX-512 dot products (tested under emulation elsewhere) against
# its AVX2 ones on this host's CPU, when it has AVX-512F: same model, one after
# the other (ctest_cpu above already ran the suites on the widest set).
if grep -qw avx512f /proc/cpuinfo; then
  for set in avx512 avx2; do
    run "bench_cpu_$set" 200 env ORTEP_CPU_SIMD=$set "$bench" decode --ep cpu --preset qwen2.5-0.5b --dtype bf16 \
      --mode graph --tokens 32 --runs 3 --weights read --json "$out/decode_cpu_$set.json"
  done
fi
# --- profile: where a token's GPU time goes (nsys for the timeline and the
# per-kernel sums, ncu for achieved bandwidth and occupancy of one step's
# kernels); "not available" where the tool is missing or refused
nsys_bin=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$nsys_bin" ]; then
  TOOL=1 run profile_nsys 240 "$nsys_bin" profile -t cuda,nvtx -o "$out/decode_qwen" --force-overwrite true \
    "$bench" decode --ep cuda --preset qwen2.5-0.5b --dtype bf16 --mode graph --tokens 32 --runs 1 --tokens-per-launch none &&
    "$nsys_bin" stats -r cuda_gpu_kern_sum,nvtx_sum -f csv -o "$out/decode_qwen" "$out/decode_qwen.nsys-rep" \
      >"$out/profile_nsys_stats.log" 2>&1
else
  row profile_nsys "not available" "nsys not found"
fi
if [ -n "$ncu_bin" ]; then
  # one decode step's kernels (after warm-up): duration, DRAM throughput, occupancy
  TOOL=1 run profile_ncu 300 "$ncu_bin" --launch-skip 400 --launch-count 60 \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active \
    --csv "$bench" decode --ep cuda --preset qwen2.5-0.5b --dtype bf16 --mode eager --tokens 8 --runs 1 --warmup 2 \
    --tokens-per-launch none
  cp "$out/profile_ncu.log" "$out/profile_ncu.csv" 2>/dev/null || true
else
  row profile_ncu "not available" "ncu not found"
fi

ratio() { # graph over eager from a decode JSON
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); m=j["modes"]
g = m["graph"]
print("graph %.0f tok/s, eager %.0f tok/s: graph/eager %.2fx; p50 %.1f us; %d kernels in graphs; launch %.1f us/token" % (
      g["tokens_per_s"], m["eager"]["tokens_per_s"], j["speedup_graph_over_eager"], g["latency_p50_us"],
      g["graph_kernel_nodes"], g["host_launch_us_per_token"]))' "$1" 2>/dev/null ||
    echo "no figures"
}
per_launch() { # tokens/s per K from a decode JSON
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))
print(", ".join("K=%s %.0f tok/s" % (e["tokens_per_launch"] or "auto", e["tokens_per_s"]) for e in j["tokens_per_launch"]))' \
    "$1" 2>/dev/null || echo "no figures"
}
for f in tiny_cuda tiny_cpu qwen_bf16 qwen_f16; do
  [ -f "$out/decode_$f.json" ] && row "ratio_$f" "" "$(ratio "$out/decode_$f.json")"
  [ -f "$out/decode_$f.json" ] && row "per_launch_$f" "" "$(per_launch "$out/decode_$f.json")"
done
for set in avx512 avx2; do
  [ -f "$out/decode_cpu_$set.json" ] && row "cpu_$set" "" "$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))
b=j.get("bandwidth_bound",{})
print("%s: %.1f tok/s, %.0f%% of %.1f GB/s read with %d threads" % (j.get("cpu_simd"), j["modes"]["graph"]["tokens_per_s"],
      100*b.get("fraction_achieved",0), b.get("read_bytes_per_s",0)/1e9, b.get("threads",0)))' "$out/decode_cpu_$set.json" 2>/dev/null)"
done
[ -f "$out/decode_qwen_bf16.json" ] && python3 - "$out/decode_qwen_bf16.json" <<'EOF' >>"$out/ratios.txt" 2>&1
import json, sys
j = json.load(open(sys.argv[1]))
s = j["speedup_graph_over_eager"]
print("qwen2.5-0.5b bf16: graph mode %s eager (%.2fx)" % ("beats" if s > 1 else "DOES NOT beat", s))
EOF

# --- summary ----------------------------------------------------------------------
{
  echo "=== device check summary ($(head -1 "$out/machine.txt")) ==="
  printf '%s\n' "${rows[@]}"
  echo "--- CUDA vs CPU (device suite)"
  cat "$out/cuda_vs_cpu.txt" 2>/dev/null
  cat "$out/ratios.txt" 2>/dev/null
  echo "device check: $([ $status = 0 ] && echo PASSED || echo FAILED)"
} | tee "$out/summary.txt"
exit $status
