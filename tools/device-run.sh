#!/usr/bin/env bash
# Runs on the GPU machine (no Rust, no R): the carried test and benchmark
# binaries in .device/, then the peers, side by side. Built here by
# tools/device-build.sh. Usage: bash tools/device-run.sh
# [tests|bench|peers|reduce|all|select|hmm|mixed|bootstrap|variants|multi|multi-tests|multi-bench|multi-hmm|multi-gibbs]
# `select` (issue 16, not part of `all`): the EM GPU tests, bulkem-bench
# select-suite, then the torch peer once per K = 1..5 (20 starts).
# `hmm` (not part of `all`): the HMM GPU tests, bulkem-bench hmm-suite, then
# the torch peers of its two GPU cases (categorical and Gaussian), on
# device-resident data and from host memory (inst/bench/torch_hmm_host.py).
# Compiled kernels are kept between the binaries of a call (the kernel
# cache, src/rust/core/src/gpu/cache.rs: NVRTC takes 0.2-6 s per kernel,
# which made each test binary spend minutes compiling) and between calls:
# the cache comes back as $OUT/kernels.tgz; copy it into .device/ here and
# the next call starts with it.
set -u
what=${1:-all}
cd "$(dirname "$0")/../.device"
out=${OUT:-/tmp}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export BULKEM_KERNEL_CACHE=${BULKEM_KERNEL_CACHE:-/tmp/bulkem-kernels}
mkdir -p "$BULKEM_KERNEL_CACHE"
[ -f kernels.tgz ] && tar xzf kernels.tgz -C "$BULKEM_KERNEL_CACHE"
trap 'tar czf "$out/kernels.tgz" -C "$BULKEM_KERNEL_CACHE" .' EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader
# The GPU test binaries. kernels_compile is not among them: CI runs it
# against NVRTC 13.0.88, and here it took 526 s (2026-11-27, two H200s).
run_tests() {
  for t in "$@"; do
    echo "== test $t"
    BULKEM_REQUIRE_NVRTC=1 ./$t --test-threads=1 --nocapture > "$out/test-$t.log" 2>&1
    echo "exit status $?"
    grep -E "test result|: [0-9]+ datasets|panicked|skipped|disagree|FAILED|failed" "$out/test-$t.log" | head -40
  done
}
if [ "$what" = tests ] || [ "$what" = all ]; then
  run_tests $(ls | grep '_gpu$')
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  echo "== bulkem-bench em-suite"; ./bulkem-bench em-suite --json "$out/bench.jsonl" 2>&1 | tee "$out/bench.log"
fi
if [ "$what" = reduce ] || [ "$what" = all ]; then
  echo "== bulkem-bench reduce"; ./bulkem-bench reduce --backend cuda --log2 20,22,24,26,28,30 --json "$out/bench.jsonl" 2>&1 | tee "$out/bench-reduce.log"
  for k in 20 24 28 30; do python3 peers/reduce_peer.py $k 2>&1 | tee -a "$out/peer-reduce.log"; done
fi
if [ "$what" = peers ] || [ "$what" = all ]; then
  echo "== peer torch_igem (4,000 datasets: throughput does not depend on D)"
  python3 peers/torch_igem.py 4000 2000 100 2 100 400 2>&1 | tee "$out/peer-igem.log"
fi
if [ "$what" = scan ]; then
  # Issue 24's one long sequence: the HMM GPU tests, bulkem-bench on it
  # (CPU and CUDA), then dynamax (wheels carried in .device/wheels, see
  # ../shared/peers/README.md) in the same call.
  run_tests hmm_gpu hmm_emissions_gpu
  echo "== bulkem-bench hmm N=8 M=1 T=262144 V=16, categorical and Gaussian"
  ./bulkem-bench hmm --states 8 --seqs 1 --length 262144 --symbols 16 --backend both --json "$out/bench-scan.jsonl" 2>&1 | tee "$out/bench-scan.log"
  ./bulkem-bench hmm --states 8 --seqs 1 --length 262144 --emission gaussian --backend cuda --json "$out/bench-scan.jsonl" 2>&1 | tee -a "$out/bench-scan.log"
  if [ -d wheels ]; then
    python3 -m pip install --quiet --no-deps --no-index --find-links wheels --target "$out/pylib" dynamax==1.0.3 tfp-nightly dm-tree gast decorator fastprogress > "$out/pip.log" 2>&1 || tail -5 "$out/pip.log"
    echo "== peer dynamax_hmm.py 8 1 262144 16"
    PYTHONPATH="$out/pylib" python3 peers/dynamax_hmm.py 8 1 262144 16 2>&1 | tee "$out/peer-dynamax.log"
    rm -rf "$out/pylib"
  fi
