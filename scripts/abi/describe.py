#!/usr/bin/python3
"""Writes the machine-readable description of gpumem's C ABI (abi/gpumem-abi.json).

The public headers (include/gpumem/*.h and gpumem_version.h) are parsed by libclang as a C99
compiler sees them, for one fixed target (x86_64 Linux, LP64), so the description does not depend
on the machine that writes it. It holds:

- every function declared GPUMEM_API: its return type and parameters (names and types), the header
  that declares it, and the version node of lib/gpumem.map that exports it;
- every struct: size, alignment, and each field's offset, size and type;
- every enum: its values; every typedef (callbacks with their signatures);
- the GPUMEM_* object-like macros that evaluate to integers (error codes, flags, versions, limits),
  each with its value and type, and string and pointer-valued ones beside them.

Each type is given twice: `type`, as the header spells it, and `abi`, its representation in a
small grammar that bindings are checked against (scripts/abi/check_bindings.py):

    i8 i16 i32 i64 u8 u16 u32 u64 char bool f32 f64 void
    ptr(T) / ptr(const T)       a pointer
    array(T,N)                  a fixed-size array (struct fields)
    struct:NAME                 a struct, by its typedef name where it has one (opaque or not)
    fn(R;A,B,...)               a function type (behind a ptr(): a callback)

Attribute macros on declarations (GPUMEM_API, a GPUMEM_NODISCARD) change nothing in it.

Usage:
    describe.py [--write | --check] [--version-header-dir DIR] [--output FILE]

With no option the description is printed; --write replaces abi/gpumem-abi.json, --check compares
it with the file and exits 1 on a difference. Exit status 77 when libclang is missing.
"""
import argparse
import ctypes
import glob
import json
import os
import pathlib
import re
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
DEFAULT_OUTPUT = ROOT / "abi" / "gpumem-abi.json"
TARGET = "x86_64-unknown-linux-gnu"
SKIP = 77
REGENERATE = "/usr/bin/python3 scripts/abi/describe.py --write"

LIBCLANG_CANDIDATES = [
    "/usr/lib/x86_64-linux-gnu/libclang-19.so.1",
    "/usr/lib/llvm-19/lib/libclang-19.so.1",
    "/usr/lib/llvm-19/lib/libclang.so.1",
]


class Missing(Exception):
    """libclang (or its Python module) is not installed: the caller skips."""


def load_cindex():
    """clang.cindex with its library loaded; raises Missing."""
    try:
        import clang.cindex as cindex
    except ImportError as e:
        raise Missing(f"the Python module clang.cindex is not installed ({e}); "
                      f"apt-get install python3-clang-19 libclang1-19 and run with /usr/bin/python3")
    if not cindex.Config.loaded:
        path = os.environ.get("GPUMEM_LIBCLANG")
        if not path:
            found = [p for p in LIBCLANG_CANDIDATES if os.path.exists(p)]
            found += sorted(glob.glob("/usr/lib/*/libclang-*.so*") + glob.glob("/usr/lib/llvm-*/lib/libclang*.so*"),
                            reverse=True)
            path = found[0] if found else None
        if not path:
            raise Missing("libclang is not installed (apt-get install libclang1-19), or set GPUMEM_LIBCLANG")
        cindex.Config.set_library_file(path)
    try:
        cindex.Index.create()
    except Exception as e:  # a library that does not load, or of the wrong kind
        raise Missing(f"libclang could not be loaded: {e}")
    return cindex


# --- lib/gpumem.map --------------------------------------------------------------------------------

def parse_map(path):
    """The version script as ([node, ...] in order, {symbol: node}). Raises ValueError on what a
    list of names per node does not explain (patterns, names under local: other than *)."""
    text = pathlib.Path(path).read_text()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"#[^\n]*", " ", text)
    nodes, symbols = [], {}
    for m in re.finditer(r"([A-Za-z_][\w.]*)\s*\{(.*?)\}\s*([\w.]*)\s*;", text, re.S):
        node, body = m.group(1), m.group(2)
        nodes.append(node)
        section = "global"
        for part in re.split(r"(global\s*:|local\s*:|;)", body):
            part = part.strip()
            if not part or part == ";":
                continue
            if part.startswith("global"):
                section = "global"
            elif part.startswith("local"):
                section = "local"
            elif section == "local":
                if part != "*":
                    raise ValueError(f"{path}: '{part}' under local: in {node}, where only '*' belongs")
            elif not re.fullmatch(r"[A-Za-z_]\w*", part):
                raise ValueError(f"{path}: {node} exports '{part}', a pattern or not a C name")
            elif part in symbols:
                raise ValueError(f"{path}: {part} is in {symbols[part]} and {node}")
            else:
                symbols[part] = node
    if not nodes:
        raise ValueError(f"{path}: no version node (NAME {{ ... }};)")
    return nodes, symbols


