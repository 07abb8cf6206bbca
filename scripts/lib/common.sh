# shellcheck shell=bash
# Sourced by the scripts under scripts/: their messages, timing, processes and cgroup trees.
#
#   PROG=name  # what messages start with (default: the script's file name without .sh)
#   . "$(dirname -- "${BASH_SOURCE[0]}")/lib/common.sh"
#
# Defines nothing a caller has to call; every function is self-contained.

PROG=${PROG:-$(basename -- "$0" .sh)}

say() { printf '%s\n' "$*"; }
section() { printf '\n==== %s\n' "$*"; }
log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit 1
}
# die_with_log FILE LINES MESSAGE: die, with the last LINES lines of FILE.
die_with_log() {
    printf '%s: error: %s\n--- last %s lines of %s ---\n' "$PROG" "$3" "$2" "$1" >&2
    tail -n "$2" "$1" >&2 2>/dev/null || true
    exit 1
}

# Seconds since the epoch, microseconds after the point.
now() { printf '%s' "${EPOCHREALTIME/,/.}"; }
# since START [DECIMALS]: the seconds from START (a `now`) to now, with DECIMALS (default 1)
# digits after the point.
since() { awk -v a="$1" -v b="$(now)" -v d="${2:-1}" 'BEGIN { printf "%.*f", d, b - a }'; }

# True while PID runs. A zombie counts as gone: PID 1 of some machines reaps its adopted
# children (containerd, shims) only after a second or so.
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != [ZX] ]]
}

# wait_gone PID TENTHS: waits up to TENTHS tenths of a second for PID to end; false if it
# still runs.
wait_gone() {
    local i
    for ((i = 0; i < $2; i++)); do
        alive "$1" || return 0
        sleep 0.1
    done
    ! alive "$1"
}

# pid_of DIR NAME: the PID recorded in DIR/run/NAME.pid if that process runs and its command
# line names DIR (so a recycled PID is never taken for it); nothing otherwise.
pid_of() {
    local f=$1/run/$2.pid pid a
    local args=()
    [[ -f $f ]] || return 0
    pid=$(<"$f")
    [[ $pid =~ ^[0-9]+$ ]] || return 0
    mapfile -d '' -t args 2>/dev/null <"/proc/$pid/cmdline" || return 0
    for a in "${args[@]}"; do
        if [[ $a == *"$1/"* ]]; then
            alive "$pid" && printf '%s' "$pid"
            return 0
        fi
    done
}

# stop_pid PID [NAME]: SIGTERM, SIGKILL after 15 s (logged when NAME is given), then reaps it
# if it is this shell's child. No-op for an empty PID.
stop_pid() {
    local pid=$1
    [[ -n $pid ]] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_gone "$pid" 150; then
        [[ -z ${2:-} ]] || log "$2 (pid $pid) ignored SIGTERM for 15 s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

# cleanup_on_exit FUNC: FUNC runs once when the script ends, however it ends, with `set +e`;
# the script's exit status is kept (Ctrl-C exits 130, SIGTERM 143).
cleanup_on_exit() {
    CLEANUP_FUNC=$1
    trap _cleanup_and_exit EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}
_cleanup_and_exit() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    "$CLEANUP_FUNC"
    exit "$rc"
}

# A free TCP port on loopback (the kernel's pick; free when asked).
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The mount points of the cgroup hierarchies (v1 controllers and v2).
cgroup_mounts() {
    awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { t = $(i + 1); break } } t == "cgroup" || t == "cgroup2" { print $5 }' /proc/self/mountinfo | sort -u
}

# remove_cgroup_tree ROOT: removes the cgroup ROOT and everything under it (deepest first) in
# every mounted hierarchy; false if a cgroup could not be removed (a process still in it).
remove_cgroup_tree() {
    local mnt ok=0
    while read -r mnt; do
        [[ -d $mnt$1 ]] || continue
        find "$mnt$1" -depth -type d -exec rmdir {} \; 2>/dev/null || ok=1
    done < <(cgroup_mounts)
    return "$ok"
}

# write_sleep_pod DIR NAME IMAGE: the static pod NAME, one container `sleep` that sleeps for an
# hour in IMAGE, written to a dot file in DIR and renamed into place (a reader never sees half a
# manifest).
write_sleep_pod() {
    local dir=$1 name=$2 image=$3
    cat >"$dir/.$name.yaml.tmp" <<POD
apiVersion: v1
kind: Pod
metadata:
  name: $name
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: sleep
    image: $image
    command: ["sleep", "3600"]
POD
    mv -f -- "$dir/.$name.yaml.tmp" "$dir/$name.yaml"
}
