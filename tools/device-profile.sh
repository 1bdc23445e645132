#!/usr/bin/env bash
# Profiling on the GPU machine: register/shared-memory report of the EM
# kernels (ptxas -v on PTX dumped here by `cargo run --example dump_ptx`),
# and Nsight Compute on one em_warp launch and the large-data kernels.
set -u
cd "$(dirname "$0")/../.device"
out=${OUT:-/tmp}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in ptx/*.ptx; do echo "== $f"; ptxas -arch=sm_90 -v "$f" -o /dev/null 2>&1 | grep -E "Function properties|registers|spill|Compiling entry"; done
ncu --kernel-name em_warp --launch-skip 1 --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
  ./bulkem-bench em --backend cuda --datasets 4000 --starts 100 --iters 100 --json /tmp/x.jsonl > "$out/ncu-warp.txt" 2>&1
grep -E "Duration|Registers|Achieved Occupancy|Theoretical Occupancy|Block Limit|Compute \(SM\) Throughput|Memory Throughput|Executed Ipc|Issue Slots|Waves|Dynamic Shared" "$out/ncu-warp.txt"
ncu --kernel-name regex:em_partial\|em_update --launch-skip 10 --launch-count 4 --section SpeedOfLight --section LaunchStats \
  ./bulkem-bench em --backend cuda --datasets 1 --n 10000000 --starts 1 --iters 100 --json /tmp/x.jsonl > "$out/ncu-grid.txt" 2>&1
grep -E "em_partial|em_update|Duration|Registers|Grid Size|Block Size" "$out/ncu-grid.txt" | head -30
./bulkem-bench em --backend cuda --datasets 1 --n 10000000 --starts 1 --iters 100 --json /tmp/x.jsonl
