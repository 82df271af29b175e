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
# ./device-check-out.
#
# It keeps to a deadline: DEVICE_CHECK_SECONDS (default 540) from its start.
# The steps run most-needed first (build, the device suite, the GPU
# benchmarks, memcheck, the profile, then racecheck and the CPU side); each
# step's time limit is cut to what is left, a step that would start with
# under 30 s left is reported "skipped (deadline)", and the summary is always
# printed, so one device-tool call of DEVICE_CHECK_SECONDS + 30 s returns the
# whole table.
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
deadline=${DEVICE_CHECK_SECONDS:-540}
left() { echo $((deadline - SECONDS)); }
cap() { # cap LIMIT: LIMIT cut to what the deadline leaves (less 10 s for the summary); 0: no time to start
  local l=$(($(left) - 10))
  if [ "$l" -lt 20 ]; then echo 0; elif [ "$1" -lt "$l" ]; then echo "$1"; else echo "$l"; fi
}
row() { rows+=("$(printf '%-28s %-15s %s' "$1" "$2" "$3")"); echo "$1: $2 $3"; }
refused='not supported|permission|ERR_NVGPUCTRPERM|unable to|not available|no such file'
run() { # run NAME TIMEOUT CMD...: log to $out/NAME.log, one summary row; with TOOL=1 a refusal of the tool is no failure
  local name=$1 asked=$2 limit
  limit=$(cap "$asked")
  shift 2
  if [ "$limit" = 0 ]; then
    row "$name" "skipped" "(deadline: $(left) s of ${deadline} s left)"
    return 75
  fi
  local t0=$SECONDS rc=0
  timeout "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
  if [ $rc = 0 ]; then
    row "$name" "ok" "$((SECONDS - t0)) s"
  elif [ $rc = 77 ]; then
    row "$name" "skipped" "$(tail -1 "$out/$name.log")"
  elif [ "${TOOL:-0}" = 1 ] && grep -qiE "$refused" "$out/$name.log"; then
    row "$name" "not available" "$(grep -m1 -iE "$refused" "$out/$name.log" | cut -c1-70)"
  elif [ $rc = 124 ] && [ "$limit" -lt "$asked" ]; then
    row "$name" "cut (deadline)" "stopped after $((SECONDS - t0)) s, see $name.log"
  else
    row "$name" "FAIL (rc $rc)" "$((SECONDS - t0)) s, see $name.log"
    status=1
  fi
  return $rc
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  nvcc --version | tail -1; echo "cores: $(nproc)"; echo "kernel: $(uname -r)"
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

# --- the device suite (CUDA against the CPU EP) ----------------------------------
run cuda_device 240 env ORTEP_DEVICE_CHECK_LARGE=1 ./build-gpu/tests/test_cuda_device
grep -E '^(tiny|qwen|chunked|sampler|K tokens|quantized)' "$out/cuda_device.log" >"$out/cuda_vs_cpu.txt" 2>/dev/null || true

# --- GPU benchmarks -----------------------------------------------------------------
bench=./build-gpu/bench/ortep-bench
run bench_tiny_cuda 90 "$bench" decode --ep cuda --preset tiny --runs 5 --json "$out/decode_tiny_cuda.json"
# decode also times K tokens per launch (the step in a conditional WHILE node)
run bench_qwen_bf16 150 "$bench" decode --ep cuda --preset qwen2.5-0.5b --dtype bf16 --tokens 64 --runs 3 \
  --tokens-per-launch 1,4,8,16 --json "$out/decode_qwen_bf16.json"
# q8_0 / q4_0 weights quantized at open (dp4a GEMV per row)
for q in q8_0 q4_0; do
  run "bench_qwen_$q" 90 "$bench" decode --ep cuda --preset qwen2.5-0.5b --dtype $q --tokens 64 --runs 3 \
    --tokens-per-launch none --json "$out/decode_qwen_$q.json"
done
run bench_prefill_qwen 120 "$bench" prefill --ep cuda --preset qwen2.5-0.5b --dtype bf16 --lengths 16,128,512 --runs 3 \
  --json "$out/prefill_qwen_bf16.json"
# the KV caches on the CUDA virtual allocator: committed memory by positions,
# whole context vs a short cache, forks sharing a prefix
run bench_kv_qwen 120 "$bench" kv --ep cuda --preset qwen2.5-0.5b --dtype bf16 --only memory,speed,forks --runs 3 \
  --json "$out/kv_qwen_bf16.json"

# --- compute-sanitizer memcheck -----------------------------------------------------
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
sanitize() { # sanitize TOOL LIMIT
  local tool=$1 limit
  limit=$(cap "$2")
  if [ ! -x "$cs" ]; then
    row "sanitizer_$tool" "not available" "compute-sanitizer not found"
    return
  elif [ "$limit" = 0 ]; then
    row "sanitizer_$tool" "skipped" "(deadline: $(left) s of ${deadline} s left)"
    return
  fi
  local t0=$SECONDS rc=0
  # (verbose: each test is named as it ends, so a crash under a tool points at the next one)
  CK_RUN_CASE=core CK_VERBOSITY=verbose ORTEP_DEVICE_CHECK_SANITIZER=1 timeout "$limit" "$cs" --tool "$tool" --error-exitcode 99 ./build-gpu/tests/test_cuda_device \
    >"$out/sanitizer_$tool.log" 2>&1 || rc=$?
  if grep -qiE 'device not supported|not supported on this|unable to (attach|initialize)|target application terminated before first instrumented' \
      "$out/sanitizer_$tool.log" && [ $rc != 99 ]; then
    row "sanitizer_$tool" "not available" "the runtime refused the tool: $(grep -im1 'not supported\|unable' "$out/sanitizer_$tool.log" | cut -c1-60)"
  elif [ $rc = 0 ]; then
    row "sanitizer_$tool" "ok" "$((SECONDS - t0)) s, $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer_$tool.log" | sed 's/=* *//')"
  elif [ $rc = 124 ] && [ "$limit" -lt "$2" ]; then
    row "sanitizer_$tool" "cut (deadline)" "stopped after $((SECONDS - t0)) s, see sanitizer_$tool.log"
  else
    row "sanitizer_$tool" "FAIL (rc $rc)" "$((SECONDS - t0)) s, see sanitizer_$tool.log"
    status=1
  fi
}
sanitize memcheck 150

