"""The ABI scripts' own tests: the description is unmoved by attribute macros, and the checks
report what is wrong (each must be able to fail). Run by CTest (abi_checks_selftest)."""
import copy
import json
import os
import pathlib
import re
import shutil
import sys
import tempfile
import unittest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import check_abi  # noqa: E402
import check_bindings  # noqa: E402
import describe  # noqa: E402

ROOT = describe.ROOT
DESCRIPTION = json.loads(describe.DEFAULT_OUTPUT.read_text())


def replace_once(text, old, new):
    assert text.count(old) == 1, f"{old!r} is not in the text once"
    return text.replace(old, new)


class DescribeTest(unittest.TestCase):
    def setUp(self):
        try:
            describe.load_cindex()
        except describe.Missing as e:
            self.skipTest(str(e))

    def test_an_attribute_macro_changes_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            include = pathlib.Path(tmp) / "include"
            shutil.copytree(ROOT / "include", include)
            core = include / "gpumem" / "core.h"
            core.write_text(replace_once(core.read_text(), "#ifdef __cplusplus\nextern",
                                         "#define GPUMEM_NODISCARD __attribute__((warn_unused_result))\n"
                                         "#ifdef __cplusplus\nextern"))
            for header in (include / "gpumem").glob("*.h"):
                header.write_text(re.sub(r"^GPUMEM_API gpumem_status_t", "GPUMEM_API GPUMEM_NODISCARD gpumem_status_t",
                                         header.read_text(), flags=re.M))
            got = describe.generate(os.environ.get("GPUMEM_VERSION_HEADER_DIR"), include_dir=include)
        self.assertEqual(json.loads(got)["functions"], DESCRIPTION["functions"])

    def test_a_function_missing_from_the_map_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            map_path = pathlib.Path(tmp) / "gpumem.map"
            map_path.write_text(replace_once((ROOT / "lib" / "gpumem.map").read_text(), "    gpumem_vm_get_info;\n", ""))
            with self.assertRaisesRegex(ValueError, "gpumem_vm_get_info is declared GPUMEM_API but is in no node"):
                describe.generate(os.environ.get("GPUMEM_VERSION_HEADER_DIR"), map_path=map_path)


class CompatibilityTest(unittest.TestCase):
    def test_the_description_is_compatible_with_itself(self):
        self.assertEqual(check_abi.incompatibilities(DESCRIPTION, DESCRIPTION), [])

    def test_breaks_are_reported(self):
        new = copy.deepcopy(DESCRIPTION)
        del new["functions"]["gpumem_pin"]
        new["functions"]["gpumem_pool_set_limit"]["params"][1]["abi"] = "u32"
        new["structs"]["gpumem_pool_info_t"]["fields"][6]["abi"] = "i32"
        new["structs"]["gpumem_pool_info_t"]["size"] -= 8
        new["enums"]["gpumem_status"]["values"][14]["value"] = -41
        breaks = "\n".join(check_abi.incompatibilities(DESCRIPTION, new))
        for expected in ["function gpumem_pin (GPUMEM_0.1) is removed", "function gpumem_pool_set_limit takes",
                         "field gpumem_pool_info_t.arena_count", "struct gpumem_pool_info_t shrank",
                         "enum value GPUMEM_ERROR_BUSY is -41"]:
            self.assertIn(expected, breaks)

    def test_growth_is_compatible_but_not_in_a_released_node(self):
        new = copy.deepcopy(DESCRIPTION)
        s = new["structs"]["gpumem_vm_info_t"]
        s["fields"].append({"name": "extra", "offset": s["size"], "size": 8, "type": "uint64_t", "abi": "u64"})
        s["size"] += 8
        major, minor = new["version"].split(".")[:2]
        new["functions"]["gpumem_new_thing"] = dict(new["functions"]["gpumem_pin_cache_flush"], node=f"GPUMEM_{major}.{minor}")
        new["functions"]["gpumem_old_thing"] = dict(new["functions"]["gpumem_pin_cache_flush"], node="GPUMEM_0.1")
        self.assertEqual(check_abi.incompatibilities(DESCRIPTION, new), [])
        self.assertEqual(check_abi.misplaced_additions(DESCRIPTION, new),
                         [f"function gpumem_old_thing is added to GPUMEM_0.1; a new function belongs in GPUMEM_{major}.{minor}"])


class ReleaseBaselineTest(unittest.TestCase):
    """The check's default baseline is the last release, described from its own headers: a break
    regenerated into the checked-in file in the same change is still a break."""

    def setUp(self):
        try:
            describe.load_cindex()
        except describe.Missing as e:
            self.skipTest(str(e))
        self.release = check_abi.last_release()

    def test_the_headers_are_compatible_with_the_last_release(self):
        self.assertEqual(self.release["version"], "0.3.0")
        self.assertEqual(check_abi.incompatibilities(self.release, DESCRIPTION), [])
        self.assertEqual(check_abi.misplaced_additions(self.release, DESCRIPTION), [])

    def test_a_regenerated_break_is_still_reported(self):
        new = copy.deepcopy(DESCRIPTION)
        new["functions"]["gpumem_pool_set_limit"]["params"][1]["abi"] = "u32"
        self.assertIn("function gpumem_pool_set_limit takes", "\n".join(check_abi.incompatibilities(self.release, new)))

    def test_the_experimental_tier_may_change(self):
        old = copy.deepcopy(DESCRIPTION)
        new = copy.deepcopy(DESCRIPTION)
        del new["functions"]["gpumem_shutdown"]
        self.assertEqual(check_abi.incompatibilities(old, new), [])


