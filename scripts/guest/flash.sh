# scripts/guest.sh flash: what the node writes to its disk at rest, from the guest's own
# block device statistics. Sourced by scripts/guest.sh (its boot, gx, check, fail and the
# run's directory and share); not run on its own. Figures only: nothing is asserted.
#
# One boot: picolet installed as the unit file installs it (or, with --agent kubelet, the
# upstream kubelet of the pinned release as a unit of its own, standalone: the same static
# pods, containerd and cgroup driver, its defaults otherwise), GUEST_FLASH_PODS static pods
# (default 10) that each print one line every GUEST_FLASH_LOG_EVERY seconds (default 60; 0:
# silent) and otherwise sleep, all running, GUEST_FLASH_SETTLE seconds more (default 120),
# then a `sync` and the window of GUEST_FLASH_SECONDS (default 3600). At the start and the end
# of the window (and every GUEST_FLASH_EVERY seconds between, default 600, as running totals)
# the guest reads:
#   - /sys/block/vda/stat: sectors written to the whole device (a `sync` first, so data
#     dirtied in the window is on the device), which includes the ext4 journal and metadata
#     that no process is charged for;
#   - write_bytes of /proc/PID/io for picolet, containerd, the shims
#     (containerd-shim-runc-v2) and every other process (the bytes each one caused to be
#     written to storage; a process that exited in the window is not counted);
#   - the apparent size of /var/log/pods (the pods' logs, written by containerd);
# and at the end lists the files on the root file system modified in the window.
# GUEST_FLASH_REMOUNT=OPTIONS remounts the root file system with OPTIONS before the window
# (`mount -o remount,OPTIONS /`: lazytime, commit=N, ...), to measure what they save.
# The page cache is dropped after the agent's binary is copied in and before its unit starts,
# so the binary's pages are charged to the unit that reads them (memory.current), as on a
# device that boots with it on its disk, not to the command that copied it.
# The journal is in memory in this image (Storage=volatile): picolet's and containerd's log
# lines are not on the disk. The guest-agent's files are on the 9p share, not the disk.
# shellcheck shell=bash
# shellcheck disable=SC2034 # (PASSED: read by scripts/guest.sh, which sources this file)

F_SECONDS=${GUEST_FLASH_SECONDS:-3600}
F_PODS=${GUEST_FLASH_PODS:-10}
F_LOG_EVERY=${GUEST_FLASH_LOG_EVERY:-60}
F_SETTLE=${GUEST_FLASH_SETTLE:-120}
F_EVERY=${GUEST_FLASH_EVERY:-600}
F_REMOUNT=${GUEST_FLASH_REMOUNT:-}
[[ $F_REMOUNT =~ ^[a-z0-9_=,]*$ ]] || die "GUEST_FLASH_REMOUNT must be mount options (letters, digits, = and commas), not '$F_REMOUNT'"
for v in F_SECONDS F_PODS F_LOG_EVERY F_SETTLE F_EVERY; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "GUEST_FLASH_${v#F_} must be a whole number, not '${!v}'"
done
((F_SECONDS > 0 && F_EVERY > 0)) || die "GUEST_FLASH_SECONDS and GUEST_FLASH_EVERY must be above 0"
T_ALL=$(now)
# The agent (its unit is named after it), and the files that install it.
if [[ $AGENT == kubelet ]]; then
    F_KUBELET=$("$ROOT/scripts/k8s-build.sh" --e2e | tail -n 1)/kubelet ||
        die "building the upstream kubelet failed (scripts/k8s-build.sh --e2e)"
    [[ -x $F_KUBELET ]] || die "no kubelet at $F_KUBELET (scripts/k8s-build.sh --e2e builds it)"
    install -m 0755 "$F_KUBELET" "$SHARE/kubelet"
    cat >"$SHARE/kubelet.service" <<'UNIT'
[Unit]
Description=the upstream kubelet, standalone (scripts/guest.sh flash --agent kubelet)
After=containerd.service
Wants=containerd.service

[Service]
ExecStart=/usr/bin/kubelet --config=/etc/kubernetes/kubelet.yaml
Restart=always
RestartSec=10

[Install]
WantedBy=multi-user.target
UNIT
    # Standalone (no kubeconfig): the static pods alone; no webhook authentication or
    # authorization, which would need an apiserver; no iptables chains (the guest has no
    # iptables); the rest the kubelet's defaults, as picolet's unit runs with its own.
    cat >"$SHARE/kubelet.yaml" <<'CONFIG'
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: /etc/kubernetes/manifests
cgroupDriver: systemd
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
failSwapOn: false
makeIPTablesUtilChains: false
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
CONFIG
    AGENT_DESC="the upstream kubelet $F_KUBELET ($(du -k "$F_KUBELET" | cut -f1) KiB)"