# --- profile: where a token's GPU time goes (ncu: duration, achieved DRAM
# throughput and occupancy of one step's kernels; nsys: the timeline and the
# per-kernel sums); "not available" where the tool is missing or refused
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
nsys_bin=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$ncu_bin" ]; then
  # one decode step's kernels (after warm-up), clocks left alone
  # (a one-token prompt: every launch is a decode step's, 245 of them; the
  # third step's are profiled)
  TOOL=1 run profile_ncu 120 "$ncu_bin" --clock-control none --launch-skip 490 --launch-count 245 \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active \
    --csv "$bench" decode --ep cuda --preset qwen2.5-0.5b --dtype bf16 --mode eager --prompt-len 1 --tokens 4 --runs 1 \
    --warmup 2 --tokens-per-launch none
  cp "$out/profile_ncu.log" "$out/profile_ncu.csv" 2>/dev/null || true
  # per kernel: launches, summed duration, duration-weighted DRAM throughput and occupancy
  python3 - "$out/profile_ncu.csv" >"$out/profile_ncu_summary.txt" 2>/dev/null <<'EOF'
import csv, sys, collections
hdr, k = None, collections.OrderedDict()
for r in csv.reader(open(sys.argv[1])):
    if r and r[0] == "ID": hdr = r; continue
    if not hdr or len(r) != len(hdr): continue
    d = dict(zip(hdr, r)); name = d["Kernel Name"].split("(")[0][:44]
    v = float(d["Metric Value"].replace(",", "")); key = (d["ID"], name)
    k.setdefault(key, {})[d["Metric Name"]] = v
