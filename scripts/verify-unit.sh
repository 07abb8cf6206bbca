#!/bin/sh
# Checks systemd/picolet.service with `systemd-analyze verify`, which exits 0 on many problems
# ("Unknown key name ..., ignoring"): any output at all is a failure. verify also wants the
# ExecStart binary to exist, so the unit is checked as a copy whose ExecStart points at a stub
# executable; nothing else in it changes.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
unit=${1:-$here/systemd/picolet.service}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#!/bin/sh\nexit 0\n' >"$tmp/picolet"
chmod +x "$tmp/picolet"
mkdir "$tmp/unit"
sed "s|^ExecStart=/usr/bin/picolet |ExecStart=$tmp/picolet |" "$unit" >"$tmp/unit/picolet.service"
grep -q "^ExecStart=$tmp/picolet " "$tmp/unit/picolet.service" || {
    echo "verify-unit: $unit: no ExecStart=/usr/bin/picolet line to check" >&2
    exit 1
}
out=$(systemd-analyze verify "$tmp/unit/picolet.service" 2>&1) || {
    echo "verify-unit: systemd-analyze failed on $unit:" >&2
    echo "$out" >&2
    exit 1
}
if [ -n "$out" ]; then
    echo "verify-unit: systemd-analyze reported on $unit:" >&2
    echo "$out" >&2
    exit 1
fi
echo "verify-unit: $unit: clean"
