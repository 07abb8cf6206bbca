# shellcheck shell=bash
# The test images of upstream's e2e suite, built offline under the names
# test/utils/image/manifest.go of the pinned module gives them: busybox, nonroot
# and nonewprivs from the machine's busybox-static, agnhost from its Go source
# with the machine's curl, dig, ip, OpenBSD nc, getent and bash as sh beside
# it (upstream's agnhost image has them, and the network and DNS specs run them
# in it: busybox's nc takes neither -v nor -t, and it has no getent),
# glibc-dns-testing (the DNS specs' glibc resolver image: busybox with the
# machine's dig and getent, and bash as sh), nginx and its newer tag (busybox's
# httpd serving /usr/share/nginx/html on port 80, as nginx's image does, with
# nginx's welcome page), agnhost's previous tag (the same agnhost: the
# StatefulSet specs roll from one tag to the other), nautilus and kitten (the
# update demo's web servers: busybox's httpd serving on port 80 the data.json and
# picture of the module's test/images/NAME/html from the image's root, as
# upstream's images serve them with agnhost's test-webserver, with an Alpine
# etc/os-release as their base has: the ImageVolume specs read both), pause. Sourced by
# scripts/conformance.sh and scripts/cluster.sh.
#
#   REPO=... DIR=... E2E_BIN=... K8S_SRC=... MANIFEST=...
#   . "$REPO/scripts/lib/test-images.sh"
#   build_images      # DIR/images/*.tar; IMAGES holds their names
#
# The caller sources scripts/lib/common.sh first (log, die, now, since).

# image_ref ID: registry/name:tag of the image manifest.go calls ID.
image_ref() {
    python3 - "$MANIFEST" "$1" <<'EOF'
import re, sys
src = open(sys.argv[1], encoding="utf-8").read()
registries = dict(re.findall(r'^\s*(\w+Registry):\s*"([^"]+)"', src, re.M))
m = re.search(r'configs\[%s\]\s*=\s*Config\{list\.(\w+),\s*"([^"]+)",\s*"([^"]+)"\}' % re.escape(sys.argv[2]), src)
if not m or m.group(1) not in registries:
    sys.exit("manifest.go gives no image for %s" % sys.argv[2])
print("%s/%s:%s" % (registries[m.group(1)], m.group(2), m.group(3)))
EOF
}

IMAGES=()

