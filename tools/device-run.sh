#!/usr/bin/env bash
# Runs on the GPU machine (no Rust, no R): the carried test and benchmark
# binaries in .device/, then the peers, side by side. Built here by
# tools/device-build.sh. Usage: bash tools/device-run.sh [tests|bench|peers|reduce|all]
set -u
what=${1:-all}
cd "$(dirname "$0")/../.device"
out=${OUT:-/tmp}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader
if [ "$what" = tests ] || [ "$what" = all ]; then
  for t in kernels_compile $(ls | grep '_gpu$'); do
    echo "== test $t"
    BULKEM_REQUIRE_NVRTC=1 ./$t --test-threads=1 --nocapture > "$out/test-$t.log" 2>&1
    grep -E "test result|: [0-9]+ datasets|panicked|skipped|disagree" "$out/test-$t.log" | head -40
  done
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
