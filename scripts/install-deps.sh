#!/usr/bin/env bash
# Installs what picolet's demo and tests need on a Debian/Ubuntu machine (run as root):
# a real containerd with runc and the CNI plugins, busybox for the offline test image,
# and the tools the checks use (prometheus-client, pinned, from PyPI). With --cross: the cross C toolchains with their C libraries,
# qemu-user and the Rust targets, then a check that each target links and runs a trivial
# program, so a missing piece is named here rather than deep inside the suite. With --k8s:
# what scripts/k8s-build.sh and scripts/control-plane.sh need to build and run the test
# control plane (openssl for its certificates; a Go toolchain new enough for tests/k8s/go.mod,
# found on PATH or at /usr/local/go/bin, since Debian's golang-go is too old). With --fuzz:
# cargo-fuzz, for scripts/fuzz.sh. With --guest: what scripts/guest.sh needs to build Debian guest
# images and boot them under emulation (mmdebstrap, qemu for amd64 and arm64, qemu-img, mkfs.ext4,
# zstd and cpio for the image and its initrd, qemu-user-static, binfmt-support and arch-test to
# build the arm64 image).
# Safe to run again: installed packages are skipped.
set -euo pipefail

pkgs=(containerd runc containernetworking-plugins busybox-static iptables iproute2 python3 python3-pip openssl pyflakes3 curl)
# systemd-analyze checks the unit file (scripts/verify-unit.sh).
pkgs+=(systemd)
# The graceful shutdown tests (tests/graceful_shutdown.rs): a private dbus-daemon, and a fake
# logind on it in Debian's python3 with its D-Bus and GLib bindings.
pkgs+=(dbus-daemon python3-dbus python3-gi)
# The private registry tests (tests/registry_e2e.rs): skopeo pushes the test image, htpasswd
# (apache2-utils) makes the registry's bcrypt password file.
pkgs+=(skopeo apache2-utils)
# The preload tests and scripts/bench-preload.sh: zstd compresses an archive; setpriv
# (util-linux) runs picolet without CAP_DAC_OVERRIDE to meet a directory it cannot read.
pkgs+=(zstd util-linux)
cross=false
k8s=false
fuzz=false
for arg in "$@"; do
    case "$arg" in
        --cross)
            cross=true
            # The libc6-dev-*-cross packages hold crt1.o/crti.o and libc for the linker; the
            # gcc-* packages only recommend them, and this script installs without recommends.
            pkgs+=(gcc-arm-linux-gnueabihf libc6-dev-armhf-cross
                gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static) ;;
        --fuzz) fuzz=true ;;
        --guest)
            pkgs+=(mmdebstrap qemu-system-x86 qemu-system-arm qemu-utils e2fsprogs zstd cpio
                qemu-user-static binfmt-support arch-test) ;;
        --k8s)
            k8s=true
            # dig and OpenBSD nc for the test images of the conformance specs
            # (scripts/lib/test-images.sh).
            pkgs+=(openssl util-linux ca-certificates bind9-dnsutils netcat-openbsd) ;;
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

# The Prometheus project's own text-format parser: the tests run every /metrics text through it
# (tests/support/prom_check.py). Pinned; pip because Debian packages no such version.
prom_client=0.26.0
if ! python3 -c "import importlib.metadata as m, sys; sys.exit(m.version('prometheus-client') != '$prom_client')" 2>/dev/null; then
    echo "install-deps: installing prometheus-client $prom_client for $(command -v python3)" >&2
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
        --break-system-packages "prometheus-client==$prom_client"
fi

if ! command -v cargo >/dev/null; then
    echo "install-deps: cargo not found: install Rust (rustup) first" >&2
    exit 1
fi
for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
done
if $cross; then
    targets=(armv7-unknown-linux-gnueabihf aarch64-unknown-linux-gnu aarch64-unknown-linux-musl)
    for t in "${targets[@]}"; do
        rustup target list --installed | grep -qx "$t" || rustup target add "$t"
    done
    # armv7 musl (Cross.toml's fourth target) for scripts/size-report.sh, where the toolchain's
    # channel ships its standard library; a size report skips the target without it.
    m=armv7-unknown-linux-musleabihf
    rustup target list --installed | grep -qx "$m" || rustup target add "$m" >/dev/null 2>&1 ||
        echo "install-deps: no Rust standard library for $m from rustup here; size-report.sh skips it" >&2
    # Link and run a trivial program per target with the linker and runner of
    # .cargo/config.toml: proves the C runtime, libc and qemu are all there.
    root=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
    probe=$(mktemp -d)
    trap 'rm -rf "$probe"' EXIT
    mkdir -p "$probe/src" "$probe/.cargo"
    cp "$root/.cargo/config.toml" "$probe/.cargo/"
    printf '[package]\nname = "link-probe"\nversion = "0.0.0"\nedition = "2021"\n[workspace]\n' \
        >"$probe/Cargo.toml"
    echo 'fn main() { println!("ok {}", std::env::consts::ARCH); }' >"$probe/src/main.rs"
    for t in "${targets[@]}"; do
        if ! out=$(cd "$probe" && cargo run -q --offline --target "$t" 2>&1); then
            echo "install-deps: a trivial program for $t does not link or run:" >&2
            echo "$out" | tail -n 5 >&2
            case "$t" in
                armv7*) echo "install-deps: check gcc-arm-linux-gnueabihf, libc6-dev-armhf-cross, qemu-user-static" >&2 ;;
                aarch64*) echo "install-deps: check gcc-aarch64-linux-gnu, libc6-dev-arm64-cross, qemu-user-static" >&2 ;;
            esac
            exit 1
        fi
        echo "install-deps: $t links and runs ($out)" >&2
    done
fi
if $k8s; then
    # Go builds the control plane from its modules (through the Go module proxy). The go
    # line of tests/k8s/go.mod is the oldest toolchain that builds the pinned release; a
    # toolchain of Go 1.21 or later fetches a newer one by itself (GOTOOLCHAIN=auto).
    root=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
    want=$(awk '$1 == "go" { print $2; exit }' "$root/tests/k8s/go.mod")
    go=$(command -v go || true)
    [ -n "$go" ] || [ ! -x /usr/local/go/bin/go ] || go=/usr/local/go/bin/go
    if [ -z "$go" ]; then
        echo "install-deps: no Go toolchain (go on PATH or /usr/local/go/bin/go): install Go $want or later (the Go project's release archive); Debian's golang-go is too old" >&2
        exit 1
    fi
    have=$("$go" env GOVERSION)
    if ! printf 'go%s\n%s\n' 1.21 "$have" | sort -V -C; then
        echo "install-deps: $go is $have; tests/k8s needs go $want (a toolchain >= go1.21 fetches it itself): install a newer Go" >&2
        exit 1
    fi
    if ! selected=$(cd "$root/tests/k8s" && "$go" env GOVERSION 2>&1); then
        echo "install-deps: $go ($have) cannot provide go $want for tests/k8s: $selected" >&2
        exit 1
    fi
    echo "install-deps: Go for tests/k8s: $selected (via $go)" >&2
fi
if $fuzz && ! command -v cargo-fuzz >/dev/null; then
    # cargo fuzz builds libFuzzer with the C++ compiler; it runs on the stable toolchain
    # (scripts/fuzz.sh sets RUSTC_BOOTSTRAP for its -Z flags).
    command -v c++ >/dev/null || { echo "install-deps: cargo fuzz needs a C++ compiler (g++)" >&2; exit 1; }
    echo "install-deps: installing cargo-fuzz" >&2
    cargo install --quiet --locked cargo-fuzz
fi