# add_programs ROOT PROGRAM[=PATH]...: each program (a path on this machine) at
# its own path under ROOT, or at PATH, and the shared libraries it loads at
# their own paths.
add_programs() {
    local root=$1 p f to
    shift
    for p in "$@"; do
        to=${p#*=}
        p=${p%%=*}
        [[ -x $p ]] || die "$p is missing (scripts/install-deps.sh --k8s installs it)"
        mkdir -p -- "$root$(dirname -- "$to")"
        cp -L -- "$p" "$root$to"
        while read -r f; do
            [[ -e $root$f ]] || cp -L --parents -- "$f" "$root"
        done < <(ldd "$p" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
    done
}

build_images() {
    local t0 busybox nonroot nonewprivs agnhost agnhost_prev dnstest nginx nginx_new nautilus kitten pause root demo
    t0=$(now)
    if ! { busybox=$(image_ref BusyBox) && nonroot=$(image_ref NonRoot) && nonewprivs=$(image_ref Nonewprivs) &&
        agnhost=$(image_ref Agnhost) && agnhost_prev=$(image_ref AgnhostPrev) && dnstest=$(image_ref GlibcDnsTesting) &&
        nginx=$(image_ref Nginx) && nginx_new=$(image_ref NginxNew) && nautilus=$(image_ref Nautilus) &&
        kitten=$(image_ref Kitten) && pause=$(image_ref Pause); }; then
        die "cannot read the image names from $MANIFEST"
    fi
    root=$DIR/images/root
    # The users and groups upstream's images have that specs rely on: busybox's
    # nobody, agnhost's user-defined-in-image (1000) and group-defined-in-image
    # (50000).
    mkdir -p "$root/busybox/etc" "$root/agnhost/etc" "$root/agnhost/uploads" "$root/nonewprivs/usr/local/bin" \
        "$root/nginx/usr/share/nginx/html"
    printf '%s\n' '<!DOCTYPE html>' '<html><head><title>Welcome to nginx!</title></head>' \
        '<body><h1>Welcome to nginx!</h1></body></html>' >"$root/nginx/usr/share/nginx/html/index.html"
    printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'daemon:x:1:1:daemon:/usr/sbin:/bin/false' \
        'bin:x:2:2:bin:/bin:/bin/false' 'sys:x:3:3:sys:/dev:/bin/false' \
        'nobody:x:65534:65534:nobody:/home:/bin/false' >"$root/busybox/etc/passwd"
    printf '%s\n' 'root:x:0:' 'daemon:x:1:' 'bin:x:2:' 'sys:x:3:' 'nogroup:x:65534:' >"$root/busybox/etc/group"
    printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/:/bin/false' \
        'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh' >"$root/agnhost/etc/passwd"
    printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'user-defined-in-image:x:1000:' \
        'group-defined-in-image:x:50000:user-defined-in-image' >"$root/agnhost/etc/group"
    cp -- "$E2E_BIN/agnhost" "$root/agnhost/agnhost"
    ln -s agnhost "$root/agnhost/agnhost-2"
    cp -- "$K8S_SRC/test/images/agnhost/porter/localhost.crt" "$K8S_SRC/test/images/agnhost/porter/localhost.key" "$root/agnhost/"
    chmod 0755 "$root/agnhost/agnhost"
    chmod 0644 "$root/agnhost/localhost.crt" "$root/agnhost/localhost.key"
    # bash is agnhost's sh, as upstream's image has it: busybox's sh runs its own
    # applets before any program on PATH, so it would run busybox's nc.
    add_programs "$root/agnhost" /usr/bin/curl /usr/bin/dig /usr/sbin/ip /usr/bin/nc.openbsd=/usr/bin/nc \
        /bin/bash /bin/bash=/bin/sh /usr/bin/getent
    mkdir -p "$root/dnstest/etc"
    add_programs "$root/dnstest" /usr/bin/dig /bin/bash /bin/bash=/bin/sh /usr/bin/getent
    # getent (busybox has none) reads /etc/hosts first, as both upstream images do.
    printf 'hosts: files dns\n' | tee "$root/agnhost/etc/nsswitch.conf" >"$root/dnstest/etc/nsswitch.conf"
    cp -- "$E2E_BIN/nnp" "$root/nonewprivs/usr/local/bin/nnp"
    chmod 4755 "$root/nonewprivs/usr/local/bin/nnp"
    local full_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    bash "$REPO/scripts/build-image.sh" --all-applets --add "$root/busybox" \
        "$DIR/images/busybox.tar" "$busybox" sh || die "building $busybox failed"
    bash "$REPO/scripts/build-image.sh" --all-applets --add "$root/busybox" --user 1234 \
        "$DIR/images/nonroot.tar" "$nonroot" sh || die "building $nonroot failed"
    bash "$REPO/scripts/build-image.sh" --all-applets --add "$root/nonewprivs" --path "$full_path" \
        "$DIR/images/nonewprivs.tar" "$nonewprivs" nnp || die "building $nonewprivs failed"
    bash "$REPO/scripts/build-image.sh" --all-applets --add "$root/agnhost" --path "$full_path" --entrypoint /agnhost \
        "$DIR/images/agnhost.tar" "$agnhost" pause || die "building $agnhost failed"
    bash "$REPO/scripts/build-image.sh" --all-applets --add "$root/agnhost" --path "$full_path" --entrypoint /agnhost \
        "$DIR/images/agnhost-prev.tar" "$agnhost_prev" pause || die "building $agnhost_prev failed"
    bash "$REPO/scripts/build-image.sh" --all-applets --add "$root/nginx" --path "$full_path" \
        "$DIR/images/nginx.tar" "$nginx" httpd -f -p 80 -h /usr/share/nginx/html || die "building $nginx failed"
    bash "$REPO/scripts/build-image.sh" --all-applets --add "$root/nginx" --path "$full_path" \
        "$DIR/images/nginx-new.tar" "$nginx_new" httpd -f -p 80 -h /usr/share/nginx/html ||
        die "building $nginx_new failed"
    # As upstream's: the html files at the image's root (which its web server serves), on an
    # Alpine base (the ImageVolume specs mount kitten and read data.json and etc/os-release).
    for demo in nautilus kitten; do
        [[ -f $K8S_SRC/test/images/$demo/html/data.json ]] || die "$K8S_SRC/test/images/$demo/html/data.json is missing"
        mkdir -p "$root/$demo/etc"
        install -m 0644 -t "$root/$demo/" -- "$K8S_SRC/test/images/$demo/html/"*
        printf '%s\n' '# A stand-in built from busybox; upstream'"'"'s image is built on Alpine.' \
            'NAME="Alpine Linux"' 'ID=alpine' >"$root/$demo/etc/os-release"
        bash "$REPO/scripts/build-image.sh" --all-applets --add "$root/$demo" --path "$full_path" \
            "$DIR/images/$demo.tar" "${!demo}" httpd -f -p 80 -h / || die "building ${!demo} failed"
    done
    bash "$REPO/scripts/build-image.sh" --all-applets --add "$root/dnstest" --path "$full_path" \
        "$DIR/images/dnstest.tar" "$dnstest" sh || die "building $dnstest failed"
    # upstream's pause exits on SIGTERM; PID 1 ignores a signal it has no
    # handler for, so the stand-in traps it.
    bash "$REPO/scripts/build-image.sh" "$DIR/images/pause.tar" "$pause" \
        sh -c 'trap "exit 0" TERM INT; while :; do sleep 1; done' || die "building $pause failed"
    IMAGES=("$busybox" "$nonroot" "$nonewprivs" "$agnhost" "$agnhost_prev" "$dnstest" "$nginx" "$nginx_new" "$nautilus" "$kitten" "$pause")
    log "built ${#IMAGES[@]} images in $(since "$t0") s: ${IMAGES[*]}"
}