fi
if [ "$what" = hmm ]; then
  run_tests transfer_gpu hmm_gpu hmm_emissions_gpu
  echo "== bulkem-bench hmm-suite"
  ./bulkem-bench hmm-suite --backend cuda --json "$out/bench-hmm.jsonl" 2>&1 | tee "$out/bench-hmm.log"
  echo "== peers torch_hmm, torch_hmm_gaussian"
  for shape in "512 512 16" "32 10000 1000"; do
    v=$([ "${shape%% *}" = 512 ] && echo 512 || echo 16)
    python3 peers/torch_hmm.py $shape $v 2>&1 | tee -a "$out/peer-hmm.log"
    python3 peers/torch_hmm_gaussian.py $shape 2>&1 | tee -a "$out/peer-hmm.log"
    (cd peers && python3 torch_hmm_host.py categorical $shape $v && python3 torch_hmm_host.py gaussian $shape) 2>&1 | tee -a "$out/peer-hmm.log"
  done
fi
# `hmm-small` (issues 20 and 24, not part of `all`): the HMM GPU tests,
# hmm-suite, then the torch peer from host memory on its N = 4 shapes
# (categorical and Gaussian), where the thread-per-sequence kernels run.
if [ "$what" = hmm-small ]; then
  run_tests hmm_gpu hmm_emissions_gpu
  echo "== bulkem-bench hmm-suite"
  ./bulkem-bench hmm-suite --backend cuda --json "$out/bench-hmm.jsonl" 2>&1 | tee "$out/bench-hmm.log"
  echo "== torch_hmm_host.py, N = 4, M = 100,000, T = 200"
  (cd peers && python3 torch_hmm_host.py categorical 4 100000 200 8 && python3 torch_hmm_host.py gaussian 4 100000 200) 2>&1 | tee -a "$out/peer-hmm.log"
fi
# `em-table` (issue 20, not part of `all`): the float64 and mixed EM GPU
# tests, then the 40,000-dataset EM in float64 with the built-in kernels
# and with the variant in kv1/ (BULKEM_KERNEL_DIR), alternating, and mixed
# once each.
if [ "$what" = em-table ]; then
  for t in gpu_matches_cpu_fixed_iterations gpu_matches_cpu_converged gpu_mixed_precision_matches_double gpu_fits_ten_million_observations; do
    echo "== em_gpu $t"; BULKEM_REQUIRE_NVRTC=1 ./em_gpu --exact $t --test-threads=1 > "$out/test-em-$t.log" 2>&1; echo "exit status $?"
    grep -E "test result|panicked|disagree" "$out/test-em-$t.log" | head -5
  done
  for run in 1 2; do
    for dir in "" kv1; do
      for p in double mixed; do
        [ "$p" = mixed ] && [ "$run" = 2 ] && continue
        echo "== run $run, kernels ${dir:-built-in}, $p"
        BULKEM_KERNEL_DIR=${dir:+$PWD/$dir} ./bulkem-bench em --backend cuda --datasets 40000 --n 2000 --starts 100 --iters 100 --epsilon 0 --precision $p --json "$out/bench.jsonl" 2>&1 | tee -a "$out/bench-em.log"
      done
    done
  done
fi
# `variants` (issue 25, not part of `all`): the EM GPU tests (constraints
# and censored data among them; kernels_compile runs in CI), then the 40,000-dataset EM as it is, with
# weights, with a shared shape, and right-censored at 5.
if [ "$what" = variants ]; then
  run_tests em_gpu
  for v in "" "--weighted yes" "--equal yes" "--timeout 5"; do
    echo "== bulkem-bench em 40,000 x 2,000, 10 starts x 100 iterations $v"
    ./bulkem-bench em --datasets 40000 --n 2000 --starts 10 --iters 100 --backend cuda --json "$out/bench.jsonl" $v 2>&1 | tee -a "$out/bench-variants.log"
  done
