#!/bin/sh
# `make vendor`: the crates of src/rust/Cargo.lock as one compressed archive,
# src/rust/vendor.tar.xz, shipped in the source package so that it builds
# offline (CRAN's policy for Rust packages); src/Makevars unpacks it. Also
# records the checksum of the Cargo.lock it was made from, so a stale
# archive is noticed (tools/vendor-check.sh).
set -eu
cd "$(dirname "$0")/../src/rust"
export PATH="$PATH:$HOME/.cargo/bin"
rm -rf vendor
cargo vendor --locked --versioned-dirs vendor > /dev/null
# Reproducible: the same crates give the same bytes.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='2020-01-01 00:00Z' -cf - vendor \
  | xz -9e -T1 > vendor.tar.xz
rm -rf vendor
sha256sum Cargo.lock | cut -d' ' -f1 > vendor.lock.sha256
echo "vendored $(tar -tJf vendor.tar.xz | grep -c '^vendor/[^/]*/$') crates into src/rust/vendor.tar.xz ($(du -h vendor.tar.xz | cut -f1))"
