#!/usr/bin/env bash
# scripts/guest/initrd.sh ROOT KVER OUT
#
# Makes a small initrd (a newc cpio, gzip) for the guest from the image's own files in ROOT:
# its static busybox, the kernel modules that reach the root disk (virtio over PCI and MMIO,
# virtio_blk, ext4 and the crc32c it checksums with) with their dependencies from
# modules.dep, and scripts/guest/init as /init. About a megabyte, where Debian's
# initramfs-tools makes tens of megabytes and adds seconds of emulated boot.
set -euo pipefail

die() { printf 'guest-initrd: error: %s\n' "$*" >&2; exit 1; }
[[ $# -eq 3 ]] || die "usage: $0 ROOT KVER OUT"
ROOT=$1 KVER=$2 OUT=$3
SCRIPT_DIR=$(cd "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
MODDIR=$ROOT/lib/modules/$KVER
[[ -f $MODDIR/modules.dep ]] || die "$MODDIR/modules.dep is missing (kernel package)"
[[ -x $ROOT/bin/busybox ]] || die "$ROOT/bin/busybox is missing (package busybox-static)"

WANT=(virtio_pci virtio_mmio virtio_blk crc32c_generic crc32c_intel crc32c-intel ext4)

declare -A path_of=() deps_of=() builtin=() done_=()
while IFS= read -r line; do
    mod=${line%%:*}
    name=${mod##*/}
    name=${name%%.ko*}
    name=${name//-/_}
    path_of[$name]=$mod
    deps_of[$name]=${line#*:}
done <"$MODDIR/modules.dep"
if [[ -f $MODDIR/modules.builtin ]]; then
    while IFS= read -r mod; do
        name=${mod##*/}
        name=${name%%.ko*}
        builtin[${name//-/_}]=1
    done <"$MODDIR/modules.builtin"
fi

order=()
add() { # add NAME: its dependencies first, then itself
    local n=${1//-/_} d dn
    [[ -z ${done_[$n]+x} ]] || return 0
    done_[$n]=1
    [[ -z ${builtin[$n]+x} ]] || return 0
    [[ -n ${path_of[$n]+x} ]] || return 0
    for d in ${deps_of[$n]}; do
        dn=${d##*/}
        add "${dn%%.ko*}"
    done
    order+=("${path_of[$n]}")
}
for m in "${WANT[@]}"; do add "$m"; done
for m in virtio_blk ext4; do
    [[ -n ${path_of[$m]+x} || -n ${builtin[$m]+x} ]] || die "the kernel $KVER has no module $m"
done

work=$(mktemp -d)
trap 'rm -rf -- "$work"' EXIT
mkdir -p "$work"/{bin,dev,proc,sys,newroot,lib/modules}
cp -- "$ROOT/bin/busybox" "$work/bin/busybox"
for a in sh mount umount switch_root insmod sleep cat mkdir echo; do
    ln -s busybox "$work/bin/$a"
done
: >"$work/lib/modules/load"
for m in "${order[@]}"; do
    base=${m##*/}
    case $base in
        *.ko) cp -- "$MODDIR/$m" "$work/lib/modules/$base" ;;
        *.ko.xz) xz -dc -- "$MODDIR/$m" >"$work/lib/modules/${base%.xz}"; base=${base%.xz} ;;
        *.ko.zst) zstd -qdc -- "$MODDIR/$m" >"$work/lib/modules/${base%.zst}"; base=${base%.zst} ;;
        *.ko.gz) gzip -dc -- "$MODDIR/$m" >"$work/lib/modules/${base%.gz}"; base=${base%.gz} ;;
        *) die "unknown module file $m" ;;
    esac
    printf '%s\n' "$base" >>"$work/lib/modules/load"
done
install -m 0755 "$SCRIPT_DIR/init" "$work/init"
(cd "$work" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet --reproducible) | gzip -9n >"$OUT"
printf 'guest-initrd: %s: %d modules (%s), %d KiB\n' "${OUT##*/}" "${#order[@]}" \
    "$(sed 's/\.ko$//' "$work/lib/modules/load" | tr '\n' ' ')" $(($(stat -c %s "$OUT") / 1024)) >&2
