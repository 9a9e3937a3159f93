#!/usr/bin/env python3
"""Checks that a built library or program exports exactly its declared list (DESIGN.md: "The
libraries export their API and nothing else"; docs/architecture.md, "Exports").

    check_exports.py OBJECT LIST [--header H]... [--exported-in SRC]... [--forbid PAT]... [--not-needed PAT]...
                     [--program] [--nm NM]
    check_exports.py OBJECT --none [--program] [--nm NM]

Reads `nm -D --defined-only OBJECT` and fails, printing them, on:
  - any exported symbol that no name or pattern of LIST (a version script such as cmake/libaccio.map,
    or a dynamic list such as tests/offload/static_worker.dynlist) allows;
  - a LIST that declares nothing (so the check cannot pass by reading an empty or misparsed list);
  - a plain name (no wildcard) of LIST that OBJECT does not export (a stale list);
  - with --header: a function the public header declares (under LIST's patterns) that OBJECT does not
    export, or an exported symbol that no header declares;
  - with --exported-in: a difference between the functions SRC marks EXPORT and what OBJECT exports;
  - with --forbid PAT: a symbol matching PAT that OBJECT exports or defines at all (its full symbol
    table, where not stripped: a static archive linked in hidden still shows there), e.g. libaccio
    and "ffi_*" or "veo_*" (the offload runtime and libffi are libaccio_offload's);
  - with --not-needed PAT: a DT_NEEDED entry matching PAT (e.g. "libffi*");
  - with --soname NAME: a DT_SONAME other than NAME (docs/abi.md: libaccio.so.0, libaccio_offload.so.0).
With --none, OBJECT must export nothing at all (the worker programs). With --program, OBJECT is an
executable, which the linker makes export a symbol that a shared library it links also defines
(a copy-relocated variable such as stdout, an inline C++ function the shared libstdc++ also has) so
that one definition serves the process: those are allowed, nothing else. With --static-runtime,
OBJECT must also not need the shared libstdc++ or libgcc_s: the static-runtime build checks that it
is one (make cpp-test-static-runtime), so that it cannot pass without testing what crashed.

Also imported by tests/python/test_exports.py, which checks the installed package the same way.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import re
import subprocess
import sys


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r"#[^\n]*", " ", text)  # version-script comments and C preprocessor lines


def read_list(path: str) -> list[str]:
    """The names and patterns a version script's global: section (or a dynamic list) declares."""
    with open(path, encoding="utf-8") as f:
        text = strip_comments(f.read())
    if "extern" in text:
        raise SystemExit(f"{path}: extern \"C++\" blocks are not supported here; list C names")
    body = re.search(r"\{(.*)\}", text, flags=re.S)
    if not body:
        raise SystemExit(f"{path}: no {{ ... }} block: not a version script or dynamic list")
    section = body.group(1)
    if "global:" in section:
        section = section.split("global:", 1)[1]
    section = section.split("local:", 1)[0]
    return [t.strip() for t in section.split(";") if t.strip()]


def _symbols(obj: str, nm: str, *flags: str) -> list[str]:
    """The symbols `nm --defined-only FLAGS` lists for OBJECT, without their version suffixes."""
    if not os.path.exists(obj):
        raise SystemExit(f"{obj}: no such file (built?)")
    out = subprocess.run([nm, *flags, "--defined-only", obj], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{nm} {' '.join(flags)} --defined-only {obj} failed: {out.stderr.strip()}")
    names = set()
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            names.add(parts[-1].split("@", 1)[0])
    return sorted(names)


def exported(obj: str, nm: str = "nm") -> list[str]:
    """The dynamic symbols OBJECT defines."""
    return _symbols(obj, nm, "-D")


def from_needed_libraries(obj: str, nm: str = "nm") -> set[str]:
    """Symbols defined by the shared libraries OBJECT links (as the loader finds them, via ldd)."""
    out = subprocess.run(["ldd", obj], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"ldd {obj} failed: {out.stderr.strip()}")
    names = set()
    for m in re.finditer(r"=>\s*(/\S+)", out.stdout):
        names.update(exported(m.group(1), nm))
    return names


def needed(obj: str) -> list[str]:
    """OBJECT's DT_NEEDED entries (readelf -d)."""
    out = subprocess.run(["readelf", "-d", obj], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"readelf -d {obj} failed: {out.stderr.strip()}")
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out.stdout)


def defined(obj: str, nm: str = "nm") -> list[str]:
    """Every symbol OBJECT defines, local ones included (empty when it is stripped)."""
    return _symbols(obj, nm)


def forbidden(obj: str, forbid=(), not_needed=(), nm: str = "nm") -> list[str]:
    """Problems: symbols matching a --forbid pattern, libraries matching a --not-needed pattern."""
    out = []
    if forbid:
        names = set(exported(obj, nm)) | set(defined(obj, nm))
        bad = sorted(n for n in names if allowed(n, list(forbid)))
        if bad:
            out.append(f"defines symbols it must not ({', '.join(forbid)}):\n    " + "\n    ".join(bad[:40])
                       + (f"\n    ... {len(bad) - 40} more" if len(bad) > 40 else ""))
    if not_needed:
        bad = [n for n in needed(obj) if allowed(n, list(not_needed))]
        if bad:
            out.append(f"needs {', '.join(bad)} ({', '.join(not_needed)} must not be needed)")
    return out


