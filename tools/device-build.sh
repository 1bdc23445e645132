#!/usr/bin/env bash
# Builds, here, what tools/device-run.sh runs on the GPU machine, into
# .device/ (ignored by git; carried with the device tool's `carry`).
set -euo pipefail
cd "$(dirname "$0")/.."
# Binaries and peers are replaced; the carried wheels (wheels/) and the
# compiled kernels a device run brought back (kernels.tgz) are kept.
mkdir -p .device/peers && find .device -maxdepth 1 -type f ! -name kernels.tgz -delete && rm -f .device/peers/*
cd src/rust
cargo build --release --bin bulkem-bench
cp target/release/bulkem-bench ../../.device/
cargo test --release -p bulkem-core --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        shutil.copy(m["executable"], "../../.device/" + m["target"]["name"])
'
cd ../..
cp "${BULKEM_PEERS:-../shared/peers}"/*.py .device/peers/  # the peers of the issues
cp inst/bench/*.py .device/peers/  # our own peers (kept in the repository)
ls -la .device
