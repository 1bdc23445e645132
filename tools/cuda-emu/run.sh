#!/bin/sh
# Emulate kernels on the CPU and check them (no GPU needed): the HMM
# kernels against a C++ reference (hmm_emu_test.cpp), and the convergence
# diagnostics against the host's, through core/tests/gibbs_diagnostics.rs.
# EMU_CXXFLAGS="-fsanitize=address -g" also checks every access is in bounds.
set -e
here=$(cd "$(dirname "$0")" && pwd)
kernels="$here/../../src/rust/core/kernels"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
build() {  # build NAME KERNEL_FILE: NAME.cpp with the kernel file as gen_NAME.h
  { cat "$kernels/common.cuh"; sed 's/extern __shared__ double sm\[\];/double* sm = EMU_SMEM;/' "$kernels/$2"; } > "$out/gen_$1.h"
  g++ -std=c++20 -O1 -pthread ${EMU_CXXFLAGS:-} -I"$here" -I"$out" -include "$here/emu.h" -o "$out/$1" "$here/$1.cpp"
}
build hmm_emu_test hmm.cu
"$out/hmm_emu_test"
build diagnostics_emu diagnostics.cu
cd "$here/../../src/rust"
BULKEM_EMU_DIAGNOSTICS="$out/diagnostics_emu" cargo test --workspace --test gibbs_diagnostics -- --nocapture