agg = collections.OrderedDict()
for (i, name), m in k.items():
    a = agg.setdefault(name, [0, 0.0, 0.0, 0.0]); t = m.get("gpu__time_duration.sum", 0)
    a[0] += 1; a[1] += t
    a[2] += t * m.get("dram__throughput.avg.pct_of_peak_sustained_elapsed", 0)
    a[3] += t * m.get("sm__warps_active.avg.pct_of_peak_sustained_active", 0)
tot = sum(a[1] for a in agg.values())
print("%-44s %8s %10s %6s %9s %9s" % ("kernel", "launches", "time (us)", "share", "DRAM %pk", "occupancy"))
for n, a in sorted(agg.items(), key=lambda x: -x[1][1]):
    print("%-44s %8d %10.1f %5.1f%% %8.1f%% %8.1f%%" % (n, a[0], a[1] / 1e3, 100 * a[1] / tot, a[2] / max(a[1], 1), a[3] / max(a[1], 1)))
print("one step: %d kernels, %.1f us of kernel time (serialised by the profiler)" % (sum(a[0] for a in agg.values()), tot / 1e3))
EOF
  [ -s "$out/profile_ncu_summary.txt" ] && row profile_ncu_step "" "$(tail -1 "$out/profile_ncu_summary.txt")"
else
  row profile_ncu "not available" "ncu not found"
fi
if [ -n "$nsys_bin" ]; then
  TOOL=1 run profile_nsys 90 "$nsys_bin" profile -t cuda,nvtx -o "$out/decode_qwen" --force-overwrite true \
    "$bench" decode --ep cuda --preset qwen2.5-0.5b --dtype bf16 --mode graph --tokens 32 --runs 1 --tokens-per-launch none &&
    "$nsys_bin" stats -r cuda_gpu_kern_sum,nvtx_sum -f csv -o "$out/decode_qwen" "$out/decode_qwen.nsys-rep" \
      >"$out/profile_nsys_stats.log" 2>&1
else
  row profile_nsys "not available" "nsys not found"
fi

# --- what is left if time allows: f16, racecheck, the CPU side --------------------
run bench_qwen_f16 90 "$bench" decode --ep cuda --preset qwen2.5-0.5b --dtype f16 --tokens 64 --runs 3 \
  --json "$out/decode_qwen_f16.json"
sanitize racecheck 200
run bench_tiny_cpu 60 "$bench" decode --ep cpu --preset tiny --runs 5 --json "$out/decode_tiny_cpu.json"
# The CPU EP's AVX-512 dot products (tested under emulation elsewhere) against
# its AVX2 ones on this host's CPU, when it has AVX-512F: same model, one after
# the other
if grep -qw avx512f /proc/cpuinfo; then
  for set in avx512 avx2; do
    run "bench_cpu_$set" 90 env ORTEP_CPU_SIMD=$set "$bench" decode --ep cpu --preset qwen2.5-0.5b --dtype bf16 \
      --mode graph --tokens 32 --runs 3 --weights read --json "$out/decode_cpu_$set.json"
  done
fi
# the CPU suites (CI runs them too; here they check the CUDA build's library)
run ctest_cpu 300 ctest --test-dir build-gpu --output-on-failure -j8 -E '^(valgrind_|install_consumer|cuda_device)'

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
for f in tiny_cuda tiny_cpu qwen_bf16 qwen_f16 qwen_q8_0 qwen_q4_0; do
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
  [ -s "$out/profile_ncu_summary.txt" ] && { echo "--- one decode step's kernels (ncu)"; cat "$out/profile_ncu_summary.txt"; }
  echo "device check: $([ $status = 0 ] && echo PASSED || echo FAILED)"
} | tee "$out/summary.txt"
exit $status