fi
# `bootstrap` (issue 25, not part of `all`): the EM GPU tests and the
# bootstrap's CPU tests, then bulkem-bench bootstrap: the GPU case of the
# issue (1,000 x 2,000, K = 1..3, B = 999), the Normal family, and the
# host's 16 cores on 16 datasets.
if [ "$what" = bootstrap ]; then
  run_tests em_gpu em_bootstrap
  echo "== bulkem-bench bootstrap"
  ./bulkem-bench bootstrap --family invgauss --datasets 1000 --n 2000 --replicates 999 --components 1,2,3 --backend cuda --json "$out/bench.jsonl" 2>&1 | tee -a "$out/bench-bootstrap.log"
  ./bulkem-bench bootstrap --family normal --datasets 1000 --n 2000 --replicates 999 --components 1,2,3 --backend cuda --json "$out/bench.jsonl" 2>&1 | tee -a "$out/bench-bootstrap.log"
  ./bulkem-bench bootstrap --family invgauss --datasets 16 --n 2000 --replicates 999 --components 1,2,3 --backend cpu --json "$out/bench.jsonl" 2>&1 | tee -a "$out/bench-bootstrap.log"
fi
# `mixed` (issue 20, not part of `all`): the EM GPU tests, then the
# 40,000-dataset EM in float64 and with precision = "mixed" (which also
# fits in float64, untimed, and compares), epsilon 0 and 1e-6.
if [ "$what" = mixed ]; then
  run_tests em_gpu
  for eps in 0 1e-6; do
    for p in double mixed; do
      echo "== bulkem-bench em 40,000 x 2,000 x 100 starts x 100 iterations, epsilon $eps, $p"
      ./bulkem-bench em --backend cuda --datasets 40000 --n 2000 --starts 100 --iters 100 --epsilon $eps --precision $p --json "$out/bench.jsonl" 2>&1 | tee -a "$out/bench-mixed.log"
    done
  done
fi
# `multi` (issue 21, on a machine of two GPUs): every GPU test with both
# GPUs visible, then the 40,000-dataset EM and hmm-suite with one and with
# two visible. `multi-tests` and `multi-bench` are its two halves (one
# device call each).
if [ "$what" = multi ] || [ "$what" = multi-tests ]; then
  nvidia-smi -L
  run_tests $(ls | grep '_gpu$')
fi
if [ "$what" = multi ] || [ "$what" = multi-bench ]; then
  for vis in 0 0,1; do
    echo "== CUDA_VISIBLE_DEVICES=$vis bulkem-bench em (40,000 x 2,000, 100 starts, 100 iterations)"
    CUDA_VISIBLE_DEVICES=$vis ./bulkem-bench em --backend cuda --datasets 40000 --starts 100 --iters 100 --json "$out/bench-multi.jsonl" 2>&1 | tee -a "$out/bench-multi.log"
    echo "== CUDA_VISIBLE_DEVICES=$vis bulkem-bench hmm-suite"
    CUDA_VISIBLE_DEVICES=$vis ./bulkem-bench hmm-suite --backend cuda --json "$out/bench-multi.jsonl" 2>&1 | tee -a "$out/bench-multi.log"
  done
  echo "== peers of the N = 512 cases (one GPU)"
  CUDA_VISIBLE_DEVICES=0 python3 peers/torch_hmm.py 512 512 16 512 2>&1 | tee -a "$out/peer-hmm.log"
  CUDA_VISIBLE_DEVICES=0 python3 peers/torch_hmm_gaussian.py 512 512 16 2>&1 | tee -a "$out/peer-hmm.log"
fi
# `multi-hmm` (issue 21): the HMM GPU tests with both GPUs visible, then
# hmm-suite with one and with two visible.
if [ "$what" = multi-hmm ]; then
  nvidia-smi -L
  run_tests transfer_gpu hmm_gpu hmm_emissions_gpu
  for vis in 0 0,1 0 0,1; do
    echo "== CUDA_VISIBLE_DEVICES=$vis bulkem-bench hmm-suite"
    CUDA_VISIBLE_DEVICES=$vis ./bulkem-bench hmm-suite --backend cuda --json "$out/bench-multi.jsonl" 2>&1 | tee -a "$out/bench-multi.log"
  done
