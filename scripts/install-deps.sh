#!/usr/bin/env bash
# Installs what picolet's demo and tests need on a Debian/Ubuntu machine (run as root):
# a real containerd with runc and the CNI plugins, busybox for the offline test image,
# and the tools the checks use. Safe to run again: installed packages are skipped.
set -euo pipefail

pkgs=(containerd runc containernetworking-plugins busybox-static iptables iproute2 python3)
cross=false
for arg in "$@"; do
    case "$arg" in
        --cross) cross=true; pkgs+=(gcc-arm-linux-gnueabihf gcc-aarch64-linux-gnu qemu-user-static) ;;
        *) echo "install-deps: unknown option $arg" >&2; exit 2 ;;
    esac
done

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "install-deps: need root to install: ${missing[*]}" >&2
        exit 1
    fi
    echo "install-deps: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
    echo "install-deps: cargo not found: install Rust (rustup) first" >&2
    exit 1
fi
for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
done
if $cross; then
    for t in armv7-unknown-linux-gnueabihf aarch64-unknown-linux-gnu; do
        rustup target list --installed | grep -qx "$t" || rustup target add "$t"
    done
fi