def soname(obj: str) -> str | None:
    """OBJECT's DT_SONAME (readelf -d), or None."""
    out = subprocess.run(["readelf", "-d", obj], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"readelf -d {obj} failed: {out.stderr.strip()}")
    m = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", out.stdout)
    return m.group(1) if m else None


def is_pattern(p: str) -> bool:
    return any(c in p for c in "*?[")


def allowed(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def header_functions(path: str, patterns: list[str]) -> set[str]:
    """Functions a C header declares whose names fall under the list's patterns."""
    with open(path, encoding="utf-8") as f:
        text = strip_comments(f.read())
    return {m.group(1) for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\(", text) if allowed(m.group(1), patterns)}


def source_exports(path: str) -> set[str]:
    """Functions a C source defines with its EXPORT marker (src/preload/preload.c)."""
    with open(path, encoding="utf-8") as f:
        text = strip_comments(f.read())
    return {m.group(1) for m in re.finditer(r"\bEXPORT\b[^;{(]*?\b([A-Za-z_]\w*)\s*\(", text)}


def problems(obj: str, list_path: str | None, headers=(), sources=(), nm: str = "nm",
             program: bool = False) -> tuple[list[str], list[str]]:
    """(problems, exported names) for OBJECT against LIST (None: it must export nothing)."""
    names = exported(obj, nm)
    if program:
        shared = from_needed_libraries(obj, nm)
        names = [n for n in names if n not in shared]
    out = []
    if list_path is None:
        if names:
            out.append(f"exports {len(names)} symbols, none declared:\n    " + "\n    ".join(names))
        return out, names
    declared = read_list(list_path)
    if not declared:
        out.append(f"{list_path} declares no symbol")
        return out, names
    extra = [n for n in names if not allowed(n, declared)]
    if extra:
        out.append(f"exports {len(extra)} symbols that {list_path} does not declare:\n    " + "\n    ".join(extra))
    stale = [p for p in declared if not is_pattern(p) and p not in names]
    if stale:
        out.append(f"does not export {', '.join(stale)}, which {list_path} declares")
    if not names:
        out.append("exports nothing")
    if headers:
        in_headers = set().union(*(header_functions(h, declared) for h in headers))
        missing = sorted(in_headers - set(names))
        undeclared = sorted(n for n in names if n not in in_headers)
        if missing:
            out.append("does not export these functions of " + ", ".join(headers) + ":\n    " + "\n    ".join(missing))
        if undeclared:
            out.append("exports symbols that no public header declares (" + ", ".join(headers) + "):\n    "
                       + "\n    ".join(undeclared))
    for src in sources:
        marked = source_exports(src)
        if not marked:
            out.append(f"{src} marks no function EXPORT")
        if sorted(marked) != names:
            out.append(f"exports differ from the functions {src} marks EXPORT: marked but not exported "
                       f"{sorted(marked - set(names))}, exported but not marked {sorted(set(names) - marked)}")
    return out, names


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("object")
    ap.add_argument("list", nargs="?", help="version script or dynamic list")
    ap.add_argument("--none", action="store_true", help="the object must export nothing")
    ap.add_argument("--header", action="append", default=[], help="a public header declaring the API")
    ap.add_argument("--exported-in", action="append", default=[], help="a C source marking its exports EXPORT")
    ap.add_argument("--program", action="store_true",
                    help="an executable: allow what a library it links defines too (copy relocations)")
    ap.add_argument("--forbid", action="append", default=[],
                    help="a symbol pattern OBJECT must neither export nor define")
    ap.add_argument("--not-needed", action="append", default=[],
                    help="a library name pattern OBJECT must not need (DT_NEEDED)")
    ap.add_argument("--soname", help="the DT_SONAME OBJECT must have")
    ap.add_argument("--static-runtime", action="store_true",
                    help="also fail if OBJECT needs the shared libstdc++ or libgcc_s")
    ap.add_argument("--nm", default=os.environ.get("NM", "nm"))
    a = ap.parse_args(argv)
    if bool(a.list) == a.none:
        ap.error("give a LIST, or --none")
    found, names = problems(a.object, None if a.none else a.list, a.header, a.exported_in, a.nm, a.program)
    name = os.path.basename(a.object)
    found += forbidden(a.object, a.forbid, a.not_needed, a.nm)
    if a.soname and soname(a.object) != a.soname:
        found.append(f"has soname {soname(a.object)}, not {a.soname}")
    if a.static_runtime:
        shared = [n for n in needed(a.object) if n.startswith(("libstdc++", "libgcc_s"))]
        if shared:
            found.append(f"needs {', '.join(shared)}: not a static-runtime build (check the linker flags)")
    if found:
        for p in found:
            print(f"FAIL {name}: {p}")
        return 1
    what = "nothing, as declared" if a.none else f"{len(names)} symbols, all declared in {a.list}"
    if a.program:
        what += " (besides what the libraries it links define too)"
    print(f"ok {name}: exports {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
