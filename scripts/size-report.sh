#!/usr/bin/env bash
# Binary size of picolet per target and build, against the size budgets, and where the bytes go.
#
#   scripts/size-report.sh [TARGET...]   (default: every target of Cross.toml, plus x86_64)
#
# 1. A table of stripped release binaries, static-only (file source and local API) and full (the
#    default features), for each target whose Rust standard library is installed (a target
#    without it is listed as skipped; scripts/install-deps.sh --cross installs them). Each row
#    names its budget and the bytes under or over it: full on aarch64 3 MiB, static-only 1.5 MiB
#    on every target (the full build's budget is set for aarch64; other targets print theirs for
#    comparison only).
#    Then, for each target, the bytes the graceful-shutdown feature adds (the full build against
#    the default features less graceful-shutdown).
# 2. Unless SIZE_REPORT_TABLE_ONLY=1: the largest crates of the x86_64 builds (cargo bloat on an
#    unstripped copy of the same build; needs `cargo install --locked cargo-bloat`), the share of
#    the object model's serde code in the full build, and the crates linked in more than one
#    version (`cargo tree -d`).
# 3. With SIZE_REPORT_LLVM_LINES=1 also the generic functions instantiated most, in LLVM IR lines
#    (`cargo llvm-lines`, needs `cargo install --locked cargo-llvm-lines`; a rebuild of its own).
#
# Asserts nothing. About 3 minutes a build on 2 idle cores, far more on a busy machine.
set -euo pipefail
cd "$(dirname -- "${BASH_SOURCE[0]}")/.."

targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
    targets=(x86_64-unknown-linux-gnu)
    while read -r t; do targets+=("$t"); done < <(sed -n 's/^\[target\.\([^]]*\)\]$/\1/p' Cross.toml)
fi
installed=$(rustup target list --installed)
declare -A builds=(
    [static-only]="--no-default-features --features file-source,local-api"
    [full]=""
)
MIB=1048576
budget_of() { # target build -> bytes, or empty when the build has no budget on that target
    case "$2" in
        static-only) echo $((MIB * 3 / 2)) ;;
        full) echo $((MIB * 3)) ;;
    esac
}

printf '%-32s %-12s %12s %8s %8s %14s\n' target build bytes MiB budget "under (-over)"
for t in "${targets[@]}"; do
    if ! grep -qx "$t" <<<"$installed"; then
        printf '%-32s %s\n' "$t" "(Rust standard library not installed: skipped)"
        continue
    fi
    for b in static-only full; do
        dir=target/size-report/$b
        # shellcheck disable=SC2086
        cargo build --locked --quiet --release --target "$t" --target-dir "$dir" ${builds[$b]}
        bytes=$(stat -c %s "$dir/$t/release/picolet")
        budget=$(budget_of "$t" "$b")
        note=""
        case "$t:$b" in
            *:static-only | aarch64*:full) ;;
            *) note=" (aarch64's)" ;;
        esac
        printf '%-32s %-12s %12d %8.2f %8.2f %14d%s\n' "$t" "$b" "$bytes" \
            "$(echo "$bytes / $MIB" | bc -l)" "$(echo "$budget / $MIB" | bc -l)" \
            $((budget - bytes)) "$note"
    done
done

# Bytes of an ELF file's sections that are loaded and take file space (SHF_ALLOC, not NOBITS).
loaded_bytes() {
    python3 - "$1" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
wide, end = b[4] == 2, "<" if b[5] == 1 else ">"
if wide:
    shoff, = struct.unpack_from(end + "Q", b, 0x28)
    shentsize, shnum = struct.unpack_from(end + "HH", b, 0x3A)
else:
    shoff, = struct.unpack_from(end + "I", b, 0x20)
    shentsize, shnum = struct.unpack_from(end + "HH", b, 0x2E)
total = 0
for i in range(shnum):
    at = shoff + i * shentsize
    if wide:
        _, typ, flags, _, _, size = struct.unpack_from(end + "IIQQQQ", b, at)
    else:
        _, typ, flags, _, _, size = struct.unpack_from(end + "IIIIII", b, at)
    if flags & 2 and typ != 8:
        total += size
print(total)
PY
}

