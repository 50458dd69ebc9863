"""What a NULL allocator means (a thread's override, a device's default) and reclaim callbacks."""
import contextlib
import ctypes
import gc
import io
import os
import tempfile
import threading
import unittest

import gpumem

from .support import gpu_count

GPUS = gpu_count()


class ThreadOverrideTest(unittest.TestCase):
    def setUp(self):
        self.host = gpumem.Allocator.host()
        self.pool = gpumem.Pool(self.host)
        self.addCleanup(self.host.close)
        self.addCleanup(self.pool.close)
        self.assertIsNone(gpumem.thread_allocator())

    def test_using_allocator_sets_and_restores_the_override(self):
        with gpumem.using_allocator(self.pool) as override:
            self.assertIs(override, self.pool)
            self.assertIs(gpumem.thread_allocator(), self.pool)
            self.assertIs(gpumem.current_allocator(), self.pool)
            with gpumem.using_allocator(self.host):
                self.assertIs(gpumem.current_allocator(), self.host)
            self.assertIs(gpumem.thread_allocator(), self.pool)
        self.assertIsNone(gpumem.thread_allocator())

    def test_a_null_allocator_means_the_override(self):
        with gpumem.using_allocator(self.pool):
            default = gpumem.Allocator.from_handle(0)
            with default.alloc(100):
                self.assertEqual(self.pool.info().used_bytes, 512)
                self.assertEqual(default.stats(), self.pool.stats())
                self.assertEqual(default.device_id, -1)
            self.assertEqual(self.pool.stats().free_count, 1)

    def test_set_thread_allocator_returns_the_previous_override(self):
        self.assertIsNone(gpumem.set_thread_allocator(self.pool))
        self.assertIs(gpumem.set_thread_allocator(self.host), self.pool)
        self.assertIs(gpumem.set_thread_allocator(None), self.host)
        self.assertIsNone(gpumem.thread_allocator())

    def test_the_override_is_the_calling_threads_only(self):
        seen = []
        with gpumem.using_allocator(self.pool):
            t = threading.Thread(target=lambda: seen.append(gpumem.thread_allocator()))
            t.start()
            t.join()
        self.assertEqual(seen, [None])

    def test_an_override_is_not_closed_under_the_thread(self):
        with gpumem.using_allocator(self.pool):
            with self.assertRaises(gpumem.Busy) as caught:
                self.pool.close()
            self.assertIn("a thread's override", caught.exception.detail)
        self.assertFalse(self.pool.closed)

    def test_python_holds_an_override_it_no_longer_refers_to(self):
        arena = ctypes.create_string_buffer(1 << 16)
        used = []

        def alloc(size, device, stream):
            used.append(size)
            return ctypes.addressof(arena) + 512 * (len(used) - 1)

        gpumem.set_thread_allocator(gpumem.FunctionsAllocator(alloc))
        try:
            gc.collect()
            with gpumem.current_allocator().alloc(64):
                pass
            self.assertEqual(used, [64])
        finally:
            gpumem.set_thread_allocator(None).close()

    def test_traces_of_the_current_allocator(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "override.trace")
            with gpumem.using_allocator(self.pool):
                with gpumem.trace_start(None, path):
                    b = self.pool.alloc(64)
                    b.free()
            header, records = gpumem.read_trace(path)
        self.assertEqual(header.kind, "pool")
        self.assertEqual([r.address for r in records if r.event == gpumem.TraceEvent.ALLOC], [b.ptr])

    def test_a_closed_allocator_is_no_override_nor_default(self):
        closed = gpumem.Allocator.host()
        closed.close()
        held = dict(gpumem.defaults._held)
        with self.assertRaises(ValueError):  # before the library: the handle may be another's now
            gpumem.set_thread_allocator(closed)
        self.assertIsNone(gpumem.thread_allocator())
        with self.assertRaises(ValueError):
            gpumem.set_default_allocator(0, closed)
        self.assertEqual(gpumem.defaults._held, held)


