#!/bin/sh
# Exit 1 (saying why) unless src/rust/vendor.tar.xz was made from the
# current Cargo.lock: run `make vendor` after changing dependencies.
cd "$(dirname "$0")/../src/rust"
if [ ! -f vendor.tar.xz ] || [ "$(sha256sum Cargo.lock | cut -d' ' -f1)" != "$(cat vendor.lock.sha256 2>/dev/null)" ]; then
  echo "src/rust/vendor.tar.xz is missing or older than Cargo.lock: run 'make vendor'"
  exit 1
fi
