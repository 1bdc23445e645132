#!/bin/sh
# `make test`: configure must refuse, with a message that says what to do,
# when cargo is missing or rustc is too old (fake ones on the PATH), and
# pass with the real toolchain.
set -u
cd "$(dirname "$0")/.."
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
sys_path=$(echo "$PATH" | tr ':' '\n' | grep -v -e '\.cargo' -e "$fake" | paste -sd: -)
fail=0
expect() {  # expect <exit status> <message pattern> <PATH> [HOME]
  out=$(PATH="$3" HOME="${4:-$fake}" sh ./configure 2>&1); status=$?
  if [ "$status" != "$1" ] || ! echo "$out" | grep -q "$2"; then
    echo "configure-check: expected exit $1 and '$2', got $status:"; echo "$out"; fail=1
  fi
}
if ! PATH="$sys_path" command -v cargo >/dev/null 2>&1; then
  expect 1 "'cargo' or 'rustc' was not found" "$sys_path"
fi
mkdir -p "$fake/bin"
printf '#!/bin/sh\necho "cargo 1.70.0"\n' > "$fake/bin/cargo"
printf '#!/bin/sh\necho "rustc 1.70.0 (90c541806 2023-05-31)"\n' > "$fake/bin/rustc"
chmod +x "$fake/bin/cargo" "$fake/bin/rustc"
expect 1 "needs rustc 1.88 or newer; this machine has: rustc 1.70.0" "$fake/bin:$sys_path"
expect 0 "bulkem: building with cargo" "$PATH" "$HOME"
[ $fail = 0 ] && echo "configure-check: ok"
exit $fail
