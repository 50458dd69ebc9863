"""check_ccalls.py on the real package (which must pass) and on small wrong packages (which must
each fail, saying where and why).

The checker needs the generated gpumem_version.h: set GPUMEM_CHECK_INCLUDE to the include
directories (separated by os.pathsep), or the first build/*/include that holds one is used.
"""
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CHECKER = HERE / "check_ccalls.py"
MAP = ROOT / "lib" / "gpumem.map"

SUMMARY = re.compile(r"^(\d+) ccalls checked, (\d+) structs, (\d+) constants$", re.M)

# What the snippets below rely on, as the real package defines it.
PRELUDE = textwrap.dedent(
    """\
    const gpumem_status_t = Int32
    mutable struct gpumem_allocator_t end
    mutable struct CUstream_st end
    const gpumem_stream_t = Ptr{CUstream_st}
    const gpumem_reclaim_fn = Ptr{Cvoid}
    """
)


def include_dirs():
    given = os.environ.get("GPUMEM_CHECK_INCLUDE")
    if given:
        return [os.path.abspath(d) for d in given.split(os.pathsep) if d]
    for build in sorted(ROOT.glob("build/*/include")):
        if (build / "gpumem" / "gpumem_version.h").is_file():
            return [str(ROOT / "include"), str(build)]
    return None


def run_checker(*args, cwd=None):
    command = [sys.executable, str(CHECKER), "--map", str(MAP)]
    for directory in include_dirs():
        command += ["-I", directory]
    result = subprocess.run(command + list(args), capture_output=True, text=True, cwd=cwd)
    return result.returncode, result.stdout + result.stderr


class CheckerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if include_dirs() is None:
            raise unittest.SkipTest("no gpumem_version.h: build the library, or set GPUMEM_CHECK_INCLUDE")

    def check_snippet(self, snippet, prelude=PRELUDE):
        """Runs the checker on a package of one file; returns (status, output, path of the file as
        printed, line of the snippet's first line)."""
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        src = pathlib.Path(tmp.name, "GPUMem", "src")
        src.mkdir(parents=True)
        (src / "snippet.jl").write_text(prelude + textwrap.dedent(snippet))
        status, output = run_checker("--package", str(src.parent), cwd=tmp.name)
        return status, output, "GPUMem/src/snippet.jl", prelude.count("\n") + 1

    def assertFails(self, snippet, line_offset, message, prelude=PRELUDE):
        status, output, path, first = self.check_snippet(snippet, prelude)
        self.assertEqual(status, 1, output)
        self.assertIn(f"{path}:{first + line_offset}: {message}", output)
        return output

    def assertPasses(self, snippet, prelude=PRELUDE):
        status, output, _, _ = self.check_snippet(snippet, prelude)
        self.assertEqual(status, 0, output)
        return output

    def test_the_package_passes_and_covers_every_exported_function(self):
        status, output = run_checker("--require-all")
        self.assertEqual(status, 0, output)
        counts = SUMMARY.search(output)
        self.assertIsNotNone(counts, output)
        exported = len(re.findall(r"^\s*gpumem_\w+\s*;", MAP.read_text(), re.M))
        self.assertGreaterEqual(int(counts.group(1)), exported)
        self.assertGreater(int(counts.group(2)), 0)
        self.assertGreater(int(counts.group(3)), 0)

    def test_a_correct_call_passes(self):
        output = self.assertPasses(
            """\
            gpumem_alloc(a, size, stream, out) = ccall(@sym(:gpumem_alloc), gpumem_status_t,
                (Ptr{gpumem_allocator_t}, Csize_t, gpumem_stream_t, Ptr{Ptr{Cvoid}}), a, size, stream, out)
            # Julia has no const: Ptr{Cvoid} passes a const void*, Cstring a const char*.
            gpumem_copy(d, s, n) =
                ccall(@sym(:gpumem_copy), gpumem_status_t, (Ptr{Cvoid}, Ptr{Cvoid}, Csize_t), d, s, n)
            gpumem_pool_snapshot_json(p, path) =
                ccall(@sym(:gpumem_pool_snapshot_json), gpumem_status_t, (Ptr{gpumem_allocator_t}, Cstring), p, path)
            """
        )
        self.assertIn("3 ccalls checked, 0 structs, 0 constants", output)

    def test_wrong_argument_count(self):
        self.assertFails(
            """\
            gpumem_free(a, p) = ccall(@sym(:gpumem_free), gpumem_status_t, (Ptr{gpumem_allocator_t}, Ptr{Cvoid}), a, p)
            """,
            0,
            "gpumem_free takes 3 arguments in its header, but the ccall gives 2 argument types",
        )

    def test_values_that_do_not_match_the_types(self):
        self.assertFails(
            """\
            gpumem_host_free(p) = ccall(@sym(:gpumem_host_free), gpumem_status_t, (Ptr{Cvoid},), p, p)
            """,
            0,
            "gpumem_host_free: the ccall gives 1 argument types but passes 2 values",
        )

    def test_wrong_argument_type(self):
        self.assertFails(
            """\
            # size is a size_t, not an int
            gpumem_alloc(a, size, stream, out) = ccall(@sym(:gpumem_alloc), gpumem_status_t,
                (Ptr{gpumem_allocator_t}, Cint, gpumem_stream_t, Ptr{Ptr{Cvoid}}), a, size, stream, out)
            """,
            1,
            "gpumem_alloc: argument 2 (size): the Julia type is `int`, the header's is `size_t`",
        )

    def test_wrong_pointee_type(self):
        self.assertFails(
            """\
            gpumem_alloc(a, size, stream, out) = ccall(@sym(:gpumem_alloc), gpumem_status_t,
                (Ptr{Cvoid}, Csize_t, gpumem_stream_t, Ptr{Ptr{Cvoid}}), a, size, stream, out)
            """,
            0,
            "gpumem_alloc: argument 1 (allocator): the Julia type is `void *`, the header's is `gpumem_allocator_t *`",
        )

    def test_unsigned_char_is_not_char(self):
        self.assertFails(
            """\
            gpumem_pool_snapshot_json(p, path) =
                ccall(@sym(:gpumem_pool_snapshot_json), gpumem_status_t, (Ptr{gpumem_allocator_t}, Ptr{UInt8}), p, path)
            """,
            1,
            "gpumem_pool_snapshot_json: argument 2 (path): the Julia type is `uint8_t *`, "
            "the header's is `const char *`",
        )

    def test_wrong_result_type(self):
        self.assertFails(
            """\
            gpumem_version_number() = ccall(@sym(:gpumem_version_number), Int32, ())
            """,
            0,
            "gpumem_version_number: result: the Julia type is `int32_t`, the header's is `uint32_t`",
        )

    def test_a_result_where_the_function_returns_nothing(self):
        self.assertFails(
            """\
            gpumem_torch_free(p, n, d, s) = ccall(@sym(:gpumem_torch_free), gpumem_status_t,
                (Ptr{Cvoid}, Cptrdiff_t, Int32, gpumem_stream_t), p, n, d, s)
            """,
            0,
            "gpumem_torch_free: the result is `void` in the header, but `gpumem_status_t` here",
        )

    def test_unknown_symbol(self):
        self.assertFails(
            """\
            gpumem_allocate(a, n) =
                ccall(@sym(:gpumem_allocate), gpumem_status_t, (Ptr{gpumem_allocator_t}, Csize_t), a, n)
            """,
            1,
            "gpumem_allocate is not exported by libgpumem",
        )

    def test_calls_by_string_name_and_to_other_libraries(self):
        output = self.assertPasses(
            """\
            gpumem_host_free(p) = ccall(("gpumem_host_free", "libgpumem.so.0"), gpumem_status_t, (Ptr{Cvoid},), p)
            c_length(s) = ccall("strlen", Csize_t, (Cstring,), s)
            """
        )
        self.assertIn("1 ccalls checked", output)

    def test_a_call_whose_function_cannot_be_told(self):
        self.assertFails(
            """\
            call_it(fptr) = ccall(fptr, gpumem_status_t, ())
            """,
            0,
            "cannot tell which function `ccall(fptr, ...)` calls",
        )

    def test_a_type_without_a_c_equivalent(self):
        self.assertFails(
            """\
            gpumem_host_free(p) = ccall(@sym(:gpumem_host_free), gpumem_status_t, (Any,), p)
            """,
            0,
            "gpumem_host_free: argument 1 (ptr): the Julia type Any has no C equivalent",
        )

    def test_calls_in_strings_and_comments_are_not_read(self):
        self.assertPasses(
            '''\
            """
                ccall(@sym(:gpumem_nothing_at_all), Cvoid, ())
            """
            f() = "ccall(@sym(:gpumem_nothing_at_all), Cvoid, ()) $(g("x)"))"
            #= ccall(@sym(:gpumem_nothing_at_all), Cvoid, ()) =#
            c = 'x'  # ccall(@sym(:gpumem_nothing_at_all), Cvoid, ())
            '''
        )

    def test_wrong_struct_field_type(self):
        output = self.assertFails(
            """\
            struct gpumem_pool_params_t
                struct_size::Csize_t
                upstream::Ptr{gpumem_allocator_t}
                limit::UInt32
                limit_fraction::Cdouble
            end
            """,
            3,
            "gpumem_pool_params_t.limit: the Julia type `UInt32` is `uint32_t`, the header's is `uint64_t`",
        )
        # The size and offsets differ only because of that field: not reported again.
        self.assertNotIn("offset differs", output)
        self.assertNotIn("size differs", output)

    def test_wrong_struct_field_name(self):
        self.assertFails(
            """\
            struct gpumem_pool_params_t
                struct_size::Csize_t
                upstream::Ptr{gpumem_allocator_t}
                limits::UInt64
                limit_fraction::Cdouble
            end
            """,
            3,
            "gpumem_pool_params_t: field 3 is `limits` here, `limit` in the header",
        )

    def test_missing_struct_field(self):
        self.assertFails(
            """\
            struct gpumem_pool_params_t
                struct_size::Csize_t
                upstream::Ptr{gpumem_allocator_t}
                limit::UInt64
            end
            """,
            0,
            "gpumem_pool_params_t has 3 fields here and 4 in the header (missing: limit_fraction)",
        )

    def test_wrong_array_field(self):
        output = self.assertFails(
            """\
            struct gpumem_trace_header_t
                struct_size::Csize_t
                version::UInt32
                device::Int32
                start_unix_ns::UInt64
                kind::NTuple{16,Cchar}
            end
            """,
            5,
            "gpumem_trace_header_t.kind: `NTuple{16,Cchar}` is an array of 16; the header's is an array of 32",
        )
        self.assertNotIn("size differs", output)

    def test_wrong_constant(self):
        self.assertFails(
            """\
            const GPUMEM_SUCCESS = Int32(0)
            const GPUMEM_ERROR_OUT_OF_MEMORY = Int32(-3)
            """,
            1,
            "GPUMEM_ERROR_OUT_OF_MEMORY is -3 here, not the header's value",
        )

    def test_unknown_constant(self):
        self.assertFails(
            """\
            const GPUMEM_ERROR_NONSENSE = Int32(-99)
            """,
            0,
            "GPUMEM_ERROR_NONSENSE is -99 here, not the header's value (or the headers have no GPUMEM_ERROR_NONSENSE)",
        )

    def test_constant_that_does_not_fit_its_type(self):
        self.assertFails(
            """\
            const GPUMEM_ERROR_OUT_OF_MEMORY = UInt32(-2)
            """,
            0,
            "GPUMEM_ERROR_OUT_OF_MEMORY: 'UInt32(-2)': -2 does not fit in UInt32",
        )

    def test_pointer_constants_compare_as_addresses(self):
        self.assertPasses(
            """\
            const GPUMEM_STREAM_PER_THREAD = UInt(0x2)
            const GPUMEM_CUDA_POOL_KEEP_THRESHOLD = 0xfffffffffffffffe
            """
        )

    def test_wrong_alias(self):
        self.assertFails(
            """\
            const gpumem_stream_t = Ptr{Cvoid}
            """,
            0,
            "gpumem_stream_t is `void *` here, not the header's type",
            prelude="const gpumem_status_t = Int32\n",
        )

    def test_wrong_callback(self):
        self.assertFails(
            """\
            reclaim(device::Int32, size::Int32, data::Ptr{Cvoid}) = nothing
            const RECLAIM = Ref{gpumem_reclaim_fn}(C_NULL)
            init() = (RECLAIM[] = @cfunction(reclaim, Cvoid, (Int32, Int32, Ptr{Cvoid})); nothing)
            """,
            2,
            "gpumem_reclaim_fn: argument 2 (size): the Julia type is `int32_t`, the header's is `size_t`",
        )

    def test_a_callback_of_unknown_type(self):
        self.assertFails(
            """\
            f(x::Int32) = nothing
            g() = @cfunction(f, Cvoid, (Int32,))
            """,
            1,
            "@cfunction is not checked unless stored as",
        )

    def test_macro_ccall_is_refused(self):
        self.assertFails(
            """\
            f() = @ccall gpumem_version_number()::UInt32
            """,
            0,
            "@ccall is not checked",
        )


if __name__ == "__main__":
    unittest.main()
