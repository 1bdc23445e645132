#!/bin/sh
# Emulate the HMM kernels on the CPU and check them (no GPU needed).
# EMU_CXXFLAGS="-fsanitize=address -g" also checks every access is in bounds.
set -e
here=$(cd "$(dirname "$0")" && pwd)
kernels="$here/../../src/rust/core/kernels"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
{ cat "$kernels/common.cuh"; sed 's/extern __shared__ double sm\[\];/double* sm = EMU_SMEM;/' "$kernels/hmm.cu"; } > "$out/gen_hmm.h"
g++ -std=c++20 -O1 -pthread ${EMU_CXXFLAGS:-} -I"$here" -I"$out" -include "$here/emu.h" -o "$out/hmm_emu_test" "$here/hmm_emu_test.cpp"
"$out/hmm_emu_test"