# What the graceful-shutdown feature (the D-Bus client and the shutdown manager) adds: the full
# build against the default features less that one.
without_gns=$(sed -n 's/^default = \[\(.*\)\]$/\1/p' Cargo.toml | tr -d '" ' | tr , '\n' |
    grep -vx graceful-shutdown | paste -sd,)
for t in "${targets[@]}"; do
    grep -qx "$t" <<<"$installed" || continue
    dir=target/size-report/full-without-graceful-shutdown
    cargo build --locked --quiet --release --target "$t" --target-dir "$dir" \
        --no-default-features --features "$without_gns"
    full=$(stat -c %s "target/size-report/full/$t/release/picolet")
    without=$(stat -c %s "$dir/$t/release/picolet")
    # The file's size moves in whole pages (the linker aligns segments); the loaded sections'
    # sizes say what the code and data take.
    full_sec=$(loaded_bytes "target/size-report/full/$t/release/picolet")
    without_sec=$(loaded_bytes "$dir/$t/release/picolet")
    printf '%-32s graceful-shutdown adds %d bytes to the file (%d with it, %d without), %d to the loaded sections (%d, %d)\n' \
        "$t" $((full - without)) "$full" "$without" $((full_sec - without_sec)) "$full_sec" "$without_sec"
done

[ "${SIZE_REPORT_TABLE_ONLY:-0}" = 1 ] && exit 0

if command -v cargo-bloat >/dev/null; then
    for b in static-only full; do
        echo
        echo "largest crates, x86_64, $b (share of .text, unstripped build):"
        # shellcheck disable=SC2086
        CARGO_PROFILE_RELEASE_STRIP=false cargo bloat --locked --release --crates -n 15 \
            --target-dir target/size-report/bloat-$b ${builds[$b]} 2>/dev/null | sed 's/^/  /'
    done
    echo
    echo "the object model's serde code, x86_64, full (functions naming picolet::api or"
    echo "picolet::objects and Deserialize, Visitor or Serialize):"
    CARGO_PROFILE_RELEASE_STRIP=false cargo bloat --locked --release -n 0 --message-format json \
        --target-dir target/size-report/bloat-full 2>/dev/null |
        python3 -c '
import json, re, sys
fns = json.load(sys.stdin)["functions"]
model = re.compile(r"picolet::(api|objects)::")
serde = [f for f in fns if model.search(f["name"]) and re.search(r"Deserializ|Visitor|Serializ|__Field", f["name"])]
total = sum(f["size"] for f in fns)
s = sum(f["size"] for f in serde)
print(f"  .text {total:,} bytes; the object model\x27s serde functions {s:,} bytes in {len(serde)} functions, by deserializer:")
by = {}
for f in serde:
    m = re.search(r"Deserializer<[^>]*?(yaml_serde|serde_json::value|serde_json::de|serde_ignored|serde_path_to_error)", f["name"])
    k = m.group(1) if m else ("serialize" if "Serialize" in f["name"] else "other")
    by[k] = by.get(k, 0) + f["size"]
for k, v in sorted(by.items(), key=lambda kv: -kv[1]):
    print(f"    {k:24} {v:>10,}")
'
else
    echo "(cargo-bloat not installed: no crate shares)"
fi

echo
echo "crates linked in more than one version (cargo tree -d, normal dependencies):"
cargo tree --locked -d -e normal --depth 0 2>/dev/null | grep -v '^$' | sed 's/^/  /' || true

if [ "${SIZE_REPORT_LLVM_LINES:-0}" = 1 ] && command -v cargo-llvm-lines >/dev/null; then
    echo
    echo "generic functions instantiated most (cargo llvm-lines --release --lib, top 25):"
    cargo llvm-lines --locked --release --lib --target-dir target/size-report/llvm-lines 2>/dev/null |
        head -n 28 | sed 's/^/  /'
fi
