"""Tenants over a pool of host memory, which needs no GPU: budgets, figures, frees through the wrong
allocator; the budgets' text; and what the drop-ins answer without their libraries."""
import gc
import os
import sys
import unittest
import weakref
from unittest import mock

import gpumem
import gpumem.cupy
import gpumem.numba
import gpumem.torch
from gpumem.tenant import budget_from_environment, parse_size

KiB, MiB = 1 << 10, 1 << 20


class TenantTest(unittest.TestCase):
    def setUp(self):
        self.host = gpumem.Allocator.host()
        self.pool = gpumem.Pool(self.host)
        self.addCleanup(self.host.close)
        self.addCleanup(self.pool.close)

    def tenant(self, name, limit=0, soft_limit=0):
        t = gpumem.Tenant(self.pool, limit=limit, soft_limit=soft_limit, name=name)
        self.addCleanup(lambda: t.closed or t.close())
        return t

    def test_memory_one_frees_serves_another(self):
        a, b = self.tenant("torch"), self.tenant("cupy")
        first = a.alloc(MiB)
        ptr = first.ptr
        reserved = self.pool.stats().bytes_reserved
        first.free()
        with b.alloc(MiB) as second:
            self.assertEqual(second.ptr, ptr)
            self.assertEqual(self.pool.stats().bytes_reserved, reserved)
            self.assertEqual(a.stats().bytes_in_use, 0)
            self.assertEqual(b.stats().bytes_in_use, MiB)
            self.assertEqual(b.info().bytes_in_use, MiB)
            self.assertEqual(self.pool.stats().bytes_in_use, MiB)

    def test_info_and_repr(self):
        t = self.tenant("numba", limit="2MiB", soft_limit=MiB)
        self.assertEqual(
            t.info(),
            gpumem.TenantInfo(
                name="numba",
                limit=2 * MiB,
                soft_limit=MiB,
                bytes_in_use=0,
                peak_bytes_in_use=0,
                refused=0,
                soft_crossings=0,
            ),
        )
        self.assertEqual((t.name, t.limit, t.soft_limit), ("numba", 2 * MiB, MiB))
        self.assertIs(t.upstream, self.pool)
        self.assertEqual(t.device_id, -1)
        self.assertIn("'numba'", repr(t))
        long_name = gpumem.Tenant(self.pool, name="x" * 100)
        self.assertEqual(long_name.name, "x" * 31)
        long_name.close()
        self.assertEqual(gpumem.Tenant(self.pool, name=None).name, "tenant")

    def test_hard_budget_refuses_with_a_detail_naming_the_tenant(self):
        t = self.tenant("torch", limit=MiB)
        held = t.alloc(512 * KiB)
        before = self.pool.stats().bytes_in_use
        with self.assertRaises(gpumem.OutOfMemory) as caught:
            t.alloc(600 * KiB)
        self.assertIn("tenant 'torch'", caught.exception.detail)
        self.assertIn("past its budget of 1,048,576 bytes", caught.exception.detail)
        self.assertIsInstance(caught.exception, MemoryError)
        self.assertEqual(self.pool.stats().bytes_in_use, before)
        info = t.info()
        self.assertEqual((info.refused, info.bytes_in_use), (1, 512 * KiB))
        self.assertEqual(t.stats().oom_count, 1)
        exact = t.alloc(512 * KiB)  # exactly the budget
        held.free()
        t.set_limits(256 * KiB)  # below what it holds: nothing is taken away
        self.assertEqual(t.info().bytes_in_use, 512 * KiB)
        with self.assertRaises(gpumem.OutOfMemory):
            t.alloc(512)
        exact.free()
        t.alloc(256 * KiB).free()
        self.assertEqual(t.info().peak_bytes_in_use, MiB)
        t.set_limits(0)
        t.alloc(4 * MiB).free()  # no budget

    def test_soft_budget_gives_back_the_cache(self):
        t = self.tenant("cupy", soft_limit=MiB)
        self.pool.alloc(256 * KiB).free()  # cached, and too small for the tenant's requests
        self.assertEqual(self.pool.info().free_bytes, 256 * KiB)
        small = t.alloc(512 * KiB)
        self.assertEqual(t.info().soft_crossings, 0)
        big = t.alloc(2 * MiB)  # crosses the soft budget: never refused
        info = t.info()
        self.assertEqual((info.soft_crossings, info.refused), (1, 0))
        self.assertEqual(self.pool.info().free_bytes, 0)
        small.free()
        big.free()

    def test_budgets_the_wrong_way_round_are_refused(self):
        with self.assertRaises(gpumem.InvalidArgument) as caught:
            gpumem.Tenant(self.pool, limit=KiB, soft_limit=MiB)
        self.assertIn("soft_limit", caught.exception.detail)
        t = self.tenant("a")
        with self.assertRaises(gpumem.InvalidArgument):
            t.set_limits(KiB, MiB)
        with self.assertRaises(gpumem.InvalidHandle):  # a pool is not a tenant
            gpumem.library().gpumem_tenant_set_limits(self.pool.handle, 0, 0)
        with self.assertRaises(TypeError):
            gpumem.Tenant(self.pool.handle)
        with self.assertRaises(ValueError):
            gpumem.Tenant(self.pool, limit=-1)

    def test_frees_go_through_the_tenant_that_allocated(self):
        a, b = self.tenant("numba"), self.tenant("other")
        buffer = a.alloc(4096)
        with self.assertRaises(gpumem.NotOwned) as caught:
            self.pool.free(buffer.ptr)
        self.assertIn("allocated through the tenant 'numba'", caught.exception.detail)
        with self.assertRaises(gpumem.NotOwned) as caught:
            b.free(buffer.ptr)
        self.assertIn("not allocated by this tenant ('other')", caught.exception.detail)
        with self.assertRaises(ValueError):
            b.free(buffer)  # a Buffer of another allocator
        self.assertEqual(a.stats().bytes_in_use, 4096)
        with self.assertRaises(gpumem.Busy):
            a.close()
        buffer.free()
        a.close()
        self.assertTrue(a.closed)

    def test_stats_count_the_tenants_own_allocations(self):
        t = self.tenant("t")
        mine = [t.alloc(1000) for _ in range(3)]
        theirs = self.pool.alloc(1000)
        stats = t.stats()
        self.assertEqual((stats.alloc_count, stats.bytes_in_use, stats.bytes_requested), (3, 3 * 1024, 3000))
        self.assertEqual(self.pool.stats().bytes_in_use, 4 * 1024)
        for b in mine:
            b.free()
        theirs.free()
        self.assertEqual(t.stats().free_count, 3)
        t.reset_peaks()
        self.assertEqual(t.stats().peak_bytes_in_use, 0)

    def test_the_tenant_keeps_its_upstream_alive(self):
        host = gpumem.Allocator.host()
        pool = gpumem.Pool(host)
        alive = weakref.ref(pool)
        t = gpumem.Tenant(pool, name="kept")
        del pool, host
        gc.collect()
        self.assertIsNotNone(alive())
        with t.alloc(100):
            pass
        t.close()
        del t
        gc.collect()
        self.assertIsNone(alive())

    def test_a_collected_tenant_is_destroyed(self):
        t = gpumem.Tenant(self.pool)
        finalizer = t._finalizer
        del t
        gc.collect()
        self.assertFalse(finalizer.alive)

    def test_borrowed_tenant_release_and_record_stream(self):
        t = self.tenant("borrowed")
        other = gpumem.Tenant.from_handle(t.handle)
        self.assertFalse(other.owned)
        self.assertEqual(other.name, "borrowed")
        self.assertIsNone(other.upstream)
        with t.alloc(100) as b:
            t.record_stream(b, 0x1234)  # host memory: only the pointer is checked
            with self.assertRaises(gpumem.NotOwned):
                t.record_stream(b.ptr + 512, 0x1234)
        self.assertGreater(self.pool.info().free_bytes, 0)
        t.release()
        self.assertEqual(self.pool.info().free_bytes, 0)
        other.release()  # an unknown upstream: nothing to do

    def test_hooks_see_the_tenants_calls(self):
        t = self.tenant("hooked")
        seen = []
        with t.add_hook(gpumem.HookEvent.MALLOC_POST, lambda info: seen.append(info)):
            t.alloc(64).free()
        self.assertEqual(len(seen), 1)
        self.assertEqual(seen[0].allocator, t.handle)


