#!/usr/bin/python3
"""Checks gpumem's ABI: the checked-in description, what changed against it, and the library.

1. The description (abi/gpumem-abi.json) is regenerated from the headers (scripts/abi/describe.py)
   and must equal the checked-in file; a difference is printed as a diff with the command that
   regenerates it.
2. What the headers give now is compared with a baseline (the checked-in file, or with
   --baseline-ref the file as a git revision has it, such as the last release). An added function,
   struct field at a struct's end, enum value or version node is compatible and needs only the
   regenerated file. An incompatible change is refused unless the SONAME changed, which for 0.x
   too is the only thing that allows one (the minor version does not): a function removed, moved
   to another version node, or given other parameter or result types; a struct made smaller, its
   alignment changed, or a field moved, resized, retyped or removed; an enum value or a constant
   renumbered or removed (the GPUMEM_VERSION_* macros aside); a callback typedef changed; a version
   node removed. A function added to a node other than the current version's is refused as well:
   a released node does not grow.
3. With --library: the library's dynamic symbol table defines exactly the described functions,
   each under its version node (name@@GPUMEM_x.y) and nothing else; its SONAME is the described
   one; nothing ties it to the CUDA driver or runtime at link time (no NEEDED libcuda/libcudart/
   libnvidia*, no undefined cu*/cuda* symbol: the driver is dlopen'ed).

Exit status: 0 when all holds, 1 otherwise, 77 (skip) when libclang or a tool is missing and
nothing that could be checked failed.
"""
import argparse
import difflib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import describe  # noqa: E402

ROOT = describe.ROOT
VERSION_MACROS = re.compile(r"GPUMEM_VERSION_\w+")


EXPERIMENTAL = "GPUMEM_EXPERIMENTAL"  # the node outside the promise (gpumem/experimental.h)


def incompatibilities(old, new):
    """What NEW breaks of OLD (descriptions as dicts), as sentences. The experimental tier's
    functions may change or go; one that moves to a release's node is promised from then on."""
    out = []
    for name, f in old["functions"].items():
        if f["node"] == EXPERIMENTAL:
            continue
        g = new["functions"].get(name)
        if g is None:
            out.append(f"function {name} ({f['node']}) is removed")
            continue
        if g["node"] != f["node"]:
            out.append(f"function {name} moved from {f['node']} to {g['node']}")
        if g["returns"]["abi"] != f["returns"]["abi"]:
            out.append(f"function {name} returns {g['returns']['type']} ({g['returns']['abi']}), "
                       f"was {f['returns']['type']} ({f['returns']['abi']})")
        a = [p["abi"] for p in f["params"]]
        b = [p["abi"] for p in g["params"]]
        if a != b:
            out.append(f"function {name} takes ({', '.join(p['type'] for p in g['params'])}), "
                       f"was ({', '.join(p['type'] for p in f['params'])})")
    for name, s in old["structs"].items():
        if s.get("header") == "experimental.h":
            continue
        t = new["structs"].get(name)
        if t is None:
            out.append(f"struct {name} is removed")
            continue
        if s.get("opaque"):
            continue
        if t.get("opaque"):
            out.append(f"struct {name} became opaque")
            continue
        if t["size"] < s["size"]:
            out.append(f"struct {name} shrank from {s['size']} to {t['size']} bytes")
        if t["align"] != s["align"]:
            out.append(f"struct {name} is aligned to {t['align']} bytes, was {s['align']}")
        fields = {f["name"]: f for f in t["fields"]}
        for f in s["fields"]:
            g = fields.get(f["name"])
            if g is None:
                out.append(f"field {name}.{f['name']} is removed")
            elif (g["offset"], g["size"], g["abi"]) != (f["offset"], f["size"], f["abi"]):
                out.append(f"field {name}.{f['name']} is {g['type']} ({g['abi']}) at offset {g['offset']} "
                           f"({g['size']} bytes), was {f['type']} ({f['abi']}) at {f['offset']} ({f['size']} bytes)")
        for g in t["fields"]:
            if g["name"] not in {f["name"] for f in s["fields"]} and g["offset"] < s["size"]:
                out.append(f"field {name}.{g['name']} is added at offset {g['offset']}, inside the old "
                           f"{s['size']} bytes (a struct grows only at its end)")
    for name, e in old["enums"].items():
        if e.get("header") == "experimental.h":
            continue
        values = {v["name"]: v["value"] for v in new["enums"].get(name, {}).get("values", [])}
        for v in e["values"]:
            if v["name"] not in values:
                out.append(f"enum value {v['name']} ({name}) is removed")
            elif values[v["name"]] != v["value"]:
                out.append(f"enum value {v['name']} is {values[v['name']]}, was {v['value']}")
    for name, c in old["constants"].items():
        if VERSION_MACROS.fullmatch(name):
            continue
        d = new["constants"].get(name)
        if d is None:
            out.append(f"constant {name} is removed")
        elif (d["abi"], d["value"]) != (c["abi"], c["value"]):
            out.append(f"constant {name} is {d['value']!r} ({d['abi']}), was {c['value']!r} ({c['abi']})")
    for name, t in old["typedefs"].items():
        u = new["typedefs"].get(name)
        if u is None:
            out.append(f"typedef {name} is removed")
        elif u["abi"] != t["abi"]:
            out.append(f"typedef {name} is {u['type']}, was {t['type']}")
    for node in old["nodes"]:
        if node not in new["nodes"] and node != EXPERIMENTAL:
            out.append(f"version node {node} is removed")
    return out


