#!/usr/bin/env bash
# The footprint guard: fails when a release build of picolet is more than 64 KiB larger than
# the size recorded for its target in tests/size-record.txt.
#
#   scripts/size-guard.sh BINARY [TARGET]   (TARGET default aarch64-unknown-linux-gnu)
#
# Prints the binary's size, the recorded size and the difference either way. A build that is
# smaller than the record by more than 64 KiB passes and says so, so that the record can be
# lowered in the same commit.
set -euo pipefail
cd "$(dirname -- "${BASH_SOURCE[0]}")/.."
die() { printf 'size-guard: error: %s\n' "$*" >&2; exit 1; }
[[ $# -ge 1 && $# -le 2 ]] || die "usage: scripts/size-guard.sh BINARY [TARGET]"
bin=$1 target=${2:-aarch64-unknown-linux-gnu} record=tests/size-record.txt
[[ -f $bin ]] || die "$bin: no such file (build it with cargo build --release --target $target)"
recorded=$(awk -v t="$target" '$0 !~ /^#/ && $1 == t { print $2 }' "$record")
[[ -n $recorded ]] || die "$record: no line for target '$target'"
[[ $recorded =~ ^[0-9]+$ ]] || die "$record: the size of '$target' is not a number of bytes: '$recorded'"
slack=65536
bytes=$(stat -c %s "$bin")
delta=$((bytes - recorded))
printf 'size-guard: %s: %d bytes, recorded %d (%+d bytes; allowed up to %+d)\n' \
    "$target" "$bytes" "$recorded" "$delta" "$slack"
if ((delta > slack)); then
    die "the $target release build grew by $delta bytes over $record, more than $slack: find what bought them (scripts/size-report.sh) and cut it, or raise the record in the commit that bought them and say what they bought"
fi
if ((delta < -slack)); then
    printf 'size-guard: the build is %d bytes smaller than recorded: lower the record in %s\n' $((-delta)) "$record"
fi