class SizeTextTest(unittest.TestCase):
    def test_sizes(self):
        for text, want in [
            (0, 0),
            (123, 123),
            ("0", 0),
            ("1073741824", 1 << 30),
            ("8GiB", 8 << 30),
            ("8gib", 8 << 30),
            ("512MB", 512 * 10**6),
            (" 64 MiB ", 64 * MiB),
            ("1.5KiB", 1536),
            ("2e3", 2000),
            ("7B", 7),
            ("1TB", 10**12),
            ("123456789012345678901234567890", 123456789012345678901234567890),
        ]:
            with self.subTest(text=text):
                self.assertEqual(parse_size(text), want)

    def test_unreadable_sizes(self):
        for text in ["", "abc", "-1", "5XB", "1.2.3", "GiB", "8 GiB extra"]:
            with self.subTest(text=text), self.assertRaises(ValueError) as caught:
                parse_size(text, "GPUMEM_TORCH_LIMIT")
            self.assertIn("GPUMEM_TORCH_LIMIT", str(caught.exception))
        with self.assertRaises(ValueError):
            parse_size(-5)
        for value in [1.5, True, None, b"8GiB"]:
            with self.subTest(value=value), self.assertRaises(TypeError):
                parse_size(value)

    def test_percentages_need_a_device(self):
        with self.assertRaises(ValueError) as caught:
            parse_size("50%", "limit")
        self.assertIn("needs a device", str(caught.exception))
        with self.assertRaises(ValueError):
            parse_size("50%", "limit", device=-1)  # host memory
        with mock.patch("gpumem.tenant.device_info") as info:
            info.return_value.total_memory = 80 << 30
            self.assertEqual(parse_size("50%", "limit", device=0), 40 << 30)
            self.assertEqual(parse_size("100 %", "limit", device=0), 80 << 30)
            for text in ["0%", "101%"]:
                with self.subTest(text=text), self.assertRaises(ValueError):
                    parse_size(text, "limit", device=0)

    def test_budgets_from_the_environment(self):
        with mock.patch.dict(os.environ, {"GPUMEM_TORCH_LIMIT": "64MB", "GPUMEM_CUPY_LIMIT": "  "}):
            self.assertEqual(budget_from_environment("GPUMEM_TORCH_LIMIT"), 64 * 10**6)
            self.assertEqual(budget_from_environment("GPUMEM_CUPY_LIMIT"), 0)  # empty: unset
            self.assertEqual(budget_from_environment("GPUMEM_NUMBA_LIMIT", default=5), 5)
        with mock.patch.dict(os.environ, {"GPUMEM_NUMBA_LIMIT": "lots"}):
            with self.assertRaises(ValueError) as caught:
                budget_from_environment("GPUMEM_NUMBA_LIMIT")
            self.assertIn("GPUMEM_NUMBA_LIMIT='lots'", str(caught.exception))


