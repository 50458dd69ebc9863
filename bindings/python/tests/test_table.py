"""The declaration table and the structs against the headers and the version script."""
import ctypes
import re
import unittest

import gpumem
from gpumem import _lib, _types, errors

from .support import source_dir

ROOT = source_dir()

SCALARS = {
    "int32_t": ctypes.c_int32,
    "uint32_t": ctypes.c_uint32,
    "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_size_t,
    "ptrdiff_t": ctypes.c_ssize_t,  # the same type on LP64 Linux (torch.h: PyTorch's ssize_t)
    "double": ctypes.c_double,
    "bool": ctypes.c_bool,
    "char": ctypes.c_char,
    "gpumem_status_t": ctypes.c_int32,
}
HANDLES = {"gpumem_stream_t", "gpumem_cuda_pool_t"}  # pointers already, by typedef
CALLBACKS = {
    fn._c_name_: fn
    for fn in (
        _types.alloc_fn,
        _types.free_fn,
        _types.context_destroy_fn,
        _types.reserve_fn,
        _types.map_fn,
        _types.hook_fn,
        _types.block_fn,
        _types.reclaim_fn,
    )
}
STRUCTS = {s._c_name_: s for s in _types.STRUCTS}


def _headers():
    text = "\n".join(p.read_text() for p in sorted((ROOT / "include" / "gpumem").glob("*.h")))
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r"^\s*#.*$", " ", text, flags=re.M)


def _split_decl(decl):
    """A declaration as (type without const or spaces, name, array length or None):
    'const gpumem_copy2d_t* copy' gives ('gpumem_copy2d_t*', 'copy', None)."""
    m = re.fullmatch(r"(.*?)\b(\w+)\s*(?:\[(\d+)\])?", " ".join(decl.split()))
    ctype = m.group(1).replace("const", "").replace(" ", "")
    return ctype, m.group(2), int(m.group(3)) if m.group(3) else None


class HeaderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if ROOT is None:
            raise unittest.SkipTest("the gpumem sources are not here (set GPUMEM_SOURCE_DIR)")
        text = _headers()
        cls.prototypes = {
            m.group(2): (m.group(1), m.group(3))
            for m in re.finditer(r"GPUMEM_API\s+([^;{}()]+?)\s*\b(gpumem_\w+)\s*\(([^)]*)\)\s*;", text)
        }
        cls.opaque = set(re.findall(r"typedef\s+struct\s+gpumem_\w+_s\s+(gpumem_\w+_t)\s*;", text))
        cls.structs = {
            m.group(2): m.group(1)
            for m in re.finditer(r"typedef\s+struct\s+gpumem_\w+_s\s*\{(.*?)\}\s*(gpumem_\w+_t)\s*;", text, re.S)
        }
        cls.statuses = {int(v): n for n, v in re.findall(r"\b(GPUMEM_(?:SUCCESS|ERROR_\w+))\s*=\s*(-?\d+)", text)}
        map_text = (ROOT / "lib" / "gpumem.map").read_text()
        cls.exported = set(re.findall(r"^\s*(gpumem_\w+)\s*;", map_text, re.M))

    def expected(self, ctype):
        """The ctypes type a C type must be declared as."""
        if ctype == "void":
            return None  # a result only: ctypes' restype for a function that returns nothing
        base, stars = ctype.rstrip("*"), len(ctype) - len(ctype.rstrip("*"))
        if stars == 0:
            if base in SCALARS:
                return SCALARS[base]
            if base in HANDLES:
                return ctypes.c_void_p
            if base in CALLBACKS:
                return CALLBACKS[base]
        elif stars == 1:
            if base == "char":
                return ctypes.c_char_p
            if base == "void" or base in self.opaque:
                return ctypes.c_void_p
            if base in STRUCTS:
                return ctypes.POINTER(STRUCTS[base])
            if base in SCALARS:
                return ctypes.POINTER(SCALARS[base])
            if base in HANDLES:
                return ctypes.POINTER(ctypes.c_void_p)
        elif stars == 2 and (base == "void" or base in self.opaque):
            return ctypes.POINTER(ctypes.c_void_p)
        self.fail(f"no ctypes mapping for the C type {ctype!r}")

    def test_every_exported_function_is_in_the_table_and_no_other(self):
        table = [name for name, _, _ in _lib.TABLE]
        self.assertEqual(len(table), len(set(table)), "a function is declared twice")
        self.assertEqual(set(table) - self.exported, set(), "declared, but not in lib/gpumem.map")
        self.assertEqual(self.exported - set(table), set(), "in lib/gpumem.map, but not declared")

    def test_every_exported_function_has_a_prototype(self):
        self.assertEqual(self.exported - set(self.prototypes), set())

    def test_argument_counts_match_the_prototypes(self):
        for name, argtypes, _ in _lib.TABLE:
            params = self.prototypes[name][1].strip()
            count = 0 if params in ("", "void") else len(params.split(","))
            self.assertEqual(len(argtypes), count, name)

    def test_argument_and_result_types_match_the_prototypes(self):
        for name, argtypes, restype in _lib.TABLE:
            result, params = self.prototypes[name]
            self.assertIs(restype, self.expected(result.replace("const", "").replace(" ", "")), f"{name} result")
            if params.strip() == "void":
                continue
            for i, (param, argtype) in enumerate(zip(params.split(","), argtypes)):
                ctype, pname, _ = _split_decl(param)
                self.assertIs(argtype, self.expected(ctype), f"{name} argument {i} ({pname})")

    def test_every_struct_has_a_structure_and_no_other(self):
        self.assertEqual(set(self.structs), set(STRUCTS))

    def test_struct_fields_match_the_headers_in_order_and_type(self):
        for c_name, body in self.structs.items():
            fields = STRUCTS[c_name]._fields_
            decls = [_split_decl(d) for d in body.split(";") if d.strip()]
            self.assertEqual([f[0] for f in fields], [name for _, name, _ in decls], c_name)
            self.assertEqual(decls[0][:2], ("size_t", "struct_size"), f"{c_name} starts with struct_size")
            for (fname, ftype), (ctype, _, length) in zip(fields, decls):
                if length is None:
                    self.assertIs(ftype, self.expected(ctype), f"{c_name}.{fname}")
                else:
                    self.assertTrue(issubclass(ftype, ctypes.Array), f"{c_name}.{fname}")
                    self.assertIs(ftype._type_, self.expected(ctype), f"{c_name}.{fname}")
                    self.assertEqual(ftype._length_, length, f"{c_name}.{fname}")

    def test_enums_match_the_headers(self):
        text = _headers()
        for cls, prefix in [
            (gpumem.allocator.HookEvent, "GPUMEM_HOOK_"),
            (gpumem.allocator.BlockState, "GPUMEM_BLOCK_"),
            (gpumem.allocator.CudaPoolSource, "GPUMEM_CUDA_POOL_"),
            (gpumem.allocator.StreamReuse, "GPUMEM_STREAM_REUSE_"),
            (gpumem.allocator.PeerAccess, "GPUMEM_PEER_ACCESS_"),
            (gpumem.memory.MemoryType, "GPUMEM_MEMORY_"),
            (gpumem.pinning.PinState, "GPUMEM_PIN_"),
            (gpumem.raw.HostAllocFlags, "GPUMEM_HOST_ALLOC_"),
            (gpumem.raw.HostRegisterFlags, "GPUMEM_HOST_REGISTER_"),
            (gpumem.raw.ManagedFlags, "GPUMEM_MANAGED_"),
            (gpumem.raw.Location, "GPUMEM_LOCATION_"),
            (gpumem.raw.Advice, "GPUMEM_ADVICE_"),
            (gpumem.array.Format, "GPUMEM_FORMAT_"),
            (gpumem.trace.TraceEvent, "GPUMEM_TRACE_"),
        ]:
            with self.subTest(enum=cls.__name__):
                found = re.findall(r"\b" + prefix + r"(\w+)\s*=\s*(0x[0-9a-fA-F]+|-?\d+)", text)
                self.assertEqual({name: int(member) for name, member in cls.__members__.items()},
                                 {name: int(value, 0) for name, value in found})

    def test_every_status_has_its_class(self):
        for status, name in self.statuses.items():
            if status == 0:
                continue
            cls = errors.error_for(status).__class__
            self.assertIsNot(cls, gpumem.Error, name)
            self.assertEqual(cls.NAME, name)
            self.assertEqual(cls.STATUS, status)


class LibraryNamesTest(unittest.TestCase):
    def test_status_names_are_the_librarys(self):
        for cls in gpumem.Error.__subclasses__():
            self.assertEqual(gpumem.status_name(cls.STATUS), cls.NAME)
        self.assertEqual(gpumem.status_name(-1000), gpumem.Error.NAME)

    def test_loaded_version_is_the_packages(self):
        self.assertEqual(gpumem.version(), gpumem.__version__)
        self.assertEqual(gpumem.version_number(), _lib.version_number(*_lib.REQUIRED_VERSION))


if __name__ == "__main__":
    unittest.main()