else
    AGENT_DESC="picolet $PICOLET ($(du -k "$PICOLET" | cut -f1) KiB)"
fi
log "$ARCH guest, flash writes at rest: $F_PODS pods (a log line each every ${F_LOG_EVERY}s), window ${F_SECONDS}s${F_REMOUNT:+, / remounted with $F_REMOUNT}; image $IMAGE, $AGENT_DESC; run directory $RUN"
log "host: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"

# The pods: a shell that sleeps, printing the date every F_LOG_EVERY seconds (a heartbeat
# line, as a quiet service logs) or never.
if ((F_LOG_EVERY > 0)); then
    QUIET="trap 'exit 0' TERM; while :; do date; sleep $F_LOG_EVERY & wait; done"
else
    QUIET="trap 'exit 0' TERM; while :; do sleep 3600 & wait; done"
fi
F_NAMES=()
for ((i = 0; i < F_PODS; i++)); do
    manifest "quiet$i" "" "" "$QUIET" >"$SHARE/manifests/quiet$i.yaml"
    F_NAMES+=("quiet$i")
done

# The guest's side: a snapshot of the counters into /run (tmpfs: nothing on the disk), and
# the report of the growth since the first one.
cat >"$SHARE/flash-lib.sh" <<'EOF'
# snapshot FILE: "dev SECTORS_WRITTEN WRITE_IOS", "log BYTES", "t UPTIME" and one
# "proc PID COMM WRITE_BYTES" line per process.
snapshot() {
    sync
    {
        awk '{ print "dev", $7, $5 }' /sys/block/vda/stat
        echo "log $(du -sb --apparent-size /var/log/pods 2>/dev/null | cut -f1)"
        echo "t $(cut -d' ' -f1 /proc/uptime)"
        local d comm wb
        for d in /proc/[0-9]*; do
            wb=$(awk '$1 == "write_bytes:" { print $2 }' "$d/io" 2>/dev/null) || continue
            [[ -n $wb ]] || continue
            comm=$(tr ' ' '_' <"$d/comm" 2>/dev/null) || continue
            echo "proc ${d#/proc/} $comm $wb"
        done
    } >"$1.tmp"
    mv -f "$1.tmp" "$1"
}
# report START NOW: bytes written between the two snapshots, by the device and by process
# group, and per hour.
report() {
    awk -v pic="$(systemctl show -p MainPID --value "$AGENT_UNIT")" -v agent="$AGENT_UNIT" \
        -v ctd="$(systemctl show -p MainPID --value containerd)" '
        FNR == 1 { f++ }
        $1 == "dev" { dev[f] = $2 * 512; ios[f] = $3 }
        $1 == "log" { lg[f] = $2 }
        $1 == "t" { t[f] = $2 }
        $1 == "proc" {
            if (f == 1) { w0[$2] = $4; next }
            d = $4 - (($2 in w0) ? w0[$2] : 0)
            if ($2 == pic) g = "agent"
            else if ($2 == ctd) g = "containerd"
            else if ($3 ~ /^containerd-shim/) { g = "shims"; nshim++ }
            else { g = "other"; o[$3] += d }
            w[g] += d
        }
        function line(name, b) { printf "  %-36s %12d B  %10.1f KiB/h\n", name, b, b / 1024 * 3600 / s }
        END {
            s = t[2] - t[1]
            printf "window %.0f s\n", s
            line("device vda (sectors written)", dev[2] - dev[1])
            printf "  %-36s %12d write requests\n", "device vda", ios[2] - ios[1]
            line(agent " (write_bytes)", w["agent"])
            line("containerd (write_bytes)", w["containerd"])
            line(sprintf("shims, %d (write_bytes)", nshim), w["shims"])
            line("every other process (write_bytes)", w["other"])
            for (c in o) if (o[c] > 0) line("    " c, o[c])
            line("/var/log/pods growth (apparent size)", lg[2] - lg[1])
            line("the rest (fs journal, metadata)", dev[2] - dev[1] - w["agent"] - w["containerd"] - w["shims"] - w["other"])
        }' "$1" "$2"
}
EOF

boot
check "the guest runs systemd on cgroup v2 with containerd" 300 '
    wait_active containerd 240 || exit 1
    echo "$(uname -r), $(stat -fc %T /sys/fs/cgroup), $(containerd --version | cut -d" " -f3), / mounted $(findmnt -no OPTIONS /)"
    wait_active guest-images.service 240'