# --- The version header ----------------------------------------------------------------------------

def project_version(cmakelists=ROOT / "CMakeLists.txt"):
    m = re.search(r"project\s*\(\s*gpumem\b[^)]*\bVERSION\s+(\d+)\.(\d+)\.(\d+)", cmakelists.read_text())
    if not m:
        raise ValueError(f"{cmakelists}: no project(gpumem VERSION X.Y.Z)")
    return tuple(int(x) for x in m.groups())


def configure_version_header(directory):
    """Writes DIRECTORY/gpumem/gpumem_version.h from the .in template, as CMake would."""
    major, minor, patch = project_version()
    text = (ROOT / "include" / "gpumem" / "gpumem_version.h.in").read_text()
    for key, value in {"PROJECT_VERSION_MAJOR": major, "PROJECT_VERSION_MINOR": minor,
                       "PROJECT_VERSION_PATCH": patch, "PROJECT_VERSION": f"{major}.{minor}.{patch}"}.items():
        text = text.replace(f"@{key}@", str(value))
    out = pathlib.Path(directory) / "gpumem"
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpumem_version.h").write_text(text)


# --- libclang helpers ------------------------------------------------------------------------------

class _Eval:
    """clang_Cursor_Evaluate and friends, which clang.cindex does not wrap."""

    def __init__(self, cindex):
        lib = cindex.conf.lib
        self.lib = lib
        lib.clang_Cursor_Evaluate.argtypes = [cindex.Cursor]
        lib.clang_Cursor_Evaluate.restype = ctypes.c_void_p
        for name, res in [("clang_EvalResult_getKind", ctypes.c_int),
                          ("clang_EvalResult_isUnsignedInt", ctypes.c_uint),
                          ("clang_EvalResult_getAsLongLong", ctypes.c_longlong),
                          ("clang_EvalResult_getAsUnsigned", ctypes.c_ulonglong),
                          ("clang_EvalResult_getAsStr", ctypes.c_char_p),
                          ("clang_EvalResult_dispose", None)]:
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = [ctypes.c_void_p], res
        lib.clang_Cursor_isMacroFunctionLike.argtypes = [cindex.Cursor]
        lib.clang_Cursor_isMacroFunctionLike.restype = ctypes.c_uint

    def value(self, cursor):
        """An int, a str, or None for what does not evaluate to either."""
        result = self.lib.clang_Cursor_Evaluate(cursor)
        if not result:
            return None
        try:
            kind = self.lib.clang_EvalResult_getKind(result)
            if kind == 1:  # CXEval_Int
                if self.lib.clang_EvalResult_isUnsignedInt(result):
                    return int(self.lib.clang_EvalResult_getAsUnsigned(result))
                return int(self.lib.clang_EvalResult_getAsLongLong(result))
            if kind in (4, 5):  # CXEval_StrLiteral, CXEval_CFStr
                return self.lib.clang_EvalResult_getAsStr(result).decode()
            return None
        finally:
            self.lib.clang_EvalResult_dispose(result)

    def function_like(self, cursor):
        return bool(self.lib.clang_Cursor_isMacroFunctionLike(cursor))


