#!/usr/bin/env bash
# build-image.sh [OPTION...] OUT.tar NAME [CMD [ARG...]]
#
# Builds, fully offline and reproducibly (same bytes on every run with the same
# busybox binary), an OCI image archive that `ctr images import` accepts:
#
#   oci-layout
#   index.json                      one manifest, annotated with
#                                   io.containerd.image.name = NAME and
#                                   org.opencontainers.image.ref.name = NAME's tag
#   blobs/sha256/<digest>           the layer (uncompressed tar), config, manifest
#
# The single layer holds /bin/busybox (the host's busybox-static, which must be a
# static binary), symlinks for a set of applets, /etc/passwd and /etc/group with
# root and nobody (65534), and /tmp (1777).
#
# The image config has Env PATH=/bin and Cmd CMD ARG... (default: ["sh"]).
# Architecture comes from `dpkg --print-architecture`.
#
# Options (for images that stand in for upstream's test images; without them
# the archive is the same, byte for byte):
#   --all-applets      a symlink in /bin for every applet the busybox has
#   --add DIR          DIR's tree copied over the root (after the files above, so
#                      DIR/etc/passwd replaces the default one, and DIR/bin/sh
#                      an applet's symlink; modes, setuid bits included, are
#                      kept; owners become root)
#   --user USER        the image config's User
#   --entrypoint PATH  the image config's Entrypoint, [PATH]
#   --path VALUE       the PATH in the image config's Env (default /bin)
#
# Environment: BUSYBOX=/path/to/busybox overrides /bin/busybox.
#
# Tools used: bash, coreutils, tar, sha256sum (no gzip: the layer is stored
# uncompressed, which avoids any dependence on the compressor's version).
set -euo pipefail
PROG=build-image.sh
# shellcheck source=scripts/lib/common.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/lib/common.sh"

usage() {
    printf 'usage: %s [--all-applets] [--add DIR] [--user USER] [--entrypoint PATH] [--path VALUE] OUT.tar NAME [CMD [ARG...]]\n' "${0##*/}" >&2
    exit 2
}

all_applets=false
add_dir=
user=
entrypoint=
env_path=/bin
while [[ $# -gt 0 && $1 == --* ]]; do
    case $1 in
        --all-applets) all_applets=true; shift ;;
        --add) [[ $# -ge 2 ]] || usage; add_dir=$2; shift 2 ;;
        --user) [[ $# -ge 2 ]] || usage; user=$2; shift 2 ;;
        --entrypoint) [[ $# -ge 2 ]] || usage; entrypoint=$2; shift 2 ;;
        --path) [[ $# -ge 2 ]] || usage; env_path=$2; shift 2 ;;
        *) usage ;;
    esac
done
[[ -z $add_dir || -d $add_dir ]] || die "--add $add_dir: not a directory"
[[ $# -ge 2 ]] || usage
out=$1
name=$2
shift 2
if [[ $# -gt 0 ]]; then
    cmd=("$@")
else
    cmd=(sh)
fi

[[ -n $out ]] || die "OUT.tar must not be empty"
[[ -n $name ]] || die "NAME must not be empty"
[[ $name == *:* && ${name##*:} != */* ]] ||
    die "NAME must carry a tag, e.g. picolet.local/busybox:1 (got '$name')"

busybox=${BUSYBOX:-/bin/busybox}
applets=(sh sleep echo cat wget nc httpd ls true false test env date mkdir touch kill ps id hostname tar tty)

# ---------------------------------------------------------------- busybox checks

[[ -e $busybox ]] ||
    die "$busybox not found: install Debian's busybox-static (apt-get install -y busybox-static)"
[[ -f $busybox && -x $busybox ]] || die "$busybox is not an executable file"

# Reads an unsigned little/big-endian integer of SIZE bytes at OFFSET of $busybox.
elf_uint() {
    local offset=$1 size=$2 v
    v=$(od -An -v -t "u$size" -j "$offset" -N "$size" --endian="$elf_endian" "$busybox" | tr -d ' \n')
    [[ -n $v ]] || die "$busybox: truncated ELF header"
    printf '%s' "$v"
}

magic=$(od -An -v -t x1 -N 4 "$busybox" | tr -d ' \n')
[[ $magic == 7f454c46 ]] || die "$busybox is not an ELF binary"
elf_class=$(od -An -v -t u1 -j 4 -N 1 "$busybox" | tr -d ' \n')
elf_data=$(od -An -v -t u1 -j 5 -N 1 "$busybox" | tr -d ' \n')
case $elf_data in
    1) elf_endian=little ;;
    2) elf_endian=big ;;
    *) die "$busybox: unknown ELF data encoding $elf_data" ;;
esac
case $elf_class in
    1) phoff=$(elf_uint 28 4); phentsize=$(elf_uint 42 2); phnum=$(elf_uint 44 2) ;;
    2) phoff=$(elf_uint 32 8); phentsize=$(elf_uint 54 2); phnum=$(elf_uint 56 2) ;;
    *) die "$busybox: unknown ELF class $elf_class" ;;
esac
for ((i = 0; i < phnum; i++)); do
    # p_type == PT_INTERP (3) means the binary needs a dynamic loader.
    if [[ $(elf_uint $((phoff + i * phentsize)) 4) == 3 ]]; then
        die "$busybox is dynamically linked (it has a PT_INTERP program header); the image needs a static busybox: apt-get install -y busybox-static (it installs /bin/busybox)"
    fi
done
have_applets=$'\n'$("$busybox" --list)$'\n' || die "$busybox --list failed"
for a in "${applets[@]}"; do
    [[ $have_applets == *$'\n'"$a"$'\n'* ]] || die "$busybox lacks the applet '$a'"
done
if $all_applets; then
    mapfile -t applets < <("$busybox" --list | grep -vx busybox | LC_ALL=C sort -u)
fi

# ---------------------------------------------------------------- platform

command -v dpkg >/dev/null || die "dpkg not found: cannot determine the architecture"
dpkg_arch=$(dpkg --print-architecture)
variant=
case $dpkg_arch in
    amd64) arch=amd64 ;;
    arm64) arch=arm64 ;;
    armhf) arch=arm; variant=v7 ;;
    armel) arch=arm ;;
    i386) arch=386 ;;
    ppc64el) arch=ppc64le ;;
    s390x) arch=s390x ;;
    riscv64) arch=riscv64 ;;
    *) die "no OCI architecture known for dpkg architecture '$dpkg_arch'" ;;
