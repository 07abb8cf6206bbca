SUMMARY = "picolet: a small Kubernetes node agent (kubelet) for edge devices"
DESCRIPTION = "Runs static pods from a manifest directory on containerd over the CRI, with or \
without an apiserver, and keeps them running through crashes, outages and reboots."
LICENSE = "Apache-2.0"
LIC_FILES_CHKSUM = "file://LICENSE;md5=3b83ef96387f14655fc854ddc3c6bd57"

# By default, the committed state of the repository this layer lives in (branch main, newest
# commit). A product build pins both, e.g. in a bbappend or local.conf:
#   PICOLET_GIT = "git://example.com/picolet.git;protocol=https;branch=main"
#   SRCREV:pn-picolet = "<commit>"
PICOLET_GIT ?= "git://${PICOLET_REPODIR};protocol=file;branch=main"
SRC_URI = "${PICOLET_GIT}"
SRCREV ?= "${AUTOREV}"
PV .= "+git"

# After SRC_URI is set: the crate list appends to it.
require ${BPN}-crates.inc

inherit cargo cargo-update-recipe-crates systemd

# Cargo features as PACKAGECONFIG: the default build as Cargo.toml's, or e.g.
# PACKAGECONFIG:pn-picolet = "file-source local-api" for the static-pods-only agent (no TLS,
# no HTTP client).
PACKAGECONFIG ??= "file-source local-api apiserver https-probes graceful-shutdown zstd"
PACKAGECONFIG[file-source] = ""
PACKAGECONFIG[local-api] = ""
PACKAGECONFIG[apiserver] = ""
PACKAGECONFIG[https-probes] = ""
# Pods stopped in order before a shutdown or reboot (a systemd-logind delay lock over D-Bus).
PACKAGECONFIG[graceful-shutdown] = ""
# zstd-compressed image archives in the preload directory (a pure Rust decoder, 69 KB on
# aarch64); without it only plain and gzip archives are read.
PACKAGECONFIG[zstd] = ""
CARGO_BUILD_FLAGS:append = " --bin picolet --no-default-features \
    --features '${@','.join(d.getVar('PACKAGECONFIG').split())}'"

# Cargo.toml strips release binaries; OE strips them itself and keeps the symbols in -dbg.
export CARGO_PROFILE_RELEASE_STRIP = "false"

do_install() {
    install -D -m 0755 ${B}/target/${CARGO_TARGET_SUBDIR}/picolet ${D}${bindir}/picolet
    install -D -m 0644 ${S}/systemd/picolet.service ${D}${systemd_system_unitdir}/picolet.service
    sed -i -e 's,/usr/bin/picolet,${bindir}/picolet,' \
        ${D}${systemd_system_unitdir}/picolet.service
    install -d ${D}${sysconfdir}/kubernetes/manifests
}

# The containerd device profile (systemd/containerd/): a conf.d file turning off the plugins a
# node never uses, and a containerd.service drop-in with Go's GC setting. A package of its own,
# recommended by picolet; an image that tunes containerd itself leaves it out with
# BAD_RECOMMENDATIONS += "picolet-containerd-profile". containerd reads conf.d by default from
# 2.3 (config version 4); an older config.toml needs imports = ["/etc/containerd/conf.d/*.toml"].
do_install:append() {
    install -D -m 0644 ${S}/systemd/containerd/picolet-device.toml \
        ${D}${sysconfdir}/containerd/conf.d/picolet-device.toml
    install -D -m 0644 ${S}/systemd/containerd/picolet-device.conf \
        ${D}${systemd_system_unitdir}/containerd.service.d/picolet-device.conf
}
PACKAGES =+ "${PN}-containerd-profile"
FILES:${PN}-containerd-profile = "${sysconfdir}/containerd/conf.d/picolet-device.toml \
    ${systemd_system_unitdir}/containerd.service.d/picolet-device.conf"
RRECOMMENDS:${PN} += "${PN}-containerd-profile"

SYSTEMD_SERVICE:${PN} = "picolet.service"
SYSTEMD_AUTO_ENABLE:${PN} = "enable"
FILES:${PN} += "${systemd_system_unitdir}/picolet.service ${sysconfdir}/kubernetes/manifests"

# A CRI runtime and an OCI runtime as meta-virtualization provides them (containerd RPROVIDES
# virtual-containerd; runc virtual-runc), and the CNI plugins pods get their network from.
PICOLET_CRI_RUNTIME ??= "virtual-containerd"
VIRTUAL-RUNTIME_container_runtime ??= "virtual-runc"
RDEPENDS:${PN} += "${PICOLET_CRI_RUNTIME} ${VIRTUAL-RUNTIME_container_runtime} cni"
# The bridge and portmap CNI plugins call iptables.
RRECOMMENDS:${PN} += "iptables"