@unittest.skipUnless(GPUS == 0, "a CUDA device is present")
class NoDriverDefaultsTest(unittest.TestCase):
    def test_defaults_need_a_driver(self):
        with gpumem.Allocator.host() as host:
            for call in (
                lambda: gpumem.set_default_allocator(0, host),
                lambda: gpumem.default_allocator(0),
                gpumem.current_allocator,
            ):
                with self.subTest(call=call), self.assertRaises((gpumem.NoDriver, gpumem.NoDevice)) as caught:
                    call()
                self.assertTrue(caught.exception.detail)


@unittest.skipUnless(GPUS > 0, "no CUDA device (gpumem.device_count() failed or is 0)")
class DeviceDefaultTest(unittest.TestCase):
    def test_set_and_restore_a_devices_default(self):
        device_pool = gpumem.device_pool(0)
        self.assertEqual(gpumem.default_allocator(0).handle, device_pool.handle)
        with gpumem.Allocator.device(0) as device, gpumem.Pool(device) as pool:
            gpumem.set_default_allocator(0, pool)
            try:
                self.assertIs(gpumem.default_allocator(0), pool)
                if gpumem.thread_allocator() is None:
                    self.assertIs(gpumem.current_allocator(), pool)
                with self.assertRaises(gpumem.Busy):
                    pool.close()
                with gpumem.using_allocator(device):
                    self.assertIs(gpumem.current_allocator(), device)  # the override comes first
            finally:
                gpumem.set_default_allocator(0, None)
            self.assertEqual(gpumem.default_allocator(0).handle, device_pool.handle)

    def test_a_bad_device_is_refused(self):
        with gpumem.Allocator.host() as host:
            with self.assertRaises(gpumem.InvalidArgument):
                gpumem.set_default_allocator(-1, host)
            with self.assertRaises(gpumem.InvalidDevice):
                gpumem.set_default_allocator(GPUS, host)


class ReclaimTest(unittest.TestCase):
    def setUp(self):
        self.host = gpumem.Allocator.host()
        self.pool = gpumem.Pool(self.host, limit=2048)
        self.addCleanup(self.host.close)
        self.addCleanup(self.pool.close)

    def test_a_callback_that_frees_memory_lets_the_allocation_succeed(self):
        garbage = [self.pool.alloc(1024), self.pool.alloc(1024)]
        calls = []

        def reclaim(device, size):
            calls.append((device, size))
            garbage.pop().free()

        with gpumem.reclaim_add(reclaim) as r:
            self.assertGreater(r.id, 0)
            with self.pool.alloc(1024):
                self.assertEqual(calls, [(-1, 1024)])
                self.assertEqual(len(garbage), 1)
                self.assertGreaterEqual(self.pool.stats().retry_count, 1)
        self.assertIsNone(r.id)
        garbage.append(self.pool.alloc(1024))
        with self.assertRaises(gpumem.OutOfMemory):
            self.pool.alloc(1024)  # removed: nothing frees the garbage now
        self.assertEqual(len(calls), 1)
        for b in garbage:
            b.free()

    def test_an_exception_in_a_callback_does_not_reach_the_allocation(self):
        def reclaim(device, size):
            raise RuntimeError(f"reclaim saw {size}")

        held = [self.pool.alloc(2048)]
        stderr = io.StringIO()
        with gpumem.reclaim_add(reclaim) as r, contextlib.redirect_stderr(stderr):
            with self.assertRaises(gpumem.OutOfMemory):
                self.pool.alloc(512)
        self.assertEqual([str(e) for e in r.errors], ["reclaim saw 512"])
        self.assertIn("Exception ignored in gpumem reclaim callback", stderr.getvalue())
        held.pop().free()

    def test_a_callback_must_be_callable(self):
        for fn in ("x", None):
            with self.subTest(fn=fn), self.assertRaises(TypeError):
                gpumem.reclaim_add(fn)

    def test_removing_twice_does_nothing_and_a_bad_id_is_refused(self):
        r = gpumem.reclaim_add(lambda device, size: None)
        r.remove()
        r.remove()
        with self.assertRaises(gpumem.InvalidHandle) as caught:
            gpumem.library().gpumem_reclaim_remove(2**63)
        self.assertIn("no reclaim callback has id", caught.exception.detail)


if __name__ == "__main__":
    unittest.main()