esac

# ---------------------------------------------------------------- JSON helpers

json_str() {
    local s=$1
    if [[ $s == *[[:cntrl:]]* ]]; then
        die "control characters are not supported in JSON strings: $(printf '%q' "$s")"
    fi
    s=${s//\\/\\\\}
    s=${s//\"/\\\"}
    printf '"%s"' "$s"
}

json_str_array() {
    local first=1 s
    printf '['
    for s in "$@"; do
        [[ $first == 1 ]] || printf ','
        first=0
        json_str "$s"
    done
    printf ']'
}

sha256_of() {
    local sum
    sum=$(sha256sum "$1")
    printf '%s' "${sum%% *}"
}

size_of() {
    stat -c %s "$1"
}

# ---------------------------------------------------------------- build

umask 022
export LC_ALL=C TZ=UTC
tar_opts=(--sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu)

out_dir=$(dirname -- "$out")
[[ -d $out_dir ]] || die "output directory $out_dir does not exist"
work=$(mktemp -d "${TMPDIR:-/tmp}/build-image.XXXXXX")
trap 'rm -rf -- "$work"' EXIT

rootfs=$work/rootfs
mkdir -p "$rootfs/bin" "$rootfs/etc" "$rootfs/tmp"
cp -- "$busybox" "$rootfs/bin/busybox"
for a in "${applets[@]}"; do
    ln -s busybox "$rootfs/bin/$a"
done
printf '%s\n' \
    'root:x:0:0:root:/root:/bin/sh' \
    'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' >"$rootfs/etc/passwd"
printf '%s\n' \
    'root:x:0:' \
    'nobody:x:65534:' >"$rootfs/etc/group"
chmod 0755 "$rootfs/bin" "$rootfs/etc" "$rootfs/bin/busybox"
chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
chmod 1777 "$rootfs/tmp"
if [[ -n $add_dir ]]; then
    # --remove-destination: a file of DIR's replaces an applet's symlink instead of
    # being written through it into busybox.
    cp -a --remove-destination --no-preserve=ownership -- "$add_dir/." "$rootfs/" || die "copying $add_dir into the image failed"
fi

oci=$work/oci
blobs=$oci/blobs/sha256
mkdir -p "$blobs"

layer=$work/layer.tar
if [[ -n $add_dir ]]; then
    (cd "$rootfs" && find . -mindepth 1 -maxdepth 1 -printf '%P\n' | LC_ALL=C sort) >"$work/top"
    tar "${tar_opts[@]}" -C "$rootfs" -cf "$layer" -T "$work/top"
else
    tar "${tar_opts[@]}" -C "$rootfs" -cf "$layer" bin etc tmp
fi
layer_digest=$(sha256_of "$layer")
layer_size=$(size_of "$layer")
mv -- "$layer" "$blobs/$layer_digest"

platform_json="\"architecture\":$(json_str "$arch"),\"os\":\"linux\""
if [[ -n $variant ]]; then
    platform_json+=",\"variant\":$(json_str "$variant")"
fi

config=$work/config.json
extra_config=
if [[ -n $user ]]; then
    extra_config+=",\"User\":$(json_str "$user")"
fi
if [[ -n $entrypoint ]]; then
    extra_config+=",\"Entrypoint\":$(json_str_array "$entrypoint")"
fi
printf '{%s,"config":{"Env":[%s],"Cmd":%s,"WorkingDir":"/"%s},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"picolet scripts/build-image.sh","comment":"busybox-static"}]}' \
    "$platform_json" "$(json_str "PATH=$env_path")" "$(json_str_array "${cmd[@]}")" "$extra_config" "$layer_digest" >"$config"
config_digest=$(sha256_of "$config")
config_size=$(size_of "$config")
mv -- "$config" "$blobs/$config_digest"

manifest=$work/manifest.json
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
    "$config_digest" "$config_size" "$layer_digest" "$layer_size" >"$manifest"
manifest_digest=$(sha256_of "$manifest")
manifest_size=$(size_of "$manifest")
mv -- "$manifest" "$blobs/$manifest_digest"

printf '{"imageLayoutVersion":"1.0.0"}' >"$oci/oci-layout"
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":%s,"org.opencontainers.image.ref.name":%s}}]}' \
    "$manifest_digest" "$manifest_size" "$(json_str "$name")" "$(json_str "${name##*:}")" >"$oci/index.json"

chmod 0755 "$oci" "$oci/blobs" "$blobs"
chmod 0644 "$oci/oci-layout" "$oci/index.json" "$blobs"/*

# Write next to OUT and rename, so that a reader never sees a half-written archive.
tmp_out=$(mktemp "$out_dir/.build-image.XXXXXX")
if ! tar "${tar_opts[@]}" -C "$oci" -cf "$tmp_out" oci-layout index.json blobs; then
    rm -f -- "$tmp_out"
    die "could not write the archive"
fi
chmod 0644 "$tmp_out"
mv -f -- "$tmp_out" "$out"
