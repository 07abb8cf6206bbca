#!/usr/bin/env bash
# scripts/guest/image.sh ARCH CONTAINERD_BIN
#
# Builds (or finds in the cache) the bootable Debian bookworm guest that scripts/guest.sh
# boots, for ARCH (amd64 or arm64), with the containerd in CONTAINERD_BIN (a directory
# holding containerd, containerd-shim-runc-v2 and ctr built for ARCH). Prints the image
# directory as the last line of stdout; it holds:
#
#   disk.img    the root file system (ext4, raw, sparse): never written by a boot (a run
#               boots a qcow2 overlay of it)
#   vmlinuz     the distribution kernel from the image
#   initrd.img  a small initrd made on the host: the virtio, ext4 and crc32c modules, a
#               static busybox and a /init that mounts /dev/vda and switches to it
#   info        what went into it, and the figures of its build
#
# GUEST_IMAGE_VARIANT=tests builds the image the end-to-end files run in (scripts/guest.sh
# e2e): the same, plus the tools those tests call (iptables for the CNI portmap plugin,
# python3 with prometheus_client for the metrics checks, zstd) and a 4 GiB root file system; it is cached apart (rootfs-ARCH-tests-KEY,
# image-ARCH-tests-KEY), so it never displaces the device image.
#
# With GUEST_IMAGE_IF_CACHED=1 it exits with status 3, building nothing, when the slow first
# stage is not in the cache. With GUEST_IMAGE_PROBE=1 it only says that (status 0: cached, 3:
# not), before looking at CONTAINERD_BIN, which may then be empty.
#
# Two stages, each cached under $PICOLET_GUEST_CACHE (default /var/cache/picolet-guest)
# by a key of its inputs:
#   rootfs-ARCH-KEY.tar.zst   mmdebstrap of Debian's packages (the slow part: about a
#                             minute and a half for amd64, over ten minutes for arm64,
#                             whose package scripts run under qemu-user); its key covers
#                             the package list, the mmdebstrap options (the text of the
#                             function that runs it), the mirrors, the architecture and
#                             mmdebstrap's version
#   image-ARCH-KEY/           the bootable image: the root file system plus the guest's
#                             own files (scripts/guest/rootfs), containerd and the offline
#                             test images; its key covers the first key, this script, the
#                             initrd's files (scripts/guest/init, initrd.sh), every file
#                             under scripts/guest/rootfs, scripts/build-image.sh and the
#                             containerd binaries
# The packages come from Debian's mirrors as they are on the day of the build: the key
# names what was asked for, not the package versions (the info file lists those).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$SCRIPT_DIR/../.." && pwd -P)
CACHE=${PICOLET_GUEST_CACHE:-/var/cache/picolet-guest}

log() { printf 'guest-image: %s\n' "$*" >&2; }
die() { printf 'guest-image: error: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

[[ $# -eq 2 ]] || die "usage: $0 amd64|arm64 CONTAINERD_BIN"
ARCH=$1
CONTAINERD_BIN=$2
[[ $(id -u) == 0 ]] || die "must run as root (mmdebstrap's root mode, file ownership in the image)"
case $ARCH in
    amd64) KERNEL_PKG=linux-image-amd64 QEMU_USER= ;;
    arm64) KERNEL_PKG=linux-image-arm64 QEMU_USER=qemu-aarch64 ;;
    *) die "ARCH must be amd64 or arm64, not '$ARCH'" ;;
esac
SUITE=bookworm
MIRRORS=(
    "deb http://deb.debian.org/debian $SUITE $SUITE-updates main"
    "deb http://deb.debian.org/debian-security $SUITE-security main"
)
# What the device runs: systemd as init, the distribution kernel, runc and the CNI plugins
# (containerd itself comes from CONTAINERD_BIN), busybox for the test images and the initrd,
# and the tools the scenarios read the node with (iproute2, procps, jq, kmod, e2fsprogs).
PACKAGES=(systemd systemd-sysv udev dbus "$KERNEL_PKG" runc containernetworking-plugins
    busybox-static iproute2 kmod e2fsprogs procps jq)
# The root file system's size (sparse: only what is written takes space).
DISK_SIZE=2G
TAG=$ARCH
case ${GUEST_IMAGE_VARIANT:-} in
    '') ;;
    tests) PACKAGES+=(iptables python3 python3-prometheus-client zstd); DISK_SIZE=4G; TAG=$ARCH-tests ;;
    *) die "GUEST_IMAGE_VARIANT must be empty or tests, not '$GUEST_IMAGE_VARIANT'" ;;
