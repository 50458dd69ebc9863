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

sys.dont_write_bytecode = True
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import check_ccalls  # noqa: E402

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

    def test_require_all_reports_an_exported_function_that_no_ccall_calls(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        src = pathlib.Path(tmp.name, "GPUMem", "src")
        src.mkdir(parents=True)
        (src / "snippet.jl").write_text(
            PRELUDE
            + "gpumem_version_number() = ccall(@sym(:gpumem_version_number), UInt32, ())\n"
        )
        status, output = run_checker("--package", str(src.parent), cwd=tmp.name)
        self.assertEqual(status, 0, output)
        status, output = run_checker("--require-all", "--package", str(src.parent), cwd=tmp.name)
        self.assertEqual(status, 1, output)
        self.assertRegex(output, r"gpumem\.map:\d+: gpumem_alloc is exported, but no ccall in the package calls it")
        self.assertNotIn("gpumem_version_number is exported", output)

    def test_a_correct_call_passes(self):
        output = self.assertPasses(
            """\
            gpumem_alloc(allocator, size, stream, out_ptr) = ccall(@sym(:gpumem_alloc), gpumem_status_t,
                (Ptr{gpumem_allocator_t}, Csize_t, gpumem_stream_t, Ptr{Ptr{Cvoid}}), allocator, size, stream, out_ptr)
            # Julia has no const: Ptr{Cvoid} passes a const void*, Cstring a const char*.
            gpumem_copy(dst, src, size) =
                ccall(@sym(:gpumem_copy), gpumem_status_t, (Ptr{Cvoid}, Ptr{Cvoid}, Csize_t), dst, src, size)
            gpumem_pool_snapshot_json(pool, path) =
                ccall(@sym(:gpumem_pool_snapshot_json), gpumem_status_t, (Ptr{gpumem_allocator_t}, Cstring), pool, path)
            """
        )
        self.assertIn("3 ccalls checked, 0 structs, 0 constants", output)

    def test_wrong_argument_count(self):
        self.assertFails(
            """\
            gpumem_free(allocator, ptr) =
                ccall(@sym(:gpumem_free), gpumem_status_t, (Ptr{gpumem_allocator_t}, Ptr{Cvoid}), allocator, ptr)
            """,
            1,
            "gpumem_free takes 3 arguments in its header, but the ccall gives 2 argument types",
        )

    def test_values_that_do_not_match_the_types(self):
        self.assertFails(
            """\
            gpumem_host_free(ptr) = ccall(@sym(:gpumem_host_free), gpumem_status_t, (Ptr{Cvoid},), ptr, ptr)
            """,
            0,
            "gpumem_host_free: the ccall gives 1 argument types but passes 2 values",
        )

    def test_wrong_argument_type(self):
        self.assertFails(
            """\
            # size is a size_t, not an int
            gpumem_alloc(allocator, size, stream, out_ptr) = ccall(@sym(:gpumem_alloc), gpumem_status_t,
                (Ptr{gpumem_allocator_t}, Cint, gpumem_stream_t, Ptr{Ptr{Cvoid}}), allocator, size, stream, out_ptr)
            """,
            1,
            "gpumem_alloc: argument 2 (size): the Julia type is `int`, the header's is `size_t`",
        )

    def test_wrong_pointee_type(self):
        self.assertFails(
            """\
            gpumem_alloc(allocator, size, stream, out_ptr) = ccall(@sym(:gpumem_alloc), gpumem_status_t,
                (Ptr{Cvoid}, Csize_t, gpumem_stream_t, Ptr{Ptr{Cvoid}}), allocator, size, stream, out_ptr)
            """,
            0,
            "gpumem_alloc: argument 1 (allocator): the Julia type is `void *`, the header's is `gpumem_allocator_t *`",
        )

    def test_unsigned_char_is_not_char(self):
        self.assertFails(
            """\
            gpumem_pool_snapshot_json(pool, path) = ccall(@sym(:gpumem_pool_snapshot_json), gpumem_status_t,
                (Ptr{gpumem_allocator_t}, Ptr{UInt8}), pool, path)
            """,
            0,
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
            gpumem_torch_free(ptr, size, device, stream) = ccall(@sym(:gpumem_torch_free), gpumem_status_t,
                (Ptr{Cvoid}, Cptrdiff_t, Int32, gpumem_stream_t), ptr, size, device, stream)
            """,
            0,
            "gpumem_torch_free: the result is `void` in the header, but `gpumem_status_t` here",
        )

    def test_unknown_symbol(self):
        self.assertFails(
            """\
            gpumem_allocate(allocator, size) =
                ccall(@sym(:gpumem_allocate), gpumem_status_t, (Ptr{gpumem_allocator_t}, Csize_t), allocator, size)
            """,
            1,
            "gpumem_allocate is not exported by libgpumem",
        )

    def test_calls_by_string_name_and_to_other_libraries(self):
        output = self.assertPasses(
            """\
            gpumem_host_free(ptr) = ccall(("gpumem_host_free", "libgpumem.so.0"), gpumem_status_t, (Ptr{Cvoid},), ptr)
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
            gpumem_host_free(ptr) = ccall(@sym(:gpumem_host_free), gpumem_status_t, (Any,), ptr)
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

    def test_a_one_type_tuple_needs_its_comma(self):
        self.assertFails(
            """\
            gpumem_host_free(ptr) = ccall(@sym(:gpumem_host_free), gpumem_status_t, (Ptr{Cvoid}), ptr)
            """,
            0,
            "gpumem_host_free: `(Ptr{Cvoid})` is not a tuple: write `(Ptr{Cvoid},)`",
        )
        self.assertFails(
            """\
            reclaim(device::Int32, size::Csize_t, data::Ptr{Cvoid}) = nothing
            const RECLAIM = Ref{gpumem_reclaim_fn}(C_NULL)
            init() = (RECLAIM[] = @cfunction(reclaim, Cvoid, (Int32)); nothing)
            """,
            2,
            "gpumem_reclaim_fn: `(Int32)` is not a tuple: write `(Int32,)`",
        )

    def test_a_ref_result_is_refused(self):
        self.assertFails(
            """\
            gpumem_version_string() = ccall(@sym(:gpumem_version_string), Ref{Cchar}, ())
            """,
            0,
            "gpumem_version_string: the result is `Ref{Cchar}`, which Julia refuses for a ccall: write Ptr",
        )

    def test_a_wrapper_calls_the_function_it_is_named_after(self):
        self.assertFails(
            """\
            gpumem_device_free(ptr) = ccall(@sym(:gpumem_host_free), gpumem_status_t, (Ptr{Cvoid},), ptr)
            """,
            0,
            "the wrapper gpumem_device_free calls gpumem_host_free: name it gpumem_host_free",
        )

    def test_a_wrapper_passes_the_header_parameters_in_order(self):
        # dst and src have one Julia type: only their names tell them apart.
        self.assertFails(
            """\
            gpumem_copy(dst, src, size) =
                ccall(@sym(:gpumem_copy), gpumem_status_t, (Ptr{Cvoid}, Ptr{Cvoid}, Csize_t), src, dst, size)
            """,
            1,
            "gpumem_copy: the ccall passes (src, dst, size); pass the header's parameters in their order, "
            "(dst, src, size)",
        )
        self.assertFails(
            """\
            gpumem_copy(src, dst, size) =
                ccall(@sym(:gpumem_copy), gpumem_status_t, (Ptr{Cvoid}, Ptr{Cvoid}, Csize_t), dst, src, size)
            """,
            1,
            "gpumem_copy: the wrapper takes (src, dst, size); write the header's parameters, (dst, src, size)",
        )

    def test_a_ccall_through_sym_is_a_wrapper(self):
        self.assertFails(
            """\
            cuda_result() = 1 + ccall(@sym(:gpumem_last_cuda_result), Int32, ())
            """,
            0,
            "gpumem_last_cuda_result: a ccall through @sym is the whole body of its wrapper, "
            "`gpumem_last_cuda_result() = ccall(...)`",
        )

    CALLBACKS = textwrap.dedent(
        """\
        const gpumem_hook_fn = Ptr{Cvoid}
        const gpumem_block_fn = Ptr{Cvoid}
        gpumem_pool_snapshot(pool, fn, user_data) =
            ccall(@sym(:gpumem_pool_snapshot), gpumem_status_t, (Ptr{gpumem_allocator_t}, gpumem_block_fn, Ptr{Cvoid}),
                  pool, fn, user_data)
        hook(info::Ptr{gpumem_hook_info_t}, data::Ptr{Cvoid}) = nothing
        block(info::Ptr{gpumem_block_info_t}, data::Ptr{Cvoid}) = nothing
        struct gpumem_hook_info_t
            struct_size::Csize_t
        end
        struct gpumem_block_info_t
            struct_size::Csize_t
        end
        const HOOK_FN = Ref{gpumem_hook_fn}(C_NULL)
        const BLOCK_FN = Ref{gpumem_block_fn}(C_NULL)
        const UNSET_FN = Ref{gpumem_block_fn}(C_NULL)
        init() = (HOOK_FN[] = @cfunction(hook, Cvoid, (Ptr{gpumem_hook_info_t}, Ptr{Cvoid})); nothing)
        init2() = (BLOCK_FN[] = @cfunction(block, Cvoid, (Ptr{gpumem_block_info_t}, Ptr{Cvoid})); nothing)
        """
    )

    def test_a_callback_argument_is_one_of_its_type(self):
        status, output, path, first = self.check_snippet(
            "snapshot(p) = gpumem_pool_snapshot(p, BLOCK_FN[], C_NULL)\n", prelude=PRELUDE + self.CALLBACKS
        )
        self.assertNotIn("gpumem_pool_snapshot: argument 2", output)
        self.assertFails(
            """\
            snapshot(p) = gpumem_pool_snapshot(p, HOOK_FN[], C_NULL)
            """,
            0,
            "gpumem_pool_snapshot: argument 2 (fn): HOOK_FN holds a gpumem_hook_fn, but the header's parameter "
            "is a gpumem_block_fn",
            prelude=PRELUDE + self.CALLBACKS,
        )
        self.assertFails(
            """\
            snapshot(p, f) = GPUMem.gpumem_pool_snapshot(p, f, C_NULL)
            """,
            0,
            "gpumem_pool_snapshot: argument 2 (fn): pass a gpumem_block_fn as `X[]`",
            prelude=PRELUDE + self.CALLBACKS,
        )
        self.assertFails(
            """\
            snapshot(p) = gpumem_pool_snapshot(p, UNSET_FN[], C_NULL)
            """,
            0,
            "gpumem_pool_snapshot: argument 2 (fn): no `UNSET_FN[] = @cfunction(...)` sets UNSET_FN",
            prelude=PRELUDE + self.CALLBACKS,
        )

    def test_a_constant_has_the_headers_type(self):
        # C compares UINT64_MAX - 1 equal to -2 once converted: the type tells them apart.
        self.assertFails(
            """\
            const GPUMEM_CUDA_POOL_KEEP_THRESHOLD = -2
            """,
            0,
            "GPUMEM_CUDA_POOL_KEEP_THRESHOLD is `Int64` here (8 bytes, signed), not the size and signedness "
            "of the header's",
        )
        self.assertFails(
            """\
            const GPUMEM_COPY_STAGING_LIMIT = UInt32(33554432)
            """,
            0,
            "GPUMEM_COPY_STAGING_LIMIT is `UInt32` here (4 bytes, unsigned)",
        )
        self.assertFails(
            """\
            const GPUMEM_HOOK_ALL = UInt64(0x3f)
            """,
            0,
            "GPUMEM_HOOK_ALL is `UInt64` here, but an enum value of the headers",
        )
        self.assertPasses(
            """\
            const GPUMEM_HOOK_ALL = UInt32(0x3f)
            const GPUMEM_ERROR_OUT_OF_MEMORY = Int32(-2)
            const GPUMEM_COPY_STAGING_LIMIT = UInt64(33554432)
            """
        )

    def test_function_like_macros_are_not_read_as_constants(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        headers = pathlib.Path(tmp.name, "gpumem")
        headers.mkdir()
        (headers / "gpumem_version.h").write_text("#define GPUMEM_VERSION_MAJOR 0\n")
        (headers / "core.h").write_text("#define GPUMEM_TWICE(x) ((x) * 2)\n#define GPUMEM_ONE 1\n")
        macros = check_ccalls.Headers([tmp.name]).macros
        self.assertEqual(macros.get("GPUMEM_ONE"), "1")
        self.assertFalse([name for name in macros if name.startswith("GPUMEM_TWIC")], macros)

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