if [[ $AGENT == kubelet ]]; then
    check "install the upstream kubelet as a unit, standalone, with $F_PODS static pods" 120 '
        install -m 0755 /mnt/host/kubelet /usr/bin/kubelet
        install -m 0644 /mnt/host/kubelet.service /etc/systemd/system/kubelet.service
        mkdir -p /etc/kubernetes/manifests
        install -m 0644 /mnt/host/kubelet.yaml /etc/kubernetes/kubelet.yaml
        cp /mnt/host/manifests/quiet*.yaml /etc/kubernetes/manifests/
        sync
        echo 3 >/proc/sys/vm/drop_caches
        systemctl daemon-reload
        systemctl enable --now kubelet.service 2>&1 | grep -v "^Created symlink" || true
        sleep 5
        systemctl is-active kubelet >/dev/null || { systemctl status --no-pager -n 40 kubelet; exit 1; }
        kubelet --version'
else
    check "install picolet as the unit file installs it, with $F_PODS static pods" 60 '
        install -m 0755 /mnt/host/picolet /usr/bin/picolet
        install -m 0644 /mnt/host/picolet.service /etc/systemd/system/picolet.service
        mkdir -p /etc/kubernetes/manifests
        printf "PICOLET_ARGS=\"--cgroup-driver=systemd\"\n" >/etc/default/picolet
        cp /mnt/host/manifests/quiet*.yaml /etc/kubernetes/manifests/
        sync
        echo 3 >/proc/sys/vm/drop_caches
        systemctl daemon-reload
        systemctl enable --now picolet.service 2>&1 | grep -v "^Created symlink" || true
        systemctl is-active picolet >/dev/null || { diag; exit 1; }
        picolet --version'
fi
check "every static pod runs, once" 1260 "wait_running 1200 ${F_NAMES[*]} && no_duplicates"
if [[ -n $F_REMOUNT ]]; then
    check "the root file system remounted with $F_REMOUNT" 60 "mount -o remount,$F_REMOUNT / && findmnt -no OPTIONS /"
fi
log "settling ${F_SETTLE} s"
sleep "$F_SETTLE"
check "the node's memory with $F_PODS pods at rest, $AGENT (a figure; host load $(cut -d' ' -f1-3 /proc/loadavg))" 60 "footprint $AGENT"
check "the window starts" 120 ". /mnt/host/flash-lib.sh; snapshot /run/flash-0; touch /run/flash-mark
    echo \"$AGENT pid \$(systemctl show -p MainPID --value $AGENT), containerd pid \$(systemctl show -p MainPID --value containerd), \$(pgrep -c -f containerd-shim-runc-v2) shims\""
t_start=$SECONDS
host_load=("$(cut -d' ' -f1-3 /proc/loadavg)")
while :; do
    left=$((F_SECONDS - (SECONDS - t_start)))
    ((left > 0)) || break
    sleep $((left < F_EVERY ? left : F_EVERY))
    host_load+=("$(cut -d' ' -f1-3 /proc/loadavg)")
    ((F_SECONDS - (SECONDS - t_start) > 0)) || break
    check "running totals after $((SECONDS - t_start)) s (host load $(cut -d' ' -f1-3 /proc/loadavg))" 120 \
        "AGENT_UNIT=$AGENT; . /mnt/host/flash-lib.sh; snapshot /run/flash-1; report /run/flash-0 /run/flash-1"
done
check "flash writes at rest: $F_PODS pods, $AGENT, bytes written in the window and per hour (figures)" 120 "AGENT_UNIT=$AGENT
"'. /mnt/host/flash-lib.sh; snapshot /run/flash-1; report /run/flash-0 /run/flash-1
    systemctl is-active $AGENT_UNIT >/dev/null || echo "$AGENT_UNIT is not active at the end (restarts $(systemctl show -p NRestarts --value $AGENT_UNIT))"
    running_sets | awk "\$1 == \"container\"" | wc -l | sed "s/^/running containers at the end: /"'
check "files on the root file system modified in the window (the 40 largest)" 120 '
    find / -xdev -type f -newer /run/flash-mark -printf "%s %p\n" 2>/dev/null | sort -rn | head -n 40
    echo "($(find / -xdev -type f -newer /run/flash-mark 2>/dev/null | wc -l) files in all)"'
log "host load average during the window (1 5 15 min, every ${F_EVERY} s): $(printf '%s; ' "${host_load[@]}")"
stop_qemu
PASSED=1
log "$ARCH: flash writes measured in $(since "$T_ALL") s"