class Describer:
    def __init__(self, cindex, include_dirs, strict=True):
        self.strict = strict  # the house rules too (GPUMEM_NODISCARD), not only what the ABI is
        self.ci = cindex
        self.K = cindex.CursorKind
        self.T = cindex.TypeKind
        self.include_dirs = [str(d) for d in include_dirs]
        self.eval = _Eval(cindex)
        self.typedef_of_tag = {}  # struct tag -> typedef name

    def parse(self, source, name="gpumem_abi_probe.c"):
        args = ["-x", "c", "-std=c99", f"--target={TARGET}", "-DGPUMEM_BUILDING_LIBRARY"]
        args += [f"-I{d}" for d in self.include_dirs]
        tu = self.ci.TranslationUnit.from_source(
            name, args, unsaved_files=[(name, source)],
            options=self.ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD | self.ci.TranslationUnit.PARSE_SKIP_FUNCTION_BODIES)
        errors = [d for d in tu.diagnostics if d.severity >= self.ci.Diagnostic.Error]
        return tu, errors

    @staticmethod
    def header_of(cursor):
        f = cursor.location.file
        return None if f is None else f.name

    def is_public(self, cursor):
        path = self.header_of(cursor)
        return path is not None and os.path.basename(os.path.dirname(path)) == "gpumem" and path.endswith(".h")

    # The abi grammar (see the module docstring).
    def abi(self, t):
        T = self.T
        t_c = t.get_canonical()
        k = t_c.kind
        const = "const " if t_c.is_const_qualified() else ""
        if k == T.POINTER:
            pointee = t_c.get_pointee()
            inner = self.abi(pointee)
            pconst = "const " if pointee.get_canonical().is_const_qualified() else ""
            return f"ptr({pconst}{inner})"
        if k == T.CONSTANTARRAY:
            return f"array({self.abi(t_c.element_type)},{t_c.element_count})"
        if k == T.RECORD:
            tag = t_c.get_declaration().spelling
            return f"struct:{self.typedef_of_tag.get(tag, tag)}"
        if k == T.ENUM:
            return self.abi(t_c.get_declaration().enum_type)
        if k in (T.FUNCTIONPROTO, T.FUNCTIONNOPROTO):
            args = ",".join(self.abi(a) for a in t_c.argument_types()) if k == T.FUNCTIONPROTO else ""
            return f"fn({self.abi(t_c.get_result())};{args})"
        simple = {T.VOID: "void", T.BOOL: "bool", T.FLOAT: "f32", T.DOUBLE: "f64",
                  T.CHAR_S: "char", T.CHAR_U: "char"}
        if k in simple:
            return simple[k]
        signed = {T.SCHAR, T.SHORT, T.INT, T.LONG, T.LONGLONG}
        unsigned = {T.UCHAR, T.USHORT, T.UINT, T.ULONG, T.ULONGLONG}
        if k in signed or k in unsigned:
            return f"{'i' if k in signed else 'u'}{t_c.get_size() * 8}"
        raise ValueError(f"no abi spelling for the type {t.spelling!r} ({k})")

    def type_entry(self, t, name=None):
        entry = {}
        if name is not None:
            entry["name"] = name
        entry["type"] = t.spelling
        entry["abi"] = self.abi(t)
        return entry

    def describe(self, map_path):
        nodes, exported = parse_map(map_path)
        # experimental.h stands apart from gpumem.h; a release from before it has none.
        tiers = "#include <gpumem/experimental.h>\n" if any(
            os.path.exists(os.path.join(d, "gpumem", "experimental.h")) for d in self.include_dirs) else ""
        tu, errors = self.parse("#include <gpumem/gpumem.h>\n" + tiers)
        if errors:
            raise ValueError("the headers do not parse:\n" + "\n".join(str(d) for d in errors))
        K = self.K
        cursors = [c for c in tu.cursor.get_children() if self.is_public(c)]

        # Typedef names of struct tags first: the abi spelling uses them.
        for c in cursors:
            if c.kind == K.TYPEDEF_DECL:
                u = c.underlying_typedef_type.get_canonical()
                if u.kind == self.T.RECORD:
                    self.typedef_of_tag.setdefault(u.get_declaration().spelling, c.spelling)

        functions, structs, enums, typedefs, macros, problems = {}, {}, {}, {}, [], []
        opaque = set()
        for c in cursors:
            header = os.path.basename(self.header_of(c))
            if c.kind == K.FUNCTION_DECL:
                exported_attr = any(ch.kind == K.VISIBILITY_ATTR for ch in c.get_children())
                if not exported_attr:
                    problems.append(f"{header}: {c.spelling} is declared without GPUMEM_API")
                    continue
                if c.spelling in functions:
                    continue
                if c.type.kind != self.T.FUNCTIONPROTO:
                    problems.append(f"{header}: {c.spelling} has no prototype (write (void))")
                    continue
                if self.strict and c.result_type.spelling == "gpumem_status_t" and not any(
                        ch.kind == K.WARN_UNUSED_RESULT_ATTR for ch in c.get_children()):
                    problems.append(f"{header}: {c.spelling} returns a status and is declared without GPUMEM_NODISCARD")
                    continue
                params = [self.type_entry(a.type, a.spelling) for a in c.get_arguments()]
                functions[c.spelling] = {
                    "header": header,
                    "node": exported.get(c.spelling),
                    "returns": self.type_entry(c.result_type),
                    "params": params,
                }
            elif c.kind == K.STRUCT_DECL:
                name = self.typedef_of_tag.get(c.spelling, c.spelling)
                if not c.is_definition():
                    opaque.add(name)
                    continue
                fields = []
                for f in c.get_children():
                    if f.kind != K.FIELD_DECL:
                        continue
                    if f.is_bitfield():
                        problems.append(f"{header}: {name}.{f.spelling} is a bit-field")
                    entry = {"name": f.spelling, "offset": f.get_field_offsetof() // 8, "size": f.type.get_size()}
                    entry.update(self.type_entry(f.type))
                    fields.append(entry)
                structs[name] = {"header": header, "tag": c.spelling, "size": c.type.get_size(),
                                 "align": c.type.get_align(), "fields": fields}
            elif c.kind == K.ENUM_DECL:
                if not c.is_definition():
                    continue
                values = [{"name": e.spelling, "value": e.enum_value}
                          for e in c.get_children() if e.kind == K.ENUM_CONSTANT_DECL]
                enums[c.spelling or "(anonymous)"] = {"header": header, "underlying": self.abi(c.enum_type),
                                                      "values": values}
            elif c.kind == K.TYPEDEF_DECL:
                u = c.underlying_typedef_type
                entry = {"header": header}
                entry.update(self.type_entry(u))
                typedefs[c.spelling] = entry
            elif c.kind == K.MACRO_DEFINITION and c.spelling.startswith("GPUMEM_"):
                macros.append(c)
        for name in opaque - set(structs):
            structs[name] = {"header": os.path.basename(self.header_of(
                next(c for c in cursors if c.kind == K.STRUCT_DECL and self.typedef_of_tag.get(c.spelling, c.spelling) == name))),
                "opaque": True}

        for sym, node in exported.items():
            if sym not in functions:
                problems.append(f"{map_path}: {sym} is exported by {node} but no header declares it GPUMEM_API")
        for name, f in functions.items():
            if f["node"] is None:
                problems.append(f"{f['header']}: {name} is declared GPUMEM_API but is in no node of lib/gpumem.map")
            if not name.startswith("gpumem_"):
                problems.append(f"{f['header']}: {name} does not start with gpumem_")
        if problems:
            raise ValueError("\n".join(problems))

        constants = self.constants(macros)
        major, minor, patch = (constants[f"GPUMEM_VERSION_{k}"]["value"] for k in ("MAJOR", "MINOR", "PATCH"))
        return {
            "description": "gpumem's C ABI as libclang reads include/gpumem/*.h; written by scripts/abi/describe.py "
                           "(regenerate: " + REGENERATE + ")",
            "version": f"{major}.{minor}.{patch}",
            "soname": f"libgpumem.so.{major}",
            "target": {"triple": TARGET, "pointer_size": 8},
            "nodes": nodes,
            "functions": dict(sorted(functions.items())),
            "structs": dict(sorted(structs.items())),
            "enums": dict(sorted(enums.items())),
            "typedefs": dict(sorted(typedefs.items())),
            "constants": dict(sorted(constants.items())),
        }

    def constants(self, macros):
        """Object-like GPUMEM_* macros with a body, evaluated by the compiler: each is declared as a
        variable initialized by the macro in a probe unit, whose type and value libclang gives. A
        macro whose body is not an expression (an include guard, GPUMEM_API, a braced initializer)
        is left out."""
        candidates = {}
        for c in macros:
            if self.eval.function_like(c):
                continue
            tokens = [t.spelling for t in c.get_tokens()][1:]
            if not tokens or "{" in tokens or tokens[0] in ("__attribute__", "[[", "__declspec"):
                continue
            if c.spelling in ("GPUMEM_API",) or re.fullmatch(r"GPUMEM_\w+_H_?", c.spelling):
                continue
            candidates[c.spelling] = os.path.basename(self.header_of(c))
        def probe(names):
            source = "#include <gpumem/gpumem.h>\n" + "".join(
                f"static const __typeof__(({n})) gpumem_abi_probe_{n} = ({n});\n" for n in names)
            return self.parse(source)

        tu, errors = probe(sorted(candidates))
        failed = set()
        if errors:  # one probe at a time, to learn which macros are not expressions
            failed = {n for n in candidates if probe([n])[1]}
            tu, errors = probe(sorted(set(candidates) - failed))
            if errors:
                raise ValueError("the constant probes do not parse:\n" + "\n".join(str(d) for d in errors))
        out = {}
        for c in tu.cursor.get_children():
            if c.kind != self.K.VAR_DECL or not c.spelling.startswith("gpumem_abi_probe_"):
                continue
            name = c.spelling[len("gpumem_abi_probe_"):]
            if name in failed:
                continue
            abi = self.abi(c.type)
            entry = {"header": candidates[name], "abi": abi}
            if abi.startswith(("i", "u")) and abi[1:].isdigit() or abi == "bool":
                entry["value"] = self.eval.value(c)
            elif abi in ("ptr(const char)", "ptr(char)") or abi.startswith("array(char,"):
                entry["abi"] = "ptr(const char)"
                entry["value"] = self.eval.value(c)
            elif abi.startswith("ptr("):
                entry["value"] = self.pointer_value(name)
            else:
                continue
            if entry["value"] is None:
                continue
            out[name] = entry
        return out

    def pointer_value(self, name):
        tu, errors = self.parse("#include <gpumem/gpumem.h>\n"
                                f"static const unsigned long long gpumem_abi_probe = (unsigned long long)({name});\n")
        if errors:
            return None
        for c in tu.cursor.get_children():
            if c.kind == self.K.VAR_DECL and c.spelling == "gpumem_abi_probe":
                return self.eval.value(c)
        return None


def dumps(value, indent=0):
    """JSON with one line per leaf object (a parameter, a field), the rest indented: a change shows
    as the lines of what changed."""
    pad = "  " * indent
    if isinstance(value, dict) and value and any(isinstance(v, (dict, list)) and v for v in value.values()):
        items = [f'{pad}  {json.dumps(k)}: {dumps(v, indent + 1).lstrip()}' for k, v in value.items()]
        return pad + "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list) and value and any(isinstance(v, (dict, list)) for v in value):
        items = [dumps(v, indent + 1) for v in value]
        return pad + "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return pad + json.dumps(value)


def generate(version_header_dir=None, map_path=ROOT / "lib" / "gpumem.map", include_dir=ROOT / "include",
             strict=True):
    """The description as text. Raises Missing or ValueError. strict=False describes a release
    from before a house rule (its headers as they were)."""
    cindex = load_cindex()
    with tempfile.TemporaryDirectory() as tmp:
        if version_header_dir is None or not (pathlib.Path(version_header_dir) / "gpumem" / "gpumem_version.h").exists():
            configure_version_header(tmp)
            version_header_dir = tmp
        describer = Describer(cindex, [include_dir, version_header_dir], strict)
        return dumps(describer.describe(map_path)) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="replace the output file")
    mode.add_argument("--check", action="store_true", help="compare with the output file")
    p.add_argument("--output", type=pathlib.Path, default=DEFAULT_OUTPUT)
    p.add_argument("--version-header-dir",
                   help="the directory that holds gpumem/gpumem_version.h (a build tree's include/); "
                        "by default it is configured from CMakeLists.txt")
    args = p.parse_args(argv)
    try:
        text = generate(args.version_header_dir)
    except Missing as e:
        print(f"SKIP: {e}")
        return SKIP
    except ValueError as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    if args.write:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
        print(f"wrote {args.output}")
    elif args.check:
        if not args.output.exists() or args.output.read_text() != text:
            print(f"FAIL: {args.output} is not what the headers give; regenerate: {REGENERATE}")
            return 1
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
