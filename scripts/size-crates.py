#!/usr/bin/env python3
"""Where the bytes of a built picolet go, without building it again (cargo bloat always builds).

    scripts/size-crates.py BINARY [N]

BINARY must be unstripped (CARGO_PROFILE_RELEASE_STRIP=false cargo build --release ...; the
stripped size of the same build is `strip -o /tmp/x BINARY; stat -c %s /tmp/x`). Prints the sum of
the function symbols (`nm -S -C`: the code, as cargo bloat counts it), the N (default 15) crates
with the most of it, attributing a function to the crate its path starts with, as cargo bloat
does (so a generic function instantiated for picolet's types counts for the crate that defines
the generic: serde_ignored's wrapper around the Pod decoder counts for serde_ignored), and the
functions that name the object model's types (picolet::api, picolet::objects) together with
serde's Deserialize, Visitor or Serialize. Asserts nothing.
"""
import collections
import re
import subprocess
import sys

if len(sys.argv) < 2:
    sys.exit(__doc__)
binary = sys.argv[1]
top = int(sys.argv[2]) if len(sys.argv) > 2 else 15
out = subprocess.run(["nm", "-S", "-C", "--size-sort", binary], capture_output=True, text=True,
                     check=True).stdout
crates = collections.Counter()
model = 0
total = 0
for line in out.splitlines():
    parts = line.split(" ", 3)
    if len(parts) < 4 or parts[2] not in "tTwW":
        continue
    size, name = int(parts[1], 16), parts[3]
    total += size
    m = re.match(r"<(?:&(?:mut )?)?([A-Za-z_][A-Za-z0-9_]*)::", name) or \
        re.match(r"([A-Za-z_][A-Za-z0-9_]*)::", name)
    crates[m.group(1) if m else ("[C]" if "::" not in name else "[other]")] += size
    if re.search(r"picolet::(api|objects)::", name) and \
            re.search(r"Deserializ|Visitor|Serializ|__Field", name):
        model += size
if total == 0:
    sys.exit("%s: no symbols (stripped?)" % binary)
print("functions %s bytes" % format(total, ","))
for c, s in crates.most_common(top):
    print("  %-24s %10s  %5.1f%%" % (c, format(s, ","), 100.0 * s / total))
print("object model serde functions (by name) %s bytes" % format(model, ","))
