#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit and integration tests, and the end-to-end
# tests against a real containerd that the tests start themselves. Run as root.
set -euo pipefail
cd "$(dirname -- "${BASH_SOURCE[0]}")/.."

scripts/install-deps.sh --cross

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --all-targets --locked -- -D warnings
echo "== each feature combination builds without warnings"
for features in "--no-default-features" "--no-default-features --features file-source" \
    "--no-default-features --features local-api" "--no-default-features --features apiserver" \
    "--no-default-features --features file-source,local-api"; do
    echo "-- $features"
    # Library and binary only: the tests enable the default features again.
    # shellcheck disable=SC2086
    cargo clippy --locked --lib --bins $features -- -D warnings
done
echo "-- --features https-probes"
cargo clippy --locked --all-targets --features https-probes -- -D warnings
echo "== cargo test (unit, integration, end-to-end)"
cargo test --locked -- --test-threads=2
echo "== the prober with TLS (feature https-probes) against openssl s_server"
cargo test --locked --lib --features https-probes prober::
echo "== unit tests on armv7 (32-bit) under qemu"
cargo test --locked --lib --target armv7-unknown-linux-gnueabihf
echo "== aarch64 build"
cargo build --locked --release --target aarch64-unknown-linux-gnu
