#!/usr/bin/python3
"""Checks the raw layers of the bindings against the ABI description (abi/gpumem-abi.json).

One description, three readers of it:

- Python (bindings/python/gpumem/_lib.py TABLE and _types.py STRUCTS, imported, so the ctypes
  objects themselves are compared): every described function is in the table once and nothing
  else; its argtypes and restype are the description's types; every struct is a Structure whose
  size, alignment and fields (names, order, offsets, sizes, types) ctypes lays out as the
  description does; every callback a CFUNCTYPE of the typedef's signature. ctypes has no const,
  and `c_void_p` stands for any pointer to void or to an opaque struct (a handle).
- Rust (bindings/rust/gpumem-sys/src/lib.rs, read as text): every described function is declared
  in the `extern "C"` block once and nothing else, with the description's parameter and result
  types, `*const` where C has const; every struct is `#[repr(C)]` with the description's fields,
  and its size, alignment and field offsets, computed by C's (repr(C)'s) layout rules from the
  field types, are the description's; each opaque struct is a zero-sized `#[repr(C)]` struct; type
  aliases, callbacks (`Option<unsafe extern "C" fn ...>`) and constants match the description, and
  every enum value and integer constant is there.
- Julia (bindings/julia/GPUMem/src/*.jl, read as text): every described function has a `ccall`
  whose result and argument types are the description's (Julia has no const; `Cstring` is only
  `const char *`; `Ptr{Cvoid}` a pointer to void or a callback), and it passes as many values,
  named as the header's parameters where they are plain names; every struct mirrored under its C
  name has the description's layout; every `@cfunction` stored in a `Ref{callback_t}` has the
  callback's signature; constants match, and every enum value and integer constant is there.

Each problem is printed as `binding: message`; exit status 0 when all match, 1 otherwise.
"""
import argparse
import ctypes
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
DESCRIPTION = ROOT / "abi" / "gpumem-abi.json"


def strip_const(abi):
    return abi.replace("const ", "")