esac
# Left out of the image: documentation, translations, and the kernel's module trees of
# hardware no guest has (the image keeps virtio, block, file systems, net core, netfilter,
# bridge, veth, overlay, 9p).
EXCLUDES=(/usr/share/doc/'*' /usr/share/man/'*' /usr/share/info/'*' /usr/share/locale/'*'
    /usr/share/lintian/'*')
KMOD_EXCLUDES=(drivers/gpu drivers/media drivers/net/wireless drivers/net/ethernet drivers/infiniband
    drivers/staging drivers/scsi drivers/usb drivers/bluetooth drivers/iio drivers/hid
    drivers/input drivers/isdn drivers/md drivers/mmc drivers/mtd drivers/nfc
    drivers/platform drivers/power drivers/video drivers/hwmon drivers/edac drivers/thunderbolt
    drivers/misc drivers/mfd drivers/regulator drivers/pinctrl drivers/phy drivers/clk
    drivers/spi drivers/i2c drivers/gnss drivers/soundwire drivers/crypto drivers/firewire
    drivers/atm drivers/ata drivers/target drivers/nvme drivers/pcmcia drivers/leds
    drivers/net/can drivers/net/usb drivers/net/wwan drivers/net/ieee802154
    sound net/wireless net/mac80211 net/bluetooth net/netfilter/ipvs
    fs/btrfs fs/xfs fs/ocfs2 fs/nfs fs/nfsd fs/smb fs/cifs fs/gfs2 fs/f2fs fs/ubifs
    fs/jfs fs/nilfs2 fs/reiserfs fs/ceph fs/afs fs/dlm fs/ntfs3 fs/hfsplus fs/ufs)
for d in "${KMOD_EXCLUDES[@]}"; do
    EXCLUDES+=("/lib/modules/*/kernel/$d/*")
done

# Stage 1: Debian's packages into a tarball. update-initramfs is diverted to a no-op (it
# would run for minutes, over half an hour under qemu-user; the initrd is made on the host).
rootfs_build() { # rootfs_build OUT
    local opts=() e
    for e in "${EXCLUDES[@]}"; do opts+=("--dpkgopt=path-exclude=$e"); done
    nice -n 10 mmdebstrap --mode=root --variant=minbase --arch="$ARCH" \
        --include="$(IFS=,; printf '%s' "${PACKAGES[*]}")" \
        "${opts[@]}" \
        --essential-hook='chroot "$1" dpkg-divert --quiet --local --rename --divert /usr/sbin/update-initramfs.distrib --add /usr/sbin/update-initramfs' \
        --essential-hook='printf "#!/bin/sh\n# diverted: the initrd is made on the host\nexit 0\n" >"$1/usr/sbin/update-initramfs" && chmod 0755 "$1/usr/sbin/update-initramfs"' \
        --customize-hook='chroot "$1" dpkg-query -W -f "\${Package} \${Version}\n" >"$1/etc/guest-packages"' \
        --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*' \
        "$SUITE" "$1" "${MIRRORS[@]}"
}

ROOTFS_KEY=$({ declare -f rootfs_build; printf '%s\0' "$ARCH" "$SUITE" "${MIRRORS[@]}" "${PACKAGES[@]}" "${EXCLUDES[@]}"; mmdebstrap --version; } | sha256sum)
ROOTFS_KEY=${ROOTFS_KEY:0:16}
ROOTFS=$CACHE/rootfs-$TAG-$ROOTFS_KEY.tar.zst

# GUEST_IMAGE_PROBE=1: only say whether the root file system is cached (status 0) or not (3),
# before anything is built (CONTAINERD_BIN may then be empty).
if [[ ${GUEST_IMAGE_PROBE:-0} == 1 ]]; then
    [[ -s $ROOTFS ]] && exit 0
    exit 3
fi
for b in containerd containerd-shim-runc-v2 ctr; do
    [[ -x $CONTAINERD_BIN/$b ]] || die "$CONTAINERD_BIN has no executable $b (scripts/k8s-build.sh --containerd builds them)"
done

