"""CUDA-pool and VM allocators' own calls, and peer access: refusals everywhere, numbers on a device."""
import gc
import os
import unittest
import weakref

import gpumem

from .support import gpu_count

GPUS = gpu_count()
KEEP_ALL = 2**64 - 1


def settle():
    """Waits for the work queued on the legacy stream, stream-ordered frees included: a synchronous
    memset does."""
    with gpumem.device_alloc(4) as scratch:
        gpumem.memset(scratch, 0)


class KindRefusalTest(unittest.TestCase):
    def setUp(self):
        self.host = gpumem.Allocator.host()
        self.addCleanup(self.host.close)

    def test_cuda_pool_calls_refuse_other_kinds(self):
        borrowed = gpumem.CudaPoolAllocator.from_handle(self.host.handle)
        for name, call in [
            ("cuda_pool", lambda: borrowed.cuda_pool),
            ("info", borrowed.info),
            ("reset_pool_peaks", borrowed.reset_pool_peaks),
            ("set_release_threshold", lambda: borrowed.set_release_threshold(0)),
            ("trim", borrowed.trim),
        ]:
            with self.subTest(name), self.assertRaises(gpumem.InvalidHandle) as caught:
                call()
            self.assertIn("is a host allocator, not a CUDA pool allocator", caught.exception.detail)

    def test_vm_info_refuses_other_kinds(self):
        with self.assertRaises(gpumem.InvalidHandle) as caught:
            gpumem.VmAllocator.from_handle(self.host.handle).info()
        self.assertIn("is a host allocator, not a VM allocator", caught.exception.detail)

    def test_borrowed_allocators_are_never_closed(self):
        borrowed = gpumem.VmAllocator.from_handle(self.host.handle)
        self.assertFalse(borrowed.owned)
        borrowed.close()
        self.assertEqual(self.host.stats().alloc_count, 0)  # the handle still works
        self.host.alloc(8).free()

    @unittest.skipUnless(GPUS == 0, "a CUDA device is present")
    def test_the_kinds_need_a_driver(self):
        with self.assertRaises((gpumem.NoDriver, gpumem.NoDevice)):
            gpumem.Allocator.cuda_pool(0, source=gpumem.CudaPoolSource.NEW)
        with self.assertRaises((gpumem.NoDriver, gpumem.NoDevice)):
            gpumem.Allocator.vm(0)


@unittest.skipUnless(GPUS > 0, "no CUDA device (gpumem.device_count() failed or is 0)")
class CudaPoolGpuTest(unittest.TestCase):
    def setUp(self):
        try:
            self.allocator = gpumem.Allocator.cuda_pool(0, source=gpumem.CudaPoolSource.NEW)
        except gpumem.NotSupported as e:
            self.skipTest(f"no CUDA memory pools: {e}")
        self.addCleanup(self.allocator.close)

    def test_a_new_pools_numbers(self):
        a = self.allocator
        self.assertIsInstance(a, gpumem.CudaPoolAllocator)
        self.assertNotEqual(a.cuda_pool, 0)
        info = a.info()
        self.assertEqual((info.used, info.release_threshold), (0, KEEP_ALL))  # a new pool keeps everything
        with a.alloc(1 << 20) as b:
            gpumem.copy(b, os.urandom(1 << 20))
            info = a.info()
            self.assertGreaterEqual(info.used, 1 << 20)
            self.assertGreaterEqual(info.reserved, info.used)
            self.assertGreaterEqual(info.used_high, info.used)
        settle()  # the free is ordered on the legacy stream
        info = a.info()
        self.assertEqual(info.used, 0)
        self.assertGreaterEqual(info.used_high, 1 << 20)  # the peak stays until reset
        self.assertGreaterEqual(info.reserved, 1 << 20)  # freed memory stays in the pool
        a.reset_pool_peaks()
        after = a.info()
        self.assertEqual(after.used_high, 0)  # restarted from what is in use now
        self.assertEqual((after.reserved, after.reserved_high), (info.reserved, info.reserved))

    def test_threshold_and_trim(self):
        a = self.allocator
        a.set_release_threshold(0)
        self.assertEqual(a.info().release_threshold, 0)
        a.set_release_threshold(KEEP_ALL)
        self.assertEqual(a.info().release_threshold, KEEP_ALL)
        a.alloc(4 << 20).free()
        settle()
        self.assertGreaterEqual(a.info().reserved, 4 << 20)  # kept at the synchronize: the threshold keeps all
        a.trim(0)
        self.assertEqual(a.info().reserved, 0)

    def test_raw_memory_from_the_pool(self):
        data, back = os.urandom(4096), bytearray(4096)
        for pool in (self.allocator, self.allocator.cuda_pool):
            with gpumem.device_alloc_from_pool(pool, 4096, stream=0) as b:
                self.assertEqual((b.kind, b.device, b.stream), (gpumem.RawKind.DEVICE_ASYNC, 0, 0))
                gpumem.copy(b, data)
                gpumem.copy(back, b)
                self.assertEqual(back, data)
                self.assertGreaterEqual(self.allocator.info().used, 4096)

    def test_allocators_over_its_pool_keep_it_alive(self):
        # The pool is the CudaPoolAllocator's own (NEW), destroyed with it.
        for make in (
            lambda source: gpumem.Allocator.device_async(0, cuda_pool=source),
            lambda source: gpumem.Allocator.cuda_pool(0, source=gpumem.CudaPoolSource.EXTERNAL, pool=source),
        ):
            source = gpumem.Allocator.cuda_pool(0, source=gpumem.CudaPoolSource.NEW)
            alive = weakref.ref(source)
            over = make(source)
            del source
            gc.collect()
            self.assertIsNotNone(alive())
            with over.alloc(1 << 20) as b:
                gpumem.memset(b, 0)  # synchronous: the allocation ordered before it is made
                self.assertGreaterEqual(alive().info().used, 1 << 20)  # from that pool
            settle()
            over.close()
            gc.collect()
            self.assertIsNone(alive())

    def test_a_borrowed_cuda_pool_allocator(self):
        borrowed = gpumem.CudaPoolAllocator.from_handle(self.allocator.handle)
        self.assertEqual(borrowed.cuda_pool, self.allocator.cuda_pool)
        self.assertEqual(borrowed.info().release_threshold, KEEP_ALL)

    def test_the_devices_current_pool(self):
        with gpumem.Allocator.cuda_pool(0) as current:
            self.assertNotEqual(current.cuda_pool, self.allocator.cuda_pool)
            current.info()

    def test_peer_access(self):
        with self.assertRaises(gpumem.InvalidArgument):
            self.allocator.set_peer_access(0)  # its own device
        with self.assertRaises(gpumem.InvalidDevice):
            self.allocator.set_peer_access(GPUS)
        if GPUS < 2:
            return
        try:
            self.allocator.set_peer_access(1)
        except gpumem.NotSupported as e:
            self.skipTest(f"devices 0 and 1 have no peer path: {e}")
        self.allocator.set_peer_access(1, gpumem.PeerAccess.NONE)


