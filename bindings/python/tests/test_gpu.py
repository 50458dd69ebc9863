"""Device memory, copies and pinning; skipped without a CUDA device."""
import ctypes
import os
import unittest

import gpumem

from .support import gpu_count

GPUS = gpu_count()


@unittest.skipUnless(GPUS > 0, "no CUDA device (gpumem.device_count() failed or is 0)")
class GpuTest(unittest.TestCase):
    def test_devices(self):
        self.assertGreater(gpumem.driver_version(), 0)
        info = gpumem.device_info(0)
        self.assertTrue(info.name)
        self.assertGreater(info.total_memory, 0)
        free, total = gpumem.query_memory(0)
        self.assertEqual(total, info.total_memory)
        self.assertLessEqual(free, total)
        with self.assertRaises(gpumem.InvalidDevice):
            gpumem.device_info(GPUS)

    def test_device_pool_alloc(self):
        pool = gpumem.device_pool(0)
        self.assertFalse(pool.owned)
        self.assertEqual(pool.device_id, 0)
        before = pool.stats().alloc_count
        with pool.alloc(1 << 20) as b:
            info = gpumem.pointer_info(b)
            self.assertEqual(info.memory_type, gpumem.MemoryType.DEVICE)
            self.assertEqual(info.device, 0)
            self.assertLessEqual(info.base, b.ptr)
            self.assertEqual(pool.stats().alloc_count, before + 1)
            self.assertGreaterEqual(pool.info().used_bytes, 1 << 20)
        pool.close()  # borrowed: nothing happens
        self.assertFalse(pool.closed)
        pool.alloc(64).free()

    def test_copy_round_trip(self):
        data = bytearray(os.urandom(3 << 20))  # above 1 MiB: staged through gpumem's own buffers
        back = bytearray(len(data))
        with gpumem.device_pool(0).alloc(len(data)) as device:
            gpumem.copy(device, data)
            gpumem.copy(back, device)
            self.assertEqual(back, data)
            gpumem.memset(device, 0xAB, 1024)
            gpumem.copy(back, device, 1024)
            self.assertEqual(back[:1024], b"\xab" * 1024)
            self.assertEqual(back[1024:], data[1024:])

    def test_copy2d(self):
        rows, width, pitch = 4, 3, 8
        src = bytearray(range(rows * pitch))
        back = bytearray(rows * width)
        with gpumem.device_pool(0).alloc(rows * pitch) as device:
            gpumem.copy2d(dst=device, dst_pitch=pitch, src=src, src_pitch=pitch, width=width, height=rows)
            gpumem.copy2d(dst=back, src=device, src_pitch=pitch, width=width, height=rows)
        self.assertEqual(back, b"".join(src[r * pitch : r * pitch + width] for r in range(rows)))

    def test_pin_and_copy_async(self):
        data = bytearray(os.urandom(1 << 20))
        back = bytearray(len(data))
        with gpumem.device_pool(0).alloc(len(data)) as device:
            with gpumem.pinned(data) as address:
                self.assertEqual(address, _address_of(data))
                self.assertEqual(gpumem.pin_query(data), gpumem.PinState.FULL)
                self.assertTrue(gpumem.pointer_info(address).is_pinned)
                gpumem.copy_async(device, data, stream=0)
                # Synchronous on the legacy stream: after the queued copy, before the unpin.
                gpumem.copy(back, device)
            self.assertEqual(gpumem.pin_query(data), gpumem.PinState.NONE)
        self.assertEqual(back, data)

    def test_pin_counts(self):
        data = bytearray(1 << 16)
        gpumem.pin(data)
        gpumem.pin(data, 4096)
        gpumem.unpin(data)
        self.assertEqual(gpumem.pin_query(data, 4096), gpumem.PinState.FULL)
        self.assertEqual(gpumem.pin_query(data), gpumem.PinState.PARTIAL)
        with self.assertRaises(gpumem.Busy):
            gpumem.pin_forget(data)
        gpumem.unpin(data, 4096)
        with self.assertRaises(gpumem.NotOwned):
            gpumem.unpin(data, 4096)
        gpumem.pin_forget(data)
        self.assertGreaterEqual(gpumem.pin_stats().pins, 2)

    def test_allocator_kinds(self):
        makers = {
            "device": lambda: gpumem.Allocator.device(0),
            "device_async": lambda: gpumem.Allocator.device_async(0),
            "managed": lambda: gpumem.Allocator.managed(0),
            "pinned": lambda: gpumem.Allocator.pinned(),
            "vm": lambda: gpumem.Allocator.vm(0),
            "cuda_pool": lambda: gpumem.Allocator.cuda_pool(0, source=gpumem.CudaPoolSource.NEW),
        }
        for kind, make in makers.items():
            with self.subTest(kind=kind):
                try:
                    allocator = make()
                except gpumem.NotSupported:
                    continue
                data, back = os.urandom(4096), bytearray(4096)
                with allocator, gpumem.Pool(allocator) as pool:
                    for a in (allocator, pool):
                        with a.alloc(len(data)) as b:
                            gpumem.copy(b, data)
                            gpumem.copy(back, b)
                            self.assertEqual(back, data)
                    pool.release()

    def test_vm_pool_address_bytes(self):
        try:
            vm = gpumem.Allocator.vm(0, map_unit=2 << 20, range_size=64 << 20)
        except gpumem.NotSupported:
            self.skipTest("no virtual memory management")
        with vm, gpumem.Pool(vm) as pool:
            with pool.alloc(1 << 20):
                info = pool.info()
                self.assertEqual(info.total_bytes, 2 << 20)
                self.assertEqual(info.address_bytes, 64 << 20)


def _address_of(buffer):
    return ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer))


if __name__ == "__main__":
    unittest.main()
