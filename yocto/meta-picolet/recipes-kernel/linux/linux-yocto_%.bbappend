# The kernel configuration picolet and its container runtime need (see the layer's README).
FILESEXTRAPATHS:prepend := "${THISDIR}/linux-yocto:"
SRC_URI += "file://picolet.cfg"
