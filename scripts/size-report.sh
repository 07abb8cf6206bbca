#!/usr/bin/env bash
# Binary size of picolet per target and build, and where the bytes go: prints a table of
# stripped release binaries (static-only: file source and local API; full: the default
# features) for each target whose Rust standard library is installed, then the largest crates
# of the x86_64 builds (cargo bloat on an unstripped copy of the same build). Asserts nothing.
#   scripts/size-report.sh [TARGET...]   (default: x86_64, aarch64 gnu and musl, armv7)
# About 3 minutes a build on 2 cores. Needs cargo-bloat (cargo install cargo-bloat) for the
# crate shares; without it, or with SIZE_REPORT_TABLE_ONLY=1, only the table.
set -euo pipefail
cd "$(dirname -- "${BASH_SOURCE[0]}")/.."

targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu
    aarch64-unknown-linux-musl armv7-unknown-linux-gnueabihf)
installed=$(rustup target list --installed)
declare -A builds=(
    [static-only]="--no-default-features --features file-source,local-api"
    [full]=""
)

printf '%-32s %-12s %12s %10s\n' target build bytes MiB
for t in "${targets[@]}"; do
    if ! grep -qx "$t" <<<"$installed"; then
        printf '%-32s %s\n' "$t" "(standard library not installed: skipped)"
        continue
    fi
    for b in static-only full; do
        dir=target/size-report/$b
        # shellcheck disable=SC2086
        cargo build --locked --quiet --release --target "$t" --target-dir "$dir" ${builds[$b]}
        bytes=$(stat -c %s "$dir/$t/release/picolet")
        printf '%-32s %-12s %12d %10.2f\n' "$t" "$b" "$bytes" "$(echo "$bytes / 1048576" | bc -l)"
    done
done

if [ "${SIZE_REPORT_TABLE_ONLY:-0}" = 1 ]; then
    :
elif command -v cargo-bloat >/dev/null; then
    for b in static-only full; do
        echo
        echo "largest crates, x86_64, $b (share of .text, unstripped build):"
        # shellcheck disable=SC2086
        CARGO_PROFILE_RELEASE_STRIP=false cargo bloat --release --crates -n 12 \
            --target-dir target/size-report/bloat-$b ${builds[$b]} 2>/dev/null | sed 's/^/  /'
    done
else
    echo "(cargo-bloat not installed: no crate shares)"
fi
