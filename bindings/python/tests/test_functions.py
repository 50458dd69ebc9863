"""Allocators over Python functions, which need no GPU: memory, errors, pools, ranges, lifetimes."""
import contextlib
import ctypes
import gc
import io
import tempfile
import textwrap
import threading
import unittest
import weakref

import gpumem

from .support import run_python


class Block(bytearray):
    """A bytearray that can be watched with weakref."""


class Arena:
    """A first-fit allocator of 512-byte units over one bytearray; raises MemoryError when full."""

    UNIT = 512

    def __init__(self, size):
        self.memory = bytearray(size)
        self._window = (ctypes.c_char * size).from_buffer(self.memory)
        self.base = ctypes.addressof(self._window)
        self.used = [False] * (size // self.UNIT)
        self.units = {}
        self.lock = threading.Lock()
        self.calls = []

    def alloc(self, size, device, stream):
        n = -(-size // self.UNIT)
        with self.lock:
            self.calls.append(("alloc", size, device, stream))
            for i in range(len(self.used) - n + 1):
                if not any(self.used[i : i + n]):
                    self.used[i : i + n] = [True] * n
                    address = self.base + i * self.UNIT
                    self.units[address] = n
                    return address
        raise MemoryError(f"the arena has no {size} bytes free")

    def free(self, ptr, size, device, stream):
        with self.lock:
            self.calls.append(("free", ptr - self.base, size, device, stream))
            n = self.units.pop(ptr)
            i = (ptr - self.base) // self.UNIT
            self.used[i : i + n] = [False] * n

    @property
    def in_use(self):
        return sum(self.used) * self.UNIT


class FunctionsAllocatorTest(unittest.TestCase):
    def test_memory_from_a_bytearray_arena(self):
        arena = Arena(8192)
        with gpumem.FunctionsAllocator(arena.alloc, arena.free) as fa:
            self.assertEqual(fa.device_id, -1)
            with fa.alloc(1000, stream=0x1234) as b:
                self.assertEqual(b.ptr, arena.base)
                ctypes.memmove(b.ptr, b"gpumem", 6)
                self.assertEqual(bytes(arena.memory[:6]), b"gpumem")
                stats = fa.stats()
                self.assertEqual((stats.bytes_in_use, stats.alloc_count, stats.upstream_alloc_count), (1000, 1, 1))
            self.assertEqual(arena.calls, [("alloc", 1000, -1, 0x1234), ("free", 0, 1000, -1, 0x1234)])
            b = fa.alloc(64)
            fa.free(b, stream=7)
            self.assertEqual(arena.calls[-1], ("free", 0, 64, -1, 7))
            self.assertEqual(fa.stats().free_count, 2)
        self.assertEqual(arena.in_use, 0)

    def test_python_objects_are_kept_until_freed(self):
        blocks = []

        def alloc(size, device, stream):
            block = Block(size)
            blocks.append(weakref.ref(block))
            return block

        with gpumem.FunctionsAllocator(alloc) as fa:
            b = fa.alloc(300)
            gc.collect()
            self.assertIsNotNone(blocks[0]())  # only the allocator refers to it
            ctypes.memmove(b.ptr, b"abc", 3)
            self.assertEqual(bytes(blocks[0]()[:3]), b"abc")
            b.free()
            gc.collect()
            self.assertIsNone(blocks[0]())

    def test_ctypes_buffers_and_a_device_number(self):
        seen = []

        def alloc(size, device, stream):
            seen.append(device)
            return ctypes.create_string_buffer(size)

        with gpumem.FunctionsAllocator(alloc, device=3) as fa:
            self.assertEqual(fa.device_id, 3)
            fa.alloc(10).free()
        self.assertEqual(seen, [3])

    def test_a_pool_over_the_arena_retries_after_a_memory_error(self):
        arena = Arena(4096)
        with gpumem.FunctionsAllocator(arena.alloc, arena.free) as fa, gpumem.Pool(fa) as pool:
            pool.alloc(2048).free()  # cached by the pool: the arena has 2048 bytes left
            with pool.alloc(3072) as b:  # the arena refuses; the pool gives its cache back, then succeeds
                self.assertEqual(b.ptr, arena.base)
                stats = pool.stats()
                self.assertEqual((stats.retry_count, stats.upstream_free_count, stats.oom_count), (1, 1, 0))
            with self.assertRaises(gpumem.OutOfMemory) as caught:
                pool.alloc(8192)
            self.assertIn("returned GPUMEM_ERROR_OUT_OF_MEMORY", caught.exception.detail)
            self.assertEqual(fa.errors, [])  # a MemoryError is an answer, not a failure
            pool.release()
        self.assertEqual(arena.in_use, 0)

    def test_a_memory_error_is_out_of_memory_quietly(self):
        def alloc(size, device, stream):
            raise MemoryError

        stderr = io.StringIO()
        with gpumem.FunctionsAllocator(alloc) as fa, contextlib.redirect_stderr(stderr):
            with self.assertRaises(gpumem.OutOfMemory) as caught:
                fa.alloc(100)
            self.assertEqual(
                caught.exception.detail,
                "the caller's alloc function returned GPUMEM_ERROR_OUT_OF_MEMORY (-2) for 100 bytes",
            )
            self.assertEqual(fa.stats().oom_count, 1)
        self.assertEqual(stderr.getvalue(), "")

    def test_another_exception_is_an_internal_error_reported_and_kept(self):
        def alloc(size, device, stream):
            raise RuntimeError(f"no {size} for you")

        stderr = io.StringIO()
        with gpumem.FunctionsAllocator(alloc) as fa:
            with contextlib.redirect_stderr(stderr), self.assertRaises(gpumem.InternalError) as caught:
                fa.alloc(64)
            self.assertIn("the caller's alloc function returned GPUMEM_ERROR_INTERNAL (-12)", caught.exception.detail)
            self.assertEqual([str(e) for e in fa.errors], ["no 64 for you"])
        self.assertIn("Exception ignored in gpumem alloc function", stderr.getvalue())
        self.assertIn("RuntimeError: no 64 for you", stderr.getvalue())

    def test_a_gpumem_error_keeps_its_status(self):
        def alloc(size, device, stream):
            raise gpumem.InvalidArgument(-1, "sizes above 100 are refused here")

        with gpumem.FunctionsAllocator(alloc) as fa, contextlib.redirect_stderr(io.StringIO()):
            with self.assertRaises(gpumem.InvalidArgument):
                fa.alloc(1000)
            self.assertEqual(len(fa.errors), 1)

    def test_an_alloc_returning_too_little_memory_is_refused(self):
        with gpumem.FunctionsAllocator(lambda size, device, stream: bytearray(size // 2)) as fa:
            with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(gpumem.InternalError):
                fa.alloc(64)
            self.assertIn("returned 32 bytes for a request of 64", str(fa.errors[0]))
            self.assertEqual(fa.stats().bytes_in_use, 0)

    def test_a_failed_free_leaves_the_memory_live(self):
        arena = Arena(4096)
        refuse = [True]

        def free(ptr, size, device, stream):
            if refuse[0]:
                raise OSError("not now")
            arena.free(ptr, size, device, stream)

        with gpumem.FunctionsAllocator(arena.alloc, free) as fa:
            b = fa.alloc(512)
            with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(gpumem.InternalError) as caught:
                b.free()
            self.assertIn("the caller's free function returned GPUMEM_ERROR_INTERNAL", caught.exception.detail)
            self.assertFalse(b.freed)
            self.assertEqual(fa.stats().bytes_in_use, 512)
            refuse[0] = False
            b.free()
            self.assertTrue(b.freed)
        self.assertEqual(arena.in_use, 0)

    def test_close_by_force_frees_through_the_functions(self):
        arena = Arena(4096)
        fa = gpumem.FunctionsAllocator(arena.alloc, arena.free)
        buffers = [fa.alloc(n) for n in (100, 600, 1500)]
        with self.assertRaises(gpumem.Busy):
            fa.close()
        fa.close(force=True)
        self.assertTrue(fa.closed)
        self.assertEqual(arena.in_use, 0)
        self.assertEqual(sorted(c[2] for c in arena.calls if c[0] == "free"), [100, 600, 1500])
        self.assertTrue(all(b.freed for b in buffers))
        for b in buffers:
            b.free()  # nothing: the memory went with the allocator
        del buffers
        gc.collect()
        self.assertEqual(len([c for c in arena.calls if c[0] == "free"]), 3)

    def test_a_pool_keeps_its_functions_upstream(self):
        arena = Arena(8192)

        def make_pool():
            return gpumem.Pool(gpumem.FunctionsAllocator(arena.alloc, arena.free))

        pool = make_pool()
        gc.collect()  # the FunctionsAllocator object is referred to by the pool only
        with pool.alloc(1000) as b:
            ctypes.memmove(b.ptr, b"x" * 1000, 1000)
        pool.release()
        self.assertEqual(arena.in_use, 0)
        upstream = pool.upstream
        pool.close()
        upstream.close()

    def test_callbacks_outlive_an_allocator_whose_destruction_is_refused(self):
        # The allocator's object is collected while memory from it lives on: the library refuses
        # to destroy it, and the memory's free still calls the functions.
        done = run_python(
            textwrap.dedent(
                """
                import ctypes, gc
                import gpumem
                freed = []
                fa = gpumem.FunctionsAllocator(
                    lambda size, device, stream: ctypes.create_string_buffer(size),
                    lambda ptr, size, device, stream: freed.append(size),
                )
                buffers = [gpumem.Allocator.from_handle(fa.handle).alloc(64 + n) for n in range(100)]
                del fa
                gc.collect()
                garbage = [bytearray(100) for _ in range(10000)]  # over what was freed
                for b in buffers:
                    ctypes.memset(b.ptr, 7, b.size)  # the memory alloc returned is still kept
                    b.free()
                print(sum(freed))
                """
            )
        )
        self.assertEqual((done.returncode, done.stdout, done.stderr), (0, f"{sum(range(64, 164))}\n", ""))

    def test_threads_allocate_concurrently(self):
        arena = Arena(1 << 20)
        errors = []
        with gpumem.FunctionsAllocator(arena.alloc, arena.free) as fa, gpumem.Pool(fa) as pool:

            def work(seed):
                try:
                    for i in range(200):
                        b = pool.alloc(512 * (1 + (seed + i) % 7))
                        ctypes.memset(b.ptr, seed, b.size)
                        self.assertEqual(ctypes.string_at(b.ptr, 1), bytes([seed]))
                        b.free()
                except BaseException as error:
                    errors.append(error)

            threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(errors, [])
            pool.release()
            self.assertEqual(fa.errors, [])
        self.assertEqual(arena.in_use, 0)

    def test_bad_arguments(self):
        alloc = Arena(4096).alloc
        with self.assertRaises(gpumem.InvalidArgument) as caught:
            gpumem.FunctionsAllocator(alloc, device=-2)
        self.assertEqual(caught.exception.detail, "functions->device -2 is neither a device nor -1")
        with self.assertRaises(TypeError):
            gpumem.FunctionsAllocator(alloc, map=lambda p, s, d: None)
        with self.assertRaises(TypeError):
            gpumem.FunctionsAllocator.from_handle(1234)

    def test_functions_must_be_callable(self):
        alloc = Arena(4096).alloc
        for name, call in [
            ("alloc", lambda: gpumem.FunctionsAllocator(42)),
            ("alloc", lambda: gpumem.FunctionsAllocator(None)),
            ("free", lambda: gpumem.FunctionsAllocator(alloc, free="nope")),
            ("reserve", lambda: gpumem.FunctionsAllocator(alloc, reserve=4096)),
            ("map", lambda: gpumem.FunctionsAllocator(alloc, reserve=alloc, map="map")),
        ]:
            with self.subTest(name), self.assertRaises(TypeError) as caught:
                call()
            self.assertIn(f"{name} must be callable", str(caught.exception))

    def test_negative_map_units_are_refused_before_the_library(self):
        with self.assertRaises(ValueError) as caught:
            gpumem.FunctionsAllocator(lambda size, device, stream: 0, reserve=lambda size, device: 0, map_unit=-4096)
        self.assertEqual(str(caught.exception), "map_unit is -4096; it cannot be negative")


class RangesTest(unittest.TestCase):
    """A pool over functions with address ranges grows its segments in place."""

    UNIT = 4096

    def setUp(self):
        self.ranges, self.maps = {}, []

    def reserve(self, size, device):
        raw = ctypes.create_string_buffer(size + self.UNIT)
        start = -(-ctypes.addressof(raw) // self.UNIT) * self.UNIT
        self.ranges[start] = raw
        return start

    def unreserve(self, ptr, size, device):
        del self.ranges[ptr]

    def make(self, **options):
        return gpumem.FunctionsAllocator(
            lambda size, device, stream: ctypes.create_string_buffer(size),
            reserve=self.reserve,
            unreserve=self.unreserve,
            map=lambda ptr, size, device: self.maps.append(("map", size)),
            unmap=lambda ptr, size, device: self.maps.append(("unmap", size)),
            **options,
        )

    def test_a_pool_maps_units_into_a_reserved_range(self):
        with self.make(map_unit=self.UNIT, range_size=16 * self.UNIT) as fa, gpumem.Pool(fa) as pool:
            a, b = pool.alloc(1000), pool.alloc(5000)
            self.assertEqual(b.ptr, a.ptr + 1024)  # the segment grew in place
            info = pool.info()
            self.assertEqual((info.total_bytes, info.address_bytes), (2 * self.UNIT, 16 * self.UNIT))
            self.assertEqual(self.maps, [("map", self.UNIT), ("map", self.UNIT)])
            self.assertEqual(len(self.ranges), 1)
            ctypes.memmove(b.ptr, b"y" * 5000, 5000)
            a.free()
            b.free()
            pool.release()
            self.assertEqual(self.maps[2:], [("unmap", 2 * self.UNIT)])
            self.assertEqual(pool.info().address_bytes, 0)
        self.assertEqual(self.ranges, {})

    def test_a_bad_map_unit_is_refused_by_the_library(self):
        with self.assertRaises(gpumem.InvalidArgument) as caught:
            self.make(map_unit=100, range_size=1000)
        self.assertIn("map_unit 100 is not a power of two", caught.exception.detail)


class InterpreterExitTest(unittest.TestCase):
    def test_exit_with_live_functions_overrides_traces_and_readers_is_quiet(self):
        script = textwrap.dedent(
            """
            import ctypes, os, sys
            import gpumem
            fa = gpumem.FunctionsAllocator(lambda size, device, stream: ctypes.create_string_buffer(size))
            pool = gpumem.Pool(fa)
            buffers = [pool.alloc(n) for n in (100, 5000)]
            raw = fa.alloc(10)
            gpumem.set_thread_allocator(pool)
            reclaim = gpumem.reclaim_add(lambda device, size: None)
            folder = sys.argv[1]
            with gpumem.Allocator.host() as host, gpumem.trace_start(host, os.path.join(folder, "done.trace")):
                host.alloc(64).free()
            reader = gpumem.TraceReader(os.path.join(folder, "done.trace"))
            trace = gpumem.trace_start(pool, os.path.join(folder, "running.trace"))
            pool.alloc(64)
            del fa, pool
            print("ok")
            """
        )
        with tempfile.TemporaryDirectory() as folder:
            done = run_python(script, folder)
        self.assertEqual((done.returncode, done.stdout, done.stderr), (0, "ok\n", ""))


if __name__ == "__main__":
    unittest.main()
