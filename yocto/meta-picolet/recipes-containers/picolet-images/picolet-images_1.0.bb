SUMMARY = "Image archives preloaded into picolet's preload directory"
DESCRIPTION = "Installs OCI image layout or docker save archives (plain, gzip or zstd) into \
/var/lib/kubelet/images, which picolet imports into containerd and pins at start, before the \
first pod sync, so a device with no registry runs its pods from them."
# The images carry their own licenses; set LICENSE to theirs for a product build.
LICENSE = "CLOSED"

# The archives, by file name, from this recipe's files/ directory or a bbappend's (one that
# adds FILESEXTRAPATHS:prepend := "${THISDIR}/files:"). Make them on the build host, for the
# device's platform:
#   ctr -n k8s.io images export --platform linux/arm64 app.tar registry.local/app:1.4
#   skopeo copy --override-arch arm64 docker://registry.local/app:1.4 oci-archive:app.tar
#   zstd -19 app.tar        (or gzip app.tar)
# and list them here, e.g. in local.conf:
#   PICOLET_IMAGE_ARCHIVES:pn-picolet-images = "app.tar.zst model.tar.gz"
# A pull list (a .txt of image references, one a line) may be listed too: picolet pulls and
# pins those images when a registry is reachable.
PICOLET_IMAGE_ARCHIVES ??= ""
# picolet's --root-dir /var/lib/kubelet and its default preload directory under it; another
# --image-preload-dir on the device needs the same path here.
PICOLET_PRELOAD_DIR ??= "${localstatedir}/lib/kubelet/images"

# Taken as they are: not unpacked (a .tar.gz in SRC_URI would be), built or stripped. The
# archives are for the device's platform, so the package is the machine's.
SRC_URI = "${@' '.join('file://%s;unpack=0' % a for a in d.getVar('PICOLET_IMAGE_ARCHIVES').split())}"
S = "${UNPACKDIR}"
PACKAGE_ARCH = "${MACHINE_ARCH}"
do_configure[noexec] = "1"
do_compile[noexec] = "1"
INHIBIT_PACKAGE_STRIP = "1"
INHIBIT_PACKAGE_DEBUG_SPLIT = "1"
INHIBIT_SYSROOT_STRIP = "1"

do_install() {
    install -d -m 0755 ${D}${PICOLET_PRELOAD_DIR}
    for a in ${PICOLET_IMAGE_ARCHIVES}; do
        install -m 0644 ${UNPACKDIR}/$a ${D}${PICOLET_PRELOAD_DIR}/$a
    done
}

FILES:${PN} = "${PICOLET_PRELOAD_DIR}"
RDEPENDS:${PN} = "picolet"
