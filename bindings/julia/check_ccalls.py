#!/usr/bin/env python3
"""Checks the Julia package GPUMem against the C headers and the version script, without Julia.

Every `ccall` of a gpumem function in the package's .jl files, every Julia struct that mirrors a C
struct (named as its C typedef), every Julia alias of a C typedef, every `@cfunction` stored for a
C callback type and every `GPUMEM_*` constant is checked:

- the function is exported (lib/gpumem.map) and declared in a header, and the ccall gives as many
  argument types, and passes as many values, as the prototype has parameters;
- each Julia type is translated to the C type it passes (`Cint` is `int`, `Csize_t` `size_t`,
  `Ptr{T}` and `Ref{T}` a pointer to T, `Cstring` `const char *`, a name of the package that is a C
  typedef or struct tag that type), and a generated C file, compiled with
  `cc -std=c99 -Wall -Werror -fsyntax-only`, requires each to be the header's type: through pointer
  initializations, which C allows only between compatible types; through `_Static_assert` on the
  size and every field offset of each mirrored struct and on each constant's value;
- Julia has no `const`: a Julia type matches a C type that has `const` at any level of its
  pointees once those are removed (`Ptr{Cvoid}` for `const void *`), since the qualifier promises
  something about the callee, not a different representation. Nothing else is relaxed: `char` is
  not `unsigned char`, `int8_t` is not `char`, and `Cstring`, which hands C a read-only string,
  matches only a `const char *`, never a `char *` that the callee writes;
- what Julia itself would refuse is refused: a tuple of one type without its comma (`(T)` is T),
  a `Ref` result of a ccall;
- a ccall through `@sym` is the whole body of a wrapper named after the function it calls,
  `gpumem_x(a, b) = ccall(@sym(:gpumem_x), R, (A, B), a, b)`, whose parameters and the values it
  passes are the header's parameter names in their order, so that arguments of one type passed in
  each other's place (dst and src) do not pass unnoticed;
- a callback argument, where a wrapper is called or a ccall passes one directly, is `X[]` for a
  `const X = Ref{typedef}(...)` of the parameter's own callback type, which `X[] = @cfunction(...)`
  sets (and that @cfunction is checked against the typedef);
- a constant has the header's value; one that a macro defines also the size and signedness of the
  macro's type (C compares `UINT64_MAX - 1` equal to `-2`), and an enum value is an `Int32` or a
  `UInt32`, as the signatures that carry it.

Where a function is called is recognized from the first argument of `ccall`: `@sym(:name)` (the
package's cached `dlsym`), `Libdl.dlsym(handle, :name)`, or the static `(:name, lib)`; a ccall of a
symbol not named `gpumem_*` (the Julia runtime's) is not gpumem's and is skipped. Each problem is
reported as `file:line: message`; the last line says what was checked. Exit status 0 when all is
well, 1 when something does not match, 2 when the check itself cannot run.
"""
import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent

SCALARS = {
    "Cchar": "char",
    "Cuchar": "unsigned char",
    "Cshort": "short",
    "Cushort": "unsigned short",
    "Cint": "int",
    "Cuint": "unsigned int",
    "Clong": "long",
    "Culong": "unsigned long",
    "Clonglong": "long long",
    "Culonglong": "unsigned long long",
    "Cintmax_t": "intmax_t",
    "Cuintmax_t": "uintmax_t",
    "Csize_t": "size_t",
    "Cptrdiff_t": "ptrdiff_t",
    "Cfloat": "float",
    "Cdouble": "double",
    "Float32": "float",
    "Float64": "double",
    "Bool": "bool",
    "Int8": "int8_t",
    "UInt8": "uint8_t",
    "Int16": "int16_t",
    "UInt16": "uint16_t",
    "Int32": "int32_t",
    "UInt32": "uint32_t",
    "Int64": "int64_t",
    "UInt64": "uint64_t",
    "Int": "intptr_t",
    "UInt": "uintptr_t",
}
VOID = {"Cvoid", "Nothing"}
POINTERS = {"Ptr", "Ref"}
# The integer types a constant may be written in: (bytes, signed).
INT_TYPES = {
    "Int8": (1, True),
    "UInt8": (1, False),
    "Int16": (2, True),
    "UInt16": (2, False),
    "Int32": (4, True),
    "Cint": (4, True),
    "UInt32": (4, False),
    "Cuint": (4, False),
    "Int64": (8, True),
    "Int": (8, True),
    "UInt64": (8, False),
    "UInt": (8, False),
    "Csize_t": (8, False),
}
INT_RANGES = {
    name: ((-(2 ** (8 * size - 1)), 2 ** (8 * size - 1) - 1) if signed else (0, 2 ** (8 * size) - 1))
    for name, (size, signed) in INT_TYPES.items()
}
CALLING_CONVENTIONS = {"cdecl", "stdcall", "fastcall", "thiscall", "llvmcall"}


class CheckError(Exception):
    """Something in the package cannot be checked or translated; the message says what."""


## C headers


def _normalize(ctype):
    """A C type written one way: single spaces, `*` spaced, `const` kept where it was."""
    ctype = re.sub(r"\*", " * ", ctype)
    return " ".join(ctype.split())


def strip_const(ctype):
    """The type with every `const` removed (what a Julia type can say)."""
    return _normalize(re.sub(r"\bconst\b", " ", ctype))


def _split_decl(decl):
    """'const void* src' -> ('const void *', 'src', None); 'char name[256]' -> ('char', 'name', 256)."""
    decl = " ".join(decl.split())
    m = re.fullmatch(r"(?P<type>.*?[\s*])(?P<name>[A-Za-z_]\w*)\s*(?:\[\s*(?P<len>\d+)\s*\])?", decl)
    if not m or not m.group("type").strip():
        return _normalize(decl), None, None  # no name: the whole declaration is the type
    return _normalize(m.group("type")), m.group("name"), int(m.group("len")) if m.group("len") else None


