#!/usr/bin/env bash
# Coverage-guided fuzzing of picolet's decoders (fuzz/, cargo fuzz with libFuzzer).
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
# Runs each target (all of them by default) for SECONDS_PER_TARGET (default 20), starting from
# the seeds in fuzz/seeds/<target> plus what earlier runs kept in fuzz/corpus/<target>. An input
# that panics, takes more than 10 s (-timeout) or more than 1 GiB (-rss_limit_mb) fails the run;
# libFuzzer leaves it in fuzz/artifacts/<target>/ and it becomes a regression test. Prints the
# executions each target ran. Works on the stable toolchain: RUSTC_BOOTSTRAP lets cargo fuzz pass
# its -Z flags. A release check: `scripts/fuzz.sh 3600`.
set -euo pipefail
cd "$(dirname -- "${BASH_SOURCE[0]}")/../fuzz"

seconds=${1:-20}
shift || true
export RUSTC_BOOTSTRAP=1
command -v cargo-fuzz >/dev/null || { echo "fuzz: cargo-fuzz missing (cargo install cargo-fuzz --locked)" >&2; exit 1; }
mapfile -t all < <(cargo fuzz list)
targets=("${@:-${all[@]}}")
[ "${#targets[@]}" -gt 0 ] || targets=("${all[@]}")

echo "fuzz: building ${#targets[@]} targets (release, no sanitizer: picolet forbids unsafe code)"
cargo fuzz build --sanitizer none -O >/dev/null

total=0
failed=()
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    log=$(mktemp)
    rc=0
    cargo fuzz run --sanitizer none -O "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 -max_len=65536 \
        -print_final_stats=1 >"$log" 2>&1 || rc=$?
    runs=$(awk '/^stat::number_of_executed_units:/ { print $2 }' "$log" | tail -n 1)
    runs=${runs:-0}
    total=$((total + runs))
    if [ "$rc" -ne 0 ]; then
        failed+=("$t")
        echo "fuzz: $t FAILED after $runs executions (exit $rc); its log ends:"
        tail -n 30 "$log" | sed 's/^/  /'
    else
        printf 'fuzz: %-16s %10d executions in %s s, corpus %d inputs\n' "$t" "$runs" "$seconds" \
            "$(find "corpus/$t" -type f | wc -l)"
    fi
    rm -f "$log"
done
echo "fuzz: $total executions in all"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz: findings in ${failed[*]}: inputs under fuzz/artifacts/" >&2
    exit 1
fi