class BindingsTest(unittest.TestCase):
    def problems(self, binding, path):
        checker = check_bindings.Checker(DESCRIPTION)
        getattr(checker, f"check_{binding}")(path)
        return "\n".join(checker.problems)

    def test_the_bindings_match(self):
        self.assertEqual(self.problems("rust", ROOT / "bindings/rust/gpumem-sys/src/lib.rs"), "")
        self.assertEqual(self.problems("julia", ROOT / "bindings/julia/GPUMem/src"), "")
        self.assertEqual(self.problems("python", ROOT / "bindings/python"), "")

    def test_wrong_rust_declarations_are_reported(self):
        text = (ROOT / "bindings/rust/gpumem-sys/src/lib.rs").read_text()
        text = replace_once(text, "pub fn gpumem_pool_set_limit(pool: *mut gpumem_allocator_t, limit: u64)",
                            "pub fn gpumem_pool_set_limit(pool: *mut gpumem_allocator_t, limit: u32)")
        text = replace_once(text, "pub const GPUMEM_ERROR_BUSY: i32 = -14;", "pub const GPUMEM_ERROR_BUSY: i32 = -41;")
        text = replace_once(text, "    pub arena_count: u32,\n", "    pub arena_count: u64,\n")
        text = replace_once(text, "pub fn gpumem_reclaim_remove(id: u64) -> gpumem_status_t;", "")
        text = replace_once(text, "pub fn gpumem_copy2d(copy: *const gpumem_copy2d_t)",
                            "pub fn gpumem_copy2d(copy: *mut gpumem_copy2d_t)")
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "lib.rs"
            path.write_text(text)
            problems = self.problems("rust", path)
        for expected in ["function gpumem_pool_set_limit argument limit is u32", "constant GPUMEM_ERROR_BUSY is -41",
                         "field gpumem_pool_info_t.arena_count is u64", "field gpumem_pool_info_t.arena_count is at offset 48 (8 bytes)",
                         "function gpumem_reclaim_remove is in the description but not declared",
                         "function gpumem_copy2d argument copy is *mut gpumem_copy2d_t"]:
            self.assertIn(expected, problems)
        self.assertNotIn("function gpumem_alloc ", problems)

    def test_wrong_julia_declarations_are_reported(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = pathlib.Path(tmp) / "src"
            shutil.copytree(ROOT / "bindings/julia/GPUMem/src", src)
            lib = src / "libgpumem.jl"
            text = lib.read_text()
            text = replace_once(text, "(Ptr{gpumem_allocator_t}, UInt64), allocator, keep_bytes)",
                                "(Ptr{gpumem_allocator_t}, UInt32), allocator, keep_bytes)")
            text = replace_once(text, "const GPUMEM_ERROR_BUSY = Int32(-14)", "const GPUMEM_ERROR_BUSY = Int32(-41)")
            text = replace_once(text, "    arena_count::UInt32\n", "    arena_count::UInt64\n")
            text = replace_once(text, "ccall(@sym(:gpumem_pin), gpumem_status_t, (Ptr{Cvoid}, Csize_t, UInt32), ptr, size, flags)",
                                "ccall(@sym(:gpumem_pin), gpumem_status_t, (Ptr{Cvoid}, Csize_t, UInt32), ptr, flags, size)")
            lib.write_text(text)
            problems = self.problems("julia", src)
        for expected in ["gpumem_cuda_pool_trim argument keep_bytes is UInt32", "constant GPUMEM_ERROR_BUSY is -41",
                         "field gpumem_pool_info_t.arena_count is UInt64", "gpumem_pin passes (ptr, flags, size)"]:
            self.assertIn(expected, problems)

    def test_wrong_python_declarations_are_reported(self):
        import ctypes
        sys.path.insert(0, str(ROOT / "bindings/python"))
        from gpumem import _lib
        saved = list(_lib.TABLE)
        try:
            i = next(i for i, row in enumerate(_lib.TABLE) if row[0] == "gpumem_pool_set_limit")
            _lib.TABLE[i] = ("gpumem_pool_set_limit", [ctypes.c_void_p, ctypes.c_uint32], _lib.TABLE[i][2])
            del _lib.TABLE[next(i for i, row in enumerate(_lib.TABLE) if row[0] == "gpumem_reclaim_remove")]
            problems = self.problems("python", ROOT / "bindings/python")
        finally:
            _lib.TABLE[:] = saved
        self.assertIn("function gpumem_pool_set_limit argument 1 (limit) is u32", problems)
        self.assertIn("function gpumem_reclaim_remove is in the description but not declared", problems)


if __name__ == "__main__":
    unittest.main()