def misplaced_additions(old, new):
    """Functions NEW adds to a node other than its own version's (released nodes do not grow)."""
    major, minor = new["version"].split(".")[:2]
    current = f"GPUMEM_{major}.{minor}"
    return [f"function {name} is added to {f['node']}; a new function belongs in {current}"
            for name, f in new["functions"].items()
            if name not in old["functions"] and f["node"] not in (current, EXPERIMENTAL)]


def check_library(lib, description):
    """Problems of the library file against the description, or None when a tool is missing."""
    nm, readelf = shutil.which("nm"), shutil.which("readelf")
    if not nm or not readelf:
        return None
    problems = []
    nodes = set(description["nodes"])
    functions = description["functions"]
    out = subprocess.run([nm, "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    exported = {}
    for line in out.splitlines():
        parts = line.split()
        if not parts:
            continue
        kind, name = parts[-2], parts[-1]
        base, _, version = name.partition("@")
        version = version.lstrip("@")
        if kind == "A" and base in nodes:
            continue  # the version node's own symbol
        exported[base] = version
    for name, version in sorted(exported.items()):
        if not name.startswith("gpumem_"):
            problems.append(f"{lib} exports {name}, which does not start with gpumem_")
        if name not in functions:
            problems.append(f"{lib} exports {name}, which the description does not have")
        elif version != functions[name]["node"]:
            problems.append(f"{lib} exports {name}@{version or '(no version)'}; the description has it in "
                            f"{functions[name]['node']}")
    for name in sorted(set(functions) - set(exported)):
        problems.append(f"{name} is described but {lib} does not export it")
    dynamic = subprocess.run([readelf, "-d", lib], capture_output=True, text=True, check=True).stdout
    sonames = re.findall(r"\(SONAME\).*\[(.*)\]", dynamic)
    needed = re.findall(r"\(NEEDED\).*\[(.*)\]", dynamic)
    if sonames != [description["soname"]]:
        problems.append(f"SONAME is {sonames}, expected {description['soname']}")
    for n in needed:
        if re.match(r"lib(cuda|cudart|nvidia)", n):
            problems.append(f"NEEDED {n}: the CUDA driver must be dlopen'ed at run time, not linked")
    undefined = subprocess.run([nm, "-D", "--undefined-only", lib], capture_output=True, text=True, check=True).stdout
    for m in re.finditer(r"^\s*\w\s+((?:cu|cuda)[A-Z]\w*)", undefined, re.M):
        problems.append(f"undefined CUDA symbol {m.group(1)}: a call that bypasses the dlopen'ed driver")
    print(f"{lib}: {len(exported)} exports, SONAME {sonames[0] if sonames else '(none)'}, NEEDED {' '.join(needed)}")
    return problems


RELEASED = ROOT / "tests" / "abi" / "released"


def last_release():
    """The description of the newest release in tests/abi/released (its headers and map, as
    extract.sh takes them from git history), or None without libclang. Comparing with it, not with
    the checked-in file, is what keeps a change that is regenerated and committed at once honest."""
    releases = sorted((d for d in RELEASED.iterdir() if (d / "gpumem.map").exists()),
                      key=lambda d: tuple(int(x) for x in d.name.split(".")))
    if not releases:
        raise ValueError(f"no release in {RELEASED} has a gpumem.map (tests/abi/released/extract.sh)")
    last = releases[-1] / "include"
    try:
        return json.loads(describe.generate(last, releases[-1] / "gpumem.map", last, strict=False))
    except describe.Missing:
        return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--description", type=pathlib.Path, default=describe.DEFAULT_OUTPUT)
    p.add_argument("--version-header-dir", help="the build tree's include/ (gpumem/gpumem_version.h)")
    p.add_argument("--baseline", type=pathlib.Path,
                   help="the description to compare with (default: the last release's, described from "
                        "tests/abi/released/<version>: its headers and its lib/gpumem.map)")
    p.add_argument("--baseline-ref", help="compare with the description as this git revision has it")
    p.add_argument("--library", help="the built libgpumem.so to check against the description")
    args = p.parse_args(argv)

    failed, skipped = [], None
    checked_in_text = args.description.read_text()
    checked_in = json.loads(checked_in_text)
    if args.baseline_ref:
        rel = args.description.resolve().relative_to(ROOT)
        baseline = json.loads(subprocess.run(["git", "-C", str(ROOT), "show", f"{args.baseline_ref}:{rel}"],
                                             capture_output=True, text=True, check=True).stdout)
        baseline_name = f"{rel} at {args.baseline_ref}"
    elif args.baseline:
        baseline, baseline_name = json.loads(args.baseline.read_text()), str(args.baseline)
    else:
        baseline, baseline_name = last_release(), None
        if baseline is not None:
            baseline_name = f"gpumem {baseline['version']}, the last release (tests/abi/released)"

    try:
        text = describe.generate(args.version_header_dir)
    except describe.Missing as e:
        skipped = f"the description cannot be regenerated: {e}"
        text = None
    except ValueError as e:
        failed.append(str(e))
        text = None

    if text is not None:
        current = json.loads(text)
        if text != checked_in_text:
            diff = difflib.unified_diff(checked_in_text.splitlines(True), text.splitlines(True),
                                        f"{args.description} (checked in)", f"{args.description} (from the headers)")
            sys.stdout.writelines(diff)
            failed.append(f"{args.description} is not what the headers give; regenerate it (from the "
                          f"repository root): {describe.REGENERATE}")
        breaks = incompatibilities(baseline, current)
        if breaks:
            if current["soname"] != baseline["soname"]:
                print(f"incompatible changes against {baseline_name}, allowed by the SONAME change "
                      f"{baseline['soname']} -> {current['soname']}:")
                for b in breaks:
                    print(f"    {b}")
            else:
                failed.append(f"incompatible ABI changes against {baseline_name}, with the SONAME still "
                              f"{current['soname']}; only a SONAME bump (a new major version) allows them, "
                              f"for 0.x as well:\n" + "\n".join(f"    {b}" for b in breaks))
        failed += misplaced_additions(baseline, current)
        if not failed:
            print(f"description: {len(current['functions'])} functions, {len(current['structs'])} structs, "
                  f"{len(current['enums'])} enums, {len(current['constants'])} constants; as checked in, "
                  f"and compatible with {baseline_name}")

    if args.library:
        problems = check_library(args.library, checked_in if text is None else json.loads(text))
        if problems is None:
            skipped = (skipped + "; " if skipped else "") + "nm or readelf is not installed"
        else:
            failed += problems

    for f in failed:
        print(f"FAIL: {f}")
    if failed:
        return 1
    if skipped:
        print(f"SKIP: {skipped}")
        return describe.SKIP
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
