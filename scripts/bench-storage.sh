#!/usr/bin/env bash
# The cost of a measurement pass of ephemeral storage, for trees of 1,000 and 100,000 files
# (BENCH_FILES=n,m for others): `cargo bench --bench storage` (benches/storage.rs) walks each as
# the eviction rounds do, within the default budget of entries a pass, on the blocking pool,
# while a task on the executor ticks every 100 ms; it prints the passes a figure takes, a
# pass's wall time, the whole walk, the tick's worst lateness, and one unbounded pass. The trees
# live under BENCH_DIR (default /var/tmp/pbench-storage) and are kept for the next run
# (BENCH_KEEP=0 removes them); the page cache is left as it is (warm after the first run).
# Prints figures; asserts nothing.
set -euo pipefail
REPO=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
nice -n 10 cargo bench --locked --bench storage