class Checker:
    def __init__(self, description):
        self.d = description
        self.problems = []
        self.opaque = {n for n, s in description["structs"].items() if s.get("opaque")}
        self.integer_constants = {}
        for e in description["enums"].values():
            for v in e["values"]:
                self.integer_constants[v["name"]] = v["value"]
        for n, c in description["constants"].items():
            self.integer_constants[n] = c["value"]
        # What a binding may leave out: the experimental tier (gpumem/experimental.h). What it
        # declares of it is checked like the rest.
        experimental = {n for table in ("structs", "enums", "typedefs") for n, e in description.get(table, {}).items()
                        if isinstance(e, dict) and e.get("header") == "experimental.h"}
        self.optional = experimental | {n for n, f in description["functions"].items()
                                        if f["node"] == "GPUMEM_EXPERIMENTAL"}
        self.optional_constants = {v["name"] for n in experimental & set(description["enums"])
                                   for v in description["enums"][n]["values"]}

    def fail(self, binding, message):
        self.problems.append(f"{binding}: {message}")

    # --- layout by C rules, for the text-read bindings ------------------------------------------------
    @staticmethod
    def layout(fields):
        """(size, align, [(offset, size)]) of a struct of [(size, align)] fields."""
        offset, align, out = 0, 1, []
        for size, a in fields:
            offset = (offset + a - 1) // a * a
            out.append((offset, size))
            offset += size
            align = max(align, a)
        return (offset + align - 1) // align * align, align, out

    def compare_struct(self, binding, name, fields, layout=None):
        """FIELDS: [(name, abi, matches(c_abi) -> bool)]; LAYOUT: (size, align, [(offset, size)])."""
        s = self.d["structs"].get(name)
        if s is None:
            self.fail(binding, f"struct {name} is not in the description")
            return
        if s.get("opaque"):
            self.fail(binding, f"struct {name} is opaque in the headers but has fields here")
            return
        names = [f[0] for f in fields]
        want = [f["name"] for f in s["fields"]]
        if names != want:
            self.fail(binding, f"struct {name} has fields {names}; the header's are {want}")
            return
        for (fname, abi, ok), f in zip(fields, s["fields"]):
            if not ok(f["abi"]):
                self.fail(binding, f"field {name}.{fname} is {abi}; the header has {f['type']} ({f['abi']})")
        if layout is not None:
            size, align, offsets = layout
            if (size, align) != (s["size"], s["align"]):
                self.fail(binding, f"struct {name} is {size} bytes aligned to {align}; the header's is "
                                   f"{s['size']} aligned to {s['align']}")
            for (off, fsize), f in zip(offsets, s["fields"]):
                if (off, fsize) != (f["offset"], f["size"]):
                    self.fail(binding, f"field {name}.{f['name']} is at offset {off} ({fsize} bytes); the "
                                       f"header has {f['offset']} ({f['size']} bytes)")

    def coverage(self, binding, kind, have, want):
        for n in sorted(set(want) - set(have) - self.optional):
            self.fail(binding, f"{kind} {n} is in the description but not declared")
        for n in sorted(set(have) - set(want)):
            self.fail(binding, f"{kind} {n} is declared but not in the description")

    def check_constants(self, binding, consts, required):
        """CONSTS: {name: value}; REQUIRED: the described integer constants all must have."""
        strings = {n: c["value"] for n, c in self.d["constants"].items() if isinstance(c["value"], str)}
        for n, v in consts.items():
            want = self.integer_constants.get(n, strings.get(n))
            if want is None:
                self.fail(binding, f"constant {n} is not in the description")
            elif v != want:
                self.fail(binding, f"constant {n} is {v!r}; the header's value is {want!r}")
        for n in sorted(set(required) - set(consts) - self.optional_constants):
            self.fail(binding, f"constant {n} is in the description but not declared")

    # --- Python ---------------------------------------------------------------------------------------
    def check_python(self, package_dir):
        binding = "python"
        sys.path.insert(0, str(package_dir))
        from gpumem import _lib, _types  # noqa: E402  (the raw layer only: no library is loaded)

        codes = {"b": "i8", "B": "u8", "h": "i16", "H": "u16", "i": "i32", "I": "u32", "l": "i64", "L": "u64",
                 "q": "i64", "Q": "u64", "?": "bool", "c": "char", "f": "f32", "d": "f64", "z": "ptr(char)",
                 "P": "ptr(?)"}
        if ctypes.sizeof(ctypes.c_long) != 8:
            self.fail(binding, "this check assumes LP64 (ctypes' long is not 8 bytes here)")
            return

        def abi(t):
            if t is None:
                return "void"
            if isinstance(t, type) and issubclass(t, ctypes.Structure):
                return f"struct:{getattr(t, '_c_name_', t.__name__)}"
            if isinstance(t, type) and issubclass(t, ctypes.Array):
                return f"array({abi(t._type_)},{t._length_})"
            if isinstance(t, type) and issubclass(t, ctypes._Pointer):
                return f"ptr({abi(t._type_)})"
            if isinstance(t, type) and issubclass(t, ctypes._CFuncPtr):
                return f"ptr(fn({abi(t._restype_)};{','.join(abi(a) for a in t._argtypes_)}))"
            code = getattr(t, "_type_", None)
            if isinstance(code, str) and code in codes:
                return codes[code]
            return f"?{t!r}"

        def matches(py, c):
            c = strip_const(c)
            if py == c:
                return True
            # c_void_p: any pointer to void or to an opaque struct (handles, streams, CUDA pools).
            if "ptr(?)" in py:
                pattern = re.escape(py).replace(re.escape("ptr(?)"), r"ptr\((?:void|struct:(?:%s))\)" %
                                                "|".join(map(re.escape, sorted(self.opaque))))
                return re.fullmatch(pattern, c) is not None
            return False

        names = [row[0] for row in _lib.TABLE]
        for n in {n for n in names if names.count(n) > 1}:
            self.fail(binding, f"function {n} is in the table more than once")
        self.coverage(binding, "function", names, self.d["functions"])
        for name, argtypes, restype in _lib.TABLE:
            f = self.d["functions"].get(name)
            if f is None:
                continue
            if len(argtypes) != len(f["params"]):
                self.fail(binding, f"function {name} takes {len(argtypes)} arguments; the header has {len(f['params'])}")
                continue
            if not matches(abi(restype), f["returns"]["abi"]):
                self.fail(binding, f"function {name} returns {abi(restype)}; the header has "
                                   f"{f['returns']['type']} ({f['returns']['abi']})")
            for i, (a, p) in enumerate(zip(argtypes, f["params"])):
                if not matches(abi(a), p["abi"]):
                    self.fail(binding, f"function {name} argument {i} ({p['name']}) is {abi(a)}; the header has "
                                       f"{p['type']} ({p['abi']})")

        structs = {s._c_name_: s for s in _types.STRUCTS}
        self.coverage(binding, "struct", structs, [n for n in self.d["structs"] if n not in self.opaque])
        for name, cls in structs.items():
            fields = [(f[0], abi(f[1]), lambda c, a=abi(f[1]): matches(a, c)) for f in cls._fields_]
            offsets = [(getattr(cls, f[0]).offset, getattr(cls, f[0]).size) for f in cls._fields_]
            self.compare_struct(binding, name, fields, (ctypes.sizeof(cls), ctypes.alignment(cls), offsets))

        callbacks = {getattr(v, "_c_name_"): v for v in vars(_types).values()
                     if isinstance(v, type) and issubclass(v, ctypes._CFuncPtr) and hasattr(v, "_c_name_")}
        want = [n for n, t in self.d["typedefs"].items() if t["abi"].startswith("ptr(fn(")]
        self.coverage(binding, "callback", callbacks, want)
        for n, fn in callbacks.items():
            t = self.d["typedefs"].get(n)
            if t is not None and not matches(abi(fn), t["abi"]):
                self.fail(binding, f"callback {n} is {abi(fn)}; the header has {t['type']} ({t['abi']})")

    # --- Rust -----------------------------------------------------------------------------------------
    RUST_SCALARS = {"i8": ("i8", 1), "u8": ("u8", 1), "i16": ("i16", 2), "u16": ("u16", 2), "i32": ("i32", 4),
                    "u32": ("u32", 4), "i64": ("i64", 8), "u64": ("u64", 8), "usize": ("u64", 8),
                    "isize": ("i64", 8), "f32": ("f32", 4), "f64": ("f64", 8), "bool": ("bool", 1),
                    "c_char": ("char", 1), "c_int": ("i32", 4), "c_uint": ("u32", 4), "c_void": ("void", 1)}

    def check_rust(self, lib_rs):
        binding = "rust"
        text = re.sub(r"//[^\n]*", "", pathlib.Path(lib_rs).read_text())
        aliases = dict(re.findall(r"pub\s+type\s+(\w+)\s*=\s*(.*?);", text, re.S))
        structs = {}
        for m in re.finditer(r"((?:#\[[^\]]*\]\s*)*)pub\s+struct\s+(\w+)\s*\{(.*?)\}", text, re.S):
            if "repr(C)" not in m.group(1):
                self.fail(binding, f"struct {m.group(2)} is not #[repr(C)]")
            fields = [(n, " ".join(t.split())) for n, t in re.findall(r"(?:pub\s+)?(\w+)\s*:\s*([^,]+(?:<[^>]*>)?),?",
                                                                        self._strip_generics(m.group(3)))]
            structs[m.group(2)] = fields

        def split_top(s):
            parts, depth, cur = [], 0, ""
            for ch in s:
                if ch in "(<[":
                    depth += 1
                elif ch in ")>]":
                    depth -= 1
                if ch == "," and depth == 0:
                    parts.append(cur)
                    cur = ""
                else:
                    cur += ch
            if cur.strip():
                parts.append(cur)
            return [p.strip() for p in parts]

        def fn_abi(params, ret):
            args = [abi(p.split(":", 1)[1]) for p in split_top(params)]
            return f"fn({abi(ret) if ret else 'void'};{','.join(args)})"

        def abi(t):
            t = " ".join(t.split())
            if t in ("()", ""):
                return "void"
            m = re.fullmatch(r"\*(const|mut)\s+(.*)", t)
            if m:
                return f"ptr({'const ' if m.group(1) == 'const' else ''}{abi(m.group(2))})"
            m = re.fullmatch(r"\[(.*);\s*(\d+)\]", t)
            if m:
                return f"array({abi(m.group(1))},{m.group(2)})"
            m = re.fullmatch(r'Option<\s*unsafe\s+extern\s+"C"\s+fn\s*\((.*)\)\s*(?:->\s*(.*?))?\s*,?\s*>', t, re.S)
            if m:
                return f"ptr({fn_abi(m.group(1), m.group(2))})"
            if t in self.RUST_SCALARS:
                return self.RUST_SCALARS[t][0]
            if t in aliases:
                return abi(aliases[t])
            if t in structs:
                return f"struct:{t}"
            return f"?{t}"

        def size_align(t):
            t = " ".join(t.split())
            if t.startswith("*") or t.startswith("Option<"):
                return 8, 8
            m = re.fullmatch(r"\[(.*);\s*(\d+)\]", t)
            if m:
                s, a = size_align(m.group(1))
                return s * int(m.group(2)), a
            if t in self.RUST_SCALARS:
                s = self.RUST_SCALARS[t][1]
                return s, s
            if t in aliases:
                return size_align(aliases[t])
            if t in structs:
                lay = self.layout([size_align(ft) for _, ft in structs[t]])
                return lay[0], lay[1]
            raise ValueError(t)

        # Functions.
        block = re.search(r'extern\s+"C"\s*\{(.*)\n\}', text, re.S)
        declared = {}
        for m in re.finditer(r"pub\s+fn\s+(\w+)\s*\((.*?)\)\s*(?:->\s*([^;]*?))?\s*;", block.group(1) if block else "", re.S):
            name = m.group(1)
            if name in declared:
                self.fail(binding, f"function {name} is declared more than once")
            declared[name] = (split_top(m.group(2)), m.group(3))
        self.coverage(binding, "function", declared, self.d["functions"])
        for name, (params, ret) in declared.items():
            f = self.d["functions"].get(name)
            if f is None:
                continue
            if abi(ret or "") != f["returns"]["abi"]:
                self.fail(binding, f"function {name} returns {ret or '()'} ({abi(ret or '')}); the header has "
                                   f"{f['returns']['type']} ({f['returns']['abi']})")
            if len(params) != len(f["params"]):
                self.fail(binding, f"function {name} takes {len(params)} arguments; the header has {len(f['params'])}")
                continue
            for p, c in zip(params, f["params"]):
                pname, ptype = (x.strip() for x in p.split(":", 1))
                if abi(ptype) != c["abi"]:
                    self.fail(binding, f"function {name} argument {pname} is {ptype} ({abi(ptype)}); the header has "
                                       f"{c['type']} ({c['abi']})")

        # Structs.
        opaque_rust = {n for n, f in structs.items() if f and f[0][0] == "_private"}
        self.coverage(binding, "struct", structs, self.d["structs"])
        for n in sorted(opaque_rust):
            if n in self.d["structs"] and n not in self.opaque:
                self.fail(binding, f"struct {n} is opaque here but has fields in the headers")
        for n, fields in structs.items():
            if n in opaque_rust or n not in self.d["structs"]:
                continue
            try:
                lay = self.layout([size_align(t) for _, t in fields])
            except ValueError as e:
                self.fail(binding, f"struct {n}: no layout for the type {e}")
                lay = None
            self.compare_struct(binding, n, [(fn, f"{ft} ({abi(ft)})", lambda c, a=abi(ft): a == c)
                                             for fn, ft in fields], lay)

        # Typedefs: each alias of a gpumem typedef has its type.
        for n, t in aliases.items():
            want = self.d["typedefs"].get(n)
            if want is None:
                self.fail(binding, f"type {n} is not a typedef of the headers")
            elif abi(t) != want["abi"] and not want["abi"] == f"struct:{n}":
                self.fail(binding, f"type {n} is {' '.join(t.split())} ({abi(t)}); the header has "
                                   f"{want['type']} ({want['abi']})")
        for n, t in self.d["typedefs"].items():
            if n not in aliases and t["abi"] != f"struct:{n}":
                self.fail(binding, f"typedef {n} is in the description but not declared")

        # Constants.
        consts = {}
        for n, t, v in re.findall(r"pub\s+const\s+(\w+)\s*:\s*([^=]+?)\s*=\s*(.*?);", text, re.S):
            v = v.strip()
            m = re.fullmatch(r"([-+*<>|&() 0-9a-fA-Fx_]+?)(?:\s+as\s+\w+)?", v)
            if m and re.fullmatch(r"[-+*|&() 0-9]*(?:(?:0x[0-9a-fA-F_]+|[0-9_]+|<<|>>)[-+*|&() 0-9]*)*", m.group(1)):
                # integer literals and operators only: safe to evaluate as Python does the same
                consts[n] = eval(m.group(1).replace("_", ""), {"__builtins__": {}})
            elif re.fullmatch(r'"[^"]*"', v):
                consts[n] = v[1:-1]
            else:
                self.fail(binding, f"constant {n} = {v}: not a literal this check reads")
        self.check_constants(binding, consts, self.integer_constants)

    @staticmethod
    def _strip_generics(body):
        return body

    # --- Julia ----------------------------------------------------------------------------------------
    JULIA_SCALARS = {"Cchar": "char", "Cint": "i32", "Cuint": "u32", "Clong": "i64", "Culong": "u64",
                     "Clonglong": "i64", "Culonglong": "u64", "Csize_t": "u64", "Cssize_t": "i64",
                     "Cptrdiff_t": "i64", "Cfloat": "f32", "Cdouble": "f64", "Float32": "f32", "Float64": "f64",
                     "Bool": "bool", "Int8": "i8", "UInt8": "u8", "Int16": "i16", "UInt16": "u16", "Int32": "i32",
                     "UInt32": "u32", "Int64": "i64", "UInt64": "u64", "Int": "i64", "UInt": "u64", "Cvoid": "void"}
    SIZES = {"i8": 1, "u8": 1, "char": 1, "bool": 1, "i16": 2, "u16": 2, "i32": 4, "u32": 4, "f32": 4,
             "i64": 8, "u64": 8, "f64": 8}

    @staticmethod
    def split_args(s):
        parts, depth, cur, quote = [], 0, "", False
        for ch in s:
            if ch == '"':
                quote = not quote
            if not quote and ch in "([{":
                depth += 1
            elif not quote and ch in ")]}":
                depth -= 1
            if ch == "," and depth == 0 and not quote:
                parts.append(cur.strip())
                cur = ""
            else:
                cur += ch
        if cur.strip():
            parts.append(cur.strip())
        return parts

    @staticmethod
    def calls(text, callee):
        """(offset, [arguments]) of each `callee(...)` in TEXT."""
        for m in re.finditer(re.escape(callee) + r"\(", text):
            depth, i = 1, m.end()
            while depth and i < len(text):
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            yield m.start(), Checker.split_args(text[m.end():i - 1])

    def check_julia(self, src_dir):
        binding = "julia"
        files = sorted(pathlib.Path(src_dir).glob("*.jl"))
        texts = {f: re.sub(r"#=.*?=#", "", re.sub(r"#[^\n]*", "", f.read_text()), flags=re.S) for f in files}
        every = "\n".join(texts.values())
        aliases = dict(re.findall(r"^const\s+(gpumem_\w+_t|gpumem_\w+_fn)\s*=\s*(\S.*?)\s*$", every, re.M))
        structs = {}
        opaque = set(re.findall(r"^mutable\s+struct\s+(\w+)\s+end\b", every, re.M))
        for m in re.finditer(r"^struct\s+(\w+)\s*\n(.*?)^end\b", every, re.M | re.S):
            fields = re.findall(r"^\s*(\w+)::(\S+)\s*$", m.group(2), re.M)
            structs[m.group(1)] = fields
        described = set(self.d["structs"])

        def abi(t, const_char=False):
            t = t.strip()
            if t == "Cstring":
                return "ptr(const char)"
            m = re.fullmatch(r"(?:Ptr|Ref)\{(.*)\}", t)
            if m:
                return f"ptr({abi(m.group(1))})"
            m = re.fullmatch(r"NTuple\{(\d+),\s*(.*)\}", t)
            if m:
                return f"array({abi(m.group(2))},{m.group(1)})"
            if t in self.JULIA_SCALARS:
                return self.JULIA_SCALARS[t]
            if t in aliases:
                return abi(aliases[t])
            if t in structs or t in opaque:
                return f"struct:{t}"
            return f"?{t}"

        def matches(j, c):
            if j == "ptr(const char)":  # Cstring: only a const char *
                return c == "ptr(const char)"
            c = strip_const(c)
            if j == c:
                return True
            # Ptr{Cvoid}: also a callback (@cfunction gives one).
            return j == "ptr(void)" and c.startswith("ptr(fn(")

        def size_align(t):
            a = abi(t)
            if a.startswith("ptr("):
                return 8, 8
            m = re.fullmatch(r"NTuple\{(\d+),\s*(.*)\}", t)
            if m:
                s, al = size_align(m.group(2))
                return s * int(m.group(1)), al
            if a in self.SIZES:
                return self.SIZES[a], self.SIZES[a]
            if t in structs:
                lay = self.layout([size_align(ft) for _, ft in structs[t]])
                return lay[0], lay[1]
            raise ValueError(t)

        # ccalls.
        seen = {}
        for path, text in texts.items():
            for offset, args in self.calls(text, "ccall"):
                where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{text.count(chr(10), 0, offset) + 1}"
                m = re.fullmatch(r"@sym\(:(\w+)\)|Libdl\.dlsym\([^,]+,\s*:(\w+)\)|\(:(\w+),.*\)|:(\w+)", args[0]) if args else None
                name = next((g for g in m.groups() if g), None) if m else None
                if not name or not name.startswith("gpumem_"):
                    continue
                f = self.d["functions"].get(name)
                if f is None:
                    self.fail(binding, f"{where}: ccall of {name}, which is not in the description")
                    continue
                seen.setdefault(name, where)
                ret, tup, values = args[1], args[2], args[3:]
                if not (tup.startswith("(") and tup.endswith(")")):
                    self.fail(binding, f"{where}: the argument types of {name} are not a tuple")
                    continue
                inner = tup[1:-1].strip()
                types = self.split_args(inner)
                if len(types) == 1 and not inner.endswith(","):
                    self.fail(binding, f"{where}: ({inner}) is not a tuple; write ({inner},)")
                if not matches(abi(ret), f["returns"]["abi"]) or ret.startswith("Ref{"):
                    self.fail(binding, f"{where}: {name} returns {ret} ({abi(ret)}); the header has "
                                       f"{f['returns']['type']} ({f['returns']['abi']})")
                if len(types) != len(f["params"]):
                    self.fail(binding, f"{where}: {name} is given {len(types)} argument types; the header has "
                                       f"{len(f['params'])} parameters")
                    continue
                if len(values) != len(f["params"]):
                    self.fail(binding, f"{where}: {name} is passed {len(values)} values for {len(f['params'])} parameters")
                for t, p in zip(types, f["params"]):
                    if not matches(abi(t), p["abi"]):
                        self.fail(binding, f"{where}: {name} argument {p['name']} is {t} ({abi(t)}); the header has "
                                           f"{p['type']} ({p['abi']})")
                if args[0].startswith("@sym") and all(re.fullmatch(r"\w+", v) for v in values):
                    names = [p["name"] for p in f["params"]]
                    if values != names:
                        self.fail(binding, f"{where}: {name} passes ({', '.join(values)}); the header's parameters "
                                           f"are ({', '.join(names)})")
        self.coverage(binding, "function", seen, self.d["functions"])

        # Structs mirrored under their C names.
        mirrored = {n: f for n, f in structs.items() if n in described or n.startswith("gpumem_")}
        self.coverage(binding, "struct", set(mirrored) | (opaque & described), described)
        for n in opaque & described:
            if n not in self.opaque:
                self.fail(binding, f"struct {n} is opaque here but has fields in the headers")
        for n, fields in mirrored.items():
            try:
                lay = self.layout([size_align(t) for _, t in fields])
            except ValueError as e:
                self.fail(binding, f"struct {n}: no layout for the type {e}")
                lay = None
            self.compare_struct(binding, n, [(fn, f"{ft} ({abi(ft)})", lambda c, a=abi(ft): matches(a, c))
                                             for fn, ft in fields], lay)

        # Aliases of typedefs.
        for n, t in aliases.items():
            want = self.d["typedefs"].get(n)
            if want is None:
                self.fail(binding, f"alias {n} is not a typedef of the headers")
            elif not matches(abi(t), want["abi"]):
                self.fail(binding, f"alias {n} is {t} ({abi(t)}); the header has {want['type']} ({want['abi']})")

        # @cfunction stored in a Ref of a callback type.
        refs = dict(re.findall(r"^const\s+(\w+)\s*=\s*Ref\{(gpumem_\w+_fn)\}", every, re.M))
        for path, text in texts.items():
            for offset, args in self.calls(text, "@cfunction"):
                where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{text.count(chr(10), 0, offset) + 1}"
                m = re.search(r"(\w+)\[\]\s*=\s*$", text[:offset])
                if not m or m.group(1) not in refs:
                    continue
                typedef = self.d["typedefs"].get(refs[m.group(1)])
                if typedef is None:
                    continue
                tup = args[2].strip()[1:-1]
                got = f"ptr(fn({abi(args[1])};{','.join(abi(t) for t in self.split_args(tup))}))"
                if strip_const(typedef["abi"]) != got:
                    self.fail(binding, f"{where}: @cfunction for {refs[m.group(1)]} is {got}; the header has "
                                       f"{typedef['type']} ({typedef['abi']})")

        # Constants.
        consts = {}
        for n, v in re.findall(r"^const\s+(GPUMEM_\w+)\s*=\s*(.*?)\s*$", every, re.M):
            m = re.fullmatch(r"(?:(?:U?Int\d*|Csize_t)\()?\s*(-?(?:0x[0-9a-fA-F_]+|[0-9_]+))\s*\)?", v)
            if m:
                consts[n] = int(m.group(1).replace("_", ""), 0)
                if v.startswith("0x") and not v.startswith("0x") is False:
                    pass
            elif re.fullmatch(r'"[^"]*"', v):
                consts[n] = v[1:-1]
        required = [n for n in self.integer_constants if not n.startswith("GPUMEM_VERSION_")]
        self.check_constants(binding, consts, required)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--description", type=pathlib.Path, default=DESCRIPTION)
    p.add_argument("--python", type=pathlib.Path, default=ROOT / "bindings" / "python",
                   help="the directory holding the gpumem package")
    p.add_argument("--rust", type=pathlib.Path, default=ROOT / "bindings" / "rust" / "gpumem-sys" / "src" / "lib.rs")
    p.add_argument("--julia", type=pathlib.Path, default=ROOT / "bindings" / "julia" / "GPUMem" / "src")
    p.add_argument("--only", choices=["python", "rust", "julia"], action="append")
    args = p.parse_args(argv)
    checker = Checker(json.loads(args.description.read_text()))
    for binding in args.only or ["python", "rust", "julia"]:
        getattr(checker, f"check_{binding}")(getattr(args, binding))
    for problem in checker.problems:
        print(problem)
    f = checker.d["functions"]
    print(f"checked {', '.join(args.only or ['python', 'rust', 'julia'])} against {args.description.name}: "
          f"{len(f)} functions, {len(checker.d['structs'])} structs; {len(checker.problems)} problems")
    return 1 if checker.problems else 0


if __name__ == "__main__":
    sys.exit(main())