@unittest.skipUnless(GPUS > 0, "no CUDA device (gpumem.device_count() failed or is 0)")
class DevicePeerAccessTest(unittest.TestCase):
    def test_a_device_allocators_access_cannot_be_taken_away(self):
        with gpumem.Allocator.device(0) as device:
            with self.assertRaises(gpumem.InvalidArgument):
                device.set_peer_access(0)
            if GPUS < 2:
                return
            with self.assertRaises(gpumem.NotSupported):
                device.set_peer_access(1, gpumem.PeerAccess.NONE)

    def test_raw_stream_ordered_memory(self):
        try:
            b = gpumem.device_alloc_async(4096, 0, stream=gpumem.STREAM_LEGACY)
        except gpumem.NotSupported as e:
            self.skipTest(f"no CUDA memory pools: {e}")
        with b:
            self.assertEqual(b.stream, gpumem.STREAM_LEGACY)
            gpumem.memset(b, 7)
        self.assertTrue(b.freed)
        with self.assertRaises(gpumem.InvalidDevice):
            gpumem.device_alloc_async(4096, GPUS)


@unittest.skipUnless(GPUS > 0, "no CUDA device (gpumem.device_count() failed or is 0)")
class VmGpuTest(unittest.TestCase):
    def setUp(self):
        try:
            self.vm = gpumem.Allocator.vm(0, map_unit=2 << 20, range_size=64 << 20)
        except gpumem.NotSupported as e:
            self.skipTest(f"no virtual memory management: {e}")
        self.addCleanup(self.vm.close)

    def test_info_of_a_pool_over_it(self):
        self.assertIsInstance(self.vm, gpumem.VmAllocator)
        info = self.vm.info()
        self.assertEqual(
            (info.map_unit, info.range_size, info.reserved_bytes, info.mapped_bytes), (2 << 20, 64 << 20, 0, 0)
        )
        with gpumem.Pool(self.vm) as pool:
            with pool.alloc(1 << 20), pool.alloc(2 << 20):
                info = self.vm.info()
                self.assertEqual((info.reserved_bytes, info.mapped_bytes), (64 << 20, 4 << 20))
            pool.release()
            self.assertEqual(self.vm.info().mapped_bytes, 0)

    def test_direct_allocations_are_rounded_to_the_granularity(self):
        with self.vm.alloc(1) as b:
            gpumem.memset(b, 1, 1)
            info = self.vm.info()
            self.assertGreater(info.mapped_bytes, 0)
            self.assertEqual(info.reserved_bytes, info.mapped_bytes)
        self.assertEqual(self.vm.info().mapped_bytes, 0)

    def test_peer_access(self):
        with self.assertRaises(gpumem.InvalidArgument):
            self.vm.set_peer_access(0)
        if GPUS < 2:
            return
        try:
            self.vm.set_peer_access(1)
        except gpumem.NotSupported as e:
            self.skipTest(f"devices 0 and 1 have no peer path: {e}")
        self.vm.set_peer_access(1, gpumem.PeerAccess.NONE)


if __name__ == "__main__":
    unittest.main()