check_tools() {
    local missing=() t
    for t in mmdebstrap mkfs.ext4 zstd cpio qemu-img; do
        command -v "$t" >/dev/null || missing+=("$t")
    done
    [[ ${#missing[@]} -eq 0 ]] ||
        die "missing: ${missing[*]}; install them with: scripts/install-deps.sh --guest"
    if [[ -n $QEMU_USER ]]; then
        # A foreign architecture's package scripts run under qemu-user through binfmt_misc.
        if [[ ! -e /proc/sys/fs/binfmt_misc/status ]]; then
            mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc ||
                die "cannot mount binfmt_misc (needed to run $ARCH programs while building)"
        fi
        [[ -e /proc/sys/fs/binfmt_misc/$QEMU_USER ]] || update-binfmts --enable "$QEMU_USER" ||
            die "update-binfmts --enable $QEMU_USER failed (packages qemu-user-static, binfmt-support)"
        arch-test "$ARCH" >/dev/null || die "arch-test $ARCH: this machine cannot run $ARCH programs (qemu-user-static, binfmt-support)"
    fi
}

mkdir -p "$CACHE" || die "cannot create $CACHE (set PICOLET_GUEST_CACHE to a writable directory)"
exec 9>"$CACHE/.lock-$ARCH"
flock 9

if [[ ! -s $ROOTFS ]]; then
    if [[ ${GUEST_IMAGE_IF_CACHED:-0} == 1 ]]; then
        log "the $ARCH root file system is not cached ($ROOTFS): not building it (GUEST_IMAGE_IF_CACHED=1)"
        exit 3
    fi
    check_tools
    log "building the $ARCH root file system from Debian's packages (mmdebstrap; key $ROOTFS_KEY) ..."
    t0=$(now)
    tmp=$CACHE/.rootfs-$ARCH.$$.tar.zst
    rm -f -- "$tmp"
    rootfs_build "$tmp" >&2 || { rm -f -- "$tmp"; die "mmdebstrap failed for $ARCH (see its messages above: a missing package is named there)"; }
    mv -f -- "$tmp" "$ROOTFS"
    log "root file system built in $(elapsed "$t0") s: $ROOTFS ($(du -m "$ROOTFS" | cut -f1) MiB)"
fi

# Stage 2 key: stage 1, this script, the guest's files, the test image builder, containerd.
IMAGE_KEY=$({ printf '%s\0' "$ROOTFS_KEY" "$DISK_SIZE"; cat -- "${BASH_SOURCE[0]}" "$ROOT/scripts/build-image.sh" "$ROOT/scripts/lib/common.sh";
    (cd "$SCRIPT_DIR" && find rootfs init initrd.sh -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum);
    sha256sum "$CONTAINERD_BIN"/{containerd,containerd-shim-runc-v2,ctr} | cut -d' ' -f1; } | sha256sum)
IMAGE_KEY=${IMAGE_KEY:0:16}
IMAGE=$CACHE/image-$TAG-$IMAGE_KEY
if [[ -f $IMAGE/info ]]; then
    printf '%s\n' "$IMAGE"
    exit 0
fi

check_tools
log "building the $ARCH guest image (key $IMAGE_KEY) ..."
t0=$(now)
work=$CACHE/.image-$ARCH.$$
rm -rf -- "$work"
trap 'rm -rf -- "$work"' EXIT
mkdir -p "$work/root" "$work/out"
r=$work/root
tar --zstd -xpf "$ROOTFS" -C "$r" --numeric-owner --xattrs --xattrs-include='*' ||
    die "cannot unpack $ROOTFS (remove it to build it again)"

# The kernel and its modules.
kernel=$(find "$r/boot" -maxdepth 1 -name 'vmlinuz-*' | sort | tail -n 1)
[[ -n $kernel ]] || die "the image has no /boot/vmlinuz-* (package $KERNEL_PKG)"
kver=${kernel##*/vmlinuz-}
cp -- "$kernel" "$work/out/vmlinuz"

# containerd as its own release installs it: /usr/local/bin, with a unit of its own.
install -m 0755 "$CONTAINERD_BIN"/{containerd,containerd-shim-runc-v2,ctr} "$r/usr/local/bin/"
# The guest's configuration (scripts/guest/rootfs is copied over the root as it is).
cp -a --no-preserve=ownership "$SCRIPT_DIR/rootfs/." "$r/"
mkdir -p "$r/mnt/host" "$r/etc/containerd"
# containerd's config in the format of its major version: the systemd cgroup driver (what
# a systemd host runs), Debian's CNI plugins, the offline pause image as the sandbox image.
cver=$(chroot "$r" /usr/local/bin/containerd --version) || die "$CONTAINERD_BIN/containerd does not run in the $ARCH root"
[[ $cver =~ \ v?([0-9]+)\.[0-9]+ ]] || die "containerd --version printed no version: $cver"
case ${BASH_REMATCH[1]} in
    2) cat >"$r/etc/containerd/config.toml" <<'EOF'
# containerd 2.x on the guest (written by scripts/guest/image.sh).
version = 3

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "picolet.local/pause:1"

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "/etc/cni/net.d"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  SystemdCgroup = true
EOF
        ;;
    1) cat >"$r/etc/containerd/config.toml" <<'EOF'
# containerd 1.x on the guest (written by scripts/guest/image.sh).
version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "picolet.local/pause:1"

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "/etc/cni/net.d"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
EOF
        ;;
    *) die "containerd ${BASH_REMATCH[1]}.x: the guest knows the config of 1.x and 2.x only" ;;
esac
# Timers that would only add writes and CPU under emulation.
chroot "$r" systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer \
    systemd-tmpfiles-clean.timer >/dev/null 2>&1 || true
# The offline test images, built inside the image (its own busybox and architecture);
# guest-images.service imports them into containerd at the first boot.
mkdir -p "$r/var/lib/picolet-guest/images"
# build-image.sh sources the shared helpers beside it, as in the repository.
mkdir -p -- "$r/tmp/lib"
cp -- "$ROOT/scripts/build-image.sh" "$r/tmp/build-image.sh"
cp -- "$ROOT/scripts/lib/common.sh" "$r/tmp/lib/common.sh"
chroot "$r" bash /tmp/build-image.sh /var/lib/picolet-guest/images/pause.tar picolet.local/pause:1 sleep 2147483647 >&2 ||
    die "building the pause image inside the $ARCH root failed"
chroot "$r" bash /tmp/build-image.sh /var/lib/picolet-guest/images/busybox.tar picolet.local/busybox:1 sh >&2 ||
    die "building the busybox image inside the $ARCH root failed"
rm -rf -- "$r/tmp/build-image.sh" "$r/tmp/lib"
chroot "$r" systemctl enable guest-cfs-bandwidth.service guest-agent.service guest-images.service containerd.service >&2 ||
    die "systemctl enable in the $ARCH root failed"
# No login prompt on the console (it would only add lines to the log).
chroot "$r" systemctl mask serial-getty@ttyS0.service serial-getty@ttyAMA0.service getty@tty1.service >/dev/null 2>&1 || true

bash "$SCRIPT_DIR/initrd.sh" "$r" "$kver" "$work/out/initrd.img" >&2 || die "building the initrd failed"

# A root file system with room for the pods (sparse; only what is written takes space).
mkfs.ext4 -q -F -L picolet-guest -d "$r" "$work/out/disk.img" "$DISK_SIZE" >&2 ||
    die "mkfs.ext4 -d failed"
{
    printf 'arch %s\nsuite %s\nkernel %s\nrootfs %s\nimage key %s\n' "$ARCH" "$SUITE" "$kver" "${ROOTFS##*/}" "$IMAGE_KEY"
    printf 'containerd %s\n' "$("$r/usr/local/bin/containerd" --version 2>/dev/null || echo "(does not run on this host)")"
    printf 'built %s in %s s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(elapsed "$t0")"
    printf 'packages:\n'
    sed 's/^/  /' "$r/etc/guest-packages"
} >"$work/out/info"
rm -rf -- "$IMAGE"
mv -- "$work/out" "$IMAGE"
# The cache keeps the two newest images and root file systems per architecture and variant (a
# run still booting the previous image keeps its backing file; a key starts with a hex digit,
# a variant's name does not).
prune() { # prune GLOB...: all but the two newest
    local old=()
    mapfile -t old < <(ls -1dt -- "$@" 2>/dev/null | tail -n +3)
    [[ ${#old[@]} -eq 0 ]] || { log "removing older cache entries: ${old[*]##*/}"; rm -rf -- "${old[@]}"; }
}
prune "$CACHE"/image-"$TAG"-[0-9a-f]*
prune "$CACHE"/rootfs-"$TAG"-[0-9a-f]*.tar.zst
log "image built in $(elapsed "$t0") s: $IMAGE (disk $(du -m --apparent-size "$IMAGE/disk.img" | cut -f1) MiB, $(du -m "$IMAGE/disk.img" | cut -f1) MiB used; kernel $kver; initrd $(du -k "$IMAGE/initrd.img" | cut -f1) KiB)"
printf '%s\n' "$IMAGE"