def _params(text):
    text = " ".join(text.split())
    if text in ("", "void"):
        return []
    return [_split_decl(p) for p in text.split(",")]


class Headers:
    """What the headers declare: prototypes, callback types, structs, typedefs, macros."""

    def __init__(self, include_dirs):
        self.files = {}
        for directory in include_dirs:
            for path in sorted(pathlib.Path(directory, "gpumem").glob("*.h")):
                self.files.setdefault(path.name, path)
        if "gpumem_version.h" not in self.files:
            raise CheckError(
                "gpumem_version.h is not in any include directory: pass the build's generated include "
                "directory too (-I build/dev/include)"
            )
        if "core.h" not in self.files:
            raise CheckError("include/gpumem/core.h is not in any include directory (-I include)")
        self.prototypes = {}  # name -> (result type, [(type, name, len)])
        self.callbacks = {}  # function pointer typedef -> (result type, params)
        self.structs = {}  # typedef -> [(type, name, len)]
        self.opaque = set()  # typedefs of structs whose fields are not shown
        self.pointer_typedefs = {}  # typedef -> struct tag it points to
        self.scalar_typedefs = {}  # typedef -> type
        self.tags = set()  # struct tags
        self.macros = {}
        for path in self.files.values():
            self._read(path.read_text())
        self.typedefs = (
            set(self.callbacks)
            | set(self.structs)
            | self.opaque
            | set(self.pointer_typedefs)
            | set(self.scalar_typedefs)
        )

    def _read(self, text):
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        text = re.sub(r"//[^\n]*", " ", text)
        text = text.replace("\\\n", " ")
        for m in re.finditer(r"^\s*#\s*define\s+(\w+)\b(?!\()\s*(.*)$", text, re.M):
            self.macros[m.group(1)] = m.group(2).strip()
        text = re.sub(r"^\s*#.*$", " ", text, flags=re.M)
        for m in re.finditer(r"GPUMEM_API\s+([^;{}()]+?)\s*\b(gpumem_\w+)\s*\(([^)]*)\)\s*;", text):
            self.prototypes[m.group(2)] = (_normalize(m.group(1)), _params(m.group(3)))
        for m in re.finditer(r"typedef\s+([^;{}()]+?)\s*\(\s*\*\s*(\w+)\s*\)\s*\(([^)]*)\)\s*;", text):
            self.callbacks[m.group(2)] = (_normalize(m.group(1)), _params(m.group(3)))
        for m in re.finditer(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
            self.tags.add(m.group(1))
            fields = []
            for decl in m.group(2).split(";"):
                if decl.strip():
                    if "," in decl:
                        raise CheckError(f"cannot read the declaration {decl.strip()!r} of {m.group(3)}")
                    fields.append(_split_decl(decl))
            self.structs[m.group(3)] = fields
        for m in re.finditer(r"typedef\s+struct\s+(\w+)\s*(\*?)\s*(\w+)\s*;", text):
            self.tags.add(m.group(1))
            if m.group(2):
                self.pointer_typedefs[m.group(3)] = m.group(1)
            else:
                self.opaque.add(m.group(3))
        for m in re.finditer(r"typedef\s+((?:unsigned\s+|signed\s+)?\w+)\s+(\w+)\s*;", text):
            if m.group(1) != "struct":
                self.scalar_typedefs[m.group(2)] = m.group(1)

    def is_pointer_macro(self, name):
        body = self.macros.get(name, "")
        m = re.match(r"\(\s*\(\s*(\w+)\s*(\*)?\s*\)", body)
        return bool(m) and (m.group(2) is not None or m.group(1) in self.pointer_typedefs)


def exported_symbols(map_path):
    text = re.sub(r"/\*.*?\*/", " ", pathlib.Path(map_path).read_text(), flags=re.S)
    return set(re.findall(r"^\s*(\w+)\s*;", text, re.M)) - {"local"}


## Julia source


def blank_julia(text):
    """The text with comments and the insides of string and character literals replaced by spaces
    (newlines kept), so that what is left is code at the same offsets."""
    out = list(text)
    n = len(text)

    def blank(start, end):
        for k in range(start, min(end, n)):
            if out[k] != "\n":
                out[k] = " "

    # Each context: ["code", paren depth or None] or ["string", delimiter].
    stack = [["code", None]]
    i = 0
    while i < n:
        kind = stack[-1][0]
        c = text[i]
        in_string = any(ctx[0] == "string" for ctx in stack)
        if kind == "code":
            if text.startswith("#=", i):
                depth, j = 1, i + 2
                while j < n and depth:
                    if text.startswith("#=", j):
                        depth, j = depth + 1, j + 2
                    elif text.startswith("=#", j):
                        depth, j = depth - 1, j + 2
                    else:
                        j += 1
                blank(i, j)
                i = j
                continue
            if c == "#":
                j = text.find("\n", i)
                j = n if j < 0 else j
                blank(i, j)
                i = j
                continue
            if in_string:
                blank(i, i + 1)  # an interpolation is part of its string
            if text.startswith('"""', i):
                stack.append(["string", '"""'])
                i += 3
                continue
            if c in '"`':
                stack.append(["string", c])
                i += 1
                continue
            if c == "'" and _starts_char_literal(text, i):
                j = text.find("'", i + 3) if text.startswith("\\", i + 1) else i + 2
                if j < 0 or j >= n or text[j] != "'":
                    raise CheckError(f"cannot read the character literal at offset {i}")
                blank(i + 1, j)
                i = j + 1
                continue
            if stack[-1][1] is not None:  # inside $( ... ) of a string
                if c == "(":
                    stack[-1][1] += 1
                elif c == ")":
                    stack[-1][1] -= 1
                    if stack[-1][1] == 0:
                        stack.pop()
            i += 1
        else:
            delim = stack[-1][1]
            if c == "\\":
                blank(i, i + 2)
                i += 2
                continue
            if text.startswith(delim, i):
                stack.pop()
                if any(ctx[0] == "string" for ctx in stack):
                    blank(i, i + len(delim))
                i += len(delim)
                continue
            if c == "$" and text.startswith("(", i + 1):
                blank(i, i + 2)
                stack.append(["code", 1])
                i += 2
                continue
            blank(i, i + 1)
            i += 1
    return "".join(out)


def _wrapper_of(code, start, close_at):
    """(name, [parameter names]) when the ccall from `start` to `close_at` is the whole right side
    of a short-form method definition `name(a, b) = ccall(...)`, else None."""
    m = re.search(r"(?:^|\n)[ \t]*(\w+)\s*\(([^()]*)\)\s*=\s*\Z", code[:start])
    if not m:
        return None
    rest = code[close_at + 1 :]
    end = rest.find("\n")
    if rest[: len(rest) if end < 0 else end].strip():
        return None
    params = [p for p in split_top(m.group(2)) if p]
    return m.group(1), [re.match(r"\w*", p).group(0) for p in params]


def _starts_char_literal(text, i):
    # After a name, a closing bracket, a quote or a dot, `'` is the adjoint operator.
    return i == 0 or not (text[i - 1].isalnum() or text[i - 1] in "_)]}'.")


def _matching_paren(code, start):
    """The index of the bracket closing the one at `start`."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    for k in range(start, len(code)):
        c = code[k]
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                break
            if not stack:
                return k
    raise CheckError("unbalanced brackets")


def _top_comma(code, start, end):
    """The offset from `start` of the first comma outside brackets before `end`, or end - start."""
    depth = 0
    for k in range(start, end):
        c = code[k]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            return k - start
    return end - start


def split_top(text):
    """Splits at commas outside brackets."""
    parts, depth, current = [], 0, []
    for c in text:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(c)
    parts.append("".join(current))
    return [" ".join(p.split()) for p in parts]


def tuple_items(text):
    """The items of a literal tuple `(A, B)`, `(A,)` or `()`; `(A)` is A in brackets, which Julia
    refuses where a tuple of types is needed."""
    items = split_top(text[1:-1])
    if items == [""]:
        return []
    if items[-1] == "":
        return items[:-1]
    if len(items) == 1:
        raise CheckError(f"`{text}` is not a tuple: write `({items[0]},)`")
    return items


def parse_julia_type(text):
    """A Julia type expression as ('name', name, [params]) or ('int', value)."""
    tokens = re.findall(r"[A-Za-z_][\w.]*|\d+|[{},]|\S", text)
    pos = 0

    def expect(tok):
        nonlocal pos
        if pos >= len(tokens) or tokens[pos] != tok:
            raise CheckError(f"cannot read the type {text!r}")
        pos += 1

    def parse():
        nonlocal pos
        if pos >= len(tokens):
            raise CheckError(f"cannot read the type {text!r}")
        tok = tokens[pos]
        pos += 1
        if tok.isdigit():
            return ("int", int(tok))
        if not re.fullmatch(r"[A-Za-z_][\w.]*", tok):
            raise CheckError(f"cannot read the type {text!r}")
        name = re.sub(r"^(?:Base|Core)\.", "", tok)
        params = []
        if pos < len(tokens) and tokens[pos] == "{":
            pos += 1
            while True:
                params.append(parse())
                if pos < len(tokens) and tokens[pos] == ",":
                    pos += 1
                    continue
                expect("}")
                break
        return ("name", name, params)

    tree = parse()
    if pos != len(tokens):
        raise CheckError(f"cannot read the type {text!r}")
    return tree


class JuliaType:
    """A Julia type as C sees it: `ctype` without const, an array length for NTuple fields, and
    whether it is Cstring (a read-only string)."""

    def __init__(self, ctype, length=None, cstring=False):
        self.ctype, self.length, self.cstring = ctype, length, cstring

    def declare(self, name):
        """A C declaration of `name` with this type."""
        if self.length is not None:
            return f"{self.ctype} {name}[{self.length}]"
        return f"{self.ctype} {name}"

    def pointer_to(self, name):
        """A C declaration of `name` as a pointer to this type."""
        if self.length is not None:
            return f"{self.ctype} (*{name})[{self.length}]"
        return f"{self.ctype} *{name}"

    def describe(self):
        return f"{self.ctype}[{self.length}]" if self.length is not None else self.ctype

    def pointer_type(self):
        """The C type "pointer to this type", for a cast."""
        if self.length is not None:
            return f"{self.ctype} (*)[{self.length}]"
        return f"{self.ctype} *"


class Definition:
    def __init__(self, path, line, **kw):
        self.path, self.line = path, line
        self.__dict__.update(kw)


class Package:
    """What the package's .jl files define and call."""

    def __init__(self, package_dir):
        self.files = sorted(pathlib.Path(package_dir).rglob("*.jl"))
        if not self.files:
            raise CheckError(f"no .jl files under {package_dir}")
        self.structs = {}  # name -> Definition(mutable, fields=[(name, type text, line)], body_error)
        self.consts = {}  # name -> Definition(rhs)
        self.ccalls = []  # Definition(spec, args, wrapper=(name, [parameters]) or None)
        self.cfunctions = []  # Definition(target, args)
        self.calls = []  # calls of functions named gpumem_*: Definition(name, args)
        self.errors = []
        for path in self.files:
            self._read(path)

    def _error(self, path, line, message):
        self.errors.append((path, line, message))

    def _read(self, path):
        text = path.read_text()
        try:
            code = blank_julia(text)
        except CheckError as e:
            self._error(path, 1, str(e))
            return
        starts = [0] + [m.end() for m in re.finditer(r"\n", code)]

        def line_of(offset):
            lo, hi = 0, len(starts) - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if starts[mid] <= offset:
                    lo = mid
                else:
                    hi = mid - 1
            return lo + 1

        lines = code.split("\n")
        for index, line in enumerate(lines):
            m = re.match(r"^\s*(mutable\s+)?struct\s+(\w+)\b(.*)$", line)
            if m:
                self._read_struct(path, lines, index, m)
            m = re.match(r"^\s*const\s+(\w+)\s*=\s*(.*?)\s*$", line)
            if m:
                self.consts[m.group(1)] = Definition(path, index + 1, rhs=m.group(2))
        for m in re.finditer(r"@ccall\b", code):
            self._error(path, line_of(m.start()), "@ccall is not checked: write ccall(@sym(:name), ...)")
        for m in re.finditer(r"(?<![\w.@])ccall\s*\(", code):
            open_at = m.end() - 1
            try:
                close_at = _matching_paren(code, open_at)
            except CheckError as e:
                self._error(path, line_of(m.start()), f"ccall: {e}")
                continue
            args = split_top(code[open_at + 1 : close_at])
            # The function's name may be a string, which blanking removed: read it from the source.
            spec = " ".join(text[open_at + 1 : open_at + 1 + _top_comma(code, open_at + 1, close_at)].split())
            wrapper = _wrapper_of(code, m.start(), close_at)
            self.ccalls.append(Definition(path, line_of(m.start()), args=args, spec=spec, wrapper=wrapper))
        for m in re.finditer(r"(?<![\w:@])(gpumem_\w+)\s*\(", code):
            open_at = m.end() - 1
            try:
                close_at = _matching_paren(code, open_at)
            except CheckError as e:
                self._error(path, line_of(m.start()), f"{m.group(1)}: {e}")
                continue
            # A definition, not a call: `name(...) = ...` or `function name(...)`.
            if re.match(r"\s*=(?!=)", code[close_at + 1 :]) or re.search(r"\bfunction\s+\Z", code[: m.start()]):
                continue
            args = split_top(code[open_at + 1 : close_at])
            if args == [""]:
                args = []
            self.calls.append(Definition(path, line_of(m.start()), name=m.group(1), args=args))
        stored = set()
        for m in re.finditer(r"(\w+)\s*\[\s*\]\s*=\s*(@cfunction)\s*\(", code):
            stored.add(m.start(2))
            open_at = m.end() - 1
            try:
                args = split_top(code[open_at + 1 : _matching_paren(code, open_at)])
            except CheckError as e:
                self._error(path, line_of(m.start()), f"@cfunction: {e}")
                continue
            self.cfunctions.append(Definition(path, line_of(m.start()), target=m.group(1), args=args))
        for m in re.finditer(r"@cfunction\b", code):
            if m.start() not in stored:
                self._error(
                    path,
                    line_of(m.start()),
                    "@cfunction is not checked unless stored as `NAME[] = @cfunction(f, R, (A...))` in a "
                    "`const NAME = Ref{callback_typedef}(C_NULL)`",
                )

    def _read_struct(self, path, lines, index, m):
        name, rest = m.group(2), m.group(3)
        if re.search(r"\bend\s*$", rest):
            self.structs[name] = Definition(path, index + 1, mutable=bool(m.group(1)), fields=[], body_error=None)
            return
        fields, body_error = [], None
        for k in range(index + 1, len(lines)):
            text = lines[k]
            if re.match(r"^\s*end\b", text):
                break
            if not text.strip() or re.fullmatch(r'\s*"+\s*"+\s*', text):
                continue
            f = re.match(r"^\s*(\w+)\s*::\s*(.+?)\s*$", text)
            if f:
                fields.append((f.group(1), f.group(2), k + 1))
            elif body_error is None:
                body_error = (k + 1, f"struct {name}: cannot read {text.strip()!r} as a field `name::Type`")
        self.structs[name] = Definition(path, index + 1, mutable=bool(m.group(1)), fields=fields, body_error=body_error)


## The check


class Checker:
    def __init__(self, package, headers, exported, map_path):
        self.pkg, self.h, self.exported, self.map_path = package, headers, exported, map_path
        self.errors = list(package.errors)
        self.c_lines = []
        self.records = {}  # generated line -> (path, line, message, show the compiler's words)
        self.groups = {}  # generated line -> group, to drop errors that follow from others
        self.counts = {"ccalls": 0, "structs": 0, "constants": 0, "callbacks": 0}
        self.failed_groups = set()  # groups with a mismatch found before compiling
        self.called = set()
        self.serial = 0
        self.wrappers = {}  # wrapper name -> the header's parameters
        self.cfunction_targets = {cf.target for cf in package.cfunctions}

    def error(self, path, line, message):
        self.errors.append((path, line, message))

    def emit(self, text, where=None, message=None, compiler=True, group=None, derived=False):
        self.c_lines.append(text)
        number = len(self.c_lines)
        if where is not None:
            self.records[number] = (where[0], where[1], message, compiler)
            if group is not None:
                self.groups[number] = (group, derived)

    def fresh(self, stem):
        self.serial += 1
        return f"gpumem_check_{self.serial}_{stem}"

    # Types

    def julia_type(self, text, seen=()):
        tree = parse_julia_type(text)
        return self._map(tree, text, seen)

    def _map(self, tree, text, seen):
        if tree[0] != "name":
            raise CheckError(f"{text!r} is not a type")
        _, name, params = tree
        if name in VOID and not params:
            return JuliaType("void")
        if name == "Cstring" and not params:
            return JuliaType("char *", cstring=True)
        if name in SCALARS and not params:
            return JuliaType(SCALARS[name])
        if name in POINTERS:
            if len(params) != 1:
                raise CheckError(f"{text!r}: {name} takes one parameter")
            inner = self._map(params[0], text, seen)
            if inner.length is not None:
                raise CheckError(f"{text!r}: a pointer to an NTuple has no C type here")
            return JuliaType(inner.ctype + " *")
        if name == "NTuple":
            if len(params) != 2 or params[0][0] != "int":
                raise CheckError(f"{text!r}: write NTuple{{N,T}} with a literal N")
            inner = self._map(params[1], text, seen)
            if inner.length is not None or inner.ctype == "void":
                raise CheckError(f"{text!r} has no C type")
            return JuliaType(inner.ctype, length=params[0][1])
        if params:
            raise CheckError(f"{text!r} has no C type")
        if name in self.h.typedefs:
            if name not in self.pkg.structs and name not in self.pkg.consts:
                raise CheckError(f"{name} is a C type, but the package does not define it")
            return JuliaType(name)
        if name in self.h.tags:
            if name not in self.pkg.structs:
                raise CheckError(f"{name} is a C struct tag, but the package does not define it")
            return JuliaType(f"struct {name}")
        alias = self.pkg.consts.get(name)
        if alias is not None and name not in seen:
            return self.julia_type(alias.rhs, seen + (name,))
        raise CheckError(f"the Julia type {name} has no C equivalent known to the checker")

    def compare(self, where, jtype, ctype, what, group):
        """Requires the Julia type to be the C type, const aside; one generated line."""
        if jtype.cstring and _normalize(ctype).replace(" ", "") not in ("constchar*", "charconst*"):
            self.error(*where, f"{what}: Cstring passes a read-only string, but the header's type is `{ctype}`")
            return
        bare = strip_const(ctype)
        v = self.fresh("type")
        shown = "Cstring (const char *)" if jtype.cstring else f"`{jtype.ctype}`"
        self.emit(
            f"  {bare} *{v} = ({jtype.pointer_type()})0; (void){v};",
            where,
            f"{what}: the Julia type is {shown}, the header's is `{ctype}`",
            compiler=False,
            group=group,
        )

    # ccalls

    def check_ccall(self, call):
        where = (call.path, call.line)
        args = list(call.args)
        if len(args) < 3:
            self.error(*where, "ccall needs a function, a result type and a tuple of argument types")
            return
        spec = call.spec
        name = None
        for pattern in (
            r"@sym\s*\(\s*:(\w+)\s*\)",
            r"(?:Libdl\.)?dlsym\s*\(.*,\s*:(\w+)\s*\)",
            r"\(\s*:(\w+)\s*,.*\)",
            r'\(\s*"(\w+)"\s*,.*\)',
            r":(\w+)",
            r'"(\w+)"',
        ):
            m = re.fullmatch(pattern, spec)
            if m:
                name = m.group(1)
                break
        if name is None:
            self.error(*where, f"cannot tell which function `ccall({spec}, ...)` calls: write ccall(@sym(:name), ...)")
            return
        if not name.startswith("gpumem_"):
            return  # the Julia runtime's or the C library's, not gpumem's
        self.counts["ccalls"] += 1
        self.called.add(name)
        if args[1] in CALLING_CONVENTIONS:
            args.pop(1)
        result, types_text, values = args[1], args[2], args[3:]
        if name not in self.exported:
            self.error(*where, f"{name} is not exported by libgpumem (it is not in {self.map_path})")
            return
        if name not in self.h.prototypes:
            self.error(*where, f"{name} is in {self.map_path}, but no header declares it")
            return
        if not (types_text.startswith("(") and types_text.endswith(")")):
            self.error(*where, f"{name}: the argument types must be a literal tuple, not {types_text!r}")
            return
        try:
            types = tuple_items(types_text)
        except CheckError as e:
            self.error(*where, f"{name}: {e}")
            return
        c_result, params = self.h.prototypes[name]
        if len(types) != len(params):
            self.error(
                *where,
                f"{name} takes {len(params)} argument{'s' if len(params) != 1 else ''} in its header, "
                f"but the ccall gives {len(types)} argument type{'s' if len(types) != 1 else ''}",
            )
            return
        if len(values) != len(types):
            self.error(*where, f"{name}: the ccall gives {len(types)} argument types but passes {len(values)} values")
            return
        try:
            returns_ref = parse_julia_type(result)[:2] == ("name", "Ref")
        except CheckError:
            returns_ref = False  # check_signature says why it cannot be read
        if returns_ref:
            self.error(*where, f"{name}: the result is `{result}`, which Julia refuses for a ccall: write Ptr")
            return
        self.check_names(call, name, params, values)
        self.check_signature(where, name, name, c_result, params, result, types)

    def check_names(self, call, name, params, values):
        """Ties a wrapper to what it calls: `name(a, b) = ccall(@sym(:name), R, (A, B), a, b)`, with
        a, b the header's parameter names in order, so that a wrapper calling another function or
        passing two arguments of one type in each other's place does not pass. A ccall that is not
        a wrapper's whole body passes callbacks as `X[]` from a `const X = Ref{typedef}(...)`."""
        where = (call.path, call.line)
        c_names = [p[1] or f"<parameter {k}>" for k, p in enumerate(params, start=1)]
        if call.wrapper is None:
            if call.spec.startswith("@sym"):
                self.error(
                    *where,
                    f"{name}: a ccall through @sym is the whole body of its wrapper, "
                    f"`{name}({', '.join(c_names)}) = ccall(...)`",
                )
            for k, ((ctype, _, _), value) in enumerate(zip(params, values), start=1):
                if strip_const(ctype) in self.h.callbacks:
                    self.check_callback_value(
                        where, f"{name}: argument {k} ({c_names[k - 1]})", value, strip_const(ctype)
                    )
            return
        wrapper, wrapper_params = call.wrapper
        if wrapper != name:
            self.error(*where, f"the wrapper {wrapper} calls {name}: name it {name}, after the function it calls")
        if wrapper_params != c_names:
            self.error(
                *where,
                f"{name}: the wrapper takes ({', '.join(wrapper_params)}); "
                f"write the header's parameters, ({', '.join(c_names)})",
            )
        if [" ".join(v.split()) for v in values] != c_names:
            self.error(
                *where,
                f"{name}: the ccall passes ({', '.join(values)}); pass the header's parameters in their "
                f"order, ({', '.join(c_names)})",
            )
        self.wrappers[name] = params

    def check_callback_value(self, where, what, value, typedef):
        """A value passed for a callback parameter: `X[]` for a `const X = Ref{typedef}(...)` that an
        `X[] = @cfunction(...)` sets, so that the @cfunction checked against `typedef` is the one passed."""
        m = re.fullmatch(r"(\w+)\s*\[\s*\]", " ".join(value.split()))
        holder = self.pkg.consts.get(m.group(1)) if m else None
        held = re.fullmatch(r"Ref\{(\w+)\}\(.*\)", holder.rhs) if holder else None
        if not held:
            self.error(
                *where,
                f"{what}: pass a {typedef} as `X[]`, for a `const X = Ref{{{typedef}}}(C_NULL)` that "
                f"`X[] = @cfunction(...)` sets, not `{value}`",
            )
        elif held.group(1) != typedef:
            self.error(
                *where, f"{what}: {m.group(1)} holds a {held.group(1)}, but the header's parameter is a {typedef}"
            )
        elif m.group(1) not in self.cfunction_targets:
            self.error(*where, f"{what}: no `{m.group(1)}[] = @cfunction(...)` sets {m.group(1)}")

    def check_calls(self):
        """Calls of the wrappers: a callback argument is `X[]` of the callback's own type."""
        for call in self.pkg.calls:
            params = self.wrappers.get(call.name)
            if params is None:
                continue
            where = (call.path, call.line)
            callbacks = [k for k, p in enumerate(params) if strip_const(p[0]) in self.h.callbacks]
            if not callbacks:
                continue
            if len(call.args) != len(params) or any(a.endswith("...") for a in call.args):
                self.error(
                    *where,
                    f"{call.name}: a call passes its {len(params)} arguments one by one, so that its "
                    "callbacks can be checked",
                )
                continue
            for k in callbacks:
                ctype, pname, _ = params[k]
                self.check_callback_value(
                    where, f"{call.name}: argument {k + 1} ({pname})", call.args[k], strip_const(ctype)
                )

    def check_signature(self, where, name, target, c_result, params, result, types):
        """Per-argument checks of a Julia signature against a C one. `target` is the C expression
        of the function (or a null callback of its type) that ties the parsed prototype to the
        compiler's own."""
        group = self.fresh("sig")
        function = self.fresh(name)
        self.emit(f"void {function}(void) {{")
        param_list = ", ".join(t for t, _, _ in params) or "void"
        self.emit(
            f"  {c_result} (*{function}_tie)({param_list}) = {target}; (void){function}_tie;",
            where,
            f"the checker misread the header's declaration of {name}",
        )
        try:
            jresult = self.julia_type(result)
        except CheckError as e:
            self.error(*where, f"{name}: result: {e}")
            jresult = None
        if jresult is not None:
            if (jresult.ctype == "void") != (strip_const(c_result) == "void"):
                self.error(*where, f"{name}: the result is `{c_result}` in the header, but `{result}` here")
            elif jresult.ctype != "void":
                self.compare(where, jresult, c_result, f"{name}: result", group)
        for index, ((ctype, pname, _), jtext) in enumerate(zip(params, types), start=1):
            what = f"{name}: argument {index}" + (f" ({pname})" if pname else "")
            try:
                jtype = self.julia_type(jtext)
            except CheckError as e:
                self.error(*where, f"{what}: {e}")
                continue
            if jtype.ctype == "void":
                self.error(*where, f"{what}: {jtext} cannot be passed")
                continue
            self.compare(where, jtype, ctype, what, group)
        self.emit("}")

    # Callbacks

    def check_cfunction(self, cf):
        where = (cf.path, cf.line)
        holder = self.pkg.consts.get(cf.target)
        m = re.fullmatch(r"Ref\{(\w+)\}\(.*\)", holder.rhs) if holder else None
        if not m or m.group(1) not in self.h.callbacks:
            self.error(
                *where,
                f"@cfunction stored in {cf.target}, which is not a `const {cf.target} = Ref{{callback_typedef}}(...)` "
                "of a C callback type",
            )
            return
        typedef = m.group(1)
        if len(cf.args) != 3 or not (cf.args[2].startswith("(") and cf.args[2].endswith(")")):
            self.error(*where, f"{typedef}: write @cfunction(f, Result, (Types...))")
            return
        try:
            types = tuple_items(cf.args[2])
        except CheckError as e:
            self.error(*where, f"{typedef}: {e}")
            return
        c_result, params = self.h.callbacks[typedef]
        self.counts["callbacks"] += 1
        if len(types) != len(params):
            self.error(
                *where, f"{typedef} takes {len(params)} arguments in its header, but the @cfunction {len(types)}"
            )
            return
        self.check_signature(where, typedef, f"({typedef})0", c_result, params, cf.args[1], types)

    # Structs, aliases, constants

    def check_struct(self, name, d):
        where = (d.path, d.line)
        if name in self.h.opaque or (name in self.h.tags and name not in self.h.structs):
            if d.fields or d.body_error:
                self.error(*where, f"{name} is opaque in the headers: declare it as `mutable struct {name} end`")
            return
        if name not in self.h.structs:
            if name.startswith("gpumem_"):
                self.error(*where, f"struct {name} has no counterpart in the headers")
            return
        self.counts["structs"] += 1
        if d.mutable:
            self.error(*where, f"{name} mirrors a C struct: make it an immutable `struct`, laid out as C's")
            return
        if d.body_error:
            self.error(d.path, *d.body_error)
            return
        c_fields = self.h.structs[name]
        for k, (c_field, j_field) in enumerate(zip(c_fields, d.fields), start=1):
            if c_field[1] != j_field[0]:
                self.error(
                    d.path, j_field[2], f"{name}: field {k} is `{j_field[0]}` here, `{c_field[1]}` in the header"
                )
                return
        if len(d.fields) != len(c_fields):
            missing = [f[1] for f in c_fields[len(d.fields) :]] or [f[0] for f in d.fields[len(c_fields) :]]
            self.error(
                *where,
                f"{name} has {len(d.fields)} fields here and {len(c_fields)} in the header "
                f"({'missing' if len(d.fields) < len(c_fields) else 'extra'}: {', '.join(missing)})",
            )
            return
        mapped = []
        for field_name, type_text, line in d.fields:
            try:
                mapped.append(self.julia_type(type_text))
            except CheckError as e:
                self.error(d.path, line, f"{name}.{field_name}: {e}")
                return
        group = self.fresh("struct")
        mirror = self.fresh(name)
        self.emit(f"struct {mirror} {{")
        for (field_name, type_text, line), jtype in zip(d.fields, mapped):
            self.emit(f"  {jtype.declare(field_name)};", (d.path, line), f"{name}.{field_name}: `{type_text}`")
        self.emit("};")
        self.emit(
            f'_Static_assert(sizeof(struct {mirror}) == sizeof({name}), "size");',
            where,
            f"{name}: the Julia struct's size differs from the header's",
            compiler=False,
            group=group,
            derived=True,
        )
        for (field_name, type_text, line) in d.fields:
            self.emit(
                f'_Static_assert(offsetof(struct {mirror}, {field_name}) == offsetof({name}, {field_name}), "offset");',
                (d.path, line),
                f"{name}.{field_name}: its offset differs from the header's",
                compiler=False,
                group=group,
                derived=True,
            )
        function = self.fresh("fields")
        self.emit(f"void {function}({name} *s) {{")
        for (c_type, c_name, c_len), (field_name, type_text, line), jtype in zip(c_fields, d.fields, mapped):
            header = JuliaType(c_type, c_len)
            v = self.fresh("member")
            self.emit(
                f"  {header.pointer_to(v)} = &s->{c_name}; (void){v};",
                (d.path, line),
                f"the checker misread the header's field {name}.{c_name}",
            )
            if jtype.length != c_len:
                self.failed_groups.add(group)
                self.error(
                    d.path,
                    line,
                    f"{name}.{field_name}: `{type_text}` is "
                    + (f"an array of {jtype.length}" if jtype.length else "not an array")
                    + (f"; the header's is an array of {c_len}" if c_len else "; the header's is not an array"),
                )
                continue
            if jtype.cstring and "const" not in c_type:
                self.failed_groups.add(group)
                self.error(d.path, line, f"{name}.{field_name}: Cstring, but the header's type is `{c_type}`")
                continue
            bare = JuliaType(strip_const(c_type), c_len)
            v = self.fresh("field")
            self.emit(
                f"  {bare.pointer_to(v)} = ({jtype.pointer_type()})0; (void){v};",
                (d.path, line),
                f"{name}.{field_name}: the Julia type `{type_text}` is `{jtype.describe()}`, "
                f"the header's is `{header.describe()}`",
                compiler=False,
                group=group,
            )
        self.emit("}")

    def check_alias(self, name, d):
        where = (d.path, d.line)
        if name in self.h.structs:
            self.error(*where, f"{name} is a struct in the headers: mirror it as a `struct`, not an alias")
            return
        if name in self.h.callbacks:
            if " ".join(d.rhs.split()) not in ("Ptr{Cvoid}", "Ptr{Nothing}"):
                self.error(*where, f"{name} is a C function pointer: in Julia it is `Ptr{{Cvoid}}`, not {d.rhs}")
            return
        try:
            jtype = self.julia_type(d.rhs, (name,))
        except CheckError as e:
            self.error(*where, f"{name}: {e}")
            return
        v = self.fresh("alias")
        self.emit(
            f"{name} *{v} = ({jtype.pointer_type()})0;",
            where,
            f"{name} is `{jtype.ctype}` here, not the header's type",
            compiler=False,
        )

    def check_constant(self, name, d):
        """The value, and the type: a macro's size and signedness are the Julia type's (C compares
        `UINT64_MAX - 1` equal to `-2` once converted); an enum value is an `int` in C, which the
        signatures carry as a 32-bit integer of the signedness they need."""
        where = (d.path, d.line)
        self.counts["constants"] += 1
        try:
            value, declared = julia_integer(d.rhs)
        except CheckError as e:
            self.error(*where, f"{name}: {e}")
            return
        size, signed = INT_TYPES[declared]
        if name in self.h.macros:
            c_name = f"((uintptr_t)({name}))" if self.h.is_pointer_macro(name) else f"({name})"
            self.emit(
                f"_Static_assert(sizeof{c_name} == {size} && "
                f"(((__typeof__{c_name})-1 < (__typeof__{c_name})0) == {int(signed)}), \"{name}\");",
                where,
                f"{name} is `{declared}` here ({size} bytes, {'signed' if signed else 'unsigned'}), "
                "not the size and signedness of the header's",
                compiler=False,
            )
        else:
            c_name = f"({name})"
            if size != 4:
                self.error(
                    *where,
                    f"{name} is `{declared}` here, but an enum value of the headers: write Int32(...) or "
                    "UInt32(...), as the signatures that take it",
                )
        if value < 0:
            literal = f"(-{-value}LL)"
        elif value > 2**63 - 1:
            literal = f"{value}ULL"
        else:
            literal = f"{value}LL"
        self.emit(
            f'_Static_assert({c_name} == {literal}, "{name}");',
            where,
            f"{name} is {value} here, not the header's value (or the headers have no {name})",
            compiler=False,
        )

    def run(self):
        self.emit("#include <stdbool.h>")
        self.emit("#include <stddef.h>")
        self.emit("#include <stdint.h>")
        for header in sorted(self.h.files):
            self.emit(f"#include <gpumem/{header}>")
        for name, d in sorted(self.pkg.structs.items()):
            if name in self.h.typedefs or name in self.h.tags or name.startswith("gpumem_"):
                self.check_struct(name, d)
        for name, d in sorted(self.pkg.consts.items()):
            if name.startswith("GPUMEM_"):
                self.check_constant(name, d)
            elif name in self.h.typedefs or name in self.h.tags:
                self.check_alias(name, d)
        for call in self.pkg.ccalls:
            self.check_ccall(call)
        self.check_calls()
        for cf in self.pkg.cfunctions:
            self.check_cfunction(cf)


def julia_integer(rhs):
    """The value and Julia type of a constant written as a literal, or T(literal) for an integer
    type T: an unsuffixed decimal literal is an Int64, a hexadecimal, octal or binary one the
    smallest unsigned type that holds its digits, as in Julia."""
    text = " ".join(rhs.split())
    m = re.fullmatch(r"(\w+)\s*\(\s*(.*?)\s*\)", text)
    declared = None
    if m and m.group(1) in INT_RANGES:
        declared, text = m.group(1), m.group(2)
    m = re.fullmatch(r"(-?)\s*(0x[0-9a-fA-F_]+|0b[01_]+|0o[0-7_]+|\d[\d_]*)", text)
    if not m:
        raise CheckError(f"cannot evaluate {rhs!r}: write a literal, or T(literal) with an integer type T")
    digits = m.group(2).replace("_", "")
    if digits[:2] in ("0x", "0b", "0o"):
        if m.group(1):
            raise CheckError(f"{rhs!r}: a negated unsigned literal wraps around in Julia; write T(-decimal)")
        value = int(digits, 0)
        if declared is None:
            bits = {"0x": 4, "0b": 1, "0o": 3}[digits[:2]] * len(digits[2:])
            size = next(s for s in (8, 16, 32, 64, 128) if bits <= s)
            declared = f"UInt{size}"
    else:
        value = int(m.group(1) + digits)
        declared = declared or "Int64"
    if declared not in INT_RANGES:
        raise CheckError(f"{rhs!r} is a {declared}, which no C constant of gpumem's is")
    low, high = INT_RANGES[declared]
    if not low <= value <= high:
        raise CheckError(f"{rhs!r}: {value} does not fit in {declared}")
    return value, declared


def compile_checks(checker, cc, include_dirs, keep):
    source = "\n".join(checker.c_lines) + "\n"
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(keep) if keep else pathlib.Path(tmp, "gpumem_ccall_check.c")
        path.write_text(source)
        command = [*cc.split(), "-std=c99", "-Wall", "-Werror", "-fsyntax-only", "-fdiagnostics-color=never"]
        command += [f"-I{d}" for d in include_dirs] + [str(path)]
        try:
            result = subprocess.run(command, capture_output=True, text=True)
        except OSError as e:
            raise CheckError(f"cannot run the C compiler {cc!r}: {e}")
    reported, failed_groups, pending = set(), set(checker.failed_groups), []
    for text in (result.stdout + result.stderr).splitlines():
        m = re.match(r"^(.*?):(\d+):(?:\d+:)?\s*(?:fatal )?error:\s*(.*)$", text)
        if not m:
            continue
        if pathlib.Path(m.group(1)).name != path.name:
            checker.error(pathlib.Path(m.group(1)), int(m.group(2)), f"the headers do not compile: {m.group(3)}")
            continue
        number = int(m.group(2))
        record = checker.records.get(number)
        if record is None:
            checker.error(path, number, f"the generated check does not compile: {m.group(3)}")
            continue
        if number in reported:
            continue
        reported.add(number)
        group, derived = checker.groups.get(number, (None, False))
        if group is not None and not derived:
            failed_groups.add(group)
        pending.append((number, record, group, derived, m.group(3)))
    for number, (jl_path, jl_line, message, show_compiler), group, derived, words in pending:
        if derived and group in failed_groups:
            continue  # a size or offset that differs because a field's type does
        checker.error(jl_path, jl_line, f"{message}: {words}" if show_compiler else message)
    if result.returncode != 0 and not pending and not checker.errors:
        raise CheckError(f"the C compiler failed:\n{result.stdout}{result.stderr}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", default=str(HERE / "GPUMem"), help="the Julia package (default: %(default)s)")
    parser.add_argument("--map", default=str(ROOT / "lib" / "gpumem.map"), help="the version script")
    parser.add_argument(
        "-I",
        dest="include",
        action="append",
        default=[],
        help="an include directory holding gpumem/*.h; give the source's and the build's (for gpumem_version.h)",
    )
    parser.add_argument("--cc", default=os.environ.get("CC", "cc"), help="the C compiler (default: $CC or cc)")
    parser.add_argument(
        "--require-all", action="store_true", help="also fail for an exported function that no ccall calls"
    )
    parser.add_argument("--keep-c", metavar="FILE", help="write the generated C file here")
    args = parser.parse_args(argv)
    include_dirs = [os.path.abspath(d) for d in args.include] or [str(ROOT / "include")]
    try:
        headers = Headers(include_dirs)
        exported = exported_symbols(args.map)
        package = Package(args.package)
        checker = Checker(package, headers, exported, args.map)
        checker.run()
        compile_checks(checker, args.cc, include_dirs, args.keep_c)
    except (CheckError, OSError) as e:
        print(f"check_ccalls: {e}", file=sys.stderr)
        return 2
    if args.require_all:
        map_lines = pathlib.Path(args.map).read_text().split("\n")
        for name in sorted(exported - checker.called):
            line = next((k for k, text in enumerate(map_lines, start=1) if re.search(rf"\b{name}\b", text)), 1)
            checker.error(pathlib.Path(args.map), line, f"{name} is exported, but no ccall in the package calls it")
    cwd = pathlib.Path.cwd()
    for path, line, message in sorted(set(checker.errors), key=lambda e: (str(e[0]), e[1], e[2])):
        path = pathlib.Path(path).resolve()
        shown = path.relative_to(cwd) if cwd in path.parents else path
        print(f"{shown}:{line}: {message}")
    c = checker.counts
    print(f"{c['ccalls']} ccalls checked, {c['structs']} structs, {c['constants']} constants")
    return 1 if checker.errors else 0


if __name__ == "__main__":
    sys.exit(main())
