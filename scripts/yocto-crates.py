#!/usr/bin/env python3
"""Writes yocto/meta-picolet/recipes-containers/picolet/picolet-crates.inc from Cargo.lock: one
crate:// SRC_URI entry per crates.io package with its sha256 checksum, in the format OE-core's
cargo-update-recipe-crates class writes (`bitbake -c update_crates picolet` gives the same
entries), so the recipe fetches exactly the locked crates and builds offline.

    scripts/yocto-crates.py           rewrite the file
    scripts/yocto-crates.py --check   exit 1, naming the difference, if it is out of date, or if
                                      the recipe no longer matches the repository (its file name
                                      and Cargo.toml's version, LIC_FILES_CHKSUM and LICENSE,
                                      the files it installs)

No bitbake runs here: these are the checks that need none.
"""

import difflib
import pathlib
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
LOCK = ROOT / "Cargo.lock"
INC = ROOT / "yocto/meta-picolet/recipes-containers/picolet/picolet-crates.inc"
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"


def render(lock_path: pathlib.Path) -> str:
    with open(lock_path, "rb") as f:
        lock = tomllib.load(f)
    uris, sums = [], []
    for p in lock.get("package", []):
        src = p.get("source")
        if src is None:
            continue  # picolet itself (a path package)
        if src != CRATES_IO:
            sys.exit(f"yocto-crates: {lock_path}: package {p['name']} {p['version']} comes from "
                     f"{src}; only crates.io packages can be listed as crate:// URIs")
        if "checksum" not in p:
            sys.exit(f"yocto-crates: {lock_path}: package {p['name']} {p['version']} has no checksum")
        key = f"{p['name']}-{p['version']}"
        uris.append(f"    crate://crates.io/{p['name']}/{p['version']};name={key} \\")
        sums.append(f'SRC_URI[{key}.sha256sum] = "{p["checksum"]}"')
    if not uris:
        sys.exit(f"yocto-crates: {lock_path}: no crates.io packages")
    return "\n".join(
        ["# Generated from Cargo.lock by scripts/yocto-crates.py; do not edit.",
         "# scripts/test.sh checks that it matches Cargo.lock.",
         "",
         "# from Cargo.lock",
         'SRC_URI += " \\']
        + uris
        + ['"']
        + sums
    ) + "\n"


def check_recipe() -> list[str]:
    """What in the recipe disagrees with the repository."""
    import hashlib
    import re
    errors = []
    with open(ROOT / "Cargo.toml", "rb") as f:
        version = tomllib.load(f)["package"]["version"]
    recipe = INC.parent / f"picolet_{version}.bb"
    if not recipe.exists():
        others = sorted(p.name for p in INC.parent.glob("picolet_*.bb"))
        return [f"{recipe.relative_to(ROOT)}: missing for version {version} of Cargo.toml "
                f"(found {others})"]
    text = recipe.read_text()
    name = recipe.relative_to(ROOT)
    m = re.search(r'LIC_FILES_CHKSUM = "file://([^;]+);md5=([0-9a-f]{32})"', text)
    if not m:
        errors.append(f"{name}: no LIC_FILES_CHKSUM with one file and its md5")
    else:
        lic = ROOT / m.group(1)
        got = hashlib.md5(lic.read_bytes()).hexdigest() if lic.exists() else "(missing)"
        if got != m.group(2):
            errors.append(f"{name}: LIC_FILES_CHKSUM md5 {m.group(2)} but {m.group(1)} has {got}")
    lic_field = re.search(r'^LICENSE = "([^"]*)"', text, re.M)
    with open(ROOT / "Cargo.toml", "rb") as f:
        cargo_license = tomllib.load(f)["package"]["license"]
    if not lic_field or lic_field.group(1) != cargo_license:
        errors.append(f"{name}: LICENSE is not Cargo.toml's {cargo_license!r}")
    if "require ${BPN}-crates.inc" not in text:
        errors.append(f"{name}: does not require ${{BPN}}-crates.inc")
    elif text.index("require ${BPN}-crates.inc") < text.index("SRC_URI ="):
        errors.append(f"{name}: requires the crate list before setting SRC_URI, which drops it")
    for rel in re.findall(r"\$\{S\}/([\w./-]+)", text):
        if not (ROOT / rel).exists():
            errors.append(f"{name}: installs {rel}, which is not in the repository")
    # Unbalanced quotes or a continuation line that ends the file break bitbake's parser.
    body = re.sub(r"\\\n", " ", text)
    for i, line in enumerate(body.splitlines(), 1):
        if line.count('"') % 2:
            errors.append(f"{name}: unbalanced quotes in {line.strip()[:60]!r}")
    return errors


def main() -> int:
    check = sys.argv[1:] == ["--check"]
    if sys.argv[1:] not in ([], ["--check"]):
        print(__doc__, file=sys.stderr)
        return 2
    want = render(LOCK)
    if not check:
        INC.write_text(want)
        print(f"yocto-crates: wrote {INC.relative_to(ROOT)} ({want.count('crate://')} crates)")
        return 0
    problems = check_recipe()
    for p in problems:
        print(f"yocto-crates: {p}", file=sys.stderr)
    have = INC.read_text() if INC.exists() else ""
    if have == want and not problems:
        print(f"yocto-crates: {INC.relative_to(ROOT)} matches Cargo.lock "
              f"({want.count('crate://')} crates)")
        return 0
    if have == want:
        return 1
    diff = difflib.unified_diff(have.splitlines(), want.splitlines(),
                                str(INC.relative_to(ROOT)), "from Cargo.lock", lineterm="", n=0)
    print(f"yocto-crates: {INC.relative_to(ROOT)} is out of date with Cargo.lock; "
          "run scripts/yocto-crates.py", file=sys.stderr)
    for line in list(diff)[:40]:
        print(line, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