class DropInsWithoutTheirLibrariesTest(unittest.TestCase):
    """What the drop-ins answer in a process that has not installed them, with or without the
    libraries themselves."""

    def test_torch(self):
        self.assertIsNone(gpumem.torch.tenant(0))
        self.assertFalse(gpumem.torch.record_stream_supported())
        lib = gpumem.library()
        self.assertIsNone(lib.gpumem_torch_alloc(-1, 0, None))
        self.assertIn("size is -1", gpumem.torch.last_out_of_memory_detail())
        with self.assertRaises(gpumem.InvalidArgument):
            lib.gpumem_torch_set_allocator(-1, None)
        with self.assertRaises(gpumem.InvalidArgument):
            lib.gpumem_torch_set_allocator(64, None)
        lib.gpumem_torch_record_stream(None, None)  # refused, and reported only in the detail
        self.assertIn("NULL", gpumem.torch.last_out_of_memory_detail())

    def test_cupy_memory_pool_over_a_tenant(self):
        with gpumem.Allocator.host() as host, gpumem.Pool(host) as pool, gpumem.Tenant(pool, name="cupy") as t:
            # A CupyAllocator serving "device" -1 (host memory): no CuPy needed for its MemoryPool.
            served = gpumem.cupy.CupyAllocator(pools=t, pinned=False)
            memory = gpumem.cupy.MemoryPool(served, device=-1)
            self.assertEqual((memory.used_bytes(), memory.total_bytes(), memory.get_limit()), (0, 0, 0))
            b = t.alloc(1000)
            pool.alloc(100).free()
            self.assertEqual(memory.used_bytes(), 1024)
            self.assertEqual(memory.total_bytes(), 1024 + 512)
            self.assertEqual((memory.free_bytes(), memory.n_free_blocks()), (512, 1))
            memory.free_all_blocks()
            self.assertEqual(memory.total_bytes(), 1024)
            t.set_limits(0, 4096)
            memory.set_limit("2KiB")  # the soft budget above it comes down to it
            self.assertEqual((memory.get_limit(), t.soft_limit), (2048, 2048))
            with self.assertRaises(gpumem.OutOfMemory):
                t.alloc(2000)
            memory.set_limit()
            self.assertEqual(memory.get_limit(), 0)
            b.free()
        with self.assertRaises(RuntimeError):
            gpumem.cupy.memory_pool()  # not installed
        for arguments in [{"limit": 1}, {"shared": True}]:
            with self.subTest(**arguments), self.assertRaises(TypeError):
                gpumem.cupy.install(pools=object(), **arguments)  # refused before CuPy is needed

    def test_numba_imports_lazily(self):
        self.assertNotIn("numba", vars(gpumem.numba))
        if "numba" not in sys.modules:
            try:
                import numba.cuda  # noqa: F401
            except ImportError:
                with self.assertRaises(AttributeError) as caught:
                    gpumem.numba.GpumemMemoryManager
                self.assertIn("Numba", str(caught.exception))
                self.assertFalse(hasattr(gpumem.numba, "_numba_memory_manager"))
                return
        manager = gpumem.numba._numba_memory_manager
        self.assertIs(manager, gpumem.numba.GpumemMemoryManager)
        self.assertEqual(manager(context=None).interface_version, 1)


if __name__ == "__main__":
    unittest.main()