fi
# `multi-gibbs` (issue 21): gibbs_gpu with both GPUs visible, each test in
# its own process and all at once: NVRTC compiles each family's sampler
# (about 6 s a kernel), which one process does one after another (its
# 13 tests did not finish in 240 s). Then hmm-suite with one and two GPUs.
if [ "$what" = multi-gibbs ]; then
  nvidia-smi -L
  echo "== gibbs_gpu, one process per test"
  pids=()
  for t in $(./gibbs_gpu --list 2>/dev/null | sed -n 's/: test$//p'); do
    BULKEM_REQUIRE_NVRTC=1 ./gibbs_gpu --exact "$t" --test-threads=1 --nocapture > "$out/gibbs-$t.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  for f in "$out"/gibbs-*.log; do echo "$(basename "$f" .log): $(grep -E 'test result' "$f")"; grep -E "panicked|FAILED" "$f" | head -5; done
  (cd "$out" && tar czf gibbs-logs.tgz gibbs-*.log && rm gibbs-*.log)
  for vis in 0 0,1; do
    echo "== CUDA_VISIBLE_DEVICES=$vis bulkem-bench hmm-suite"
    CUDA_VISIBLE_DEVICES=$vis ./bulkem-bench hmm-suite --backend cuda --json "$out/bench-multi.jsonl" 2>&1 | tee -a "$out/bench-multi.log"
  done
fi
if [ "$what" = select ]; then
  run_tests em_gpu
  echo "== bulkem-bench select-suite"
  ./bulkem-bench select-suite --json "$out/bench-select.jsonl" 2>&1 | tee "$out/bench-select.log"
  # The peer's throughput does not depend on D: 4,000 datasets per K (times
  # x 10 for 40,000), in chunks of 80,000 (dataset, start, component)
  # triples, as the 100-start M = 2 run above (1.28 GB per (.., N) tensor).
  echo "== peer torch_igem per K: 4,000 datasets x 20 starts x 100 iterations"
  for m in 1 2 3 4 5; do
    python3 peers/torch_igem.py 4000 2000 20 $m 100 $((80000 / (20 * m))) 2>&1 | tee -a "$out/peer-select.log"
  done
  echo "== peer scaling check: M = 2, twice the datasets and twice the chunk"
  python3 peers/torch_igem.py 8000 2000 20 2 100 4000 2>&1 | tee -a "$out/peer-select.log"
  # Kernel time alone, launch by launch (ncu serialises launches, so the
  # wall time of this run means nothing; one metric: one pass, no replay).
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -n "$ncu" ]; then
    echo "== ncu: em kernel durations of select (CUDA, epsilon 0)"
    timeout 240 "$ncu" --clock-control none --print-units base --metrics gpu__time_duration.sum,launch__grid_size -k regex:em_ --csv \
      --log-file "$out/ncu-select.csv" ./bulkem-bench select --epsilon 0 --json /dev/null > "$out/ncu-bench.log" 2>&1
    echo "ncu exit status $?"; tail -5 "$out/ncu-bench.log"
    python3 - "$out/ncu-select.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: sys.exit(print(open(sys.argv[1]).read()[-2000:]))
h = rows[0]; rows = rows[1:]
col = lambda name: h.index(name)
ids, kn, mn, mv = col("ID"), col("Kernel Name"), col("Metric Name"), col("Metric Value")
k = {}
for r in rows:
    k.setdefault(r[ids], {"name": r[kn]})[r[mn]] = float(r[mv].replace(",", ""))
launches = [v for v in k.values() if v.get("launch__grid_size", 0) > 100]
tot = sum(v["gpu__time_duration.sum"] for v in launches)
print(f"{len(launches)} large em launches, kernel time {tot / 1e9:.3f} s:", ", ".join(f"{v['gpu__time_duration.sum'] / 1e6:.1f}" for v in launches), "ms")
PY
  fi
fi
